"""The metadata log, the controller lease and the cluster id on PostgreSQL (``MetadataStore``).

The same tables and semantics as ``shoal.store.sqlite.metadata_log`` (schema component
``metadata``), for several brokers on several hosts sharing one database:

* Offsets are taken inside the append transaction: it locks the lease row (``FOR UPDATE``),
  checks the caller's epoch against it, then inserts from ``MAX(offset) + 1``. Every append and
  every lease change goes through that one row lock, so appends are serialised, a stale and a
  current controller cannot interleave, a fenced append writes nothing, and offsets are
  strictly increasing and gapless in commit order (a reader never sees offset n+1 without n).
* The lease's time is the database server's clock (``clock_timestamp()``, milliseconds since the
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

from collections.abc import Sequence

import psycopg

from shoal.metadata.log import READ_LIMIT, FencedControllerError, new_cluster_id
from shoal.metadata.records import MetadataRecord, decode_record, encode_record
from shoal.store.postgres.connection import PooledStore

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
    """Metadata log, controller lease and cluster id in one PostgreSQL database.

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
        which fences appends made under the old one. Expiry is on the database server's clock.
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

    def append(self, records: Sequence[MetadataRecord], controller_epoch: int) -> int:
        """Append records atomically under the given lease epoch; returns the last offset.

        Raises FencedControllerError, writing nothing, when ``controller_epoch`` is not the
        active lease epoch.
        """
        encoded = [encode_record(record) for record in records]

        def work(conn: psycopg.Connection) -> int:
            with conn.transaction():
                # The lease row lock serialises appends with each other and with lease changes.
                row = conn.execute(
                    f"SELECT epoch, {_NOW_MS} FROM metadata_controller_lease WHERE id = 1 FOR UPDATE"
                ).fetchone()
                if row is None or row[0] != controller_epoch:
                    raise FencedControllerError(
                        f"controller epoch {controller_epoch} is fenced (active epoch {row[0] if row else None})"
                    )
                now = row[1]
                max_row = conn.execute('SELECT COALESCE(MAX("offset"), -1) FROM metadata_log').fetchone()
                assert max_row is not None
                last = int(max_row[0])
                if encoded:
                    with (
                        conn.cursor() as cur,
                        cur.copy(
                            'COPY metadata_log ("offset", controller_epoch, record_type, payload, appended_at) '
                            "FROM STDIN"
                        ) as copy,
                    ):
                        for record_type, payload in encoded:
                            last += 1
                            copy.write_row((last, controller_epoch, record_type, payload, now))
                return last

        return self._run("appending to the metadata log", work)

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
