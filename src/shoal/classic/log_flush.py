"""Flushing a ``PartitionLog``: fsync its segments, producer snapshots and dir, and move the
recovery point; ``flush_if_due`` is the background flusher (see ``shoal.classic.log``).
"""

from __future__ import annotations

import os

from shoal.classic.checkpoint import fsync_dir
from shoal.classic.log_state import LogState

__all__ = ["FlushMixin"]


class FlushMixin(LogState):
    """``PartitionLog``'s flushing."""

    def flush(self, offset: int | None = None) -> None:
        """fsync everything below ``offset`` (default: the log end) and advance the recovery point."""
        with self._guard("flushing"), self._io(keeps_segments=True):
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
