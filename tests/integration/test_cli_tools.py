"""`shoal topics`, `shoal dump-log` and `shoal diskless-metadata` against a real broker.

The tools run as separate processes (`python -m shoal ...`) as an operator runs them; records
come from confluent-kafka, WAL objects from the broker's local object directory, and the metadata
store is the broker's own file, read while the broker runs. Outputs are parsed the way scripts
parse Kafka's kafka-topics.sh / kafka-dump-log.sh lines.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest
from typer.testing import CliRunner

from shoal.cli import topic_admin
from shoal.cli.kafka_client import KafkaClient
from shoal.cli.main import app
from tests.support.broker import SRC_DIR, BrokerProcess
from tests.support.kafka_clients import confluent_produce
from tests.support.workload import Sent

CLI_TIMEOUT = 120.0
KAFKA_ID = r"[A-Za-z0-9_-]{22}"  # a topic id as Kafka prints it (base64url, no padding)


@dataclass
class Run:
    rc: int
    out: str
    err: str

    def __str__(self) -> str:
        return f"rc={self.rc}\n--- stdout\n{self.out}\n--- stderr\n{self.err}"


def shoal(*args: str) -> Run:
    """`python -m shoal ARGS` as a separate process."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(SRC_DIR), env.get("PYTHONPATH", "")) if p)
    proc = subprocess.run(
        [sys.executable, "-m", "shoal", *args], env=env, capture_output=True, text=True, timeout=CLI_TIMEOUT,
        check=False,
    )
    return Run(proc.returncode, proc.stdout, proc.stderr)


def topics(broker: BrokerProcess, *args: str) -> Run:
    return shoal("topics", *args, "--bootstrap-server", broker.bootstrap)


def tab_fields(line: str) -> dict[str, str]:
    """`Name: value` cells of a tab-separated describe line."""
    return dict(cell.split(": ", 1) for cell in line.strip("\t").split("\t"))


def space_fields(line: str) -> dict[str, str]:
    """`name: value` pairs of a kafka-dump-log line (the payload, last, is one word in these tests)."""
    return dict(re.findall(r"(\w+): (\S+)", line))


def describe(broker: BrokerProcess, topic: str) -> tuple[dict[str, str], list[dict[str, str]]]:
    run = topics(broker, "describe", "--topic", topic)
    assert run.rc == 0, run
    lines = run.out.splitlines()
    assert lines and lines[0].startswith(f"Topic: {topic}\t"), run
    assert all(line.startswith(f"\tTopic: {topic}\tPartition: ") for line in lines[1:]), run
    return tab_fields(lines[0]), [tab_fields(line) for line in lines[1:]]


def produce_round(broker: BrokerProcess, topic: str, round_no: int, per_partition: dict[int, int]) -> None:
    """Records valued `r<round>-p<partition>-<i>` (one word, so a dump line's payload parses)."""
    sent = [
        Sent(0, p, f"key-{p}-{i}".encode(), f"r{round_no}-p{p}-{i}".encode(), (("round", str(round_no).encode()),),
             None)
        for p, n in per_partition.items()
        for i in range(n)
    ]
    confluent_produce(broker.bootstrap, topic, sent)


# ---------------------------------------------------------------------------------------- topics


def test_topics_create_list_describe_alter_delete(broker: BrokerProcess, topic_name: str) -> None:
    run = topics(broker, "create", "--topic", topic_name, "--partitions", "3", "--diskless",
                 "--config", "retention.ms=86400000")
    assert (run.rc, run.out) == (0, f"Created topic {topic_name}.\n"), run

    # Kafka's wording for the errors, on stdout with exit code 1.
    run = topics(broker, "create", "--topic", topic_name, "--diskless")
    assert (run.rc, run.out) == (1, f"Error while executing topic command : Topic '{topic_name}' already exists.\n"), run
    assert topics(broker, "create", "--topic", topic_name, "--diskless", "--if-not-exists").rc == 0
    run = topics(broker, "create", "--topic", f"{topic_name}-classic")  # classic is the default kind
    assert (run.rc, run.out) == (0, f"Created topic {topic_name}-classic.\n"), run
    run = topics(broker, "create", "--topic", "x", "--diskless", "--partitions", "0")
    assert run.out == "Error while executing topic command : The partitions must be greater than 0\n", run

    run = topics(broker, "list")
    assert run.rc == 0 and {topic_name, f"{topic_name}-classic"} <= set(run.out.splitlines()), run
    run = topics(broker, "list", "--diskless")
    assert run.rc == 0 and run.out.splitlines() == [topic_name], run
    head, _ = describe(broker, f"{topic_name}-classic")
    assert head["Kind"] == "classic", head

    head, parts = describe(broker, topic_name)
    assert re.fullmatch(KAFKA_ID, head["TopicId"]), head
    assert (head["PartitionCount"], head["ReplicationFactor"], head["Kind"]) == ("3", "1", "diskless")
    assert set(head["Configs"].split(",")) == {"diskless.enable=true", "retention.ms=86400000"}
    assert [(p["Partition"], p["Leader"], p["Replicas"], p["Isr"], p["LogStartOffset"], p["LogEndOffset"])
            for p in parts] == [(str(i), "1", "1", "1", "0", "0") for i in range(3)]

    produce_round(broker, topic_name, 0, {0: 4, 1: 0, 2: 7})
    _, parts = describe(broker, topic_name)
    assert [(p["LogStartOffset"], p["LogEndOffset"]) for p in parts] == [("0", "4"), ("0", "0"), ("0", "7")]

    run = topics(broker, "alter", "--topic", topic_name, "--config", "retention.ms=3600000",
                 "--config", "max.message.bytes=2000000")
    assert (run.rc, run.out) == (0, f"Updated config for topic {topic_name}.\n"), run
    run = topics(broker, "alter", "--topic", topic_name, "--delete-config", "retention.ms")
    assert run.rc == 0, run
    head, _ = describe(broker, topic_name)
    assert set(head["Configs"].split(",")) == {"diskless.enable=true", "max.message.bytes=2000000"}
    run = topics(broker, "alter", "--topic", topic_name, "--delete-config", "retention.ms")
    assert run.out == "Error while executing topic command : Invalid config(s): retention.ms\n", run
    run = topics(broker, "alter", "--topic", topic_name, "--config", "diskless.enable=false")
    assert run.rc == 1 and "diskless.enable can only be set when the topic is created" in run.out, run

    # --partitions grows the topic (CreatePartitions); shrinking is refused with Kafka's message.
    run = topics(broker, "alter", "--topic", topic_name, "--partitions", "6")
    assert run.rc == 0 and run.out.splitlines()[-1] == "Adding partitions succeeded!", run
    assert describe(broker, topic_name)[0]["PartitionCount"] == "6"
    run = topics(broker, "alter", "--topic", topic_name, "--partitions", "4")
    assert run.rc == 1, run
    assert run.out.splitlines()[-1] == (
        f"Error while executing topic command : The topic {topic_name} currently has 6 partition(s); "
        "4 would not be an increase."
    ), run

    run = topics(broker, "delete", "--topic", topic_name)
    assert (run.rc, run.out) == (0, ""), run
    assert topic_name not in topics(broker, "list").out.splitlines()
    run = topics(broker, "describe", "--topic", topic_name)
    assert run.out == f"Error while executing topic command : Topic '{topic_name}' does not exist as expected\n", run
    assert topics(broker, "delete", "--topic", topic_name, "--if-exists").rc == 0


def test_topic_regex_like_kafka(broker: BrokerProcess, topic_name: str) -> None:
    """--topic is Kafka's include list: a regex matching whole names, ',' for alternatives."""
    for suffix in ("a", "b", "c"):
        assert topics(broker, "create", "--topic", f"{topic_name}-{suffix}", "--diskless").rc == 0
    run = topics(broker, "list", "--topic", f"{topic_name}-(a|b)")
    assert run.out.splitlines() == [f"{topic_name}-a", f"{topic_name}-b"], run
    run = topics(broker, "describe", "--topic", f"{topic_name}-a,{topic_name}-c")
    assert [line.split("\t")[0] for line in run.out.splitlines() if line.startswith("Topic:")] == [
        f"Topic: {topic_name}-a", f"Topic: {topic_name}-c"]
    run = topics(broker, "alter", "--topic", f"{topic_name}-.*", "--config", "retention.ms=1000")
    assert run.out.splitlines() == [f"Updated config for topic {topic_name}-{s}." for s in "abc"], run
    assert topics(broker, "delete", "--topic", f"{topic_name}-[ab]").rc == 0
    assert topics(broker, "list", "--topic", f"{topic_name}.*").out.splitlines() == [f"{topic_name}-c"]


def test_diskless_filter_without_metadata_v14(broker: BrokerProcess, topic_name: str,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """A broker without Metadata v14 has no IsDiskless: the tool asks DescribeConfigs instead."""
    assert topics(broker, "create", "--topic", topic_name, "--diskless").rc == 0
    monkeypatch.setitem(topic_admin.VERSIONS, topic_admin.Api.METADATA, (1, 12))
    with KafkaClient(broker.bootstrap) as client:
        admin = topic_admin.TopicAdmin(client, 30_000)
        cluster = admin.topics()
        assert cluster.topics[topic_name].is_diskless is None, "Metadata v12 cannot say"
        assert admin.diskless_flags(cluster, [topic_name]) == {topic_name: True}
    runner = CliRunner()
    result = runner.invoke(app, ["topics", "list", "--diskless", "--bootstrap-server", broker.bootstrap])
    assert result.exit_code == 0 and result.stdout.splitlines() == [topic_name], result.output
    result = runner.invoke(app, ["topics", "describe", "--topic", topic_name, "--bootstrap-server", broker.bootstrap])
    assert result.exit_code == 0 and "\tKind: diskless" in result.stdout.splitlines()[0], result.output


# ---------------------------------------------------------------------------- dump-log, metadata


def test_dump_log_and_diskless_metadata(broker: BrokerProcess, topic_name: str) -> None:
    assert topics(broker, "create", "--topic", topic_name, "--partitions", "2", "--diskless").rc == 0
    topic_id = describe(broker, topic_name)[0]["TopicId"]
    first = {0: 3, 1: 5}
    produce_round(broker, topic_name, 0, first)
    objects_before = set(broker.wal_objects())
    second = {0: 4, 1: 2}
    produce_round(broker, topic_name, 1, second)
    new_objects = [p for p in broker.wal_objects() if p not in objects_before]
    assert new_objects, "the second round must have written a WAL object"
    obj = new_objects[-1]
    key = f"wal/{obj.name}"

    # Without the metadata store: the producer's offsets, no partition.
    run = shoal("dump-log", str(obj))
    assert run.rc == 0, run
    lines = run.out.splitlines()
    assert lines[0] == f"Dumping {obj}" and lines[1].startswith("WAL segment version: 0"), run
    plain = [space_fields(line) for line in lines if line.startswith("baseOffset: ")]
    assert plain and all(b["baseOffset"] == "0" and b["isvalid"] == "true" and b["magic"] == "2" for b in plain), run
    assert int(plain[0]["position"]) == 1
    assert not any(line.startswith("| offset") for line in lines)

    # --print-data: every record with its payload and headers, offsets still the producer's.
    run = shoal("dump-log", str(obj), "--print-data")
    assert run.rc == 0, run
    records = [space_fields(line) for line in run.out.splitlines() if line.startswith("| offset: ")]
    assert records and all(r["payload"].startswith("r1-") and r["headers"] == "[round=1]" for r in records), run
    expected = 0
    for line in run.out.splitlines():  # the producer numbers each batch's records from 0
        if line.startswith("baseOffset: "):
            expected = 0
        elif line.startswith("| offset: "):
            assert int(space_fields(line)["offset"]) == expected, line
            expected += 1

    # --metadata-dir (the broker's metadata.log.dir) while the broker runs: topic-partition and the
    # offsets the coordinator assigned, i.e. after the first round's records.
    run = shoal("dump-log", str(obj), "--print-data", "--metadata-dir", str(broker.log_dir))
    assert run.rc == 0, run
    assert f"Object key: {key} size: {obj.stat().st_size} " in run.out, run
    batches = [space_fields(line) for line in run.out.splitlines() if line.startswith("topic: ")]
    assert len(batches) == len(plain)
    assert {b["topic"] for b in batches} == {topic_name}
    seen: Counter[int] = Counter()
    partition = -1
    for line in run.out.splitlines():
        if line.startswith("topic: "):
            partition = int(space_fields(line)["partition"])
        elif line.startswith("| offset: "):
            r = space_fields(line)
            _, p, i = r["payload"].split("-")
            assert int(p[1:]) == partition, line
            assert int(r["offset"]) == first[partition] + int(i), line
            seen[partition] += 1
    assert sum(seen.values()) == len(records)
    # --config finds the same store the way the broker does.
    by_config = shoal("dump-log", str(obj), "--config", str(broker.properties_path))
    assert by_config.rc == 0 and f"topic: {topic_name} partition: " in by_config.out, by_config

    # diskless-metadata object: the same batches at the same byte positions.
    run = shoal("diskless-metadata", "object", key, "--metadata-dir", str(broker.log_dir))
    assert run.rc == 0, run
    head, *rows = run.out.splitlines()
    head_fields = tab_fields(head)
    assert head_fields["Object"] == key and head_fields["Size"] == str(obj.stat().st_size), run
    assert head_fields["State"] == "uploaded" and int(head_fields["UsedSize"]) == obj.stat().st_size - 1
    assert [tab_fields(r)["ByteOffset"] for r in rows] == [b["position"] for b in batches]
    assert [tab_fields(r)["BaseOffset"] for r in rows] == [b["baseOffset"] for b in batches]

    # diskless-metadata topic: high watermarks, live bytes, and the objects the topic is in.
    run = shoal("diskless-metadata", "topic", topic_name, "--config", str(broker.properties_path))
    assert run.rc == 0, run
    lines = run.out.splitlines()
    partitions = [tab_fields(line) for line in lines[1:] if line.startswith("\tTopic: ")]
    assert [(p["Partition"], p["LogStartOffset"], p["HighWatermark"]) for p in partitions] == [
        (str(p), "0", str(first[p] + second[p])) for p in (0, 1)]
    all_objects = broker.wal_objects()
    live_bytes = sum(obj_path.stat().st_size - 1 for obj_path in all_objects)  # only this topic's batches
    assert sum(int(p["Size"]) for p in partitions) == live_bytes
    assert f"Size on object storage: {live_bytes} bytes in the live batches of the topic" in lines
    total = sum(obj_path.stat().st_size for obj_path in all_objects)
    assert f"Objects holding batches of the topic: {len(all_objects)}, {total} bytes in total" in lines
    assert "Objects holding only deleted batches of the topic: 0, 0 bytes in total" in lines
    by_id = shoal("diskless-metadata", "topic", topic_id, "--metadata-dir", str(broker.log_dir))
    assert by_id.rc == 0 and by_id.out == run.out, by_id

    # After deletion, the emptied objects wait for physical deletion under the topic's name.
    assert topics(broker, "delete", "--topic", topic_name).rc == 0
    run = shoal("diskless-metadata", "topic", topic_name, "--metadata-dir", str(broker.log_dir))
    remaining = broker.wal_objects()
    if remaining:
        assert run.rc == 0, run
        assert "\tMarkedForDeletion: true" in run.out.splitlines()[0]
        assert "Objects holding batches of the topic: 0, 0 bytes in total" in run.out
        deleted = re.search(r"Objects holding only deleted batches of the topic: (\d+), (\d+) bytes", run.out)
        assert deleted and int(deleted.group(1)) >= len(remaining), run
        by_id = shoal("diskless-metadata", "topic", topic_id, "--metadata-dir", str(broker.log_dir))
        assert by_id.rc == 0 and by_id.out == run.out, by_id
    else:  # a cleaner already deleted and forgot them all
        assert run.rc == 1 and "no object of it is left" in run.err, run
    run = shoal("dump-log", str(obj), "--metadata-dir", str(broker.log_dir))
    if obj.exists():
        assert run.rc == 0 and "topic: (deleted) partition: (deleted) baseOffset: 0 " in run.out, run

    # Errors: unknown names, a directory without a store.
    run = shoal("diskless-metadata", "topic", "no-such-topic", "--metadata-dir", str(broker.log_dir))
    assert (run.rc, run.err) == (1, "Error: Topic 'no-such-topic' does not exist.\n"), run
    run = shoal("diskless-metadata", "object", "wal/nothing", "--metadata-dir", str(broker.log_dir))
    assert run.rc == 1 and "is not known to the batch coordinator" in run.err, run
    run = shoal("diskless-metadata", "topic", topic_name, "--metadata-dir", str(broker.data_dir / "empty"))
    assert run.rc == 1 and "No metadata store at" in run.err, run
    assert not (broker.data_dir / "empty").exists()


def test_dump_log_reads_a_wal_object_copied_elsewhere(broker: BrokerProcess, topic_name: str, tmp_path: Path) -> None:
    """An object fetched out of storage keeps working: detection by content, key from its name."""
    assert topics(broker, "create", "--topic", topic_name, "--diskless").rc == 0
    produce_round(broker, topic_name, 0, {0: 3})
    (obj,) = broker.wal_objects()
    copy = tmp_path / "download" / "wal" / obj.name
    copy.parent.mkdir(parents=True)
    copy.write_bytes(obj.read_bytes())
    run = shoal("dump-log", "--files", str(copy), "--metadata-dir", str(broker.log_dir), "--deep-iteration")
    assert run.rc == 0, run
    assert f"topic: {topic_name} partition: 0 baseOffset: 0 lastOffset: 2 count: 3 " in run.out, run
    assert [space_fields(line)["offset"] for line in run.out.splitlines() if line.startswith("| offset")] == ["0", "1", "2"]
