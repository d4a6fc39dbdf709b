"""Validating what one producer appends, as Kafka's ProducerAppendInfo does.

An append is checked against the producer's state before anything is written; the outcome
(``ProducerAppend``) is applied once the bytes are in the segment. Per origin, as in Kafka:

- CLIENT (a leader's produce): the epoch may not go back (INVALID_PRODUCER_EPOCH), sequences
  must follow (OUT_OF_ORDER_SEQUENCE_NUMBER), and a producer with an ongoing transaction may only
  write transactional batches (INVALID_TXN_STATE);
- COORDINATOR (a leader writing a transaction marker for the transaction coordinator): a marker
  from an older coordinator epoch is TRANSACTION_COORDINATOR_FENCED; its producer epoch may not
  go back (transaction version 0/1) or must move forward (version 2, where the coordinator bumps
  the epoch at every transaction end; a retried marker at the same epoch after the transaction
  ended is accepted again, KAFKA-19999);
- REPLICATION (followers, future replicas, recovery): what the leader accepted is taken; epoch
  and coordinator-epoch regressions are only logged, a non-transactional batch inside a
  transaction is still INVALID_TXN_STATE.

A transactional data batch of a producer without an ongoing transaction starts one at its base
offset; a marker ends it, and a *completed* transaction (one that wrote data here) is what the
log turns into an aborted-transaction index entry when the marker is an ABORT.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from enum import Enum

from shoal.classic.producer_entry import ProducerStateEntry, in_sequence
from shoal.protocol.errors import ErrorCode, KafkaError
from shoal.records.batch import NO_PRODUCER_EPOCH, BatchHeader
from shoal.records.control import ControlRecordType, EndTxnMarker

__all__ = [
    "TV_UNKNOWN",
    "AppendOrigin",
    "CompletedTxn",
    "ProducerAppend",
    "ProducerAppendInfo",
    "TxnStarted",
]

_log = logging.getLogger(__name__)

#: No transaction version known: replicated markers are checked as version 0 (the leader checked them).
TV_UNKNOWN = -1


class AppendOrigin(Enum):
    """Who appends (Kafka's AppendOrigin): decides how much is checked."""

    CLIENT = "client"
    COORDINATOR = "coordinator"
    REPLICATION = "replication"


@dataclass(frozen=True, slots=True)
class CompletedTxn:
    """A transaction of ``producer_id`` over [first_offset, last_offset] ended by a marker."""

    producer_id: int
    first_offset: int
    last_offset: int
    is_aborted: bool


@dataclass(frozen=True, slots=True)
class TxnStarted:
    """A transactional batch at ``first_offset`` began a transaction of ``producer_id``."""

    producer_id: int
    first_offset: int


@dataclass(slots=True)
class ProducerAppend:
    """One append's validated effect on producer state, applied after the write: the producers'
    new entries, and the transactions started and completed, in batch order."""

    infos: dict[int, ProducerAppendInfo] = field(default_factory=dict)
    events: list[TxnStarted | CompletedTxn] = field(default_factory=list)


class ProducerAppendInfo:
    """The batches of one producer in one append, checked against its state (Kafka's class)."""

    def __init__(
        self, topic_partition: str, producer_id: int, current: ProducerStateEntry | None, origin: AppendOrigin
    ) -> None:
        self.topic_partition = topic_partition
        self.producer_id = producer_id
        self.origin = origin
        self.committed_epoch = current.producer_epoch if current is not None else NO_PRODUCER_EPOCH
        #: The producer's state once this append is applied.
        self.entry = current.copy() if current is not None else ProducerStateEntry(producer_id)

    # ---------------------------------------------------------------- checks

    def _check_epoch(self, epoch: int, offset: int, transaction_version: int) -> None:
        current = self.entry.producer_epoch
        strict = transaction_version >= 2
        if (epoch <= current) if strict else (epoch < current):
            if strict and epoch == current and not self.entry.has_ongoing_txn:
                _log.info(
                    "Idempotent transaction marker retry detected for producer %d epoch %d in %s. "
                    "Transaction already completed, allowing duplicate marker write.",
                    self.producer_id, epoch, self.topic_partition,
                )
                return
            message = (
                f"Epoch of producer {self.producer_id} at offset {offset} in {self.topic_partition} is {epoch}, "
                f"which is {'<=' if strict else 'smaller than'} the last seen epoch {current}"
            )
            if self.origin == AppendOrigin.REPLICATION:
                _log.warning(message)
                return
            raise KafkaError(ErrorCode.invalid_producer_epoch, message)

    def _check_sequence(self, epoch: int, first_seq: int, offset: int) -> None:
        entry = self.entry
        if epoch != entry.producer_epoch:
            if first_seq != 0 and entry.producer_epoch != NO_PRODUCER_EPOCH:
                raise KafkaError(
                    ErrorCode.out_of_order_sequence_number,
                    f"Invalid sequence number for new epoch of producer {self.producer_id} at offset {offset} in "
                    f"partition {self.topic_partition}: {epoch} (request epoch), {first_seq} (seq. number), "
                    f"{entry.producer_epoch} (current producer epoch)",
                )
            return
        if self.committed_epoch == NO_PRODUCER_EPOCH:
            return  # no state (expired, deleted): any sequence starts it
        if not in_sequence(entry.last_seq, first_seq):
            raise KafkaError(
                ErrorCode.out_of_order_sequence_number,
                f"Out of order sequence number for producer {self.producer_id} at offset {offset} in partition "
                f"{self.topic_partition}: {first_seq} (incoming seq. number), {entry.last_seq} "
                "(current end sequence number)",
            )

    # ---------------------------------------------------------------- batches

    def append_data(self, h: BatchHeader, first_offset: int, max_timestamp: int) -> TxnStarted | None:
        """A data batch at ``first_offset``; returns the transaction it starts, if it starts one."""
        self._check_epoch(h.producer_epoch, first_offset, TV_UNKNOWN)
        if self.origin == AppendOrigin.CLIENT:
            self._check_sequence(h.producer_epoch, h.base_sequence, first_offset)
        entry = self.entry
        last_offset = first_offset + h.last_offset_delta
        entry.add_batch(h.producer_epoch, h.last_sequence, last_offset, h.last_offset_delta, max_timestamp)
        if entry.has_ongoing_txn and not h.is_transactional:
            raise KafkaError(
                ErrorCode.invalid_txn_state,
                f"Expected transactional write from producer {self.producer_id} at offset {first_offset} in "
                f"partition {self.topic_partition}",
            )
        if not entry.has_ongoing_txn and h.is_transactional:
            entry.current_txn_first_offset = first_offset
            return TxnStarted(self.producer_id, first_offset)
        return None

    def append_marker(
        self, marker: EndTxnMarker, epoch: int, offset: int, timestamp: int, transaction_version: int
    ) -> CompletedTxn | None:
        """A transaction marker at ``offset``; returns the transaction it completes, if it wrote data here."""
        if transaction_version == TV_UNKNOWN and self.origin != AppendOrigin.REPLICATION:
            raise ValueError(f"A transaction marker appended as {self.origin.value} needs its transaction version")
        self._check_epoch(epoch, offset, max(transaction_version, 0))
        entry = self.entry
        if entry.coordinator_epoch > marker.coordinator_epoch:
            message = (
                f"Invalid coordinator epoch for producerId {self.producer_id} at offset {offset} in partition "
                f"{self.topic_partition}: {marker.coordinator_epoch} (zombie), {entry.coordinator_epoch} (current)"
            )
            if self.origin != AppendOrigin.REPLICATION:
                raise KafkaError(ErrorCode.transaction_coordinator_fenced, message)
            _log.info(message)
        completed = None
        if entry.has_ongoing_txn:
            completed = CompletedTxn(
                self.producer_id,
                entry.current_txn_first_offset,
                offset,
                marker.control_type == ControlRecordType.ABORT,
            )
        entry.end_txn(epoch, marker.coordinator_epoch, timestamp)
        return completed
