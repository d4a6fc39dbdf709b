"""ElectLeaders (API 43) on three broker processes: after a broker's controlled shutdown moved its
leaderships away and it came back into every ISR, a preferred election (confluent's AdminClient,
as ``kafka-leader-election.sh --election-type preferred`` does) gives each partition back to the
first replica of its list; asked again, it is ELECTION_NOT_NEEDED. The raw wire checks what the
client does not show: v0's shape, ``topic_partitions`` null, unknown partitions, and a diskless
partition, elected like a classic one (KIP-1163: its replicas are caches, any alive one may lead).
"""

from __future__ import annotations

import datetime
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from shoal.protocol.apis import ApiKey, request_class, response_class
from shoal.protocol.build import make, nested
from shoal.protocol.errors import ErrorCode
from tests.integration.conftest import _test_failed
from tests.support.cluster import Cluster
from tests.support.kafka_clients import (
    admin_client,
    confluent_consume,
    confluent_produce,
    create_diskless_topic,
)
from tests.support.wire import WireClient
from tests.support.workload import check_records, make_workload

TOPIC = "elected"
PARTITIONS = 3


@pytest.fixture
def cluster(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Cluster]:
    # No automatic rebalance: only ElectLeaders may give leadership back in this test.
    c = Cluster(tmp_path / "cluster", 3, overrides={"auto.leader.rebalance.enable": "false"}).start()
    yield c
    if _test_failed(request):
        print(c.log_tails())
    c.close()


def partitions_of(cluster: Cluster, via: int | None = None, **wait: Any) -> dict[int, Any]:
    return partitions_of_topic(cluster, TOPIC, via, **wait)


def partitions_of_topic(cluster: Cluster, topic: str, via: int | None = None, **wait: Any) -> dict[int, Any]:
    md = cluster.wait_for(lambda md: topic in md.topics, f"{topic} in metadata", via=via, **wait)
    return dict(md.topics[topic].partitions)


def wait_partitions(cluster: Cluster, predicate: Any, what: str, via: int | None = None) -> dict[int, Any]:
    md = cluster.wait_for(
        lambda md: TOPIC in md.topics and len(md.topics[TOPIC].partitions) == PARTITIONS
        and predicate(md.topics[TOPIC].partitions),
        what, via=via, timeout=60,
    )
    return dict(md.topics[TOPIC].partitions)


def elect_wire(port: int, version: int, topic_partitions: Any, election_type: int = 0) -> Any:
    cls = request_class(ApiKey.ELECT_LEADERS, version)
    tp_cls = nested(cls, "TopicPartitions")
    entries = None if topic_partitions is None else tuple(
        make(tp_cls, topic=t, partitions=tuple(ps)) for t, ps in topic_partitions
    )
    request = make(cls, election_type=election_type, topic_partitions=entries, timeout=datetime.timedelta(seconds=30))
    with WireClient(port) as client:
        return client.request(request, response_class(ApiKey.ELECT_LEADERS, version))


def answers(response: Any) -> dict[tuple[str, int], tuple[int, str | None]]:
    return {
        (r.topic, p.partition_id): (p.error_code, p.error_message)
        for r in response.replica_election_results for p in r.partition_result
    }


@pytest.mark.timeout(240)
def test_preferred_election_returns_leadership_after_a_restart(cluster: Cluster) -> None:
    from confluent_kafka import ElectionType, KafkaError, TopicPartition
    from confluent_kafka.admin import NewTopic

    admin = admin_client(cluster.bootstrap)
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3)], operation_timeout=30)[TOPIC].result(30)
    parts = wait_partitions(cluster, lambda ps: all(len(p.isrs) == 3 for p in ps.values()), "every replica in sync")
    preferred = {p: m.replicas[0] for p, m in parts.items()}
    assert {p: m.leader for p, m in parts.items()} == preferred  # a new topic is led by its preferred replicas
    assert 1 in preferred.values(), preferred  # broker 1 is the preferred leader of some partition
    sent = make_workload(300, PARTITIONS, TOPIC, seed=7)
    confluent_produce(cluster.bootstrap, TOPIC, sent)

    # Controlled shutdown moves broker 1's leaderships away; back, it rejoins every ISR as a follower.
    cluster.broker(1).stop()
    wait_partitions(cluster, lambda ps: all(p.leader not in (1, -1) for p in ps.values()), "leaders off broker 1")
    cluster.broker(1).start()
    parts = wait_partitions(
        cluster, lambda ps: all(sorted(p.isrs) == [1, 2, 3] for p in ps.values()), "broker 1 back in every ISR"
    )
    moved = {p for p, m in parts.items() if m.leader != preferred[p]}
    assert moved == {p for p, b in preferred.items() if b == 1}, (moved, preferred)

    # Preferred election of every partition: the moved ones are elected, the others not needed.
    result = admin.elect_leaders(
        ElectionType.PREFERRED, [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
    ).result(30)
    outcome = {tp.partition: (None if err is None else err.code()) for tp, err in result.items()}
    assert outcome == {p: None if p in moved else KafkaError.ELECTION_NOT_NEEDED for p in range(PARTITIONS)}, result
    for node_id in (1, 2, 3):  # every broker's image has the new leaders
        wait_partitions(
            cluster, lambda ps: all(m.leader == preferred[p] for p, m in ps.items()),
            f"preferred leaders seen through broker {node_id}", via=node_id,
        )
    # The records are all there, read from the preferred leaders, and new ones are taken by them.
    more = make_workload(150, PARTITIONS, f"{TOPIC}-after", seed=8, first_seq=len(sent))
    confluent_produce(cluster.bootstrap, TOPIC, more)
    check_records(confluent_consume(cluster.bootstrap, TOPIC, range(PARTITIONS), len(sent) + len(more)), sent + more)

    # Asked again: nothing to do.
    again = admin.elect_leaders(
        ElectionType.PREFERRED, [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
    ).result(30)
    assert {tp.partition: err.code() for tp, err in again.items() if err is not None} == {
        p: KafkaError.ELECTION_NOT_NEEDED for p in range(PARTITIONS)
    }, again
    assert {p: m.leader for p, m in partitions_of(cluster).items()} == preferred

    # On the wire. v0 (no top-level error code); an unknown partition and topic; a diskless one.
    create_diskless_topic(cluster.bootstrap, "diskless-elected", partitions=1)
    port = cluster.broker(2).port
    v0 = elect_wire(port, 0, [(TOPIC, [0]), (TOPIC, [PARTITIONS]), ("no-such-topic", [0]), ("diskless-elected", [0])])
    assert not hasattr(v0, "error_code")
    got = answers(v0)
    assert got[(TOPIC, 0)] == (ErrorCode.election_not_needed, "Leader election not needed for topic partition.")
    assert got[(TOPIC, PARTITIONS)] == (ErrorCode.unknown_topic_or_partition, f"No such partition as {TOPIC}-{PARTITIONS}")
    assert got[("no-such-topic", 0)] == (ErrorCode.unknown_topic_or_partition, "No such topic as no-such-topic")
    # The diskless partition's preferred replica (its first) leads it since its creation.
    diskless = partitions_of_topic(cluster, "diskless-elected")
    assert diskless[0].leader == diskless[0].replicas[0], diskless[0]
    assert got[("diskless-elected", 0)] == (ErrorCode.election_not_needed, "Leader election not needed for topic partition.")
    # topic_partitions null = every partition: those whose election was not needed are left out,
    # each topic (diskless ones too) is still listed.
    everything = elect_wire(port, 2, None)
    assert everything.error_code == ErrorCode.none
    assert [(r.topic, r.partition_result) for r in everything.replica_election_results] == [
        ("diskless-elected", ()), (TOPIC, ())
    ]
    # An election type Kafka does not have: the whole request is refused, each partition too.
    unknown = elect_wire(port, 2, [(TOPIC, [0])], election_type=5)
    assert unknown.error_code == ErrorCode.invalid_request
    assert answers(unknown)[(TOPIC, 0)][0] == ErrorCode.invalid_request


@pytest.mark.timeout(120)
def test_unclean_election_is_not_needed_while_a_leader_is_alive(cluster: Cluster) -> None:
    from confluent_kafka import ElectionType, KafkaError, TopicPartition
    from confluent_kafka.admin import NewTopic

    admin = admin_client(cluster.bootstrap)
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3)], operation_timeout=30)[TOPIC].result(30)
    wait_partitions(cluster, lambda ps: all(p.leader > 0 for p in ps.values()), "every partition led")
    result = admin.elect_leaders(
        ElectionType.UNCLEAN, [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
    ).result(30)
    assert {tp.partition: err.code() for tp, err in result.items() if err is not None} == {
        p: KafkaError.ELECTION_NOT_NEEDED for p in range(PARTITIONS)
    }, result
