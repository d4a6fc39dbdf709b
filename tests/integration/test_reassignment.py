"""Partition reassignment (KIP-455) on four broker processes, driven by kafka-python's admin client
(AlterPartitionReassignments / ListPartitionReassignments): replicas {1,2,3} move to {2,3,4}
while an acks=all producer writes, losing nothing; a reassignment that cannot finish is listed
and cancelled, and the replicas it added are deleted.
"""

from __future__ import annotations

import hashlib
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.conftest import _test_failed
from tests.support.chaos_clients import Acks, run_confluent, wait_until
from tests.support.cluster import Cluster
from tests.support.kafka_clients import admin_client, confluent_consume

TOPIC = "moving"


@pytest.fixture
def cluster(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Cluster]:
    c = Cluster(tmp_path / "cluster", 4, overrides={"replica.lag.time.max.ms": 3000}).start()
    yield c
    if _test_failed(request):
        print(c.log_tails())
    c.close()


def kafka_python_admin(cluster: Cluster):  # noqa: ANN201
    from kafka import KafkaAdminClient

    return KafkaAdminClient(bootstrap_servers=cluster.bootstrap.split(","), request_timeout_ms=30000)


def replicas_of(cluster: Cluster, partition: int = 0) -> tuple[list[int], list[int]]:
    md = cluster.wait_for(lambda md: TOPIC in md.topics, "topic in metadata")
    p = md.topics[TOPIC].partitions[partition]
    return list(p.replicas), sorted(p.isrs)


def segments(cluster: Cluster, node_id: int) -> dict[str, str] | None:
    d = cluster.broker(node_id).log_dir / f"{TOPIC}-0"
    if not d.is_dir():
        return None
    return {f.name: hashlib.sha256(f.read_bytes()).hexdigest() for f in sorted(d.glob("*.log"))}


def create_on(cluster: Cluster, replicas: list[int]) -> None:
    from kafka.admin import NewTopic

    admin = kafka_python_admin(cluster)
    try:
        admin.create_topics([
            NewTopic(TOPIC, num_partitions=-1, replication_factor=-1, replica_assignments={0: replicas},
                     topic_configs={"min.insync.replicas": "2"})
        ])
    finally:
        admin.close()
    wait_until(lambda: replicas_of(cluster) == (replicas, sorted(replicas)), "every replica in sync", 30)


@pytest.mark.timeout(240)
def test_reassign_1_2_3_to_2_3_4_while_producing(cluster: Cluster) -> None:
    from kafka import TopicPartition

    create_on(cluster, [1, 2, 3])
    acks, stop = Acks("confluent"), threading.Event()
    producer = threading.Thread(target=run_confluent, args=(cluster.bootstrap, acks, stop, TOPIC), daemon=True)
    producer.start()
    admin = kafka_python_admin(cluster)
    try:
        wait_until(lambda: len(acks.acked) > 2000, "records acknowledged before the move", 60)
        answer = admin.alter_partition_reassignments({TopicPartition(TOPIC, 0): [2, 3, 4]})
        assert answer == {TopicPartition(TOPIC, 0): None}, answer
        wait_until(lambda: replicas_of(cluster) == ([2, 3, 4], [2, 3, 4]), "the reassignment finishing", 90)
        assert admin.list_partition_reassignments() == {}
        at_move = len(acks.acked)
        wait_until(lambda: len(acks.acked) > at_move + 1000, "writes going on after the move", 60)
    finally:
        stop.set()
        producer.join(150)
        admin.close()
    assert not acks.failed, acks.failed[:5]
    wait_until(lambda: segments(cluster, 1) is None, "broker 1 deleting its replica", 30)
    wait_until(
        lambda: segments(cluster, 4) == segments(cluster, 2) == segments(cluster, 3), "broker 4 equal to the others", 30
    )
    received = confluent_consume(cluster.bootstrap, TOPIC, [0], len(acks.acked), timeout=90)
    in_topic = Counter(r.value for r in received)
    lost = [v for v in acks.acked if v not in in_topic]
    assert not lost and all(n == 1 for n in in_topic.values()), (len(lost), len(acks.acked))
    assert [r.offset for r in received] == list(range(len(received)))


@pytest.mark.timeout(240)
def test_a_reassignment_in_progress_is_listed_and_cancelled(cluster: Cluster) -> None:
    from kafka import KafkaAdminClient, TopicPartition

    create_on(cluster, [1, 2, 3])
    tp = TopicPartition(TOPIC, 0)
    # Not bootstrapped on broker 4, and the controller looked up before it is paused: a request the
    # client sends to a paused broker would only time out.
    admin = KafkaAdminClient(bootstrap_servers=[cluster.broker(n).bootstrap for n in (1, 2, 3)],
                             request_timeout_ms=30000)
    try:
        assert admin.list_partition_reassignments() == {}
        cluster.pause(4)  # broker 4 cannot catch up: the reassignment stays open
        try:
            assert admin.alter_partition_reassignments({tp: [1, 2, 4]}) == {tp: None}
            listed = admin.list_partition_reassignments()
            assert listed == {tp: {"replicas": [1, 2, 4, 3], "adding_replicas": [4], "removing_replicas": [3]}}
            assert admin.alter_partition_reassignments({tp: None}) == {tp: None}
            assert admin.list_partition_reassignments() == {}
            answer = admin.alter_partition_reassignments({tp: None})
            assert answer[tp].__name__ == "NoReassignmentInProgressError", answer
            bad = admin.alter_partition_reassignments({tp: [1, 1, 9]})
            assert bad[tp].__name__ == "InvalidReplicationAssignmentError", bad
        finally:
            cluster.resume(4)
        wait_until(lambda: replicas_of(cluster) == ([1, 2, 3], [1, 2, 3]), "the original replicas", 30)
        wait_until(lambda: segments(cluster, 4) is None, "broker 4 deleting the replica it was given", 30)
    finally:
        admin.close()


@pytest.mark.timeout(240)
def test_a_throttled_reassignment_copies_at_the_throttled_rate(cluster: Cluster) -> None:
    """kafka-reassign-partitions --throttle: dynamic broker configs
    ``leader/follower.replication.throttled.rate`` and the topic's throttled replicas slow the copy
    to the new replica down to the rate; without them it copies at full speed."""
    import time

    from confluent_kafka import Producer
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType
    from kafka import TopicPartition

    create_on(cluster, [1, 2])
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 20})
    for _ in range(2000):
        producer.produce(TOPIC, value=b"x" * 1000, partition=0)
    assert producer.flush(60) == 0
    rate = 200_000  # bytes/s: 2 MB take about 10 s
    admin = admin_client(cluster.bootstrap)
    set_ = AlterConfigOpType.SET
    changes = [
        ConfigResource(ResourceType.BROKER, str(b.node_id), incremental_configs=[
            ConfigEntry("leader.replication.throttled.rate", str(rate), incremental_operation=set_),
            ConfigEntry("follower.replication.throttled.rate", str(rate), incremental_operation=set_),
        ])
        for b in cluster.brokers
    ] + [
        ConfigResource(ResourceType.TOPIC, TOPIC, incremental_configs=[
            ConfigEntry("leader.replication.throttled.replicas", "*", incremental_operation=set_),
            ConfigEntry("follower.replication.throttled.replicas", "*", incremental_operation=set_),
        ]),
    ]
    for change in changes:  # librdkafka sends one BROKER resource per call
        for future in admin.incremental_alter_configs([change]).values():
            future.result(30)
    described = admin.describe_configs([ConfigResource(ResourceType.BROKER, "1")])
    entry = next(iter(described.values())).result()["leader.replication.throttled.rate"]
    assert entry.value == str(rate) and not entry.is_read_only, entry
    kp = kafka_python_admin(cluster)
    try:
        started = time.monotonic()
        assert kp.alter_partition_reassignments({TopicPartition(TOPIC, 0): [1, 2, 3]}) == {TopicPartition(TOPIC, 0): None}
        wait_until(lambda: replicas_of(cluster) == ([1, 2, 3], [1, 2, 3]), "the throttled reassignment finishing", 120)
        took = time.monotonic() - started
    finally:
        kp.close()
    # At most the rate (and a second's burst): 2 MB cannot arrive in less than ~9 s.
    assert took > 2_000_000 / rate * 0.8, f"the throttled copy took only {took:.1f} s"
    print(f"2 MB copied under a {rate} B/s throttle in {took:.1f} s")
