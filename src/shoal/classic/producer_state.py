"""Idempotent-producer state of one partition (Kafka's ProducerStateManager) and its snapshots.

Per producer id the log keeps the epoch and the metadata of its last 5 batches (sequence range,
offsets, timestamp). A client append is checked the way Kafka's ``ProducerAppendInfo`` does:

- a batch whose epoch and first/last sequence match a cached batch is a duplicate: the append
  answers the original offsets and writes nothing;
- an epoch below the last seen one: INVALID_PRODUCER_EPOCH;
- a new epoch must start at sequence 0, the same epoch must continue at last sequence + 1
  (wrapping from 2**31-1 to 0): otherwise OUT_OF_ORDER_SEQUENCE_NUMBER. A producer the partition
  does not know yet (or no longer: expired, deleted) may start at any sequence.

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
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from crc32c import crc32c

from shoal.classic.checkpoint import atomic_write
from shoal.classic.segment import SNAPSHOT_SUFFIX, file_name
from shoal.protocol.errors import ErrorCode, KafkaError
from shoal.records.batch import NO_PRODUCER_EPOCH, NO_SEQUENCE, BatchHeader

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

NUM_BATCHES_TO_RETAIN = 5
_SNAPSHOT_VERSION = 1
_HEADER = struct.Struct(">hI")  # version, crc
_COUNT = struct.Struct(">i")
_ENTRY = struct.Struct(">qhiqiqiq")
_ENTRIES_OFFSET = _HEADER.size
_INT32_MAX = 2**31 - 1


class CorruptSnapshotError(ValueError):
    """A snapshot that fails its version, CRC or layout checks: it is deleted and an older one used."""


def _decrement_sequence(sequence: int, decrement: int) -> int:
    if sequence < decrement:
        return _INT32_MAX - (decrement - sequence) + 1
    return sequence - decrement


def _in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == _INT32_MAX)


@dataclass(slots=True)
class BatchMetadata:
    """One appended batch of a producer: what a duplicate retry is answered with."""

    last_seq: int
    last_offset: int
    offset_delta: int
    timestamp: int

    @property
    def first_seq(self) -> int:
        return _decrement_sequence(self.last_seq, self.offset_delta)

    @property
    def first_offset(self) -> int:
        return self.last_offset - self.offset_delta


@dataclass(slots=True)
class ProducerStateEntry:
    """Kafka's ProducerStateEntry: epoch plus the last batches of one producer id."""

    producer_id: int
    producer_epoch: int = NO_PRODUCER_EPOCH
    coordinator_epoch: int = -1
    last_timestamp: int = -1
    current_txn_first_offset: int = -1
    batches: deque[BatchMetadata] = field(default_factory=deque)

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    @property
    def last_data_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1

    @property
    def last_offset_delta(self) -> int:
        return self.batches[-1].offset_delta if self.batches else 0

    def copy(self) -> ProducerStateEntry:
        return ProducerStateEntry(
            self.producer_id,
            self.producer_epoch,
            self.coordinator_epoch,
            self.last_timestamp,
            self.current_txn_first_offset,
            deque(self.batches),
        )

    def find_duplicate(self, epoch: int, first_seq: int, last_seq: int) -> BatchMetadata | None:
        if epoch != self.producer_epoch:
            return None
        for b in self.batches:
            if b.first_seq == first_seq and b.last_seq == last_seq:
                return b
        return None

    def add_batch(
        self, epoch: int, last_seq: int, last_offset: int, offset_delta: int, timestamp: int
    ) -> None:
        if epoch != self.producer_epoch:
            self.batches.clear()
            self.producer_epoch = epoch
        self.batches.append(BatchMetadata(last_seq, last_offset, offset_delta, timestamp))
        while len(self.batches) > NUM_BATCHES_TO_RETAIN:
            self.batches.popleft()
        self.last_timestamp = timestamp


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
    """Producer ids -> state for one partition, plus the snapshot files in the partition dir.

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

    def load(self, log_start_offset: int, log_end_offset: int, now_ms: int) -> int:
        """Kafka's ``truncateAndReload``: drop snapshots out of range, load the latest good one.

        Returns the offset from which the log must be replayed to reach ``log_end_offset``.
        """
        for snap in list(self._snapshots):
            if snap > log_end_offset or snap <= log_start_offset:
                self._remove_snapshot(snap)
        self.producers.clear()
        while self._snapshots:
            snap = self._snapshots[-1]
            try:
                entries = read_snapshot(self.snapshot_path(snap))
            except (CorruptSnapshotError, FileNotFoundError) as e:
                _log.warning("Failed to load producer snapshot %s of %s: %s", snap, self.topic_partition, e)
                self._remove_snapshot(snap)
                continue
            for entry in entries:
                if not self._is_expired(now_ms, entry):
                    self.producers[entry.producer_id] = entry
            self.map_end_offset = self.last_snap_offset = snap
            return snap
        self.map_end_offset = self.last_snap_offset = log_start_offset
        return log_start_offset

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
        self.producers = {e.producer_id: e for e in entries}
        if offset not in self._snapshots:
            self._snapshots.append(offset)
            self._snapshots.sort()
        self.map_end_offset = self.last_snap_offset = offset
        return len(entries)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Forget everything (the log was emptied) and drop all snapshots."""
        self.producers.clear()
        for snap in list(self._snapshots):
            self._remove_snapshot(snap)
        self.last_snap_offset = 0
        self.map_end_offset = offset

    # ---------------------------------------------------------------- updates

    def _is_expired(self, now_ms: int, entry: ProducerStateEntry) -> bool:
        return entry.current_txn_first_offset < 0 and now_ms - entry.last_timestamp >= self.expiration_ms

    def remove_expired(self, now_ms: int) -> int:
        """Forget producers idle for ``producer.id.expiration.ms``; return how many."""
        expired = [pid for pid, e in self.producers.items() if self._is_expired(now_ms, e)]
        for pid in expired:
            del self.producers[pid]
        return len(expired)

    def check_client_append(
        self, batches: Iterable[tuple[BatchHeader, int, int]]
    ) -> tuple[BatchMetadata | None, dict[int, ProducerStateEntry]]:
        """Validate a client append: ``(header, assigned base offset, effective max timestamp)`` per batch.

        Returns ``(duplicate, {})`` when a batch was already appended, else ``(None, updates)``
        to pass to ``commit`` once the bytes are written. Raises INVALID_PRODUCER_EPOCH or
        OUT_OF_ORDER_SEQUENCE_NUMBER as Kafka does; nothing changes then.
        """
        pending: dict[int, ProducerStateEntry] = {}
        for h, base_offset, max_ts in batches:
            pid = h.producer_id
            if pid < 0:
                continue
            current = self.producers.get(pid)
            if current is not None:
                duplicate = current.find_duplicate(h.producer_epoch, h.base_sequence, h.last_sequence)
                if duplicate is not None:
                    return duplicate, {}
            entry = pending.get(pid)
            if entry is None:
                entry = current.copy() if current is not None else ProducerStateEntry(pid)
            committed_epoch = current.producer_epoch if current is not None else NO_PRODUCER_EPOCH
            self._check(entry, committed_epoch, h, base_offset)
            if h.is_control:
                entry.producer_epoch = h.producer_epoch
            else:
                entry.add_batch(
                    h.producer_epoch,
                    h.last_sequence,
                    base_offset + h.last_offset_delta,
                    h.last_offset_delta,
                    max_ts,
                )
            pending[pid] = entry
        return None, pending

    def _check(self, entry: ProducerStateEntry, committed_epoch: int, h: BatchHeader, offset: int) -> None:
        pid, epoch, first_seq = h.producer_id, h.producer_epoch, h.base_sequence
        if epoch < entry.producer_epoch:
            raise KafkaError(
                ErrorCode.invalid_producer_epoch,
                f"Epoch of producer {pid} at offset {offset} in {self.topic_partition} is {epoch}, "
                f"which is smaller than the last seen epoch {entry.producer_epoch}",
            )
        if h.is_control:
            return
        if epoch != entry.producer_epoch:
            if first_seq != 0 and entry.producer_epoch != NO_PRODUCER_EPOCH:
                raise KafkaError(
                    ErrorCode.out_of_order_sequence_number,
                    f"Invalid sequence number for new epoch of producer {pid} at offset {offset} in "
                    f"partition {self.topic_partition}: {epoch} (request epoch), {first_seq} (seq. number), "
                    f"{entry.producer_epoch} (current producer epoch)",
                )
            return
        if committed_epoch == NO_PRODUCER_EPOCH:
            return
        if not _in_sequence(entry.last_seq, first_seq):
            raise KafkaError(
                ErrorCode.out_of_order_sequence_number,
                f"Out of order sequence number for producer {pid} at offset {offset} in partition "
                f"{self.topic_partition}: {first_seq} (incoming seq. number), {entry.last_seq} "
                "(current end sequence number)",
            )

    def commit(self, updates: dict[int, ProducerStateEntry], map_end_offset: int) -> None:
        """Apply what ``check_client_append`` prepared, after the batches were written."""
        self.producers.update(updates)
        self.map_end_offset = map_end_offset

    def replay_batch(self, h: BatchHeader) -> None:
        """Apply an already-accepted batch without checks (recovery, follower and future replicas)."""
        if h.producer_id >= 0:
            entry = self.producers.get(h.producer_id)
            if entry is None:
                entry = self.producers[h.producer_id] = ProducerStateEntry(h.producer_id)
            if h.is_control:
                entry.producer_epoch = h.producer_epoch
                entry.current_txn_first_offset = -1
                entry.last_timestamp = h.max_timestamp
            else:
                entry.add_batch(
                    h.producer_epoch, h.last_sequence, h.last_offset, h.last_offset_delta, h.max_timestamp
                )
                if h.is_transactional and entry.current_txn_first_offset < 0:
                    entry.current_txn_first_offset = h.base_offset
        self.map_end_offset = h.next_offset

    def update_map_end_offset(self, offset: int) -> None:
        self.map_end_offset = offset
