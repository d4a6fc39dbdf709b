"""Transactions on a ``PartitionLog``: the last stable offset, the aborted transactions a fetch
needs, and READ_COMMITTED reads (Kafka's UnifiedLog/LocalLog parts of KIP-98).

The first unstable offset is the smallest first offset of the transactions not yet decided, or
decided by a marker not yet below the high watermark (producer state keeps both, Kafka's
``firstUnstableOffset``), never below the log start. The last stable offset (LSO) is that offset
when it is below the high watermark, else the high watermark: READ_COMMITTED consumers read up
to it, and tiered storage copies only what lies below it. Leaders and followers compute it alike
from their own state.

Aborted transactions are looked up in the ``.txnindex`` of the segment holding the fetch offset
and of the following ones, until an entry's LSO reaches the upper bound (Kafka's
``collectAbortedTransactions``): an aborted transaction's entry is in the segment of its marker,
which may come after the fetched range.
"""

from __future__ import annotations

from shoal.classic.log_read import ReadMixin
from shoal.classic.log_results import CommittedReadResult
from shoal.classic.txn_index import AbortedTxn
from shoal.records.codec import iter_batches

__all__ = ["TxnMixin"]


class TxnMixin(ReadMixin):
    """``PartitionLog``'s transaction views."""

    @property
    def first_unstable_offset(self) -> int | None:
        """The first offset of the oldest transaction not yet stable; None when every one is."""
        with self._lock:
            return self._first_unstable_locked()

    @property
    def last_stable_offset(self) -> int:
        """Kafka's ``lastStableOffset``: min(first unstable offset, high watermark)."""
        with self._lock:
            return self._last_stable_locked()

    @property
    def ongoing_transactions(self) -> list[tuple[int, int]]:
        """``(first offset, producer id)`` of the transactions without a marker yet, by first offset."""
        with self._lock:
            return self._producers.ongoing_transactions

    def _aborted_locked(self, start_offset: int, upper_bound_offset: int) -> list[AbortedTxn]:
        found: list[AbortedTxn] = []
        for segment in self._segments[self._segment_at(start_offset) :]:
            result = segment.collect_aborted_txns(start_offset, upper_bound_offset)
            found += result.aborted
            if result.complete:
                break
        return found

    def aborted_transactions(self, start_offset: int, upper_bound_offset: int) -> list[AbortedTxn]:
        """The ``.txnindex`` entries of the aborted transactions overlapping [start, upper)."""
        with self._guard("reading the transaction index of"), self._lock:
            self._check_usable()
            return self._aborted_locked(start_offset, upper_bound_offset)

    def collect_aborted_transactions(self, start_offset: int, upper_bound_offset: int) -> list[tuple[int, int]]:
        """``(producer id, first offset)`` of every aborted transaction with data in
        [start_offset, upper_bound_offset): what a Fetch response lists for READ_COMMITTED."""
        return [(t.producer_id, t.first_offset) for t in self.aborted_transactions(start_offset, upper_bound_offset)]

    def read_committed(self, offset: int, max_bytes: int, min_one_batch: bool = True) -> CommittedReadResult:
        """A READ_COMMITTED Fetch read: whole batches below the last stable offset, with the aborted
        transactions overlapping what is returned (up to the end of its last batch). Same
        OFFSET_OUT_OF_RANGE rule as ``read``."""
        with self._guard("reading from"), self._lock:
            self._check_usable()
            lso = self._last_stable_locked()
            result = self._read_locked(offset, max_bytes, min_one_batch, True, lso)
            aborted: list[tuple[int, int]] = []
            if result.records:
                upper = offset
                for _, h in iter_batches(result.records):
                    upper = h.next_offset
                aborted = [(t.producer_id, t.first_offset) for t in self._aborted_locked(offset, upper)]
            return CommittedReadResult(result.records, result.high_watermark, lso, result.log_start_offset, aborted)
