"""What the partitions seam takes and answers, and the interface every partition kind implements.

Handlers speak only these types: requests name partitions the way clients do (topic name or
topic id, partition index) and every answer is per partition, with Kafka's error code. A
*kind* (classic, diskless; tiered and cache replicas later) is one implementation of
``PartitionKind``; it is handed partitions already resolved against the metadata image.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import Protocol

from shoal.metadata.image import MetadataImage, TopicImage
from shoal.protocol.errors import ErrorCode
from shoal.records.batch import BatchHeader
from shoal.records.types import TimestampType


@dataclass(frozen=True, slots=True)
class PartitionRef:
    """A partition resolved against the metadata image: the topic as it is now, and the index."""

    topic: TopicImage
    partition: int

    @property
    def name(self) -> str:
        return self.topic.name

    @property
    def wake_key(self) -> tuple[uuid.UUID, int]:
        """The key long-polling fetches wait on (by id, so a re-created topic is another key)."""
        return self.topic.topic_id, self.partition


# ---------------------------------------------------------------------------------------- append


@dataclass(frozen=True, slots=True)
class AppendRequest:
    topic: str
    partition: int
    records: bytes | memoryview | None


@dataclass(slots=True)
class AppendOutcome:
    """One partition's produce answer."""

    error: ErrorCode = ErrorCode.none
    message: str | None = None
    base_offset: int = -1
    #: The LogAppendTime stamped into the batches (ms), -1 for CreateTime topics.
    log_append_time: int = -1
    log_start_offset: int = -1
    #: The records that made the append fail: (index in the batch, message), Produce v8+.
    record_errors: tuple[tuple[int, str], ...] = ()

    def fail(
        self, error: ErrorCode, message: str | None, record_errors: tuple[tuple[int, str], ...] = ()
    ) -> AppendOutcome:
        self.error, self.message, self.record_errors = error, message, record_errors
        return self


@dataclass(frozen=True, slots=True)
class ValidatedRecords:
    """A partition's records after validation: the bytes and each batch's (position, header)."""

    records: memoryview
    batches: list[tuple[int, BatchHeader]]
    timestamp_type: TimestampType

    @property
    def size(self) -> int:
        return sum(header.size for _, header in self.batches)

    @property
    def count(self) -> int:
        return sum(header.records_count for _, header in self.batches)


# ------------------------------------------------------------------------------------------ read


class IsolationLevel(IntEnum):
    """Fetch (v4+) and ListOffsets (v2+) ``isolation_level`` (KIP-98): what a consumer may see."""

    #: Everything below the high watermark, aborted transactions and open ones included.
    READ_UNCOMMITTED = 0
    #: Only below the last stable offset, with the aborted transactions to drop listed.
    READ_COMMITTED = 1

    @classmethod
    def of(cls, value: int) -> IsolationLevel:
        """The wire value; anything but 1 reads uncommitted (the more permissive, long-standing view)."""
        return cls.READ_COMMITTED if value == 1 else cls.READ_UNCOMMITTED


@dataclass(frozen=True, slots=True)
class ReadRequest:
    """One partition of a Fetch: by name (Fetch < v13) or by topic id (v13+)."""

    topic: str | None
    topic_id: uuid.UUID | None
    partition: int
    fetch_offset: int
    max_bytes: int
    current_leader_epoch: int = -1  # Fetch v9+ (KIP-320); -1: not checked


@dataclass(frozen=True, slots=True)
class ReadOutcome:
    error: ErrorCode
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    records: bytes | bytearray = b""
    #: KIP-392: the replica the consumer should read this partition from instead (-1: here).
    preferred_read_replica: int = -1
    #: A diskless read answered from this broker's cache replica (not object storage).
    from_cache: bool = False
    #: READ_COMMITTED: (producer id, first offset) of the aborted transactions overlapping the
    #: records, which the consumer drops; None for READ_UNCOMMITTED reads and errors (Kafka's null).
    aborted_transactions: tuple[tuple[int, int], ...] | None = None


@dataclass(frozen=True, slots=True)
class KindRead:
    """A kind's read of one partition (the budget and long-poll are the seam's business)."""

    partition: PartitionRef
    fetch_offset: int
    max_bytes: int
    replica_id: int = -1
    #: READ_COMMITTED reads stop at the last stable offset; followers always read uncommitted.
    isolation: IsolationLevel = IsolationLevel.READ_UNCOMMITTED


# ------------------------------------------------------------------------------- offsets, delete


@dataclass(frozen=True, slots=True)
class OffsetOutcome:
    """A ListOffsets answer; timestamp -1 when the answer is not by time, offset -1 when none."""

    error: ErrorCode
    timestamp: int = -1
    offset: int = -1
    #: The leader epoch of the offset found (-1: unknown), as Kafka answers it.
    leader_epoch: int = -1


@dataclass(frozen=True, slots=True)
class EpochEndOutcome:
    """An OffsetForLeaderEpoch answer: the largest epoch <= the one asked and where it ends
    (-1, -1 when undefined, as Kafka's LeaderEpochFileCache answers)."""

    error: ErrorCode
    leader_epoch: int = -1
    end_offset: int = -1


@dataclass(frozen=True, slots=True)
class DeleteOutcome:
    error: ErrorCode
    low_watermark: int = -1


@dataclass(frozen=True, slots=True)
class PartitionState:
    """A partition's offsets and size, as ``describe`` answers them (sizes in bytes of live data)."""

    error: ErrorCode
    log_start_offset: int = -1
    log_end_offset: int = -1
    high_watermark: int = -1
    size: int = -1


# -------------------------------------------------------------------------- transaction markers


@dataclass(frozen=True, slots=True)
class TxnMarker:
    """One WriteTxnMarkers entry: end ``producer_id``'s transaction (commit or abort) as the
    transaction coordinator at ``coordinator_epoch`` decided it."""

    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    commit: bool
    #: The transaction version the coordinator ran it with (WriteTxnMarkers v2+; 0 before).
    transaction_version: int = 0


@dataclass(frozen=True, slots=True)
class MarkerWrite:
    """A marker for one partition, stamped as the topic's ``message.timestamp.type`` says (the
    seam knows topic configs, kinds do not)."""

    partition: PartitionRef
    marker: TxnMarker
    timestamp_type: TimestampType


@dataclass(frozen=True, slots=True)
class ProduceOptions:
    """Request-level produce parameters the seam checks before any partition is touched."""

    acks: int
    produce_version: int
    transactional_id: str | None = None
    client_id: str | None = None
    #: How long an acks=all write may wait for the ISR (the request's ``timeout_ms``).
    timeout_ms: int = 30_000


@dataclass(frozen=True, slots=True)
class FetchOptions:
    max_bytes: int
    min_bytes: int
    max_wait_s: float
    #: A follower broker's node id (its fetch reads up to the log end), -1 for consumers.
    replica_id: int = -1
    #: The consumer's ``client.rack`` (Fetch v11+, KIP-392), None when it sent none.
    client_rack: str | None = None
    #: Whether a follower may answer this consumer (Fetch v11+; older consumers read from leaders).
    follower_reads: bool = False
    #: The consumer's isolation level (Fetch v4+); a follower broker's fetch ignores it.
    isolation: IsolationLevel = IsolationLevel.READ_UNCOMMITTED


class PartitionKind(Protocol):
    """One way of storing partitions. The seam dispatches to a kind by the topic's configs."""

    #: Short name used in logs (``classic``, ``diskless``).
    name: str

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    def append(
        self, partition: PartitionRef, records: ValidatedRecords, options: ProduceOptions
    ) -> Awaitable[AppendOutcome]:
        """Append validated batches, synchronously in call order (a producer's pipelined requests
        keep their order); the awaitable completes when the append may be acknowledged under
        ``options.acks``. Raises KafkaError when refused at once."""
        ...

    async def publish(self, image: MetadataImage) -> None:
        """A newer metadata image: take up the roles it gives this broker's replicas."""
        ...

    async def read(
        self, reads: Sequence[KindRead], max_bytes: int, min_one_batch: bool, *, fresh_since_ms: int | None = None
    ) -> list[ReadOutcome]:
        """Read whole batches within ``max_bytes`` in all (the first batch always comes when
        ``min_one_batch``); answers in request order. ``fresh_since_ms`` (wall clock): the long-poll's
        last pass, which must show every record committed before then, so a cache (diskless cache
        replicas) may answer "nothing new" only if it caught up after that time."""
        ...

    async def list_offsets(
        self, lookups: Sequence[tuple[PartitionRef, int]], isolation: IsolationLevel | None = IsolationLevel.READ_UNCOMMITTED
    ) -> list[OffsetOutcome]:
        """(partition, timestamp) -> offset. A client's lookup (``isolation`` set) answers nothing at
        or above its last fetchable offset (the high watermark, READ_COMMITTED: the last stable
        offset) and latest (-1) is that offset; None (a replica) reads up to the log end."""
        ...

    async def write_txn_markers(self, writes: Sequence[MarkerWrite], timeout_ms: int) -> list[AppendOutcome]:
        """Append transaction markers as the leader, each answered once the in-sync replicas have
        it (WriteTxnMarkers appends with acks=all) or with the partition's error."""
        ...

    async def end_offsets_for_epochs(self, lookups: Sequence[tuple[PartitionRef, int]]) -> list[EpochEndOutcome]:
        """OffsetForLeaderEpoch: (partition, requested leader epoch) -> where that epoch ends."""
        ...

    async def delete_records(self, deletes: Sequence[tuple[PartitionRef, int]]) -> list[DeleteOutcome]: ...

    async def describe(self, partitions: Sequence[PartitionRef]) -> list[PartitionState]: ...

    async def create_topic(self, topic: TopicImage, *, is_new: bool) -> None: ...

    async def add_partitions(self, topic: TopicImage, partitions: Sequence[int]) -> None:
        """Create the storage of partitions CreatePartitions just added to ``topic``."""
        ...

    async def delete_topic(self, topic: TopicImage) -> None: ...

    def topic_config_changed(self, topic: TopicImage) -> None: ...

    async def describe_producers(self, partitions: Sequence[PartitionRef]) -> list[ProducersOutcome]:
        """DescribeProducers (KIP-664): the producers this broker's replica of each partition knows."""
        ...


# ---------------------------------------------------------------------------- producer state


@dataclass(frozen=True, slots=True)
class ActiveProducer:
    """One producer a partition's log remembers, as DescribeProducers answers it (Kafka's
    ``ProducerState``): what ``kafka-transactions.sh`` shows to find and abort hanging transactions."""

    producer_id: int
    producer_epoch: int
    #: The last sequence number of its last batch (-1: none kept, e.g. after a bumped epoch).
    last_sequence: int = -1
    last_timestamp: int = -1
    #: The epoch of the transaction coordinator that wrote its last marker (-1: none yet).
    coordinator_epoch: int = -1
    #: The first offset of its ongoing transaction (-1: none), what ``abort --start-offset`` names.
    current_txn_start_offset: int = -1


@dataclass(frozen=True, slots=True)
class ProducersOutcome:
    """One partition's DescribeProducers answer."""

    error: ErrorCode
    message: str | None = None
    producers: tuple[ActiveProducer, ...] = ()
