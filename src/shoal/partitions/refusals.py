"""The refusals the seam answers for a partition before any kind is asked: a partition the image
does not have, and a request whose leader epoch is not the partition's (KIP-320)."""

from __future__ import annotations

from shoal.partitions.api import PartitionRef
from shoal.protocol.errors import ErrorCode, KafkaError


def unknown_partition(topic: str, partition: int) -> KafkaError:
    return KafkaError(
        ErrorCode.unknown_topic_or_partition,
        f"This server does not host this topic-partition: {topic}-{partition}",
    )


def check_leader_epoch(ref: PartitionRef, current_leader_epoch: int) -> KafkaError | None:
    """Kafka's leader epoch check of a client's request (KIP-320): None when it may proceed."""
    epoch = ref.topic.partitions[ref.partition].leader_epoch
    if current_leader_epoch < 0 or current_leader_epoch == epoch:
        return None
    if current_leader_epoch < epoch:
        return KafkaError(
            ErrorCode.fenced_leader_epoch,
            f"the request's leader epoch {current_leader_epoch} of {ref.name}-{ref.partition} is older than {epoch}",
        )
    return KafkaError(
        ErrorCode.unknown_leader_epoch,
        f"the request's leader epoch {current_leader_epoch} of {ref.name}-{ref.partition} is newer than {epoch}",
    )
