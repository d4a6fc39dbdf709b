"""Kafka's LogDirFailureTest on a Shoal cluster: three brokers with two log dirs each, one of
broker 1's on a disk that starts answering EIO (tests/support/failfs.py) under load. Broker 1
stays up, its replicas on the dead disk are reported offline (Metadata's OfflineReplicas on every
broker, out of the ISR), their leaderships move to other in-sync replicas, every acknowledged
record is consumed, and the partitions keep taking writes with acks=all and min.insync.replicas=2.
"""

from __future__ import annotations

import hashlib
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.conftest import _test_failed
from tests.integration.test_jbod import effective_properties
from tests.support.broker import BrokerProcess, run_shoal
from tests.support.chaos_clients import Acks, run_confluent, wait_until
from tests.support.cluster import Cluster
from tests.support.failfs import FailingDisk
from tests.support.kafka_clients import admin_client, confluent_consume
from tests.support.wire_requests import wire_offline_replicas

TOPIC = "jbod-replicated"
PARTITIONS = 6


@pytest.fixture
def cluster(tmp_path: Path, failing_disk: FailingDisk, request: pytest.FixtureRequest) -> Iterator[Cluster]:
    c = Cluster(tmp_path / "cluster", 3, overrides={"replica.lag.time.max.ms": 3000})
    for b in c.brokers:
        dirs = [b.data_dir / "disk-a", b.data_dir / "disk-b"]
        if b.node_id == 1:
            dirs[1] = failing_disk.mount_point
        b.overrides["log.dirs"] = ",".join(str(d) for d in dirs)
    failing_disk.before_unmount.append(c.broker(1).close)
    c.start()
    yield c
    if _test_failed(request):
        print(c.log_tails())
    c.close()


def segment_digests(broker: BrokerProcess, partition: int) -> dict[str, str]:
    """Segment file digests of ``partition`` in whichever of the broker's log dirs holds it."""
    dirs = [Path(d) for d in broker.overrides["log.dirs"].split(",")]
    found = [d / f"{TOPIC}-{partition}" for d in dirs if (d / f"{TOPIC}-{partition}").is_dir()]
    assert len(found) == 1, found
    return {f.name: hashlib.sha256(f.read_bytes()).hexdigest() for f in sorted(found[0].glob("*.log"))}


def replicas_on(log_dir: Path) -> set[int]:
    return {int(d.name.rsplit("-", 1)[1]) for d in log_dir.glob(f"{TOPIC}-*") if d.is_dir()}


@pytest.mark.timeout(300)
def test_a_failed_log_dir_moves_leaders_and_loses_no_acknowledged_record(
    cluster: Cluster, failing_disk: FailingDisk
) -> None:
    from confluent_kafka.admin import NewTopic

    admin = admin_client(cluster.bootstrap)
    admin.create_topics(
        [NewTopic(TOPIC, PARTITIONS, 3, config={"min.insync.replicas": "2"})], operation_timeout=30
    )[TOPIC].result(30)
    md = cluster.wait_for(
        lambda md: TOPIC in md.topics and all(len(p.isrs) == 3 for p in md.topics[TOPIC].partitions.values()),
        "every replica in sync",
    )
    doomed = replicas_on(failing_disk.mount_point)
    assert doomed and len(doomed) < PARTITIONS, f"broker 1's replicas not spread over its dirs: {doomed}"
    led_by_1 = {p for p, part in md.topics[TOPIC].partitions.items() if part.leader == 1}

    acks, stop = Acks("confluent"), threading.Event()
    producer = threading.Thread(target=run_confluent, args=(cluster.bootstrap, acks, stop, TOPIC), daemon=True)
    producer.start()
    try:
        wait_until(lambda: len(acks.acked) > 2000, "records acknowledged before the failure", 60)
        failing_disk.fail()
        # Broker 1 learns of the failure at its next I/O there (the replicated writes).
        for b in cluster.brokers:
            wait_until(
                lambda b=b: wire_offline_replicas(b.port, TOPIC) == dict.fromkeys(doomed, (1,)),
                f"broker {b.node_id} listing broker 1's replicas on the dead disk as offline", 60,
            )
        md = cluster.wait_for(
            lambda md: all(
                (p.leader != 1 and 1 not in p.isrs) if p.id in doomed else len(p.isrs) == 3
                for p in md.topics[TOPIC].partitions.values()
            ),
            "leaderships moved off the dead disk, its replicas out of the ISR",
        )
        at_failure = len(acks.acked)
        wait_until(lambda: len(acks.acked) > at_failure + 3000, "writes going on after the failure", 90)
        assert cluster.broker(1).is_running(), "broker 1 stopped when one of its two log dirs failed"
    finally:
        stop.set()
        producer.join(150)
    assert not producer.is_alive()
    assert not acks.failed, acks.failed[:5]
    received = confluent_consume(cluster.bootstrap, TOPIC, range(PARTITIONS), len(acks.acked), timeout=120)
    in_topic = Counter(r.value for r in received)
    lost = [v for v in acks.acked if v not in in_topic]
    doubled = [v for v, n in in_topic.items() if n > 1]
    print(
        f"dead disk held {sorted(doomed)} (broker 1 led {sorted(led_by_1)}); acknowledged {len(acks.acked)}, "
        f"lost {len(lost)}, duplicated {len(doubled)}"
    )
    assert not lost and not doubled

    # The disk is replaced by an empty one and the operator resets the dir: broker 1 re-creates
    # those replicas empty, copies them back from the leaders and rejoins every ISR.
    b1 = cluster.broker(1)
    b1.stop()
    failing_disk.unmount()
    reset = run_shoal("log-dirs", "reset", "--dir", str(failing_disk.mount_point), "--config",
                      str(effective_properties(b1)))
    assert reset.returncode == 0, reset
    b1.start()
    cluster.wait_for(
        lambda md: all(sorted(p.isrs) == [1, 2, 3] for p in md.topics[TOPIC].partitions.values()),
        "broker 1 back in every ISR", timeout=60,
    )
    for b in cluster.brokers:
        wait_until(lambda b=b: wire_offline_replicas(b.port, TOPIC) == {}, f"no offline replica on broker {b.node_id}", 30)

    def rebuilt() -> bool:
        return all(
            segment_digests(b1, p) == segment_digests(cluster.broker(2), p) == segment_digests(cluster.broker(3), p)
            for p in doomed
        )

    wait_until(rebuilt, "the rebuilt replicas equal to the others", 60)
