"""The Batch Coordinator's request and result types for rewriting stored batches: object
compaction (``replace_batches``: live batches of small or mostly dead objects moved into a new
object) and log compaction (``compact_partition``: a range of a ``cleanup.policy=compact``
partition swapped for its cleaned batches). Split from ``api`` to keep that module to the
interface itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from shoal.records.types import TimestampType

if TYPE_CHECKING:
    from shoal.coordinator.api import TopicIdPartition


@dataclass(frozen=True, slots=True)
class ObjectCandidate:
    """A committed object worth rewriting (object compaction): small, or mostly dead bytes."""

    object_key: str
    size: int
    used_size: int
    committed_at: datetime


@dataclass(frozen=True, slots=True)
class BatchMove:
    """Repoint one batch from where the compactor read it to where it wrote it.

    ``batch_id``, the partition, ``last_offset``, ``old_object_key``, ``old_byte_offset``
    and ``byte_size`` are the coordinates the compactor read: the move applies only if the
    coordinator still has exactly that batch there (a batch deleted or moved meanwhile is
    skipped, never re-created). ``base_offset`` is informational (tools, logs).
    """

    batch_id: int
    topic_id_partition: TopicIdPartition
    base_offset: int
    last_offset: int
    old_object_key: str
    old_byte_offset: int
    new_byte_offset: int
    byte_size: int


@dataclass(frozen=True, slots=True)
class ReplaceResult:
    """What one ``replace_batches`` transaction did."""

    moved: int
    skipped: int
    moved_bytes: int
    new_object_state: str  # an ObjectState value: DELETING when nothing was moved
    emptied_object_keys: tuple[str, ...]  # old objects now marked for deletion


# Log compaction (cleanup.policy=compact): a broker-side cleaner keeps the latest record per key of
# a partition's offset range and swaps the range's batches for the cleaned ones (``compact_partition``).


@dataclass(frozen=True, slots=True)
class CleanedBatch:
    """One batch of a compacted range as written into the new object: the records' original
    offsets (offsets never move; the log keeps gaps), the source batch's producer fields and flags."""

    base_offset: int
    last_offset: int
    byte_offset: int  # in the new object
    size: int
    batch_max_timestamp: int
    message_timestamp_type: TimestampType
    producer_id: int = -1
    producer_epoch: int = -1
    base_sequence: int = -1
    last_sequence: int = -1
    is_transactional: bool = False
    is_control: bool = False


@dataclass(frozen=True, slots=True)
class SourceBatch:
    """A batch the compactor read: it must still be exactly there for the swap to apply."""

    batch_id: int
    object_key: str
    byte_offset: int
    size: int
    base_offset: int
    last_offset: int


@dataclass(frozen=True, slots=True)
class CompactPartitionRequest:
    topic_id_partition: TopicIdPartition
    start_offset: int  # first offset of the rewritten range (a batch boundary)
    end_offset: int  # exclusive; a batch boundary
    source_batches: list[SourceBatch]  # every batch of the partition in the range, in offset order
    new_batches: list[CleanedBatch]  # what replaces them, in offset order, each within the range
    cleaned_offset: int  # the cleaner checkpoint to store (Kafka's cleaner-offset-checkpoint): usually end


@dataclass(frozen=True, slots=True)
class CompactPartitionResult:
    """What one ``compact_partition`` transaction did; ``applied`` False: nothing changed but the
    new object's registration, marked for deletion (the range changed meanwhile, or no partition)."""

    applied: bool
    removed_batches: int
    removed_bytes: int  # bytes of old batches no longer referenced
    new_object_state: str  # an ObjectState value: DELETING when nothing applied or no new batch was written
    emptied_object_keys: tuple[str, ...]  # old objects now marked for deletion
