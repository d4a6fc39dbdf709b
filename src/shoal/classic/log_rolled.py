"""What tiered storage copies: a ``PartitionLog``'s rolled segments with their files (KIP-405).

A segment can be copied once it is no longer the active one and lies wholly below the last
stable offset (Kafka's RemoteLogManager copies up to ``lastStableOffset``: a segment holding
part of an undecided transaction waits, so the transaction index copied with it is final; without
transactions the LSO is the high watermark). Its producer snapshot is the one taken at the next
segment's base offset, its leader epochs are the slice of the leader-epoch cache that covers it,
and its ``.txnindex`` goes along when it has entries (``LogSegmentData.transaction_index``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from shoal.classic.log_state import LogState

__all__ = ["RolledSegment", "RolledSegmentsMixin"]


@dataclass(frozen=True, slots=True)
class RolledSegment:
    base_offset: int
    end_offset: int  # inclusive
    size: int
    max_timestamp: int
    log_path: Path
    offset_index_path: Path
    time_index_path: Path
    producer_snapshot: Path | None
    #: (leader epoch, first offset) entries of the leader-epoch cache that cover the segment.
    leader_epochs: tuple[tuple[int, int], ...]
    #: The segment's ``.txnindex``; None when it has no aborted transaction (no file, or empty).
    txn_index_path: Path | None = None


class RolledSegmentsMixin(LogState):
    """``PartitionLog``'s view of its rolled segments."""

    def rolled_segments(self, after: int = -1) -> list[RolledSegment]:
        """Rolled segments wholly below the last stable offset that end after offset ``after``."""
        with self._guard("listing segments of"), self._lock:
            self._check_usable()
            segs = self._segments
            bound = self._last_stable_locked()
            found = []
            for i, s in enumerate(segs[:-1]):
                end = segs[i + 1].base_offset - 1
                if end <= after or segs[i + 1].base_offset > bound or s.size == 0:
                    continue
                snapshot = self._producers.snapshot_path(segs[i + 1].base_offset)
                epochs = tuple(
                    (epoch, start) for n, (epoch, start) in enumerate(self._epochs.entries)
                    if start <= end and (n + 1 == len(self._epochs.entries) or self._epochs.entries[n + 1][1] > s.base_offset)
                )
                found.append(RolledSegment(
                    s.base_offset, end, s.size, s.largest_timestamp, s.log_path, s.offset_index.path,
                    s.time_index.path, snapshot if snapshot.exists() else None, epochs,
                    s.txn_index.path if s.txn_index.size > 0 else None,
                ))
            return found
