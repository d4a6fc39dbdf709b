"""Where things live among the brokers that are alive (unfenced), decided the same way by every
broker from its metadata image, so no broker has to ask another.

- A diskless partition is served by any broker: clients get one in their own rack (KIP-1163),
  and consumers read from a replica in their rack, in sync with the Batch Coordinator when one is
  there (``diskless_read_replica``).
- A group's coordinator is the owner of the group's coordinator partition, computed exactly as
  Kafka picks the group's ``__consumer_offsets`` partition (GroupCoordinatorService.partitionFor:
  ``Utils.abs(groupId.hashCode()) % offsets.topic.num.partitions``);
  partitions are spread evenly over the registered brokers, and a fenced broker's partitions
  stand in on alive ones (``partition_owner``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Sequence

from shoal.metadata.image import MetadataImage, PartitionImage
from shoal.protocol.key_partitions import group_partition


def partition_owner(partition: int, registered: Sequence[int], alive: Sequence[int]) -> int | None:
    """The broker owning a coordinator partition. Its home is ``registered[partition % n]`` over
    every registered broker (fenced ones included), which spreads partitions evenly; while the
    home is fenced, the alive broker of highest rendezvous weight stands in, so a broker that dies
    moves only its own partitions, and gets them back when it returns (as Kafka's preferred
    leaders do)."""
    if not alive:
        return None
    ordered = sorted(registered)
    home = ordered[partition % len(ordered)] if ordered else None
    if home in alive:
        return home
    return max(alive, key=lambda b: (_weight(partition, b), b))


def _weight(partition: int, broker: int) -> int:
    """A well-mixed 64-bit weight (CRC32 is linear and would skew the spread)."""
    return int.from_bytes(hashlib.blake2b(f"{partition}:{broker}".encode(), digest_size=8).digest(), "big")


def group_coordinator(image: MetadataImage, group_id: str, partitions: int) -> int | None:
    """The node that coordinates ``group_id`` now (None when no broker is alive)."""
    return partition_owner(
        group_partition(group_id, partitions), list(image.brokers), [b.node_id for b in image.alive_brokers()]
    )


def preferred_brokers(image: MetadataImage, partition: int, rack: str | None) -> list[int]:
    """KIP-1163's rack-aware choice for a diskless partition: alive brokers in the client's rack
    (every alive broker when none is there), rotated by partition index for round-robin spread."""
    alive = image.alive_brokers()
    in_rack = [b.node_id for b in alive if rack is not None and b.rack == rack]
    candidates = in_rack or [b.node_id for b in alive]
    if not candidates:
        return []
    start = partition % len(candidates)
    return candidates[start:] + candidates[:start]


def preferred_read_replica(image: MetadataImage, partition: PartitionImage, client_rack: str) -> int | None:
    """KIP-392's RackAwareReplicaSelector: the replica a consumer in ``client_rack`` should read a
    classic partition from, when it is not the leader: an alive in-sync replica in that rack
    (the first in replica order). None when the leader is in the rack or no such replica exists."""
    leader = image.brokers.get(partition.leader)
    if not client_rack or leader is None or leader.rack == client_rack:
        return None
    for b in partition.replicas:
        broker = image.brokers.get(b)
        if (
            b in partition.isr and b != partition.leader and b not in partition.offline_replicas
            and broker is not None and not broker.fenced and broker.rack == client_rack
        ):
            return b
    return None


def alive_replicas(
    image: MetadataImage, partition: PartitionImage, rack: str | None = None, offline: Collection[int] = ()
) -> list[int]:
    """The partition's replicas on alive brokers (registered, unfenced, the replica not in
    ``offline_replicas`` nor ``offline``), only those in ``rack`` when it is given: the ISR
    members first, then the others, each in replica order."""
    alive = [
        b for b in partition.replicas
        if (broker := image.brokers.get(b)) is not None and not broker.fenced
        and b not in partition.offline_replicas and b not in offline
        and (rack is None or broker.rack == rack)
    ]
    return [b for b in alive if b in partition.isr] + [b for b in alive if b not in partition.isr]


def diskless_read_replica(
    image: MetadataImage, partition: PartitionImage, client_rack: str | None, node_id: int
) -> int | None:
    """KIP-1163's consume path: the replica a consumer in ``client_rack`` whose Fetch of a diskless
    partition reached broker ``node_id`` should read from (PreferredReadReplica). The candidates
    are the alive replicas in that rack, the ones in sync (with the Batch Coordinator) first: an
    out-of-sync one is used only when no in-sync one is in the rack. None (this broker serves the
    fetch) when ``node_id`` is one of the best candidates (the in-sync ones, or all of them when
    none is in sync), or when the client has no rack or no replica is alive in it."""
    if not client_rack:
        return None
    candidates = alive_replicas(image, partition, client_rack)
    if not candidates:
        return None
    in_sync = [b for b in candidates if b in partition.isr]
    if node_id in (in_sync or candidates):
        return None
    return candidates[0]
