"""Kafka's transaction rules for diskless partitions, as every Batch Coordinator backend applies them.

Diskless partitions have no leader log (KIP-1163): the coordinator keeps what Kafka's
ProducerStateManager keeps for transactions, and decides in the commit's transaction what
Kafka's ProducerAppendInfo decides when a leader appends (``classic/producer_append.py`` is the
same rules for classic logs; transaction versions 0 and 1):

- a transactional data batch of a producer with no ongoing transaction on the partition starts
  one at its assigned base offset, with its epoch; a non-transactional batch of a producer with
  an ongoing transaction is INVALID_TXN_STATE; a transactional batch of another epoch than the
  ongoing transaction's is INVALID_PRODUCER_EPOCH. An older epoch already is by Kafka's epoch
  rule; a newer one (sequence 0) is where this departs from Kafka's ProducerAppendInfo, which
  would carry the open transaction over to the new epoch: here the new instance's data never
  joins a transaction of the old one (whose marker never came), and the new instance's ABORT,
  at its epoch, ends the old transaction;
- a marker (a control batch the broker built for the transaction coordinator) older than the
  producer's current epoch is INVALID_PRODUCER_EPOCH, then one from an older coordinator epoch
  than the last recorded is TRANSACTION_COORDINATOR_FENCED (Kafka's order). It takes one offset,
  ends the ongoing transaction if any (an ABORT records it as aborted, Kafka's ``.txnindex``
  entry, with the last stable offset right after it), makes its epoch the producer's current one
  (a bumped epoch, as a fencing abort brings, forgets the remembered batches) and remembers the
  coordinator epoch. A marker with nothing ongoing records nothing.

The backends keep this in two tables: one row per (partition, producer) that ever wrote a
transactional batch or a marker (``ProducerTxn``: the epoch its last transactional event left,
the coordinator epoch, the ongoing transaction's first offset or none), and the aborted
transactions (``AbortedTxn``). The coordinator epoch lives in the first, not in the producer
state table: that one holds a row per remembered batch (up to 5, rewritten as batches come,
cleared by an epoch bump, and none for a producer that only received markers), while the
coordinator epoch must outlive all of them; and the row stays after its transaction ended, so
the ongoing transactions are the rows with a first offset (a partial index finds them for the
LSO).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from shoal.coordinator.api import CommitBatchRequest, ListOffsetsTimestamp, ProducerStateEntry
from shoal.coordinator.idempotence import NO_PRODUCER, ProducerState
from shoal.protocol.errors import ErrorCode

#: ``ProducerTxn.first_offset`` when no transaction is ongoing.
NO_TXN = -1


@dataclass(slots=True)
class ProducerTxn:
    """A producer's transactional state on one partition (one stored row; ``dirty``: to write)."""

    epoch: int = NO_PRODUCER
    coordinator_epoch: int = -1
    first_offset: int = NO_TXN
    dirty: bool = False

    @property
    def ongoing(self) -> bool:
        return self.first_offset != NO_TXN


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    """An aborted transaction of ``producer_id`` over [first_offset, last_offset] (its ABORT marker),
    with the last stable offset right after the marker (Kafka's AbortedTxn), which bounds the
    search of the aborted transactions a fetch overlaps."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


def _no_row(producer_id: int) -> ProducerTxn | None:
    return None


@dataclass(slots=True)
class LogTxns:
    """One partition's transactional state as a commit holds it: every producer with an ongoing
    transaction (for the LSO an ABORT records) and the commit's producers, loaded on first use
    through ``load`` (None: no row), plus the transactions this commit aborted."""

    producers: dict[int, ProducerTxn] = field(default_factory=dict)
    load: Callable[[int], ProducerTxn | None] = _no_row
    aborted: list[AbortedTxn] = field(default_factory=list)

    def producer(self, producer_id: int) -> ProducerTxn:
        txn = self.producers.get(producer_id)
        if txn is None:
            txn = self.producers[producer_id] = self.load(producer_id) or ProducerTxn()
        return txn

    def for_batch(self, state: ProducerState, req: CommitBatchRequest) -> ProducerTxn:
        """The producer's row as ``req``'s checks need it, loaded only when it can matter. A plain
        data batch of a producer with remembered batches (an idempotent producer's steady state)
        needs none: every ongoing transaction of the log is loaded already, and the epoch a
        marker left is never above the remembered batches' (a bumped one clears them), so such a
        producer missing here has nothing the checks would see (a throwaway empty row)."""
        txn = self.producers.get(req.producer_id)
        if txn is not None:
            return txn
        if state.entries and not req.is_transactional and req.control is None:
            return ProducerTxn()
        return self.producer(req.producer_id)

    def first_ongoing(self, except_producer: int = NO_PRODUCER) -> int | None:
        """The first offset of the earliest ongoing transaction of another producer than
        ``except_producer`` (Kafka's ``findNextIncompleteTxn``), or None."""
        firsts = [t.first_offset for pid, t in self.producers.items() if t.ongoing and pid != except_producer]
        return min(firsts) if firsts else None

    def dirty(self) -> Iterable[tuple[int, ProducerTxn]]:
        return ((pid, t) for pid, t in self.producers.items() if t.dirty)


# ---------------------------------------------------------------------------- commits


def check_data(txn: ProducerTxn, req: CommitBatchRequest) -> ErrorCode:
    """The transaction checks of a data batch that passed the idempotence checks."""
    if txn.ongoing:
        if not req.is_transactional:
            return ErrorCode.invalid_txn_state
        if req.producer_epoch != txn.epoch:
            return ErrorCode.invalid_producer_epoch
    return ErrorCode.none


def accept_data(txn: ProducerTxn, req: CommitBatchRequest, base_offset: int) -> None:
    """An accepted data batch at ``base_offset``: a transactional one may start a transaction."""
    if req.is_transactional and not txn.ongoing:
        txn.first_offset = base_offset
        txn.epoch = req.producer_epoch
        txn.dirty = True


def check_marker(state: ProducerState, txn: ProducerTxn, req: CommitBatchRequest) -> ErrorCode:
    """Kafka's ``appendEndTxnMarker`` checks (transaction versions 0/1): epoch, then coordinator epoch."""
    assert req.control is not None
    if req.producer_epoch < max(state.epoch, txn.epoch):
        return ErrorCode.invalid_producer_epoch
    if txn.coordinator_epoch > req.control.coordinator_epoch:
        return ErrorCode.transaction_coordinator_fenced
    return ErrorCode.none


def accept_marker(state: ProducerState, txns: LogTxns, req: CommitBatchRequest, offset: int) -> None:
    """An accepted marker at ``offset``: end the ongoing transaction (recording an aborted one),
    take the marker's epochs (Kafka's ``ProducerStateEntry.update``)."""
    assert req.control is not None
    txn = txns.producer(req.producer_id)
    if txn.ongoing:
        if not req.control.commit:
            after = txns.first_ongoing(except_producer=req.producer_id)
            lso = offset + 1 if after is None else after
            txns.aborted.append(AbortedTxn(req.producer_id, txn.first_offset, offset, lso))
        txn.first_offset = NO_TXN
    if req.producer_epoch != max(state.epoch, txn.epoch):
        state.clear()  # a new epoch forgets the old one's batches
    txn.epoch = req.producer_epoch
    txn.coordinator_epoch = req.control.coordinator_epoch
    txn.dirty = True


def batch_flags(req: CommitBatchRequest) -> tuple[bool, bool]:
    """(is_transactional, is_control) as stored for a committed batch: a marker is a transactional
    control batch, as Kafka writes them."""
    return req.is_transactional or req.control is not None, req.control is not None


def malformed(req: CommitBatchRequest) -> bool:
    """A batch no producer could have written: a transactional one without a producer id, or a
    marker that is not one record of a producer."""
    if req.control is not None:
        return req.producer_id == NO_PRODUCER or req.last_offset != req.base_offset
    return req.is_transactional and req.producer_id == NO_PRODUCER


# ---------------------------------------------------------------------------- reads


def last_stable_offset(log_start_offset: int, high_watermark: int, first_ongoing: int | None) -> int:
    """Kafka's ``lastStableOffset``: the first offset of the earliest ongoing transaction, never
    below the log start, else the high watermark (a committed batch is replicated: nothing is
    decided but not yet stable, unlike a leader's log)."""
    if first_ongoing is None:
        return high_watermark
    return min(max(first_ongoing, log_start_offset), high_watermark)


def committed_offset_answer(asked: int, timestamp: int, offset: int, lso: int) -> tuple[int, int]:
    """A READ_COMMITTED ListOffsets answer (timestamp, offset) for the ``asked`` timestamp, as
    Kafka's ``fetchOffsetForTimestamp``: LATEST is the LSO, EARLIEST and EARLIEST_LOCAL stay,
    any other answer at or past the LSO is none (-1, -1): a consumer never starts past what it
    may read."""
    if asked == ListOffsetsTimestamp.LATEST:
        return -1, lso
    if asked in (ListOffsetsTimestamp.EARLIEST, ListOffsetsTimestamp.EARLIEST_LOCAL) or offset < lso:
        return timestamp, offset
    return -1, -1


def collect_aborted(
    rows: Iterable[tuple[int, int, int, int]], fetch_offset: int, upper_bound_offset: int
) -> list[tuple[int, int]]:
    """(producer id, first offset) of the aborted transactions overlapping [fetch offset, upper
    bound), from ``rows`` (producer id, first, last, LSO) in marker order from the first with last
    offset >= ``fetch_offset``: Kafka's ``collectAbortedTxns``, which stops at the first entry whose
    LSO reaches the bound (no later one can start below it)."""
    found: list[tuple[int, int]] = []
    for producer_id, first_offset, last_offset, lso in rows:
        if last_offset >= fetch_offset and first_offset < upper_bound_offset:
            found.append((producer_id, first_offset))
        if lso >= upper_bound_offset:
            break
    return found


def producer_entries(
    last_batches: Iterable[tuple[int, int, int, int]], txn_rows: Iterable[tuple[int, int, int, int | None]]
) -> list[ProducerStateEntry]:
    """DescribeProducers' view of a partition from what the backends store, in producer id order.

    ``last_batches``: (producer id, epoch, last sequence, last timestamp) of each producer's last
    remembered batch; ``txn_rows``: (producer id, epoch, coordinator epoch, ongoing transaction's
    first offset or None) of its transaction row. The producer's epoch is the later of the two (as
    the commit checks take it); batches of an older epoch than a marker left are not its state."""
    batches = {pid: (epoch, seq, ts) for pid, epoch, seq, ts in last_batches}
    txns = {pid: (epoch, coordinator_epoch, first) for pid, epoch, coordinator_epoch, first in txn_rows}
    entries = []
    for pid in sorted(batches.keys() | txns.keys()):
        batch_epoch, last_sequence, last_timestamp = batches.get(pid, (NO_PRODUCER, -1, -1))
        txn_epoch, coordinator_epoch, first = txns.get(pid, (NO_PRODUCER, -1, None))
        epoch = max(batch_epoch, txn_epoch)
        if batch_epoch != epoch:
            last_sequence, last_timestamp = -1, -1
        entries.append(
            ProducerStateEntry(
                pid, epoch, last_sequence, last_timestamp, coordinator_epoch, NO_TXN if first is None else first
            )
        )
    return entries
