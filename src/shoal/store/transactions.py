"""The transaction state store seam: what the transaction coordinator keeps durable, and how it asks.

Kafka keeps it in the compacted ``__transaction_state`` topic: per transactional.id a
TransactionLogValue (producer id, previous and next producer id (KIP-890), producer epoch, last
producer epoch, transaction timeout, state, the partitions of the ongoing transaction, its start
and last update timestamps, and the client's transaction version). A store holds the latest value
of each transactional id, so loading it is what replaying the compacted topic gives Kafka's
TransactionStateManager; ``load(partition)`` is the load of one ``__transaction_state`` partition
when a broker becomes its coordinator.

Kafka's coordinators cannot overwrite each other: only a partition's leader appends to it. Shoal's
share one database, so writes are compare-and-set on the (producer id, producer epoch) the writer
last read, and a coordinator acting on a stale view gets ``False`` instead of overwriting a newer
state. Every write is durable when it returns. Backends live under ``shoal.store.<backend>``; the
coordinator only sees :class:`TransactionStore`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import astuple, dataclass
from typing import Any, Protocol

from shoal.protocol.key_partitions import java_string_hash, kafka_abs, transaction_partition

__all__ = [
    "ABSENT",
    "COMPLETE_ABORT",
    "COMPLETE_COMMIT",
    "DEAD",
    "DEFAULT_TRANSACTION_STATE_PARTITIONS",
    "EMPTY",
    "ONGOING",
    "PREPARE_ABORT",
    "PREPARE_COMMIT",
    "PREPARE_EPOCH_FENCE",
    "STATES",
    "TRANSACTION_COLUMNS",
    "StoredTransaction",
    "TransactionStore",
    "expected_condition",
    "java_string_hash",
    "kafka_abs",
    "transaction_from_row",
    "transaction_partition",
    "transaction_to_row",
]

# Kafka's TransactionState names (TransactionState.java), as the coordinator and tools print them.
EMPTY = "Empty"
ONGOING = "Ongoing"
PREPARE_COMMIT = "PrepareCommit"
PREPARE_ABORT = "PrepareAbort"
COMPLETE_COMMIT = "CompleteCommit"
COMPLETE_ABORT = "CompleteAbort"
DEAD = "Dead"
PREPARE_EPOCH_FENCE = "PrepareEpochFence"
STATES = frozenset(
    {
        EMPTY,
        ONGOING,
        PREPARE_COMMIT,
        PREPARE_ABORT,
        COMPLETE_COMMIT,
        COMPLETE_ABORT,
        DEAD,
        PREPARE_EPOCH_FENCE,
    }
)

#: Kafka's ``transaction.state.log.num.partitions`` default.
DEFAULT_TRANSACTION_STATE_PARTITIONS = 50

#: ``expected`` meaning "no row for this transactional id" (no producer id, no epoch).
ABSENT = (-1, -1)



@dataclass(frozen=True, slots=True)
class StoredTransaction:
    """One TransactionLogValue. ``partitions`` is kept sorted and without duplicates (Kafka's is a
    set), so two records of the same transaction compare equal whatever order they were built in."""

    transactional_id: str
    producer_id: int
    prev_producer_id: int  # -1: none
    next_producer_id: int  # -1: none (KIP-890: set while an epoch overflow hands over to a new id)
    producer_epoch: int
    last_producer_epoch: int  # -1: none
    txn_timeout_ms: int
    state: str  # one of STATES
    partitions: tuple[tuple[str, int], ...]  # (topic name, partition)
    txn_start_timestamp_ms: int  # -1: no ongoing transaction
    txn_last_update_timestamp_ms: int
    client_transaction_version: int  # 0..2 (2: KIP-890's transaction version 2)

    def __post_init__(self) -> None:
        if self.state not in STATES:
            raise ValueError(f"unknown transaction state {self.state!r} (one of {sorted(STATES)})")
        if not 0 <= self.client_transaction_version <= 2:
            raise ValueError(
                f"client transaction version must be 0..2, not {self.client_transaction_version}"
            )
        normalised = tuple(sorted({(str(topic), int(partition)) for topic, partition in self.partitions}))
        object.__setattr__(self, "partitions", normalised)


class TransactionStore(Protocol):
    """Durable transaction coordinator state, one row per transactional id. Calls block: the
    coordinator makes them off the event loop; implementations are thread-safe, and the
    compare-and-set holds across store objects and brokers sharing the database."""

    def load(self, partition: int | None = None) -> list[StoredTransaction]:
        """Every stored transaction, or those whose ``transaction_partition`` (over the store's
        partition count) is ``partition``; in transactional id order."""
        ...

    def get(self, transactional_id: str) -> StoredTransaction | None: ...

    def put(self, record: StoredTransaction, *, expected: tuple[int, ...] | None = None) -> bool:
        """Insert or replace ``record`` durably. With ``expected=(producer_id, producer_epoch)`` only
        if the stored row has them (``ABSENT``: only if there is no row), with
        ``(producer_id, producer_epoch, txn_last_update_timestamp_ms)`` only if it is exactly the
        record the writer read (a coordinator's same-epoch transitions, which the epoch alone cannot
        fence); ``False`` (nothing written) otherwise."""
        ...

    def delete(self, transactional_id: str, *, expected: tuple[int, ...] | None = None) -> bool:
        """Delete the row durably, under the same condition as ``put`` (``True`` without ``expected``,
        even when there was no row; with ``ABSENT``, ``True`` when there is none, and nothing to do)."""
        ...

    def close(self) -> None: ...


# -- the coordinator partition, exactly as Kafka computes it ---------------------------------------
# Mirrors shoal.cluster.placement (java_string_hash, kafka_abs): the store sits below the cluster
# layer and cannot import it; tests/unit/test_transaction_store_conformance.py checks they agree.


def expected_condition(expected: tuple[int, ...], placeholder: str) -> tuple[str, tuple[int, ...]]:
    """The ``WHERE`` clause (to append after the transactional id's) and its parameters for a
    compare-and-set on ``expected``: (producer id, epoch) or (producer id, epoch, last update ms)."""
    columns = ("producer_id", "producer_epoch", "txn_last_update_timestamp_ms")
    if len(expected) not in (2, 3):
        raise ValueError(f"expected is (producer id, epoch[, last update ms]), not {expected!r}")
    return "".join(f" AND {c} = {placeholder}" for c in columns[: len(expected)]), tuple(expected)


# -- the stored form, shared by the backends -------------------------------------------------------

#: The columns ``transaction_to_row`` gives and ``transaction_from_row`` reads, in their order.
TRANSACTION_COLUMNS = (
    "transactional_id",
    "producer_id",
    "prev_producer_id",
    "next_producer_id",
    "producer_epoch",
    "last_producer_epoch",
    "txn_timeout_ms",
    "state",
    "partitions",
    "txn_start_timestamp_ms",
    "txn_last_update_timestamp_ms",
    "client_transaction_version",
)


def transaction_to_row(record: StoredTransaction) -> tuple[Any, ...]:
    """The record's column values; ``partitions`` as compact JSON ``[["topic", 0], ...]``."""
    values = list(astuple(record))
    values[TRANSACTION_COLUMNS.index("partitions")] = json.dumps(
        [list(tp) for tp in record.partitions], separators=(",", ":"), ensure_ascii=False
    )
    return tuple(values)


def transaction_from_row(row: Sequence[Any]) -> StoredTransaction:
    values = list(row)
    at = TRANSACTION_COLUMNS.index("partitions")
    values[at] = tuple((topic, partition) for topic, partition in json.loads(values[at]))
    return StoredTransaction(*values)
