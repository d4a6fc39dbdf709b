"""One producer id's state on a partition (Kafka's ProducerStateEntry and BatchMetadata).

Per producer id the log keeps the epoch, the metadata of its last 5 batches (what a retried
batch is answered with), the epoch of the transaction coordinator that wrote its last marker,
and the first offset of its ongoing transaction (-1: none), which is what keeps the last stable
offset from moving past the transaction.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from shoal.records.batch import NO_PRODUCER_EPOCH, NO_SEQUENCE

__all__ = ["NUM_BATCHES_TO_RETAIN", "BatchMetadata", "ProducerStateEntry", "in_sequence"]

NUM_BATCHES_TO_RETAIN = 5
_INT32_MAX = 2**31 - 1


def _decrement_sequence(sequence: int, decrement: int) -> int:
    if sequence < decrement:
        return _INT32_MAX - (decrement - sequence) + 1
    return sequence - decrement


def in_sequence(last_seq: int, next_seq: int) -> bool:
    """Kafka's ``inSequence``: the next sequence, wrapping from 2**31-1 to 0."""
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == _INT32_MAX)


@dataclass(slots=True)
class BatchMetadata:
    """One appended batch of a producer: what a duplicate retry is answered with."""

    last_seq: int
    last_offset: int
    offset_delta: int
    timestamp: int

    @property
    def first_seq(self) -> int:
        return _decrement_sequence(self.last_seq, self.offset_delta)

    @property
    def first_offset(self) -> int:
        return self.last_offset - self.offset_delta


@dataclass(slots=True)
class ProducerStateEntry:
    """Kafka's ProducerStateEntry: epoch, the last batches, coordinator epoch, ongoing transaction."""

    producer_id: int
    producer_epoch: int = NO_PRODUCER_EPOCH
    coordinator_epoch: int = -1
    last_timestamp: int = -1
    current_txn_first_offset: int = -1
    batches: deque[BatchMetadata] = field(default_factory=deque)

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    @property
    def last_data_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1

    @property
    def last_offset_delta(self) -> int:
        return self.batches[-1].offset_delta if self.batches else 0

    @property
    def has_ongoing_txn(self) -> bool:
        return self.current_txn_first_offset >= 0

    def copy(self) -> ProducerStateEntry:
        return ProducerStateEntry(
            self.producer_id,
            self.producer_epoch,
            self.coordinator_epoch,
            self.last_timestamp,
            self.current_txn_first_offset,
            deque(self.batches),
        )

    def find_duplicate(self, epoch: int, first_seq: int, last_seq: int) -> BatchMetadata | None:
        if epoch != self.producer_epoch:
            return None
        for b in self.batches:
            if b.first_seq == first_seq and b.last_seq == last_seq:
                return b
        return None

    def _maybe_update_epoch(self, epoch: int) -> None:
        """A new epoch forgets the batches of the old one (Kafka's ``maybeUpdateProducerEpoch``)."""
        if epoch != self.producer_epoch:
            self.batches.clear()
            self.producer_epoch = epoch

    def add_batch(
        self, epoch: int, last_seq: int, last_offset: int, offset_delta: int, timestamp: int
    ) -> None:
        self._maybe_update_epoch(epoch)
        self.batches.append(BatchMetadata(last_seq, last_offset, offset_delta, timestamp))
        while len(self.batches) > NUM_BATCHES_TO_RETAIN:
            self.batches.popleft()
        self.last_timestamp = timestamp

    def end_txn(self, epoch: int, coordinator_epoch: int, timestamp: int) -> None:
        """A transaction marker was written (Kafka's ``update(epoch, coordinatorEpoch, timestamp)``):
        no transaction is ongoing any more, and a bumped epoch (transaction version 2) starts afresh."""
        self._maybe_update_epoch(epoch)
        self.coordinator_epoch = coordinator_epoch
        self.last_timestamp = timestamp
        self.current_txn_first_offset = -1
