"""Consumer groups (the classic protocol, old non-flexible versions) through aiokafka 0.14.

Each member is an asyncio task: subscribe, getmany, process, commit (awaited) after each
batch; it records what it did in an `EventRecorder`.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
from aiokafka.errors import KafkaError, UnknownTopicOrPartitionError

from tests.integration.group_helpers import (
    FAST_GROUP_OVERRIDES,
    BrokerFactory,
    ConsumerLog,
    EventRecorder,
    balanced,
    check_group_consumption,
    describe_logs,
    end_offsets,
    expected_from_sent,
    last_commits,
    merge_expected,
)
from tests.support.broker import confluent_consume, confluent_produce, create_diskless_topic, make_workload

SESSION_TIMEOUT_MS = 10000


def _seq(headers: Any) -> int:
    for key, value in headers or ():
        if key == "seq" and value is not None:
            return int(value)
    return -1


class _Listener(ConsumerRebalanceListener):
    def __init__(self, rec: EventRecorder) -> None:
        self.rec = rec

    def on_partitions_revoked(self, revoked: Any) -> None:
        self.rec.revoked(tp.partition for tp in revoked)

    def on_partitions_assigned(self, assigned: Any) -> None:
        self.rec.assigned(tp.partition for tp in assigned)


class Member:
    """An aiokafka group member running as a task."""

    def __init__(self, name: str, bootstrap: str, topic: str, group: str) -> None:
        self.name, self.bootstrap, self.topic, self.group = name, bootstrap, topic, group
        self.rec = EventRecorder()
        self.stopping = asyncio.Event()
        self.task: asyncio.Task[None] | None = None
        self.crash: BaseException | None = None

    def log(self) -> ConsumerLog:
        return ConsumerLog(self.name, self.rec.events())

    def start(self) -> Member:
        self.task = asyncio.create_task(self._run(), name=f"member-{self.name}")
        return self

    async def _run(self) -> None:
        consumer = AIOKafkaConsumer(
            bootstrap_servers=self.bootstrap,
            client_id=self.name,
            group_id=self.group,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            session_timeout_ms=SESSION_TIMEOUT_MS,
            heartbeat_interval_ms=1000,
            request_timeout_ms=30000,
        )
        try:
            await consumer.start()
            consumer.subscribe([self.topic], listener=_Listener(self.rec))
            self.rec.add("S", text="subscribed")
            while not self.stopping.is_set():
                batch = await consumer.getmany(timeout_ms=200, max_records=100)
                offsets: dict[TopicPartition, int] = {}
                for tp, records in batch.items():
                    for r in records:
                        self.rec.processed(r.partition, r.offset, _seq(r.headers))
                        offsets[tp] = r.offset + 1
                if offsets:
                    try:
                        await consumer.commit(offsets)
                    except KafkaError as exc:
                        self.rec.error(f"commit failed: {exc!r}")
                    else:
                        for tp, o in offsets.items():
                            self.rec.committed(tp.partition, o)
        except BaseException as exc:
            self.crash = exc
            self.rec.error(f"crashed: {exc!r}")
        finally:
            await consumer.stop()  # sends LeaveGroup
            self.rec.add("X", text="closed")

    async def stop(self, timeout: float = 60.0) -> None:
        self.stopping.set()
        assert self.task is not None
        done, _ = await asyncio.wait({self.task}, timeout=timeout)
        assert done, f"{self.name} did not stop within {timeout}s\n{self.log().summary()}"
        assert self.crash is None, f"{self.name} crashed: {self.crash!r}"


async def wait_for(predicate: Any, timeout: float, what: str, describe: Any) -> float:
    """group_helpers.wait_until for asyncio: the members run on this loop."""
    start = time.monotonic()
    while not predicate():
        if time.monotonic() - start > timeout:
            raise AssertionError(f"{what}: not reached within {timeout:.0f}s\n{describe()}")
        await asyncio.sleep(0.2)
    return time.monotonic() - start


async def produce(bootstrap: str, topic: str, sent: Any) -> None:
    # confluent's blocking producer, off the loop so the members keep heartbeating.
    await asyncio.to_thread(confluent_produce, bootstrap, topic, sent)


@pytest.mark.timeout(300)
async def test_aiokafka_group_split_leave_takeover_and_resume(
    broker_factory: BrokerFactory, topic_name: str
) -> None:
    """Two members split 4 partitions; one stops (LeaveGroup) and the other takes all four and
    processes what is produced next; a fresh member resumes exactly from the committed offsets.
    Every record is processed exactly once."""
    partitions = 4
    broker = broker_factory(overrides=FAST_GROUP_OVERRIDES)
    create_diskless_topic(broker.bootstrap, topic_name, partitions=partitions)
    group = f"grp-{topic_name}"
    sent1 = make_workload(1000, partitions, "ak1", seed=31)
    await produce(broker.bootstrap, topic_name, sent1)
    expected = expected_from_sent(sent1)

    c1 = Member("c1", broker.bootstrap, topic_name, group)
    c2 = Member("c2", broker.bootstrap, topic_name, group)
    c3 = Member("c3", broker.bootstrap, topic_name, group)
    everyone = [c1, c2, c3]

    def describe() -> str:
        return describe_logs(m.log() for m in everyone) + "".join(
            f"\n  {m.name} crashed: {m.crash!r}" for m in everyone if m.crash
        )

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
            SESSION_TIMEOUT_MS / 1000 + 30,
            "c2 taking every partition after c1 left",
            describe,
        )
        print(f"\ntakeover {took:.1f}s after c1 stopped")
        sent2 = make_workload(1000, partitions, "ak2", seed=32, first_seq=len(sent1))
        await produce(broker.bootstrap, topic_name, sent2)
        expected = merge_expected(expected, expected_from_sent(sent2, ends))
        ends = end_offsets(expected, partitions)
        await wait_for(lambda: last_commits([c2.log()]) == ends, 60, f"c2 committing {ends}", describe)
        assert {ev.partition for ev in c2.log().processed if ev.t > left} == set(range(partitions))
        await c2.stop()

        # The committed offsets, read by aiokafka itself from outside the group.
        reader = AIOKafkaConsumer(
            bootstrap_servers=broker.bootstrap, group_id=group, enable_auto_commit=False
        )
        await reader.start()
        try:
            committed = {p: await reader.committed(TopicPartition(topic_name, p)) for p in range(partitions)}
        finally:
            await reader.stop()
        assert committed == ends

        sent3 = make_workload(1000, partitions, "ak3", seed=33, first_seq=len(sent1) + len(sent2))
        await produce(broker.bootstrap, topic_name, sent3)
        expected = merge_expected(expected, expected_from_sent(sent3, ends))
        ends = end_offsets(expected, partitions)
        c3.start()
        await wait_for(lambda: last_commits([c3.log()]) == ends, 90, f"fresh c3 committing {ends}", describe)
        await c3.stop()
        counts = check_group_consumption([m.log() for m in everyone], expected, allow_duplicates=False)
        print(f"consumption: {counts}")
    finally:
        for m in everyone:
            m.stopping.set()
        tasks = [m.task for m in everyone if m.task is not None]
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=30)
            for t in pending:
                t.cancel()


@pytest.mark.timeout(180)
async def test_aiokafka_committed_of_unknown_group_and_missing_partition(
    broker_factory: BrokerFactory, topic_name: str
) -> None:
    """committed() is None for a group nobody used and for a partition that doesn't exist; a
    commit to a missing partition never succeeds (aiokafka retries UNKNOWN_TOPIC_OR_PARTITION,
    so it is bounded here), and the broker keeps serving."""
    partitions = 4
    broker = broker_factory(overrides=FAST_GROUP_OVERRIDES)
    create_diskless_topic(broker.bootstrap, topic_name, partitions=partitions)
    sent = make_workload(40, partitions, "ak-bad", seed=34)
    await produce(broker.bootstrap, topic_name, sent)

    unknown = AIOKafkaConsumer(
        bootstrap_servers=broker.bootstrap,
        group_id=f"never-used-{uuid.uuid4().hex[:8]}",
        enable_auto_commit=False,
    )
    await unknown.start()
    try:
        got = {p: await unknown.committed(TopicPartition(topic_name, p)) for p in range(partitions)}
        assert got == dict.fromkeys(range(partitions)), f"committed() of an unknown group: {got}"
        missing = await asyncio.wait_for(unknown.committed(TopicPartition(topic_name, 99)), 30)
        assert missing is None, f"committed() for a partition that doesn't exist: {missing}"
    finally:
        await unknown.stop()

    group = f"grp-{topic_name}"
    consumer = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=group, enable_auto_commit=False)
    await consumer.start()
    try:
        good, bad = TopicPartition(topic_name, 2), TopicPartition(topic_name, 99)
        consumer.assign([good, bad])  # aiokafka only commits assigned partitions
        with pytest.raises((UnknownTopicOrPartitionError, TimeoutError)):
            await asyncio.wait_for(consumer.commit({bad: 5}), 5)
        assert await asyncio.wait_for(consumer.committed(bad), 30) is None
        await asyncio.wait_for(consumer.commit({good: 6}), 30)
        assert await consumer.committed(good) == 6
    finally:
        await consumer.stop()

    more = make_workload(20, partitions, "ak-bad-after", seed=35, first_seq=len(sent))
    await produce(broker.bootstrap, topic_name, more)
    got_back = await asyncio.to_thread(
        confluent_consume, broker.bootstrap, topic_name, range(partitions), len(sent) + len(more)
    )
    assert len(got_back) == 60
    assert broker.is_running()
