"""The remote log metadata of tiered storage on SQLite (``RemoteLogMetadataManager``): the
``remote_log_`` tables of the metadata database (``shoal.db``).

``remote_log_segments`` has one row per remote segment not yet DELETE_SEGMENT_FINISHED (finishing
its deletion deletes the row); ``remote_log_segment_epochs`` one row per leader epoch of a
segment, with the epoch's offset range in that segment, so the lookups by epoch and offset are
index range scans; ``remote_log_partition_deletes`` one row per partition whose remote data is
being deleted. The semantics (shared with ``shoal.store.postgres.remote_log_metadata``) are in
``shoal.store.remote_log_metadata``. Each write is one ``BEGIN IMMEDIATE`` transaction
(``synchronous=FULL``), so a call that returns is on disk.
"""

from __future__ import annotations

import sqlite3
import threading
import uuid
from collections.abc import Sequence
from pathlib import Path

from shoal.store.remote_log_metadata import (
    COPY_FINISHED,
    SEGMENT_COLUMNS,
    check_new_segment,
    check_update,
    epoch_ranges,
    segment_from_row,
)
from shoal.store.sqlite.connection import apply_schema, open_sqlite
from shoal.tiered.api import (
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    TopicIdPartition,
)

__all__ = ["SqliteRemoteLogMetadataManager"]

_COMPONENT = "remote_log_metadata"

_MIGRATIONS = [
    """
    CREATE TABLE remote_log_segments (
        segment_id BLOB PRIMARY KEY,
        topic_id BLOB NOT NULL,
        partition INTEGER NOT NULL,
        topic TEXT NOT NULL,
        start_offset INTEGER NOT NULL,
        end_offset INTEGER NOT NULL,
        max_timestamp_ms INTEGER NOT NULL,
        broker_id INTEGER NOT NULL,
        event_timestamp_ms INTEGER NOT NULL,
        segment_size INTEGER NOT NULL,
        state INTEGER NOT NULL,
        custom_metadata BLOB,
        tiered_epoch INTEGER NOT NULL,
        finished_seq INTEGER
    ) WITHOUT ROWID;
    CREATE INDEX remote_log_segments_by_offset ON remote_log_segments (topic_id, partition, start_offset);
    CREATE TABLE remote_log_segment_epochs (
        segment_id BLOB NOT NULL REFERENCES remote_log_segments (segment_id) ON DELETE CASCADE,
        topic_id BLOB NOT NULL,
        partition INTEGER NOT NULL,
        leader_epoch INTEGER NOT NULL,
        start_offset INTEGER NOT NULL,
        end_offset INTEGER NOT NULL,
        PRIMARY KEY (segment_id, leader_epoch)
    ) WITHOUT ROWID;
    CREATE INDEX remote_log_segment_epochs_by_epoch
        ON remote_log_segment_epochs (topic_id, partition, leader_epoch, start_offset);
    CREATE TABLE remote_log_partition_deletes (
        topic_id BLOB NOT NULL,
        partition INTEGER NOT NULL,
        topic TEXT NOT NULL,
        state INTEGER NOT NULL,
        event_timestamp_ms INTEGER NOT NULL,
        broker_id INTEGER NOT NULL,
        PRIMARY KEY (topic_id, partition)
    ) WITHOUT ROWID
    """,
    """
    CREATE TABLE remote_log_start_offsets (
        topic_id BLOB NOT NULL,
        partition INTEGER NOT NULL,
        log_start_offset INTEGER NOT NULL,
        PRIMARY KEY (topic_id, partition)
    ) WITHOUT ROWID
    """,
]

_SELECT = "SELECT " + ", ".join(f"s.{c}" for c in SEGMENT_COLUMNS) + " FROM remote_log_segments s"
_FINISHED = int(COPY_FINISHED)


class SqliteRemoteLogMetadataManager:
    """Remote log segment metadata in the ``remote_log_`` tables of the metadata database.
    Thread-safe: calls are serialised on one connection."""

    def __init__(self, path: str | Path) -> None:
        self._conn = open_sqlite(path)
        self._lock = threading.Lock()
        apply_schema(self._conn, _COMPONENT, _MIGRATIONS)

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    # -- writes ---------------------------------------------------------------------------------

    def add_remote_log_segment_metadata(self, metadata: RemoteLogSegmentMetadata) -> None:
        check_new_segment(metadata)
        tp = metadata.topic_id_partition
        sid = metadata.segment_id.id.bytes
        with self._lock, self._write() as conn:
            if conn.execute("SELECT 1 FROM remote_log_segments WHERE segment_id = ?", (sid,)).fetchone():
                raise ValueError(f"remote log segment {metadata.segment_id.id} already exists")
            conn.execute(
                "INSERT INTO remote_log_segments (segment_id, topic_id, partition, topic, start_offset, end_offset, "
                "max_timestamp_ms, broker_id, event_timestamp_ms, segment_size, state, custom_metadata, "
                "tiered_epoch) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    sid, tp.topic_id.bytes, tp.partition, tp.topic, metadata.start_offset, metadata.end_offset,
                    metadata.max_timestamp_ms, metadata.broker_id, metadata.event_timestamp_ms,
                    metadata.segment_size_in_bytes, int(metadata.state), metadata.custom_metadata,
                    metadata.tiered_epoch,
                ),
            )
            conn.executemany(
                "INSERT INTO remote_log_segment_epochs (segment_id, topic_id, partition, leader_epoch, start_offset, "
                "end_offset) VALUES (?, ?, ?, ?, ?, ?)",
                [(sid, tp.topic_id.bytes, tp.partition, e, first, last) for e, first, last in epoch_ranges(metadata)],
            )

    def update_remote_log_segment_metadata(self, update: RemoteLogSegmentMetadataUpdate) -> None:
        sid = update.segment_id.id.bytes
        with self._lock, self._write() as conn:
            row = conn.execute("SELECT state FROM remote_log_segments WHERE segment_id = ?", (sid,)).fetchone()
            check_update(update, None if row is None else RemoteLogSegmentState(row[0]))
            if update.state == RemoteLogSegmentState.DELETE_SEGMENT_FINISHED:
                conn.execute("DELETE FROM remote_log_segment_epochs WHERE segment_id = ?", (sid,))
                conn.execute("DELETE FROM remote_log_segments WHERE segment_id = ?", (sid,))
                return
            conn.execute(
                "UPDATE remote_log_segments SET state = ?, event_timestamp_ms = ?, broker_id = ?, "
                "custom_metadata = COALESCE(?, custom_metadata), finished_seq = CASE WHEN ? THEN "
                "(SELECT COALESCE(MAX(finished_seq), 0) + 1 FROM remote_log_segments) ELSE finished_seq END "
                "WHERE segment_id = ?",
                (
                    int(update.state), update.event_timestamp_ms, update.broker_id, update.custom_metadata,
                    update.state == COPY_FINISHED, sid,
                ),
            )

    def put_remote_partition_delete_metadata(self, metadata: RemotePartitionDeleteMetadata) -> None:
        tp = metadata.topic_id_partition
        with self._lock, self._write() as conn:
            conn.execute(
                "INSERT INTO remote_log_partition_deletes (topic_id, partition, topic, state, event_timestamp_ms, "
                "broker_id) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (topic_id, partition) DO UPDATE SET "
                "topic = excluded.topic, state = excluded.state, event_timestamp_ms = excluded.event_timestamp_ms, "
                "broker_id = excluded.broker_id",
                (tp.topic_id.bytes, tp.partition, tp.topic, int(metadata.state), metadata.event_timestamp_ms,
                 metadata.broker_id),
            )

    # -- reads ----------------------------------------------------------------------------------

    def remote_log_segment_metadata(
        self, tp: TopicIdPartition, leader_epoch: int, offset: int
    ) -> RemoteLogSegmentMetadata | None:
        with self._lock, self._read() as conn:
            row = conn.execute(
                f"{_SELECT} JOIN remote_log_segment_epochs e ON e.segment_id = s.segment_id "
                "WHERE e.topic_id = ? AND e.partition = ? AND e.leader_epoch = ? AND e.start_offset <= ? "
                "AND e.end_offset >= ? AND s.state = ? ORDER BY e.start_offset DESC, s.finished_seq DESC LIMIT 1",
                (tp.topic_id.bytes, tp.partition, leader_epoch, offset, offset, _FINISHED),
            ).fetchone()
            if row is None:
                return None
            return self._with_epochs(conn, tp, [row])[0]

    def highest_offset_for_epoch(self, tp: TopicIdPartition, leader_epoch: int) -> int | None:
        with self._lock:
            row = self._conn.execute(
                "SELECT MAX(e.end_offset) FROM remote_log_segment_epochs e JOIN remote_log_segments s "
                "ON s.segment_id = e.segment_id WHERE e.topic_id = ? AND e.partition = ? AND e.leader_epoch = ? "
                "AND s.state = ?",
                (tp.topic_id.bytes, tp.partition, leader_epoch, _FINISHED),
            ).fetchone()
        return None if row[0] is None else int(row[0])

    def list_remote_log_segments(
        self, tp: TopicIdPartition, leader_epoch: int | None = None
    ) -> list[RemoteLogSegmentMetadata]:
        with self._lock, self._read() as conn:
            if leader_epoch is None:
                rows = conn.execute(
                    f"{_SELECT} WHERE s.topic_id = ? AND s.partition = ? "
                    "ORDER BY s.start_offset, s.end_offset, s.segment_id",
                    (tp.topic_id.bytes, tp.partition),
                ).fetchall()
            else:
                rows = conn.execute(
                    f"{_SELECT} JOIN remote_log_segment_epochs e ON e.segment_id = s.segment_id "
                    "WHERE e.topic_id = ? AND e.partition = ? AND e.leader_epoch = ? AND s.state = ? "
                    "ORDER BY s.start_offset, s.end_offset, s.segment_id",
                    (tp.topic_id.bytes, tp.partition, leader_epoch, _FINISHED),
                ).fetchall()
            return self._with_epochs(conn, tp, rows)

    def remote_log_size(self, tp: TopicIdPartition) -> int:
        with self._lock:
            row = self._conn.execute(
                "SELECT COALESCE(SUM(segment_size), 0) FROM remote_log_segments "
                "WHERE topic_id = ? AND partition = ? AND state = ?",
                (tp.topic_id.bytes, tp.partition, _FINISHED),
            ).fetchone()
        return int(row[0])

    def remote_partition_delete_state(self, tp: TopicIdPartition) -> RemotePartitionDeleteState | None:
        with self._lock:
            row = self._conn.execute(
                "SELECT state FROM remote_log_partition_deletes WHERE topic_id = ? AND partition = ?",
                (tp.topic_id.bytes, tp.partition),
            ).fetchone()
        return None if row is None else RemotePartitionDeleteState(row[0])

    def put_log_start_offset(self, tp: TopicIdPartition, offset: int) -> None:
        with self._lock, self._write() as conn:
            conn.execute(
                "INSERT INTO remote_log_start_offsets (topic_id, partition, log_start_offset) VALUES (?, ?, ?) "
                "ON CONFLICT (topic_id, partition) DO UPDATE SET "
                "log_start_offset = MAX(log_start_offset, excluded.log_start_offset)",
                (tp.topic_id.bytes, tp.partition, offset),
            )

    def log_start_offset(self, tp: TopicIdPartition) -> int | None:
        with self._lock:
            row = self._conn.execute(
                "SELECT log_start_offset FROM remote_log_start_offsets WHERE topic_id = ? AND partition = ?",
                (tp.topic_id.bytes, tp.partition),
            ).fetchone()
        return None if row is None else int(row[0])

    def partitions_with_segments(self) -> list[TopicIdPartition]:
        with self._lock:
            rows = self._conn.execute(
                "SELECT topic_id, partition, MAX(topic) FROM remote_log_segments "
                "GROUP BY topic_id, partition ORDER BY topic_id, partition"
            ).fetchall()
        return [TopicIdPartition(uuid.UUID(bytes=bytes(r[0])), r[1], r[2]) for r in rows]

    # -- helpers --------------------------------------------------------------------------------

    def _with_epochs(
        self, conn: sqlite3.Connection, tp: TopicIdPartition, rows: Sequence[tuple]
    ) -> list[RemoteLogSegmentMetadata]:
        """The segments of ``rows`` with their leader epochs (read in the caller's transaction)."""
        if not rows:
            return []
        epochs: dict[bytes, dict[int, int]] = {bytes(r[0]): {} for r in rows}
        if len(rows) == 1:
            found = conn.execute(
                "SELECT segment_id, leader_epoch, start_offset FROM remote_log_segment_epochs "
                "WHERE segment_id = ? ORDER BY leader_epoch",
                (rows[0][0],),
            )
        else:
            found = conn.execute(
                "SELECT segment_id, leader_epoch, start_offset FROM remote_log_segment_epochs "
                "WHERE topic_id = ? AND partition = ? ORDER BY leader_epoch",
                (tp.topic_id.bytes, tp.partition),
            )
        for sid, epoch, first in found:
            wanted = epochs.get(bytes(sid))
            if wanted is not None:
                wanted[epoch] = first
        return [segment_from_row(_decode(r), epochs[bytes(r[0])]) for r in rows]

    def _write(self) -> _Transaction:
        return _Transaction(self._conn, "BEGIN IMMEDIATE")

    def _read(self) -> _Transaction:
        return _Transaction(self._conn, "BEGIN")


def _decode(row: tuple) -> tuple:
    """A row with the ids as ``uuid.UUID`` (SQLite stores their 16 bytes)."""
    return (uuid.UUID(bytes=bytes(row[0])), uuid.UUID(bytes=bytes(row[1])), *row[2:])


class _Transaction:
    """``BEGIN ...``; COMMIT on success, ROLLBACK on any exception (callers hold the lock)."""

    def __init__(self, conn: sqlite3.Connection, begin: str) -> None:
        self._conn = conn
        self._begin = begin

    def __enter__(self) -> sqlite3.Connection:
        self._conn.execute(self._begin)
        return self._conn

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        self._conn.execute("ROLLBACK" if exc_type is not None else "COMMIT")
