"""Idempotent and transactional producer state of one partition (Kafka's ProducerStateManager)
and its snapshots.

Per producer id the log keeps a ``ProducerStateEntry`` (``producer_entry``); appends are checked
the way Kafka's ``ProducerAppendInfo`` does (``producer_append``):

- a batch whose epoch and first/last sequence match a cached batch is a duplicate: the append
  answers the original offsets and writes nothing;
- an epoch below the last seen one: INVALID_PRODUCER_EPOCH;
- a new epoch must start at sequence 0, the same epoch must continue at last sequence + 1
  (wrapping from 2**31-1 to 0): otherwise OUT_OF_ORDER_SEQUENCE_NUMBER. A producer the partition
  does not know yet (or no longer: expired, deleted) may start at any sequence;
- transactions: see ``producer_append``.

The manager also keeps Kafka's ``ongoingTxns`` (the transactions without a marker yet, by first
offset) and ``unreplicatedTxns`` (completed ones whose marker is not below the high watermark
yet): the smallest first offset of either is the first unstable offset, which bounds the last
stable offset. Both are rebuilt from a snapshot (``current_txn_first_offset``) plus a replay.

Snapshots are Kafka's ``<offset>.snapshot`` files, version 1, so Kafka reads ours and we read
Kafka's: int16 version, uint32 CRC32C of everything after it, int32 count, then per producer
int64 producer_id, int16 epoch, int32 last_sequence, int64 last_offset, int32 offset_delta,
int64 timestamp, int32 coordinator_epoch, int64 current_txn_first_offset. Like Kafka's, a
snapshot keeps only each producer's *last* batch; the 5-batch window is rebuilt by replaying the
log after the snapshot. The offset in the name is the log end offset the state covers.
"""

from __future__ import annotations

import contextlib
import logging
import os
import struct
from bisect import bisect_left, insort
from collections.abc import Callable, Iterable
from pathlib import Path

from crc32c import crc32c

from shoal.classic.checkpoint import atomic_write
from shoal.classic.producer_append import (
    TV_UNKNOWN,
    AppendOrigin,
    CompletedTxn,
    ProducerAppend,
    ProducerAppendInfo,
    TxnStarted,
)
from shoal.classic.producer_entry import NUM_BATCHES_TO_RETAIN, BatchMetadata, ProducerStateEntry
from shoal.classic.segment import SNAPSHOT_SUFFIX, file_name
from shoal.protocol.errors import KafkaError
from shoal.records.batch import BatchHeader
from shoal.records.control import EndTxnMarker

__all__ = [
    "NUM_BATCHES_TO_RETAIN",
    "BatchMetadata",
    "CorruptSnapshotError",
    "ProducerStateEntry",
    "ProducerStateManager",
    "read_snapshot",
    "write_snapshot",
]

_log = logging.getLogger(__name__)

_SNAPSHOT_VERSION = 1
_HEADER = struct.Struct(">hI")  # version, crc
_COUNT = struct.Struct(">i")
_ENTRY = struct.Struct(">qhiqiqiq")
_ENTRIES_OFFSET = _HEADER.size

#: One batch to check: header, assigned base offset, effective max timestamp, its marker (control batches).
PendingBatch = tuple[BatchHeader, int, int, EndTxnMarker | None]
#: Called for each transaction an ABORT completes, with the last stable offset after it.
OnAborted = Callable[[CompletedTxn, int], None]


class CorruptSnapshotError(ValueError):
    """A snapshot that fails its version, CRC or layout checks: it is deleted and an older one used."""


def write_snapshot(path: Path, entries: Iterable[ProducerStateEntry], *, sync: bool) -> None:
    """Write a Kafka v1 producer snapshot (atomically; fsync only when ``sync``)."""
    rows = list(entries)
    body = bytearray(_COUNT.pack(len(rows)))
    for e in rows:
        body += _ENTRY.pack(
            e.producer_id,
            e.producer_epoch,
            e.last_seq,
            e.last_data_offset,
            e.last_offset_delta,
            e.last_timestamp,
            e.coordinator_epoch,
            e.current_txn_first_offset,
        )
    atomic_write(path, _HEADER.pack(_SNAPSHOT_VERSION, crc32c(body)) + bytes(body), sync=sync)


def read_snapshot(path: Path) -> list[ProducerStateEntry]:
    """Parse a Kafka v1 producer snapshot; CorruptSnapshotError when it does not check out."""
    data = path.read_bytes()
    if len(data) < _HEADER.size + _COUNT.size:
        raise CorruptSnapshotError(f"Snapshot {path} is too short ({len(data)} bytes)")
    version, crc = _HEADER.unpack_from(data, 0)
    if version != _SNAPSHOT_VERSION:
        raise CorruptSnapshotError(f"Snapshot contained an unknown file version {version}")
    computed = crc32c(memoryview(data)[_ENTRIES_OFFSET:])
    if crc != computed:
        raise CorruptSnapshotError(
            f"Snapshot is corrupt (CRC is no longer valid). Stored crc: {crc}. Computed crc: {computed}"
        )
    (count,) = _COUNT.unpack_from(data, _ENTRIES_OFFSET)
    start = _ENTRIES_OFFSET + _COUNT.size
    if count < 0 or len(data) != start + count * _ENTRY.size:
        raise CorruptSnapshotError(
            f"Snapshot {path} declares {count} entries but has {len(data) - start} bytes"
        )
    out = []
    for pid, epoch, seq, offset, delta, ts, coord_epoch, txn_first in _ENTRY.iter_unpack(data[start:]):
        entry = ProducerStateEntry(pid, epoch, coord_epoch, ts, txn_first if txn_first >= 0 else -1)
        if offset >= 0:
            entry.batches.append(BatchMetadata(seq, offset, delta, ts))
        out.append(entry)
    return out


class ProducerStateManager:
    """Producer ids -> state for one partition, its ongoing transactions, and the snapshot files in
    the partition dir.

    Not thread-safe: the owning ``PartitionLog`` calls it under its lock.
    """

    def __init__(self, directory: Path, topic_partition: str, expiration_ms: int) -> None:
        self.directory = directory
        self.topic_partition = topic_partition
        self.expiration_ms = expiration_ms
        self.producers: dict[int, ProducerStateEntry] = {}
        #: The log end offset the in-memory state covers.
        self.map_end_offset = 0
        self.last_snap_offset = 0
        self._snapshots: list[int] = []
        #: Kafka's ongoingTxns: first offset -> producer id, and the first offsets in order.
        self._ongoing: dict[int, int] = {}
        self._ongoing_offsets: list[int] = []
        #: Kafka's unreplicatedTxns: first offset -> (producer id, marker offset), and the first offsets in order.
        self._unreplicated: dict[int, tuple[int, int]] = {}
        self._unreplicated_offsets: list[int] = []
        self.rescan_snapshots()

    # ---------------------------------------------------------------- snapshot files

    def snapshot_path(self, offset: int) -> Path:
        return self.directory / (file_name(offset) + SNAPSHOT_SUFFIX)

    def rescan_snapshots(self) -> None:
        """List the snapshot files in the dir (leftover temp files of interrupted writes go away)."""
        offsets = []
        for name in os.listdir(self.directory):
            if name.endswith(SNAPSHOT_SUFFIX + ".tmp"):
                os.unlink(self.directory / name)
            elif name.endswith(SNAPSHOT_SUFFIX):
                try:
                    offsets.append(int(name[: -len(SNAPSHOT_SUFFIX)]))
                except ValueError:
                    continue
        self._snapshots = sorted(offsets)

    @property
    def snapshot_offsets(self) -> list[int]:
        return list(self._snapshots)

    def latest_snapshot_offset(self) -> int | None:
        return self._snapshots[-1] if self._snapshots else None

    def _remove_snapshot(self, offset: int) -> None:
        if offset in self._snapshots:
            self._snapshots.remove(offset)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.snapshot_path(offset))

    def remove_snapshot(self, offset: int) -> None:
        """Drop the snapshot at ``offset`` (its segment is being deleted)."""
        self._remove_snapshot(offset)

    def delete_snapshots_before(self, offset: int) -> None:
        for snap in [s for s in self._snapshots if s < offset]:
            self._remove_snapshot(snap)

    def take_snapshot(self, *, sync: bool) -> Path | None:
        """Write the state at ``map_end_offset`` unless a snapshot there exists; return the new file."""
        if self.map_end_offset <= self.last_snap_offset and self.map_end_offset in self._snapshots:
            return None
        path = self.snapshot_path(self.map_end_offset)
        write_snapshot(path, self.producers.values(), sync=sync)
        if self.map_end_offset not in self._snapshots:
            self._snapshots.append(self.map_end_offset)
            self._snapshots.sort()
        self.last_snap_offset = self.map_end_offset
        return path

    # ---------------------------------------------------------------- loading

    def load(self, log_start_offset: int, log_end_offset: int, now_ms: int, *, upto: int | None = None) -> int:
        """Kafka's ``truncateAndReload``: drop snapshots out of range, load the latest good one (at
        or below ``upto`` when given: recovery replays from a recovered segment's base).

        Returns the offset from which the log must be replayed to reach ``log_end_offset``.
        """
        for snap in list(self._snapshots):
            if snap > log_end_offset or snap <= log_start_offset:
                self._remove_snapshot(snap)
        self.producers.clear()
        self._clear_txns()
        limit = log_end_offset if upto is None else upto
        while True:
            usable = [s for s in self._snapshots if s <= limit]
            if not usable:
                break
            snap = usable[-1]
            try:
                entries = read_snapshot(self.snapshot_path(snap))
            except (CorruptSnapshotError, FileNotFoundError) as e:
                _log.warning("Failed to load producer snapshot %s of %s: %s", snap, self.topic_partition, e)
                self._remove_snapshot(snap)
                continue
            for entry in entries:
                if not self._is_expired(now_ms, entry):
                    self._load_entry(entry)
            self.map_end_offset = self.last_snap_offset = snap
            return snap
        self.map_end_offset = self.last_snap_offset = log_start_offset
        return log_start_offset

    def _load_entry(self, entry: ProducerStateEntry) -> None:
        """Kafka's ``loadProducerEntry``: the entry, and its ongoing transaction."""
        self.producers[entry.producer_id] = entry
        if entry.has_ongoing_txn:
            self._add_ongoing(entry.current_txn_first_offset, entry.producer_id)

    def restore(self, offset: int, snapshot: bytes) -> int:
        """A log emptied to start at ``offset`` takes the producer state of the snapshot taken at
        ``offset`` elsewhere (a follower's auxiliary state from remote storage, KIP-405): written
        as this partition's snapshot file and loaded. Returns how many producers it holds;
        CorruptSnapshotError when it does not check out (nothing kept then)."""
        path = self.snapshot_path(offset)
        atomic_write(path, snapshot, sync=True)
        try:
            entries = read_snapshot(path)
        except CorruptSnapshotError:
            path.unlink(missing_ok=True)
            raise
        self.producers = {}
        self._clear_txns()
        for entry in entries:
            self._load_entry(entry)
        if offset not in self._snapshots:
            self._snapshots.append(offset)
            self._snapshots.sort()
        self.map_end_offset = self.last_snap_offset = offset
        return len(entries)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Forget everything (the log was emptied) and drop all snapshots."""
        self.producers.clear()
        self._clear_txns()
        for snap in list(self._snapshots):
            self._remove_snapshot(snap)
        self.last_snap_offset = 0
        self.map_end_offset = offset

    # ---------------------------------------------------------------- transactions

    def _clear_txns(self) -> None:
        self._ongoing.clear()
        self._ongoing_offsets.clear()
        self._unreplicated.clear()
        self._unreplicated_offsets.clear()

    def _add_ongoing(self, first_offset: int, producer_id: int) -> None:
        if first_offset not in self._ongoing:
            insort(self._ongoing_offsets, first_offset)
        self._ongoing[first_offset] = producer_id

    def complete_txn(self, txn: CompletedTxn) -> None:
        """Kafka's ``completeTxn``: the transaction is decided; it stays unstable until its marker
        is below the high watermark."""
        if self._ongoing.pop(txn.first_offset, None) is not None:
            del self._ongoing_offsets[bisect_left(self._ongoing_offsets, txn.first_offset)]
        else:
            _log.warning("%s: completed transaction %s was not ongoing", self.topic_partition, txn)
        if txn.first_offset not in self._unreplicated:
            insort(self._unreplicated_offsets, txn.first_offset)
        self._unreplicated[txn.first_offset] = (txn.producer_id, txn.last_offset)

    def last_stable_offset(self, txn: CompletedTxn) -> int:
        """The LSO once ``txn`` completes: the first ongoing transaction of another producer, or
        just past the marker (Kafka's ``lastStableOffset(completedTxn)``)."""
        for first in self._ongoing_offsets:
            if self._ongoing[first] != txn.producer_id:
                return first
        return txn.last_offset + 1

    def first_unstable_offset(self, high_watermark: int | None = None) -> int | None:
        """Kafka's ``firstUnstableOffset``: the smallest first offset of the transactions undecided
        or decided by a marker not yet below ``high_watermark``; None when there is none."""
        found = self._ongoing_offsets[0] if self._ongoing_offsets else None
        for first in self._unreplicated_offsets:
            if found is not None and first >= found:
                break
            if high_watermark is None or self._unreplicated[first][1] >= high_watermark:
                found = first
                break
        return found

    def first_undecided_offset(self) -> int | None:
        """The first offset of the oldest transaction without a marker (Kafka's ``firstUndecidedOffset``)."""
        return self._ongoing_offsets[0] if self._ongoing_offsets else None

    @property
    def ongoing_transactions(self) -> list[tuple[int, int]]:
        """``(first offset, producer id)`` of the transactions without a marker, by first offset."""
        return [(first, self._ongoing[first]) for first in self._ongoing_offsets]

    def _remove_unreplicated_below(self, offset: int) -> None:
        if not self._unreplicated:
            return
        gone = [first for first, (_, last) in self._unreplicated.items() if last < offset]
        for first in gone:
            del self._unreplicated[first]
        if gone:
            self._unreplicated_offsets = sorted(self._unreplicated)

    def on_high_watermark_updated(self, high_watermark: int) -> None:
        """Transactions whose marker is now below the high watermark are stable."""
        self._remove_unreplicated_below(high_watermark)

    def on_log_start_offset_incremented(self, log_start_offset: int) -> None:
        """Transactions whose marker went with the deleted records are gone (Kafka does the same)."""
        self._remove_unreplicated_below(log_start_offset)

    # ---------------------------------------------------------------- updates

    def _is_expired(self, now_ms: int, entry: ProducerStateEntry) -> bool:
        return not entry.has_ongoing_txn and now_ms - entry.last_timestamp >= self.expiration_ms

    def remove_expired(self, now_ms: int) -> int:
        """Forget producers idle for ``producer.id.expiration.ms`` (never one inside a transaction)."""
        expired = [pid for pid, e in self.producers.items() if self._is_expired(now_ms, e)]
        for pid in expired:
            del self.producers[pid]
        return len(expired)

    def prepare_append(
        self,
        batches: Iterable[PendingBatch],
        origin: AppendOrigin,
        transaction_version: int = TV_UNKNOWN,
    ) -> tuple[BatchMetadata | None, ProducerAppend]:
        """Check an append batch by batch (Kafka's ``analyzeAndValidateProducerState``).

        Returns ``(duplicate, empty)`` when a client batch was already appended, else
        ``(None, append)`` to pass to ``apply`` once the bytes are written. Raises KafkaError as
        ``producer_append`` describes; nothing changes then.
        """
        pending = ProducerAppend()
        client = origin == AppendOrigin.CLIENT
        for h, base_offset, max_ts, marker in batches:
            pid = h.producer_id
            if pid < 0:
                continue
            current = self.producers.get(pid)
            if client and current is not None:
                duplicate = current.find_duplicate(h.producer_epoch, h.base_sequence, h.last_sequence)
                if duplicate is not None:
                    return duplicate, ProducerAppend()
            info = pending.infos.get(pid)
            if info is None:
                info = pending.infos[pid] = ProducerAppendInfo(self.topic_partition, pid, current, origin)
            event: TxnStarted | CompletedTxn | None
            if h.is_control:
                if marker is None:
                    continue  # an empty control batch: its transaction was cleaned away (Kafka)
                event = info.append_marker(marker, h.producer_epoch, base_offset, max_ts, transaction_version)
            else:
                event = info.append_data(h, base_offset, max_ts)
            if event is not None:
                pending.events.append(event)
        return None, pending

    def apply(self, append: ProducerAppend, map_end_offset: int, on_aborted: OnAborted | None = None) -> None:
        """Apply what ``prepare_append`` checked, after the batches were written: new entries,
        then the transactions in batch order; ``on_aborted`` gets each aborted one with the LSO
        after it (the log writes its transaction-index entry)."""
        for pid, info in append.infos.items():
            self.producers[pid] = info.entry
        for event in append.events:
            if isinstance(event, TxnStarted):
                self._add_ongoing(event.first_offset, event.producer_id)
                continue
            if event.is_aborted and on_aborted is not None:
                on_aborted(event, self.last_stable_offset(event))
            self.complete_txn(event)
        self.map_end_offset = map_end_offset

    def replay_batch(
        self, h: BatchHeader, marker: EndTxnMarker | None = None, on_aborted: OnAborted | None = None
    ) -> None:
        """Apply an already-accepted batch (recovery, reloads): Kafka's replication rules; a batch
        that breaks them anyway is logged and skipped rather than failing the load."""
        try:
            _, pending = self.prepare_append(
                ((h, h.base_offset, h.max_timestamp, marker),), AppendOrigin.REPLICATION
            )
        except KafkaError as e:
            _log.warning("%s: producer state ignores the batch at offset %d: %s", self.topic_partition, h.base_offset, e)
            self.map_end_offset = h.next_offset
            return
        self.apply(pending, h.next_offset, on_aborted)

    def update_map_end_offset(self, offset: int) -> None:
        self.map_end_offset = offset
