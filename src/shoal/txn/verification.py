"""KIP-890's produce verification: before a partition leader takes the first transactional batch
of a producer's transaction, it checks with the transaction coordinator that the partition was
added to that producer's ongoing transaction, so a late batch of a finished (or timed-out and
aborted) transaction can never open a transaction no marker will ever end.

Kafka's leader asks the coordinator with AddPartitionsToTxn ``verify_only``. Shoal's coordinators
write every transition to the shared transaction store before they answer the producer, so the
store holds what the coordinator would answer: the leader reads the transactional id's record
there and spares the round trip to another broker.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from shoal.protocol.errors import ErrorCode, KafkaError
from shoal.store.transactions import ONGOING, StoredTransaction, TransactionStore


class TransactionVerifier:
    def __init__(self, store: TransactionStore, run_blocking: Callable[..., Awaitable[object]]) -> None:
        self._store = store
        self._run_blocking = run_blocking

    async def verify(self, transactional_id: str, producer_id: int, producer_epoch: int, topic: str, partition: int) -> None:
        """Return if ``topic``-``partition`` is in the producer's ongoing transaction; raise the
        error the produce is answered with otherwise."""
        try:
            record: StoredTransaction | None = await self._run_blocking(self._store.get, transactional_id)  # type: ignore[assignment]
        except Exception as exc:
            # The coordinator's state cannot be read: retriable, as Kafka answers when the
            # coordinator cannot be reached.
            raise KafkaError(ErrorCode.not_enough_replicas, f"cannot verify the transaction: {exc}") from exc
        check_in_transaction(record, transactional_id, producer_id, producer_epoch, topic, partition)


def check_in_transaction(
    record: StoredTransaction | None,
    transactional_id: str,
    producer_id: int,
    producer_epoch: int,
    topic: str,
    partition: int,
) -> None:
    if record is None or record.producer_id != producer_id:
        raise KafkaError(
            ErrorCode.invalid_producer_id_mapping,
            f"producer id {producer_id} is not the one of transactional id {transactional_id}",
        )
    if record.producer_epoch != producer_epoch:
        raise KafkaError(
            ErrorCode.invalid_producer_epoch,
            f"producer epoch {producer_epoch} of {transactional_id} is not the current {record.producer_epoch}",
        )
    if record.state != ONGOING or (topic, partition) not in record.partitions:
        raise KafkaError(
            ErrorCode.invalid_txn_state,
            f"{topic}-{partition} is not in an ongoing transaction of {transactional_id} "
            f"(state {record.state}); add it with AddPartitionsToTxn first",
        )
