"""KIP-1163's consume path (``placement.diskless_read_replica``): a consumer reads a diskless
partition from a replica in its rack, an in-sync one (with the Batch Coordinator) first, an
out-of-sync one only when no in-sync one is in the rack."""

from __future__ import annotations

import uuid

from shoal.cluster.placement import alive_replicas, diskless_read_replica
from shoal.metadata.image import MetadataImage, PartitionImage
from shoal.metadata.records import (
    ConfigRecord,
    MetadataRecord,
    PartitionChangeRecord,
    PartitionRecord,
    RegisterBrokerRecord,
    TopicRecord,
)

TOPIC_ID = uuid.uuid4()
#: Brokers 1-6: 1, 2 and 5 in az-a; 3 and 4 in az-b; 6 in az-c, fenced.
RACKS = {1: "az-a", 2: "az-a", 3: "az-b", 4: "az-b", 5: "az-a", 6: "az-c"}


def partition_with(
    replicas: tuple[int, ...], isr: tuple[int, ...], offline: tuple[int, ...] = ()
) -> tuple[MetadataImage, PartitionImage]:
    records: list[MetadataRecord] = [
        RegisterBrokerRecord(b, "h", 9000 + b, rack, fenced=b == 6) for b, rack in RACKS.items()
    ]
    records += [
        TopicRecord("d", TOPIC_ID), ConfigRecord(ConfigRecord.TOPIC, "d", "diskless.enable", "true"),
        PartitionRecord(TOPIC_ID, 0, replicas, isr, replicas[0]),
    ]
    image = MetadataImage().apply(enumerate(records))
    p = image.topic("d").partitions[0]  # type: ignore[union-attr]
    if offline:
        image = image.apply([(image.offset + 1, PartitionChangeRecord(TOPIC_ID, 0, offline_replicas=offline))])
        p = image.topic("d").partitions[0]  # type: ignore[union-attr]
    return image, p


def test_alive_replicas_put_the_in_sync_ones_first_in_replica_order() -> None:
    image, p = partition_with((3, 1, 2, 5, 6), (5, 2, 6))
    assert alive_replicas(image, p) == [2, 5, 3, 1]  # 6 is fenced
    assert alive_replicas(image, p, "az-a") == [2, 5, 1]
    assert alive_replicas(image, p, "az-b") == [3]
    assert alive_replicas(image, p, "az-c") == []
    assert alive_replicas(image, p, "az-a", offline=(2,)) == [5, 1]


def test_an_in_sync_replica_in_the_clients_rack_serves() -> None:
    image, p = partition_with((3, 1, 2), (3, 2))
    assert diskless_read_replica(image, p, "az-a", 3) == 2  # 1 is in the rack but out of sync
    assert diskless_read_replica(image, p, "az-a", 1) == 2
    assert diskless_read_replica(image, p, "az-a", 2) is None  # reached the right broker
    assert diskless_read_replica(image, p, "az-b", 1) == 3
    assert diskless_read_replica(image, p, "az-b", 3) is None


def test_any_in_sync_replica_of_the_rack_is_as_good() -> None:
    image, p = partition_with((1, 2, 5), (1, 2, 5))
    assert diskless_read_replica(image, p, "az-a", 2) is None
    assert diskless_read_replica(image, p, "az-a", 5) is None
    assert diskless_read_replica(image, p, "az-a", 3) == 1  # a broker outside: the first


def test_out_of_sync_replicas_of_the_rack_serve_when_no_in_sync_one_is_there() -> None:
    image, p = partition_with((3, 1, 2), (3,))
    assert diskless_read_replica(image, p, "az-a", 3) == 1
    assert diskless_read_replica(image, p, "az-a", 2) is None  # any of them will do
    assert diskless_read_replica(image, p, "az-a", 1) is None
    empty_isr, p = partition_with((3, 1), ())
    assert diskless_read_replica(empty_isr, p, "az-b", 1) == 3


def test_no_replica_alive_in_the_rack_or_no_rack_serves_where_the_fetch_arrived() -> None:
    image, p = partition_with((3, 4, 6), (3, 4, 6))
    assert diskless_read_replica(image, p, "az-a", 1) is None  # no replica in az-a
    assert diskless_read_replica(image, p, "az-c", 3) is None  # 6 is fenced
    assert diskless_read_replica(image, p, "", 1) is None
    assert diskless_read_replica(image, p, None, 1) is None
    assert diskless_read_replica(image, p, "az-z", 1) is None


def test_a_replica_on_a_failed_log_dir_is_no_candidate() -> None:
    image, p = partition_with((1, 2, 3), (1, 2, 3), offline=(1,))
    assert diskless_read_replica(image, p, "az-a", 3) == 2
    assert diskless_read_replica(image, p, "az-a", 1) == 2
