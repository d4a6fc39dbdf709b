"""Kafka's unclean leader election scenario on three broker processes, one partition replicated on
brokers {1, 2} with ``min.insync.replicas=1``: records acknowledged (acks=all) while both are in
sync; then the follower (2) stops (SIGSTOP) and leaves the ISR, and records acknowledged by the
leader (1) alone exist only there; then the leader dies (SIGKILL) and the follower comes back.

- ``unclean.leader.election.enable`` off (the default): the partition stays leaderless
  (LEADER_NOT_AVAILABLE) rather than be led by the out-of-sync broker 2; once broker 1 restarts it
  leads again and nothing acknowledged is lost.
- on (topic config): broker 2 is elected, the records acknowledged while it was out of sync (and
  only those) are lost, and broker 1, restarted, truncates its divergent records and follows it.
- off, but an unclean ElectLeaders (type 1, ``kafka-leader-election.sh --election-type unclean``)
  for the leaderless partition: the same as on, asked for by an operator.

Broker 3 holds no replica: it stays up to answer Metadata and hold the controller lease.
"""

from __future__ import annotations

import os
import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import _test_failed
from tests.integration.test_replication import partition_files
from tests.support.chaos_clients import wait_until
from tests.support.cluster import Cluster
from tests.support.kafka_clients import admin_client, confluent_consume
from tests.support.metrics import metric
from tests.support.wire_requests import wire_metadata_topic, wire_produce

#: Followers that stop fetching leave the ISR after this long (Kafka's default is 30 s).
LAG_MS = 3000
NOT_LEADER_OR_FOLLOWER = 6
#: Records per Produce request.
BATCH = 5


@pytest.fixture
def cluster(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Cluster]:
    # No automatic preferred-leader rebalance: only the elections under test move leaderships.
    c = Cluster(
        tmp_path / "cluster", 3,
        overrides={"replica.lag.time.max.ms": LAG_MS, "auto.leader.rebalance.enable": "false"},
    ).start()
    yield c
    if _test_failed(request):
        print(c.log_tails())
    for b in c.brokers:  # a broker left stopped would ignore close()'s SIGTERM
        if b.is_running():
            os.kill(b.proc.pid, signal.SIGCONT)  # type: ignore[union-attr]
    c.close()


def partition(cluster: Cluster, topic: str, predicate: Any, what: str, timeout: float = 60, via: int = 3) -> Any:
    """Partition 0 of ``topic`` through broker ``via`` (by default 3, which never stops), once
    ``predicate(partition, md)``."""
    md = cluster.wait_for(
        lambda md: topic in md.topics and 0 in md.topics[topic].partitions
        and predicate(md.topics[topic].partitions[0], md),
        f"{topic}-0: {what} (seen through broker {via})", via=via, timeout=timeout,
    )
    return md.topics[topic].partitions[0]


def running_bootstrap(cluster: Cluster) -> str:
    return ",".join(b.bootstrap for b in cluster.brokers if b.is_running())


def elect(cluster: Cluster, topic: str, election_type: Any, ready: Any, what: str) -> None:
    """ElectLeaders for partition 0 through confluent's AdminClient, once every running broker's
    Metadata shows ``ready``; the partition is elected (or was, by an earlier attempt)."""
    from confluent_kafka import KafkaError, KafkaException, TopicPartition

    for b in cluster.brokers:
        if b.is_running():
            partition(cluster, topic, ready, what, via=b.node_id)
    tp = TopicPartition(topic, 0)
    admin = admin_client(running_bootstrap(cluster))  # kept referenced until the answer came
    retried = False
    deadline = time.monotonic() + 60
    while True:
        try:
            result = admin.elect_leaders(election_type, [tp]).result(30)
            break
        except KafkaException as exc:
            # Client-side only: librdkafka fails a request in flight to a broker whose handle it
            # drops when a Metadata answer leaves that broker out (a broker whose image still had
            # it fenced). The election may have been made: asked again, it is not needed.
            code = exc.args[0].code()
            if code not in (KafkaError._DESTROY_BROKER, KafkaError._TRANSPORT, KafkaError._TIMED_OUT):
                raise
            if time.monotonic() > deadline:
                raise
            print(f"[{topic}] ElectLeaders failed in the client ({exc.args[0]}); asking again")
            retried = True
            time.sleep(1)
    error = result[tp]
    if retried and error is not None and error.code() == KafkaError.ELECTION_NOT_NEEDED:
        return
    assert error is None, result


def create_on_1_and_2(cluster: Cluster, topic: str, **configs: str) -> None:
    """One partition, replicas [1, 2] (1 is the preferred leader), ``min.insync.replicas=1``."""
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic

    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap.split(","), request_timeout_ms=30000)
    try:
        admin.create_topics([
            NewTopic(topic, num_partitions=-1, replication_factor=-1, replica_assignments={0: [1, 2]},
                     topic_configs={"min.insync.replicas": "1", **configs})
        ])
    finally:
        admin.close()
    partition(cluster, topic, lambda p, _: p.leader == 1 and sorted(p.isrs) == [1, 2], "led by 1, ISR [1, 2]")


def produce(cluster: Cluster, node_id: int, topic: str, values: list[bytes], acks: int) -> None:
    """``values`` to broker ``node_id`` in Produce requests of ``BATCH`` records, each acknowledged."""
    for i in range(0, len(values), BATCH):
        chunk = values[i:i + BATCH]
        code, _ = wire_produce(cluster.broker(node_id).port, topic, 0, [(b"k", v) for v in chunk], acks=acks)
        assert code == 0, (code, chunk)


def diverge(cluster: Cluster, topic: str) -> tuple[list[bytes], list[bytes]]:
    """Write ``before`` with both replicas in sync, then ``during`` with broker 2 stopped and out of
    the ISR (so only broker 1 has them), SIGKILL broker 1 and continue broker 2. Returns
    (before, during), every record acknowledged."""
    b1 = cluster.broker(1)
    before = [f"before-{i}".encode() for i in range(20)]
    produce(cluster, 1, topic, before, acks=-1)  # acks=all, ISR [1, 2]: broker 2 has them
    cluster.pause(2)
    try:
        partition(cluster, topic, lambda p, _: p.leader == 1 and sorted(p.isrs) == [1], "ISR shrunk to [1]")
        during = [f"during-{i}".encode() for i in range(20)]
        produce(cluster, 1, topic, during[:10], acks=1)
        produce(cluster, 1, topic, during[10:], acks=-1)  # acks=all: ISR [1] meets min.insync.replicas=1
        b1.kill()
    finally:
        cluster.resume(2)
    return before, during


def values_in(cluster: Cluster, topic: str, expected: int, *, bootstrap: str | None = None) -> list[bytes]:
    """Every record of partition 0 (exactly ``expected`` of them, at offsets 0, 1, ...), read
    through the running brokers (or ``bootstrap``)."""
    received = confluent_consume(bootstrap or running_bootstrap(cluster), topic, [0], expected, timeout=60, settle=2.0)
    assert [r.offset for r in received] == list(range(len(received))), [r.offset for r in received]
    assert len(received) == expected, f"{len(received)} records, not {expected}"
    return [r.value for r in received]


def report_loss(label: str, acknowledged: list[bytes], present: list[bytes]) -> list[bytes]:
    lost = [v for v in acknowledged if v not in set(present)]
    print(f"\n[{label}] acknowledged {len(acknowledged)}, present {len(present)}, lost {len(lost)}"
          + (f" ({lost[0].decode()} .. {lost[-1].decode()})" if lost else ""))
    return lost


def old_leader_truncates_and_follows(cluster: Cluster, topic: str, before: list[bytes], during: list[bytes]) -> None:
    """Broker 2 leads uncleanly with ``before``: it takes new records, broker 1 restarts, cuts its
    ``during`` records off (KIP-101), rejoins the ISR with broker 2's log byte for byte, and, made
    leader again (preferred election), serves exactly broker 2's records."""
    from confluent_kafka import ElectionType

    after = [f"after-{i}".encode() for i in range(10)]
    produce(cluster, 2, topic, after, acks=-1)  # ISR [2]: taken with acks=all
    b1 = cluster.broker(1)
    b1.start()
    partition(cluster, topic, lambda p, _: p.leader == 2 and sorted(p.isrs) == [1, 2], "broker 1 back in the ISR")
    wait_until(
        lambda: partition_files(cluster, topic, 0, 1) == partition_files(cluster, topic, 0, 2),
        "broker 1's log equal to broker 2's", 30,
    )
    log = b1.log_path.read_text(errors="replace")
    cut = re.findall(rf"{topic}-0: truncating from (\d+) to (\d+) to follow leader 2", log)
    print(f"[{topic}] broker 1 truncations: {cut}")
    assert (str(len(before) + len(during)), str(len(before))) in cut, cut

    elect(
        cluster, topic, ElectionType.PREFERRED, lambda p, md: 1 in md.brokers and sorted(p.isrs) == [1, 2],
        "broker 1 alive and in the ISR",
    )
    partition(cluster, topic, lambda p, _: p.leader == 1 and sorted(p.isrs) == [1, 2], "broker 1 leading again")
    assert values_in(cluster, topic, len(before) + len(after), bootstrap=b1.bootstrap) == before + after


def wire_leader_and_isr(port: int, topic: str) -> tuple[int, list[int]]:
    """Partition 0's leader and ISR as the broker on ``port`` itself answers Metadata."""
    (p,) = [p for p in wire_metadata_topic(port, topic).partitions if int(p.partition_index) == 0]
    return int(p.leader_id), [int(b) for b in p.isr_nodes]


def unclean_elections(cluster: Cluster) -> float:
    """Kafka's UncleanLeaderElectionsPerSec counter, summed over the running brokers."""
    return sum(
        metric(cluster.scrape(b.node_id), "kafka_controller_controllerstats_uncleanleaderelections_total")
        for b in cluster.brokers if b.is_running()
    )


# ------------------------------------------------------------------------------------- tests


@pytest.mark.timeout(240)
def test_unclean_off_keeps_the_partition_leaderless_and_loses_nothing(cluster: Cluster) -> None:
    from confluent_kafka import KafkaError

    topic = "clean"
    create_on_1_and_2(cluster, topic)
    before, during = diverge(cluster, topic)

    # Broker 1 is fenced, broker 2 is back but out of sync: no leader, for as long as broker 1 is away.
    p = partition(
        cluster, topic, lambda p, md: 1 not in md.brokers and 2 in md.brokers and p.leader == -1,
        "leaderless, broker 1 fenced and broker 2 alive",
    )
    assert p.error is not None and p.error.code() == KafkaError.LEADER_NOT_AVAILABLE, p.error
    assert list(p.isrs) == [1], p.isrs  # the ISR remembers who has every acknowledged record
    # Each broker's metadata image catches up on its own (as in Kafka): broker 3 answered above;
    # broker 2, the one an unclean election would pick, must see no leader too.
    for node_id in (2, 3):
        port = cluster.broker(node_id).port
        wait_until(lambda port=port: wire_leader_and_isr(port, topic)[0] == -1, f"broker {node_id} sees no leader", 30)
    deadline = time.monotonic() + 8  # several controller rounds: still no unclean election
    while time.monotonic() < deadline:
        for node_id in (2, 3):
            seen = wire_leader_and_isr(cluster.broker(node_id).port, topic)
            assert seen == (-1, [1]), (node_id, seen)
        time.sleep(0.5)
    code, _ = wire_produce(cluster.broker(2).port, topic, 0, [(b"k", b"refused")])
    assert code == NOT_LEADER_OR_FOLLOWER, code

    # Broker 1 back: it leads again, broker 2 catches up, every acknowledged record is there.
    cluster.broker(1).start()
    partition(cluster, topic, lambda p, _: p.leader == 1 and sorted(p.isrs) == [1, 2], "led by 1 again, ISR [1, 2]")
    present = values_in(cluster, topic, len(before) + len(during))
    lost = report_loss("unclean off", before + during, present)
    assert not lost
    assert present == before + during
    assert unclean_elections(cluster) == 0
    wait_until(
        lambda: partition_files(cluster, topic, 0, 1) == partition_files(cluster, topic, 0, 2),
        "broker 2's log equal to broker 1's", 30,
    )


@pytest.mark.timeout(240)
def test_unclean_on_elects_the_out_of_sync_replica_losing_what_only_the_leader_had(cluster: Cluster) -> None:
    topic = "unclean"
    create_on_1_and_2(cluster, topic, **{"unclean.leader.election.enable": "true"})
    before, during = diverge(cluster, topic)

    p = partition(cluster, topic, lambda p, md: 1 not in md.brokers and p.leader == 2, "broker 2 elected uncleanly")
    assert list(p.isrs) == [2], p.isrs
    present = values_in(cluster, topic, len(before))
    lost = report_loss("unclean on", before + during, present)
    assert present == before  # everything written while both were in sync
    assert lost == during  # exactly what was acknowledged by broker 1 alone
    assert unclean_elections(cluster) == 1  # the controller reports it (UncleanLeaderElectionsPerSec)
    old_leader_truncates_and_follows(cluster, topic, before, during)


@pytest.mark.timeout(240)
def test_unclean_elect_leaders_elects_the_out_of_sync_replica(cluster: Cluster) -> None:
    from confluent_kafka import ElectionType

    topic = "elected-uncleanly"
    create_on_1_and_2(cluster, topic)
    before, during = diverge(cluster, topic)
    elect(
        cluster, topic, ElectionType.UNCLEAN,
        lambda p, md: 1 not in md.brokers and 2 in md.brokers and p.leader == -1,
        "leaderless, broker 1 fenced and broker 2 alive",
    )
    p = partition(cluster, topic, lambda p, _: p.leader == 2, "broker 2 elected by ElectLeaders")
    assert list(p.isrs) == [2], p.isrs
    present = values_in(cluster, topic, len(before))
    lost = report_loss("unclean ElectLeaders", before + during, present)
    assert present == before
    assert lost == during
    old_leader_truncates_and_follows(cluster, topic, before, during)
