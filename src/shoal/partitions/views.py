"""How partitions look in Metadata (v0-v14) and DescribeTopicPartitions: leader, replicas, ISR,
offline replicas, and for diskless partitions KIP-1163's rack-aware choice of brokers.

The fields are named as in Kafka's response schemas, so handlers pass them straight through.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from shoal.cluster.placement import preferred_brokers
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
    """One partition as Metadata and DescribeTopicPartitions show it. A classic replica on a failed
    log dir (of this broker, or reported by its broker to the metadata) is listed in
    ``offline_replicas`` and leaves the ISR (KIP-112); a classic
    partition whose leader is fenced has no leader (LEADER_NOT_AVAILABLE). A diskless partition's
    leader is an alive broker, in the client's rack when there is one (KIP-1163)."""
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
        if preferred:
            # Any broker serves a diskless partition: an alive one (in the client's rack) is its
            # leader and, as the rack-aware leader KIP says, its sole replica and ISR.
            view["leader_id"] = preferred[0]
            view["replica_nodes"] = view["isr_nodes"] = (preferred[0],)
    else:
        leader = image.brokers.get(partition.leader)
        if leader is None or leader.fenced:
            view["error_code"] = ErrorCode.leader_not_available
            view["leader_id"] = -1
            view["isr_nodes"] = tuple(b for b in view["isr_nodes"] if b != partition.leader)
    return view
