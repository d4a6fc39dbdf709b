"""Kafka's ``isolation.level`` for reads that skip Fetch: which batches become rows.

A broker's READ_COMMITTED Fetch stops at the last stable offset (LSO) and hands the consumer the
partition's aborted transactions; the consumer then drops the batches of aborted transactions and,
in either isolation level, every control batch (transaction markers). Spark tasks that read
diskless batches straight from object storage have no broker to do that, so they do it here: the
planner bounds the ends by the LSO (``DisklessRangeReader.bounds``), and each task asks the Batch
Coordinator once per partition for the aborted transactions (``transaction_state``) and decides
per *batch* from its header (producer id, transactional and control attributes), never per
record: a transactional batch lies wholly inside one transaction of its producer.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable

from shoal.coordinator.api import BatchMetadata
from shoal.records.batch import BatchHeader

__all__ = [
    "ISOLATION_LEVELS",
    "READ_COMMITTED",
    "READ_UNCOMMITTED",
    "BatchFilter",
    "CONTROL_ONLY",
]

READ_UNCOMMITTED = "read_uncommitted"
READ_COMMITTED = "read_committed"
#: Kafka's two values of ``isolation.level``; the first is the consumer default (and Spark's).
ISOLATION_LEVELS = (READ_UNCOMMITTED, READ_COMMITTED)


class BatchFilter:
    """Keeps the data batches a consumer of one partition would return, drops the rest.

    ``aborted`` holds (producer id, first offset, last offset) of the partition's aborted
    transactions, as ``BatchCoordinator.transaction_state`` lists them; the last offset is the
    ABORT marker's. Kafka's consumer rule: a transactional batch of producer ``p`` at offset ``o``
    is aborted when some (p, first, last) has ``first <= o <= last``. One producer's transactions
    never overlap, so per producer the spans sorted by first offset answer with one bisection.
    With no aborted transactions (``read_uncommitted``) only control batches are dropped.
    """

    __slots__ = ("_firsts", "_lasts")

    def __init__(self, aborted: Iterable[tuple[int, int, int]] = ()) -> None:
        spans: dict[int, list[tuple[int, int]]] = {}
        for producer_id, first, last in aborted:
            spans.setdefault(producer_id, []).append((first, last))
        self._firsts: dict[int, list[int]] = {}
        self._lasts: dict[int, list[int]] = {}
        for producer_id, found in spans.items():
            found.sort()
            self._firsts[producer_id] = [first for first, _ in found]
            self._lasts[producer_id] = [last for _, last in found]

    def is_aborted(self, producer_id: int, offset: int) -> bool:
        """Whether ``offset`` lies in an aborted transaction of ``producer_id``."""
        firsts = self._firsts.get(producer_id)
        if firsts is None:
            return False
        i = bisect_right(firsts, offset) - 1
        return i >= 0 and offset <= self._lasts[producer_id][i]

    def keeps(self, producer_id: int, is_transactional: bool, is_control: bool, base_offset: int) -> bool:
        """Whether a batch with these header fields gives rows: not a control batch, and not a
        transactional batch of an aborted transaction (non-transactional batches never are)."""
        if is_control:
            return False
        return not (is_transactional and self.is_aborted(producer_id, base_offset))

    def keeps_batch(self, metadata: BatchMetadata) -> bool:
        """``keeps`` from the coordinator's copy of the header: lets a reader skip the GET."""
        return self.keeps(
            metadata.producer_id, metadata.is_transactional, metadata.is_control, metadata.base_offset
        )

    def keeps_header(self, header: BatchHeader, base_offset: int | None = None) -> bool:
        """``keeps`` from the batch's own header; ``base_offset`` when the bytes are not stamped yet
        (a WAL batch carries its producer's offsets until the coordinator's are stamped in)."""
        return self.keeps(
            header.producer_id,
            header.is_transactional,
            header.is_control,
            header.base_offset if base_offset is None else base_offset,
        )


#: What ``read_uncommitted`` keeps: every data batch (control batches never give rows).
CONTROL_ONLY = BatchFilter()
