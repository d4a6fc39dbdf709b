"""Rolling a ``PartitionLog`` to a new active segment (Kafka's ``shouldRoll`` and ``roll``).

An append rolls first when the active segment is too full for it (``segment.bytes``), too old
(``segment.ms`` minus a random ``segment.jitter.ms``), has a full index, or cannot hold the
batch's offsets relative to its base; an empty active segment never rolls. A roll snapshots
producer state at the new base offset without fsync: ``flush_if_due`` (``log_flush``) fsyncs
the rolled segment and the snapshot later.
"""

from __future__ import annotations

from shoal.classic.log_state import LogState, random_segment_jitter
from shoal.classic.segment import LogSegment

__all__ = ["RollMixin"]


class RollMixin(LogState):
    """``PartitionLog``'s segment rolls."""

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
        self._roll_jitter_ms = random_segment_jitter(self.config)  # Kafka draws it for each new segment
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
