"""Classic replication on three broker processes: replication factor 3, ``min.insync.replicas=2``,
``acks=all``, leader election, and a Jepsen-style fault loop (SIGKILL, SIGSTOP/SIGCONT,
restarts) that counts lost and duplicated acknowledged records.
"""

from __future__ import annotations

import asyncio
import hashlib
import random
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.conftest import _test_failed
from tests.support.chaos_clients import (
    Acks,
    GroupReader,
    run_aiokafka,
    run_confluent,
    run_kafka_python,
    wait_until,
)
from tests.support.cluster import Cluster
from tests.support.kafka_clients import admin_client, confluent_consume
from tests.support.metrics import metric
from tests.support.wire_requests import wire_produce

NOT_ENOUGH_REPLICAS = 19
#: Followers that stop fetching leave the ISR after this long (Kafka's default is 30 s).
LAG_MS = 3000


@pytest.fixture
def cluster(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Cluster]:
    c = Cluster(tmp_path / "cluster", 3, overrides={"replica.lag.time.max.ms": LAG_MS}).start()
    yield c
    if _test_failed(request):
        print(c.log_tails())
    c.close()


def create_replicated_topic(cluster: Cluster, name: str, partitions: int, **configs: str) -> None:
    from confluent_kafka.admin import NewTopic

    admin = admin_client(cluster.bootstrap)
    config = {"min.insync.replicas": "2", **configs}
    admin.create_topics([NewTopic(name, partitions, 3, config=config)], operation_timeout=30)[name].result(30)
    cluster.wait_for(
        lambda md: name in md.topics and all(len(p.isrs) == 3 for p in md.topics[name].partitions.values())
        and len(md.topics[name].partitions) == partitions,
        f"{name} with every replica in sync",
    )


def partition_files(cluster: Cluster, topic: str, partition: int, node_id: int) -> dict[str, str]:
    """Digest of each segment file of the replica on ``node_id``."""
    found = [d for d in cluster.broker(node_id).log_dir.glob(f"{topic}-{partition}") if d.is_dir()]
    assert len(found) == 1, found
    return {f.name: hashlib.sha256(f.read_bytes()).hexdigest() for f in sorted(found[0].glob("*.log"))}


def isrs(cluster: Cluster, topic: str, via: int | None = None) -> dict[int, tuple[int, list[int]]]:
    md = cluster.wait_for(lambda md: topic in md.topics, f"{topic} in metadata", via=via)
    return {p.id: (p.leader, sorted(p.isrs)) for p in md.topics[topic].partitions.values()}


# ------------------------------------------------------------------------------------- tests


@pytest.mark.timeout(240)
def test_rf3_round_trip_with_four_clients_and_byte_equal_replicas(cluster: Cluster) -> None:
    """Records from confluent-kafka, kafka-python, aiokafka and kcat (acks=all) all come back once,
    and after a quiet period every follower's segment files equal the leader's byte for byte."""
    topic = "replicated"
    create_replicated_topic(cluster, topic, 3)
    sent: list[bytes] = []

    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": cluster.bootstrap, "enable.idempotence": True, "acks": "all"})
    errors: list[object] = []
    for i in range(300):
        value = f"confluent-{i}".encode()
        producer.produce(topic, key=str(i).encode(), value=value, on_delivery=lambda e, m: e and errors.append(e))
        sent.append(value)
    assert producer.flush(30) == 0 and not errors, errors

    from kafka import KafkaProducer

    kp = KafkaProducer(bootstrap_servers=cluster.bootstrap.split(","), acks="all", enable_idempotence=True)
    for i in range(300):
        value = f"kafka-python-{i}".encode()
        kp.send(topic, key=str(i).encode(), value=value).get(30)
        sent.append(value)
    kp.close(10)

    async def aio() -> None:
        from aiokafka import AIOKafkaProducer

        ap = AIOKafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all", enable_idempotence=True)
        await ap.start()
        try:
            for i in range(300):
                value = f"aiokafka-{i}".encode()
                await ap.send_and_wait(topic, key=str(i).encode(), value=value)
                sent.append(value)
        finally:
            await ap.stop()

    asyncio.run(aio())

    lines = [f"kcat-{i}" for i in range(300)]
    kcat = subprocess.run(
        ["kcat", "-P", "-b", cluster.bootstrap, "-t", topic, "-X", "acks=all", "-X", "enable.idempotence=true"],
        input="\n".join(lines) + "\n", capture_output=True, text=True, timeout=60,
    )
    assert kcat.returncode == 0, kcat.stderr
    sent += [line.encode() for line in lines]

    received = confluent_consume(cluster.bootstrap, topic, range(3), len(sent), timeout=60)
    counts = Counter(r.value for r in received)
    assert set(counts) == set(sent) and all(n == 1 for n in counts.values())

    def replicas_equal() -> bool:
        return all(
            partition_files(cluster, topic, p, 1) == partition_files(cluster, topic, p, 2)
            == partition_files(cluster, topic, p, 3)
            for p in range(3)
        )

    wait_until(replicas_equal, "followers' segments equal to the leader's", 30)
    assert all(isr == [1, 2, 3] for _, isr in isrs(cluster, topic).values())

    # DeleteRecords on the leader reaches the followers: after the leader stops (its leadership
    # moves by controlled shutdown), the new leader's log starts where the old one's did.
    from confluent_kafka import Consumer, TopicPartition

    admin = admin_client(cluster.bootstrap)
    admin.delete_records([TopicPartition(topic, 0, 100)])[TopicPartition(topic, 0, 100)].result(30)
    time.sleep(1.5)  # a follower fetch or two carry the new log start
    leader, _ = isrs(cluster, topic)[0]
    cluster.broker(leader).stop()
    wait_until(lambda: isrs(cluster, topic)[0][0] not in (leader, -1), "a new leader of partition 0", 30)
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "watermarks"})
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)
    finally:
        consumer.close()
    assert low == 100 and high == sum(1 for r in received if r.partition == 0)


@pytest.mark.timeout(240)
def test_min_insync_replicas_and_isr_shrink_and_expand(cluster: Cluster) -> None:
    """With both followers stopped (SIGSTOP) they leave the ISR: acks=all answers
    NOT_ENOUGH_REPLICAS while acks=1 is taken; continued, they catch up, rejoin the ISR, and
    acks=all is taken again; nothing acknowledged is lost."""
    topic = "min-isr"
    create_replicated_topic(cluster, topic, 1)
    b1, b2, b3 = cluster.brokers
    leader, _ = isrs(cluster, topic)[0]
    leader_broker = cluster.broker(leader)
    followers = [b for b in cluster.brokers if b.node_id != leader]
    assert wire_produce(leader_broker.port, topic, 0, [(b"k", b"before")]) == (0, 0)
    for b in followers:
        cluster.pause(b.node_id)
    try:
        wait_until(
            lambda: isrs(cluster, topic, via=leader)[0][1] == [leader], "the ISR shrinking to the leader", 30
        )
        code, _ = wire_produce(leader_broker.port, topic, 0, [(b"k", b"refused")])
        assert code == NOT_ENOUGH_REPLICAS
        # The metadata image answers Metadata a moment before replication has applied it (as
        # in Kafka, where the MetadataCache is set before ReplicaManager applies the delta).
        wait_until(
            lambda: metric(cluster.scrape(leader), "kafka_server_replicamanager_isrshrinks_total") >= 1,
            "the leader counting the ISR shrink", 10,
        )
        m = cluster.scrape(leader)
        assert metric(m, "kafka_server_replicamanager_underreplicatedpartitions") == 1
        assert metric(m, "kafka_server_replicamanager_underminisrpartitioncount") == 1
        assert metric(m, "kafka_server_replicamanager_leadercount") == 1
        assert wire_produce(leader_broker.port, topic, 0, [(b"k", b"acks-1")], acks=1) == (0, 1)
    finally:
        for b in followers:
            cluster.resume(b.node_id)
    wait_until(lambda: isrs(cluster, topic, via=leader)[0][1] == [1, 2, 3], "the followers rejoining the ISR", 60)
    assert wire_produce(leader_broker.port, topic, 0, [(b"k", b"after")]) == (0, 2)
    wait_until(
        lambda: metric(cluster.scrape(leader), "kafka_server_replicamanager_isrexpands_total") >= 1,
        "the leader counting the ISR expansion", 10,
    )
    assert metric(cluster.scrape(leader), "kafka_server_replicamanager_underreplicatedpartitions") == 0
    assert sum(metric(cluster.scrape(b.node_id), "kafka_server_replicamanager_partitioncount") for b in cluster.brokers) == 3
    values = [r.value for r in confluent_consume(cluster.bootstrap, topic, [0], 3, timeout=30)]
    assert values == [b"before", b"acks-1", b"after"]
    wait_until(
        lambda: partition_files(cluster, topic, 0, b1.node_id) == partition_files(cluster, topic, 0, b2.node_id)
        == partition_files(cluster, topic, 0, b3.node_id),
        "followers equal to the leader again", 30,
    )


@pytest.mark.timeout(360)
def test_jepsen_queue_under_sigkill_sigstop_and_restarts(cluster: Cluster) -> None:
    """Three idempotent acks=all producers and a committing consumer group while a fault loop
    SIGKILLs, SIGSTOPs/SIGCONTs and restarts brokers for a bounded time: zero lost acknowledged
    writes, zero duplicates, no offset holding two different records, no consumer seeing offsets
    go backwards within an assignment."""
    topic, group, partitions = "queue", "queue-readers", 6
    create_replicated_topic(cluster, topic, partitions)
    producers = [Acks("confluent"), Acks("kafka-python"), Acks("aiokafka")]
    stop = threading.Event()
    threads = [
        threading.Thread(target=run, args=(cluster.bootstrap, acks, stop, topic), daemon=True)
        for run, acks in zip((run_confluent, run_kafka_python, run_aiokafka), producers, strict=True)
    ]
    seen: Counter[bytes] = Counter()
    seen_lock = threading.Lock()
    readers = [GroupReader(cluster.bootstrap, seen, seen_lock, topic, group) for _ in range(2)]
    for t in [*threads, *readers]:
        t.start()
    rng = random.Random(1414)
    faults: list[str] = []
    try:
        time.sleep(3)
        deadline = time.monotonic() + 45
        while time.monotonic() < deadline:
            victim = rng.choice(cluster.brokers)
            if rng.random() < 0.5:
                faults.append(f"SIGKILL {victim.node_id}")
                victim.kill()
                time.sleep(rng.uniform(1, 4))
                victim.start()
            else:
                faults.append(f"SIGSTOP {victim.node_id}")
                cluster.pause(victim.node_id)
                time.sleep(rng.uniform(1, 4))
                cluster.resume(victim.node_id)
            time.sleep(rng.uniform(2, 4))
        cluster.wait_for(lambda md: len(md.brokers) == 3, "every broker back")
        wait_until(
            lambda: all(isr == [1, 2, 3] for _, isr in isrs(cluster, topic).values()), "every replica in sync", 90
        )
    finally:
        stop.set()
        for t in threads:
            t.join(150)
    assert not any(t.is_alive() for t in threads), "a producer did not finish"
    acked = Counter(v for p in producers for v in p.acked)
    failed = [f for p in producers for f in p.failed]
    received = confluent_consume(cluster.bootstrap, topic, range(partitions), sum(acked.values()), timeout=120)
    in_topic = Counter(r.value for r in received)
    lost = [v for v in acked if v not in in_topic]
    doubled = [v for v, n in in_topic.items() if n > 1]
    final = {(r.partition, r.offset): r.value for r in received}
    wait_until(lambda: all(v in seen for v in in_topic), "the group reading every record", 90)
    for r in readers:
        r.stop.set()
    for r in readers:
        r.join(60)
    two_records = [k for reader in readers for k, v in reader.read_at.items() if k in final and final[k] != v]
    backwards = [b for reader in readers for b in reader.backwards]
    print(
        f"faults: {', '.join(faults)}\nacknowledged {sum(acked.values())}, failed {len(failed)}, "
        f"lost {len(lost)}, duplicated {len(doubled)}, offsets with two records {len(two_records)}, "
        f"offsets going backwards {len(backwards)}"
    )
    assert all(len(p.acked) > 100 for p in producers), {p.name: len(p.acked) for p in producers}
    assert not lost, f"{len(lost)} acknowledged records lost, e.g. {lost[:5]}"
    assert not doubled, f"{len(doubled)} records written twice, e.g. {doubled[:5]}"
    assert not two_records, f"offsets that held two different records: {two_records[:5]}"
    assert not backwards, backwards[:5]
    for p in range(partitions):
        offsets = sorted(r.offset for r in received if r.partition == p)
        assert offsets == list(range(len(offsets))), f"partition {p} has gaps"


@pytest.mark.timeout(180)
def test_follower_fetching_sends_a_consumer_to_a_replica_in_its_rack(tmp_path: Path) -> None:
    """KIP-392: with the rack-aware replica selector, a consumer with ``client.rack`` r3 reading
    partitions led elsewhere is sent (PreferredReadReplica) to broker 3, its rack's in-sync replica,
    and reads every record from it."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    selector = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
    c = Cluster(tmp_path / "racks", 3, racks=("r1", "r2", "r3"), overrides={"replica.selector.class": selector})
    c.start()
    try:
        create_replicated_topic(c, "near", 3)
        leaders = {p: leader for p, (leader, _) in isrs(c, "near").items()}
        far = [p for p, leader in leaders.items() if leader != 3]
        producer = Producer({"bootstrap.servers": c.bootstrap, "acks": "all", "enable.idempotence": True})
        for i in range(600):
            producer.produce("near", value=f"near-{i}".encode(), partition=i % 3)
        assert producer.flush(30) == 0
        consumer = Consumer({
            "bootstrap.servers": c.bootstrap, "group.id": "near-readers", "client.rack": "r3",
            "enable.auto.commit": False,
        })
        consumer.assign([TopicPartition("near", p, 0) for p in far])
        values: list[bytes] = []
        deadline = time.monotonic() + 60
        while len(values) < 200 * len(far) and time.monotonic() < deadline:
            m = consumer.poll(0.5)
            if m is not None and not m.error():
                values.append(m.value())
        consumer.close()
        assert sorted(values) == sorted(f"near-{i}".encode() for i in range(600) if i % 3 in far)
        _, bytes_out = c.topic_bytes(3, "near")
        assert bytes_out > 0, "broker 3 (the consumer's rack) served none of the reads"
        assert all(c.topic_bytes(leaders[p], "near")[1] == 0 for p in far), "a leader in another rack served reads"
    except BaseException:
        print(c.log_tails())
        raise
    finally:
        c.close()
