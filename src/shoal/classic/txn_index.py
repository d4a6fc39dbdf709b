"""Kafka's aborted-transaction index, ``<base>.txnindex``: one per segment (TransactionIndex).

When an ABORT marker ends a transaction that wrote data, the segment the marker lands in gets an
entry (Kafka's AbortedTxn): int16 version = 0, int64 producer id, int64 first offset, int64 last
offset (the marker's), int64 last stable offset (the LSO once the transaction completed), 34
bytes big-endian, back to back. A READ_COMMITTED fetch asks for the aborted transactions
overlapping the range it returns, so the consumer can drop their records.

As in Kafka the file exists only once an entry was written (a segment without aborted
transactions has none), entries' last offsets only grow, and the whole file is re-read for each
search: few transactions abort, and the page cache holds the rest.
"""

from __future__ import annotations

import contextlib
import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from shoal.classic.index import CorruptIndexError

__all__ = ["ABORTED_TXN_SIZE", "AbortedTxn", "TransactionIndex", "TxnIndexSearchResult"]

_ENTRY = struct.Struct(">hqqqq")
ABORTED_TXN_SIZE = _ENTRY.size  # 34
_VERSION = 0
_READ_CHUNK = ABORTED_TXN_SIZE * 4096


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    """One entry: an aborted transaction of ``producer_id`` over [first_offset, last_offset]."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int

    def to_bytes(self) -> bytes:
        return _ENTRY.pack(_VERSION, self.producer_id, self.first_offset, self.last_offset, self.last_stable_offset)


@dataclass(frozen=True, slots=True)
class TxnIndexSearchResult:
    """What one segment's index holds for a fetch; ``complete``: no later segment can add more."""

    aborted: list[AbortedTxn]
    complete: bool


class TransactionIndex:
    """The ``.txnindex`` of one segment; opened lazily (most segments never have one)."""

    def __init__(self, path: Path, start_offset: int) -> None:
        self.path = path
        self.start_offset = start_offset
        self._fd: int | None = None
        self._size = 0
        self._last_offset: int | None = None
        if path.exists():
            self._open()
            last = self._last_entry()
            self._last_offset = last.last_offset if last is not None else None

    # ------------------------------------------------------------------ file

    def _open(self) -> int:
        if self._fd is None:
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            self._size = os.fstat(self._fd).st_size
        return self._fd

    @property
    def size(self) -> int:
        """Bytes in the file (0 when there is none)."""
        return self._size

    @property
    def exists(self) -> bool:
        return self._fd is not None

    def flush(self) -> None:
        if self._fd is not None:
            os.fsync(self._fd)

    def close(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)

    def update_dir(self, directory: Path) -> None:
        self.path = directory / self.path.name

    def rename(self, path: Path) -> None:
        """Follow a rename of the file (a cleaned segment's suffix change)."""
        if self.path.exists():
            os.rename(self.path, path)
        self.path = path

    # ------------------------------------------------------------------ writes

    def append(self, txn: AbortedTxn) -> None:
        """Add an entry; Kafka's rule: last offsets must grow."""
        if self._last_offset is not None and self._last_offset >= txn.last_offset:
            raise ValueError(
                f"The last offset of appended transactions must increase sequentially, but {txn.last_offset} "
                f"is not greater than current last offset {self._last_offset} of index {self.path}"
            )
        fd = self._open()
        data = memoryview(txn.to_bytes())
        pos = self._size
        while data:
            n = os.pwrite(fd, data, pos)
            data = data[n:]
            pos += n
        self._size = pos
        self._last_offset = txn.last_offset

    def truncate_to(self, offset: int) -> None:
        """Drop the entries whose last offset is >= ``offset`` (Kafka's ``truncateTo``)."""
        new_last: int | None = None
        for position, txn in self._entries():
            if txn.last_offset >= offset:
                os.ftruncate(self._open(), position)
                self._size = position
                self._last_offset = new_last
                return
            new_last = txn.last_offset

    def reset(self) -> None:
        """Empty it (the segment is recovered and its entries rebuilt); the file stays, as in Kafka."""
        if self._fd is not None:
            os.ftruncate(self._fd, 0)
        self._size = 0
        self._last_offset = None

    # ------------------------------------------------------------------ reads

    def _entries(self) -> Iterator[tuple[int, AbortedTxn]]:
        """``(position, entry)`` of every whole entry; a partial tail is ignored, as Kafka does."""
        if self._fd is None:
            return
        fd, end, pos = self._fd, self._size - self._size % ABORTED_TXN_SIZE, 0
        while pos < end:
            chunk = os.pread(fd, min(_READ_CHUNK, end - pos), pos)
            usable = len(chunk) - len(chunk) % ABORTED_TXN_SIZE
            if not usable:
                return
            for i, (version, pid, first, last, lso) in enumerate(_ENTRY.iter_unpack(chunk[:usable])):
                if version > _VERSION:
                    raise CorruptIndexError(
                        f"Unexpected aborted transaction version {version} in transaction index {self.path}, "
                        f"current version is {_VERSION}"
                    )
                yield pos + i * ABORTED_TXN_SIZE, AbortedTxn(pid, first, last, lso)
            pos += usable

    def _last_entry(self) -> AbortedTxn | None:
        end = self._size - self._size % ABORTED_TXN_SIZE
        if self._fd is None or end == 0:
            return None
        version, pid, first, last, lso = _ENTRY.unpack(os.pread(self._fd, ABORTED_TXN_SIZE, end - ABORTED_TXN_SIZE))
        return AbortedTxn(pid, first, last, lso)

    def all_aborted(self) -> list[AbortedTxn]:
        return [txn for _, txn in self._entries()]

    def collect_aborted(self, fetch_offset: int, upper_bound_offset: int) -> TxnIndexSearchResult:
        """Kafka's ``collectAbortedTxns``: entries overlapping [fetch_offset, upper_bound_offset);
        complete once an entry's LSO reaches the upper bound (later ones start after it)."""
        found = []
        for _, txn in self._entries():
            if txn.last_offset >= fetch_offset and txn.first_offset < upper_bound_offset:
                found.append(txn)
            if txn.last_stable_offset >= upper_bound_offset:
                return TxnIndexSearchResult(found, True)
        return TxnIndexSearchResult(found, False)

    def sanity_check(self) -> None:
        """CorruptIndexError when an entry ends before the segment starts, an entry is partial or of
        an unknown version: the segment is recovered and the index rebuilt from its log."""
        if self._size % ABORTED_TXN_SIZE:
            raise CorruptIndexError(
                f"Transaction index {self.path} has a partial entry: {self._size} bytes is not a multiple "
                f"of {ABORTED_TXN_SIZE}"
            )
        for _, txn in self._entries():
            if txn.last_offset < self.start_offset:
                raise CorruptIndexError(
                    f"Last offset of aborted transaction {txn} in index {self.path} is less than start offset "
                    f"{self.start_offset}"
                )
