"""What the seam does for transactions: admit transactional batches (KIP-890's verification and
its guard) and route markers for ``__consumer_offsets`` partitions to the group coordinator.

Kafka's partition leader verifies the first transactional batch of each producer's transaction
with the transaction coordinator and keeps a verification guard until the partition's next
marker for that producer; a batch that waited while the marker was written is refused, so a
late batch cannot open a transaction no marker will end.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from shoal.partitions.api import AppendOutcome, PartitionRef, ProduceOptions, TxnMarker, ValidatedRecords
from shoal.protocol.errors import ErrorCode, KafkaError
from shoal.records.batch import BatchHeader
from shoal.txn.markers import GROUP_METADATA_TOPIC

__all__ = ["GROUP_METADATA_TOPIC", "GroupMarkers", "TransactionGate", "VerifyTransaction"]

#: Ends a producer's transactional offset commits in one ``__consumer_offsets`` partition.
GroupMarkers = Callable[[int, TxnMarker], Awaitable[ErrorCode]]
#: KIP-890 verification: raises the produce's error unless the partition is in the transaction
#: (transactional id, producer id, producer epoch, topic, partition).
VerifyTransaction = Callable[[str, int, int, str, int], Awaitable[None]]
#: ((partition key, producer id), producer epoch) of a verified transaction.
Guard = tuple[tuple[Any, int], int]


def transactional_batch(records: ValidatedRecords) -> BatchHeader | None:
    for _, batch in records.batches:
        if batch.is_transactional:
            return batch
    return None


class TransactionGate:
    def __init__(self) -> None:
        self._verify: VerifyTransaction | None = None
        self._group_markers: GroupMarkers | None = None
        #: (partition, producer id) -> producer epoch of transactions verified here: cleared by
        #: the partition's next marker for that producer.
        self._verified: dict[tuple[Any, int], int] = {}

    def serve(self, verify: VerifyTransaction, group_markers: GroupMarkers) -> None:
        self._verify = verify
        self._group_markers = group_markers

    def check(self, ref: PartitionRef, records: ValidatedRecords, options: ProduceOptions) -> None:
        """Refuse transactional batches a partition cannot take: without the request's
        transactional id they could not be verified, and Kafka refuses them
        (TRANSACTIONAL_ID_AUTHORIZATION_FAILED, KafkaApis.handleProduceRequest)."""
        if transactional_batch(records) is None:
            return
        if self._verify is None:
            raise KafkaError(ErrorCode.invalid_record, "This broker serves no transactions")
        if options.transactional_id is None:
            raise KafkaError(
                ErrorCode.transactional_id_authorization_failed,
                "Transactional records need the produce request's transactional id",
            )

    def verified_already(self, ref: PartitionRef, records: ValidatedRecords, options: ProduceOptions) -> bool:
        """True unless the records open a transaction this partition has not verified yet."""
        batch = transactional_batch(records)
        if batch is None:
            return True
        if ref.topic.is_diskless:
            return False
        return self._verified.get((ref.wake_key, batch.producer_id)) == batch.producer_epoch

    async def verify(self, ref: PartitionRef, records: ValidatedRecords, options: ProduceOptions) -> Guard | None:
        """Verify a transactional batch with its coordinator once per transaction and partition;
        the guard ``check_guard`` checks again right before the append."""
        batch = transactional_batch(records)
        if batch is None or options.transactional_id is None or self._verify is None:
            return None
        if ref.topic.is_diskless:
            # Any broker takes a diskless partition's batches and another writes its markers:
            # no guard here would see the transaction end, so every request is verified.
            await self._verify(options.transactional_id, batch.producer_id, batch.producer_epoch, ref.name, ref.partition)
            return None
        key = (ref.wake_key, batch.producer_id)
        if self._verified.get(key) != batch.producer_epoch:
            await self._verify(options.transactional_id, batch.producer_id, batch.producer_epoch, ref.name, ref.partition)
            self._verified[key] = batch.producer_epoch
        return key, batch.producer_epoch

    def check_guard(self, ref: PartitionRef, guard: Guard | None) -> None:
        if guard is not None and self._verified.get(guard[0]) != guard[1]:
            raise KafkaError(
                ErrorCode.invalid_txn_state,
                f"the transaction of producer {guard[0][1]} on {ref.name}-{ref.partition} ended before "
                "this batch was appended",
            )

    def marker_written(self, ref: PartitionRef, producer_id: int) -> None:
        """The transaction ends here: the producer's next transactional batch is verified again."""
        self._verified.pop((ref.wake_key, producer_id), None)

    async def group_marker(self, partition: int, marker: TxnMarker) -> AppendOutcome:
        if self._group_markers is None:
            return AppendOutcome().fail(ErrorCode.unknown_topic_or_partition, "no group coordinator here")
        error = await self._group_markers(partition, marker)
        return AppendOutcome() if error == ErrorCode.none else AppendOutcome().fail(error, error.name)
