"""Diskless replicas as caches (KIP-1163 "Replicas" and "Consume path"), on three broker processes
in three racks: consumers read from the replica in their own rack, tail reads come from the
local cache logs, caches rebuild after being deleted or after a SIGKILL, and a stopped replica
leaves the ISR (in sync with the Batch Coordinator) and comes back."""

from __future__ import annotations

import os
import shutil
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.conftest import _test_failed
from tests.support.chaos_clients import wait_until
from tests.support.cluster import Cluster
from tests.support.kafka_clients import create_diskless_topic
from tests.support.metrics import Samples, metric

RACKS = ("rack-a", "rack-b", "rack-c")
LAG_MS = 3000


@pytest.fixture
def cluster(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Cluster]:
    c = Cluster(
        tmp_path / "cluster", 3, racks=RACKS,
        overrides={"replica.lag.time.max.ms": LAG_MS, "diskless.append.commit.interval.ms": 50},
    ).start()
    yield c
    if _test_failed(request):
        print(c.log_tails())
    c.close()


def fetch_bytes(m: Samples, source: str) -> float:
    return sum(v for name, labels, v in m if name == "kafka_diskless_fetch_bytes_total" and labels["source"] == source)


def cache_dirs(cluster: Cluster, node_id: int, topic: str) -> list[Path]:
    return sorted(cluster.broker(node_id).log_dir.glob(f"diskless-cache/{topic}-*"))


def in_sync_replicas(cluster: Cluster, topic: str, partition: int = 0, via: int | None = None) -> list[int]:
    md = cluster.wait_for(lambda md: topic in md.topics, f"{topic} in metadata", via=via)
    return sorted(md.topics[topic].partitions[partition].isrs)


def produce(bootstrap: str, topic: str, values: list[bytes], partitions: int = 1) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    for i, v in enumerate(values):
        producer.produce(topic, value=v, partition=i % partitions)
    assert producer.flush(60) == 0


def consume_all(bootstrap: str, topic: str, partitions: int, count: int, rack: str | None, timeout: float = 60) -> list[bytes]:
    from confluent_kafka import Consumer, TopicPartition

    conf = {"bootstrap.servers": bootstrap, "group.id": f"readers-{rack}", "enable.auto.commit": False}
    if rack is not None:
        conf["client.rack"] = rack
    consumer = Consumer(conf)
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    values: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while len(values) < count and time.monotonic() < deadline:
            m = consumer.poll(0.5)
            if m is not None and not m.error():
                values.append(m.value())
    finally:
        consumer.close()
    return values


@pytest.mark.timeout(240)
def test_consumers_read_from_the_cache_replica_in_their_rack(cluster: Cluster) -> None:
    """RF 3 over three racks: each consumer (librdkafka, client.rack set) gets every record in
    order from the broker in its own rack, served from that broker's cache log."""
    topic = "near-cache"
    create_diskless_topic(cluster.bootstrap, topic, partitions=2, replication_factor=3)
    md = cluster.wait_for(lambda md: topic in md.topics, topic)
    assert all(sorted(p.replicas) == [1, 2, 3] for p in md.topics[topic].partitions.values())
    wait_until(lambda: all(len(cache_dirs(cluster, b.node_id, topic)) == 2 for b in cluster.brokers),
               "every broker holding a cache of both partitions", 30)
    values = [f"v-{i}".encode() for i in range(2000)]
    produce(cluster.bootstrap, topic, values, partitions=2)
    wait_until(lambda: in_sync_replicas(cluster, topic) == [1, 2, 3], "every cache in sync", 30)
    for node_id, rack in enumerate(RACKS, start=1):
        before = {b.node_id: cluster.topic_bytes(b.node_id, topic)[1] for b in cluster.brokers}
        got = consume_all(cluster.bootstrap, topic, 2, len(values), rack)
        assert sorted(got) == sorted(values)
        by_partition = [[v for v in got if int(v.split(b"-")[1]) % 2 == p] for p in range(2)]
        assert all(part == sorted(part, key=lambda v: int(v.split(b"-")[1])) for part in by_partition)
        after = {b.node_id: cluster.topic_bytes(b.node_id, topic)[1] for b in cluster.brokers}
        served = {n: after[n] - before[n] for n in after}
        assert served[node_id] > 0 and all(served[n] == 0 for n in served if n != node_id), served
        m = cluster.scrape(node_id)
        assert metric(m, "kafka_diskless_cross_rack_fetch_bytes_total", client_rack=rack) == 0
    for b in cluster.brokers:
        m = cluster.scrape(b.node_id)
        assert fetch_bytes(m, "cache") > 0, b.node_id
        assert metric(m, "kafka_diskless_cache_download_bytes_total") > 0


class SteadyProducer(threading.Thread):
    """An idempotent confluent producer writing ``rate`` records a second to each topic until
    stopped; ``acked`` holds every acknowledged value per topic."""

    def __init__(self, bootstrap: str, topics: list[str], rate: int = 400) -> None:
        super().__init__(daemon=True)
        self.bootstrap, self.topics, self.rate = bootstrap, topics, rate
        self.stop = threading.Event()
        self.acked: dict[str, list[bytes]] = {t: [] for t in topics}
        self._lock = threading.Lock()

    def run(self) -> None:
        from confluent_kafka import Producer

        producer = Producer({"bootstrap.servers": self.bootstrap, "enable.idempotence": True, "linger.ms": 5})
        i = 0
        while not self.stop.is_set():
            for topic in self.topics:
                value = f"{topic}-{i:08d}-".encode() + b"x" * 200

                def done(err: object, msg: object, topic: str = topic, value: bytes = value) -> None:
                    if err is None:
                        with self._lock:
                            self.acked[topic].append(value)

                producer.produce(topic, value=value, on_delivery=done)
            i += 1
            producer.poll(0)
            time.sleep(1 / self.rate)
        assert producer.flush(60) == 0


@pytest.mark.timeout(240)
def test_tail_reads_come_from_the_cache(cluster: Cluster) -> None:
    """A steady producer and a consumer tailing it from its rack: after warm-up more than 90% of
    the bytes come from the cache log. Object GETs per MB consumed are printed beside those of a
    consumer reading the same stream directly (a broker without a replica, through
    ``diskless_rack_id``)."""
    from confluent_kafka import Consumer, TopicPartition

    create_diskless_topic(cluster.bootstrap, "tail", partitions=1, replication_factor=3)
    create_diskless_topic(cluster.bootstrap, "tail-direct", partitions=1, replication_factor=1)
    md = cluster.wait_for(lambda md: "tail-direct" in md.topics, "tail-direct")
    replica = md.topics["tail-direct"].partitions[0].replicas[0]
    direct_node = 1 + (replica % 3)  # another broker: it holds no cache of tail-direct
    wait_until(lambda: in_sync_replicas(cluster, "tail") == [1, 2, 3], "every cache in sync", 30)
    producer = SteadyProducer(cluster.bootstrap, ["tail", "tail-direct"])
    producer.start()
    near = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "tail", "client.rack": RACKS[1],
                     "enable.auto.commit": False, "fetch.wait.max.ms": 200})
    far = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "tail-direct", "enable.auto.commit": False,
                    "client.id": f"tail-direct,diskless_rack_id={RACKS[direct_node - 1]}", "fetch.wait.max.ms": 200})
    near.assign([TopicPartition("tail", 0, 0)])
    far.assign([TopicPartition("tail-direct", 0, 0)])
    got: dict[str, list[bytes]] = {"tail": [], "tail-direct": []}

    def poll_for(seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            for consumer, topic in ((near, "tail"), (far, "tail-direct")):
                m = consumer.poll(0.05)
                if m is not None and not m.error():
                    got[topic].append(m.value())

    try:
        poll_for(3)  # warm-up
        start = {n: cluster.scrape(n) for n in (2, direct_node)}
        poll_for(8)
        end = {n: cluster.scrape(n) for n in (2, direct_node)}
    finally:
        producer.stop.set()
        producer.join(60)
    poll_for(3)
    near.close()
    far.close()

    def delta(node: int, name: str, **labels: str) -> float:
        return metric(end[node], name, **labels) - metric(start[node], name, **labels)

    cached = delta(2, "kafka_diskless_fetch_bytes_total", source="cache", client_rack=RACKS[1])
    direct = delta(2, "kafka_diskless_fetch_bytes_total", source="direct", client_rack=RACKS[1])
    assert cached + direct > 0
    ratio = cached / (cached + direct)
    fill_gets = delta(2, "kafka_diskless_cache_fill_object_gets_total")
    direct_bytes = delta(direct_node, "kafka_diskless_fetch_bytes_total", source="direct", client_rack="")
    direct_gets = delta(direct_node, "kafka_diskless_object_gets_total") - delta(
        direct_node, "kafka_diskless_cache_fill_object_gets_total")
    print(f"cache hit ratio {ratio:.3f}; object GETs per MB: cache fill {fill_gets / (cached / 1e6):.1f}, "
          f"direct reads {direct_gets / max(direct_bytes / 1e6, 1e-9):.1f}")
    assert ratio > 0.9, (cached, direct)
    for topic in ("tail", "tail-direct"):
        assert got[topic] == producer.acked[topic], topic  # every record, in order, once


@pytest.mark.timeout(240)
def test_caches_rebuild_after_deletion_and_sigkill(cluster: Cluster) -> None:
    """Deleting a broker's cache dirs while it runs, and SIGKILLing it and starting it again,
    lose nothing: consumers in its rack read every record, and the cache is built again."""
    topic = "rebuilt"
    create_diskless_topic(cluster.bootstrap, topic, partitions=1, replication_factor=3)
    first = [f"a-{i}".encode() for i in range(500)]
    produce(cluster.bootstrap, topic, first)
    wait_until(lambda: len(cache_dirs(cluster, 3, topic)) == 1, "broker 3's cache", 30)
    for d in cache_dirs(cluster, 3, topic):
        shutil.rmtree(d)
    second = [f"b-{i}".encode() for i in range(500)]
    produce(cluster.bootstrap, topic, second)
    wait_until(lambda: len(cache_dirs(cluster, 3, topic)) == 1, "broker 3's cache rebuilt", 30)
    assert consume_all(cluster.bootstrap, topic, 1, 1000, RACKS[2]) == first + second
    b3 = cluster.broker(3)
    assert b3.proc is not None
    os.kill(b3.proc.pid, signal.SIGKILL)
    b3.proc.wait(30)
    third = [f"c-{i}".encode() for i in range(500)]
    produce(cluster.bootstrap, topic, third)
    b3.start()
    wait_until(lambda: in_sync_replicas(cluster, topic) == [1, 2, 3], "broker 3 back in the ISR", 60)
    assert consume_all(cluster.bootstrap, topic, 1, 1500, RACKS[2]) == first + second + third
    assert metric(cluster.scrape(3), "kafka_diskless_cache_download_bytes_total") > 0
    assert fetch_bytes(cluster.scrape(3), "cache") > 0


@pytest.mark.timeout(240)
def test_a_stopped_replica_leaves_the_isr_and_returns(cluster: Cluster) -> None:
    """SIGSTOP a replica's broker: it leaves the ISR (its cache is no longer in sync with the
    coordinator) while producers and consumers go on through the others; after SIGCONT its cache
    catches up and it is back in the ISR; consumers read every record throughout."""
    topic = "paused"
    create_diskless_topic(cluster.bootstrap, topic, partitions=1, replication_factor=3)
    wait_until(lambda: in_sync_replicas(cluster, topic) == [1, 2, 3], "every cache in sync", 30)
    md = cluster.wait_for(lambda md: topic in md.topics, topic)
    leader = md.topics[topic].partitions[0].leader
    paused = next(b for b in cluster.brokers if b.node_id != leader)
    others = [b for b in cluster.brokers if b is not paused]
    bootstrap = ",".join(b.bootstrap for b in others)
    first = [f"a-{i}".encode() for i in range(300)]
    produce(bootstrap, topic, first)
    cluster.pause(paused.node_id)
    try:
        second = [f"b-{i}".encode() for i in range(300)]
        produce(bootstrap, topic, second)
        wait_until(lambda: paused.node_id not in in_sync_replicas(cluster, topic, via=leader),
                   "the stopped replica leaving the ISR", 30)
        other_rack = RACKS[others[0].node_id - 1]
        assert consume_all(bootstrap, topic, 1, 600, other_rack) == first + second
    finally:
        cluster.resume(paused.node_id)
    third = [f"c-{i}".encode() for i in range(300)]
    produce(cluster.bootstrap, topic, third)
    wait_until(lambda: in_sync_replicas(cluster, topic, via=leader) == [1, 2, 3], "the replica back in the ISR", 60)
    assert consume_all(cluster.bootstrap, topic, 1, 900, RACKS[paused.node_id - 1]) == first + second + third
    m = cluster.scrape(paused.node_id)
    assert metric(m, "kafka_diskless_cache_replica_in_sync", topic=topic, partition="0") == 1


@pytest.mark.timeout(240)
def test_reassigning_a_diskless_partition_builds_caches_and_drops_old_ones(tmp_path: Path) -> None:
    """The classic flow for a diskless partition (KIP-1163): the added replicas build caches
    (from about ``diskless.replica.cache.start.bytes`` before the end), join the ISR once in sync
    with the coordinator, then the old replica leaves and its cache is deleted; reads go on."""
    from kafka import KafkaAdminClient, TopicPartition
    from kafka.admin import NewTopic

    c = Cluster(tmp_path / "cluster", 3, racks=RACKS,
                overrides={"replica.lag.time.max.ms": LAG_MS, "diskless.replica.cache.start.bytes": 20_000}).start()
    admin = KafkaAdminClient(bootstrap_servers=c.bootstrap.split(","), request_timeout_ms=30000)
    try:
        admin.create_topics([NewTopic("moved", num_partitions=-1, replication_factor=-1, replica_assignments={0: [1]},
                                      topic_configs={"diskless.enable": "true"})])
        wait_until(lambda: len(cache_dirs(c, 1, "moved")) == 1, "broker 1's cache", 30)
        values = [f"m-{i:05d}-".encode() + b"y" * 100 for i in range(2000)]
        for chunk in range(0, 2000, 100):  # many batches: a cache starts at a batch boundary
            produce(c.bootstrap, "moved", values[chunk:chunk + 100])
        answer = admin.alter_partition_reassignments({TopicPartition("moved", 0): [2, 3]})
        assert answer == {TopicPartition("moved", 0): None}, answer
        md = c.wait_for(lambda md: sorted(md.topics["moved"].partitions[0].replicas) == [2, 3]
                        and sorted(md.topics["moved"].partitions[0].isrs) == [2, 3], "the reassignment finishing", timeout=60)
        assert md.topics["moved"].partitions[0].leader in (2, 3)
        assert admin.list_partition_reassignments() == {}
        wait_until(lambda: not cache_dirs(c, 1, "moved"), "broker 1 deleting its cache", 30)
        # The new caches started about 20 000 bytes before the end, not at offset 0.
        for node_id in (2, 3):
            starts = [int(p.name.split(".")[0]) for d in cache_dirs(c, node_id, "moved") for p in d.glob("*.log")]
            assert starts and 0 < min(starts) < 2000, (node_id, starts)
        assert consume_all(c.bootstrap, "moved", 1, 2000, RACKS[0]) == values  # older offsets: direct reads
        assert consume_all(c.bootstrap, "moved", 1, 2000, RACKS[1]) == values
    except BaseException:
        print(c.log_tails())
        raise
    finally:
        admin.close()
        c.close()


@pytest.mark.timeout(180)
def test_fill_rounds_of_megabytes_reach_the_caches_intact(cluster: Cluster) -> None:
    """A burst of large records: fill rounds of a megabyte or more copy and append on a worker
    thread (``APPEND_OFF_LOOP_BYTES``) while the broker serves reads; every cache gets every
    batch, and a consumer reading from its rack's cache gets every record, in order."""
    create_diskless_topic(cluster.bootstrap, "burst", partitions=2, replication_factor=3)
    wait_until(lambda: in_sync_replicas(cluster, "burst") == [1, 2, 3], "every cache in sync", 30)
    values = [os.urandom(100_000) for _ in range(120)]  # 12 MB, in rounds of megabytes
    before = cluster.scrape(2)
    produce(cluster.bootstrap, "burst", values, partitions=2)

    def cache_ends() -> list[int]:
        ends = []
        for node in (1, 2, 3):
            for d in cache_dirs(cluster, node, "burst"):
                ends.append(sum(f.stat().st_size for f in d.glob("*.log")))
        return ends

    # Each of the 3 brokers caches both partitions: 6 cache logs holding 12 MB between them x 3.
    wait_until(lambda: len(cache_ends()) == 6 and sum(cache_ends()) >= 3 * 12_000_000, "caches filled", 60)
    got = consume_all(cluster.bootstrap, "burst", 2, len(values), RACKS[1])
    after = cluster.scrape(2)
    assert sorted(got) == sorted(values)
    for p in (0, 1):  # per partition, in produce order
        assert [v for v in got if v in set(values[p::2])] == values[p::2]
    cached = metric(after, "kafka_diskless_fetch_bytes_total", source="cache", client_rack=RACKS[1]) - metric(
        before, "kafka_diskless_fetch_bytes_total", source="cache", client_rack=RACKS[1])
    assert cached >= 12_000_000
