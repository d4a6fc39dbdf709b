"""WriteTxnMarkers (API 27), READ_COMMITTED Fetch and ListOffsets on real broker processes.

The requests a transaction coordinator sends are sent here at the wire level: per-partition
error answers (unknown partition, not the leader, ``__consumer_offsets`` markers answered by the
group coordinator, diskless ones committed through the Batch Coordinator), and markers on partitions with no ongoing
transaction, which Kafka appends anyway. Consumers of both isolation levels then read the data
records around them (clients skip the control batches) and ListOffsets answers the LSO.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import NewTopic

from shoal.protocol.apis import ApiKey, request_class, response_class
from shoal.protocol.build import make, nested
from tests.integration.conftest import _test_failed
from tests.support.broker import BrokerProcess
from tests.support.cluster import Cluster
from tests.support.kafka_clients import (
    admin_client,
    confluent_consume,
    confluent_produce,
    create_diskless_topic,
    wait_for_topic,
)
from tests.support.wire import WireClient
from tests.support.workload import Sent

NONE = 0
UNKNOWN_TOPIC_OR_PARTITION = 3
NOT_LEADER_OR_FOLLOWER = 6
INVALID_PRODUCER_EPOCH = 47
TRANSACTION_COORDINATOR_FENCED = 52
READ_UNCOMMITTED, READ_COMMITTED = 0, 1


def write_markers(
    port: int, markers: list[tuple[int, int, bool, int, dict[str, list[int]]]], *, version: int = 1,
    transaction_version: int = 0,
) -> dict[tuple[int, str, int], int]:
    """WriteTxnMarkers of (producer id, producer epoch, commit, coordinator epoch, {topic: partitions});
    returns {(producer id, topic, partition): error code}."""
    request = request_class(ApiKey.WRITE_TXN_MARKERS, version)
    marker_cls, topic_cls = nested(request, "WritableTxnMarker"), nested(request, "WritableTxnMarkerTopic")
    entity = make(
        request,
        markers=tuple(
            make(
                marker_cls, producer_id=pid, producer_epoch=epoch, transaction_result=commit,
                coordinator_epoch=coordinator_epoch, transaction_version=transaction_version,
                topics=tuple(make(topic_cls, name=t, partition_indexes=tuple(ps)) for t, ps in topics.items()),
            )
            for pid, epoch, commit, coordinator_epoch, topics in markers
        ),
    )
    with WireClient(port) as client:
        answer = client.request(entity, response_class(ApiKey.WRITE_TXN_MARKERS, version))
    return {
        (int(m.producer_id), t.name, int(p.partition_index)): int(p.error_code)
        for m in answer.markers
        for t in m.topics
        for p in t.partitions
    }


def list_offset(port: int, topic: str, timestamp: int, isolation: int) -> tuple[int, int]:
    """(error, offset) of ListOffsets v9 for partition 0."""
    request = request_class(ApiKey.LIST_OFFSETS, 9)
    partition = make(nested(request, "ListOffsetsPartition"), partition_index=0, current_leader_epoch=-1,
                     timestamp=timestamp, max_num_offsets=1)
    entity = make(request, replica_id=-1, isolation_level=isolation,
                  topics=(make(nested(request, "ListOffsetsTopic"), name=topic, partitions=(partition,)),))
    with WireClient(port) as client:
        answer = client.request(entity, response_class(ApiKey.LIST_OFFSETS, 9))
    p = answer.topics[0].partitions[0]
    return int(p.error_code), int(p.offset)


def fetch(port: int, topic: str, isolation: int) -> Any:
    """Fetch v12 of partition 0 from offset 0: the partition's answer."""
    request = request_class(ApiKey.FETCH, 12)
    partition = make(nested(request, "FetchPartition"), partition=0, current_leader_epoch=-1, fetch_offset=0,
                     last_fetched_epoch=-1, log_start_offset=-1, partition_max_bytes=1 << 20)
    entity = make(request, replica_id=-1, max_wait=datetime.timedelta(milliseconds=100), min_bytes=1,
                  max_bytes=1 << 20, isolation_level=isolation, session_id=0, session_epoch=-1, rack_id="",
                  forgotten_topics_data=(),
                  topics=(make(nested(request, "FetchTopic"), topic=topic, partitions=(partition,)),))
    with WireClient(port) as client:
        answer = client.request(entity, response_class(ApiKey.FETCH, 12))
    return answer.responses[0].partitions[0]


def api_range(port: int, api_key: int) -> tuple[int, int] | None:
    request = request_class(ApiKey.API_VERSIONS, 3)
    entity = make(request, client_software_name="shoal-it", client_software_version="1")
    with WireClient(port) as client:
        answer = client.request(entity, response_class(ApiKey.API_VERSIONS, 3))
    found = [(int(a.min_version), int(a.max_version)) for a in answer.api_keys if int(a.api_key) == api_key]
    return found[0] if found else None


def sent(value: bytes) -> Sent:
    return Sent(0, 0, None, value, (), None)


def values(bootstrap: str, topic: str, expected: int, isolation: str) -> list[tuple[int, bytes]]:
    records = confluent_consume(bootstrap, topic, [0], expected, timeout=60, settle=1.0,
                                config={"isolation.level": isolation})
    return [(r.offset, r.value) for r in records]


def create_classic(bootstrap: str, name: str, partitions: int, replication_factor: int) -> None:
    admin = admin_client(bootstrap)
    admin.create_topics([NewTopic(name, partitions, replication_factor)], operation_timeout=30)[name].result(30)
    wait_for_topic(admin, name, partitions)


def test_markers_on_a_single_broker(broker: BrokerProcess, topic_name: str) -> None:
    create_classic(broker.bootstrap, topic_name, 1, 1)
    diskless = f"{topic_name}-d"
    create_diskless_topic(broker.bootstrap, diskless, partitions=1)
    assert api_range(broker.port, ApiKey.WRITE_TXN_MARKERS) == (1, 2)

    confluent_produce(broker.bootstrap, topic_name, [sent(b"before-%d" % i) for i in range(3)])
    answers = write_markers(
        broker.port,
        [
            # A COMMIT with no transaction of that producer here: appended anyway (offset 3).
            (1000, 0, True, 0, {topic_name: [0, 7], "no-such-topic": [0], "__consumer_offsets": [0]}),
            (1001, 0, False, 5, {topic_name: [0], diskless: [0]}),  # an ABORT (offset 4)
        ],
    )
    assert answers == {
        (1000, topic_name, 0): NONE,
        (1000, topic_name, 7): UNKNOWN_TOPIC_OR_PARTITION,
        (1000, "no-such-topic", 0): UNKNOWN_TOPIC_OR_PARTITION,
        # The group coordinator owning it completes the producer's transactional offset commits
        # (none here: nothing to do, answered as done).
        (1000, "__consumer_offsets", 0): NONE,
        (1001, topic_name, 0): NONE,
        (1001, diskless, 0): NONE,  # committed through the Batch Coordinator (offset 0 there)
    }
    # The coordinator and producer epochs are checked as Kafka checks them (nothing is written).
    assert write_markers(broker.port, [(1001, 0, True, 4, {topic_name: [0]})]) == {
        (1001, topic_name, 0): TRANSACTION_COORDINATOR_FENCED
    }
    # So is a group marker's: a deposed coordinator's late one is refused (Kafka checks it on the
    # __consumer_offsets partition's producer state).
    assert write_markers(broker.port, [(1000, 0, True, 5, {"__consumer_offsets": [0]})]) == {
        (1000, "__consumer_offsets", 0): NONE
    }
    assert write_markers(broker.port, [(1000, 0, True, 4, {"__consumer_offsets": [0]})]) == {
        (1000, "__consumer_offsets", 0): TRANSACTION_COORDINATOR_FENCED
    }
    # v2 carries the transaction version: a TV2 marker carries the bumped epoch (offset 5), and
    # one behind it is INVALID_PRODUCER_EPOCH.
    assert write_markers(broker.port, [(1000, 1, True, 0, {topic_name: [0]})], version=2, transaction_version=2) == {
        (1000, topic_name, 0): NONE
    }
    assert write_markers(broker.port, [(1000, 0, True, 0, {topic_name: [0]})], version=2, transaction_version=2) == {
        (1000, topic_name, 0): INVALID_PRODUCER_EPOCH
    }
    confluent_produce(broker.bootstrap, topic_name, [sent(b"after-%d" % i) for i in range(2)])

    expected = [(0, b"before-0"), (1, b"before-1"), (2, b"before-2"), (6, b"after-0"), (7, b"after-1")]
    assert values(broker.bootstrap, topic_name, 5, "read_committed") == expected
    assert values(broker.bootstrap, topic_name, 5, "read_uncommitted") == expected

    assert list_offset(broker.port, topic_name, -1, READ_COMMITTED) == (NONE, 8)
    assert list_offset(broker.port, topic_name, -1, READ_UNCOMMITTED) == (NONE, 8)
    committed = fetch(broker.port, topic_name, READ_COMMITTED)
    assert (committed.error_code, committed.high_watermark, committed.last_stable_offset) == (NONE, 8, 8)
    assert committed.aborted_transactions == ()  # the ABORT ended no transaction: nothing to drop
    uncommitted = fetch(broker.port, topic_name, READ_UNCOMMITTED)
    assert (uncommitted.last_stable_offset, uncommitted.aborted_transactions) == (8, None)
    on_diskless = fetch(broker.port, diskless, READ_COMMITTED)
    # The diskless ABORT ended no transaction: offset 0 is the marker, nothing to drop.
    assert (on_diskless.error_code, on_diskless.last_stable_offset, on_diskless.aborted_transactions) == (NONE, 1, ())


@pytest.fixture
def cluster(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Cluster]:
    c = Cluster(tmp_path / "cluster", 2).start()
    yield c
    if _test_failed(request):
        print(c.log_tails())
    c.close()


@pytest.mark.timeout(180)
def test_markers_go_to_the_leader_and_wait_for_the_isr(cluster: Cluster, topic_name: str) -> None:
    admin = admin_client(cluster.bootstrap)
    admin.create_topics([NewTopic(topic_name, 2, 2, config={"min.insync.replicas": "2"})],
                        operation_timeout=30)[topic_name].result(30)
    md = cluster.wait_for(
        lambda md: topic_name in md.topics and len(md.topics[topic_name].partitions) == 2
        and all(len(p.isrs) == 2 for p in md.topics[topic_name].partitions.values()),
        f"{topic_name} with both replicas in sync",
    )
    leader = md.topics[topic_name].partitions[0].leader
    follower = next(b.node_id for b in cluster.brokers if b.node_id != leader)
    confluent_produce(cluster.bootstrap, topic_name, [sent(b"r-%d" % i) for i in range(3)])

    assert write_markers(cluster.broker(follower).port, [(2000, 0, True, 0, {topic_name: [0]})]) == {
        (2000, topic_name, 0): NOT_LEADER_OR_FOLLOWER
    }
    # acks=all: the answer comes once the follower has the marker, so the high watermark passed it.
    assert write_markers(cluster.broker(leader).port, [(2000, 0, True, 0, {topic_name: [0]})]) == {
        (2000, topic_name, 0): NONE
    }
    answer = fetch(cluster.broker(leader).port, topic_name, READ_COMMITTED)
    assert (answer.high_watermark, answer.last_stable_offset) == (4, 4)
    assert list_offset(cluster.broker(leader).port, topic_name, -1, READ_COMMITTED) == (NONE, 4)
    confluent_produce(cluster.bootstrap, topic_name, [sent(b"r-3")])
    got = values(cluster.bootstrap, topic_name, 4, "read_committed")
    assert got == [(0, b"r-0"), (1, b"r-1"), (2, b"r-2"), (4, b"r-3")]
