"""The tables ``shoal transactions`` prints and the decisions it takes on broker answers, kept
apart from the commands so they are tested without a broker.

Tables are Kafka's ``TransactionsCommand.prettyPrintTable``: every cell padded to its column's
widest value and followed by a tab, header row first, so scripts written for
``kafka-transactions.sh`` read ours. Which open transaction an ``abort --start-offset`` ends and
which transactions ``find-hanging`` reports follow Kafka's tool too.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from shoal.cli.kafka_client import TopicPartition
from shoal.cli.kafka_client.transaction_apis import ProducerState, TransactionDescription, TransactionListing

LIST_HEADERS = ("TransactionalId", "Coordinator", "ProducerId", "TransactionState")
DESCRIBE_HEADERS = (
    "CoordinatorId",
    "TransactionalId",
    "ProducerId",
    "ProducerEpoch",
    "TransactionState",
    "TransactionTimeoutMs",
    "CurrentTransactionStartTimeMs",
    "TransactionDurationMs",
    "TopicPartitions",
)
PRODUCERS_HEADERS = (
    "ProducerId",
    "ProducerEpoch",
    "LatestCoordinatorEpoch",
    "LastSequence",
    "LastTimestamp",
    "CurrentTransactionStartOffset",
)
HANGING_HEADERS = (
    "Topic",
    "Partition",
    "ProducerId",
    "ProducerEpoch",
    "CoordinatorEpoch",
    "StartOffset",
    "LastTimestamp",
    "Duration(min)",
)
_MS_PER_MINUTE = 60_000


def pretty_table(headers: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """Kafka's prettyPrintTable: cells padded to the column width, each followed by a tab."""
    table = [list(headers), *(list(r) for r in rows)]
    widths = [max(len(row[i]) for row in table) for i in range(len(headers))]
    return "\n".join("".join(cell.ljust(width) + "\t" for cell, width in zip(row, widths, strict=True)) for row in table)


# ------------------------------------------------------------------------------------------ list


def list_rows(by_broker: Mapping[int, Sequence[TransactionListing]]) -> list[list[str]]:
    """One row per listing, brokers in id order, each broker's listings as it answered them."""
    return [
        [t.transactional_id, str(broker), str(t.producer_id), t.state]
        for broker in sorted(by_broker)
        for t in by_broker[broker]
    ]


# -------------------------------------------------------------------------------------- describe


def describe_row(d: TransactionDescription, now_ms: int) -> list[str]:
    """The transaction's row; start time and duration are None when no transaction runs."""
    started = "None" if d.start_time_ms is None else str(d.start_time_ms)
    duration = "None" if d.start_time_ms is None else str(now_ms - d.start_time_ms)
    return [
        str(d.coordinator_id),
        d.transactional_id,
        str(d.producer_id),
        str(d.producer_epoch),
        d.state,
        str(d.timeout_ms),
        started,
        duration,
        ",".join(str(tp) for tp in d.partitions),
    ]


def producer_rows(producers: Iterable[ProducerState]) -> list[list[str]]:
    """``describe-producers``: no ongoing transaction prints None, as Kafka's tool does."""
    return [
        [
            str(p.producer_id),
            str(p.producer_epoch),
            str(p.coordinator_epoch),
            str(p.last_sequence),
            str(p.last_timestamp),
            "None" if p.current_txn_start_offset < 0 else str(p.current_txn_start_offset),
        ]
        for p in producers
    ]


# ----------------------------------------------------------------------------------------- abort


@dataclass(frozen=True, slots=True)
class AbortSpec:
    """Kafka's AbortTransactionSpec: which producer's transaction to end on which partition."""

    partition: TopicPartition
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int

    def __str__(self) -> str:
        return (
            f"AbortTransactionSpec(topicPartition={self.partition}, producerId={self.producer_id}, "
            f"producerEpoch={self.producer_epoch}, coordinatorEpoch={self.coordinator_epoch})"
        )


def explicit_abort_spec(partition: TopicPartition, producer_id: int, producer_epoch: int, coordinator_epoch: int) -> AbortSpec:
    """A producer that started a transaction and hung before any marker has coordinator epoch -1;
    Kafka's tool then sends 0, which no coordinator epoch is below."""
    return AbortSpec(partition, producer_id, producer_epoch, max(coordinator_epoch, 0))


def abort_spec_at(partition: TopicPartition, producers: Iterable[ProducerState], start_offset: int) -> AbortSpec | None:
    """The producer whose open transaction starts at ``start_offset`` (None: no such transaction),
    with its coordinator epoch, 0 when it has none yet."""
    for p in producers:
        if p.current_txn_start_offset >= 0 and p.current_txn_start_offset == start_offset:
            return AbortSpec(partition, p.producer_id, p.producer_epoch, max(p.coordinator_epoch, 0))
    return None


# ---------------------------------------------------------------------------------- find-hanging


@dataclass(frozen=True, slots=True)
class OpenTransaction:
    partition: TopicPartition
    producer: ProducerState


def open_transactions(
    producers: Mapping[TopicPartition, Sequence[ProducerState]], now_ms: int, max_timeout_ms: int
) -> list[OpenTransaction]:
    """The open transactions whose producer has written nothing for longer than any transaction
    may last (no coordinator would still let them run): candidates for hanging."""
    return [
        OpenTransaction(tp, p)
        for tp, states in producers.items()
        for p in states
        if p.current_txn_start_offset >= 0 and now_ms - p.last_timestamp > max_timeout_ms
    ]


def hanging_transactions(
    candidates: Sequence[OpenTransaction],
    transactional_ids: Mapping[int, str],
    descriptions: Mapping[str, TransactionDescription | None],
) -> list[OpenTransaction]:
    """Kafka's filter: a candidate hangs when no coordinator lists its producer id, when its
    transactional id is not found, or when the coordinator's transaction does not include the
    partition (it will never write a marker there)."""
    hanging = []
    for candidate in candidates:
        transactional_id = transactional_ids.get(candidate.producer.producer_id)
        description = descriptions.get(transactional_id) if transactional_id is not None else None
        if description is None or candidate.partition not in description.partitions:
            hanging.append(candidate)
    return hanging


def hanging_rows(hanging: Iterable[OpenTransaction], now_ms: int) -> list[list[str]]:
    return [
        [
            t.partition.topic,
            str(t.partition.partition),
            str(t.producer.producer_id),
            str(t.producer.producer_epoch),
            str(t.producer.coordinator_epoch),
            str(t.producer.current_txn_start_offset),
            str(t.producer.last_timestamp),
            str((now_ms - t.producer.last_timestamp) // _MS_PER_MINUTE),
        ]
        for t in hanging
    ]
