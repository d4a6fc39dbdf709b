"""Coordinator-epoch fencing of transaction markers for ``__consumer_offsets`` partitions.

Kafka appends such a marker to the offsets partition's log, whose producer state remembers the
coordinator epoch of the producer's last marker there and refuses an older one
(TRANSACTION_COORDINATOR_FENCED, ``ProducerAppendInfo.checkCoordinatorEpoch``). Shoal's group
coordinator keeps offsets in the group store, not in a log, so this keeps that memory: without it
a deposed transaction coordinator's late COMMIT, landing after the producer's next
TxnOffsetCommit, would make that next transaction's offsets visible. The memory lives as long as
the broker; the transaction coordinator also stops resending markers of a transaction another
coordinator completed, so a late marker is one already in flight.
"""

from __future__ import annotations

from collections import OrderedDict

__all__ = ["MarkerEpochs"]

#: Producers remembered per broker; the oldest are forgotten beyond it (a fence only matters for
#: a few seconds after a coordinator moves).
MAX_REMEMBERED = 100_000


class MarkerEpochs:
    def __init__(self, max_remembered: int = MAX_REMEMBERED) -> None:
        self._max = max_remembered
        #: (offsets partition, producer id) -> coordinator epoch of the last marker applied there
        self._epochs: OrderedDict[tuple[int, int], int] = OrderedDict()

    def fenced(self, partition: int, producer_id: int, coordinator_epoch: int) -> bool:
        """Whether a newer coordinator already wrote this producer's marker to this partition."""
        return self._epochs.get((partition, producer_id), -1) > coordinator_epoch

    def applied(self, partition: int, producer_id: int, coordinator_epoch: int) -> None:
        key = (partition, producer_id)
        self._epochs[key] = max(coordinator_epoch, self._epochs.get(key, -1))
        self._epochs.move_to_end(key)
        while len(self._epochs) > self._max:
            self._epochs.popitem(last=False)
