"""A classic partition log (Kafka's UnifiedLog): segments, offsets, reads, retention, flushing.

Concurrency model. The broker calls ``append``/``append_as_follower``/``read`` and the offset
lookups synchronously on its event-loop thread: page-cache writes are fast, and one thread
keeps per-partition order trivially. (A diskless cache log is the exception: its one writer, the
cache filler, appends megabytes at a time from a worker thread, and ``_lock`` keeps the loop's
reads of it consistent.) ``flush``, ``flush_if_due``, ``delete_old_segments``,
``delete_records``, ``truncate_to``, ``expire_producers`` and ``close`` do slow I/O and belong on
a worker thread. Two locks make that safe:

- ``_lock`` guards the in-memory state (segment list, offsets, producer state). Every operation
  holds it briefly; no fsync ever happens under it, so the event loop never waits for the disk.
- ``_io_lock`` serialises the worker operations among themselves (taken before ``_lock``), so a
  segment is never closed or deleted while another thread fsyncs it. A failed dir never makes
  anyone wait for it: ``mark_offline`` leaves closing the files to a worker still inside.
- ``_clean_lock`` (taken before ``_io_lock``) is held by a log cleaner pass; operations that close
  or delete segments ask the pass to abort and take it (``log_cleaning``).

Flushing (``flush.messages`` / ``flush.ms``): an append never fsyncs. When ``flush.messages``
is reached the append returns ``flush_needed=True``; a broker that wants Kafka's "fsync before
ack" for that case runs ``flush()`` in a worker thread before answering. ``LogManager``'s
background thread calls ``flush_if_due`` to honour ``flush.ms``, the pending ``flush.messages``
requests and, as Kafka does after every roll, to fsync the rolled segment and its producer
snapshot so the recovery point can move past it.

Every OSError goes through the log-dir failure channel and surfaces as
``KafkaError(KAFKA_STORAGE_ERROR)``; the log is then offline for good.

Where each part lives: the fields, plain accessors and guards are ``LogState``
(``log_state``); each concern is a mixin of its own module -- ``log_append`` (leader and
follower appends), ``log_roll`` (new segments), ``log_read`` (Fetch reads),
``log_list_offsets`` (offsets by timestamp), ``log_flush`` (fsync and the recovery point),
``log_retention`` (retention, DeleteRecords, producer-id expiry), ``log_truncation``
(follower truncation) and ``log_lifecycle`` (close, offline, dir renames, taking over a future
replica), ``log_cleaning`` (the log cleaner's view and segment swaps) and ``log_txn`` (last
stable offset, aborted transactions, READ_COMMITTED reads). The
results are in ``log_results``. This module builds the log: ``create`` and
``open`` (loading and recovery, through ``recovery.load_segments``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from shoal.classic.checkpoint import (
    PARTITION_METADATA,
    fsync_dir,
    kafka_uuid_str,
    read_partition_metadata,
    write_partition_metadata,
)
from shoal.classic.failure import LogDirFailureChannel
from shoal.classic.leader_epoch import LeaderEpochCache
from shoal.classic.log_append import AppendMixin
from shoal.classic.log_cleaning import CleaningMixin
from shoal.classic.log_config import LogConfig
from shoal.classic.log_flush import FlushMixin
from shoal.classic.log_lifecycle import LifecycleMixin
from shoal.classic.log_list_offsets import ListOffsetsMixin
from shoal.classic.log_read import ReadMixin
from shoal.classic.log_retention import RetentionMixin
from shoal.classic.log_roll import RollMixin
from shoal.classic.log_rolled import RolledSegmentsMixin
from shoal.classic.log_truncation import TruncationMixin
from shoal.classic.log_txn import TxnMixin
from shoal.classic.producer_replay import replay_producer_state
from shoal.classic.producer_state import ProducerStateManager
from shoal.classic.recovery import load_segments
from shoal.protocol.errors import ErrorCode, KafkaError

__all__ = ["PartitionLog"]


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class PartitionLog(
    AppendMixin,
    RollMixin,
    TxnMixin,
    ReadMixin,
    ListOffsetsMixin,
    LifecycleMixin,
    FlushMixin,
    RetentionMixin,
    TruncationMixin,
    RolledSegmentsMixin,
    CleaningMixin,
):
    """The log of one partition replica in one partition dir (see the module docstring)."""

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
                live = {id(s) for s in segments}
                recovered = [s for s in loaded.recovered if id(s) in live]
                producers = ProducerStateManager(directory, name, config.producer_id_expiration_ms)
                # A recovered segment's .txnindex is rebuilt by the replay, which must then start
                # at or below it (Kafka's recoverSegment rebuilds the producer state up to it).
                first_recovered = min((s.base_offset for s in recovered), default=None)
                replay_from = producers.load(log_start, leo, now, upto=first_recovered)
                if replay_from < leo:
                    replay_producer_state(producers, segments, replay_from, rebuild=recovered)
                    producers.update_map_end_offset(leo)
                    producers.take_snapshot(sync=True)
                producers.update_map_end_offset(leo)
                if recovered:
                    for seg in recovered:
                        seg.flush()
                    fsync_dir(directory)
                    epochs.flush()
                epochs.truncate_from_end(leo)
                if epochs.entries and epochs.entries[0][1] < log_start:
                    epochs.truncate_from_start(log_start)
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
