"""Kafka's idempotent-producer rules, as every Batch Coordinator backend applies them in a commit.

What a commit needs to decide for a batch of an idempotent producer, whatever stores it: the
last ``PRODUCER_STATE_BATCHES`` batches of each producer on each partition (Kafka's
ProducerStateEntry), a duplicate found among them (answered with its original offset), and
Kafka's ProducerAppendInfo sequence and epoch checks for a new batch. The backends load and
store this state in their own tables; the rules live here once, so they cannot drift apart.
What transactions add (the epoch a marker leaves, the ongoing transaction) is ``transactions``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from shoal.coordinator.api import CommitBatchRequest, CommitBatchResponse
from shoal.protocol.errors import ErrorCode

#: Kafka keeps the metadata of the last 5 batches per producer for deduplication
#: (it is also the client's max.in.flight.requests.per.connection for idempotence).
PRODUCER_STATE_BATCHES = 5
NO_PRODUCER = -1
_INT32_MAX = 2**31 - 1


def next_sequence(sequence: int) -> int:
    """Kafka's sequence successor: int32 sequences wrap from 2**31-1 to 0."""
    return 0 if sequence >= _INT32_MAX else sequence + 1


@dataclass(slots=True)
class ProducerEntry:
    """One remembered batch of a producer on a partition (``new``: not yet stored)."""

    row_id: int
    epoch: int
    base_sequence: int
    last_sequence: int
    assigned_offset: int
    log_append_time: int
    new: bool = False


@dataclass(slots=True)
class ProducerState:
    """The last batches of one producer on one partition, as Kafka's ProducerStateEntry.

    ``row_base``: the next row id once ``clear`` emptied ``entries`` (a marker's epoch bump),
    so rows written later still sort after, and trimming below them drops the old ones.
    """

    entries: list[ProducerEntry] = field(default_factory=list)
    dirty: bool = False
    row_base: int = 0

    @property
    def epoch(self) -> int:
        return self.entries[-1].epoch if self.entries else NO_PRODUCER

    @property
    def next_row_id(self) -> int:
        """Row ids grow per producer and partition, so the oldest rows are the ones to trim."""
        return self.entries[-1].row_id + 1 if self.entries else self.row_base

    @property
    def first_kept_row_id(self) -> int:
        """Stored rows below this id are no longer remembered (what a save trims)."""
        return self.entries[0].row_id if self.entries else self.row_base

    def clear(self) -> None:
        """Forget every remembered batch (Kafka's ``maybeUpdateProducerEpoch`` on a new epoch)."""
        if self.entries:
            self.row_base = self.next_row_id
            self.entries.clear()
            self.dirty = True

    def find_duplicate(self, epoch: int, base_sequence: int, last_sequence: int) -> ProducerEntry | None:
        if epoch != self.epoch:
            return None
        for entry in self.entries:
            if entry.base_sequence == base_sequence and entry.last_sequence == last_sequence:
                return entry
        return None

    def append(self, entry: ProducerEntry, reset: bool) -> None:
        if reset:
            self.entries.clear()
        self.entries.append(entry)
        del self.entries[:-PRODUCER_STATE_BATCHES]
        self.dirty = True


def check_sequence(
    state: ProducerState, req: CommitBatchRequest, marker_epoch: int = NO_PRODUCER
) -> tuple[ErrorCode, bool]:
    """Kafka's ProducerAppendInfo checks for a non-duplicate batch: (error, resets state).

    ``marker_epoch``: the epoch the producer's last transaction marker here left (NO_PRODUCER:
    none). Kafka's entry has one epoch that markers move too: a producer a marker left at epoch E
    with no batch remembered must write epoch E or later, from sequence 0.
    """
    current = max(state.epoch, marker_epoch)
    if current == NO_PRODUCER:
        return ErrorCode.none, False  # unknown producer: any sequence starts it
    if req.producer_epoch < current:
        return ErrorCode.invalid_producer_epoch, False
    if req.producer_epoch > current:
        if req.base_sequence != 0:
            return ErrorCode.out_of_order_sequence_number, False
        return ErrorCode.none, True
    last_sequence = state.entries[-1].last_sequence if state.entries else NO_PRODUCER
    if req.base_sequence != next_sequence(last_sequence):
        return ErrorCode.out_of_order_sequence_number, False
    return ErrorCode.none, False


def rejected(error: ErrorCode, log_start_offset: int, req: CommitBatchRequest) -> CommitBatchResponse:
    """The answer for a batch that gets no offsets."""
    return CommitBatchResponse(
        errors=error,
        assigned_base_offset=-1,
        log_append_time=-1,
        log_start_offset=log_start_offset,
        is_duplicate=False,
        request=req,
    )
