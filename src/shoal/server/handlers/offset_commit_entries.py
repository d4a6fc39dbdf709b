"""The partitions of an OffsetCommit or TxnOffsetCommit request, checked against the metadata image.

Kafka checks in its request layer, not in the group coordinator, that each committed
partition exists: an unknown topic or partition answers UNKNOWN_TOPIC_OR_PARTITION (or
UNKNOWN_TOPIC_ID for OffsetCommit's topic-id versions) and never reaches the coordinator.
Both commit APIs share that step and the shape of their answer (topics of partitions with
an error code each), so it is written once here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from shoal.groups.coordinator import OffsetCommitEntry
from shoal.metadata.image import MetadataImage
from shoal.protocol.build import make
from shoal.protocol.errors import ErrorCode


class CommitPartitions:
    """The request's topics resolved: ``entries`` go to the group coordinator, ``answer`` takes its
    errors (one per entry, in order) and ``topics`` builds the response's topics in request order."""

    def __init__(self, image: MetadataImage, topics: Sequence[Any], *, by_id: bool = False) -> None:
        self._by_id = by_id
        self.entries: list[OffsetCommitEntry] = []
        self._slots: list[list[Any]] = []  # the [partition, error] cells the coordinator's answers go into
        self._answers: list[tuple[Any, list[list[Any]]]] = []
        missing = ErrorCode.unknown_topic_id if by_id else ErrorCode.unknown_topic_or_partition
        for t in topics:
            topic = image.topics_by_id.get(t.topic_id) if by_id else image.topic(t.name)
            cells = []
            for p in t.partitions:
                cell: list[Any] = [p.partition_index, missing]
                if topic is not None:
                    if p.partition_index in topic.partitions:
                        self.entries.append(
                            OffsetCommitEntry(
                                topic=topic.name,
                                partition=p.partition_index,
                                topic_id=topic.topic_id,
                                offset=p.committed_offset,
                                leader_epoch=getattr(p, "committed_leader_epoch", -1),
                                metadata=p.committed_metadata,
                            )
                        )
                        self._slots.append(cell)
                    else:
                        cell[1] = ErrorCode.unknown_topic_or_partition
                cells.append(cell)
            self._answers.append((t.topic_id if by_id else t.name, cells))

    def answer(self, errors: Sequence[ErrorCode]) -> None:
        for cell, error in zip(self._slots, errors, strict=True):
            cell[1] = error

    def topics(self, topic_cls: type, partition_cls: type) -> tuple[Any, ...]:
        by_id = self._by_id
        return tuple(
            make(
                topic_cls,
                name=None if by_id else key,
                topic_id=key if by_id else None,
                partitions=tuple(make(partition_cls, partition_index=i, error_code=e) for i, e in cells),
            )
            for key, cells in self._answers
        )
