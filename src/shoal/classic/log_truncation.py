"""Truncating a ``PartitionLog`` at its end (a follower diverged from its leader), or emptying it
to restart at an offset; leader epochs, producer state (with the ongoing transactions) and the
segments' aborted-transaction indexes are cut back to match.
"""

from __future__ import annotations

from shoal.classic.log_state import LogState
from shoal.classic.producer_replay import replay_producer_state
from shoal.classic.segment import LogSegment

__all__ = ["TruncationMixin"]


class TruncationMixin(LogState):
    """``PartitionLog``'s truncations."""

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
            self._delete_segment_files(doomed)
            return True

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Empty the log and restart it at ``offset`` (a follower far behind the leader's log start)."""
        with self._guard("truncating"), self._io(), self._lock:
            self._check_usable()
            self._reset_at(offset)
            self._after_truncation()

    def start_at_with_tiered_state(
        self, offset: int, epochs: list[tuple[int, int]], producer_snapshot: bytes | None
    ) -> int:
        """Kafka's ``buildRemoteLogAuxState``: a follower behind its leader's *local* log start of a
        tiered partition empties its log, restarts it at ``offset`` (the leader's local log start)
        and takes the state the remote segments below it hold: the leader epochs ((epoch, start
        offset), the entry in force at ``offset`` moved up to it) and the producer snapshot taken at
        ``offset``, so it can answer OffsetsForLeaderEpoch and deduplicate producers as the leader
        does once it leads. Returns how many producers the snapshot held (-1: none given)."""
        with self._guard("truncating"), self._io(), self._lock:
            self._check_usable()
            self._reset_at(offset)
            for epoch, start in sorted(epochs, key=lambda e: (e[1], e[0])):
                self._epochs.assign(epoch, start, write=False)
            self._epochs.truncate_from_start(offset)
            self._epochs.flush()
            producers = -1 if producer_snapshot is None else self._producers.restore(offset, producer_snapshot)
            # The restored state is the state at the (empty) log's end: reloading would drop the
            # snapshot, which sits at the log start, with its producers and ongoing transactions.
            self._after_truncation(reload_producers=producer_snapshot is None)
            return producers

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

    def _after_truncation(self, *, reload_producers: bool = True) -> None:
        leo = self._next_offset
        self._recovery_point = min(self._recovery_point, leo)
        self._roll_flush_offset = min(self._roll_flush_offset, leo)
        self._epochs.truncate_from_end(leo)
        if reload_producers:
            replay_from = self._producers.load(self._log_start, leo, self._clock())
            if replay_from < leo:
                replay_producer_state(self._producers, self._segments, replay_from)
        self._producers.update_map_end_offset(leo)
        self._set_hw_locked(min(max(self._hw, self._log_start), leo))  # Kafka: never outside [start, end]
