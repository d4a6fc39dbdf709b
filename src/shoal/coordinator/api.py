"""The Batch Coordinator interface of KIP-1164, as a Python protocol.

The coordinator is the source of truth for diskless topics: it orders batches,
assigns offsets without gaps or duplicates, deduplicates idempotent producers and
keeps the coordinates (object key + byte range) of every batch. Implementations
are synchronous and blocking (like the KIP's Java interface); the broker calls
them from a worker thread so the event loop never waits on a database.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

from shoal.coordinator.compaction_types import (
    BatchMove,
    CompactPartitionRequest,
    CompactPartitionResult,
    ObjectCandidate,
    ReplaceResult,
)
from shoal.protocol.errors import ErrorCode
from shoal.records.types import TimestampType


class CoordinatorUnavailableError(Exception):
    """The coordinator could not be reached or did not answer; the call's outcome is unknown.

    Any backend raises this when its store is unreachable (a network error, a timeout,
    a lost connection), so callers can tell an outage they should ride out from a bug.
    A write may have happened although the caller got this error (its answer was lost):
    callers must not assume it did not.
    """


@dataclass(frozen=True, slots=True)
class TopicIdPartition:
    topic_id: uuid.UUID
    partition: int
    topic_name: str = field(default="", compare=False)


@dataclass(frozen=True, slots=True)
class CreateTopicAndPartitionsRequest:
    topic_id: uuid.UUID
    topic_name: str
    num_partitions: int


@dataclass(frozen=True, slots=True)
class TxnControl:
    """What a transaction marker (a control batch of one COMMIT or ABORT record) says.

    ``coordinator_epoch`` is the epoch of the transaction coordinator that wrote it: a marker
    from an older one than the partition last saw for the producer is refused
    (TRANSACTION_COORDINATOR_FENCED), so a deposed coordinator cannot end a transaction twice.
    """

    commit: bool
    coordinator_epoch: int


@dataclass(frozen=True, slots=True)
class CommitBatchRequest:
    """One batch inside an uploaded WAL segment object.

    ``is_transactional``: the batch's transactional attribute (KIP-98). ``control``: set for a
    transaction marker the broker built (a control batch: one record, so ``base_offset ==
    last_offset``, producer id and epoch set, sequences -1); markers are stored and fetched like
    any batch, and the coordinator does the transaction bookkeeping when it commits them.
    """

    request_id: int
    topic_id_partition: TopicIdPartition
    byte_offset: int
    size: int
    base_offset: int
    last_offset: int
    batch_max_timestamp: int
    message_timestamp_type: TimestampType
    producer_id: int = -1
    producer_epoch: int = -1
    base_sequence: int = -1
    last_sequence: int = -1
    is_transactional: bool = False
    control: TxnControl | None = None


@dataclass(frozen=True, slots=True)
class CommitBatchResponse:
    errors: ErrorCode
    assigned_base_offset: int
    log_append_time: int
    log_start_offset: int
    is_duplicate: bool
    request: CommitBatchRequest


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    """Where a batch is and what it is. ``is_transactional`` / ``is_control`` are the batch's
    attributes as committed (a transaction marker is both), stored so readers that never open the
    bytes (the Spark pipeline) can tell data from markers and transactional data."""

    topic_id_partition: TopicIdPartition
    byte_offset: int
    byte_size: int
    base_offset: int
    last_offset: int
    log_append_timestamp: int
    batch_max_timestamp: int
    timestamp_type: TimestampType
    producer_id: int = -1
    producer_epoch: int = -1
    base_sequence: int = -1
    last_sequence: int = -1
    is_transactional: bool = False
    is_control: bool = False


@dataclass(frozen=True, slots=True)
class BatchInfo:
    batch_id: int
    object_key: str
    metadata: BatchMetadata

    @property
    def byte_range(self) -> tuple[str, int, int]:
        """(object key, start, end) of the batch's bytes, as ranged GETs are planned."""
        return self.object_key, self.metadata.byte_offset, self.metadata.byte_offset + self.metadata.byte_size


@dataclass(frozen=True, slots=True)
class FindBatchRequest:
    """``read_committed``: a READ_COMMITTED fetch, which reads only below the last stable offset
    and needs the aborted transactions of what it reads."""

    topic_id_partition: TopicIdPartition
    offset: int
    max_partition_fetch_bytes: int
    read_committed: bool = False


@dataclass(frozen=True, slots=True)
class FindBatchResponse:
    """``last_stable_offset``: the first offset of the partition's earliest ongoing transaction
    (never below the log start), else the high watermark; -1 only with an error that knows no
    partition. ``aborted_transactions``: (producer id, first offset) of every aborted transaction
    overlapping [fetch offset, end of the returned batches), only for a ``read_committed`` request
    (Kafka's FetchResponse AbortedTransactions)."""

    errors: ErrorCode
    batches: list[BatchInfo]
    log_start_offset: int
    high_watermark: int
    last_stable_offset: int = -1
    aborted_transactions: list[tuple[int, int]] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class ProducerStateEntry:
    """What a diskless partition knows of one producer (Kafka's ProducerStateEntry as DescribeProducers
    shows it), so operators can find hanging transactions on diskless partitions too.

    ``last_sequence``: its last remembered batch's (-1: none, a producer known only through markers
    or whose epoch a marker bumped). ``last_timestamp``: that batch's max timestamp (its append time
    under LogAppendTime) while the coordinator still holds the batch, else -1; markers do not move
    it (Kafka's does: the coordinator keeps no marker timestamps). ``coordinator_epoch``: of its last
    marker (-1: none). ``current_txn_start_offset``: its ongoing transaction's first offset (-1: none).
    """

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: int
    current_txn_start_offset: int


class ListOffsetsTimestamp:
    """Special timestamps of ListOffsets, as Kafka's ListOffsetsRequest defines them."""

    LATEST = -1
    EARLIEST = -2
    MAX_TIMESTAMP = -3
    EARLIEST_LOCAL = -4
    LATEST_TIERED = -5


@dataclass(frozen=True, slots=True)
class ListOffsetsRequest:
    """``read_committed``: a READ_COMMITTED client's lookup, bounded by the last stable offset."""

    topic_id_partition: TopicIdPartition
    timestamp: int
    read_committed: bool = False


@dataclass(frozen=True, slots=True)
class ListOffsetsResponse:
    errors: ErrorCode
    topic_id_partition: TopicIdPartition
    timestamp: int
    offset: int


@dataclass(frozen=True, slots=True)
class DeleteRecordsRequest:
    topic_id_partition: TopicIdPartition
    offset: int


@dataclass(frozen=True, slots=True)
class DeleteRecordsResponse:
    errors: ErrorCode
    low_watermark: int


@dataclass(frozen=True, slots=True)
class DeleteTieredBatchesRequest:
    """Every batch of the partition wholly below ``offset`` is now held by tiered segments
    (KIP-1163 "Moving to Tiered Storage")."""

    topic_id_partition: TopicIdPartition
    offset: int


@dataclass(frozen=True, slots=True)
class DeleteTieredBatchesResponse:
    """What went, and the partition's earliest local offset (its first batch left here, or the
    high watermark when none is left)."""

    errors: ErrorCode
    batches_deleted: int
    bytes_deleted: int
    local_start_offset: int


@dataclass(frozen=True, slots=True)
class FileToDelete:
    object_key: str
    marked_for_deletion_at: datetime


@dataclass(frozen=True, slots=True)
class DeleteFilesRequest:
    object_key_paths: frozenset[str]


@dataclass(frozen=True, slots=True)
class EnforceRetentionRequest:
    """A partition's time and size retention (``retention.ms`` / ``retention.bytes``; -1 = unlimited)."""

    topic_id_partition: TopicIdPartition
    retention_bytes: int
    retention_ms: int


@dataclass(frozen=True, slots=True)
class EnforceRetentionResponse:
    """What retention deleted from one partition, and where its log now starts."""

    errors: ErrorCode
    batches_deleted: int
    bytes_deleted: int
    log_start_offset: int


@dataclass(frozen=True, slots=True)
class PartitionDescription:
    """Offsets and live bytes of one diskless partition (kafka-diskless-metadata's overview)."""

    partition: int
    log_start_offset: int
    high_watermark: int
    byte_size: int  # bytes of the partition's live batches in object storage


@dataclass(frozen=True, slots=True)
class TopicDescription:
    """KIP-1163's "diskless topic overview".

    ``object_bytes`` is the total size of the objects holding a live batch of the
    topic (what the topic keeps alive in storage, other topics' batches included);
    ``deleted_object_bytes`` the total size of objects marked for deletion that
    held batches of the topic (emptied by retention, DeleteRecords or deletion and
    waiting for a broker to delete them physically).
    """

    topic_id: uuid.UUID
    topic_name: str
    partitions: list[PartitionDescription]
    object_count: int
    object_bytes: int
    deleted_object_count: int
    deleted_object_bytes: int


class ObjectState:
    """States of a committed object, as the coordinator stores them."""

    UPLOADED = "uploaded"
    DELETING = "deleting"  # marked for deletion: no live batch is left in it


@dataclass(frozen=True, slots=True)
class ObjectDescription:
    """KIP-1163's "object metadata": key, total size, used size, and the live batches in it."""

    object_key: str
    size: int
    used_size: int
    state: str  # an ObjectState value
    uploader_broker_id: int
    committed_at: datetime
    marked_for_deletion_at: datetime | None
    batches: list[BatchInfo]


class BatchCoordinator(Protocol):
    """KIP-1164's pluggable Batch Coordinator.

    Diskless partitions have no leader log, so the coordinator also keeps what a Kafka partition
    leader keeps for idempotent and transactional producers (KIP-1163): per producer and
    partition its last batches, epoch, coordinator epoch and ongoing transaction, and the
    partition's aborted transactions (Kafka's ``.txnindex``), from which it answers the last
    stable offset (LSO) and a READ_COMMITTED fetch's aborted transactions. Transaction markers
    are real control batches the broker uploads and commits like any batch (``commit_file`` with
    ``control`` set); the bookkeeping happens in that commit's transaction. The rules are
    Kafka's ProducerAppendInfo (``coordinator/idempotence.py``, ``coordinator/transactions.py``).
    """

    def create_topic_and_partitions(self, requests: set[CreateTopicAndPartitionsRequest]) -> None:
        """Initialise the logs of new diskless partitions (idempotent)."""

    def commit_file(
        self,
        object_key: str,
        uploader_broker_id: int,
        file_size: int,
        batches: list[CommitBatchRequest],
    ) -> list[CommitBatchResponse]:
        """Assign offsets to the batches of one uploaded object, in one transaction.

        Responses come back in the order of ``batches``. A batch whose partition is
        unknown answers UNKNOWN_TOPIC_OR_PARTITION; a duplicate of an idempotent batch
        answers its original offset with ``is_duplicate``; sequence and epoch errors
        answer OUT_OF_ORDER_SEQUENCE_NUMBER / INVALID_PRODUCER_EPOCH.

        Transactions (transaction versions 0/1, Kafka's rules): a transactional batch of a
        producer with no ongoing transaction on the partition starts one at its assigned base
        offset; a non-transactional batch of a producer inside a transaction answers
        INVALID_TXN_STATE, a transactional one of another epoch than the transaction's
        INVALID_PRODUCER_EPOCH. A marker (``control``) is not deduplicated: an older producer
        epoch than the producer's current one answers INVALID_PRODUCER_EPOCH, an older
        coordinator epoch than the last recorded TRANSACTION_COORDINATOR_FENCED; otherwise it
        takes one offset, ends the ongoing transaction if any (an ABORT records it as aborted:
        producer id, first offset, the marker's offset), makes its epoch the producer's current
        one (a bumped epoch forgets the producer's remembered batches) and remembers the
        coordinator epoch. A marker with nothing ongoing is appended and records nothing.
        """

    def find_batches(
        self, find_batch_requests: list[FindBatchRequest], fetch_max_bytes: int
    ) -> list[FindBatchResponse]:
        """Coordinates of the batches from each requested offset on, bounded by the byte limits.

        An offset outside [log start, high watermark] answers OFFSET_OUT_OF_RANGE; one at or
        above the log start whose batches went to tiered storage (below the first batch left,
        ``delete_tiered_batches``) answers OFFSET_MOVED_TO_TIERED_STORAGE with no batches; one
        log compaction removed (``compact_partition``) answers the batches from the next one.

        Every answer with a known partition carries its last stable offset. A ``read_committed``
        request returns only batches wholly below it (an offset at or past it: no batches, no
        error) and the aborted transactions overlapping [offset, end of the returned batches),
        as Kafka's ``collectAbortedTransactions``; the batches, LSO and aborted transactions come
        from one snapshot."""

    def list_offsets(self, requests: list[ListOffsetsRequest]) -> list[ListOffsetsResponse]:
        """Earliest, latest, max-timestamp or first-offset-at-timestamp lookups. EARLIEST_LOCAL
        (-4) is the first batch's offset (at least the log start; the high watermark when no batch
        is left), which differs from EARLIEST only once batches moved to tiered storage;
        LATEST_TIERED (-5) is -1 (tiered storage answers it).

        ``read_committed`` bounds the answers by the last stable offset as Kafka's
        ``fetchOffsetForTimestamp`` does for READ_COMMITTED: LATEST answers the LSO, and any
        answer other than EARLIEST / EARLIEST_LOCAL at or past it is no answer (-1, -1)."""

    def get_log_info(self, topic_id: uuid.UUID, partition: int) -> tuple[int, int, int] | None:
        """(log start offset, high watermark, bytes of the batches held) of a diskless partition
        from its log row (one indexed read), or None when the partition is unknown."""

    def transaction_state(self, topic_id: uuid.UUID, partition: int) -> tuple[int, list[tuple[int, int, int]]] | None:
        """(last stable offset, every aborted transaction kept as (producer id, first offset, last
        offset) in marker order) of a diskless partition from one snapshot, or None when the
        partition is unknown: what a reader that skips Fetch (the Spark pipeline) needs to read
        committed data only."""

    def describe_producers(self, topic_id: uuid.UUID, partition: int) -> list[ProducerStateEntry] | None:
        """Every producer the diskless partition knows (remembered batches and/or a transaction row),
        in producer id order, from one snapshot, or None when the partition is unknown: what
        DescribeProducers answers (``kafka-transactions.sh describe-producers`` / ``find-hanging``).
        Its epoch is the later of its batches' and its transaction row's; see ProducerStateEntry."""

    def delete_records(self, requests: list[DeleteRecordsRequest]) -> list[DeleteRecordsResponse]:
        """Move log start offsets and logically delete the batches below them; aborted
        transactions whose marker is below the new log start are forgotten."""

    def delete_tiered_batches(self, requests: list[DeleteTieredBatchesRequest]) -> list[DeleteTieredBatchesResponse]:
        """Delete the batches wholly below each request's offset, which tiered storage now holds;
        unlike ``delete_records`` the log start offset stays (those offsets are still part of the
        log, read from tiered segments), and so do the aborted transactions (they go once the log
        start passes their marker). Emptied objects are marked for deletion. An offset above
        the high watermark answers OFFSET_OUT_OF_RANGE, an unknown partition
        UNKNOWN_TOPIC_OR_PARTITION. One transaction per call; responses in request order.

        Afterwards ``find_batches`` at an offset in [log start, first batch) answers
        OFFSET_MOVED_TO_TIERED_STORAGE (Kafka's code for "read it from remote storage") and
        ``list_offsets`` EARLIEST_LOCAL (-4) answers the first batch's offset."""

    def enforce_retention(self, requests: list[EnforceRetentionRequest]) -> list[EnforceRetentionResponse]:
        """Delete whole batches from each log's start that time or size retention expired.

        Kafka's rules per batch, in offset order: first while the batch is older than
        ``retention_ms`` (LogAppendTime batches by their append time, CreateTime ones by
        their max timestamp), then while the log would still hold ``retention_bytes``
        without it. The log start offset moves to the first remaining batch (the high
        watermark when none remains); emptied objects are marked for deletion, and aborted
        transactions whose marker is below the new log start are forgotten. One
        transaction per call; responses in request order.
        """

    def delete_topics(self, topic_ids: set[uuid.UUID]) -> None:
        """Delete all logs, batches, producer and transaction state of the topics; emptied objects
        are marked for deletion."""

    def get_files_to_delete(self) -> list[FileToDelete]:
        """Objects marked for deletion that a broker may now delete physically."""

    def delete_files(self, request: DeleteFilesRequest) -> None:
        """Forget objects that a broker has deleted from object storage."""

    def is_safe_to_delete_file(self, object_key: str) -> bool:
        """True when no committed batch references the object (used by the GC of orphans)."""

    # Object compaction (KIP-1164 "Object Compaction": rewrite already-written objects).

    def list_compaction_candidates(
        self, min_age_ms: int, max_object_bytes: int, limit: int
    ) -> list[ObjectCandidate]:
        """Objects in state 'uploaded', committed at least ``min_age_ms`` ago, that are small
        (``size <= max_object_bytes``) or sparse (at most half of their bytes still used);
        oldest first, at most ``limit``."""

    def list_object_batches(self, object_keys: list[str]) -> dict[str, list[BatchInfo]]:
        """The live batches of each object, in byte order, from one snapshot (unknown keys: []),
        with their transactional and control flags (a compactor keeps markers as they are)."""

    def replace_batches(
        self,
        new_object_key: str,
        new_object_size: int,
        moves: list[BatchMove],
        uploader_broker_id: int,
    ) -> ReplaceResult:
        """Register a rewritten object and repoint batches to it, in ONE transaction.

        A move applies only when its batch still exists at exactly its old coordinates;
        others are skipped (deleted by retention, DeleteRecords or DeleteTopics, or moved by
        another compactor), so nothing deleted comes back. The new object's used size is
        the moved bytes (none moved: marked for deletion at once); old objects lose the
        moved bytes and those left empty are marked for deletion, so the cleaner removes
        them after the grace period while fetches of the old coordinates still succeed.
        Batches keep everything but their coordinates (offsets, producer fields, flags).
        Raises ValueError for moves that do not fit the new object (nothing changes), and
        the backend's integrity error if ``new_object_key`` is already committed.
        """

    # Log compaction (cleanup.policy=compact: keep the latest record per key).

    def compact_partition(
        self,
        new_object_key: str,
        new_object_size: int,
        uploader_broker_id: int,
        request: CompactPartitionRequest,
    ) -> CompactPartitionResult:
        """Swap a partition's batches in [start_offset, end_offset) for cleaned ones, in ONE transaction.

        It applies only if the batches held in the range now (``last_offset >= start_offset`` and
        ``base_offset < end_offset``) are exactly ``source_batches`` (ids, object keys, byte
        offsets, sizes, offsets) and ``end_offset`` is at most the high watermark; otherwise (a
        batch deleted by retention, DeleteRecords or DeleteTopics, moved by ``replace_batches``,
        or new; an unknown partition) nothing changes but the new object, registered and marked
        for deletion at once so the object cleaner deletes it.

        When it applies: the old rows go and the new batches get rows in the new object (new
        batch ids; the log append time of the old batch with the same base offset, else the max
        timestamp), except those wholly below the log start (DeleteRecords took those offsets);
        old objects lose the removed bytes and the emptied ones are marked for deletion, as the
        deletion paths do; the new object's used size is its kept batches' bytes (none: marked for
        deletion at once); the log's byte size follows; the cleaner checkpoint becomes
        ``cleaned_offset`` unless higher already (never lowered). The log start, high watermark,
        producer and transaction state do not change. ``find_batches`` at a compacted offset then
        answers the next batch; ``list_offsets`` answers as before, at batch granularity.

        Raises ValueError (nothing changes) for a request that cannot describe a cleaned range
        (empty range; source or new batches outside it, out of order or overlapping; new batches'
        bytes outside the new object or overlapping), and the backend's integrity error if
        ``new_object_key`` is already committed.
        """

    def cleaner_checkpoints(self, topic_id: uuid.UUID) -> dict[int, int]:
        """Partition -> stored cleaner checkpoint (0: never cleaned) of every partition of the topic
        ({} for an unknown one), from one query."""

    def close(self) -> None: ...


class CoordinatorInspector(Protocol):
    """Read-only views for operator tools (KIP-1163's kafka-diskless-metadata); not on the hot path."""

    def describe_topic(self, topic_id: uuid.UUID) -> TopicDescription | None:
        """The topic's partitions and object totals, or None when the coordinator knows nothing of it."""

    def describe_object(self, object_key: str) -> ObjectDescription | None:
        """One committed object with its live batches, or None when unknown (never committed, or forgotten)."""
