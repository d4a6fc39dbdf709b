"""Consumer groups (the classic protocol) through kafka-python 3.0.

Each member runs `poll()` in its own thread (a member's JoinGroup waits for the others to
rejoin, so two members can't share one polling thread) and records what it did in an
`EventRecorder`; it commits synchronously after each batch.
"""

from __future__ import annotations

import asyncio
import threading
import uuid

import pytest
from kafka import ConsumerRebalanceListener, KafkaConsumer, OffsetAndMetadata, TopicPartition
from kafka.errors import KafkaError, KafkaTimeoutError, UnknownTopicOrPartitionError

from tests.integration.conftest import BrokerFactory
from tests.support.groups import FAST_GROUP_OVERRIDES
from tests.support.groups_in_process import (
    InProcessMember,
    RecordingListener,
    split_leave_takeover_and_resume,
)
from tests.support.kafka_clients import confluent_consume, confluent_produce, create_diskless_topic
from tests.support.workload import make_workload

SESSION_TIMEOUT_MS = 10000


class _Listener(RecordingListener, ConsumerRebalanceListener):
    pass


class Member(InProcessMember, threading.Thread):
    """A kafka-python group member: subscribe, poll, process, commit synchronously."""

    def __init__(self, name: str, bootstrap: str, topic: str, group: str) -> None:
        threading.Thread.__init__(self, name=f"member-{name}", daemon=True)
        InProcessMember.__init__(self, name, bootstrap, topic, group, session_timeout_ms=SESSION_TIMEOUT_MS)
        self.stopping = threading.Event()

    def run(self) -> None:
        try:
            consumer = KafkaConsumer(**self.consumer_config(), max_poll_records=100)
        except BaseException as exc:
            self.crash = exc
            return
        try:
            # kafka-python 3.0.12 can orphan a rejoin: when poll() times out mid-join and by the
            # next poll need_rejoin() is False, the in-flight SyncGroup result is never applied and
            # the member stays "rebalancing" without heartbeats until its session expires (seen
            # here; the broker answered every request). The leader rejoins once when its metadata
            # snapshot (built only for subscribed topics, so empty before the first metadata
            # answer after subscribe) changes under its first assignment. A poll timeout far
            # above a join's length (bounded by the other members' 1 s heartbeats) keeps every
            # join inside one poll; poll() still returns as soon as records arrive.
            consumer.partitions_for_topic(self.topic)
            consumer.subscribe([self.topic], listener=_Listener(self.rec))
            self.rec.add("S", text="subscribed")
            while not self.stopping.is_set():
                batch = consumer.poll(timeout_ms=5000)
                offsets = self.processed(batch)
                if offsets:
                    try:
                        consumer.commit(
                            {tp: OffsetAndMetadata(o, "", -1) for tp, o in offsets.items()}, timeout_ms=30000
                        )
                    except KafkaError as exc:
                        self.rec.error(f"commit failed: {exc!r}")
                    else:
                        self.committed(offsets)
        except BaseException as exc:
            self.crash = exc
            self.rec.error(f"crashed: {exc!r}")
        finally:
            try:
                consumer.close(autocommit=False, timeout_ms=15000)  # sends LeaveGroup
            except BaseException as exc:
                self.crash = self.crash or exc
            self.rec.add("X", text="closed")

    async def stop(self, timeout: float = 60.0) -> None:
        self.stopping.set()
        await asyncio.to_thread(self.join, timeout)
        assert not self.is_alive(), (
            f"{self.member_name} did not close within {timeout}s\n{self.log().summary()}"
        )
        assert self.crash is None, f"{self.member_name} crashed: {self.crash!r}"

    async def halt(self) -> None:
        self.stopping.set()
        if self.is_alive():
            await asyncio.to_thread(self.join, 30)


async def read_committed(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int | None]:
    """The group's committed offsets, read by kafka-python itself from outside the group."""

    def read() -> dict[int, int | None]:
        reader = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
        try:
            return {p: reader.committed(TopicPartition(topic, p), timeout_ms=30000) for p in range(partitions)}
        finally:
            reader.close(autocommit=False)

    return await asyncio.to_thread(read)


@pytest.mark.timeout(300)
async def test_kafka_python_group_split_leave_takeover_and_resume(
    broker_factory: BrokerFactory, topic_name: str
) -> None:
    """The scenario of tests/support/groups_in_process.py with kafka-python members: two split 4
    partitions, one closes (LeaveGroup), the other takes over, a fresh one resumes from the commits;
    every record processed exactly once."""
    await split_leave_takeover_and_resume(
        broker_factory, topic_name, Member, read_committed,
        session_timeout_ms=SESSION_TIMEOUT_MS, label="kp", seed=21, null_headers=False,
    )  # fmt: skip


@pytest.mark.timeout(180)
def test_kafka_python_commit_to_missing_partition_and_committed_of_unknown_group(
    broker_factory: BrokerFactory, topic_name: str
) -> None:
    partitions = 4
    broker = broker_factory(overrides=FAST_GROUP_OVERRIDES)
    create_diskless_topic(broker.bootstrap, topic_name, partitions=partitions)
    sent = make_workload(40, partitions, "kp-bad", seed=24, null_headers=False)
    confluent_produce(broker.bootstrap, topic_name, sent)

    unknown = KafkaConsumer(
        bootstrap_servers=broker.bootstrap,
        group_id=f"never-used-{uuid.uuid4().hex[:8]}",
        enable_auto_commit=False,
    )
    try:
        got = {
            p: unknown.committed(TopicPartition(topic_name, p), timeout_ms=30000) for p in range(partitions)
        }
        assert got == dict.fromkeys(range(partitions)), f"committed() of an unknown group: {got}"
    finally:
        unknown.close(autocommit=False)

    group = f"grp-{topic_name}"
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=group, enable_auto_commit=False)
    try:
        # kafka-python retries UNKNOWN_TOPIC_OR_PARTITION (a retriable error) until timeout_ms.
        with pytest.raises((UnknownTopicOrPartitionError, KafkaTimeoutError)):
            consumer.commit({TopicPartition(topic_name, 99): OffsetAndMetadata(5, "", -1)}, timeout_ms=5000)
        try:
            missing = consumer.committed(TopicPartition(topic_name, 99), timeout_ms=10000)
        except UnknownTopicOrPartitionError:
            missing = None
        assert missing is None, f"committed() for the missing partition: {missing}"
        consumer.commit({TopicPartition(topic_name, 1): OffsetAndMetadata(4, "", -1)}, timeout_ms=30000)
        assert consumer.committed(TopicPartition(topic_name, 1), timeout_ms=30000) == 4
    finally:
        consumer.close(autocommit=False)

    more = make_workload(20, partitions, "kp-bad-after", seed=25, first_seq=len(sent))
    confluent_produce(broker.bootstrap, topic_name, more)
    assert (
        len(confluent_consume(broker.bootstrap, topic_name, range(partitions), len(sent) + len(more))) == 60
    )
    assert broker.is_running()
