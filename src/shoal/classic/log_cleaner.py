"""The classic log cleaner (Kafka's LogCleaner + LogCleanerManager): background threads that keep
compacted topics (``cleanup.policy=compact``) at the latest record per key.

Each of ``log.cleaner.threads`` threads loops: pick the filthiest compacted log that needs
cleaning, clean it (``log_compactor.clean_log``), record the new cleaner checkpoint, and sleep
``log.cleaner.backoff.ms`` when nothing needs cleaning. A log needs cleaning when (Kafka's rules):

- its dirty ratio (dirty bytes / cleanable bytes) is at least ``min.cleanable.dirty.ratio``, or
- its first dirty segment holds a record older than ``max.compaction.lag.ms``, or
- a tombstone or marker it keeps passed its delete horizon (KIP-534), so the next pass drops it.

Cleaner checkpoints live in ``cleaner-offset-checkpoint`` in each log dir (Kafka's file and
format): the offset up to which each log is clean. A log whose pass fails (a segment with more
keys than the offset map, a corrupt batch) is marked uncleanable and left alone until the broker
restarts, as Kafka does; a storage error goes through the log dir failure channel as any other.

The gauges are Kafka's: ``max-dirty-percent``, ``time-since-last-run-ms`` and
``uncleanable-partitions-count`` (LogCleanerManager), ``cleaner-recopy-percent``,
``max-clean-time-secs``, ``max-buffer-utilization-percent`` and ``max-compaction-delay-secs``
(LogCleaner).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from shoal.classic.checkpoint import read_offset_checkpoint, write_offset_checkpoint
from shoal.classic.log import PartitionLog
from shoal.classic.log_compactor import (
    CleaningAbortedError,
    CleanPass,
    LogTooDirtyError,
    Throttler,
    clean_log,
)
from shoal.observability.cleaner_metrics import CleanerGauges
from shoal.protocol.errors import KafkaError
from shoal.records.compaction import OffsetMap, offset_map_capacity

__all__ = ["CLEANER_OFFSET_CHECKPOINT", "CleanerSettings", "LogCleaner"]

CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"

_log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class CleanerSettings:
    """The broker's ``log.cleaner.*`` configs."""

    enabled: bool = True
    threads: int = 1
    dedupe_buffer_size: int = 128 * 1024 * 1024
    io_max_bytes_per_second: float = float("inf")
    backoff_ms: int = 15_000


@dataclass(slots=True)
class ClassicCleanerGauges(CleanerGauges):
    """The gauges, with uncleanable partitions counted per log dir, as Kafka labels them."""

    uncleanable: dict[str, set[TopicPartition]] = field(default_factory=dict)
    log_dirs: list[str] = field(default_factory=list)

    def uncleanable_counts(self) -> dict[str, int]:
        """Log dir -> partitions marked uncleanable there (every dir listed, 0 included)."""
        dirs = {*self.log_dirs, *self.uncleanable}
        return {d: len(self.uncleanable.get(d, ())) for d in sorted(dirs)}


class LogCleaner:
    """The cleaner threads over the logs ``logs()`` returns (see the module docstring)."""

    def __init__(
        self,
        settings: CleanerSettings,
        logs: Callable[[], list[PartitionLog]],
        *,
        log_dirs: list[str] | None = None,
        clock: Callable[[], int] | None = None,
    ) -> None:
        self.settings = settings
        self._logs = logs
        self._clock = clock or (lambda: time.time_ns() // 1_000_000)
        self._lock = threading.Lock()
        self._in_progress: set[TopicPartition] = set()
        self._checkpoints: dict[str, dict[TopicPartition, int]] = {}
        #: Logs that must be cleaned again at this time (their earliest delete horizon).
        self._horizons: dict[TopicPartition, int] = {}
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._throttler = Throttler(settings.io_max_bytes_per_second)
        self.gauges = ClassicCleanerGauges(last_run_ms=self._clock(), log_dirs=list(log_dirs or []))
        self._capacity = offset_map_capacity(settings.dedupe_buffer_size, max(1, settings.threads))

    # ------------------------------------------------------------------ checkpoints

    def checkpoint_of(self, log: PartitionLog) -> int:
        """Where the log's uncleaned part starts, from its dir's ``cleaner-offset-checkpoint``."""
        with self._lock:
            offsets = self._checkpoints.get(log.log_dir)
            if offsets is None:
                with log.dir_guard(f"reading {CLEANER_OFFSET_CHECKPOINT}"):
                    offsets = read_offset_checkpoint(Path(log.log_dir) / CLEANER_OFFSET_CHECKPOINT)
                self._checkpoints[log.log_dir] = offsets
            return offsets.get((log.topic, log.partition), 0)

    def _update_checkpoint(self, log: PartitionLog, offset: int) -> None:
        live = {(lg.topic, lg.partition) for lg in self._logs() if lg.log_dir == log.log_dir}
        with self._lock:
            offsets = self._checkpoints.setdefault(log.log_dir, {})
            offsets[(log.topic, log.partition)] = offset
            for tp in [tp for tp in offsets if tp not in live]:
                del offsets[tp]  # deleted or moved logs
            snapshot = dict(offsets)
        with log.dir_guard(f"writing {CLEANER_OFFSET_CHECKPOINT}"):
            write_offset_checkpoint(Path(log.log_dir) / CLEANER_OFFSET_CHECKPOINT, snapshot)

    # ------------------------------------------------------------------ choosing a log

    def _needs_cleaning(self, log: PartitionLog, now: int) -> tuple[float, float] | None:
        """(dirty ratio, compaction delay s) when the log needs a pass now, else None."""
        config = log.config
        if not config.cleanup_compact or log.is_closed or log.is_offline or log.is_future:
            return None
        view = log.cleaning_view(self.checkpoint_of(log), now)
        clean, dirty = view.dirty_bytes()
        if dirty == 0:
            return None
        ratio = dirty / (clean + dirty)
        delay = 0.0
        first_dirty = next(
            (s for i, s in enumerate(view.cleanable_segments) if view.segments[i + 1].base_offset > view.first_dirty_offset),
            None,
        )
        if first_dirty is not None and first_dirty.rolling_based_timestamp is not None:
            delay = max(0.0, (now - first_dirty.rolling_based_timestamp - config.max_compaction_lag_ms) / 1000)
        horizon = self._horizons.get((log.topic, log.partition))
        if ratio >= config.min_cleanable_dirty_ratio or delay > 0 or (horizon is not None and horizon <= now):
            return ratio, delay
        return None

    def _grab_filthiest(self, now: int) -> PartitionLog | None:
        """Kafka's ``grabFilthiestCompactedLog``: logs past their max compaction lag first, then
        the highest dirty ratio; marks it in progress."""
        best: tuple[float, float, PartitionLog] | None = None
        max_dirty = 0.0
        max_delay = 0.0
        for log in self._logs():
            tp = (log.topic, log.partition)
            with self._lock:
                if tp in self._in_progress or tp in self.gauges.uncleanable.get(log.log_dir, set()):
                    continue
            try:
                needed = self._needs_cleaning(log, now)
            except KafkaError:
                continue
            if needed is None:
                continue
            ratio, delay = needed
            max_dirty, max_delay = max(max_dirty, ratio), max(max_delay, delay)
            if best is None or (delay > 0, ratio) > (best[1] > 0, best[0]):
                best = (ratio, delay, log)
        self.gauges.max_dirty_percent = 100 * max_dirty
        self.gauges.max_compaction_delay_secs = max_delay
        if best is None:
            return None
        with self._lock:
            tp = (best[2].topic, best[2].partition)
            if tp in self._in_progress:
                return None
            self._in_progress.add(tp)
        return best[2]

    # ------------------------------------------------------------------ cleaning

    def clean_once(self, offset_map: OffsetMap | None = None) -> CleanPass | None:
        """Clean the filthiest log that needs it; None when none does. Synchronous (tests, tools)."""
        now = self._clock()
        log = self._grab_filthiest(now)
        if log is None:
            return None
        tp = (log.topic, log.partition)
        try:
            done = clean_log(
                log,
                self.checkpoint_of(log),
                offset_map or OffsetMap(self._capacity),
                self._throttler,
                now,
                should_stop=self._stop.is_set,
            )
        except CleaningAbortedError:
            return None  # retention, truncation, a move or closing needs the log: next round
        except LogTooDirtyError as e:
            self._mark_uncleanable(log, str(e))
            return None
        except KafkaError:  # storage: the dir failure channel already took the log offline
            return None
        except Exception as e:  # a corrupt batch, a bug: this log only, as Kafka does
            self._mark_uncleanable(log, f"{type(e).__name__}: {e}")
            return None
        finally:
            with self._lock:
                self._in_progress.discard(tp)
        if done is None:
            return None
        if not self._stop.is_set():
            try:
                self._update_checkpoint(log, done.end_offset)
            except KafkaError:
                return None
        horizon = done.stats.next_delete_horizon_ms
        if horizon >= 0:
            self._horizons[tp] = horizon
        else:
            self._horizons.pop(tp, None)
        self._record(done)
        _log.info(
            "Cleaned log %s-%d [%d, %d): %.1f MB read, %.1f MB written, %.2f s",
            log.topic, log.partition, done.first_dirty_offset, done.end_offset,
            done.stats.bytes_read / 1e6, done.stats.bytes_written / 1e6, done.elapsed_s,
        )
        return done

    def _mark_uncleanable(self, log: PartitionLog, why: str) -> None:
        _log.error("Cleaning %s-%d failed; marking it uncleanable: %s", log.topic, log.partition, why)
        with self._lock:
            self.gauges.uncleanable.setdefault(log.log_dir, set()).add((log.topic, log.partition))

    def _record(self, done: CleanPass) -> None:
        g = self.gauges
        g.bytes_read += done.stats.bytes_read
        g.pass_done(done.stats.bytes_read, done.stats.bytes_written, done.elapsed_s, done.buffer_utilization)
        g.last_run_ms = self._clock()

    # ------------------------------------------------------------------ threads

    def start(self) -> None:
        if not self.settings.enabled or self._threads:
            return
        self._stop.clear()
        for i in range(self.settings.threads):
            thread = threading.Thread(target=self._run, name=f"kafka-log-cleaner-thread-{i}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def _run(self) -> None:
        offset_map = OffsetMap(self._capacity)
        while not self._stop.is_set():
            try:
                done = self.clean_once(offset_map)
            except Exception:  # the thread must outlive any one failure
                _log.exception("Log cleaner round failed")
                done = None
            self.gauges.last_run_ms = self._clock()
            if done is None:
                self._stop.wait(self.settings.backoff_ms / 1000)

    def stop(self) -> None:
        """Stop the threads; a pass in progress stops between segment groups."""
        self._stop.set()
        threads, self._threads = self._threads, []
        for thread in threads:
            thread.join()
