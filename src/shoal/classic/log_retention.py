"""Deleting from the start of a ``PartitionLog``: retention (``retention.ms``, ``retention.bytes``),
DeleteRecords (moving the log start offset up), and producer-id expiry.

Only whole segments go, never the active one, each with its ``.index``, ``.timeindex`` and
``.txnindex``; the log start offset may sit inside the first segment. Segments leave the list under the state lock, and their files are deleted after it:
renamed ``.deleted`` at once and unlinked ``file.delete.delay.ms`` later, as Kafka does. Time and
size retention apply only when ``cleanup.policy`` includes ``delete``; segments below the log
start offset always go.
"""

from __future__ import annotations

from shoal.classic.log_state import LogState
from shoal.classic.segment import LogSegment
from shoal.protocol.errors import ErrorCode, KafkaError

__all__ = ["RetentionMixin"]


class RetentionMixin(LogState):
    """``PartitionLog``'s deletions at the log start."""

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
        self._producers.on_log_start_offset_incremented(self._log_start)

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
                    self._producers.on_log_start_offset_incremented(target)
                doomed = self._start_offset_breached()
                if doomed:
                    self._delete_segments(doomed)
                result = self._log_start
            self._delete_segment_files(doomed)
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
                if config.remote_storage_enable:  # only what is safely in remote storage goes
                    candidates = [
                        s for i, s in enumerate(candidates) if segs[i + 1].base_offset - 1 <= self.highest_offset_in_remote
                    ]
                doomed: list[LogSegment] = []
                if config.cleanup_delete and config.retention_ms >= 0:
                    for s in candidates:
                        if now - s.largest_timestamp > config.retention_ms:
                            doomed.append(s)
                        else:
                            break
                if config.cleanup_delete and config.retention_bytes >= 0:
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
            self._delete_segment_files(doomed)
            return len(doomed)

    def expire_producers(self, now_ms: int | None = None) -> int:
        """Forget producers idle for ``producer.id.expiration.ms`` (Kafka's periodic check)."""
        with self._lock:
            if self._closed or self._offline:
                return 0
            return self._producers.remove_expired(self._clock() if now_ms is None else now_ms)
