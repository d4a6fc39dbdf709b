"""The batches a read from storage keeps, ready to decode, and their records as Python tuples.

Both storage readers (WAL objects in ``storage_read``, tiered segments in ``tiered_read``) check
each batch's CRC, stamp in what the Batch Coordinator assigned, drop control batches and aborted
transactions, and decompress the records section. What becomes of the records is the caller's
choice: a Spark task turns them into Arrow columns in C (``rows.ColumnBuffer``); everything else
takes Python tuples from ``records_of``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from shoal.records.batch import HEADER_SIZE, TIMESTAMP_TYPE_FLAG, BatchHeader, read_header
from shoal.records.codec import decode_records
from shoal.records.compression import NONE, decompress

__all__ = ["StoredBatch", "StoredRecord", "records_of", "stored_batch"]

# (offset, timestamp ms, timestamp type, key, value, headers)
StoredRecord = tuple[int, int, int, bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...]]


@dataclass(frozen=True, slots=True)
class StoredBatch:
    """One kept batch: its header (real offsets and timestamps), its decompressed records section,
    and the offsets ``[start, end)`` the read wants from it."""

    header: BatchHeader
    records: bytes | memoryview
    start: int
    end: int

    @property
    def log_append_time(self) -> bool:
        return bool(self.header.attributes & TIMESTAMP_TYPE_FLAG)


def stored_batch(
    buf: bytes | bytearray | memoryview, at: int, start: int, end: int, header: BatchHeader | None = None
) -> StoredBatch:
    """The batch at ``at`` of ``buf`` (CRC already checked); ``header``: its header with the
    coordinator's offsets and LogAppendTime in (WAL bytes carry the producer's), else the one in
    ``buf``. An uncompressed records section stays a view of ``buf``, not a copy."""
    if header is None:
        header = read_header(buf, at)
    body = memoryview(buf)[at + HEADER_SIZE : at + header.size]
    records = body if header.compression == NONE else decompress(header.compression, body)
    return StoredBatch(header, records, start, end)


def records_of(batches: Iterable[StoredBatch]) -> list[StoredRecord]:
    """The wanted records of ``batches`` as tuples, in order."""
    out: list[StoredRecord] = []
    for batch in batches:
        ts_type = 1 if batch.log_append_time else 0
        start, end = batch.start, batch.end
        data = batch.records if isinstance(batch.records, bytes) else bytes(batch.records)
        for rec in decode_records(batch.header, data):
            if start <= rec.offset < end:
                out.append((rec.offset, rec.timestamp, ts_type, rec.key, rec.value, rec.headers))
    return out
