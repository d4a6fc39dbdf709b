"""A ``PartitionLog`` beyond appends and reads: clean close, going offline when its dir fails,
renaming and deleting its dir, and taking over a caught-up future replica (``future_replica``).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from shoal.classic.checkpoint import fsync_dir
from shoal.classic.log_flush import FlushMixin
from shoal.classic.segment import LogSegment

if TYPE_CHECKING:
    from shoal.classic.log import PartitionLog

__all__ = ["LifecycleMixin"]

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


class LifecycleMixin(FlushMixin):
    """``PartitionLog``'s close, offline, dir and takeover operations."""

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

    def mark_offline(self) -> None:
        """Its log dir failed: refuse every operation from now on and close the files unwritten.

        Never waits for the disk: when a worker holds the maintenance lock (say, stuck in an
        fsync) or a log cleaner pass the cleaning lock, that one closes the files when it lets go.
        """
        with self._lock:
            self._offline = True
        if self._clean_lock.acquire(blocking=False):
            try:
                if self._io_lock.acquire(blocking=False):
                    try:
                        self._close_segment_handles()
                    finally:
                        self._io_lock.release()
            finally:
                self._clean_lock.release()

    def close_handles(self) -> None:
        """Close the files without any write (the log is about to be deleted). Worker thread."""
        self._cleaning_abort.set()
        with self._clean_lock, self._io_lock, self._lock:
            self._cleaning_abort.clear()
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
        self._pending_deletes = [
            (when, [directory / p.name for p in paths]) for when, paths in self._pending_deletes
        ]

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
