"""A classic partition log (Kafka's UnifiedLog): segments, offsets, reads, retention, flushing.

Concurrency model. The broker calls ``append``/``append_as_follower``/``read`` and the offset
lookups synchronously on its event-loop thread: page-cache writes are fast, and one thread
keeps per-partition order trivially. ``flush``, ``flush_if_due``, ``delete_old_segments``,
``delete_records``, ``truncate_to``, ``expire_producers`` and ``close`` do slow I/O and belong on
a worker thread. Two locks make that safe:

- ``_lock`` guards the in-memory state (segment list, offsets, producer state). Every operation
  holds it briefly; no fsync ever happens under it, so the event loop never waits for the disk.
- ``_io_lock`` serialises the worker operations among themselves (taken before ``_lock``), so a
  segment is never closed or deleted while another thread fsyncs it. A failed dir never makes
  anyone wait for it: ``mark_offline`` leaves closing the files to a worker still inside.

Flushing (``flush.messages`` / ``flush.ms``): an append never fsyncs. When ``flush.messages``
is reached the append returns ``flush_needed=True``; a broker that wants Kafka's "fsync before
ack" for that case runs ``flush()`` in a worker thread before answering. ``LogManager``'s
background thread calls ``flush_if_due`` to honour ``flush.ms``, the pending ``flush.messages``
requests and, as Kafka does after every roll, to fsync the rolled segment and its producer
snapshot so the recovery point can move past it.

Every OSError goes through the log-dir failure channel and surfaces as
``KafkaError(KAFKA_STORAGE_ERROR)``; the log is then offline for good.
"""

from __future__ import annotations

import os
import random
import shutil
import threading
import time
from bisect import bisect_right
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from shoal.classic.checkpoint import (
    PARTITION_METADATA,
    fsync_dir,
    kafka_uuid_str,
    read_partition_metadata,
    write_partition_metadata,
)
from shoal.classic.failure import LogDirFailureChannel, storage_error
from shoal.classic.leader_epoch import LeaderEpochCache
from shoal.classic.log_config import LogConfig
from shoal.classic.producer_state import ProducerStateManager
from shoal.classic.recovery import load_segments
from shoal.classic.segment import AppendedBatch, LogSegment
from shoal.protocol.errors import ErrorCode, KafkaError
from shoal.records.batch import NO_TIMESTAMP, BatchHeader, stamp_batch, validate_records
from shoal.records.codec import decode_batch
from shoal.records.types import TimestampType

__all__ = [
    "EARLIEST_LOCAL_TIMESTAMP",
    "EARLIEST_TIMESTAMP",
    "LATEST_TIERED_TIMESTAMP",
    "LATEST_TIMESTAMP",
    "MAX_TIMESTAMP",
    "AppendResult",
    "PartitionLog",
    "ReadResult",
    "TimestampAndOffset",
]

# ListOffsets special timestamps (ListOffsetsRequest.java).
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4
LATEST_TIERED_TIMESTAMP = -5

_MAX_FOLLOWER_BATCH = 2**31 - 1


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


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


@dataclass(frozen=True, slots=True)
class TimestampAndOffset:
    """A ListOffsets answer: the record's timestamp (-1 when not by time), offset and leader epoch."""

    timestamp: int
    offset: int
    leader_epoch: int | None


# State that moves from a future replica into the current log object when it takes over.
_ADOPTED = (
    "directory",
    "log_dir",
    "_segments",
    "_bases",
    "_next_offset",
    "_log_start",
    "_recovery_point",
    "_producers",
    "_epochs",
    "_unsynced",
    "_roll_flush_offset",
    "_dir_dirty",
    "_last_flush_ms",
    "_flush_requested",
)


class PartitionLog:
    """The log of one partition replica in one partition dir (see the module docstring)."""

    def __init__(
        self,
        directory: Path,
        topic: str,
        partition: int,
        *,
        topic_id: str | None,
        config: LogConfig,
        log_dir: str,
        channel: LogDirFailureChannel,
        clock: Callable[[], int],
        is_future: bool,
        segments: list[LogSegment],
        log_start_offset: int,
        high_watermark: int | None,
        producers: ProducerStateManager,
        epochs: LeaderEpochCache,
    ) -> None:
        self.directory = directory
        self.topic = topic
        self.partition = partition
        self.topic_id = topic_id
        self.config = config
        self.log_dir = log_dir
        self.is_future = is_future
        #: Single replica: the high watermark follows the log end. Replication turns this off
        #: and drives ``set_high_watermark``.
        self.hw_follows_leo = True
        self._channel = channel
        self._clock = clock
        self._lock = threading.Lock()
        self._io_lock = threading.Lock()
        self._segments = segments
        self._bases = [s.base_offset for s in segments]
        self._next_offset = segments[-1].next_offset
        self._log_start = log_start_offset
        self._recovery_point = self._next_offset
        self._hw = (
            self._next_offset
            if high_watermark is None
            else min(max(high_watermark, log_start_offset), self._next_offset)
        )
        self._producers = producers
        self._epochs = epochs
        self._unsynced: list[Path] = []
        self._roll_flush_offset = 0
        self._dir_dirty = False
        self._last_flush_ms = clock()
        self._flush_requested = False
        self._roll_jitter_ms = (
            random.randrange(config.segment_jitter_ms) if config.segment_jitter_ms > 0 else 0
        )
        self._closed = False
        self._offline = False

    # ------------------------------------------------------------------ construction

    @classmethod
    def create(
        cls,
        directory: Path,
        topic: str,
        partition: int,
        topic_id: object | None = None,
        config: LogConfig | None = None,
        *,
        log_dir: str | None = None,
        channel: LogDirFailureChannel | None = None,
        clock: Callable[[], int] | None = None,
        start_offset: int = 0,
        is_future: bool = False,
    ) -> PartitionLog:
        """Make the partition dir (with ``partition.metadata``) and an empty log at ``start_offset``."""
        channel = channel or LogDirFailureChannel()
        log_dir = log_dir or str(directory.parent)
        with channel.guard(log_dir, f"creating log {directory.name}"):
            directory.mkdir(exist_ok=True)
            if topic_id is not None:
                write_partition_metadata(directory / PARTITION_METADATA, kafka_uuid_str(topic_id))  # type: ignore[arg-type]
            fsync_dir(directory.parent)
        return cls.open(
            directory,
            topic,
            partition,
            config,
            topic_id=topic_id,
            log_dir=log_dir,
            channel=channel,
            clock=clock,
            log_start_offset=start_offset,
            recovery_point=start_offset,
            clean_shutdown=True,
            is_future=is_future,
        )

    @classmethod
    def open(
        cls,
        directory: Path,
        topic: str,
        partition: int,
        config: LogConfig | None = None,
        *,
        topic_id: object | None = None,
        log_dir: str | None = None,
        channel: LogDirFailureChannel | None = None,
        clock: Callable[[], int] | None = None,
        recovery_point: int = 0,
        log_start_offset: int = 0,
        high_watermark: int | None = None,
        clean_shutdown: bool = False,
        is_future: bool = False,
    ) -> PartitionLog:
        """Load an existing partition dir, recovering it from ``recovery_point`` after a crash.

        Raises KafkaError(INCONSISTENT_TOPIC_ID) when ``topic_id`` differs from the stored one.
        """
        config = config or LogConfig()
        channel = channel or LogDirFailureChannel()
        log_dir = log_dir or str(directory.parent)
        clock = clock or _wall_clock_ms
        name = f"{topic}-{partition}"
        with channel.guard(log_dir, f"loading log {directory.name}"):
            now = clock()
            stored = read_partition_metadata(directory / PARTITION_METADATA)
            wanted = kafka_uuid_str(topic_id) if topic_id is not None else None  # type: ignore[arg-type]
            if wanted is not None and stored is not None and stored != wanted:
                raise KafkaError(
                    ErrorCode.inconsistent_topic_id,
                    f"Topic id {wanted} of {name} does not match the topic id {stored} stored in {directory}",
                )
            if wanted is not None and stored is None:
                write_partition_metadata(directory / PARTITION_METADATA, wanted)
            epochs = LeaderEpochCache(directory)
            loaded = load_segments(
                directory,
                config,
                recovery_point=recovery_point,
                log_start_offset=log_start_offset,
                clean_shutdown=clean_shutdown,
                now_ms=now,
                epochs=epochs,
                name=name,
            )
            segments = loaded.segments
            try:
                leo = segments[-1].next_offset
                log_start = min(max(log_start_offset, segments[0].base_offset), leo)
                if loaded.recovered:
                    for seg in loaded.recovered:
                        seg.flush()
                    fsync_dir(directory)
                    epochs.flush()
                epochs.truncate_from_end(leo)
                if epochs.entries and epochs.entries[0][1] < log_start:
                    epochs.truncate_from_start(log_start)
                producers = ProducerStateManager(directory, name, config.producer_id_expiration_ms)
                replay_from = producers.load(log_start, leo, now)
                if replay_from < leo:
                    for h in _headers_from(segments, replay_from):
                        producers.replay_batch(h)
                    producers.update_map_end_offset(leo)
                    producers.take_snapshot(sync=True)
                producers.update_map_end_offset(leo)
            except BaseException:
                for seg in segments:
                    seg.close_handles()
                raise
        return cls(
            directory,
            topic,
            partition,
            topic_id=wanted or stored,
            config=config,
            log_dir=log_dir,
            channel=channel,
            clock=clock,
            is_future=is_future,
            segments=segments,
            log_start_offset=log_start,
            high_watermark=high_watermark,
            producers=producers,
            epochs=epochs,
        )

    # ------------------------------------------------------------------ plain state

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"

    @property
    def log_end_offset(self) -> int:
        return self._next_offset

    @property
    def log_start_offset(self) -> int:
        return self._log_start

    @property
    def high_watermark(self) -> int:
        return self._hw

    @property
    def recovery_point(self) -> int:
        return self._recovery_point

    @property
    def is_offline(self) -> bool:
        return self._offline

    @property
    def is_closed(self) -> bool:
        return self._closed

    @property
    def size(self) -> int:
        """Bytes of all segments."""
        with self._lock:
            return sum(s.size for s in self._segments)

    @property
    def num_segments(self) -> int:
        return len(self._segments)

    @property
    def first_segment_base_offset(self) -> int:
        return self._segments[0].base_offset

    @property
    def segment_base_offsets(self) -> list[int]:
        with self._lock:
            return list(self._bases)

    @property
    def latest_epoch(self) -> int | None:
        return self._epochs.latest_epoch

    @property
    def leader_epoch_entries(self) -> list[tuple[int, int]]:
        with self._lock:
            return self._epochs.entries

    @property
    def producer_state(self) -> ProducerStateManager:
        """For inspection and tests; mutate it only through the log."""
        return self._producers

    def _guard(self, what: str) -> AbstractContextManager[None]:
        return self._channel.guard(self.log_dir, f"{what} {self.name}")

    def _check_usable(self) -> None:
        if self._offline:
            raise storage_error(f"The log of {self.name} in dir {self.log_dir} is offline")
        if self._closed:
            raise storage_error(f"The log of {self.name} in dir {self.log_dir} is closed")

    def set_high_watermark(self, offset: int) -> None:
        """Move the high watermark (replication); clamped to [log start, log end]."""
        with self._lock:
            self._hw = min(max(offset, self._log_start), self._next_offset)

    def update_config(self, config: LogConfig) -> None:
        """Take new topic configs (AlterConfigs); they apply from the next append or task run."""
        self.config = config

    def epoch_for_offset(self, offset: int) -> int | None:
        with self._lock:
            return self._epochs.epoch_for_offset(offset)

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """OffsetForLeaderEpoch: ``(epoch, end offset)`` as Kafka's LeaderEpochFileCache answers."""
        with self._lock:
            return self._epochs.end_offset_for(epoch, self._next_offset)

    # ------------------------------------------------------------------ appends

    def append(
        self,
        records: memoryview | bytearray | bytes,
        batches: Sequence[tuple[int, BatchHeader]],
        timestamp_type: TimestampType | int = TimestampType.CREATE_TIME,
        leader_epoch: int = 0,
        *,
        now_ms: int | None = None,
    ) -> AppendResult:
        """Append a client's validated batches (``validate_records`` output) as the leader.

        Offsets are assigned from the log end and stamped into ``records`` in place (with the
        leader epoch, and LogAppendTime when the topic uses it); a read-only buffer is copied
        first. Idempotent duplicates write nothing and answer the original offsets.
        """
        with self._guard("appending to"), self._lock:
            self._check_usable()
            return self._append_locked(records, batches, TimestampType(timestamp_type), leader_epoch, now_ms)

    def _append_locked(
        self,
        records: memoryview | bytearray | bytes,
        batches: Sequence[tuple[int, BatchHeader]],
        timestamp_type: TimestampType,
        leader_epoch: int,
        now_ms: int | None,
    ) -> AppendResult:
        if not batches:
            raise KafkaError(ErrorCode.invalid_request, f"Append to {self.name} has no record batch")
        mv = records if isinstance(records, memoryview) else memoryview(records)
        if mv.readonly:
            mv = memoryview(bytearray(mv))
        if mv.format != "B" or mv.ndim != 1:
            mv = mv.cast("B")
        total = len(mv)
        config = self.config
        if total > config.segment_bytes:
            raise KafkaError(
                ErrorCode.record_list_too_large,
                f"Message batch size is {total} bytes in append to partition {self.name} which exceeds "
                f"the maximum configured segment size of {config.segment_bytes}.",
            )
        now = self._clock() if now_ms is None else now_ms
        log_append = timestamp_type == TimestampType.LOG_APPEND_TIME
        first_offset = self._next_offset
        next_offset = first_offset
        assigned: list[tuple[int, BatchHeader, int, int]] = []  # position, header, base offset, max ts
        for pos, h in batches:
            max_ts = now if log_append else h.max_timestamp
            assigned.append((pos, h, next_offset, max_ts))
            next_offset += h.last_offset_delta + 1
        duplicate, updates = self._producers.check_client_append((h, base, ts) for _, h, base, ts in assigned)
        if duplicate is not None:
            return AppendResult(
                duplicate.first_offset,
                duplicate.last_offset,
                duplicate.timestamp,
                self._log_start,
                is_duplicate=True,
            )
        largest_ts = max(ts for *_, ts in assigned)
        segment = self._maybe_roll(total, largest_ts, next_offset - 1, now)
        entries = []
        for pos, h, base, ts in assigned:
            stamp_batch(mv, pos, base, leader_epoch, now if log_append else None)
            entries.append(AppendedBatch(pos, h.size, base + h.last_offset_delta, ts))
        if leader_epoch >= 0 and leader_epoch != self._epochs.latest_epoch:
            self._epochs.assign(leader_epoch, first_offset)
        segment.append(mv, entries)
        self._next_offset = next_offset
        self._producers.commit(updates, next_offset)
        if self.hw_follows_leo:
            self._hw = next_offset
        flush_needed = next_offset - self._recovery_point >= config.flush_messages
        if flush_needed:
            self._flush_requested = True
        return AppendResult(
            first_offset,
            next_offset - 1,
            now if log_append else NO_TIMESTAMP,
            self._log_start,
            flush_needed=flush_needed,
        )

    def append_as_follower(self, records: memoryview | bytearray | bytes) -> int:
        """Append batches that already carry their offsets (replication, future replicas).

        Checks framing and CRC, that offsets only grow from the log end, and keeps producer state
        and leader epochs in step without sequence checks, as Kafka does for replicas. Returns the
        new log end offset.
        """
        with self._guard("appending to"), self._lock:
            self._check_usable()
            return self._append_follower_locked(records)

    def _append_follower_locked(self, records: memoryview | bytearray | bytes) -> int:
        mv = records if isinstance(records, memoryview) else memoryview(records)
        if mv.format != "B" or mv.ndim != 1:
            mv = mv.cast("B")
        if not len(mv):
            return self._next_offset
        batches = validate_records(mv, _MAX_FOLLOWER_BATCH, from_client=False)
        expected = self._next_offset
        entries = []
        for pos, h in batches:
            if h.base_offset < expected:
                raise KafkaError(
                    ErrorCode.unknown_server_error,
                    f"Unexpected offset in append to {self.name}: first offset {h.base_offset} is less "
                    f"than the next offset {expected}",
                )
            entries.append(AppendedBatch(pos, h.size, h.last_offset, h.max_timestamp))
            expected = h.next_offset
        largest_ts = max(h.max_timestamp for _, h in batches)
        segment = self._maybe_roll(len(mv), largest_ts, expected - 1, self._clock())
        for _, h in batches:
            epoch = h.partition_leader_epoch
            latest = self._epochs.latest_epoch
            if epoch >= 0 and (latest is None or epoch > latest):
                self._epochs.assign(epoch, h.base_offset)
        segment.append(mv, entries)
        for _, h in batches:
            self._producers.replay_batch(h)
        self._next_offset = expected
        if self.hw_follows_leo:
            self._hw = expected
        if expected - self._recovery_point >= self.config.flush_messages:
            self._flush_requested = True
        return expected

    def _maybe_roll(self, size: int, largest_ts: int, last_offset: int, now: int) -> LogSegment:
        """Kafka's ``shouldRoll``: size, time (``segment.ms`` minus jitter), full index, offset range."""
        segment = self._segments[-1]
        if segment.size == 0:
            return segment
        config = self.config
        if (
            segment.size > config.segment_bytes - size
            or segment.time_waited_for_roll(now, largest_ts) > config.segment_ms - self._roll_jitter_ms
            or segment.is_full_index
            or not segment.can_convert_to_relative_offset(last_offset)
        ):
            return self._roll(now, self._next_offset)
        return segment

    def _roll(self, now: int, base_offset: int) -> LogSegment:
        """Start a new active segment; snapshot producer state at its base (fsynced later)."""
        self._segments[-1].on_become_inactive()
        segment = LogSegment(
            self.directory,
            base_offset,
            index_interval_bytes=self.config.index_interval_bytes,
            max_index_size=self.config.segment_index_bytes,
            now_ms=now,
            create=True,
        )
        self._segments.append(segment)
        self._bases.append(base_offset)
        self._dir_dirty = True
        self._producers.update_map_end_offset(base_offset)
        snapshot = self._producers.take_snapshot(sync=False)
        if snapshot is not None:
            self._unsynced.append(snapshot)
        self._roll_flush_offset = max(self._roll_flush_offset, base_offset)
        return segment

    def roll(self) -> None:
        """Force a new segment (tests, tools); nothing happens when the active one is empty."""
        with self._guard("rolling"), self._lock:
            self._check_usable()
            if self._segments[-1].size:
                self._roll(self._clock(), self._next_offset)

    # ------------------------------------------------------------------ reads

    def _segment_at(self, offset: int) -> int:
        return max(bisect_right(self._bases, offset) - 1, 0)

    def read(
        self,
        offset: int,
        max_bytes: int,
        min_one_batch: bool = True,
        *,
        committed_only: bool = True,
    ) -> ReadResult:
        """Whole batches from the one holding ``offset``, up to ``max_bytes`` (at least one batch
        when ``min_one_batch``), across segments, below the high watermark (the log end when not
        ``committed_only``: followers, future replicas).

        OFFSET_OUT_OF_RANGE when ``offset`` is below the log start or above the log end, like
        Kafka; at the end (or between the high watermark and the log end) the records are empty.
        """
        with self._guard("reading from"), self._lock:
            self._check_usable()
            return self._read_locked(offset, max_bytes, min_one_batch, committed_only)

    def _read_locked(self, offset: int, max_bytes: int, min_one: bool, committed_only: bool) -> ReadResult:
        leo, hw, start = self._next_offset, self._hw, self._log_start
        if offset < start or offset > leo:
            raise KafkaError(
                ErrorCode.offset_out_of_range,
                f"Received request for offset {offset} for partition {self.name}, but we only have log "
                f"segments in the range {start} to {leo}.",
            )
        upper = hw if committed_only else leo
        if offset >= upper:
            return ReadResult(b"", hw, start)
        parts: list[bytes | memoryview] = []
        remaining = max_bytes
        i = self._segment_at(offset)
        position: int | None = None
        found = self._segments[i].translate_offset(offset)
        if found is not None:
            position = found[0]
        else:
            i += 1
            position = 0
        while i < len(self._segments):
            segment = self._segments[i]
            data = segment.read(position, remaining, upper, min_one and not parts)
            if data:
                parts.append(data)
                remaining -= len(data)
            if remaining <= 0 or position + len(data) < segment.size or segment.next_offset >= upper:
                break
            i += 1
            position = 0
        if len(parts) == 1:
            return ReadResult(parts[0], hw, start)
        return ReadResult(b"".join(parts), hw, start)

    def offset_for_timestamp(self, timestamp: int) -> TimestampAndOffset | None:
        """The first record with a timestamp >= ``timestamp`` (decoding the one batch it is in)."""
        with self._guard("searching"), self._lock:
            self._check_usable()
            for segment in self._segments:
                if segment.largest_timestamp < timestamp:
                    continue
                found = segment.find_offset_by_timestamp(timestamp, self._log_start)
                if found is not None:
                    ts, offset = found
                    return TimestampAndOffset(ts, offset, self._epochs.epoch_for_offset(offset))
            return None

    def fetch_offset_by_timestamp(self, timestamp: int) -> TimestampAndOffset | None:
        """ListOffsets for one partition, special timestamps included (-1, -2, -3, -4, -5)."""
        if timestamp >= 0:
            return self.offset_for_timestamp(timestamp)
        if timestamp == MAX_TIMESTAMP:
            return self.max_timestamp_offset()
        with self._lock:
            self._check_usable()
            if timestamp in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
                return TimestampAndOffset(
                    NO_TIMESTAMP, self._log_start, self._epochs.epoch_for_offset(self._log_start)
                )
            if timestamp == LATEST_TIMESTAMP:
                return TimestampAndOffset(NO_TIMESTAMP, self._next_offset, self._epochs.latest_epoch)
            if timestamp == LATEST_TIERED_TIMESTAMP:
                return TimestampAndOffset(NO_TIMESTAMP, -1, -1)
        return None

    def earliest_offset(self) -> int:
        return self._log_start

    def latest_offset(self) -> int:
        return self._next_offset

    def max_timestamp_offset(self) -> TimestampAndOffset:
        """KIP-734: the record with the largest timestamp (the first of equals), exactly."""
        with self._guard("searching"), self._lock:
            self._check_usable()
            best: LogSegment | None = None
            for segment in self._segments:
                if segment.size and (
                    best is None or segment.max_timestamp_so_far > best.max_timestamp_so_far
                ):
                    best = segment
            if best is None or self._next_offset <= self._log_start:
                return TimestampAndOffset(NO_TIMESTAMP, -1, -1)
            found = best.translate_offset(best.offset_of_max_timestamp)
            if found is None:
                return TimestampAndOffset(NO_TIMESTAMP, -1, -1)
            pos, h = found
            _, records = decode_batch(best.read_batch(pos, h.size), check_crc=False)
            target = best.max_timestamp_so_far
            offset = next((r.offset for r in records if r.timestamp == target), h.last_offset)
            return TimestampAndOffset(target, offset, self._epochs.epoch_for_offset(offset))

    # ------------------------------------------------------------------ flushing

    def flush(self, offset: int | None = None) -> None:
        """fsync everything below ``offset`` (default: the log end) and advance the recovery point."""
        with self._guard("flushing"), self._io():
            self._flush_io_locked(offset)

    def _flush_io_locked(self, offset: int | None) -> None:
        with self._lock:
            self._check_usable()
            target = self._next_offset if offset is None else min(offset, self._next_offset)
            start = self._recovery_point
            segments = [
                s
                for i, s in enumerate(self._segments)
                if s.base_offset < target
                and (i + 1 == len(self._segments) or self._segments[i + 1].base_offset > start)
            ]
            unsynced, self._unsynced = self._unsynced, []
            dir_dirty, self._dir_dirty = self._dir_dirty, False
        try:
            for segment in segments:
                segment.flush()
            for path in unsynced:
                try:
                    fd = os.open(path, os.O_RDONLY)
                except FileNotFoundError:
                    continue
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
            if dir_dirty:
                fsync_dir(self.directory)
        except BaseException:
            with self._lock:
                self._unsynced = unsynced + self._unsynced
                self._dir_dirty = self._dir_dirty or dir_dirty
            raise
        with self._lock:
            self._recovery_point = max(self._recovery_point, target)
            self._last_flush_ms = self._clock()
            self._flush_requested = self._next_offset - self._recovery_point >= self.config.flush_messages

    def flush_if_due(self, now_ms: int | None = None) -> bool:
        """Background flusher: honour ``flush.messages``/``flush.ms`` and fsync rolled segments."""
        if self._closed or self._offline:
            return False
        now = self._clock() if now_ms is None else now_ms
        with self._lock:
            behind = self._next_offset > self._recovery_point
            due = self._flush_requested or (behind and now - self._last_flush_ms >= self.config.flush_ms)
            rolled = self._roll_flush_offset > self._recovery_point or bool(self._unsynced)
            roll_offset = self._roll_flush_offset
        if due:
            self.flush()
            return True
        if rolled:
            self.flush(max(roll_offset, self._recovery_point))
            return True
        return False

    # ------------------------------------------------------------------ deletion

    def _delete_segments(self, doomed: list[LogSegment]) -> None:
        """Drop segments from the list (state lock held); return with files still to delete."""
        keep = [s for s in self._segments if s not in doomed]
        self._segments = keep
        self._bases = [s.base_offset for s in keep]
        if self._log_start < keep[0].base_offset:
            self._log_start = keep[0].base_offset
        if self._epochs.entries and self._epochs.entries[0][1] < self._log_start:
            self._epochs.truncate_from_start(self._log_start)
        for segment in doomed:
            self._producers.remove_snapshot(segment.base_offset)
        self._producers.delete_snapshots_before(keep[0].base_offset)

    def delete_records(self, offset: int) -> int:
        """DeleteRecords: move the log start to ``offset`` (-1: the high watermark) and delete the
        segments wholly below it; return the new log start (the low watermark). Worker thread."""
        with self._guard("deleting records of"), self._io():
            with self._lock:
                self._check_usable()
                target = self._hw if offset == -1 else offset
                if target > self._hw or target < 0:
                    raise KafkaError(
                        ErrorCode.offset_out_of_range,
                        f"Cannot increment the log start offset to {target} of partition {self.name} since it "
                        f"is larger than the high watermark {self._hw}",
                    )
                if target > self._log_start:
                    self._log_start = target
                    if self._epochs.entries and self._epochs.entries[0][1] < target:
                        self._epochs.truncate_from_start(target)
                doomed = self._start_offset_breached()
                if doomed:
                    self._delete_segments(doomed)
                result = self._log_start
            for segment in doomed:
                segment.delete()
            return result

    def _start_offset_breached(self) -> list[LogSegment]:
        segs = self._segments
        return [s for i, s in enumerate(segs[:-1]) if segs[i + 1].base_offset <= self._log_start]

    def delete_old_segments(self, now_ms: int | None = None) -> int:
        """Retention: whole segments past ``retention.ms`` or over ``retention.bytes``, and those
        below the log start. Never the active segment, never data above the high watermark.
        Returns how many segments were deleted. Worker thread."""
        with self._guard("deleting segments of"), self._io():
            with self._lock:
                if self._closed or self._offline:
                    return 0
                now = self._clock() if now_ms is None else now_ms
                config = self.config
                segs = self._segments
                candidates = [s for i, s in enumerate(segs[:-1]) if segs[i + 1].base_offset <= self._hw]
                doomed: list[LogSegment] = []
                if config.retention_ms >= 0:
                    for s in candidates:
                        if now - s.largest_timestamp > config.retention_ms:
                            doomed.append(s)
                        else:
                            break
                if config.retention_bytes >= 0:
                    diff = sum(s.size for s in segs) - config.retention_bytes - sum(s.size for s in doomed)
                    for s in candidates[len(doomed) :]:
                        if diff - s.size >= 0:
                            diff -= s.size
                            doomed.append(s)
                        else:
                            break
                for s in self._start_offset_breached():
                    if s not in doomed:
                        doomed.append(s)
                if doomed:
                    self._delete_segments(doomed)
            for segment in doomed:
                segment.delete()
            return len(doomed)

    def expire_producers(self, now_ms: int | None = None) -> int:
        """Forget producers idle for ``producer.id.expiration.ms`` (Kafka's periodic check)."""
        with self._lock:
            if self._closed or self._offline:
                return 0
            return self._producers.remove_expired(self._clock() if now_ms is None else now_ms)

    def truncate_to(self, offset: int) -> bool:
        """Cut the log back to ``offset`` (a follower diverged from its leader). Worker thread."""
        with self._guard("truncating"), self._io():
            with self._lock:
                self._check_usable()
                if offset >= self._next_offset:
                    return False
                doomed: list[LogSegment] = []
                if offset <= self._log_start:
                    self._reset_at(max(offset, 0))
                else:
                    doomed = [s for s in self._segments if s.base_offset > offset]
                    keep = [s for s in self._segments if s.base_offset <= offset]
                    self._segments = keep
                    self._bases = [s.base_offset for s in keep]
                    keep[-1].truncate_to(offset)
                    self._next_offset = keep[-1].next_offset
                self._after_truncation()
            for segment in doomed:
                segment.delete()
            return True

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Empty the log and restart it at ``offset`` (a follower far behind the leader's log start)."""
        with self._guard("truncating"), self._io(), self._lock:
            self._check_usable()
            self._reset_at(offset)
            self._after_truncation()

    def _reset_at(self, offset: int) -> None:
        """Delete every segment and start empty at ``offset`` (both locks held)."""
        for segment in self._segments:
            segment.delete()
        for snapshot in self._unsynced:
            snapshot.unlink(missing_ok=True)
        self._unsynced = []
        segment = LogSegment(
            self.directory,
            offset,
            index_interval_bytes=self.config.index_interval_bytes,
            max_index_size=self.config.segment_index_bytes,
            now_ms=self._clock(),
            create=True,
        )
        self._segments = [segment]
        self._bases = [offset]
        self._next_offset = offset
        self._log_start = offset
        self._producers.truncate_fully_and_start_at(offset)
        self._epochs.clear_and_flush()
        self._dir_dirty = True

    def _after_truncation(self) -> None:
        leo = self._next_offset
        self._hw = min(self._hw, leo)
        self._recovery_point = min(self._recovery_point, leo)
        self._roll_flush_offset = min(self._roll_flush_offset, leo)
        self._epochs.truncate_from_end(leo)
        replay_from = self._producers.load(self._log_start, leo, self._clock())
        if replay_from < leo:
            for h in _headers_from(self._segments, replay_from):
                self._producers.replay_batch(h)
        self._producers.update_map_end_offset(leo)

    # ------------------------------------------------------------------ lifecycle

    def close(self) -> None:
        """Clean close: producer snapshot at the log end, final time-index entry, fsync, close files."""
        with self._guard("closing"), self._io():
            with self._lock:
                if self._closed or self._offline:
                    return
                self._segments[-1].on_become_inactive()
                self._producers.update_map_end_offset(self._next_offset)
                snapshot = self._producers.take_snapshot(sync=False)
                if snapshot is not None:
                    self._unsynced.append(snapshot)
            self._flush_io_locked(None)
            with self._lock:
                self._closed = True
                for segment in self._segments:
                    segment.close_handles()

    @contextmanager
    def _io(self) -> Iterator[None]:
        """Hold the maintenance lock; close the files on the way out if the dir failed meanwhile."""
        with self._io_lock:
            try:
                yield
            finally:
                if self._offline:
                    self._close_segment_handles()

    def _close_segment_handles(self) -> None:
        with self._lock:
            for segment in self._segments:
                segment.close_handles()

    def mark_offline(self) -> None:
        """Its log dir failed: refuse every operation from now on and close the files unwritten.

        Never waits for the disk: when a worker holds the maintenance lock (say, stuck in an
        fsync), that worker closes the files when it lets go.
        """
        with self._lock:
            self._offline = True
        if self._io_lock.acquire(blocking=False):
            try:
                self._close_segment_handles()
            finally:
                self._io_lock.release()

    def close_handles(self) -> None:
        """Close the files without any write (the log is about to be deleted). Worker thread."""
        with self._io_lock, self._lock:
            self._closed = True
            for segment in self._segments:
                segment.close_handles()

    def rename_dir(self, directory: Path) -> None:
        """Move the partition dir (deletion, future-replica promotion) and follow it."""
        with self._guard("renaming"), self._io(), self._lock:
            self._rename_locked(directory)

    def _rename_locked(self, directory: Path) -> None:
        os.rename(self.directory, directory)
        fsync_dir(directory.parent)
        self._follow_dir(directory)

    def _follow_dir(self, directory: Path) -> None:
        self.directory = directory
        for segment in self._segments:
            segment.update_dir(directory)
        self._producers.directory = directory
        self._epochs.update_dir(directory)
        self._unsynced = [directory / p.name for p in self._unsynced]

    def delete_dir(self) -> None:
        """Remove the (closed) partition dir and everything in it."""
        with self._guard("deleting"):
            shutil.rmtree(self.directory)
            fsync_dir(self.directory.parent)

    def _adopt(self, future: PartitionLog) -> tuple[list[LogSegment], Path]:
        """Take over a caught-up future replica's state (both logs' locks held by the caller).

        Returns the old segments and dir, which the caller deletes. Callers keep using this
        object; the future object is left closed and empty.
        """
        old_segments, old_dir = self._segments, self.directory
        for attr in _ADOPTED:
            setattr(self, attr, getattr(future, attr))
        self.is_future = False
        future._segments = []
        future._closed = True
        return old_segments, old_dir


def _headers_from(segments: list[LogSegment], offset: int) -> Iterator[BatchHeader]:
    """Headers of every batch holding offsets >= ``offset`` (producer-state replay)."""
    for segment in segments:
        if segment.next_offset <= offset:
            continue
        position = 0
        if segment.base_offset < offset:
            found = segment.translate_offset(offset)
            if found is None:
                continue
            position = found[0]
        for _, h in segment.batches(position):
            yield h
