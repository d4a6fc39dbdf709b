"""The transaction state store on PostgreSQL: the ``transaction_state`` table of the metadata database.

The same table and semantics as ``shoal.store.sqlite.transactions`` (schema component
``transaction_coordinator``): one row per transactional id, with ``id_hash`` and the indexed
``coordinator_partition`` that ``load(partition)`` reads, and the transaction's partitions as one
JSON text column (always written and read with the record, never queried on their own; a
child table would turn each write into several statements). Text rather than ``jsonb`` so both
backends store the same bytes.

Every write is one statement in its own transaction, committed with ``synchronous_commit=on``: a
write that returns is on the server's disk. The compare-and-set is that statement's condition
(``UPDATE``/``DELETE ... WHERE producer_id = .. AND producer_epoch = ..``, ``INSERT ... ON
CONFLICT DO NOTHING``): a second writer racing for the same row waits for the first's row lock
and then re-checks the condition against the row the first wrote, so at READ COMMITTED exactly
one of them matches. Ids are ``COLLATE "C"``, so loads come in the same order as SQLite's.

Errors: when the database cannot be reached within ``timeout`` seconds, drops the connection or
times out on a lock, calls raise ``psycopg.OperationalError`` naming the store; the pool
reconnects by itself.
"""

from __future__ import annotations

import psycopg

from shoal.store.postgres.connection import PooledStore
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

__all__ = ["PostgresTransactionStore"]

_COMPONENT = "transaction_coordinator"

_MIGRATIONS = [
    """
    CREATE TABLE transaction_state (
        transactional_id TEXT COLLATE "C" PRIMARY KEY,
        id_hash INTEGER NOT NULL,
        coordinator_partition INTEGER NOT NULL,
        producer_id BIGINT NOT NULL,
        prev_producer_id BIGINT NOT NULL,
        next_producer_id BIGINT NOT NULL,
        producer_epoch INTEGER NOT NULL,
        last_producer_epoch INTEGER NOT NULL,
        txn_timeout_ms INTEGER NOT NULL,
        state TEXT NOT NULL,
        partitions TEXT NOT NULL,
        txn_start_timestamp_ms BIGINT NOT NULL,
        txn_last_update_timestamp_ms BIGINT NOT NULL,
        client_transaction_version SMALLINT NOT NULL
    );
    CREATE INDEX transaction_state_by_partition ON transaction_state (coordinator_partition, transactional_id)
    """,
]

_COLUMNS = ", ".join(TRANSACTION_COLUMNS)
_SELECT = f"SELECT {_COLUMNS} FROM transaction_state"
_INSERT = (
    f"INSERT INTO transaction_state ({_COLUMNS}, id_hash, coordinator_partition) "
    f"VALUES ({', '.join(['%s'] * (len(TRANSACTION_COLUMNS) + 2))})"
)
_UPSERT = f"{_INSERT} ON CONFLICT (transactional_id) DO UPDATE SET " + ", ".join(
    f"{c} = excluded.{c}" for c in TRANSACTION_COLUMNS[1:]
)
_INSERT_IF_ABSENT = f"{_INSERT} ON CONFLICT (transactional_id) DO NOTHING"
_UPDATE_IF = (
    "UPDATE transaction_state SET "
    + ", ".join(f"{c} = %s" for c in TRANSACTION_COLUMNS[1:])
    + " WHERE transactional_id = %s"
)
_DELETE_IF = "DELETE FROM transaction_state WHERE transactional_id = %s"


class PostgresTransactionStore(PooledStore):
    """Transaction coordinator state in the ``transaction_state`` table of a PostgreSQL database.

    ``partitions`` is the number of ``__transaction_state`` partitions ``load(partition)`` files
    ids under. ``timeout`` bounds, in seconds, the wait for a connection (and each connection
    attempt) and for a row lock. Thread-safe: each call uses its own pooled connection.
    """

    def __init__(
        self,
        url: str,
        *,
        partitions: int = DEFAULT_TRANSACTION_STATE_PARTITIONS,
        timeout: float = 10.0,
        max_connections: int = 4,
    ) -> None:
        if partitions <= 0:
            raise ValueError(f"the transaction state topic needs at least one partition, not {partitions}")
        super().__init__(
            url,
            what="transaction store",
            component=_COMPONENT,
            migrations=_MIGRATIONS,
            timeout=timeout,
            max_connections=max_connections,
        )
        self._partitions = partitions
        try:
            self._execute(
                "filing transactions under their partitions",
                "UPDATE transaction_state SET coordinator_partition = id_hash %% %s "
                "WHERE coordinator_partition <> id_hash %% %s",
                (partitions, partitions),
            )
        except BaseException:
            self.close()
            raise

    def load(self, partition: int | None = None) -> list[StoredTransaction]:
        """Every stored transaction, or those of one coordinator partition, in transactional id order."""
        if partition is None:
            return self._select("loading transactions", "ORDER BY transactional_id", ())
        if not 0 <= partition < self._partitions:
            raise ValueError(f"no transaction state partition {partition} (the store has {self._partitions})")
        where = "WHERE coordinator_partition = %s ORDER BY transactional_id"
        return self._select(f"loading transaction partition {partition}", where, (partition,))

    def get(self, transactional_id: str) -> StoredTransaction | None:
        found = self._select("reading a transaction", "WHERE transactional_id = %s", (transactional_id,))
        return found[0] if found else None

    def put(self, record: StoredTransaction, *, expected: tuple[int, ...] | None = None) -> bool:
        """Insert or replace ``record`` in one durable transaction; with ``expected``, only if the
        stored row has that producer id and epoch (``ABSENT``: only if there is none)."""
        values = transaction_to_row(record)
        id_hash = kafka_abs(java_string_hash(record.transactional_id))
        keyed = (*values, id_hash, id_hash % self._partitions)
        if expected is None:
            self._execute("writing a transaction", _UPSERT, keyed)
            return True
        if tuple(expected) == ABSENT:
            return self._execute("creating a transaction", _INSERT_IF_ABSENT, keyed) == 1
        guard, condition = expected_condition(expected, "%s")
        return self._execute("updating a transaction", _UPDATE_IF + guard, (*values[1:], values[0], *condition)) == 1

    def delete(self, transactional_id: str, *, expected: tuple[int, ...] | None = None) -> bool:
        """Delete the row in one durable transaction, under the same condition as ``put``."""
        if expected is None:
            self._execute(
                "deleting a transaction",
                "DELETE FROM transaction_state WHERE transactional_id = %s",
                (transactional_id,),
            )
            return True
        if tuple(expected) == ABSENT:
            return self.get(transactional_id) is None
        guard, condition = expected_condition(expected, "%s")
        return self._execute("deleting a transaction", _DELETE_IF + guard, (transactional_id, *condition)) == 1

    def _select(self, doing: str, where: str, params: tuple) -> list[StoredTransaction]:
        sql = f"{_SELECT} {where}"
        rows = self._run(doing, lambda conn: conn.execute(sql, params).fetchall())  # type: ignore[arg-type] - trusted SQL
        return [transaction_from_row(row) for row in rows]

    def _execute(self, doing: str, statement: str, params: tuple) -> int:
        """One statement in its own (durable) transaction; the number of rows it changed."""

        def work(conn: psycopg.Connection) -> int:
            with conn.transaction(), conn.cursor() as cur:
                cur.execute(statement, params)  # type: ignore[arg-type] - trusted SQL from this module
                return cur.rowcount

        return self._run(doing, work)
