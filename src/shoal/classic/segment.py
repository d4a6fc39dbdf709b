"""One log segment: ``<base>.log`` plus its ``.index``, ``.timeindex`` and ``.txnindex``, as Kafka
lays them out.

The ``.log`` holds record batches exactly as they go over the wire, with their real offsets,
back to back (Kafka's FileRecords). Files are named by the base offset zero-padded to 20 digits.
Index entries are added the way Kafka's ``LogSegment.append`` adds them: once more than
``index.interval.bytes`` of log were written since the last entry, the next batch gets an
offset-index entry (its last offset, its position) and the time index an entry for the max
timestamp so far. The ``.txnindex`` (``txn_index``) lists the aborted transactions whose ABORT
marker is in the segment; it lives and dies with the segment and is rebuilt with the other indexes
when the segment is recovered (by the log, which owns the producer state it needs).

A segment is not thread-safe: ``PartitionLog`` serialises access (see its docstring). Reads and
writes use ``os.pread``/``os.pwrite`` on one descriptor, so they hit the page cache and never move
a shared file position.
"""

from __future__ import annotations

import contextlib
import os
import struct
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NamedTuple

from crc32c import crc32c

from shoal.classic.index import NO_TIMESTAMP, OffsetIndex, TimeIndex
from shoal.classic.txn_index import AbortedTxn, TransactionIndex, TxnIndexSearchResult
from shoal.records.batch import (
    ATTRIBUTES_OFFSET,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MIN_BATCH_LENGTH,
    BatchHeader,
    read_header,
)
from shoal.records.codec import decode_batch

__all__ = [
    "CLEANED_SUFFIX",
    "DELETED_SUFFIX",
    "INDEX_SUFFIX",
    "LOG_SUFFIX",
    "SNAPSHOT_SUFFIX",
    "SWAP_END_SUFFIX",
    "SWAP_SUFFIX",
    "TIME_INDEX_SUFFIX",
    "TXN_INDEX_SUFFIX",
    "AppendedBatch",
    "LogSegment",
    "RecoveryResult",
    "file_name",
    "offset_from_file_name",
]

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
TXN_INDEX_SUFFIX = ".txnindex"
SNAPSHOT_SUFFIX = ".snapshot"
DELETED_SUFFIX = ".deleted"
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
#: ``<base>.swap-end``: the end offset of the segments a cleaned ``.swap`` segment replaces.
SWAP_END_SUFFIX = ".swap-end"

_INT32_MAX = 2**31 - 1
_OVERHEAD = struct.Struct(">qi")  # baseOffset, batchLength
_SCAN_CHUNK = 64 * 1024
_RECOVERY_CHUNK = 8 * 1024 * 1024


def file_name(offset: int) -> str:
    """Kafka's file stem: the offset zero-padded to 20 digits."""
    return f"{offset:020d}"


def offset_from_file_name(name: str) -> int:
    """The base offset of a segment, index or snapshot file name."""
    return int(name.split(".", 1)[0])


class RecoveryResult(NamedTuple):
    """What ``LogSegment.recover`` kept and cut."""

    valid_bytes: int
    truncated_bytes: int


class AppendedBatch(NamedTuple):
    """Where a batch lies in the bytes handed to ``LogSegment.append`` and what the indexes need."""

    position: int
    size: int
    last_offset: int
    max_timestamp: int


def _pwrite_all(fd: int, data: memoryview, pos: int) -> None:
    while data:
        n = os.pwrite(fd, data, pos)
        data = data[n:]
        pos += n


class LogSegment:
    """A ``.log`` file with its offset, time and transaction indexes."""

    def __init__(
        self,
        directory: Path,
        base_offset: int,
        *,
        index_interval_bytes: int,
        max_index_size: int,
        now_ms: int,
        create: bool,
        suffix: str = "",
    ) -> None:
        """``suffix`` (``.cleaned``) names the files of a segment the log cleaner is writing."""
        self.directory = directory
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        stem = file_name(base_offset)
        self.log_path = directory / (stem + LOG_SUFFIX + suffix)
        index_path = directory / (stem + INDEX_SUFFIX + suffix)
        time_index_path = directory / (stem + TIME_INDEX_SUFFIX + suffix)
        txn_index_path = directory / (stem + TXN_INDEX_SUFFIX + suffix)
        #: True when an index file was missing at open: Kafka rebuilds the indexes then.
        self.indexes_missing = not create and not (index_path.exists() and time_index_path.exists())
        if create:
            # Leftovers of an earlier life of this offset (a log truncated back to it) are not data.
            for stale in (self.log_path, index_path, time_index_path, txn_index_path):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(stale)
        self._fd = os.open(self.log_path, os.O_RDWR | (os.O_CREAT if create else 0), 0o644)
        try:
            self.offset_index = OffsetIndex(index_path, base_offset, max_index_size)
            try:
                self.time_index = TimeIndex(time_index_path, base_offset, max_index_size)
            except BaseException:
                self.offset_index.close()
                raise
            try:
                self.txn_index = TransactionIndex(txn_index_path, base_offset)
            except BaseException:
                self.offset_index.close()
                self.time_index.close()
                raise
            self.size = os.fstat(self._fd).st_size
        except BaseException:
            os.close(self._fd)
            raise
        self.created_ms = now_ms
        self.max_timestamp_so_far = NO_TIMESTAMP
        self.offset_of_max_timestamp = base_offset
        self.next_offset = base_offset
        #: End of the last whole batch found by the load-time scan; < size means a broken tail.
        self.valid_end = 0
        self._rolling_ts: int | None = None
        self._bytes_since_index = 0
        self._closed = False
        if not create:
            self._load_tail()

    # ------------------------------------------------------------------ state

    def _load_tail(self) -> None:
        """Derive next offset and max timestamp: last index entries, then scan the unindexed tail."""
        ts, offset = self.time_index.last_entry()
        self.max_timestamp_so_far, self.offset_of_max_timestamp = ts, offset
        start = self.offset_index.last_position if self.offset_index.last_position < self.size else 0
        next_offset = self.base_offset
        end = start
        for pos, h in self._iter_batches(start):
            next_offset = h.next_offset
            end = pos + h.size
            if h.max_timestamp > self.max_timestamp_so_far:
                self.max_timestamp_so_far = h.max_timestamp
                self.offset_of_max_timestamp = h.last_offset
        if start and next_offset == self.base_offset:
            next_offset = self.offset_index.last_offset + 1
        self.next_offset = next_offset
        self.valid_end = end

    @property
    def rolling_based_timestamp(self) -> int | None:
        """Max timestamp of the first batch: Kafka's clock for ``segment.ms`` rolling."""
        if self._rolling_ts is None and self.size >= HEADER_SIZE:
            self._rolling_ts = read_header(os.pread(self._fd, HEADER_SIZE, 0)).max_timestamp
        return self._rolling_ts

    def time_waited_for_roll(self, now_ms: int, incoming_max_timestamp: int) -> int:
        """Kafka's ``timeWaitedForRoll``: record time since the first batch, else wall time since creation."""
        first = self.rolling_based_timestamp
        if first is not None and first >= 0:
            return incoming_max_timestamp - first
        return now_ms - self.created_ms

    @property
    def largest_timestamp(self) -> int:
        """Max record timestamp, or the file's mtime when no record had one (Kafka's fallback)."""
        if self.max_timestamp_so_far >= 0:
            return self.max_timestamp_so_far
        return self.last_modified_ms

    @property
    def last_modified_ms(self) -> int:
        return os.stat(self.log_path).st_mtime_ns // 1_000_000

    @property
    def is_full_index(self) -> bool:
        return self.offset_index.is_full or self.time_index.is_full

    def can_convert_to_relative_offset(self, offset: int) -> bool:
        """Index entries hold int32 offsets relative to the base offset."""
        return 0 <= offset - self.base_offset <= _INT32_MAX

    # ------------------------------------------------------------------ writes

    def _index_batch(self, position: int, size: int, last_offset: int, max_timestamp: int) -> None:
        if max_timestamp > self.max_timestamp_so_far:
            self.max_timestamp_so_far = max_timestamp
            self.offset_of_max_timestamp = last_offset
        if self._bytes_since_index > self.index_interval_bytes:
            self.offset_index.append(last_offset, position)
            self.time_index.maybe_append(self.max_timestamp_so_far, self.offset_of_max_timestamp)
            self._bytes_since_index = 0
        self._bytes_since_index += size

    def append(self, data: memoryview, batches: list[AppendedBatch]) -> None:
        """Write already-stamped batches at the end of the log and index them."""
        physical = self.size
        _pwrite_all(self._fd, data, physical)
        if self._rolling_ts is None and physical == 0 and batches:
            self._rolling_ts = batches[0].max_timestamp
        for b in batches:
            self._index_batch(physical + b.position, b.size, b.last_offset, b.max_timestamp)
        self.size = physical + len(data)
        self.valid_end = self.size
        if batches:
            self.next_offset = batches[-1].last_offset + 1

    def update_txn_index(self, txn: AbortedTxn) -> None:
        """An ABORT marker in this segment completed a transaction (Kafka's ``updateTxnIndex``)."""
        self.txn_index.append(txn)

    def collect_aborted_txns(self, fetch_offset: int, upper_bound_offset: int) -> TxnIndexSearchResult:
        """Aborted transactions of this segment overlapping [fetch_offset, upper_bound_offset)."""
        return self.txn_index.collect_aborted(fetch_offset, upper_bound_offset)

    def on_become_inactive(self) -> None:
        """Kafka's final time-index entry when the segment stops being the active one."""
        if self.max_timestamp_so_far >= 0:
            self.time_index.maybe_append(
                self.max_timestamp_so_far, self.offset_of_max_timestamp, skip_full_check=True
            )

    def truncate_to(self, offset: int) -> int:
        """Remove the batch holding ``offset`` and everything after it; return the bytes removed."""
        found = self.translate_offset(offset)
        if found is None:
            return 0
        position, _ = found
        self.offset_index.truncate_to(offset)
        self.time_index.truncate_to(offset)
        self.txn_index.truncate_to(offset)
        removed = self.size - position
        os.ftruncate(self._fd, position)
        self.size = position
        self._bytes_since_index = 0
        self._load_tail()
        if self.size == 0:
            self._rolling_ts = None
        return removed

    def flush(self) -> None:
        """fsync the log and its indexes."""
        os.fsync(self._fd)
        self.offset_index.flush()
        self.time_index.flush()
        self.txn_index.flush()

    # ------------------------------------------------------------------ reads

    def _iter_batches(self, position: int, end: int | None = None) -> Iterator[tuple[int, BatchHeader]]:
        """Headers of the whole batches from ``position`` (trusted data: framing only, no CRC)."""
        end = self.size if end is None else end
        buf = b""
        buf_start = position
        pos = position
        while end - pos >= HEADER_SIZE:
            off = pos - buf_start
            if off + HEADER_SIZE > len(buf):
                buf = os.pread(self._fd, min(_SCAN_CHUNK, end - pos), pos)
                buf_start, off = pos, 0
                if len(buf) < HEADER_SIZE:
                    return
            h = read_header(buf, off)
            if h.batch_length < MIN_BATCH_LENGTH or pos + h.size > end:
                return
            yield pos, h
            pos += h.size

    def batches(self, position: int = 0) -> Iterator[tuple[int, BatchHeader]]:
        """``(position, header)`` of every batch from ``position`` (producer-state replay, tools)."""
        return self._iter_batches(position)

    def translate_offset(self, offset: int) -> tuple[int, BatchHeader] | None:
        """Position and header of the first batch whose last offset is >= ``offset``."""
        _, start = self.offset_index.lookup(offset)
        for pos, h in self._iter_batches(start):
            if h.last_offset >= offset:
                return pos, h
        return None

    def read(self, position: int, max_bytes: int, max_offset: int, min_one: bool) -> bytes | memoryview:
        """Whole batches from ``position``: at most ``max_bytes`` (but one batch when ``min_one``),
        none whose base offset is >= ``max_offset``."""
        available = self.size - position
        if available <= 0:
            return b""
        want = min(max_bytes, available)
        buf = os.pread(self._fd, want, position) if want >= LOG_OVERHEAD else b""
        end = 0
        while end + LOG_OVERHEAD <= len(buf):
            base, length = _OVERHEAD.unpack_from(buf, end)
            size = length + LOG_OVERHEAD
            if base >= max_offset or end + size > len(buf):
                break
            end += size
        if end == 0:
            if not min_one:
                return b""
            base, length = _OVERHEAD.unpack(os.pread(self._fd, LOG_OVERHEAD, position))
            if base >= max_offset:
                return b""
            return os.pread(self._fd, length + LOG_OVERHEAD, position)
        return buf if end == len(buf) else memoryview(buf)[:end]

    def read_batch(self, position: int, size: int) -> bytes:
        return os.pread(self._fd, size, position)

    def find_offset_by_timestamp(self, timestamp: int, starting_offset: int) -> tuple[int, int] | None:
        """``(timestamp, offset)`` of the first record at or after ``timestamp`` (and ``starting_offset``).

        Kafka's ``LogSegment.findOffsetByTimestamp``: the time index gives a starting point, the
        offset index its position, then batches are scanned by max timestamp and the one batch
        found is decoded for the exact record.
        """
        _, index_offset = self.time_index.lookup(timestamp)
        _, start = self.offset_index.lookup(max(index_offset, starting_offset))
        for pos, h in self._iter_batches(start):
            if h.max_timestamp >= timestamp and h.last_offset >= starting_offset:
                _, records = decode_batch(self.read_batch(pos, h.size), check_crc=False)
                for record in records:
                    if record.timestamp >= timestamp and record.offset >= starting_offset:
                        return record.timestamp, record.offset
        return None

    # ------------------------------------------------------------------ recovery

    def recover(self, on_batch: Callable[[BatchHeader], None] | None = None) -> RecoveryResult:
        """Re-read every batch, check framing, offsets and CRC32C, rebuild the offset and time indexes and
        truncate the file at the first invalid batch (Kafka's ``LogSegment.recover``).

        Returns the valid bytes kept and the bytes truncated. ``on_batch`` sees each valid
        header (the log rebuilds its leader epoch cache from them). The transaction index is
        emptied: the log refills it when it replays its producer state over the segment."""
        self.offset_index.reset()
        self.time_index.reset()
        self.txn_index.reset()
        self.max_timestamp_so_far = NO_TIMESTAMP
        self.offset_of_max_timestamp = self.base_offset
        self._bytes_since_index = 0
        self._rolling_ts = None
        file_size = os.fstat(self._fd).st_size
        expected = self.base_offset
        pos = 0
        buf = b""
        view = memoryview(buf)
        buf_start = 0
        while True:
            off = pos - buf_start
            if off + HEADER_SIZE > len(buf):
                buf = os.pread(self._fd, _RECOVERY_CHUNK, pos)
                view = memoryview(buf)
                buf_start, off = pos, 0
            if len(buf) - off < HEADER_SIZE:
                break
            h = read_header(buf, off)
            if h.magic != 2 or h.batch_length < MIN_BATCH_LENGTH:
                break
            size = h.size
            if off + size > len(buf):
                buf = os.pread(self._fd, max(_RECOVERY_CHUNK, size), pos)
                view = memoryview(buf)
                buf_start, off = pos, 0
                if len(buf) < size:
                    break
            if crc32c(view[off + ATTRIBUTES_OFFSET : off + size]) != h.crc:
                break
            if (
                h.base_offset < expected
                or h.last_offset_delta < 0
                or not 0 <= h.records_count <= h.last_offset_delta + 1  # compaction leaves fewer records
                or not self.can_convert_to_relative_offset(h.last_offset)
            ):
                break
            if pos == 0:
                self._rolling_ts = h.max_timestamp
            self._index_batch(pos, size, h.last_offset, h.max_timestamp)
            if on_batch is not None:
                on_batch(h)
            expected = h.next_offset
            pos += size
        view.release()
        truncated = file_size - pos
        if truncated:
            os.ftruncate(self._fd, pos)
        self.size = pos
        self.valid_end = pos
        self.next_offset = expected
        return RecoveryResult(pos, truncated)

    def sanity_check(self) -> None:
        """Raise CorruptIndexError when an index cannot be trusted (then: ``recover``)."""
        self.offset_index.sanity_check(self.size)
        self.time_index.sanity_check(self.next_offset)
        self.txn_index.sanity_check()

    # ------------------------------------------------------------------ files

    def update_dir(self, directory: Path) -> None:
        """The partition dir was renamed (future replica swap, deletion): follow it."""
        self.directory = directory
        self.log_path = directory / self.log_path.name
        self.offset_index.update_dir(directory)
        self.time_index.update_dir(directory)
        self.txn_index.update_dir(directory)

    def change_suffix(self, old: str, new: str) -> None:
        """Rename every file from ``<name><old>`` to ``<name><new>`` (Kafka's ``changeFileSuffixes``:
        how a cleaned segment becomes ``.swap`` and then the segment)."""

        def renamed(path: Path) -> Path:
            name = path.name[: len(path.name) - len(old)] if old else path.name
            return path.with_name(name + new)

        target = renamed(self.log_path)
        os.rename(self.log_path, target)
        self.log_path = target
        self.offset_index.rename(renamed(self.offset_index.path))
        self.time_index.rename(renamed(self.time_index.path))
        self.txn_index.rename(renamed(self.txn_index.path))

    def set_last_modified(self, ms: int) -> None:
        """Give the ``.log`` file this mtime (a cleaned segment keeps its sources' for retention)."""
        os.utime(self.log_path, ns=(ms * 1_000_000, ms * 1_000_000))

    def close(self) -> None:
        """Add the final time-index entry and close the files (Kafka's ``LogSegment.close``)."""
        if self._closed:
            return
        try:
            self.on_become_inactive()
        finally:
            self.close_handles()

    def close_handles(self) -> None:
        """Close the descriptors without writing anything (offline dir, deletion)."""
        if self._closed:
            return
        self._closed = True
        for close in (self.offset_index.close, self.time_index.close, self.txn_index.close):
            with contextlib.suppress(OSError):
                close()
        with contextlib.suppress(OSError):
            os.close(self._fd)

    def delete(self) -> None:
        """Rename every file to ``.deleted``, then unlink it (Kafka's deletion protocol, without delay)."""
        for target in self.rename_for_deletion():
            os.unlink(target)

    def rename_for_deletion(self) -> list[Path]:
        """Close the files and rename each to ``.deleted`` (the first step of Kafka's deletion; the
        files are unlinked later, ``file.delete.delay.ms``, or by recovery at the next start).
        Returns the renamed paths."""
        self.close_handles()
        paths = [self.log_path, self.offset_index.path, self.time_index.path, self.txn_index.path]
        renamed = []
        for path in paths:
            target = path.with_name(path.name + DELETED_SUFFIX)
            try:
                os.rename(path, target)
            except FileNotFoundError:
                continue
            renamed.append(target)
        return renamed
