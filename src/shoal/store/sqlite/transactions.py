"""The transaction state store on SQLite: the ``transaction_state`` table of the metadata database.

One row per transactional id, the latest TransactionLogValue Kafka would keep in the compacted
``__transaction_state``. Beside the record: ``id_hash`` (``Utils.abs(transactionalId.hashCode())``)
and ``coordinator_partition`` (``id_hash`` modulo the store's partition count), indexed with the
id, so ``load(partition)`` is one index range scan in id order. Opening the store with another
partition count re-derives ``coordinator_partition`` in one statement from ``id_hash``, so no row
is ever filed under a partition no one loads.

The transaction's partitions are one JSON column rather than a child table: they are always
written and read with the rest of the record, never queried on their own, so one row per id
keeps every write a single statement (the compare-and-set is its ``WHERE``) and every load a
single query. Each write is one ``BEGIN IMMEDIATE`` transaction (``synchronous=FULL``): a write
that returns is on disk, and writers in other processes sharing the file wait for it.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path

from shoal.store.sqlite.connection import apply_schema, open_sqlite
from shoal.store.transactions import (
    ABSENT,
    DEFAULT_TRANSACTION_STATE_PARTITIONS,
    TRANSACTION_COLUMNS,
    StoredTransaction,
    expected_condition,
    java_string_hash,
    kafka_abs,
    transaction_from_row,
    transaction_to_row,
)

__all__ = ["SqliteTransactionStore"]

_COMPONENT = "transaction_coordinator"

_MIGRATIONS = [
    """
    CREATE TABLE transaction_state (
        transactional_id TEXT PRIMARY KEY,
        id_hash INTEGER NOT NULL,
        coordinator_partition INTEGER NOT NULL,
        producer_id INTEGER NOT NULL,
        prev_producer_id INTEGER NOT NULL,
        next_producer_id INTEGER NOT NULL,
        producer_epoch INTEGER NOT NULL,
        last_producer_epoch INTEGER NOT NULL,
        txn_timeout_ms INTEGER NOT NULL,
        state TEXT NOT NULL,
        partitions TEXT NOT NULL,
        txn_start_timestamp_ms INTEGER NOT NULL,
        txn_last_update_timestamp_ms INTEGER NOT NULL,
        client_transaction_version INTEGER NOT NULL
    ) WITHOUT ROWID;
    CREATE INDEX transaction_state_by_partition ON transaction_state (coordinator_partition, transactional_id)
    """,
]

_COLUMNS = ", ".join(TRANSACTION_COLUMNS)
_SELECT = f"SELECT {_COLUMNS} FROM transaction_state"
_INSERT = (
    f"INSERT INTO transaction_state ({_COLUMNS}, id_hash, coordinator_partition) "
    f"VALUES ({', '.join('?' * (len(TRANSACTION_COLUMNS) + 2))})"
)
_UPSERT = f"{_INSERT} ON CONFLICT (transactional_id) DO UPDATE SET " + ", ".join(
    f"{c} = excluded.{c}" for c in TRANSACTION_COLUMNS[1:]
)
_UPDATE_IF = (
    "UPDATE transaction_state SET "
    + ", ".join(f"{c} = ?" for c in TRANSACTION_COLUMNS[1:])
    + " WHERE transactional_id = ?"
)
_DELETE_IF = "DELETE FROM transaction_state WHERE transactional_id = ?"


class SqliteTransactionStore:
    """Transaction coordinator state in the ``transaction_state`` table of the metadata database.

    ``partitions`` is the number of ``__transaction_state`` partitions ``load(partition)`` files
    ids under. Thread-safe: calls are serialised on one connection.
    """

    def __init__(self, path: str | Path, *, partitions: int = DEFAULT_TRANSACTION_STATE_PARTITIONS) -> None:
        if partitions <= 0:
            raise ValueError(f"the transaction state topic needs at least one partition, not {partitions}")
        self._partitions = partitions
        self._conn = open_sqlite(path)
        self._lock = threading.Lock()
        try:
            apply_schema(self._conn, _COMPONENT, _MIGRATIONS)
            with self._write() as conn:
                conn.execute(
                    "UPDATE transaction_state SET coordinator_partition = id_hash % ? "
                    "WHERE coordinator_partition <> id_hash % ?",
                    (partitions, partitions),
                )
        except BaseException:
            self._conn.close()
            raise

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def load(self, partition: int | None = None) -> list[StoredTransaction]:
        """Every stored transaction, or those of one coordinator partition, in transactional id order."""
        with self._lock:
            if partition is None:
                rows = self._conn.execute(f"{_SELECT} ORDER BY transactional_id").fetchall()
            else:
                self._check_partition(partition)
                rows = self._conn.execute(
                    f"{_SELECT} WHERE coordinator_partition = ? ORDER BY transactional_id", (partition,)
                ).fetchall()
        return [transaction_from_row(row) for row in rows]

    def get(self, transactional_id: str) -> StoredTransaction | None:
        with self._lock:
            row = self._conn.execute(f"{_SELECT} WHERE transactional_id = ?", (transactional_id,)).fetchone()
        return None if row is None else transaction_from_row(row)

    def put(self, record: StoredTransaction, *, expected: tuple[int, ...] | None = None) -> bool:
        """Insert or replace ``record`` in one durable transaction; with ``expected``, only if the
        stored row has that producer id and epoch (``ABSENT``: only if there is none)."""
        values = transaction_to_row(record)
        id_hash = kafka_abs(java_string_hash(record.transactional_id))
        keyed = (*values, id_hash, id_hash % self._partitions)
        with self._lock, self._write() as conn:
            if expected is None:
                conn.execute(_UPSERT, keyed)
                return True
            if tuple(expected) == ABSENT:
                return (
                    conn.execute(f"{_INSERT} ON CONFLICT (transactional_id) DO NOTHING", keyed).rowcount == 1
                )
            guard, condition = expected_condition(expected, "?")
            return conn.execute(_UPDATE_IF + guard, (*values[1:], values[0], *condition)).rowcount == 1

    def delete(self, transactional_id: str, *, expected: tuple[int, ...] | None = None) -> bool:
        """Delete the row in one durable transaction, under the same condition as ``put``."""
        with self._lock, self._write() as conn:
            if expected is None:
                conn.execute("DELETE FROM transaction_state WHERE transactional_id = ?", (transactional_id,))
                return True
            if tuple(expected) == ABSENT:
                found = conn.execute(
                    "SELECT 1 FROM transaction_state WHERE transactional_id = ?", (transactional_id,)
                ).fetchone()
                return found is None
            guard, condition = expected_condition(expected, "?")
            return conn.execute(_DELETE_IF + guard, (transactional_id, *condition)).rowcount == 1

    def _check_partition(self, partition: int) -> None:
        if not 0 <= partition < self._partitions:
            raise ValueError(f"no transaction state partition {partition} (the store has {self._partitions})")

    @contextlib.contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One ``BEGIN IMMEDIATE`` transaction: committed when the block ends, rolled back if it raises."""
        conn = self._conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
