"""`shoal groups` (kafka-consumer-groups.sh's subset) against a real broker and a real consumer group.

A confluent-kafka consumer joins a group, consumes what was produced and commits; more records
are produced after that, so the lag per partition is known exactly. The CLI runs as a separate
process (`python -m shoal groups ...`), as an operator would run it, and its output is parsed
the way scripts parse Kafka's tool.
"""

from __future__ import annotations

import datetime
import os
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from shoal.cli.group_describe import parse_states
from shoal.cli.group_reset import parse_datetime_ms, parse_duration_ms, parse_topic_specs
from tests.support.broker import SRC_DIR, BrokerProcess
from tests.support.kafka_clients import confluent_produce, create_diskless_topic
from tests.support.workload import Sent

# The broker's default initial rebalance delay (3 s) only slows the first join down.
GROUP_OVERRIDES = {"group.initial.rebalance.delay.ms": 0}
CLIENT_ID = "groups-cli-it"
BASE_TS = 1_700_000_000_000  # record timestamps: BASE_TS + offset * 1000 in every partition
CLI_TIMEOUT = 120.0

BrokerFactory = Callable[..., BrokerProcess]


# --------------------------------------------------------------------------------------- helpers


@dataclass
class Run:
    rc: int
    out: str
    err: str

    def __str__(self) -> str:
        return f"rc={self.rc}\n--- stdout\n{self.out}\n--- stderr\n{self.err}"


def shoal_groups(broker: BrokerProcess, *args: str) -> Run:
    """Run `python -m shoal groups ARGS --bootstrap-server B` as a separate process."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(SRC_DIR), env.get("PYTHONPATH", "")) if p)
    cmd = [
        sys.executable,
        "-m",
        "shoal",
        "groups",
        *args,
        "--bootstrap-server",
        broker.bootstrap,
        "--timeout",
        "30000",
    ]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=CLI_TIMEOUT, check=False)
    return Run(proc.returncode, proc.stdout, proc.stderr)


def table(out: str, first_header: str) -> list[dict[str, str]]:
    """Rows of the table whose header starts with `first_header`, cut at the header's column starts
    (fixed-width columns, as scripts read Kafka's tool: a cell may be empty, a header may hold a blank)."""
    rows: list[dict[str, str]] = []
    columns: list[tuple[str, int]] | None = None
    for line in out.splitlines():
        if not line.strip():
            continue
        if line.split()[0] == first_header:
            columns = [(m.group(), m.start()) for m in re.finditer(r"\S+(?: \S+)*", line)]
            continue
        if columns is not None:
            ends = [start for _, start in columns[1:]] + [len(line)]
            rows.append(
                {name: line[start:end].strip() for (name, start), end in zip(columns, ends, strict=True)}
            )
    return rows


def offsets_by_partition(run: Run) -> dict[int, dict[str, str]]:
    return {int(r["PARTITION"]): r for r in table(run.out, "GROUP")}


def wait_for(what: str, check: Callable[[], Any], timeout: float = 60.0, interval: float = 0.5) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out waiting for {what}; last: {last}")


def group_consumer(bootstrap: str, group: str) -> Any:
    from confluent_kafka import Consumer

    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "client.id": CLIENT_ID,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "enable.partition.eof": False,
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 1000,
        }
    )


def consume(consumer: Any, count: int, timeout: float = 90.0) -> list[tuple[int, int]]:
    """(partition, offset) of the next `count` records; fails on consumer errors or a timeout."""
    got: list[tuple[int, int]] = []
    deadline = time.monotonic() + timeout
    while len(got) < count and time.monotonic() < deadline:
        for msg in consumer.consume(num_messages=count - len(got), timeout=0.5):
            assert msg.error() is None, f"consumer error: {msg.error()}"
            got.append((msg.partition(), msg.offset()))
    assert len(got) == count, f"consumed {len(got)} of {count} records in {timeout}s: {got}"
    return got


def produce(bootstrap: str, topic: str, counts: dict[int, int], start: dict[int, int]) -> None:
    """`counts[p]` records into partition p, timestamped by the offset they will get."""
    sent = []
    for partition, n in counts.items():
        for i in range(n):
            offset = start.get(partition, 0) + i
            sent.append(
                Sent(
                    len(sent),
                    partition,
                    b"k",
                    f"p{partition}-o{offset}".encode(),
                    (),
                    BASE_TS + offset * 1000,
                )
            )
    confluent_produce(bootstrap, topic, sent)


def iso(ms: int, tz: datetime.timezone = datetime.UTC) -> str:
    moment = datetime.datetime.fromtimestamp(ms / 1000, tz)
    text = moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}"
    offset = moment.utcoffset() or datetime.timedelta(0)
    if offset == datetime.timedelta(0):
        return text + "Z"
    minutes = int(offset.total_seconds()) // 60
    sign = "+" if minutes >= 0 else "-"
    return f"{text}{sign}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}"


# ----------------------------------------------------------------------------------------- tests


def test_describe_lag_reset_offsets_and_delete_with_a_live_consumer_group(
    broker_factory: BrokerFactory, topic_name: str
) -> None:
    broker = broker_factory(overrides=GROUP_OVERRIDES)
    topic, group = topic_name, f"cli-{uuid.uuid4().hex[:8]}"
    create_diskless_topic(broker.bootstrap, topic, partitions=3)
    produce(broker.bootstrap, topic, {0: 4, 1: 7, 2: 10}, {})

    # A member consumes everything there is and commits: committed 4, 7, 10.
    consumer = group_consumer(broker.bootstrap, group)
    try:
        consumer.subscribe([topic])
        consumed = consume(consumer, 21)
        assert sorted(consumed) == sorted(
            [(0, o) for o in range(4)] + [(1, o) for o in range(7)] + [(2, o) for o in range(10)]
        )
        committed = consumer.commit(asynchronous=False)
        assert {(tp.partition, tp.offset) for tp in committed} == {(0, 4), (1, 7), (2, 10)}
        assert all(tp.error is None for tp in committed)
        member_id = consumer.memberid()

        # Then more is produced: what's left unconsumed is 6, 3 and 0 records.
        produce(broker.bootstrap, topic, {0: 6, 1: 3}, {0: 4, 1: 7})

        state = wait_for(
            "a Stable group",
            lambda: (
                (r := shoal_groups(broker, "describe", group, "--state")).rc == 0 and "Stable" in r.out and r
            ),
        )
        [row] = table(state.out, "GROUP")
        assert row["GROUP"] == group
        assert row["COORDINATOR (ID)"] == f"{broker.bootstrap} (1)"
        assert row["ASSIGNMENT-STRATEGY"] == "range"  # librdkafka's first preference
        assert (row["STATE"], row["#MEMBERS"]) == ("Stable", "1")

        run = shoal_groups(broker, "describe", group)
        print(run)
        assert run.rc == 0, run
        assert run.out.splitlines()[1].split() == [
            "GROUP",
            "TOPIC",
            "PARTITION",
            "CURRENT-OFFSET",
            "LOG-END-OFFSET",
            "LAG",
            "CONSUMER-ID",
            "HOST",
            "CLIENT-ID",
        ]
        rows = offsets_by_partition(run)
        assert {p: (r["CURRENT-OFFSET"], r["LOG-END-OFFSET"], r["LAG"]) for p, r in rows.items()} == {
            0: ("4", "10", "6"),
            1: ("7", "10", "3"),
            2: ("10", "10", "0"),
        }, run
        for r in rows.values():
            assert (r["GROUP"], r["TOPIC"], r["CONSUMER-ID"], r["CLIENT-ID"]) == (
                group,
                topic,
                member_id,
                CLIENT_ID,
            )
            assert "127.0.0.1" in r["HOST"]

        members = shoal_groups(broker, "describe", group, "--members", "--verbose")
        assert members.rc == 0, members
        [m] = table(members.out, "GROUP")
        assert (m["CONSUMER-ID"], m["CLIENT-ID"], m["#PARTITIONS"], m["ASSIGNMENT"]) == (
            member_id,
            CLIENT_ID,
            "3",
            f"{topic}(0,1,2)",
        ), members

        listed = shoal_groups(broker, "list")
        assert listed.rc == 0 and group in listed.out.split(), listed
        stable = shoal_groups(broker, "list", "--state", "stable")
        assert {"GROUP": group, "STATE": "Stable"} in table(stable.out, "GROUP"), stable
        empty = shoal_groups(broker, "list", "--state", "Empty,Dead")
        assert group not in empty.out, empty

        # An active group's offsets can't be reset, and the group can't be deleted.
        refused = shoal_groups(
            broker, "reset-offsets", "--group", group, "--all-topics", "--to-earliest", "--execute"
        )
        assert refused.rc == 1, refused
        assert (
            f"Error: Assignments can only be reset if the group '{group}' is inactive, but the current state is Stable."
            in refused.err
        )
        not_empty = shoal_groups(broker, "delete", "--group", group)
        assert not_empty.rc == 1, not_empty
        assert (
            f"* Group '{group}' could not be deleted due to: NON_EMPTY_GROUP: The group is not empty."
            in not_empty.out
        )
    finally:
        consumer.close()  # leaves the group

    empty_run = wait_for(
        "an Empty group",
        lambda: (r := shoal_groups(broker, "describe", group)).rc == 0 and "no active" in r.err and r,
    )
    assert f"Consumer group '{group}' has no active members." in empty_run.err
    rows = offsets_by_partition(empty_run)
    assert {
        p: (r["CURRENT-OFFSET"], r["LAG"], r["CONSUMER-ID"], r["HOST"], r["CLIENT-ID"])
        for p, r in rows.items()
    } == {
        0: ("4", "6", "-", "-", "-"),
        1: ("7", "3", "-", "-", "-"),
        2: ("10", "0", "-", "-", "-"),
    }, empty_run
    members_empty = shoal_groups(broker, "describe", group, "--members")
    assert members_empty.rc == 0 and members_empty.out.strip() == "", members_empty
    assert "has no active members." in members_empty.err

    # Dry run (the default): shows the plan, commits nothing.
    dry = shoal_groups(broker, "reset-offsets", "--group", group, "--all-topics", "--to-earliest")
    assert dry.rc == 0, dry
    assert dry.out.splitlines()[1].split() == ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"]
    assert [(r["PARTITION"], r["NEW-OFFSET"]) for r in table(dry.out, "GROUP")] == [
        ("0", "0"),
        ("1", "0"),
        ("2", "0"),
    ]
    unchanged = offsets_by_partition(shoal_groups(broker, "describe", group))
    assert [unchanged[p]["CURRENT-OFFSET"] for p in range(3)] == ["4", "7", "10"]

    # --execute: partition 0 to offset 2, partition 1 past the end (clamped to the log end, with
    # Kafka's warning), partition 2 to the first record at or after offset 5's timestamp.
    to_offset = shoal_groups(
        broker, "reset-offsets", "--group", group, "--topic", f"{topic}:0", "--to-offset", "2", "--execute"
    )
    assert to_offset.rc == 0, to_offset
    assert [(r["TOPIC"], r["PARTITION"], r["NEW-OFFSET"]) for r in table(to_offset.out, "GROUP")] == [
        (topic, "0", "2")
    ]
    shifted = shoal_groups(
        broker, "reset-offsets", "--group", group, "--topic", f"{topic}:1", "--shift-by", "100", "--execute"
    )
    assert shifted.rc == 0, shifted
    assert [r["NEW-OFFSET"] for r in table(shifted.out, "GROUP")] == ["10"]
    assert (
        f"New offset (107) is higher than latest offset for topic partition {topic}-1. Value will be set to 10"
        in shifted.err
    )
    plus_two = datetime.timezone(datetime.timedelta(hours=2))
    by_time = shoal_groups(
        broker,
        "reset-offsets",
        "--group",
        group,
        "--topic",
        f"{topic}:2",
        "--to-datetime",
        iso(BASE_TS + 5000 - 400, plus_two),
        "--execute",
    )
    assert by_time.rc == 0, by_time
    assert [r["NEW-OFFSET"] for r in table(by_time.out, "GROUP")] == ["5"]
    after = offsets_by_partition(shoal_groups(broker, "describe", group))
    assert {p: (r["CURRENT-OFFSET"], r["LAG"]) for p, r in after.items()} == {
        0: ("2", "8"),
        1: ("10", "0"),
        2: ("5", "5"),
    }

    # A time after every record: the log end, as Kafka answers "no offset" with the latest.
    future = shoal_groups(
        broker, "reset-offsets", "--group", group, "--topic", topic, "--to-datetime", iso(BASE_TS + 10**9)
    )
    assert [r["NEW-OFFSET"] for r in table(future.out, "GROUP")] == ["10", "10", "10"], future

    # A member joining again resumes from the reset offsets.
    resumed = group_consumer(broker.bootstrap, group)
    try:
        resumed.subscribe([topic])
        got = consume(resumed, 8 + 5)
    finally:
        resumed.close()
    assert sorted(got) == sorted([(0, o) for o in range(2, 10)] + [(2, o) for o in range(5, 10)])
    wait_for(
        "the group to be Empty again",
        lambda: "Empty" in shoal_groups(broker, "describe", group, "--state").out,
    )

    deleted = shoal_groups(broker, "delete", "--group", group)
    assert deleted.rc == 0, deleted
    assert deleted.out.strip() == f"Deletion of requested consumer groups ('{group}') was successful."
    gone = shoal_groups(broker, "describe", group)
    assert gone.rc == 1 and f"Error: Consumer group '{group}' does not exist." in gone.err, gone
    assert group not in shoal_groups(broker, "list").out.split()


def test_unknown_groups_new_group_reset_and_bad_arguments(
    broker_factory: BrokerFactory, topic_name: str
) -> None:
    broker = broker_factory(overrides=GROUP_OVERRIDES)
    topic = topic_name
    create_diskless_topic(broker.bootstrap, topic, partitions=2)
    produce(broker.bootstrap, topic, {0: 5, 1: 3}, {})
    unknown = f"no-such-group-{uuid.uuid4().hex[:6]}"

    for view in ([], ["--members"], ["--state"], ["--offsets"]):
        run = shoal_groups(broker, "describe", unknown, *view)
        assert run.rc == 1, run
        assert f"Error: Consumer group '{unknown}' does not exist." in run.err
        assert run.out.strip() == ""
    delete = shoal_groups(broker, "delete", "--group", unknown)
    assert delete.rc == 1, delete
    assert "Error: Deletion of some consumer groups failed:" in delete.err
    assert (
        f"* Group '{unknown}' could not be deleted due to: GROUP_ID_NOT_FOUND: The group id does not exist."
        in delete.out
    )
    assert shoal_groups(broker, "list").out.strip() == ""

    # Kafka allows resetting a group that does not exist yet: it then exists, Empty, with offsets.
    fresh = f"fresh-{uuid.uuid4().hex[:6]}"
    reset = shoal_groups(
        broker, "reset-offsets", "--group", fresh, "--topic", topic, "--to-latest", "--execute"
    )
    assert reset.rc == 0, reset
    assert [(r["PARTITION"], r["NEW-OFFSET"]) for r in table(reset.out, "GROUP")] == [("0", "5"), ("1", "3")]
    described = shoal_groups(broker, "describe", fresh)
    assert described.rc == 0, described
    assert {
        p: (r["CURRENT-OFFSET"], r["LOG-END-OFFSET"], r["LAG"])
        for p, r in offsets_by_partition(described).items()
    } == {
        0: ("5", "5", "0"),
        1: ("3", "3", "0"),
    }
    state = table(shoal_groups(broker, "describe", fresh, "--state").out, "GROUP")
    assert [(r["ASSIGNMENT-STRATEGY"], r["STATE"], r["#MEMBERS"]) for r in state] == [("", "Empty", "0")]
    listed = table(shoal_groups(broker, "list", "--state", "Empty").out, "GROUP")
    assert listed == [{"GROUP": fresh, "STATE": "Empty"}]
    all_groups = shoal_groups(broker, "describe", "--all-groups")
    assert all_groups.rc == 0 and {r["GROUP"] for r in table(all_groups.out, "GROUP")} == {fresh}

    no_commit = shoal_groups(broker, "reset-offsets", "--group", unknown, "--topic", topic, "--shift-by", "1")
    assert no_commit.rc == 1, no_commit
    assert (
        f"Cannot shift offset for partition {topic}-0 since there is no current committed offset"
        in no_commit.err
    )
    missing_topic = shoal_groups(
        broker, "reset-offsets", "--group", fresh, "--topic", "no-such-topic", "--to-earliest"
    )
    assert missing_topic.rc == 1 and "UNKNOWN_TOPIC_OR_PARTITION" in missing_topic.err, missing_topic

    # Usage errors exit 2 before talking to the broker.
    for args in (
        ["reset-offsets", "--group", fresh, "--topic", topic],  # no reset spec
        ["reset-offsets", "--group", fresh, "--to-earliest"],  # no scope
        ["reset-offsets", "--group", fresh, "--topic", topic, "--to-earliest", "--to-latest"],
        ["reset-offsets", "--group", fresh, "--topic", topic, "--to-earliest", "--dry-run", "--execute"],
        ["reset-offsets", "--group", fresh, "--topic", topic, "--to-datetime", "2024-01-01 00:00:00"],
        ["describe", fresh, "--members", "--state"],
        ["list", "--state", "Sleeping"],
        ["delete"],
    ):
        run = shoal_groups(broker, *args)
        assert run.rc == 2, f"{args}: {run}"

    deleted = shoal_groups(broker, "delete", "--all-groups")
    assert (
        deleted.rc == 0
        and deleted.out.strip() == f"Deletion of requested consumer groups ('{fresh}') was successful."
    )


# ------------------------------------------------------------------- argument parsing (no broker)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2023-11-14T22:13:20.000", 1_700_000_000_000),  # no zone: UTC, as Kafka's Utils.getDateTime
        ("2023-11-14T22:13:20.123Z", 1_700_000_000_123),
        ("2023-11-15T00:13:20.000+02:00", 1_700_000_000_000),
        ("2023-11-15T00:13:20.000+0200", 1_700_000_000_000),
        ("2023-11-14T20:13:20.000-02", 1_700_000_000_000),
        ("1969-12-31T23:59:59.999Z", -1),
    ],
)
def test_to_datetime_format(text: str, expected: int) -> None:
    assert parse_datetime_ms(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "2023-11-14T22:13:20",
        "2023-11-14 22:13:20.000",
        "2023-02-30T00:00:00.000",
        "2023-11-14T25:00:00.000Z",
        "2023-11-14T22:13:20.000+25:00",
        "yesterday",
    ],
)
def test_to_datetime_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="Unparseable date"):
        parse_datetime_ms(text)


@pytest.mark.parametrize(
    ("text", "ms"),
    [("PT1H", 3_600_000), ("P1DT2M", 86_520_000), ("PT0.5S", 500), ("pt-1.5s", -1500), ("-PT10M", -600_000)],
)
def test_by_duration_format(text: str, ms: int) -> None:
    assert parse_duration_ms(text) == ms


@pytest.mark.parametrize("text", ["P", "PT", "1H", "P1H", "PT1D"])
def test_by_duration_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        parse_duration_ms(text)


def test_topic_specs_and_states() -> None:
    assert parse_topic_specs(["a", "b:0,2", "c:1"]) == [("a", None), ("b", [0, 2]), ("c", [1])]
    assert parse_states("stable, EMPTY,Stable") == ["Stable", "Empty"]
