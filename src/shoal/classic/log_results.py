"""What ``PartitionLog`` answers: appends (``AppendResult``), reads (``ReadResult``, and
``CommittedReadResult`` for READ_COMMITTED) and ListOffsets lookups (``TimestampAndOffset``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

__all__ = ["AppendResult", "CommittedReadResult", "ReadResult", "TimestampAndOffset"]


@dataclass(frozen=True, slots=True)
class AppendResult:
    """What a produce response needs from an append."""

    base_offset: int
    last_offset: int
    #: The LogAppendTime stamped into the batches, -1 for CreateTime (a duplicate answers the
    #: original batch's timestamp, as Kafka does).
    log_append_time: int
    log_start_offset: int
    is_duplicate: bool = False
    #: ``flush.messages`` is reached: fsync (``flush()`` in a worker) before acking to honour it.
    flush_needed: bool = False


class ReadResult(NamedTuple):
    """Whole batches from the requested offset, and the offsets a Fetch response reports."""

    records: bytes | memoryview
    high_watermark: int
    log_start_offset: int


class CommittedReadResult(NamedTuple):
    """A READ_COMMITTED read: batches below the last stable offset, and the aborted transactions
    (producer id, first offset) overlapping them, which the consumer drops (Fetch's
    ``AbortedTransactions``)."""

    records: bytes | memoryview
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    aborted_transactions: list[tuple[int, int]]


@dataclass(frozen=True, slots=True)
class TimestampAndOffset:
    """A ListOffsets answer: the record's timestamp (-1 when not by time), offset and leader epoch."""

    timestamp: int
    offset: int
    leader_epoch: int | None
