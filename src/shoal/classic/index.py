"""Kafka's sparse segment indexes: ``.index`` (offset -> position) and ``.timeindex`` (time -> offset).

Formats are Kafka's, big-endian, fixed-size entries:

- offset index: int32 offset relative to the segment's base offset, int32 byte position of the
  batch in the ``.log``. The offset is the batch's *last* offset (as Kafka's LogSegment appends
  it), so the batch holding a target offset starts at or after the entry found for it.
- time index: int64 timestamp, int32 relative offset. An entry is added only when the segment's
  max timestamp grows; its offset is the last offset of the batch carrying that timestamp.

Kafka preallocates and mmaps these files; here the entries live in compact arrays in memory and
each new entry is written to the file at once (page cache), so the file is always exactly as
long as its entries. Offsets only grow, so lookups are binary searches.
"""

from __future__ import annotations

import contextlib
import os
import struct
import sys
from array import array
from bisect import bisect_left, bisect_right
from pathlib import Path

__all__ = ["CorruptIndexError", "OffsetIndex", "TimeIndex"]

_OFFSET_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")
_BIG_ENDIAN_HOST = sys.byteorder == "big"
NO_TIMESTAMP = -1


class CorruptIndexError(ValueError):
    """An index file that cannot be trusted: the segment's indexes are rebuilt from its log."""


def _read_all(fd: int) -> bytes:
    size = os.fstat(fd).st_size
    chunks = []
    pos = 0
    while pos < size:
        chunk = os.pread(fd, size - pos, pos)
        if not chunk:
            break
        chunks.append(chunk)
        pos += len(chunk)
    return b"".join(chunks)


def _write_at(fd: int, data: bytes, pos: int) -> None:
    view = memoryview(data)
    while view:
        n = os.pwrite(fd, view, pos)
        view = view[n:]
        pos += n


class _IndexFile:
    """File handling shared by both indexes."""

    entry_size = 0

    def __init__(self, path: Path, base_offset: int, max_index_size: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self.max_entries = max(1, max_index_size // self.entry_size)
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            self._raw_length = os.fstat(self._fd).st_size
        except OSError:
            os.close(self._fd)
            raise

    def _truncate_file(self, entries: int) -> None:
        os.ftruncate(self._fd, entries * self.entry_size)

    def flush(self) -> None:
        """fsync the index file."""
        os.fsync(self._fd)

    def close(self) -> None:
        if self._fd >= 0:
            fd, self._fd = self._fd, -1
            os.close(fd)

    def rename(self, path: Path) -> None:
        """Follow a rename of the file (suffix change or a moved partition dir)."""
        if self.path.exists():
            os.rename(self.path, path)
        self.path = path

    def update_dir(self, directory: Path) -> None:
        """The partition dir was renamed: the file (already moved with it) has a new path."""
        self.path = directory / self.path.name

    def delete(self) -> None:
        self.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)


class OffsetIndex(_IndexFile):
    """Sparse map from (last) offsets to batch positions in one segment."""

    entry_size = 8

    def __init__(self, path: Path, base_offset: int, max_index_size: int) -> None:
        super().__init__(path, base_offset, max_index_size)
        data = _read_all(self._fd)
        usable = len(data) - len(data) % 8
        raw = array("i")
        raw.frombytes(data[:usable])
        if not _BIG_ENDIAN_HOST:
            raw.byteswap()
        self._rel = raw[0::2]
        self._pos = raw[1::2]

    @property
    def entries(self) -> int:
        return len(self._rel)

    @property
    def is_full(self) -> bool:
        return len(self._rel) >= self.max_entries

    @property
    def last_offset(self) -> int:
        return self.base_offset + self._rel[-1] if self._rel else self.base_offset

    @property
    def last_position(self) -> int:
        return self._pos[-1] if self._pos else 0

    def append(self, offset: int, position: int) -> None:
        """Add ``offset -> position``; offsets and positions must grow."""
        rel = offset - self.base_offset
        if self._rel and (rel <= self._rel[-1] or position <= self._pos[-1]):
            raise ValueError(
                f"Attempt to append an offset ({offset}) at position {position} no larger than the "
                f"last offset appended ({self.last_offset}) to {self.path}"
            )
        if self.is_full:
            raise ValueError(f"Attempt to append to a full index (size = {self.entries}) at {self.path}")
        _write_at(self._fd, _OFFSET_ENTRY.pack(rel, position), len(self._rel) * 8)
        self._rel.append(rel)
        self._pos.append(position)

    def lookup(self, target_offset: int) -> tuple[int, int]:
        """The entry with the largest offset <= target, or ``(base_offset, 0)``."""
        i = bisect_right(self._rel, target_offset - self.base_offset) - 1
        if i < 0:
            return self.base_offset, 0
        return self.base_offset + self._rel[i], self._pos[i]

    def truncate_to(self, offset: int) -> None:
        """Drop the entries with offsets >= ``offset``."""
        keep = bisect_left(self._rel, offset - self.base_offset)
        if keep < len(self._rel):
            del self._rel[keep:]
            del self._pos[keep:]
        self._truncate_file(keep)

    def reset(self) -> None:
        """Drop every entry (before a rebuild)."""
        del self._rel[:]
        del self._pos[:]
        self._truncate_file(0)

    def sanity_check(self, log_size: int) -> None:
        """Kafka's checks plus ordering: raise CorruptIndexError when the file cannot be trusted."""
        if self._raw_length % 8:
            raise CorruptIndexError(
                f"Index file {self.path} has length {self._raw_length}, not a multiple of 8"
            )
        rel, pos = self._rel, self._pos
        if not rel:
            return
        if rel[0] < 0 or pos[0] < 0 or pos[-1] >= log_size:
            raise CorruptIndexError(
                f"Corrupt index found, index file ({self.path}) has an entry past the log "
                f"(last offset {self.last_offset}, position {pos[-1]}, log size {log_size})"
            )
        if any(a >= b for a, b in zip(rel, rel[1:], strict=False)) or any(
            a >= b for a, b in zip(pos, pos[1:], strict=False)
        ):
            raise CorruptIndexError(f"Corrupt index found, index file ({self.path}) is not ordered")


class TimeIndex(_IndexFile):
    """Sparse map from growing max timestamps to offsets in one segment."""

    entry_size = 12

    def __init__(self, path: Path, base_offset: int, max_index_size: int) -> None:
        super().__init__(path, base_offset, max_index_size)
        data = _read_all(self._fd)
        usable = len(data) - len(data) % 12
        self._ts = array("q")
        self._rel = array("i")
        for ts, rel in _TIME_ENTRY.iter_unpack(data[:usable]):
            self._ts.append(ts)
            self._rel.append(rel)

    @property
    def entries(self) -> int:
        return len(self._ts)

    @property
    def is_full(self) -> bool:
        """Kafka keeps the last slot for the entry written when the segment becomes inactive."""
        return len(self._ts) >= self.max_entries - 1

    def last_entry(self) -> tuple[int, int]:
        """``(timestamp, offset)`` of the last entry, or ``(-1, base_offset)``."""
        if not self._ts:
            return NO_TIMESTAMP, self.base_offset
        return self._ts[-1], self.base_offset + self._rel[-1]

    def maybe_append(self, timestamp: int, offset: int, skip_full_check: bool = False) -> None:
        """Add an entry when ``timestamp`` is larger than the last one."""
        if not skip_full_check and self.is_full:
            raise ValueError(f"Attempt to append to a full time index (size = {self.entries}) at {self.path}")
        if self._ts:
            last_ts, last_offset = self.last_entry()
            if offset < last_offset:
                raise ValueError(
                    f"Attempt to append an offset ({offset}) to slot {self.entries} no larger than the "
                    f"last offset appended ({last_offset}) to {self.path}"
                )
            if timestamp <= last_ts:
                return
        if len(self._ts) >= self.max_entries:
            return
        _write_at(self._fd, _TIME_ENTRY.pack(timestamp, offset - self.base_offset), len(self._ts) * 12)
        self._ts.append(timestamp)
        self._rel.append(offset - self.base_offset)

    def lookup(self, target_timestamp: int) -> tuple[int, int]:
        """The entry with the largest timestamp <= target, or ``(-1, base_offset)``."""
        i = bisect_right(self._ts, target_timestamp) - 1
        if i < 0:
            return NO_TIMESTAMP, self.base_offset
        return self._ts[i], self.base_offset + self._rel[i]

    def truncate_to(self, offset: int) -> None:
        """Drop the entries with offsets >= ``offset``."""
        keep = bisect_left(self._rel, offset - self.base_offset)
        if keep < len(self._ts):
            del self._ts[keep:]
            del self._rel[keep:]
        self._truncate_file(keep)

    def reset(self) -> None:
        del self._ts[:]
        del self._rel[:]
        self._truncate_file(0)

    def sanity_check(self, next_offset: int) -> None:
        """Raise CorruptIndexError when entries are out of order or point past the segment."""
        if self._raw_length % 12:
            raise CorruptIndexError(
                f"Time index file {self.path} has length {self._raw_length}, not a multiple of 12"
            )
        if not self._ts:
            return
        if self._rel[0] < 0 or self.base_offset + self._rel[-1] >= max(next_offset, self.base_offset + 1):
            raise CorruptIndexError(
                f"Corrupt time index found, time index file ({self.path}) has an offset past the segment"
            )
        ts, rel = self._ts, self._rel
        if any(a >= b for a, b in zip(ts, ts[1:], strict=False)) or any(
            a > b for a, b in zip(rel, rel[1:], strict=False)
        ):
            raise CorruptIndexError(f"Corrupt time index found, time index file ({self.path}) is not ordered")
