"""How partitions look in Metadata (v0-v14) and DescribeTopicPartitions: leader, replicas, ISR,
offline replicas, and for diskless partitions KIP-1163's rack-aware choice of brokers.

Every partition shows its true replicas and ISR. A diskless partition's replicas are caches of
object storage and any broker serves its Produce and Fetch requests, so the LeaderId a client is
given may differ from the true leader: one in the client's rack when the client gave a rack
(Metadata v14's RackId, or ``diskless_rack_id=`` in its client id), and an alive broker when the
leader is fenced or there is none. Clients that give no rack get the true leader while it is
alive (share consumers need it: only the leader serves ShareFetch).

The fields are named as in Kafka's response schemas, so handlers pass them straight through.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from shoal.cluster.placement import alive_replicas, preferred_brokers
from shoal.metadata.image import MetadataImage, PartitionImage, TopicImage
from shoal.protocol.errors import ErrorCode


def topic_fields(topic: TopicImage) -> dict[str, Any]:
    """Topic-level fields that depend on the topic's kind (Metadata v14's ``IsDiskless``)."""
    return {"is_diskless": topic.is_diskless}


def partition_fields(
    image: MetadataImage,
    topic: TopicImage,
    partition: PartitionImage,
    rack: str | None,
    offline: Mapping[tuple[str, int], object],
    node_id: int,
) -> dict[str, Any]:
    """One partition as Metadata and DescribeTopicPartitions show it, for a client in ``rack``
    (None: it gave none). A replica on a failed log dir (of this broker, or reported by its broker
    to the metadata) is listed in ``offline_replicas`` and leaves the ISR (KIP-112).

    A classic partition whose leader is fenced has no leader (LEADER_NOT_AVAILABLE) and the
    leader leaves the ISR shown. A diskless partition shows its true replicas, ISR and leader
    epoch, and as LeaderId (``diskless_leader``): in the client's rack, a replica there, else a
    broker there; else the true leader while it is alive, else an alive replica, else any alive
    broker. It is LEADER_NOT_AVAILABLE only when no broker is alive. ``PreferredProduceBrokers``
    (v14) are the alive brokers in the client's rack (all alive ones when none is there)."""
    offline_here = (topic.name, partition.partition) in offline
    offline_replicas = tuple(sorted({*partition.offline_replicas, *((node_id,) if offline_here else ())}))
    view: dict[str, Any] = {
        "error_code": ErrorCode.none,
        "partition_index": partition.partition,
        "leader_id": partition.leader,
        "leader_epoch": partition.leader_epoch,
        "replica_nodes": partition.replicas,
        "isr_nodes": tuple(b for b in partition.isr if b not in offline_replicas),
        "offline_replicas": offline_replicas,
        "preferred_produce_brokers": (),
        "eligible_leader_replicas": (),
        "last_known_elr": (),
    }
    if topic.is_diskless:
        preferred = preferred_brokers(image, partition.partition, rack)
        view["preferred_produce_brokers"] = tuple(preferred)
        view["leader_id"] = diskless_leader(image, partition, rack, offline_replicas, preferred)
    else:
        leader = image.brokers.get(partition.leader)
        if leader is None or leader.fenced:
            view["leader_id"] = -1
            view["isr_nodes"] = tuple(b for b in view["isr_nodes"] if b != partition.leader)
    if view["leader_id"] == -1:
        view["error_code"] = ErrorCode.leader_not_available
    return view


def diskless_leader(
    image: MetadataImage,
    partition: PartitionImage,
    rack: str | None,
    offline_replicas: Collection[int],
    preferred: list[int],
) -> int:
    """The LeaderId a client in ``rack`` is given for a diskless partition (KIP-1163): any broker
    serves its Produce and Fetch, so a client in a rack the leader is not in gets an alive replica
    in its rack (an in-sync one first), else an alive broker there (``preferred``, the partition's
    ``preferred_brokers``); a leader that is fenced (or none) is replaced by an alive replica (an
    in-sync one first), else by ``preferred[0]``; -1 only when no broker is alive."""
    leader = image.brokers.get(partition.leader)
    leader_alive = leader is not None and not leader.fenced
    if rack is not None and not (leader is not None and leader_alive and leader.rack == rack):
        here = alive_replicas(image, partition, rack, offline_replicas) or [
            b for b in preferred if image.brokers[b].rack == rack
        ]
        if here:
            return here[0]
    if leader_alive:
        return partition.leader
    return next(iter(alive_replicas(image, partition, None, offline_replicas) or preferred), -1)
