"""kafka-python and aiokafka group members, which run in the test process, and the scenario both
clients' tests run.

A kafka-python member is a thread (its poll() blocks), an aiokafka member an asyncio task; each
records what it does in an ``EventRecorder`` (tests/support/groups.py) and commits after each batch.
The scenario is driven from asyncio, so that it can wait on either kind.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol

from tests.support.broker import BrokerProcess
from tests.support.groups import (
    FAST_GROUP_OVERRIDES,
    ConsumerLog,
    EventRecorder,
    balanced,
    check_group_consumption,
    describe_logs,
    end_offsets,
    expected_from_sent,
    last_commits,
    merge_expected,
    seq_from_headers,
)
from tests.support.kafka_clients import confluent_produce, create_diskless_topic
from tests.support.workload import make_workload


class RecordingListener:
    """Rebalance callbacks that record what they were told. Mix it in before the client library's
    ``ConsumerRebalanceListener`` (which both kafka-python and aiokafka check for)."""

    def __init__(self, rec: EventRecorder) -> None:
        self.rec = rec

    def on_partitions_revoked(self, revoked: Any) -> None:
        self.rec.revoked(tp.partition for tp in revoked)

    def on_partitions_assigned(self, assigned: Any) -> None:
        self.rec.assigned(tp.partition for tp in assigned)

    def on_partitions_lost(self, lost: Any) -> None:
        self.rec.lost(tp.partition for tp in lost)


class InProcessMember:
    """What a kafka-python or aiokafka group member shares: who it is, its events, how it crashed."""

    def __init__(self, name: str, bootstrap: str, topic: str, group: str, *, session_timeout_ms: int) -> None:
        self.member_name, self.bootstrap, self.topic, self.group = name, bootstrap, topic, group
        self.session_timeout_ms = session_timeout_ms
        self.rec = EventRecorder()
        self.crash: BaseException | None = None

    def log(self) -> ConsumerLog:
        return ConsumerLog(self.member_name, self.rec.events())

    def consumer_config(self) -> dict[str, Any]:
        """KafkaConsumer / AIOKafkaConsumer arguments (the two take the same names): a group member that
        commits by hand, from the earliest offset when the group has none."""
        return {
            "bootstrap_servers": self.bootstrap,
            "client_id": self.member_name,
            "group_id": self.group,
            "enable_auto_commit": False,
            "auto_offset_reset": "earliest",
            "session_timeout_ms": self.session_timeout_ms,
            "heartbeat_interval_ms": 1000,
            "request_timeout_ms": 30000,
        }

    def processed(self, batch: Mapping[Any, Sequence[Any]]) -> dict[Any, int]:
        """Record a poll's records as processed; the offsets to commit, partition -> next offset."""
        offsets: dict[Any, int] = {}
        for tp, records in batch.items():
            for r in records:
                self.rec.processed(r.partition, r.offset, seq_from_headers(r.headers))
                offsets[tp] = r.offset + 1
        return offsets

    def committed(self, offsets: Mapping[Any, int]) -> None:
        for tp, offset in offsets.items():
            self.rec.committed(tp.partition, offset)


def describe_members(members: Iterable[GroupMember]) -> str:
    members = list(members)
    return describe_logs(m.log() for m in members) + "".join(
        f"\n  {m.member_name} crashed: {m.crash!r}" for m in members if m.crash
    )


class GroupMember(Protocol):
    """What the scenario needs of a member (``InProcessMember`` plus the client's own start and stop)."""

    member_name: str
    crash: BaseException | None

    def log(self) -> ConsumerLog: ...

    def start(self) -> object: ...

    async def stop(self, timeout: float = 60.0) -> None:
        """Leave the group and close; fails if it did not close in time or crashed."""

    async def halt(self) -> None:
        """Teardown: stop whatever is still running, without failing."""


async def wait_for(predicate: Any, timeout: float, what: str, describe: Any) -> float:
    """tests.support.groups.wait_until for asyncio: aiokafka members run on this loop."""
    start = time.monotonic()
    while not predicate():
        if time.monotonic() - start > timeout:
            raise AssertionError(f"{what}: not reached within {timeout:.0f}s\n{describe()}")
        await asyncio.sleep(0.2)
    return time.monotonic() - start


async def produce(bootstrap: str, topic: str, sent: Any) -> None:
    # confluent's blocking producer, off the loop so that asyncio members keep heartbeating.
    await asyncio.to_thread(confluent_produce, bootstrap, topic, sent)


async def split_leave_takeover_and_resume(
    broker_factory: Callable[..., BrokerProcess],
    topic: str,
    member: Callable[[str, str, str, str], GroupMember],
    read_committed: Callable[[str, str, str, int], Awaitable[dict[int, int | None]]],
    *,
    session_timeout_ms: int,
    label: str,
    seed: int,
    **workload: Any,
) -> None:
    """Two members split 4 partitions; one leaves (LeaveGroup) and the other takes all four and
    processes what is produced next; the committed offsets, as ``read_committed`` reads them from
    outside the group with the same client, are the ends; a fresh member resumes exactly from them.
    Every record is processed exactly once.

    ``member(name, bootstrap, topic, group)`` makes a member; workloads are ``<label>1..3``, seeded
    from ``seed``, with ``workload`` passed to ``make_workload``."""
    partitions = 4
    broker = broker_factory(overrides=FAST_GROUP_OVERRIDES)
    create_diskless_topic(broker.bootstrap, topic, partitions=partitions)
    group = f"grp-{topic}"
    sent1 = make_workload(1000, partitions, f"{label}1", seed=seed, **workload)
    await produce(broker.bootstrap, topic, sent1)
    expected = expected_from_sent(sent1)

    c1, c2, c3 = (member(name, broker.bootstrap, topic, group) for name in ("c1", "c2", "c3"))
    everyone = [c1, c2, c3]

    def describe() -> str:
        return describe_members(everyone)

    try:
        c1.start()
        c2.start()
        await wait_for(
            lambda: balanced([c1.log(), c2.log()], partitions, each=2), 90, "c1 and c2 with 2 each", describe
        )
        ends = end_offsets(expected, partitions)
        await wait_for(lambda: last_commits([c1.log(), c2.log()]) == ends, 60, f"committing {ends}", describe)

        await c1.stop()
        left = time.monotonic()
        took = await wait_for(
            lambda: c2.log().assignment == set(range(partitions)),
            session_timeout_ms / 1000 + 30,
            "c2 taking every partition after c1 left",
            describe,
        )
        print(f"\ntakeover {took:.1f}s after c1 left")
        sent2 = make_workload(1000, partitions, f"{label}2", seed=seed + 1, first_seq=len(sent1), **workload)
        await produce(broker.bootstrap, topic, sent2)
        expected = merge_expected(expected, expected_from_sent(sent2, ends))
        ends = end_offsets(expected, partitions)
        await wait_for(lambda: last_commits([c2.log()]) == ends, 60, f"c2 committing {ends}", describe)
        assert {ev.partition for ev in c2.log().processed if ev.t > left} == set(range(partitions))
        await c2.stop()

        assert await read_committed(broker.bootstrap, group, topic, partitions) == ends

        sent3 = make_workload(
            1000, partitions, f"{label}3", seed=seed + 2, first_seq=len(sent1) + len(sent2), **workload
        )
        await produce(broker.bootstrap, topic, sent3)
        expected = merge_expected(expected, expected_from_sent(sent3, ends))
        ends = end_offsets(expected, partitions)
        c3.start()
        await wait_for(lambda: last_commits([c3.log()]) == ends, 90, f"fresh c3 committing {ends}", describe)
        await c3.stop()
        counts = check_group_consumption([m.log() for m in everyone], expected, allow_duplicates=False)
        print(f"consumption: {counts}")
    finally:
        await asyncio.gather(*(m.halt() for m in everyone))
