"""A transactional id's state transitions, as Kafka's TransactionMetadata makes them.

Each function takes the current record and returns the next one (records are immutable); the
coordinator decides which transition a request asks for and writes the result durably before
it answers. Only transaction versions 0 and 1 are run (the client adds partitions with
AddPartitionsToTxn and the epoch is bumped only by InitProducerId and by fencing).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from shoal.protocol.errors import ErrorCode, KafkaError
from shoal.store.transactions import (
    COMPLETE_ABORT,
    COMPLETE_COMMIT,
    EMPTY,
    ONGOING,
    PREPARE_ABORT,
    PREPARE_COMMIT,
    StoredTransaction,
)

#: ``RecordBatch.NO_PRODUCER_ID`` / ``NO_PRODUCER_EPOCH``.
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
#: Kafka's TransactionMetadata.isEpochExhausted: the last epoch is kept for fencing.
MAX_PRODUCER_EPOCH = 32767


def is_epoch_exhausted(epoch: int) -> bool:
    return epoch >= MAX_PRODUCER_EPOCH - 1


def new_transaction(transactional_id: str, producer_id: int, timeout_ms: int, now_ms: int) -> StoredTransaction:
    """A transactional id seen for the first time: Empty, before its first epoch."""
    return StoredTransaction(
        transactional_id=transactional_id,
        producer_id=producer_id,
        prev_producer_id=NO_PRODUCER_ID,
        next_producer_id=NO_PRODUCER_ID,
        producer_epoch=NO_PRODUCER_EPOCH,
        last_producer_epoch=NO_PRODUCER_EPOCH,
        txn_timeout_ms=timeout_ms,
        state=EMPTY,
        partitions=(),
        txn_start_timestamp_ms=-1,
        txn_last_update_timestamp_ms=now_ms,
        client_transaction_version=0,
    )


def increment_epoch(
    txn: StoredTransaction, timeout_ms: int, expected_epoch: int | None, now_ms: int
) -> StoredTransaction:
    """InitProducerId on a finished transaction: the next epoch, Empty (prepareIncrementProducerEpoch).

    With the epoch the producer holds (KIP-360), a retry whose answer was lost gets the epoch it
    was already given; any other epoch is a zombie's (PRODUCER_FENCED)."""
    if expected_epoch is None or txn.producer_epoch == NO_PRODUCER_EPOCH:
        epoch, last = txn.producer_epoch + 1, NO_PRODUCER_EPOCH
    elif expected_epoch == txn.producer_epoch:
        epoch, last = txn.producer_epoch + 1, txn.producer_epoch
    elif expected_epoch == txn.last_producer_epoch:
        epoch, last = txn.producer_epoch, txn.last_producer_epoch
    else:
        raise KafkaError(
            ErrorCode.producer_fenced,
            f"producer epoch {expected_epoch} of {txn.transactional_id} is not the current {txn.producer_epoch}",
        )
    if is_epoch_exhausted(txn.producer_epoch) and epoch != txn.producer_epoch:
        raise KafkaError(ErrorCode.producer_fenced, f"the producer epoch of {txn.transactional_id} is exhausted")
    return _empty(replace(txn, producer_epoch=epoch, last_producer_epoch=last), timeout_ms, now_ms)


def rotate_producer_id(
    txn: StoredTransaction, new_producer_id: int, timeout_ms: int, now_ms: int, record_last_epoch: bool
) -> StoredTransaction:
    """The epoch is exhausted: a new producer id at epoch 0 (prepareProducerIdRotation)."""
    return _empty(
        replace(
            txn,
            producer_id=new_producer_id,
            prev_producer_id=txn.producer_id,
            producer_epoch=0,
            last_producer_epoch=txn.producer_epoch if record_last_epoch else NO_PRODUCER_EPOCH,
        ),
        timeout_ms,
        now_ms,
    )


def _empty(txn: StoredTransaction, timeout_ms: int, now_ms: int) -> StoredTransaction:
    return replace(
        txn, txn_timeout_ms=timeout_ms, state=EMPTY, partitions=(), txn_start_timestamp_ms=-1,
        txn_last_update_timestamp_ms=now_ms,
    )


def fence_epoch(txn: StoredTransaction) -> StoredTransaction:
    """An Ongoing transaction whose producer is replaced or timed out: the epoch moves on so the old
    producer is fenced, and the abort that follows is written with it (prepareFenceProducerEpoch)."""
    epoch = txn.producer_epoch if txn.producer_epoch >= MAX_PRODUCER_EPOCH else txn.producer_epoch + 1
    return replace(txn, producer_epoch=epoch, last_producer_epoch=NO_PRODUCER_EPOCH)


def add_partitions(txn: StoredTransaction, partitions: Iterable[tuple[str, int]], now_ms: int) -> StoredTransaction:
    """AddPartitionsToTxn / AddOffsetsToTxn: the transaction is Ongoing from its first partition."""
    starting = txn.state in (EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT)
    return replace(
        txn,
        state=ONGOING,
        partitions=(*(() if starting else txn.partitions), *partitions),
        txn_start_timestamp_ms=now_ms if starting else txn.txn_start_timestamp_ms,
        txn_last_update_timestamp_ms=now_ms,
    )


def prepare_end(txn: StoredTransaction, commit: bool, now_ms: int) -> StoredTransaction:
    """EndTxn: decided; the markers are sent once this is durable."""
    return replace(txn, state=PREPARE_COMMIT if commit else PREPARE_ABORT, txn_last_update_timestamp_ms=now_ms)


def complete(txn: StoredTransaction, now_ms: int) -> StoredTransaction:
    """Every partition has its marker: CompleteCommit / CompleteAbort, with no partitions left."""
    state = COMPLETE_COMMIT if txn.state == PREPARE_COMMIT else COMPLETE_ABORT
    return replace(txn, state=state, partitions=(), txn_last_update_timestamp_ms=now_ms)
