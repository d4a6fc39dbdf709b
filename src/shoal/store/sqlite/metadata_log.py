"""The metadata log, the controller lease and the cluster id on SQLite (``MetadataStore``).

The tables usually sit in the database file of the Batch Coordinator (one
``schema_versions`` component each); the controller's appends are fenced by the lease
epoch inside one ``BEGIN IMMEDIATE`` transaction each.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from pathlib import Path

from shoal.metadata.log import READ_LIMIT, FencedControllerError, new_cluster_id
from shoal.metadata.records import MetadataRecord, decode_record, encode_record
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
        which fences appends made under the old one.
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

    def append(self, records: Sequence[MetadataRecord], controller_epoch: int) -> int:
        """Append records atomically under the given lease epoch; returns the last offset."""
        now = int(time.time() * 1000)
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                row = self._conn.execute("SELECT epoch FROM metadata_controller_lease WHERE id = 1").fetchone()
                if row is None or row[0] != controller_epoch:
                    raise FencedControllerError(
                        f"controller epoch {controller_epoch} is fenced (active epoch {row[0] if row else None})"
                    )
                last = self._conn.execute("SELECT COALESCE(MAX(offset), -1) FROM metadata_log").fetchone()[0]
                for record in records:
                    last += 1
                    record_type, payload = encode_record(record)
                    self._conn.execute(
                        "INSERT INTO metadata_log (offset, controller_epoch, record_type, payload, appended_at) "
                        "VALUES (?, ?, ?, ?, ?)",
                        (last, controller_epoch, record_type, payload, now),
                    )
                self._conn.execute("COMMIT")
                return last
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise

    def read(self, from_offset: int, limit: int = READ_LIMIT) -> list[tuple[int, MetadataRecord]]:
        """Records with offset >= from_offset, in order."""
        with self._lock:
            rows = self._conn.execute(
                "SELECT offset, record_type, payload FROM metadata_log WHERE offset >= ? ORDER BY offset LIMIT ?",
                (from_offset, limit),
            ).fetchall()
        return [(offset, decode_record(t, p)) for offset, t, p in rows]
