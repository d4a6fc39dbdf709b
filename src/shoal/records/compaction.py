"""Log compaction at the record level, shared by the classic log cleaner and diskless compaction.

Kafka's LogCleaner in three pieces, each working on v2 batches:

- ``OffsetMap``: the key -> latest offset map of a log's dirty section (Kafka's SkimpyOffsetMap,
  sized from ``log.cleaner.dedupe.buffer.size`` the way Kafka sizes it: 24 bytes an entry at a
  0.9 load factor; exact keys instead of MD5 hashes, so no collision can drop a live record).
- ``CleanedTransactions``: Kafka's ``CleanedTransactionMetadata``: while batches are read in
  offset order it says which data batches belong to aborted transactions (their records go) and
  which markers may go (an ABORT marker once no batch of its transaction is left, a COMMIT marker
  once none of its data batches was traversed), and which aborted transactions the cleaned
  ``.txnindex`` must still list.
- ``clean_batch``: Kafka's ``MemoryRecords.filterTo`` for one batch: the records to keep are the
  latest for their key (tombstones until the batch's delete horizon, KIP-534), the batch keeps its
  base offset, last offset, producer fields and codec, and an unchanged batch is returned as it
  was, byte for byte.

Offsets never move: a cleaned log has gaps, as Kafka's has, and consumers step over them.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import NamedTuple

from crc32c import crc32c

from shoal.records.batch import (
    ATTRIBUTES_OFFSET,
    COMPRESSION_MASK,
    CRC_OFFSET,
    DELETE_HORIZON_FLAG,
    HEADER_SIZE,
    HEADER_STRUCT,
    LOG_OVERHEAD,
    BatchHeader,
)
from shoal.records.codec import (
    CONTROL_ABORT,
    CONTROL_COMMIT,
    Record,
    control_record_type,
    decode_batch,
    encode_record,
)
from shoal.records.compression import compress

__all__ = [
    "AbortedTransaction",
    "CleanStats",
    "CleanedTransactions",
    "OffsetMap",
    "clean_batch",
    "latest_offsets",
    "offset_map_capacity",
]

#: Kafka's SkimpyOffsetMap: a 16-byte MD5 hash and an 8-byte offset per entry.
_BYTES_PER_ENTRY = 24
#: ``log.cleaner.io.buffer.load.factor``'s default.
_LOAD_FACTOR = 0.9


def offset_map_capacity(dedupe_buffer_size: int, threads: int) -> int:
    """Keys one cleaner thread can map: Kafka splits ``log.cleaner.dedupe.buffer.size`` over the
    threads and fills each map to the load factor."""
    return max(1, int(dedupe_buffer_size // max(1, threads) * _LOAD_FACTOR) // _BYTES_PER_ENTRY)


class OffsetMap:
    """Key -> offset of its latest record in the dirty section being cleaned."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._offsets: dict[bytes, int] = {}
        #: The highest offset put: records above it were not mapped and are always kept.
        self.latest_offset = -1

    def __len__(self) -> int:
        return len(self._offsets)

    @property
    def is_full(self) -> bool:
        return len(self._offsets) >= self.capacity

    def put(self, key: bytes, offset: int) -> None:
        self._offsets[key] = offset
        if offset > self.latest_offset:
            self.latest_offset = offset

    def get(self, key: bytes) -> int | None:
        return self._offsets.get(key)

    def clear(self) -> None:
        self._offsets.clear()
        self.latest_offset = -1

    def add_all(self, offsets: dict[bytes, int]) -> bool:
        """Map a whole segment's keys at once, or nothing of it when they would overfill the map
        (a pass ends at a segment boundary, as Kafka's does)."""
        new = sum(1 for key in offsets if key not in self._offsets)
        if len(self._offsets) + new > self.capacity:
            return False
        for key, offset in offsets.items():
            self.put(key, offset)
        return True


def latest_offsets(records: list[Record], into: dict[bytes, int]) -> None:
    """Add each keyed record's offset to ``into`` (later records win)."""
    for r in records:
        if r.key is not None:
            into[r.key] = r.offset


class AbortedTransaction(NamedTuple):
    """An aborted transaction as a ``.txnindex`` entry lists it."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


class _AbortedInProgress:
    __slots__ = ("txn", "saw_batch")

    def __init__(self, txn: AbortedTransaction) -> None:
        self.txn = txn
        self.saw_batch = False


class CleanedTransactions:
    """Kafka's ``CleanedTransactionMetadata``: the transaction view of one cleaning pass.

    ``aborted`` lists every aborted transaction with data in the range read (sorted here by first
    offset). Batches must be shown in offset order.
    """

    def __init__(self, aborted: Iterable[AbortedTransaction]) -> None:
        self._pending = deque(sorted(aborted, key=lambda t: t.first_offset))
        self._ongoing_aborted: dict[int, _AbortedInProgress] = {}
        self._ongoing_committed: set[int] = set()
        #: Aborted transactions whose ABORT marker was kept: the cleaned ``.txnindex`` entries.
        self.retained_aborted: list[AbortedTransaction] = []

    def _consume_up_to(self, offset: int) -> None:
        while self._pending and self._pending[0].first_offset <= offset:
            txn = self._pending.popleft()
            self._ongoing_aborted.setdefault(txn.producer_id, _AbortedInProgress(txn))

    def on_batch(self, header: BatchHeader, control_type: int | None = None) -> bool:
        """Read one batch; True when it may be discarded: a data batch of an aborted transaction,
        or a marker whose transaction has no data left (``control_type``: the marker's record
        type, CONTROL_ABORT or CONTROL_COMMIT)."""
        self._consume_up_to(header.last_offset)
        pid = header.producer_id
        if header.is_control:
            if control_type == CONTROL_ABORT:
                ongoing = self._ongoing_aborted.pop(pid, None)
                if ongoing is not None and ongoing.saw_batch:
                    self.retained_aborted.append(ongoing.txn)
                    return False
                return True
            if control_type == CONTROL_COMMIT:
                if pid in self._ongoing_committed:
                    self._ongoing_committed.discard(pid)
                    return False
                return True
            return False
        if not header.is_transactional:
            return False
        ongoing = self._ongoing_aborted.get(pid)
        if ongoing is not None:
            ongoing.saw_batch = True
            return True
        self._ongoing_committed.add(pid)
        return False


@dataclass(slots=True)
class CleanStats:
    """What a cleaning pass read and wrote (Kafka's CleanerStats)."""

    bytes_read: int = 0
    bytes_written: int = 0
    records_read: int = 0
    records_written: int = 0
    invalid_records: int = 0
    #: The earliest delete horizon a kept batch carries (-1: none): the log must be cleaned again
    #: then, to drop its tombstones and markers.
    next_delete_horizon_ms: int = -1

    def horizon(self, ms: int) -> None:
        if self.next_delete_horizon_ms < 0 or ms < self.next_delete_horizon_ms:
            self.next_delete_horizon_ms = ms


def _delete_horizon(header: BatchHeader) -> int | None:
    return header.base_timestamp if header.has_delete_horizon else None


def clean_batch(
    batch: bytes | memoryview,
    offset_map: OffsetMap,
    transactions: CleanedTransactions,
    *,
    now_ms: int,
    delete_retention_ms: int,
    stats: CleanStats,
    retain_empty: Callable[[BatchHeader], bool] | None = None,
) -> bytes | memoryview | None:
    """The batch as the cleaned log keeps it (``batch`` itself when nothing changes), or None.

    Kafka's rules (LogCleaner ``cleanInto`` / ``shouldRetainRecord``, MemoryRecords ``filterTo``):
    a keyed record stays when it is the latest for its key in ``offset_map`` (or above what the map
    saw) and has a value, or is a tombstone whose batch's delete horizon has not passed (a batch
    without one gets ``now_ms + delete_retention_ms`` when written with a tombstone); records
    without a key go. A data batch of an aborted transaction goes whole; a marker goes once its
    transaction has no data left and its delete horizon passed. ``retain_empty`` says which
    batches must stay even when emptied (the last batch of an active producer, so producer state
    can be rebuilt from the log, as Kafka keeps it).
    """
    header, records = decode_batch(batch, check_crc=False)
    stats.bytes_read += header.size
    stats.records_read += len(records)
    control_type = control_record_type(records[0]) if header.is_control and records else None
    can_discard = transactions.on_batch(header, control_type)
    horizon = _delete_horizon(header)
    if header.is_control:
        discard_records = can_discard and horizon is not None and horizon <= now_ms
    else:
        discard_records = can_discard
    keep_empty = header.has_producer_id and retain_empty is not None and retain_empty(header)
    if discard_records and not keep_empty:
        return None
    if header.is_control:
        kept = [] if discard_records else records
    elif discard_records:
        kept = []
    else:
        kept = []
        retain_deletes = horizon is None or now_ms < horizon
        for record in records:
            if record.key is None:
                stats.invalid_records += 1
                continue
            latest = offset_map.get(record.key)
            is_latest = record.offset > offset_map.latest_offset or latest is None or record.offset >= latest
            if is_latest and (record.value is not None or retain_deletes):
                kept.append(record)
    if not kept and not keep_empty:
        return None
    has_tombstone = any(r.value is None for r in kept) and not header.is_control
    marker_for_empty_txn = header.is_control and can_discard
    set_horizon = (has_tombstone or marker_for_empty_txn) and horizon is None
    if set_horizon:
        horizon = now_ms + delete_retention_ms
    if horizon is not None and kept and (has_tombstone or header.is_control):
        stats.horizon(horizon)
    stats.records_written += len(kept)
    if len(kept) == len(records) and not set_horizon:
        stats.bytes_written += header.size
        return batch
    out = _rebuild(header, kept, horizon if (set_horizon or header.has_delete_horizon) else None)
    stats.bytes_written += len(out)
    return out


def _rebuild(header: BatchHeader, records: list[Record], delete_horizon_ms: int | None) -> bytes:
    """A v2 batch of ``records`` keeping the original's base offset, last offset delta, producer
    fields, partition leader epoch and attributes; its base timestamp is the delete horizon when
    there is one (KIP-534). An empty batch is written uncompressed with only the header, as
    Kafka's ``writeEmptyHeader`` does."""
    attributes = header.attributes & ~DELETE_HORIZON_FLAG
    log_append_time = header.timestamp_type == 1
    if delete_horizon_ms is not None:
        attributes |= DELETE_HORIZON_FLAG
    if not records:
        attributes &= ~COMPRESSION_MASK
        max_ts = header.max_timestamp
        base_ts = max_ts if delete_horizon_ms is None else delete_horizon_ms
        payload = b""
    else:
        max_ts = header.max_timestamp if log_append_time else max(r.timestamp for r in records)
        if delete_horizon_ms is not None:
            base_ts = delete_horizon_ms  # record timestamps become deltas from the horizon
        else:
            base_ts = header.base_timestamp if log_append_time else records[0].timestamp
        body = bytearray()
        for r in records:
            ts_delta = 0 if log_append_time else r.timestamp - base_ts
            encode_record(body, r.offset - header.base_offset, ts_delta, r.key, r.value, r.headers)
        payload = compress(header.compression, body) if header.compression else bytes(body)
    out = bytearray(HEADER_SIZE + len(payload))
    HEADER_STRUCT.pack_into(
        out,
        0,
        header.base_offset,
        len(out) - LOG_OVERHEAD,
        header.partition_leader_epoch,
        2,
        0,
        attributes,
        header.last_offset_delta,
        base_ts,
        max_ts,
        header.producer_id,
        header.producer_epoch,
        header.base_sequence,
        len(records),
    )
    out[HEADER_SIZE:] = payload
    out[CRC_OFFSET : CRC_OFFSET + 4] = crc32c(memoryview(out)[ATTRIBUTES_OFFSET:]).to_bytes(4, "big")
    return bytes(out)
