"""ListOffsets on a ``PartitionLog``: the first offset at or after a timestamp, and the
special timestamps (latest, earliest, max timestamp as in KIP-734, earliest local, latest tiered).
"""

from __future__ import annotations

from shoal.classic.log_results import TimestampAndOffset
from shoal.classic.log_state import LogState
from shoal.classic.segment import LogSegment
from shoal.records.batch import NO_TIMESTAMP
from shoal.records.codec import decode_batch

__all__ = [
    "EARLIEST_LOCAL_TIMESTAMP",
    "EARLIEST_TIMESTAMP",
    "LATEST_TIERED_TIMESTAMP",
    "LATEST_TIMESTAMP",
    "MAX_TIMESTAMP",
    "ListOffsetsMixin",
]

# ListOffsets special timestamps (ListOffsetsRequest.java).
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4
LATEST_TIERED_TIMESTAMP = -5


class ListOffsetsMixin(LogState):
    """``PartitionLog``'s offset lookups."""

    def offset_for_timestamp(self, timestamp: int) -> TimestampAndOffset | None:
        """The first record with a timestamp >= ``timestamp`` (decoding the one batch it is in)."""
        with self._guard("searching"), self._lock:
            self._check_usable()
            for segment in self._segments:
                if segment.largest_timestamp < timestamp:
                    continue
                found = segment.find_offset_by_timestamp(timestamp, self._log_start)
                if found is not None:
                    ts, offset = found
                    return TimestampAndOffset(ts, offset, self._epochs.epoch_for_offset(offset))
            return None

    def fetch_offset_by_timestamp(self, timestamp: int) -> TimestampAndOffset | None:
        """ListOffsets for one partition, special timestamps included (-1, -2, -3, -4, -5)."""
        if timestamp >= 0:
            return self.offset_for_timestamp(timestamp)
        if timestamp == MAX_TIMESTAMP:
            return self.max_timestamp_offset()
        with self._lock:
            self._check_usable()
            if timestamp in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
                return TimestampAndOffset(
                    NO_TIMESTAMP, self._log_start, self._epochs.epoch_for_offset(self._log_start)
                )
            if timestamp == LATEST_TIMESTAMP:
                return TimestampAndOffset(NO_TIMESTAMP, self._next_offset, self._epochs.latest_epoch)
            if timestamp == LATEST_TIERED_TIMESTAMP:
                return TimestampAndOffset(NO_TIMESTAMP, -1, -1)
        return None

    def earliest_offset(self) -> int:
        return self._log_start

    def latest_offset(self) -> int:
        return self._next_offset

    def max_timestamp_offset(self) -> TimestampAndOffset:
        """KIP-734: the record with the largest timestamp (the first of equals), exactly."""
        with self._guard("searching"), self._lock:
            self._check_usable()
            best: LogSegment | None = None
            for segment in self._segments:
                if segment.size and (
                    best is None or segment.max_timestamp_so_far > best.max_timestamp_so_far
                ):
                    best = segment
            if best is None or self._next_offset <= self._log_start:
                return TimestampAndOffset(NO_TIMESTAMP, -1, -1)
            found = best.translate_offset(best.offset_of_max_timestamp)
            if found is None:
                return TimestampAndOffset(NO_TIMESTAMP, -1, -1)
            pos, h = found
            _, records = decode_batch(best.read_batch(pos, h.size), check_crc=False)
            target = best.max_timestamp_so_far
            offset = next((r.offset for r in records if r.timestamp == target), h.last_offset)
            return TimestampAndOffset(target, offset, self._epochs.epoch_for_offset(offset))
