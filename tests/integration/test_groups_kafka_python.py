"""Consumer groups (the classic protocol) through kafka-python 3.0.

Each member runs `poll()` in its own thread (a member's JoinGroup waits for the others to
rejoin, so two members can't share one polling thread) and records what it did in an
`EventRecorder`; it commits synchronously after each batch.
"""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

import pytest
from kafka import ConsumerRebalanceListener, KafkaConsumer, OffsetAndMetadata, TopicPartition
from kafka.errors import KafkaError, KafkaTimeoutError, UnknownTopicOrPartitionError

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
    wait_until,
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

    def on_partitions_lost(self, lost: Any) -> None:
        self.rec.lost(tp.partition for tp in lost)


class Member(threading.Thread):
    """A kafka-python group member: subscribe, poll, process, commit synchronously."""

    def __init__(self, name: str, bootstrap: str, topic: str, group: str) -> None:
        super().__init__(name=f"member-{name}", daemon=True)
        self.member_name, self.bootstrap, self.topic, self.group = name, bootstrap, topic, group
        self.rec = EventRecorder()
        self.stopping = threading.Event()
        self.crash: BaseException | None = None

    def log(self) -> ConsumerLog:
        return ConsumerLog(self.member_name, self.rec.events())

    def run(self) -> None:
        try:
            consumer = KafkaConsumer(
                bootstrap_servers=self.bootstrap,
                client_id=self.member_name,
                group_id=self.group,
                enable_auto_commit=False,
                auto_offset_reset="earliest",
                session_timeout_ms=SESSION_TIMEOUT_MS,
                heartbeat_interval_ms=1000,
                max_poll_records=100,
                request_timeout_ms=30000,
            )
        except BaseException as exc:
            self.crash = exc
            return
        try:
            # Topic metadata first. Otherwise the leader may compute the first assignment without
            # it, must rejoin once it arrives, and kafka-python 3.0.12 can orphan that rejoin:
            # when a poll() times out mid-join and the leader's assignment snapshot has caught
            # up by the next poll, need_rejoin() is False, the in-flight SyncGroup result is
            # never applied and the member stays "rebalancing" without heartbeats until its
            # session expires (seen here; the broker answered every request).
            consumer.partitions_for_topic(self.topic)
            consumer.subscribe([self.topic], listener=_Listener(self.rec))
            self.rec.add("S", text="subscribed")
            while not self.stopping.is_set():
                batch = consumer.poll(timeout_ms=1000)  # long enough for a join to finish inside it
                offsets: dict[TopicPartition, OffsetAndMetadata] = {}
                for tp, records in batch.items():
                    for r in records:
                        self.rec.processed(r.partition, r.offset, _seq(r.headers))
                        offsets[tp] = OffsetAndMetadata(r.offset + 1, "", -1)
                if offsets:
                    try:
                        consumer.commit(offsets, timeout_ms=30000)
                    except KafkaError as exc:
                        self.rec.error(f"commit failed: {exc!r}")
                    else:
                        for tp, om in offsets.items():
                            self.rec.committed(tp.partition, om.offset)
        except BaseException as exc:
            self.crash = exc
            self.rec.error(f"crashed: {exc!r}")
        finally:
            try:
                consumer.close(autocommit=False, timeout_ms=15000)  # sends LeaveGroup
            except BaseException as exc:
                self.crash = self.crash or exc
            self.rec.add("X", text="closed")

    def stop(self, timeout: float = 60.0) -> None:
        self.stopping.set()
        self.join(timeout)
        assert not self.is_alive(), (
            f"{self.member_name} did not close within {timeout}s\n{self.log().summary()}"
        )
        assert self.crash is None, f"{self.member_name} crashed: {self.crash!r}"


@pytest.mark.timeout(300)
def test_kafka_python_group_split_leave_takeover_and_resume(
    broker_factory: BrokerFactory, topic_name: str
) -> None:
    """Two members split 4 partitions; one closes (LeaveGroup) and the other takes all four and
    processes what is produced next; a fresh member resumes exactly from the committed offsets.
    Every record is processed exactly once."""
    partitions = 4
    broker = broker_factory(overrides=FAST_GROUP_OVERRIDES)
    create_diskless_topic(broker.bootstrap, topic_name, partitions=partitions)
    group = f"grp-{topic_name}"
    sent1 = make_workload(1000, partitions, "kp1", seed=21, null_headers=False)
    confluent_produce(broker.bootstrap, topic_name, sent1)
    expected = expected_from_sent(sent1)

    c1 = Member("c1", broker.bootstrap, topic_name, group)
    c2 = Member("c2", broker.bootstrap, topic_name, group)
    c3 = Member("c3", broker.bootstrap, topic_name, group)
    everyone = [c1, c2, c3]

    def describe() -> str:
        return describe_logs(m.log() for m in everyone) + "".join(
            f"\n  {m.member_name} crashed: {m.crash!r}" for m in everyone if m.crash
        )

    try:
        c1.start()
        c2.start()
        wait_until(
            lambda: balanced([c1.log(), c2.log()], partitions, each=2), 90, "c1 and c2 with 2 each", describe
        )
        ends = end_offsets(expected, partitions)
        wait_until(lambda: last_commits([c1.log(), c2.log()]) == ends, 60, f"committing {ends}", describe)

        c1.stop()
        left = time.monotonic()
        took = wait_until(
            lambda: c2.log().assignment == set(range(partitions)),
            SESSION_TIMEOUT_MS / 1000 + 30,
            "c2 taking every partition after c1 left",
            describe,
        )
        print(f"\ntakeover {took:.1f}s after c1 closed")
        sent2 = make_workload(1000, partitions, "kp2", seed=22, null_headers=False, first_seq=len(sent1))
        confluent_produce(broker.bootstrap, topic_name, sent2)
        expected = merge_expected(expected, expected_from_sent(sent2, ends))
        ends = end_offsets(expected, partitions)
        wait_until(lambda: last_commits([c2.log()]) == ends, 60, f"c2 committing {ends}", describe)
        assert {ev.partition for ev in c2.log().processed if ev.t > left} == set(range(partitions))
        c2.stop()

        # The committed offsets, read by kafka-python itself from outside the group.
        reader = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=group, enable_auto_commit=False)
        try:
            committed = {
                p: reader.committed(TopicPartition(topic_name, p), timeout_ms=30000)
                for p in range(partitions)
            }
        finally:
            reader.close(autocommit=False)
        assert committed == ends

        sent3 = make_workload(
            1000, partitions, "kp3", seed=23, null_headers=False, first_seq=len(sent1) + len(sent2)
        )
        confluent_produce(broker.bootstrap, topic_name, sent3)
        expected = merge_expected(expected, expected_from_sent(sent3, ends))
        ends = end_offsets(expected, partitions)
        c3.start()
        wait_until(lambda: last_commits([c3.log()]) == ends, 90, f"fresh c3 committing {ends}", describe)
        c3.stop()
        counts = check_group_consumption([m.log() for m in everyone], expected, allow_duplicates=False)
        print(f"consumption: {counts}")
    finally:
        for m in everyone:
            m.stopping.set()
        for m in everyone:
            if m.is_alive():
                m.join(30)


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
