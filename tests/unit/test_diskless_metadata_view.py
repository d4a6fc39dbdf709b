"""How Metadata shows a diskless partition (``partitions.views.partition_fields``): its true
replicas, ISR and leader epoch, and a LeaderId in the client's rack (KIP-1163) or alive."""

from __future__ import annotations

import uuid
from typing import Any

from shoal.metadata.image import MetadataImage
from shoal.metadata.records import (
    ConfigRecord,
    MetadataRecord,
    PartitionChangeRecord,
    PartitionRecord,
    RegisterBrokerRecord,
    TopicRecord,
)
from shoal.partitions.views import partition_fields
from shoal.protocol.errors import ErrorCode

TOPIC_ID = uuid.uuid4()
#: Brokers 1-5: 1 and 2 in az-a, 3 and 4 in az-b, 5 in az-c.
RACKS = {1: "az-a", 2: "az-a", 3: "az-b", 4: "az-b", 5: "az-c"}


def view(
    replicas: tuple[int, ...], isr: tuple[int, ...], leader: int, rack: str | None, *,
    fenced: tuple[int, ...] = (), diskless: bool = True, partition: int = 0, offline_replicas: tuple[int, ...] = (),
    brokers: dict[int, str] = RACKS,
) -> dict[str, Any]:
    records: list[MetadataRecord] = [
        RegisterBrokerRecord(b, "h", 9000 + b, r, fenced=b in fenced) for b, r in brokers.items()
    ]
    records.append(TopicRecord("d", TOPIC_ID))
    if diskless:
        records.append(ConfigRecord(ConfigRecord.TOPIC, "d", "diskless.enable", "true"))
    records.append(PartitionRecord(TOPIC_ID, partition, replicas, isr, leader, leader_epoch=4))
    if offline_replicas:
        records.append(PartitionChangeRecord(TOPIC_ID, partition, offline_replicas=offline_replicas))
    image = MetadataImage().apply(enumerate(records))
    topic = image.topic("d")
    assert topic is not None
    return partition_fields(image, topic, topic.partitions[partition], rack, {}, 1)


def shown(v: dict[str, Any]) -> tuple[Any, ...]:
    return v["error_code"], v["leader_id"], v["leader_epoch"], v["replica_nodes"], v["isr_nodes"]


def test_a_client_without_a_rack_sees_the_true_partition() -> None:
    v = view((3, 1, 2), (1, 2), 3, None)
    assert shown(v) == (ErrorCode.none, 3, 4, (3, 1, 2), (1, 2))  # the leader may be out of sync
    assert v["preferred_produce_brokers"] == (1, 2, 3, 4, 5)


def test_a_client_in_the_leaders_rack_gets_the_true_leader() -> None:
    assert shown(view((3, 1), (1,), 3, "az-b")) == (ErrorCode.none, 3, 4, (3, 1), (1,))


def test_a_client_in_another_rack_gets_a_replica_there_in_sync_first() -> None:
    assert shown(view((3, 1, 2), (3, 2), 3, "az-a")) == (ErrorCode.none, 2, 4, (3, 1, 2), (3, 2))
    assert view((3, 1, 2), (3,), 3, "az-a")["leader_id"] == 1  # none in sync there: the first
    assert view((3, 1, 2), (3, 2), 3, "az-a", fenced=(2,))["leader_id"] == 1  # 2 is fenced


def test_a_client_in_a_rack_without_replicas_gets_a_broker_there() -> None:
    v = view((3, 4), (3, 4), 3, "az-a", partition=1)
    assert shown(v) == (ErrorCode.none, 2, 4, (3, 4), (3, 4))
    assert v["leader_id"] == v["preferred_produce_brokers"][0]
    assert v["preferred_produce_brokers"] == (2, 1)  # round robin by partition over the rack
    # No alive broker in the client's rack: the true leader.
    assert view((3, 4), (3, 4), 3, "az-c", fenced=(5,))["leader_id"] == 3
    assert view((3, 4), (3, 4), 3, "az-z")["leader_id"] == 3


def test_a_fenced_or_missing_leader_is_replaced_by_an_alive_replica_else_an_alive_broker() -> None:
    v = view((3, 1, 2), (3, 2), 3, None, fenced=(3,))
    # The ISR is the image's: the controller, not the view, takes the fenced leader out.
    assert shown(v) == (ErrorCode.none, 2, 4, (3, 1, 2), (3, 2))
    assert view((3, 1, 2), (), -1, None)["leader_id"] == 3
    assert view((3, 1, 2), (), -1, "az-c")["leader_id"] == 5  # a broker in the client's rack first
    v = view((3, 4), (3,), -1, None, fenced=(3, 4), partition=2)
    assert shown(v) == (ErrorCode.none, 5, 4, (3, 4), (3,))  # preferred_brokers()[0]: no replica alive
    assert v["preferred_produce_brokers"][0] == 5
    assert view((3, 4), (3,), 3, "az-b", fenced=(3,))["leader_id"] == 4  # the rack's alive replica


def test_a_diskless_partition_has_no_leader_only_when_no_broker_is_alive() -> None:
    v = view((1, 2), (1, 2), 1, "az-a", fenced=(1, 2), brokers={1: "az-a", 2: "az-a"})
    assert (v["error_code"], v["leader_id"], v["preferred_produce_brokers"]) == (ErrorCode.leader_not_available, -1, ())


def test_an_offline_replica_leaves_the_isr_shown_and_is_not_offered() -> None:
    v = view((3, 1, 2), (3, 1, 2), 3, "az-a", offline_replicas=(1,))
    assert (v["leader_id"], v["isr_nodes"], v["offline_replicas"]) == (2, (3, 2), (1,))


def test_classic_partitions_are_shown_as_before() -> None:
    v = view((3, 1, 2), (3, 1, 2), 3, "az-a", diskless=False)
    assert shown(v) == (ErrorCode.none, 3, 4, (3, 1, 2), (3, 1, 2))
    assert v["preferred_produce_brokers"] == ()
    v = view((3, 1, 2), (3, 1, 2), 3, None, fenced=(3,), diskless=False)
    assert shown(v) == (ErrorCode.leader_not_available, -1, 4, (3, 1, 2), (1, 2))
