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
    records: bytes = b""
    #: KIP-392: the replica the consumer should read this partition from instead (-1: here).
    preferred_read_replica: int = -1
    #: A diskless read answered from this broker's cache replica (not object storage).
    from_cache: bool = False


@dataclass(frozen=True, slots=True)
class KindRead:
    """A kind's read of one partition (the budget and long-poll are the seam's business)."""

    partition: PartitionRef
    fetch_offset: int
    max_bytes: int
    replica_id: int = -1


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

    async def list_offsets(self, lookups: Sequence[tuple[PartitionRef, int]]) -> list[OffsetOutcome]: ...

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
