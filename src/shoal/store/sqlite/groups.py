"""The group and offset store on SQLite: the ``group_`` tables of the metadata database (``shoal.db``).

One row per key Kafka writes to ``__consumer_offsets``: ``group_offsets`` per group and
partition, ``group_metadata`` per group and ``group_members`` per member of its latest
stored generation; ``group_pending_offsets`` per group, producer id and partition for the
offsets of transactions not completed yet (schema version 2). Each batch of mutations is one ``BEGIN IMMEDIATE`` transaction
(``synchronous=FULL``), so a commit that returns is on disk.
"""

from __future__ import annotations

import sqlite3
import threading
import uuid
from collections.abc import Sequence
from pathlib import Path

from shoal.store.groups import (
    CommittedOffset,
    CompleteTransaction,
    DeleteGroup,
    DeleteOffsets,
    Mutation,
    PendingOffset,
    PutGroup,
    PutOffsets,
    PutPendingOffsets,
    StoredGroup,
    StoredMember,
)
from shoal.store.sqlite.connection import apply_schema, open_sqlite

__all__ = ["SqliteGroupStore"]

_COMPONENT = "group_coordinator"

_MIGRATIONS = [
    """
    CREATE TABLE group_metadata (
        group_id TEXT PRIMARY KEY,
        protocol_type TEXT,
        protocol_name TEXT,
        generation INTEGER NOT NULL,
        leader TEXT,
        state_timestamp_ms INTEGER NOT NULL
    );
    CREATE TABLE group_members (
        group_id TEXT NOT NULL,
        member_id TEXT NOT NULL,
        position INTEGER NOT NULL,
        group_instance_id TEXT,
        client_id TEXT NOT NULL,
        client_host TEXT NOT NULL,
        rebalance_timeout_ms INTEGER NOT NULL,
        session_timeout_ms INTEGER NOT NULL,
        subscription BLOB NOT NULL,
        assignment BLOB NOT NULL,
        PRIMARY KEY (group_id, member_id)
    ) WITHOUT ROWID;
    CREATE TABLE group_offsets (
        group_id TEXT NOT NULL,
        topic TEXT NOT NULL,
        partition INTEGER NOT NULL,
        topic_id BLOB,
        committed_offset INTEGER NOT NULL,
        leader_epoch INTEGER NOT NULL,
        metadata TEXT NOT NULL,
        commit_timestamp_ms INTEGER NOT NULL,
        expire_timestamp_ms INTEGER,
        PRIMARY KEY (group_id, topic, partition)
    ) WITHOUT ROWID
    """,
    # 2: transactional offset commits awaiting their transaction's marker.
    """
    CREATE TABLE IF NOT EXISTS group_pending_offsets (
        group_id TEXT NOT NULL,
        producer_id INTEGER NOT NULL,
        topic TEXT NOT NULL,
        partition INTEGER NOT NULL,
        topic_id BLOB,
        committed_offset INTEGER NOT NULL,
        leader_epoch INTEGER NOT NULL,
        metadata TEXT NOT NULL,
        commit_timestamp_ms INTEGER NOT NULL,
        expire_timestamp_ms INTEGER,
        write_sequence INTEGER NOT NULL,
        superseded INTEGER NOT NULL DEFAULT 0,
        PRIMARY KEY (group_id, producer_id, topic, partition)
    ) WITHOUT ROWID;
    CREATE INDEX IF NOT EXISTS group_pending_offsets_by_partition
        ON group_pending_offsets (group_id, topic, partition);
    CREATE INDEX IF NOT EXISTS group_pending_offsets_by_producer ON group_pending_offsets (producer_id)
    """,
]

_PENDING_COLUMNS = (
    "group_id, producer_id, topic, partition, topic_id, committed_offset, leader_epoch, metadata, "
    "commit_timestamp_ms, expire_timestamp_ms, write_sequence, superseded"
)
_OFFSET_UPSERT = (
    "ON CONFLICT (group_id, topic, partition) DO UPDATE SET topic_id = excluded.topic_id, "
    "committed_offset = excluded.committed_offset, leader_epoch = excluded.leader_epoch, "
    "metadata = excluded.metadata, commit_timestamp_ms = excluded.commit_timestamp_ms, "
    "expire_timestamp_ms = excluded.expire_timestamp_ms"
)
_PUT_PENDING = (
    f"INSERT INTO group_pending_offsets ({_PENDING_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
    "ON CONFLICT (group_id, producer_id, topic, partition) DO UPDATE SET topic_id = excluded.topic_id, "
    "committed_offset = excluded.committed_offset, leader_epoch = excluded.leader_epoch, "
    "metadata = excluded.metadata, commit_timestamp_ms = excluded.commit_timestamp_ms, "
    "expire_timestamp_ms = excluded.expire_timestamp_ms, write_sequence = excluded.write_sequence, "
    "superseded = excluded.superseded"
)
# COMMIT: the producer's pending offsets not superseded become committed offsets (the SELECT's WHERE
# keeps SQLite from reading ON CONFLICT as a join constraint) ...
_MATERIALISE = (
    "INSERT INTO group_offsets (group_id, topic, partition, topic_id, committed_offset, leader_epoch, metadata, "
    "commit_timestamp_ms, expire_timestamp_ms) SELECT group_id, topic, partition, topic_id, committed_offset, "
    "leader_epoch, metadata, commit_timestamp_ms, expire_timestamp_ms FROM group_pending_offsets "
    f"WHERE group_id = ? AND producer_id = ? AND superseded = 0 {_OFFSET_UPSERT}"
)
# ... and supersede the other producers' pending offsets of those partitions written before them.
_SUPERSEDE_OLDER = (
    "UPDATE group_pending_offsets SET superseded = 1 WHERE group_id = ? AND producer_id <> ? AND EXISTS ("
    "SELECT 1 FROM group_pending_offsets AS c WHERE c.group_id = group_pending_offsets.group_id "
    "AND c.producer_id = ? AND c.topic = group_pending_offsets.topic "
    "AND c.partition = group_pending_offsets.partition "
    "AND c.write_sequence > group_pending_offsets.write_sequence)"
)


class SqliteGroupStore:
    """Group metadata and committed offsets in the ``group_`` tables of the metadata database."""

    def __init__(self, path: str | Path) -> None:
        self._conn = open_sqlite(path)
        self._lock = threading.Lock()
        apply_schema(self._conn, _COMPONENT, _MIGRATIONS)

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def load(self) -> tuple[list[StoredGroup], dict[str, list[CommittedOffset]]]:
        """Every stored group and every committed offset (grouped by group id), read on one snapshot."""
        with self._lock:
            self._conn.execute("BEGIN")
            try:
                group_rows = self._conn.execute(
                    "SELECT group_id, protocol_type, protocol_name, generation, leader, state_timestamp_ms "
                    "FROM group_metadata ORDER BY group_id"
                ).fetchall()
                member_rows = self._conn.execute(
                    "SELECT group_id, member_id, group_instance_id, client_id, client_host, rebalance_timeout_ms, "
                    "session_timeout_ms, subscription, assignment FROM group_members ORDER BY group_id, position"
                ).fetchall()
                offset_rows = self._conn.execute(
                    "SELECT group_id, topic, partition, topic_id, committed_offset, leader_epoch, metadata, "
                    "commit_timestamp_ms, expire_timestamp_ms FROM group_offsets ORDER BY group_id, topic, partition"
                ).fetchall()
            finally:
                self._conn.execute("COMMIT")
        members: dict[str, list[StoredMember]] = {}
        for row in member_rows:
            members.setdefault(row[0], []).append(
                StoredMember(row[1], row[2], row[3], row[4], row[5], row[6], bytes(row[7]), bytes(row[8]))
            )
        groups = [
            StoredGroup(row[0], row[1], row[2], row[3], row[4], row[5], tuple(members.get(row[0], ())))
            for row in group_rows
        ]
        offsets: dict[str, list[CommittedOffset]] = {}
        for row in offset_rows:
            offsets.setdefault(row[0], []).append(
                CommittedOffset(
                    topic=row[1],
                    partition=row[2],
                    topic_id=None if row[3] is None else uuid.UUID(bytes=bytes(row[3])),
                    offset=row[4],
                    leader_epoch=row[5],
                    metadata=row[6],
                    commit_timestamp_ms=row[7],
                    expire_timestamp_ms=row[8],
                )
            )
        return groups, offsets

    def load_pending(self, producer_id: int | None = None) -> dict[str, list[PendingOffset]]:
        """Every pending offset (of one producer, given ``producer_id``), grouped by group id."""
        query = f"SELECT {_PENDING_COLUMNS} FROM group_pending_offsets"
        params: tuple[int, ...] = ()
        if producer_id is not None:
            query += " WHERE producer_id = ?"
            params = (producer_id,)
        with self._lock:
            rows = self._conn.execute(query + " ORDER BY group_id, producer_id, topic, partition", params).fetchall()
        pending: dict[str, list[PendingOffset]] = {}
        for row in rows:
            pending.setdefault(row[0], []).append(
                PendingOffset(
                    producer_id=row[1],
                    offset=CommittedOffset(
                        topic=row[2],
                        partition=row[3],
                        topic_id=None if row[4] is None else uuid.UUID(bytes=bytes(row[4])),
                        offset=row[5],
                        leader_epoch=row[6],
                        metadata=row[7],
                        commit_timestamp_ms=row[8],
                        expire_timestamp_ms=row[9],
                    ),
                    write_sequence=row[10],
                    superseded=bool(row[11]),
                )
            )
        return pending

    def apply(self, mutations: Sequence[Mutation]) -> None:
        """Apply the mutations in order, in one durable transaction (all or nothing)."""
        with self._lock:
            conn = self._conn
            conn.execute("BEGIN IMMEDIATE")
            try:
                for mutation in mutations:
                    _apply_one(conn, mutation)
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise


def _apply_one(conn: sqlite3.Connection, mutation: Mutation) -> None:
    if isinstance(mutation, PutOffsets):
        conn.executemany(
            "INSERT INTO group_offsets (group_id, topic, partition, topic_id, committed_offset, leader_epoch, "
            f"metadata, commit_timestamp_ms, expire_timestamp_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) {_OFFSET_UPSERT}",
            [
                (
                    mutation.group_id,
                    o.topic,
                    o.partition,
                    None if o.topic_id is None else o.topic_id.bytes,
                    o.offset,
                    o.leader_epoch,
                    o.metadata,
                    o.commit_timestamp_ms,
                    o.expire_timestamp_ms,
                )
                for o in mutation.offsets
            ],
        )
        if mutation.offsets and _has_pending(conn, mutation.group_id):
            conn.executemany(
                "UPDATE group_pending_offsets SET superseded = 1 WHERE group_id = ? AND topic = ? AND partition = ?",
                [(mutation.group_id, o.topic, o.partition) for o in mutation.offsets],
            )
    elif isinstance(mutation, DeleteOffsets):
        for table in ("group_offsets", "group_pending_offsets"):
            conn.executemany(
                f"DELETE FROM {table} WHERE group_id = ? AND topic = ? AND partition = ?",
                [(mutation.group_id, topic, partition) for topic, partition in mutation.partitions],
            )
    elif isinstance(mutation, PutPendingOffsets):
        conn.executemany(
            _PUT_PENDING,
            [
                (
                    mutation.group_id,
                    p.producer_id,
                    p.offset.topic,
                    p.offset.partition,
                    None if p.offset.topic_id is None else p.offset.topic_id.bytes,
                    p.offset.offset,
                    p.offset.leader_epoch,
                    p.offset.metadata,
                    p.offset.commit_timestamp_ms,
                    p.offset.expire_timestamp_ms,
                    p.write_sequence,
                    int(p.superseded),
                )
                for p in mutation.offsets
            ],
        )
    elif isinstance(mutation, CompleteTransaction):
        group_id, producer_id = mutation.group_id, mutation.producer_id
        if mutation.commit:
            conn.execute(_MATERIALISE, (group_id, producer_id))
            conn.execute(_SUPERSEDE_OLDER, (group_id, producer_id, producer_id))
        conn.execute("DELETE FROM group_pending_offsets WHERE group_id = ? AND producer_id = ?", (group_id, producer_id))
    elif isinstance(mutation, PutGroup):
        g = mutation.group
        conn.execute(
            "INSERT INTO group_metadata (group_id, protocol_type, protocol_name, generation, leader, "
            "state_timestamp_ms) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (group_id) DO UPDATE SET "
            "protocol_type = excluded.protocol_type, protocol_name = excluded.protocol_name, "
            "generation = excluded.generation, leader = excluded.leader, "
            "state_timestamp_ms = excluded.state_timestamp_ms",
            (g.group_id, g.protocol_type, g.protocol_name, g.generation, g.leader, g.state_timestamp_ms),
        )
        conn.execute("DELETE FROM group_members WHERE group_id = ?", (g.group_id,))
        conn.executemany(
            "INSERT INTO group_members (group_id, member_id, position, group_instance_id, client_id, client_host, "
            "rebalance_timeout_ms, session_timeout_ms, subscription, assignment) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                (
                    g.group_id,
                    m.member_id,
                    position,
                    m.group_instance_id,
                    m.client_id,
                    m.client_host,
                    m.rebalance_timeout_ms,
                    m.session_timeout_ms,
                    m.subscription,
                    m.assignment,
                )
                for position, m in enumerate(g.members)
            ],
        )
    elif isinstance(mutation, DeleteGroup):
        for table in ("group_offsets", "group_pending_offsets", "group_members", "group_metadata"):
            conn.execute(f"DELETE FROM {table} WHERE group_id = ?", (mutation.group_id,))
    else:  # pragma: no cover - the union is closed
        raise TypeError(f"unknown mutation {mutation!r}")


def _has_pending(conn: sqlite3.Connection, group_id: str) -> bool:
    """Whether the group has pending offsets: plain commits skip the superseding update when not (the usual case)."""
    return conn.execute("SELECT 1 FROM group_pending_offsets WHERE group_id = ? LIMIT 1", (group_id,)).fetchone() is not None
