"""Moving a partition to another log dir (AlterReplicaLogDirs, KIP-113) through a future replica.

The future replica is a second ``PartitionLog`` in the destination dir, named
``<topic>-<partition>.<32 hex>-future`` as Kafka names it. It copies the current log batch by
batch from the current log start (``append_as_follower`` keeps offsets, producer state and
leader epochs), then keeps following appends. When it is nearly caught up, ``try_complete`` takes
both logs' locks (appends wait for that moment only), copies the last few batches, and swaps:

1. the future dir is renamed to ``<topic>-<partition>`` in the destination dir (fsynced);
2. the current dir is renamed to ``<topic>-<partition>.<32 hex>-delete`` (fsynced);
3. the current ``PartitionLog`` object takes over the future's state, so every holder of it
   keeps working, now on the destination dir; the old files are deleted after the locks go.

No acknowledged record can be lost: every append finished before the locks were taken was
copied, and every append after them lands in the new dir. A crash between steps 1 and 2 leaves
two complete, identical copies; ``LogManager`` keeps one at the next start.
"""

from __future__ import annotations

import logging
import os
import shutil
import uuid
from pathlib import Path

from shoal.classic.checkpoint import fsync_dir
from shoal.classic.failure import LogDirFailureChannel
from shoal.classic.log import PartitionLog
from shoal.protocol.errors import ErrorCode, KafkaError
from shoal.records.batch import read_header

__all__ = ["FutureReplicaMove", "delete_dir_name", "future_dir_name"]

_log = logging.getLogger(__name__)

_COPY_CHUNK = 4 * 1024 * 1024
_MAX_LOCKED_COPY = 8 * 1024 * 1024
_MAX_PRE_LOCK_COPY = 64 * 1024 * 1024


def future_dir_name(topic: str, partition: int) -> str:
    """Kafka's name of a future replica dir: ``<topic>-<partition>.<uuid hex>-future``."""
    return f"{topic}-{partition}.{uuid.uuid4().hex}-future"


def delete_dir_name(topic: str, partition: int) -> str:
    """Kafka's name of a partition dir being deleted: ``<topic>-<partition>.<uuid hex>-delete``."""
    return f"{topic}-{partition}.{uuid.uuid4().hex}-delete"


def first_batch_offset(log: PartitionLog) -> int:
    """Base offset of the batch holding the log start offset (where a copy must begin)."""
    start = log.log_start_offset
    if start >= log.log_end_offset:
        return log.log_end_offset
    data = log.read(start, 1, True, committed_only=False).records
    return read_header(data).base_offset if data else start


class FutureReplicaMove:
    """One partition's move from ``current`` (its dir) to ``future`` (in ``future.log_dir``)."""

    def __init__(self, current: PartitionLog, future: PartitionLog, channel: LogDirFailureChannel) -> None:
        self.current = current
        self.future = future
        self.channel = channel
        self.completed = False

    @classmethod
    def start(
        cls, current: PartitionLog, dest_log_dir: str, channel: LogDirFailureChannel
    ) -> FutureReplicaMove:
        """Create the empty future replica in ``dest_log_dir``."""
        directory = Path(dest_log_dir) / future_dir_name(current.topic, current.partition)
        future = PartitionLog.create(
            directory,
            current.topic,
            current.partition,
            current.topic_id,
            current.config,
            log_dir=dest_log_dir,
            channel=channel,
            clock=current._clock,
            start_offset=first_batch_offset(current),
            is_future=True,
        )
        return cls(current, future, channel)

    @property
    def dest_log_dir(self) -> str:
        return self.future.log_dir

    @property
    def lag(self) -> int:
        """Offsets the future replica is behind (DescribeLogDirs' OffsetLag for it)."""
        return max(0, self.current.log_end_offset - self.future.log_end_offset)

    def copy_step(self, max_bytes: int = _COPY_CHUNK) -> int:
        """Copy up to ``max_bytes`` of batches the future replica lacks; return the bytes copied."""
        leo = self.future.log_end_offset
        if leo >= self.current.log_end_offset:
            return 0
        try:
            data = self.current.read(leo, max_bytes, True, committed_only=False).records
        except KafkaError as e:
            if e.code != ErrorCode.offset_out_of_range:
                raise
            # Retention or DeleteRecords moved the current log start past the copy: restart there.
            self.future.truncate_fully_and_start_at(first_batch_offset(self.current))
            return 0
        if data:
            self.future.append_as_follower(data)
        return len(data)

    def catch_up(self, max_bytes: int | None = None) -> int:
        """Copy until caught up with the log end seen now (or ``max_bytes``); return bytes copied."""
        copied = 0
        while max_bytes is None or copied < max_bytes:
            step = self.copy_step(_COPY_CHUNK if max_bytes is None else min(_COPY_CHUNK, max_bytes - copied))
            if not step:
                break
            copied += step
        return copied

    def try_complete(self) -> bool:
        """Swap the future replica in if it can catch up under the locks; False: copy more first."""
        if self.completed:
            return True
        current, future = self.current, self.future
        self.catch_up(_MAX_PRE_LOCK_COPY)  # bounded: appends may outpace the copy for a while
        future.flush()
        errors: list[tuple[str, OSError]] = []
        # Lock order: current before future, maintenance before state (see PartitionLog).
        with current._io(), future._io(), current._lock, future._lock:
            swapped = self._swap_locked(errors)
        for log_dir, error in errors:
            self.channel.maybe_add_offline_dir(log_dir, f"Error while moving {current.name}: {error}", error)
        if swapped is None:
            return False
        old_segments, old_dir, source_dir = swapped
        for segment in old_segments:
            segment.close_handles()
        if not errors:
            try:
                shutil.rmtree(old_dir)
                fsync_dir(old_dir.parent)
            except OSError as e:
                self.channel.maybe_add_offline_dir(source_dir, f"Error while deleting {old_dir}: {e}", e)
        current.flush()
        _log.info("Moved %s to log dir %s", current.name, current.log_dir)
        return True

    def _swap_locked(self, errors: list[tuple[str, OSError]]) -> tuple[list, Path, str] | None:
        """The swap itself, both logs' locks held; I/O errors are collected, reported by the caller."""
        current, future = self.current, self.future
        current._check_usable()
        future._check_usable()
        copied = 0
        while future._next_offset < current._next_offset:
            if copied > _MAX_LOCKED_COPY:
                return None
            try:
                data = current._read_locked(future._next_offset, _COPY_CHUNK, True, False).records
            except OSError as e:
                errors.append((current.log_dir, e))
                return None
            if not data:
                return None
            try:
                future._append_follower_locked(data)
            except OSError as e:
                errors.append((future.log_dir, e))
                return None
            copied += len(data)
        final = Path(future.log_dir) / f"{current.topic}-{current.partition}"
        try:
            os.rename(future.directory, final)
            fsync_dir(final.parent)
        except OSError as e:
            errors.append((future.log_dir, e))
            return None
        future._follow_dir(final)
        future._log_start = max(future._log_start, current._log_start)
        hw = current._hw
        source_dir = current.log_dir
        doomed = current.directory.with_name(delete_dir_name(current.topic, current.partition))
        try:
            os.rename(current.directory, doomed)
            fsync_dir(doomed.parent)
        except OSError as e:
            # The copy is complete and in place: take it, and let the source dir go offline.
            errors.append((source_dir, e))
            doomed = current.directory
        old_segments, _ = current._adopt(future)
        current._hw = min(max(hw, current._log_start), current._next_offset)
        self.completed = True
        return old_segments, doomed, source_dir

    def abort(self) -> None:
        """Cancel the move: the future replica's files go, the current log is untouched."""
        future = self.future
        future.close_handles()
        try:
            shutil.rmtree(future.directory)
        except FileNotFoundError:
            return
        except OSError as e:
            self.channel.maybe_add_offline_dir(
                future.log_dir, f"Error while deleting {future.directory}: {e}", e
            )
