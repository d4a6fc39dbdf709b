"""Reading a ``PartitionLog`` (Fetch): whole batches from an offset, up to a byte budget.

A read finds the segment by base offset, the batch through the segment's offset index, and goes
on across segments until ``max_bytes`` or the high watermark (the log end for followers and
future replicas).
"""

from __future__ import annotations

from bisect import bisect_right

from shoal.classic.log_results import ReadResult
from shoal.classic.log_state import LogState
from shoal.protocol.errors import ErrorCode, KafkaError

__all__ = ["ReadMixin"]


class ReadMixin(LogState):
    """``PartitionLog``'s reads."""

    def _segment_at(self, offset: int) -> int:
        return max(bisect_right(self._bases, offset) - 1, 0)

    def read(
        self,
        offset: int,
        max_bytes: int,
        min_one_batch: bool = True,
        *,
        committed_only: bool = True,
        max_offset: int | None = None,
    ) -> ReadResult:
        """Whole batches from the one holding ``offset``, up to ``max_bytes`` (at least one batch
        when ``min_one_batch``), across segments, below the high watermark (the log end when not
        ``committed_only``: followers, future replicas) and below ``max_offset`` when given (a
        diskless cache replica's READ_COMMITTED read: the coordinator's last stable offset).

        OFFSET_OUT_OF_RANGE when ``offset`` is below the log start or above the log end, like
        Kafka; at the end (or between the high watermark and the log end) the records are empty.
        """
        with self._guard("reading from"), self._lock:
            self._check_usable()
            return self._read_locked(offset, max_bytes, min_one_batch, committed_only, max_offset)

    def _read_locked(
        self, offset: int, max_bytes: int, min_one: bool, committed_only: bool, max_offset: int | None = None
    ) -> ReadResult:
        """The read itself; ``max_offset`` bounds it below the high watermark (READ_COMMITTED: the LSO)."""
        leo, hw, start = self._next_offset, self._hw, self._log_start
        if offset < start or offset > leo:
            raise KafkaError(
                ErrorCode.offset_out_of_range,
                f"Received request for offset {offset} for partition {self.name}, but we only have log "
                f"segments in the range {start} to {leo}.",
            )
        upper = hw if committed_only else leo
        if max_offset is not None:
            upper = min(upper, max_offset)
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
