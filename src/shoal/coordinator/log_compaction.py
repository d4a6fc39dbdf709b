"""The rules of ``compact_partition`` (log compaction of diskless partitions) that every backend shares.

A backend reads the batches it holds in the cleaned range under its write lock (``HeldBatch``),
asks ``unchanged`` whether they are still exactly what the compactor read, and writes the rows
``new_rows`` plans. Validation (``check_request``) runs before any transaction, so a malformed
request changes nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from shoal.coordinator.compaction_types import CleanedBatch, CompactPartitionRequest, SourceBatch
from shoal.records.types import TimestampType


@dataclass(frozen=True, slots=True)
class HeldBatch:
    """A batch of the cleaned range as the coordinator holds it now (read under the write lock)."""

    batch_id: int
    object_key: str
    file_id: int
    byte_offset: int
    size: int
    base_offset: int
    last_offset: int
    log_append_time: int


@dataclass(frozen=True, slots=True)
class NewRow:
    """A cleaned batch with what the coordinator stores beside it."""

    batch: CleanedBatch
    log_append_time: int
    max_ts_so_far: int  # the running maximum timestamp of the log at this batch (time lookups seek it)


def check_request(new_object_size: int, request: CompactPartitionRequest) -> None:
    """Refuse a request that cannot describe a cleaned range (ValueError): checked before any write."""
    start, end = request.start_offset, request.end_offset
    if start < 0 or end <= start:
        raise ValueError(f"empty or negative offset range [{start}, {end})")
    if new_object_size < 0:
        raise ValueError(f"new object size must not be negative, got {new_object_size}")
    if request.cleaned_offset < 0:
        raise ValueError(f"cleaned offset must not be negative, got {request.cleaned_offset}")
    sources = request.source_batches
    if len({s.batch_id for s in sources}) != len(sources):
        raise ValueError("a source batch is listed more than once")
    _check_offsets("source batch", [(s.base_offset, s.last_offset) for s in sources], start, end)
    for s in sources:
        if s.size <= 0 or s.byte_offset < 0:
            raise ValueError(f"source batch {s.batch_id}: bad coordinates {s.byte_offset}+{s.size}")
    _check_offsets("new batch", [(b.base_offset, b.last_offset) for b in request.new_batches], start, end)
    used_to = 0
    for b in sorted(request.new_batches, key=lambda b: b.byte_offset):
        if b.size <= 0 or b.byte_offset < used_to or b.byte_offset + b.size > new_object_size:
            raise ValueError(
                f"new batch {b.base_offset}..{b.last_offset}: bytes {b.byte_offset}..{b.byte_offset + b.size}"
                f" overlap another batch or fall outside the new object of {new_object_size} bytes"
            )
        used_to = b.byte_offset + b.size


def _check_offsets(what: str, ranges: list[tuple[int, int]], start: int, end: int) -> None:
    """Ranges must be inside [start, end), in ascending offset order, and not overlap."""
    after = start
    for base, last in ranges:
        if base > last or base < after or last >= end:
            raise ValueError(
                f"{what} {base}..{last} is outside [{start}, {end}), out of offset order or overlaps another"
            )
        after = last + 1


def unchanged(held: Sequence[HeldBatch], sources: Sequence[SourceBatch]) -> bool:
    """True when the batches held in the range are exactly the ones the compactor read."""
    return [
        (h.batch_id, h.object_key, h.byte_offset, h.size, h.base_offset, h.last_offset) for h in held
    ] == [(s.batch_id, s.object_key, s.byte_offset, s.size, s.base_offset, s.last_offset) for s in sources]


def freed_per_file(held: Sequence[HeldBatch]) -> dict[int, int]:
    """Bytes each old object loses when the held batches go."""
    freed: dict[int, int] = {}
    for h in held:
        freed[h.file_id] = freed.get(h.file_id, 0) + h.size
    return freed


def new_rows(
    request: CompactPartitionRequest, held: Sequence[HeldBatch], log_start_offset: int, max_ts_before: int
) -> list[NewRow]:
    """The rows of the cleaned batches to insert, in offset order.

    A batch keeps the log append time of the old batch with its base offset, else takes its max
    timestamp. ``max_ts_so_far`` continues the running maximum of the batches before the range
    (``max_ts_before``, -1 when none), so it stays non-decreasing along the log as the time
    lookups need; it may be lower than the old batches' (their records went). A batch wholly
    below the log start is dropped: DeleteRecords already removed those offsets.
    """
    append_times = {h.base_offset: h.log_append_time for h in held}
    rows: list[NewRow] = []
    running = max_ts_before
    for b in request.new_batches:
        append_time = append_times.get(b.base_offset, b.batch_max_timestamp)
        effective = (
            append_time
            if b.message_timestamp_type == TimestampType.LOG_APPEND_TIME
            else b.batch_max_timestamp
        )
        running = max(running, effective)
        if b.last_offset >= log_start_offset:
            rows.append(NewRow(b, append_time, running))
    return rows


def compaction_gap(offset: int, cleaned_offset: int, batch_before: Callable[[], bool]) -> bool:
    """Whether an offset in [log start, high watermark) that no batch covers is one compaction removed.

    Below the cleaner checkpoint, or after another batch, a missing offset is a compacted record
    (the reader skips to the next batch); otherwise it is below the first batch left and tiered
    storage holds it (``delete_tiered_batches`` only ever deletes a log's first batches; Kafka
    does not tier compacted topics). ``batch_before`` (a read) is asked only above the checkpoint.
    """
    return offset < cleaned_offset or batch_before()


def local_log_start(
    log_start_offset: int, high_watermark: int, first_base: int | None, cleaned_offset: int
) -> int:
    """ListOffsets EARLIEST_LOCAL: the first offset read here rather than from tiered storage.

    The first batch left (the high watermark when none is left), at least the log start (a
    DeleteRecords inside the first batch moved the start past its base); the log start itself
    when it is below the cleaner checkpoint, where missing offsets are compacted records.
    """
    if log_start_offset < cleaned_offset:
        return log_start_offset
    return max(log_start_offset, high_watermark if first_base is None else first_base)
