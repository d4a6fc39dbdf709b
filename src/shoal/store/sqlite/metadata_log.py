"""The metadata log, the broker registry, the controller lease and the cluster id on SQLite
(``MetadataStore``).

The tables usually sit in the database file of the Batch Coordinator (one
``schema_versions`` component each); several broker processes on one host share the file.
Each append is a compare-and-append inside one ``BEGIN IMMEDIATE`` transaction (SQLite's
single writer serialises them). Time is the host's wall clock, which every process sharing
the file reads.
"""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path

from shoal.metadata.log import (
    READ_LIMIT,
    BrokerRegistration,
    MetadataConflictError,
    new_cluster_id,
)
from shoal.metadata.records import MetadataRecord, decode_record, encode_record
from shoal.store.registry import check_lease_epoch, check_takeover
from shoal.store.sqlite.connection import apply_schema, open_sqlite

__all__ = ["SqliteMetadataStore"]

#: The ``schema_versions`` component of these tables: existing database files record it, keep it.
_COMPONENT = "metadata"

_MIGRATIONS = [
    """
    CREATE TABLE metadata_log (
        offset INTEGER PRIMARY KEY,
        controller_epoch INTEGER NOT NULL,
        record_type TEXT NOT NULL,
        payload TEXT NOT NULL,
        appended_at INTEGER NOT NULL
    );
    CREATE TABLE metadata_controller_lease (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        node_id INTEGER NOT NULL,
        epoch INTEGER NOT NULL,
        expires_at_ms INTEGER NOT NULL
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
        registered_at_ms INTEGER NOT NULL,
        heartbeat_at_ms INTEGER NOT NULL
    )
    """,
]


class SqliteMetadataStore:
    """Metadata log, controller lease and cluster id in one SQLite database."""

    def __init__(self, path: str | Path) -> None:
        self._conn = open_sqlite(path)
        self._lock = threading.Lock()
        apply_schema(self._conn, _COMPONENT, _MIGRATIONS)

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def cluster_id(self) -> str:
        """The cluster id, created on first use."""
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                row = self._conn.execute("SELECT cluster_id FROM metadata_cluster WHERE id = 1").fetchone()
                if row is None:
                    cluster_id = new_cluster_id()
                    self._conn.execute("INSERT INTO metadata_cluster (id, cluster_id) VALUES (1, ?)", (cluster_id,))
                else:
                    cluster_id = row[0]
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
        return cluster_id

    def acquire_lease(self, node_id: int, ttl_ms: int) -> int | None:
        """Take or renew the controller lease; returns our epoch, or None if another node holds it.

        A node that takes over a lease (its own after a restart included) gets a new epoch,
        so a holder that lost it can tell (its renewals fail).
        """
        now = int(time.time() * 1000)
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                row = self._conn.execute(
                    "SELECT node_id, epoch, expires_at_ms FROM metadata_controller_lease WHERE id = 1"
                ).fetchone()
                if row is None:
                    epoch = 1
                    self._conn.execute(
                        "INSERT INTO metadata_controller_lease (id, node_id, epoch, expires_at_ms) VALUES (1, ?, ?, ?)",
                        (node_id, epoch, now + ttl_ms),
                    )
                elif row[0] != node_id and row[2] > now:
                    self._conn.execute("ROLLBACK")
                    return None
                else:
                    epoch = row[1] + 1
                    self._conn.execute(
                        "UPDATE metadata_controller_lease SET node_id = ?, epoch = ?, expires_at_ms = ? WHERE id = 1",
                        (node_id, epoch, now + ttl_ms),
                    )
                self._conn.execute("COMMIT")
                return epoch
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise

    def renew_lease(self, node_id: int, epoch: int, ttl_ms: int) -> bool:
        now = int(time.time() * 1000)
        with self._lock:
            cur = self._conn.execute(
                "UPDATE metadata_controller_lease SET expires_at_ms = ? WHERE id = 1 AND node_id = ? AND epoch = ?",
                (now + ttl_ms, node_id, epoch),
            )
            return cur.rowcount == 1

    def append(
        self, records: Sequence[MetadataRecord], after_offset: int, writer: int, *, lease_epoch: int | None = None
    ) -> int:
        """Append records atomically right after ``after_offset``; returns the last offset."""
        now = _now_ms()
        with self._lock, self._transaction():
            if lease_epoch is not None:
                row = self._conn.execute("SELECT epoch FROM metadata_controller_lease WHERE id = 1").fetchone()
                check_lease_epoch(lease_epoch, None if row is None else row[0])
            last = self._conn.execute("SELECT COALESCE(MAX(offset), -1) FROM metadata_log").fetchone()[0]
            if last != after_offset:
                raise MetadataConflictError(f"the metadata log is at offset {last}, not {after_offset}")
            for record in records:
                last += 1
                record_type, payload = encode_record(record)
                self._conn.execute(
                    "INSERT INTO metadata_log (offset, writer_node_id, record_type, payload, appended_at) "
                    "VALUES (?, ?, ?, ?, ?)",
                    (last, writer, record_type, payload, now),
                )
            return int(last)

    def register_broker(
        self, node_id: int, incarnation_id: uuid.UUID, host: str, port: int, rack: str | None,
        session_timeout_ms: int,
    ) -> None:
        now = _now_ms()
        with self._lock, self._transaction():
            row = self._conn.execute(
                "SELECT incarnation_id, host, port, heartbeat_at_ms FROM broker_registrations WHERE node_id = ?",
                (node_id,),
            ).fetchone()
            if row is not None and row[0] != str(incarnation_id):
                check_takeover(node_id, row[0], row[1], row[2], now - row[3], host, port, session_timeout_ms)
            self._conn.execute(
                "INSERT INTO broker_registrations "
                "(node_id, incarnation_id, host, port, rack, registered_at_ms, heartbeat_at_ms) "
                "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (node_id) DO UPDATE SET "
                "incarnation_id = excluded.incarnation_id, host = excluded.host, port = excluded.port, "
                "rack = excluded.rack, registered_at_ms = excluded.registered_at_ms, "
                "heartbeat_at_ms = excluded.heartbeat_at_ms",
                (node_id, str(incarnation_id), host, port, rack, now, now),
            )

    def heartbeat_broker(self, node_id: int, incarnation_id: uuid.UUID) -> bool:
        with self._lock:
            cur = self._conn.execute(
                "UPDATE broker_registrations SET heartbeat_at_ms = ? WHERE node_id = ? AND incarnation_id = ?",
                (_now_ms(), node_id, str(incarnation_id)),
            )
            return cur.rowcount == 1

    def unregister_broker(self, node_id: int, incarnation_id: uuid.UUID) -> None:
        with self._lock:
            self._conn.execute(
                "DELETE FROM broker_registrations WHERE node_id = ? AND incarnation_id = ?",
                (node_id, str(incarnation_id)),
            )

    def broker_registrations(self) -> list[BrokerRegistration]:
        now = _now_ms()
        with self._lock:
            rows = self._conn.execute(
                "SELECT node_id, incarnation_id, host, port, rack, heartbeat_at_ms FROM broker_registrations "
                "ORDER BY node_id"
            ).fetchall()
        return [
            BrokerRegistration(node_id, uuid.UUID(inc), host, port, rack, max(0, now - beat))
            for node_id, inc, host, port, rack, beat in rows
        ]

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[None]:
        """One ``BEGIN IMMEDIATE`` write transaction (call with ``self._lock`` held)."""
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self._conn.execute("ROLLBACK")
            raise
        self._conn.execute("COMMIT")

    def read(self, from_offset: int, limit: int = READ_LIMIT) -> list[tuple[int, MetadataRecord]]:
        """Records with offset >= from_offset, in order."""
        with self._lock:
            rows = self._conn.execute(
                "SELECT offset, record_type, payload FROM metadata_log WHERE offset >= ? ORDER BY offset LIMIT ?",
                (from_offset, limit),
            ).fetchall()
        return [(offset, decode_record(t, p)) for offset, t, p in rows]


def _now_ms() -> int:
    return time.time_ns() // 1_000_000
