"""``LogManager``'s background work and clean shutdown: flushing, retention, the log cleaner's
threads (``log_cleaner``), the delayed deletion
of removed segment files (``file.delete.delay.ms``), producer-id expiry, finishing moves between
dirs, and the three offset checkpoints (recovery points, log start offsets, high watermarks), each
at Kafka's interval, on one daemon thread.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from shoal.classic.checkpoint import (
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    write_clean_shutdown,
    write_offset_checkpoint,
)
from shoal.classic.log import PartitionLog
from shoal.protocol.errors import KafkaError

__all__ = ["BackgroundTasksMixin", "TaskIntervals"]

# One logger for all of LogManager, whichever of its modules logs.
_log = logging.getLogger("shoal.classic.log_manager")


@dataclass(slots=True)
class TaskIntervals:
    """Kafka's broker settings for the background tasks (ms)."""

    flush_check: int = 1000
    retention_check: int = 300_000  # log.retention.check.interval.ms
    recovery_point_checkpoint: int = 60_000  # log.flush.offset.checkpoint.interval.ms
    log_start_checkpoint: int = 60_000  # log.flush.start.offset.checkpoint.interval.ms
    high_watermark_checkpoint: int = 5_000  # replica.high.watermark.checkpoint.interval.ms
    producer_expiration_check: int = 600_000  # producer.id.expiration.check.interval.ms
    next_due: dict[str, int] = field(default_factory=dict)


class BackgroundTasksMixin:
    """``LogManager``'s background work and shutdown (the state is set up in ``LogManager.__init__``)."""

    # ------------------------------------------------------------------ checkpoints

    def checkpoint_recovery_points(self) -> None:
        self._checkpoint(RECOVERY_POINT_CHECKPOINT, lambda log: log.recovery_point, futures=True)

    def checkpoint_log_start_offsets(self) -> None:
        self._checkpoint(
            LOG_START_OFFSET_CHECKPOINT,
            lambda log: (
                log.log_start_offset if log.log_start_offset > log.first_segment_base_offset else None
            ),
            futures=False,
        )

    def checkpoint_high_watermarks(self) -> None:
        self._checkpoint(REPLICATION_OFFSET_CHECKPOINT, lambda log: log.high_watermark, futures=False)

    def checkpoint(self) -> None:
        """Write all three offset checkpoints of every online dir."""
        self.checkpoint_recovery_points()
        self.checkpoint_log_start_offsets()
        self.checkpoint_high_watermarks()

    def _checkpoint(self, file: str, value: Callable[[PartitionLog], int | None], *, futures: bool) -> None:
        with self._lock:
            logs = list(self._logs.items())
            if futures:
                logs += [(tp, m.future) for tp, m in self._moves.items()]
        for log_dir in self.online_dirs():
            offsets = {}
            for tp, log in logs:
                if log.log_dir == log_dir and not log.is_offline:
                    v = value(log)
                    if v is not None:
                        offsets[tp] = v
            try:
                with self.channel.guard(log_dir, f"writing {file}"):
                    write_offset_checkpoint(Path(log_dir) / file, offsets)
            except KafkaError:
                continue

    # ------------------------------------------------------------------ background work

    def run_periodic_tasks(self, now_ms: int | None = None) -> None:
        """One round of background work; storage errors are already handled by the channel."""
        now = self._clock() if now_ms is None else now_ms
        due = self._intervals.next_due

        def is_due(name: str, interval: int) -> bool:
            if now >= due.get(name, 0):
                due[name] = now + interval
                return True
            return False

        for log in [*self.all_logs(), *self.future_logs()]:
            try:
                log.flush_if_due(now)
            except KafkaError:
                continue
        if is_due("retention", self._intervals.retention_check):
            for log in self.all_logs():
                try:
                    log.delete_old_segments(now)
                except KafkaError:
                    continue
        for log in self.all_logs():
            try:
                log.delete_pending_files(now)  # file.delete.delay.ms
            except KafkaError:
                continue
        if is_due("producers", self._intervals.producer_expiration_check):
            for log in self.all_logs():
                log.expire_producers(now)
        if self._moves:
            self.complete_moves(copy_budget_bytes=64 * 1024 * 1024)
        if is_due("recovery-point", self._intervals.recovery_point_checkpoint):
            self.checkpoint_recovery_points()
        if is_due("log-start", self._intervals.log_start_checkpoint):
            self.checkpoint_log_start_offsets()
        if is_due("high-watermark", self._intervals.high_watermark_checkpoint):
            self.checkpoint_high_watermarks()

    def start(self) -> None:
        """Run ``run_periodic_tasks`` on a daemon thread every ``flush_check_interval_ms``."""
        if self._thread is not None:
            return
        # The first round waits a full interval: nothing is due right after start-up.
        now = self._clock()
        for name, interval in (
            ("retention", self._intervals.retention_check),
            ("producers", self._intervals.producer_expiration_check),
            ("recovery-point", self._intervals.recovery_point_checkpoint),
            ("log-start", self._intervals.log_start_checkpoint),
            ("high-watermark", self._intervals.high_watermark_checkpoint),
        ):
            self._intervals.next_due.setdefault(name, now + interval)
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="log-manager", daemon=True)
        self._thread.start()
        self.cleaner.start()

    def _run(self) -> None:
        while not self._stop.wait(self._intervals.flush_check / 1000):
            try:
                self.run_periodic_tasks()
            except Exception:  # the thread must outlive any one failure
                _log.exception("Log manager background round failed")

    def stop(self) -> None:
        """Stop the background thread and the log cleaner (waits for the running round)."""
        self.cleaner.stop()
        thread, self._thread = self._thread, None
        if thread is not None:
            self._stop.set()
            thread.join()

    def shutdown(self) -> None:
        """Clean shutdown: close (fsync) every log, write checkpoints, leave the clean marker."""
        self.stop()
        failed_dirs: set[str] = set()
        for log in [*self.all_logs(), *self.future_logs()]:
            try:
                log.close()
            except KafkaError:
                failed_dirs.add(log.log_dir)
        self.checkpoint()
        for log_dir in self.online_dirs():
            if log_dir in failed_dirs:
                continue
            try:
                with self.channel.guard(log_dir, "writing the clean shutdown marker"):
                    write_clean_shutdown(log_dir, self.broker_epoch)
            except KafkaError:
                continue
