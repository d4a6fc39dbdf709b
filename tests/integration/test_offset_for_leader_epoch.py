"""OffsetForLeaderEpoch (API 23, v2-4) on the wire: where a leader epoch ends, for classic and
diskless partitions, with Kafka's leader-epoch checks (KIP-320) and error codes."""

from __future__ import annotations

from typing import Any

import pytest

from shoal.protocol.apis import ApiKey, request_class, response_class
from shoal.protocol.build import make, nested
from shoal.protocol.errors import ErrorCode
from tests.support.broker import BrokerProcess
from tests.support.kafka_clients import admin_client, confluent_produce, create_diskless_topic, wait_for_topic
from tests.support.wire import WireClient
from tests.support.workload import make_workload


def end_offsets(port: int, version: int, topic: str, asks: list[tuple[int, int, int]]) -> list[tuple[Any, ...]]:
    """(partition, current leader epoch, leader epoch) -> (error, epoch, end offset) per ask."""
    request = request_class(ApiKey.OFFSET_FOR_LEADER_EPOCH, version)
    partitions = tuple(
        make(nested(request, "OffsetForLeaderPartition"), partition=p, current_leader_epoch=current, leader_epoch=epoch)
        for p, current, epoch in asks
    )
    entity = make(request, replica_id=-1, topics=(make(nested(request, "OffsetForLeaderTopic"), topic=topic,
                                                          partitions=partitions),))
    with WireClient(port) as client:
        answer = client.request(entity, response_class(ApiKey.OFFSET_FOR_LEADER_EPOCH, version))
    (result,) = answer.topics
    assert result.topic == topic
    return [(p.error_code, p.leader_epoch, p.end_offset) for p in result.partitions]


@pytest.mark.parametrize("version", [2, 3, 4])
def test_classic_and_diskless_epoch_end_offsets(broker: BrokerProcess, topic_name: str, version: int) -> None:
    from confluent_kafka.admin import NewTopic

    admin = admin_client(broker.bootstrap)
    admin.create_topics([NewTopic(f"{topic_name}-c", 2, 1)])[f"{topic_name}-c"].result(30)
    wait_for_topic(admin, f"{topic_name}-c", 2)
    create_diskless_topic(broker.bootstrap, f"{topic_name}-d", partitions=1)
    for topic in (f"{topic_name}-c", f"{topic_name}-d"):
        confluent_produce(broker.bootstrap, topic, make_workload(30, 1, topic))

    classic = end_offsets(broker.port, version, f"{topic_name}-c", [(0, -1, 0), (0, 0, 0), (0, -1, 7), (1, -1, 0)])
    assert classic == [
        (ErrorCode.none, 0, 30),  # epoch 0 is the latest: it ends at the log end
        (ErrorCode.none, 0, 30),  # the current leader epoch (0) matches
        (ErrorCode.none, -1, -1),  # an epoch the log never had: undefined
        (ErrorCode.none, 0, 0),  # an empty log: its leader recorded epoch 0 at offset 0 on taking over
    ]
    fenced = end_offsets(broker.port, version, f"{topic_name}-c", [(0, 3, 0), (5, -1, 0)])
    assert [e for e, _, _ in fenced] == [ErrorCode.unknown_leader_epoch, ErrorCode.unknown_topic_or_partition]

    diskless = end_offsets(broker.port, version, f"{topic_name}-d", [(0, -1, 0), (0, 0, 0), (0, -1, -1), (0, -1, 2)])
    assert diskless == [
        (ErrorCode.none, 0, 30),  # a diskless log is never truncated: epoch 0 ends at the log end
        (ErrorCode.none, 0, 30),
        (ErrorCode.none, -1, -1),
        (ErrorCode.none, -1, -1),
    ]
    missing = end_offsets(broker.port, version, f"{topic_name}-missing", [(0, -1, 0)])
    assert missing == [(ErrorCode.unknown_topic_or_partition, -1, -1)]


def test_fetch_checks_the_current_leader_epoch(broker: BrokerProcess, topic_name: str) -> None:
    """KIP-320: a Fetch (v9+) naming an older leader epoch is FENCED_LEADER_EPOCH, a newer one
    UNKNOWN_LEADER_EPOCH; the partition's own epoch (0) or -1 reads."""
    import datetime

    create_diskless_topic(broker.bootstrap, topic_name, partitions=1)
    confluent_produce(broker.bootstrap, topic_name, make_workload(5, 1, topic_name))
    request = request_class(ApiKey.FETCH, 12)

    def fetch(current_leader_epoch: int) -> int:
        partition = make(nested(request, "FetchPartition"), partition=0, current_leader_epoch=current_leader_epoch,
                         fetch_offset=0, last_fetched_epoch=-1, log_start_offset=-1, partition_max_bytes=1 << 20)
        entity = make(request, replica_id=-1, max_wait=datetime.timedelta(0), min_bytes=1, max_bytes=1 << 20,
                      isolation_level=0, session_id=0, session_epoch=-1, rack_id="", forgotten_topics_data=(),
                      topics=(make(nested(request, "FetchTopic"), topic=topic_name, partitions=(partition,)),))
        with WireClient(broker.port) as client:
            answer = client.request(entity, response_class(ApiKey.FETCH, 12))
        return answer.responses[0].partitions[0].error_code

    assert fetch(-1) == ErrorCode.none
    assert fetch(0) == ErrorCode.none
    assert fetch(1) == ErrorCode.unknown_leader_epoch


@pytest.mark.parametrize("kind", ["classic", "diskless"])
def test_list_offsets_checks_and_answers_the_leader_epoch(broker: BrokerProcess, topic_name: str, kind: str) -> None:
    """KIP-320 for ListOffsets (v4+): an older current leader epoch is FENCED_LEADER_EPOCH, a newer
    one UNKNOWN_LEADER_EPOCH; an answer carries the epoch of the offset found."""
    from confluent_kafka.admin import NewTopic

    if kind == "classic":
        admin = admin_client(broker.bootstrap)
        admin.create_topics([NewTopic(topic_name, 1, 1)])[topic_name].result(30)
        wait_for_topic(admin, topic_name, 1)
    else:
        create_diskless_topic(broker.bootstrap, topic_name, partitions=1)
    confluent_produce(broker.bootstrap, topic_name, make_workload(5, 1, topic_name))
    request = request_class(ApiKey.LIST_OFFSETS, 7)

    def latest(current_leader_epoch: int) -> tuple[int, int, int]:
        partition = make(nested(request, "ListOffsetsPartition"), partition_index=0,
                         current_leader_epoch=current_leader_epoch, timestamp=-1, max_num_offsets=1)
        entity = make(request, replica_id=-1, isolation_level=0,
                      topics=(make(nested(request, "ListOffsetsTopic"), name=topic_name, partitions=(partition,)),))
        with WireClient(broker.port) as client:
            answer = client.request(entity, response_class(ApiKey.LIST_OFFSETS, 7))
        p = answer.topics[0].partitions[0]
        return p.error_code, p.offset, p.leader_epoch

    assert latest(-1) == (ErrorCode.none, 5, 0)
    assert latest(0) == (ErrorCode.none, 5, 0)
    assert latest(1)[0] == ErrorCode.unknown_leader_epoch
