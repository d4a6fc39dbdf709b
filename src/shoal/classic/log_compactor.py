"""One cleaning pass over one classic log (Kafka's ``Cleaner``): map the dirty section, rewrite
the log up to its end segment group by segment group, swap each group in.

1. Dirty segments (from the cleaner checkpoint to the first uncleanable offset, whole segments)
   are read into the key -> latest offset map until it is full; the pass ends at the last
   segment that fit (``end_offset``).
2. Every segment below ``end_offset`` is cleaned (``records.compaction.clean_batch``), grouped
   so a group's output fits one segment (``segment.bytes``, the index size, int32 relative
   offsets), as Kafka's ``groupSegmentsBySize``. Aborted transactions come from the ``.txnindex``
   files; the cleaned segment's ``.txnindex`` keeps those whose marker stays.
3. Each group is written to ``.cleaned`` files, fsynced, and swapped in (``log_cleaning``).

Reads and writes go through a ``Throttler`` (``log.cleaner.io.max.bytes.per.second``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from shoal.classic.log import PartitionLog
from shoal.classic.log_cleaning import CleaningView
from shoal.classic.log_config import LogConfig
from shoal.classic.segment import AppendedBatch, LogSegment
from shoal.classic.txn_index import ABORTED_TXN_SIZE, AbortedTxn
from shoal.records.batch import BatchHeader
from shoal.records.codec import control_record_type, decode_batch, iter_batches
from shoal.records.compaction import CleanedTransactions, CleanStats, OffsetMap, clean_batch, latest_offsets

__all__ = ["CleanPass", "CleaningAbortedError", "LogTooDirtyError", "Throttler", "clean_log"]

_READ_CHUNK = 1024 * 1024
_INT32_MAX = 2**31 - 1
_INDEX_ENTRY = 8  # offset index entry bytes
_TIME_INDEX_ENTRY = 12


class CleaningAbortedError(Exception):
    """An operation that closes or deletes segments of the log needs them (``cleaning_aborted``)."""


class LogTooDirtyError(Exception):
    """The first dirty segment holds more keys than the offset map (Kafka: "increase
    log.cleaner.dedupe.buffer.size"); the partition is marked uncleanable."""


class Throttler:
    """Kafka's Throttler: sleep so the bytes counted stay at or below ``rate`` per second."""

    def __init__(self, rate: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.rate = rate
        self._clock = clock
        self._lock = threading.Lock()
        self._start = clock()
        self._count = 0.0

    def maybe_throttle(self, n: int, stop: threading.Event | None = None) -> None:
        if self.rate >= 1e300:
            return
        with self._lock:
            self._count += n
            elapsed = self._clock() - self._start
            wanted = self._count / self.rate
            sleep = wanted - elapsed
            if elapsed > 1.0 and sleep <= 0:  # a new period once caught up
                self._start, self._count = self._clock(), 0.0
        if sleep > 0:
            if stop is not None:
                stop.wait(sleep)
            else:
                time.sleep(sleep)


@dataclass(slots=True)
class CleanPass:
    """What one pass did."""

    first_dirty_offset: int
    end_offset: int
    stats: CleanStats
    elapsed_s: float
    buffer_utilization: float
    swapped_groups: int


def _batches(
    segment: LogSegment, throttler: Throttler, aborted: Callable[[], bool]
) -> Iterator[tuple[BatchHeader, memoryview]]:
    """Every batch of a segment, read in big chunks; CleaningAbortedError as soon as ``aborted``."""
    position = 0
    while position < segment.size:
        if aborted():
            raise CleaningAbortedError(f"cleaning of segment {segment.base_offset} aborted")
        chunk = segment.read(position, _READ_CHUNK, 2**63 - 1, True)
        if not chunk:
            return
        throttler.maybe_throttle(len(chunk))
        view = memoryview(chunk)
        for pos, header in iter_batches(view):
            yield header, view[pos : pos + header.size]
        position += len(chunk)


def _build_offset_map(
    view: CleaningView,
    offset_map: OffsetMap,
    throttler: Throttler,
    txns: CleanedTransactions,
    aborted: Callable[[], bool],
) -> int:
    """Map the dirty segments' keys (not those of aborted transactions, whose records go); return
    the end offset of the last whole segment mapped."""
    segments = view.segments
    end = view.first_dirty_offset
    for i, segment in enumerate(view.cleanable_segments):
        upper = segments[i + 1].base_offset
        if upper <= view.first_dirty_offset:
            continue
        offsets: dict[bytes, int] = {}
        for header, data in _batches(segment, throttler, aborted):
            if header.last_offset < view.first_dirty_offset:
                continue
            _, records = decode_batch(data, check_crc=False)
            control = control_record_type(records[0]) if header.is_control and records else None
            if not txns.on_batch(header, control) and not header.is_control:
                latest_offsets(records, offsets)
        if not offset_map.add_all(offsets):
            if end == view.first_dirty_offset:
                raise LogTooDirtyError(
                    f"Unable to build the offset map of segment {segment.base_offset}: it holds more keys "
                    f"than the map takes ({offset_map.capacity}); increase log.cleaner.dedupe.buffer.size"
                )
            break
        end = upper
    offset_map.latest_offset = max(offset_map.latest_offset, end - 1)
    return end


def _groups(segments: list[LogSegment], max_size: int, max_index_size: int) -> list[list[LogSegment]]:
    """Kafka's ``groupSegmentsBySize``: runs of segments whose total size and index sizes fit one
    segment and whose offsets fit int32 relative offsets."""
    groups: list[list[LogSegment]] = []
    rest = list(segments)
    while rest:
        group = [rest.pop(0)]
        size = group[0].size
        index = group[0].offset_index.entries * _INDEX_ENTRY
        time_index = group[0].time_index.entries * _TIME_INDEX_ENTRY
        while rest:
            nxt = rest[0]
            last = rest[1].base_offset - 1 if len(rest) > 1 else nxt.next_offset - 1
            if (
                size + nxt.size > max_size
                or index + nxt.offset_index.entries * _INDEX_ENTRY > max_index_size
                or time_index + nxt.time_index.entries * _TIME_INDEX_ENTRY > max_index_size
                or last - group[0].base_offset > _INT32_MAX
            ):
                break
            group.append(rest.pop(0))
            size += nxt.size
            index += nxt.offset_index.entries * _INDEX_ENTRY
            time_index += nxt.time_index.entries * _TIME_INDEX_ENTRY
        groups.append(group)
    return groups


def clean_log(
    log: PartitionLog,
    checkpoint: int,
    offset_map: OffsetMap,
    throttler: Throttler,
    now_ms: int,
    *,
    should_stop: Callable[[], bool] = lambda: False,
) -> CleanPass | None:
    """Clean ``log`` from ``checkpoint`` (see the module docstring); None when it cannot be cleaned
    now (closed, offline, nothing dirty). Raises CleaningAbortedError (groups swapped so far stay),
    LogTooDirtyError and KafkaError (storage)."""
    started = time.monotonic()
    with log.cleaning() as usable:
        if not usable:
            return None
        view = log.cleaning_view(checkpoint, now_ms)
        if not view.cleanable_segments or view.dirty_bytes()[1] == 0:
            return None
        offset_map.clear()
        map_txns = CleanedTransactions(log.aborted_in(view.first_dirty_offset, view.first_uncleanable_offset))
        aborted = log.cleaning_aborted
        end_offset = _build_offset_map(view, offset_map, throttler, map_txns, aborted)
        utilization = len(offset_map) / offset_map.capacity
        to_clean = [s for i, s in enumerate(view.cleanable_segments) if view.segments[i + 1].base_offset <= end_offset]
        txns = CleanedTransactions(log.aborted_in(view.log_start_offset, end_offset))
        stats = CleanStats()
        active = view.active_producers

        def retain_empty(header: BatchHeader) -> bool:
            last = active.get(header.producer_id)
            if last is None:
                return False
            last_data_offset, epoch = last
            if last_data_offset >= 0:
                return header.last_offset == last_data_offset
            return header.is_control and header.producer_epoch == epoch

        config = log.config
        swapped = 0
        bases = [s.base_offset for s in view.segments]
        for group in _groups(to_clean, config.segment_bytes, config.segment_index_bytes):
            if should_stop():
                break
            group_end = bases[bases.index(group[-1].base_offset) + 1]
            cleaned = log.new_cleaned_segment(group[0].base_offset)
            try:
                kept_before = len(txns.retained_aborted)
                for segment in group:
                    _clean_segment(
                        segment, cleaned, offset_map, txns, stats, throttler, now_ms, config, retain_empty, aborted
                    )
                for txn in txns.retained_aborted[kept_before:]:
                    cleaned.update_txn_index(AbortedTxn(*txn))
                    throttler.maybe_throttle(ABORTED_TXN_SIZE)
                cleaned.on_become_inactive()
                cleaned.flush()
                cleaned.set_last_modified(group[-1].last_modified_ms)
            except BaseException:
                cleaned.delete()
                raise
            if log.replace_segments(cleaned, group, group_end):
                swapped += 1
        return CleanPass(view.first_dirty_offset, end_offset, stats, time.monotonic() - started, utilization, swapped)


def _clean_segment(
    source: LogSegment,
    cleaned: LogSegment,
    offset_map: OffsetMap,
    txns: CleanedTransactions,
    stats: CleanStats,
    throttler: Throttler,
    now_ms: int,
    config: LogConfig,
    retain_empty: Callable[[BatchHeader], bool],
    aborted: Callable[[], bool],
) -> None:
    """Append what survives of ``source`` to ``cleaned``."""
    delete_retention_ms = config.delete_retention_ms
    for _header, data in _batches(source, throttler, aborted):
        kept = clean_batch(
            data,
            offset_map,
            txns,
            now_ms=now_ms,
            delete_retention_ms=delete_retention_ms,
            stats=stats,
            retain_empty=retain_empty,
        )
        if kept is None:
            continue
        header = next(iter_batches(kept))[1]
        cleaned.append(memoryview(kept), [AppendedBatch(0, header.size, header.last_offset, header.max_timestamp)])
        throttler.maybe_throttle(header.size)
