"""The leader epoch cache of a partition (Kafka's LeaderEpochFileCache) and its checkpoint file.

Entries ``(epoch, start_offset)``: the first offset written under each leader epoch. Replication
uses it to find where a follower's log diverges (OffsetForLeaderEpoch); ListOffsets and Fetch
report the epoch of an offset. The file ``leader-epoch-checkpoint`` is rewritten (atomically,
fsynced) whenever the entries change, which happens once per leadership change, not per append.
"""

from __future__ import annotations

from bisect import bisect_right
from pathlib import Path

from shoal.classic.checkpoint import (
    LEADER_EPOCH_CHECKPOINT,
    read_leader_epoch_checkpoint,
    write_leader_epoch_checkpoint,
)

__all__ = ["UNDEFINED_EPOCH", "UNDEFINED_EPOCH_OFFSET", "LeaderEpochCache"]

UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


class LeaderEpochCache:
    """Epoch -> start offset, ordered by both. Not thread-safe: the owning log holds its lock."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / LEADER_EPOCH_CHECKPOINT
        self._entries: list[tuple[int, int]] = read_leader_epoch_checkpoint(self.path)

    @property
    def entries(self) -> list[tuple[int, int]]:
        return list(self._entries)

    @property
    def latest_epoch(self) -> int | None:
        return self._entries[-1][0] if self._entries else None

    def update_dir(self, directory: Path) -> None:
        self.path = directory / LEADER_EPOCH_CHECKPOINT

    def _write(self) -> None:
        write_leader_epoch_checkpoint(self.path, self._entries)

    def assign(self, epoch: int, start_offset: int, *, write: bool = True) -> bool:
        """Record that ``epoch`` starts at ``start_offset``; entries it contradicts are dropped."""
        if epoch < 0 or start_offset < 0:
            return False
        if self._entries:
            last_epoch, last_start = self._entries[-1]
            if epoch == last_epoch and start_offset >= last_start:
                return False
        self._entries = [(e, o) for e, o in self._entries if e < epoch and o < start_offset]
        self._entries.append((epoch, start_offset))
        if write:
            self._write()
        return True

    def flush(self) -> None:
        """Write the file (after a batch of ``assign(..., write=False)`` during recovery)."""
        self._write()

    def truncate_from_end(self, end_offset: int) -> None:
        """Drop the epochs that start at or after ``end_offset`` (the log was truncated there)."""
        if self._entries and end_offset >= 0 and self._entries[-1][1] >= end_offset:
            self._entries = [(e, o) for e, o in self._entries if o < end_offset]
            self._write()

    def truncate_from_start(self, start_offset: int) -> None:
        """The log now starts at ``start_offset``: the epoch covering it starts there."""
        removed = [(e, o) for e, o in self._entries if o <= start_offset]
        if not removed:
            return
        kept = [(e, o) for e, o in self._entries if o > start_offset]
        new_first = (removed[-1][0], start_offset)
        if [new_first, *kept] != self._entries:
            self._entries = [new_first, *kept]
            self._write()

    def clear_and_flush(self) -> None:
        self._entries = []
        self._write()

    def epoch_for_offset(self, offset: int) -> int | None:
        """The epoch the record at ``offset`` was written in (None before the first entry)."""
        i = bisect_right([o for _, o in self._entries], offset) - 1
        return self._entries[i][0] if i >= 0 else None

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """OffsetForLeaderEpoch: ``(epoch, end offset)`` of the largest epoch <= the requested one."""
        if requested_epoch == UNDEFINED_EPOCH or not self._entries:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if requested_epoch == self._entries[-1][0]:
            return requested_epoch, log_end_offset
        higher = next(((e, o) for e, o in self._entries if e > requested_epoch), None)
        if higher is None:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        floor = [(e, o) for e, o in self._entries if e <= requested_epoch]
        if not floor:
            return requested_epoch, higher[1]
        return floor[-1][0], higher[1]
