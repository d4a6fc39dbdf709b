"""Consumer groups (the classic protocol, old non-flexible versions) through aiokafka 0.14.

Each member is an asyncio task: subscribe, getmany, process, commit (awaited) after each
batch; it records what it did in an `EventRecorder`.
"""

from __future__ import annotations

import asyncio
import uuid

import pytest
from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
from aiokafka.errors import KafkaError, UnknownTopicOrPartitionError

from tests.integration.conftest import BrokerFactory
from tests.support.groups import FAST_GROUP_OVERRIDES
from tests.support.groups_in_process import (
    InProcessMember,
    RecordingListener,
    produce,
    split_leave_takeover_and_resume,
)
from tests.support.kafka_clients import confluent_consume, create_diskless_topic
from tests.support.workload import make_workload

SESSION_TIMEOUT_MS = 10000


class _Listener(RecordingListener, ConsumerRebalanceListener):
    pass


class Member(InProcessMember):
    """An aiokafka group member running as a task."""

    def __init__(self, name: str, bootstrap: str, topic: str, group: str) -> None:
        super().__init__(name, bootstrap, topic, group, session_timeout_ms=SESSION_TIMEOUT_MS)
        self.stopping = asyncio.Event()
        self.task: asyncio.Task[None] | None = None

    def start(self) -> Member:
        self.task = asyncio.create_task(self._run(), name=f"member-{self.member_name}")
        return self

    async def _run(self) -> None:
        consumer = AIOKafkaConsumer(**self.consumer_config())
        try:
            await consumer.start()
            consumer.subscribe([self.topic], listener=_Listener(self.rec))
            self.rec.add("S", text="subscribed")
            while not self.stopping.is_set():
                batch = await consumer.getmany(timeout_ms=200, max_records=100)
                offsets = self.processed(batch)
                if offsets:
                    try:
                        await consumer.commit(offsets)
                    except KafkaError as exc:
                        self.rec.error(f"commit failed: {exc!r}")
                    else:
                        self.committed(offsets)
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
        assert done, f"{self.member_name} did not stop within {timeout}s\n{self.log().summary()}"
        assert self.crash is None, f"{self.member_name} crashed: {self.crash!r}"

    async def halt(self) -> None:
        self.stopping.set()
        if self.task is not None:
            _, pending = await asyncio.wait({self.task}, timeout=30)
            for t in pending:
                t.cancel()


async def read_committed(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int | None]:
    """The group's committed offsets, read by aiokafka itself from outside the group."""
    reader = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    await reader.start()
    try:
        return {p: await reader.committed(TopicPartition(topic, p)) for p in range(partitions)}
    finally:
        await reader.stop()


@pytest.mark.timeout(300)
async def test_aiokafka_group_split_leave_takeover_and_resume(
    broker_factory: BrokerFactory, topic_name: str
) -> None:
    """split_leave_takeover_and_resume (tests/support/groups_in_process.py) with aiokafka members,
    asyncio tasks on the test's loop."""
    await split_leave_takeover_and_resume(
        broker_factory, topic_name, Member, read_committed,
        session_timeout_ms=SESSION_TIMEOUT_MS, label="ak", seed=31,
    )  # fmt: skip


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
