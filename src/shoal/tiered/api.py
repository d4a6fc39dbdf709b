"""KIP-405's types and interfaces, under Kafka's names (``org.apache.kafka.server.log.remote.storage``).

- A *remote log segment* is a classic log segment copied to remote storage: its id is the
  partition and a random UUID (``RemoteLogSegmentId``), so copying the same offsets twice (a
  leader change mid-copy) gives two segments, of which only one ever finishes.
- ``RemoteLogSegmentMetadata`` describes one, with its offsets, the leader epochs it holds
  (epoch -> first offset, as the segment's slice of the leader-epoch checkpoint), size and
  state. States move only forward: COPY_SEGMENT_STARTED -> COPY_SEGMENT_FINISHED ->
  DELETE_SEGMENT_STARTED -> DELETE_SEGMENT_FINISHED (a started copy may go straight to
  DELETE_SEGMENT_STARTED when it is abandoned).
- ``RemoteStorageManager`` moves segment data: copy a segment with its indexes, fetch a byte
  range of it or one of its indexes, delete it.
- ``RemoteLogMetadataManager`` keeps the metadata durable and answers the lookups the broker
  needs (which segment holds an offset in an epoch, the highest copied offset of an epoch, the
  remote log size).
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

__all__ = [
    "IndexType",
    "LogSegmentData",
    "RemoteLogMetadataManager",
    "RemoteLogSegmentId",
    "RemoteLogSegmentMetadata",
    "RemoteLogSegmentMetadataUpdate",
    "RemoteLogSegmentState",
    "RemotePartitionDeleteMetadata",
    "RemotePartitionDeleteState",
    "RemoteResourceNotFoundError",
    "RemoteStorageError",
    "RemoteStorageManager",
    "TopicIdPartition",
    "epochs_in",
    "valid_transition",
]


@dataclass(frozen=True, slots=True, order=True)
class TopicIdPartition:
    topic_id: uuid.UUID
    partition: int
    topic: str = field(default="", compare=False)


@dataclass(frozen=True, slots=True)
class RemoteLogSegmentId:
    topic_id_partition: TopicIdPartition
    id: uuid.UUID

    @classmethod
    def generate(cls, tp: TopicIdPartition) -> RemoteLogSegmentId:
        return cls(tp, uuid.uuid4())


class RemoteLogSegmentState(enum.IntEnum):
    """Kafka's ``RemoteLogSegmentState`` (the ids are Kafka's)."""

    COPY_SEGMENT_STARTED = 0
    COPY_SEGMENT_FINISHED = 1
    DELETE_SEGMENT_STARTED = 2
    DELETE_SEGMENT_FINISHED = 3


_NEXT = {
    RemoteLogSegmentState.COPY_SEGMENT_STARTED: {
        RemoteLogSegmentState.COPY_SEGMENT_FINISHED, RemoteLogSegmentState.DELETE_SEGMENT_STARTED,
    },
    RemoteLogSegmentState.COPY_SEGMENT_FINISHED: {RemoteLogSegmentState.DELETE_SEGMENT_STARTED},
    RemoteLogSegmentState.DELETE_SEGMENT_STARTED: {RemoteLogSegmentState.DELETE_SEGMENT_FINISHED},
    RemoteLogSegmentState.DELETE_SEGMENT_FINISHED: set(),
}


def valid_transition(old: RemoteLogSegmentState, new: RemoteLogSegmentState) -> bool:
    """Kafka's ``RemoteLogSegmentState.isValidTransition`` (staying in a state is not a transition)."""
    return new in _NEXT[old]


class RemotePartitionDeleteState(enum.IntEnum):
    """Kafka's ``RemotePartitionDeleteState``: a deleted topic's remote data going away."""

    DELETE_PARTITION_MARKED = 0
    DELETE_PARTITION_STARTED = 1
    DELETE_PARTITION_FINISHED = 2


@dataclass(frozen=True, slots=True)
class RemoteLogSegmentMetadata:
    segment_id: RemoteLogSegmentId
    start_offset: int
    end_offset: int  # inclusive, as Kafka's
    max_timestamp_ms: int
    broker_id: int
    event_timestamp_ms: int
    segment_size_in_bytes: int
    #: Leader epoch -> the first offset of that epoch in this segment, ascending.
    segment_leader_epochs: Mapping[int, int]
    state: RemoteLogSegmentState = RemoteLogSegmentState.COPY_SEGMENT_STARTED
    #: What the RemoteStorageManager returned from copying (Kafka's CustomMetadata), if anything.
    custom_metadata: bytes | None = None
    #: The topic's tiered epoch when it was copied (KIP-950's state machine).
    tiered_epoch: int = 0

    @property
    def topic_id_partition(self) -> TopicIdPartition:
        return self.segment_id.topic_id_partition


@dataclass(frozen=True, slots=True)
class RemoteLogSegmentMetadataUpdate:
    segment_id: RemoteLogSegmentId
    event_timestamp_ms: int
    state: RemoteLogSegmentState
    broker_id: int
    custom_metadata: bytes | None = None


@dataclass(frozen=True, slots=True)
class RemotePartitionDeleteMetadata:
    topic_id_partition: TopicIdPartition
    state: RemotePartitionDeleteState
    event_timestamp_ms: int
    broker_id: int


class IndexType(enum.Enum):
    """Kafka's ``RemoteStorageManager.IndexType``."""

    OFFSET = "offset"
    TIMESTAMP = "timestamp"
    PRODUCER_SNAPSHOT = "producer-snapshot"
    TRANSACTION = "transaction"
    LEADER_EPOCH = "leader-epoch-checkpoint"


@dataclass(frozen=True, slots=True)
class LogSegmentData:
    """The files of one rolled segment, as Kafka's ``LogSegmentData`` hands them to the RSM.
    ``leader_epoch_index`` is the leader-epoch checkpoint's content for this segment."""

    log_segment: Path
    offset_index: Path
    time_index: Path
    transaction_index: Path | None
    producer_snapshot_index: Path | None
    leader_epoch_index: bytes


class RemoteStorageError(Exception):
    """Kafka's ``RemoteStorageException``: the remote storage failed; retriable by the caller."""


class RemoteResourceNotFoundError(RemoteStorageError):
    """Kafka's ``RemoteResourceNotFoundException``: the segment (or its index) is not there."""


class RemoteStorageManager(Protocol):
    """Moves segment data to and from remote storage. Methods are coroutines (object storage is)."""

    async def copy_log_segment_data(self, metadata: RemoteLogSegmentMetadata, data: LogSegmentData) -> bytes | None:
        """Copy the segment and its indexes; returns custom metadata (None: none). Raises
        RemoteStorageError; a failed copy may leave parts behind for ``delete_log_segment_data``."""
        ...

    async def fetch_log_segment(self, metadata: RemoteLogSegmentMetadata, start: int, end: int | None = None) -> bytes:
        """Bytes ``[start, end]`` (inclusive, as Kafka's) of the segment's log file; ``end`` None:
        to its end."""
        ...

    async def fetch_index(self, metadata: RemoteLogSegmentMetadata, index_type: IndexType) -> bytes:
        """One index of the segment; RemoteResourceNotFoundError when it has none of that type."""
        ...

    async def delete_log_segment_data(self, metadata: RemoteLogSegmentMetadata) -> None:
        """Delete everything of the segment; idempotent (nothing there is not an error)."""
        ...


class RemoteLogMetadataManager(Protocol):
    """Durable remote-segment metadata (Kafka's RLMM), shared by every broker of the cluster.
    Methods block (they talk to the database): call them off the event loop."""

    def add_remote_log_segment_metadata(self, metadata: RemoteLogSegmentMetadata) -> None:
        """Record a segment whose copy starts (state COPY_SEGMENT_STARTED); ValueError otherwise or
        when the id exists."""
        ...

    def update_remote_log_segment_metadata(self, update: RemoteLogSegmentMetadataUpdate) -> None:
        """Move a segment to a later state (``valid_transition``); RemoteResourceNotFoundError
        for an unknown id, ValueError for an invalid transition. DELETE_SEGMENT_FINISHED forgets it."""
        ...

    def remote_log_segment_metadata(
        self, tp: TopicIdPartition, leader_epoch: int, offset: int
    ) -> RemoteLogSegmentMetadata | None:
        """The COPY_SEGMENT_FINISHED segment holding ``offset`` in ``leader_epoch`` (the offset
        lies within the segment and within that epoch's range in it), else None."""
        ...

    def highest_offset_for_epoch(self, tp: TopicIdPartition, leader_epoch: int) -> int | None:
        """The highest offset copied (COPY_SEGMENT_FINISHED) under ``leader_epoch``, else None."""
        ...

    def list_remote_log_segments(
        self, tp: TopicIdPartition, leader_epoch: int | None = None
    ) -> list[RemoteLogSegmentMetadata]:
        """Every segment of the partition not yet DELETE_SEGMENT_FINISHED, by start offset (with
        ``leader_epoch``: those holding that epoch, COPY_SEGMENT_FINISHED only)."""
        ...

    def remote_log_size(self, tp: TopicIdPartition) -> int:
        """Bytes of the partition's COPY_SEGMENT_FINISHED segments."""
        ...

    def put_remote_partition_delete_metadata(self, metadata: RemotePartitionDeleteMetadata) -> None:
        """Record a deleted partition's remote-deletion progress."""
        ...

    def remote_partition_delete_state(self, tp: TopicIdPartition) -> RemotePartitionDeleteState | None: ...

    def put_log_start_offset(self, tp: TopicIdPartition, offset: int) -> None:
        """A DeleteRecords offset inside remote data (Kafka keeps the log start in each replica's
        log-start-offset checkpoint; here every broker reads it from the shared store, so a new
        leader keeps it). Only ever moves forward."""
        ...

    def log_start_offset(self, tp: TopicIdPartition) -> int | None:
        """The offset ``put_log_start_offset`` recorded for the partition, if any."""
        ...

    def partitions_with_segments(self) -> list[TopicIdPartition]:
        """Every partition with segments recorded (for cleaning up after deleted topics)."""
        ...

    def close(self) -> None: ...


def epochs_in(leader_epochs: Iterable[tuple[int, int]], start: int, end: int) -> dict[int, int]:
    """The slice of a partition's leader-epoch entries ``(epoch, start offset)`` covering offsets
    ``[start, end]``: each epoch that has offsets there, with its first offset in the range."""
    entries = sorted(leader_epochs, key=lambda e: e[1])
    out: dict[int, int] = {}
    for i, (epoch, first) in enumerate(entries):
        nxt = entries[i + 1][1] if i + 1 < len(entries) else None
        if first > end or (nxt is not None and nxt <= start):
            continue
        out[epoch] = max(first, start)
    return out
