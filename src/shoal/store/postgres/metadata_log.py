"""The metadata log, the controller lease and the cluster id on PostgreSQL (``MetadataStore``).

The same tables and semantics as ``shoal.store.sqlite.metadata_log`` (schema component
``metadata``), for several brokers on several hosts sharing one database:

* Offsets are taken inside the append transaction: it locks the lease row (``FOR UPDATE``),
  checks that the log ends at the offset the caller decided on (compare-and-append), then
  inserts from ``MAX(offset) + 1``. Every append goes through that one row lock, so appends are
  serialised, a stale decision writes nothing, and offsets are strictly increasing and gapless
  in commit order (a reader never sees offset n+1 without n).
* The lease's and the broker registry's time is the database server's clock (``clock_timestamp()``, milliseconds since the
  epoch), never the brokers': brokers on different hosts compare expiries on one clock. Taking
  the lease is one ``INSERT ... ON CONFLICT DO UPDATE ... WHERE`` statement, atomic against
  concurrent takers.
* The cluster id is inserted with ``ON CONFLICT DO NOTHING`` and then read, so brokers starting
  together on an empty database agree on one id.

Errors: when the database cannot be reached within ``timeout`` seconds, drops the connection or
cancels a statement (lock or idle-transaction timeouts), calls raise ``psycopg.OperationalError``
(one of ``UNAVAILABLE_ERRORS``) naming the store; the pool reconnects by itself, so the same
store object works again once the server is back. A write whose connection broke during its
commit may or may not have been applied, as with any database. Deadlocks and serialisation
failures are retried a few times.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

import psycopg

from shoal.metadata.log import (
    READ_LIMIT,
    BrokerRegistration,
    MetadataConflictError,
    new_cluster_id,
)
from shoal.metadata.records import MetadataRecord, decode_record, encode_record
from shoal.store.postgres.connection import PooledStore
from shoal.store.registry import check_lease_epoch, check_takeover

__all__ = ["PostgresMetadataStore"]


#: The ``schema_versions`` component of these tables (the SQLite backend's name too).
_COMPONENT = "metadata"

# "offset" is a reserved word in PostgreSQL: quoted everywhere, to keep the SQLite column name.
_MIGRATIONS = [
    """
    CREATE TABLE metadata_log (
        "offset" BIGINT PRIMARY KEY,
        controller_epoch BIGINT NOT NULL,
        record_type TEXT NOT NULL,
        payload TEXT NOT NULL,
        appended_at BIGINT NOT NULL
    );
    CREATE TABLE metadata_controller_lease (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        node_id INTEGER NOT NULL,
        epoch BIGINT NOT NULL,
        expires_at_ms BIGINT NOT NULL
    );
    CREATE TABLE metadata_cluster (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        cluster_id TEXT NOT NULL
    )
    """,
    # 2: compare-and-append (any broker decides a change; the lease no longer fences appends),
    # and the broker registry that brokers write themselves and the controller reads to fence.
    """
    ALTER TABLE metadata_log RENAME COLUMN controller_epoch TO writer_node_id;
    CREATE TABLE broker_registrations (
        node_id INTEGER PRIMARY KEY,
        incarnation_id TEXT NOT NULL,
        host TEXT NOT NULL,
        port INTEGER NOT NULL,
        rack TEXT,
        registered_at_ms BIGINT NOT NULL,
        heartbeat_at_ms BIGINT NOT NULL
    )
    """,
]

#: The database server's wall clock in milliseconds since the epoch (advances within a transaction).
_NOW_MS = "floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint"

_ACQUIRE = f"""
    INSERT INTO metadata_controller_lease AS lease (id, node_id, epoch, expires_at_ms)
    VALUES (1, %(node_id)s, 1, {_NOW_MS} + %(ttl_ms)s)
    ON CONFLICT (id) DO UPDATE
        SET node_id = excluded.node_id, epoch = lease.epoch + 1, expires_at_ms = excluded.expires_at_ms
        WHERE lease.node_id = excluded.node_id OR lease.expires_at_ms <= {_NOW_MS}
    RETURNING epoch
"""


class PostgresMetadataStore(PooledStore):
    """Metadata log, broker registry, controller lease and cluster id in one PostgreSQL database.

    ``timeout`` bounds, in seconds, how long a call waits for a connection (and each connection
    attempt) and for a row lock; a call that exceeds it raises ``psycopg.OperationalError``.
    Thread-safe: calls may come from several threads at once (each uses its own connection).
    """

    def __init__(self, url: str, *, timeout: float = 10.0, max_connections: int = 4) -> None:
        super().__init__(
            url,
            what="metadata store",
            component=_COMPONENT,
            migrations=_MIGRATIONS,
            timeout=timeout,
            max_connections=max_connections,
        )

    def cluster_id(self) -> str:
        """The cluster id, created on first use (once, however many brokers ask at the same time)."""

        def work(conn: psycopg.Connection) -> str:
            conn.execute(
                "INSERT INTO metadata_cluster (id, cluster_id) VALUES (1, %s) ON CONFLICT (id) DO NOTHING",
                (new_cluster_id(),),
            )
            # A separate statement: its snapshot sees a row a concurrent broker committed first.
            row = conn.execute("SELECT cluster_id FROM metadata_cluster WHERE id = 1").fetchone()
            assert row is not None
            return str(row[0])

        return self._run("reading the cluster id", work)

    def acquire_lease(self, node_id: int, ttl_ms: int) -> int | None:
        """Take or renew the controller lease; returns our epoch, or None if another node holds it.

        A node that takes over a lease (its own after a restart included) gets a new epoch,
        so a holder that lost it can tell (its renewals fail). Expiry is on the database server's clock.
        """

        def work(conn: psycopg.Connection) -> int | None:
            row = conn.execute(_ACQUIRE, {"node_id": node_id, "ttl_ms": ttl_ms}).fetchone()
            return None if row is None else int(row[0])

        return self._run("taking the controller lease", work)

    def renew_lease(self, node_id: int, epoch: int, ttl_ms: int) -> bool:
        """Extend the lease held under ``epoch`` to ``ttl_ms`` from now (server clock)."""

        def work(conn: psycopg.Connection) -> bool:
            cur = conn.execute(
                f"UPDATE metadata_controller_lease SET expires_at_ms = {_NOW_MS} + %s "
                "WHERE id = 1 AND node_id = %s AND epoch = %s",
                (ttl_ms, node_id, epoch),
            )
            return cur.rowcount == 1

        return self._run("renewing the controller lease", work)

    def append(
        self, records: Sequence[MetadataRecord], after_offset: int, writer: int, *, lease_epoch: int | None = None
    ) -> int:
        """Append records atomically right after ``after_offset``; returns the last offset.

        Raises MetadataConflictError, writing nothing, when the log has moved past it.
        """
        encoded = [encode_record(record) for record in records]

        def work(conn: psycopg.Connection) -> int:
            with conn.transaction():
                # The lease row lock serialises appends with each other.
                row = conn.execute(
                    f"SELECT {_NOW_MS}, epoch FROM metadata_controller_lease WHERE id = 1 FOR UPDATE"
                ).fetchone()
                if lease_epoch is not None:
                    check_lease_epoch(lease_epoch, None if row is None else int(row[1]))
                if row is None:
                    # No lease row yet (nobody ever took the lease): create it to lock on.
                    conn.execute(
                        "INSERT INTO metadata_controller_lease (id, node_id, epoch, expires_at_ms) "
                        "VALUES (1, -1, 0, 0) ON CONFLICT (id) DO NOTHING"
                    )
                    row = conn.execute(
                        f"SELECT {_NOW_MS}, epoch FROM metadata_controller_lease WHERE id = 1 FOR UPDATE"
                    ).fetchone()
                    assert row is not None
                now = row[0]
                max_row = conn.execute('SELECT COALESCE(MAX("offset"), -1) FROM metadata_log').fetchone()
                assert max_row is not None
                last = int(max_row[0])
                if last != after_offset:
                    raise MetadataConflictError(f"the metadata log is at offset {last}, not {after_offset}")
                if encoded:
                    with (
                        conn.cursor() as cur,
                        cur.copy(
                            'COPY metadata_log ("offset", writer_node_id, record_type, payload, appended_at) '
                            "FROM STDIN"
                        ) as copy,
                    ):
                        for record_type, payload in encoded:
                            last += 1
                            copy.write_row((last, writer, record_type, payload, now))
                return last

        return self._run("appending to the metadata log", work)

    def register_broker(
        self, node_id: int, incarnation_id: uuid.UUID, host: str, port: int, rack: str | None,
        session_timeout_ms: int,
    ) -> None:
        def work(conn: psycopg.Connection) -> None:
            with conn.transaction():
                # Registrations of one node id are serialised by its row (or the insert's conflict).
                row = conn.execute(
                    f"SELECT incarnation_id, host, port, {_NOW_MS} - heartbeat_at_ms FROM broker_registrations "
                    "WHERE node_id = %s FOR UPDATE",
                    (node_id,),
                ).fetchone()
                if row is not None and row[0] != str(incarnation_id):
                    check_takeover(node_id, row[0], row[1], row[2], int(row[3]), host, port, session_timeout_ms)
                conn.execute(
                    "INSERT INTO broker_registrations "
                    "(node_id, incarnation_id, host, port, rack, registered_at_ms, heartbeat_at_ms) "
                    f"VALUES (%s, %s, %s, %s, %s, {_NOW_MS}, {_NOW_MS}) ON CONFLICT (node_id) DO UPDATE SET "
                    "incarnation_id = excluded.incarnation_id, host = excluded.host, port = excluded.port, "
                    "rack = excluded.rack, registered_at_ms = excluded.registered_at_ms, "
                    "heartbeat_at_ms = excluded.heartbeat_at_ms",
                    (node_id, str(incarnation_id), host, port, rack),
                )

        self._run("registering the broker", work)

    def heartbeat_broker(self, node_id: int, incarnation_id: uuid.UUID) -> bool:
        def work(conn: psycopg.Connection) -> bool:
            cur = conn.execute(
                f"UPDATE broker_registrations SET heartbeat_at_ms = {_NOW_MS} "
                "WHERE node_id = %s AND incarnation_id = %s",
                (node_id, str(incarnation_id)),
            )
            return cur.rowcount == 1

        return self._run("sending the broker heartbeat", work)

    def unregister_broker(self, node_id: int, incarnation_id: uuid.UUID) -> None:
        def work(conn: psycopg.Connection) -> None:
            conn.execute(
                "DELETE FROM broker_registrations WHERE node_id = %s AND incarnation_id = %s",
                (node_id, str(incarnation_id)),
            )

        self._run("unregistering the broker", work)

    def broker_registrations(self) -> list[BrokerRegistration]:
        def work(conn: psycopg.Connection) -> list[tuple]:
            return conn.execute(
                f"SELECT node_id, incarnation_id, host, port, rack, {_NOW_MS} - heartbeat_at_ms "
                "FROM broker_registrations ORDER BY node_id"
            ).fetchall()

        return [
            BrokerRegistration(int(n), uuid.UUID(inc), host, int(port), rack, max(0, int(age)))
            for n, inc, host, port, rack, age in self._run("reading the broker registry", work)
        ]

    def read(self, from_offset: int, limit: int = READ_LIMIT) -> list[tuple[int, MetadataRecord]]:
        """Records with offset >= from_offset, in order."""

        def work(conn: psycopg.Connection) -> list[tuple[int, str, str]]:
            return conn.execute(
                'SELECT "offset", record_type, payload FROM metadata_log WHERE "offset" >= %s '
                'ORDER BY "offset" LIMIT %s',
                (from_offset, limit),
            ).fetchall()

        rows = self._run("reading the metadata log", work)
        return [(int(offset), decode_record(t, p)) for offset, t, p in rows]
