"""The group and offset store on PostgreSQL: the ``group_`` tables of the metadata database.

The same tables and semantics as ``shoal.store.sqlite.groups`` (schema component
``group_coordinator``): ``group_offsets`` per group and partition, ``group_metadata`` per group
and ``group_members`` per member of its latest stored generation, ``group_pending_offsets`` per
group, producer id and partition for transactions not completed yet. Each batch of mutations is one
transaction, committed with ``synchronous_commit=on``, so a commit that returns is on the
server's disk. ``load`` reads the three tables on one ``REPEATABLE READ`` snapshot.

Ids and topic names are ``COLLATE "C"``: they sort by code point, as SQLite's BINARY
collation does, whatever the database's locale, so both backends load in the same order.

Errors: when the database cannot be reached within ``timeout`` seconds, drops the connection or
times out on a lock, calls raise ``psycopg.OperationalError`` (one of ``UNAVAILABLE_ERRORS``)
naming the store; the pool reconnects by itself, so the same store object works again once the
server is back. Deadlocks and serialisation failures (brokers writing the same rows at once) are
retried a few times: a failed transaction applied nothing.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import psycopg

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
from shoal.store.postgres.connection import PooledStore

__all__ = ["PostgresGroupStore"]


_COMPONENT = "group_coordinator"

_MIGRATIONS = [
    """
    CREATE TABLE group_metadata (
        group_id TEXT COLLATE "C" PRIMARY KEY,
        protocol_type TEXT,
        protocol_name TEXT,
        generation INTEGER NOT NULL,
        leader TEXT,
        state_timestamp_ms BIGINT NOT NULL
    );
    CREATE TABLE group_members (
        group_id TEXT COLLATE "C" NOT NULL,
        member_id TEXT COLLATE "C" NOT NULL,
        position INTEGER NOT NULL,
        group_instance_id TEXT,
        client_id TEXT NOT NULL,
        client_host TEXT NOT NULL,
        rebalance_timeout_ms INTEGER NOT NULL,
        session_timeout_ms INTEGER NOT NULL,
        subscription BYTEA NOT NULL,
        assignment BYTEA NOT NULL,
        PRIMARY KEY (group_id, member_id)
    );
    CREATE TABLE group_offsets (
        group_id TEXT COLLATE "C" NOT NULL,
        topic TEXT COLLATE "C" NOT NULL,
        partition INTEGER NOT NULL,
        topic_id UUID,
        committed_offset BIGINT NOT NULL,
        leader_epoch INTEGER NOT NULL,
        metadata TEXT NOT NULL,
        commit_timestamp_ms BIGINT NOT NULL,
        expire_timestamp_ms BIGINT,
        PRIMARY KEY (group_id, topic, partition)
    )
    """,
    # 2: transactional offset commits awaiting their transaction's marker.
    """
    CREATE TABLE IF NOT EXISTS group_pending_offsets (
        group_id TEXT COLLATE "C" NOT NULL,
        producer_id BIGINT NOT NULL,
        topic TEXT COLLATE "C" NOT NULL,
        partition INTEGER NOT NULL,
        topic_id UUID,
        committed_offset BIGINT NOT NULL,
        leader_epoch INTEGER NOT NULL,
        metadata TEXT NOT NULL,
        commit_timestamp_ms BIGINT NOT NULL,
        expire_timestamp_ms BIGINT,
        write_sequence BIGINT NOT NULL,
        superseded BOOLEAN NOT NULL DEFAULT FALSE,
        PRIMARY KEY (group_id, producer_id, topic, partition)
    );
    CREATE INDEX IF NOT EXISTS group_pending_offsets_by_partition
        ON group_pending_offsets (group_id, topic, partition);
    CREATE INDEX IF NOT EXISTS group_pending_offsets_by_producer ON group_pending_offsets (producer_id)
    """,
]

_OFFSET_UPSERT = (
    "ON CONFLICT (group_id, topic, partition) DO UPDATE SET topic_id = excluded.topic_id, "
    "committed_offset = excluded.committed_offset, leader_epoch = excluded.leader_epoch, "
    "metadata = excluded.metadata, commit_timestamp_ms = excluded.commit_timestamp_ms, "
    "expire_timestamp_ms = excluded.expire_timestamp_ms"
)
_PUT_OFFSET = (
    "INSERT INTO group_offsets (group_id, topic, partition, topic_id, committed_offset, leader_epoch, "
    f"metadata, commit_timestamp_ms, expire_timestamp_ms) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s) {_OFFSET_UPSERT}"
)
_PENDING_COLUMNS = (
    "group_id, producer_id, topic, partition, topic_id, committed_offset, leader_epoch, metadata, "
    "commit_timestamp_ms, expire_timestamp_ms, write_sequence, superseded"
)
_PUT_PENDING = (
    f"INSERT INTO group_pending_offsets ({_PENDING_COLUMNS}) "
    "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s) "
    "ON CONFLICT (group_id, producer_id, topic, partition) DO UPDATE SET topic_id = excluded.topic_id, "
    "committed_offset = excluded.committed_offset, leader_epoch = excluded.leader_epoch, "
    "metadata = excluded.metadata, commit_timestamp_ms = excluded.commit_timestamp_ms, "
    "expire_timestamp_ms = excluded.expire_timestamp_ms, write_sequence = excluded.write_sequence, "
    "superseded = excluded.superseded"
)
# COMMIT: the producer's pending offsets not superseded become committed offsets ...
_MATERIALISE = (
    "INSERT INTO group_offsets (group_id, topic, partition, topic_id, committed_offset, leader_epoch, metadata, "
    "commit_timestamp_ms, expire_timestamp_ms) SELECT group_id, topic, partition, topic_id, committed_offset, "
    "leader_epoch, metadata, commit_timestamp_ms, expire_timestamp_ms FROM group_pending_offsets "
    f"WHERE group_id = %s AND producer_id = %s AND NOT superseded {_OFFSET_UPSERT}"
)
# ... and supersede the other producers' pending offsets of those partitions written before them.
_SUPERSEDE_OLDER = (
    "UPDATE group_pending_offsets AS o SET superseded = TRUE WHERE o.group_id = %s AND o.producer_id <> %s "
    "AND EXISTS (SELECT 1 FROM group_pending_offsets AS c WHERE c.group_id = o.group_id AND c.producer_id = %s "
    "AND c.topic = o.topic AND c.partition = o.partition AND c.write_sequence > o.write_sequence)"
)
_PUT_GROUP = (
    "INSERT INTO group_metadata (group_id, protocol_type, protocol_name, generation, leader, "
    "state_timestamp_ms) VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (group_id) DO UPDATE SET "
    "protocol_type = excluded.protocol_type, protocol_name = excluded.protocol_name, "
    "generation = excluded.generation, leader = excluded.leader, "
    "state_timestamp_ms = excluded.state_timestamp_ms"
)
_PUT_MEMBER = (
    "INSERT INTO group_members (group_id, member_id, position, group_instance_id, client_id, client_host, "
    "rebalance_timeout_ms, session_timeout_ms, subscription, assignment) "
    "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
)


class PostgresGroupStore(PooledStore):
    """Group metadata and committed offsets in the ``group_`` tables of a PostgreSQL database.

    ``timeout`` bounds, in seconds, how long a call waits for a connection (and each connection
    attempt) and for a row lock; a call that exceeds it raises ``psycopg.OperationalError``.
    Writes of one store object are serialised (one transaction at a time, as on SQLite);
    ``load`` may run beside them.
    """

    def __init__(self, url: str, *, timeout: float = 10.0, max_connections: int = 4) -> None:
        super().__init__(
            url,
            what="group store",
            component=_COMPONENT,
            migrations=_MIGRATIONS,
            timeout=timeout,
            max_connections=max_connections,
        )
        self._write_lock = threading.Lock()

    def load(self) -> tuple[list[StoredGroup], dict[str, list[CommittedOffset]]]:
        """Every stored group and every committed offset (grouped by group id), read on one snapshot."""

        def work(conn: psycopg.Connection) -> tuple[list, list, list]:
            with conn.transaction():
                conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
                group_rows = conn.execute(
                    "SELECT group_id, protocol_type, protocol_name, generation, leader, state_timestamp_ms "
                    "FROM group_metadata ORDER BY group_id"
                ).fetchall()
                member_rows = conn.execute(
                    "SELECT group_id, member_id, group_instance_id, client_id, client_host, rebalance_timeout_ms, "
                    "session_timeout_ms, subscription, assignment FROM group_members ORDER BY group_id, position"
                ).fetchall()
                offset_rows = conn.execute(
                    "SELECT group_id, topic, partition, topic_id, committed_offset, leader_epoch, metadata, "
                    "commit_timestamp_ms, expire_timestamp_ms FROM group_offsets ORDER BY group_id, topic, partition"
                ).fetchall()
            return group_rows, member_rows, offset_rows

        group_rows, member_rows, offset_rows = self._run("loading groups and offsets", work)
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
                    topic_id=row[3],
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
        where = "" if producer_id is None else " WHERE producer_id = %s"
        params: tuple[int, ...] = () if producer_id is None else (producer_id,)

        def work(conn: psycopg.Connection) -> list:
            return conn.execute(
                f"SELECT {_PENDING_COLUMNS} FROM group_pending_offsets{where} "  # type: ignore[arg-type] - fixed SQL
                "ORDER BY group_id, producer_id, topic, partition",
                params,
            ).fetchall()

        pending: dict[str, list[PendingOffset]] = {}
        for row in self._run("loading pending offsets", work):
            pending.setdefault(row[0], []).append(
                PendingOffset(
                    producer_id=row[1],
                    offset=CommittedOffset(
                        topic=row[2],
                        partition=row[3],
                        topic_id=row[4],
                        offset=row[5],
                        leader_epoch=row[6],
                        metadata=row[7],
                        commit_timestamp_ms=row[8],
                        expire_timestamp_ms=row[9],
                    ),
                    write_sequence=row[10],
                    superseded=row[11],
                )
            )
        return pending

    def apply(self, mutations: Sequence[Mutation]) -> None:
        """Apply the mutations in order, in one durable transaction (all or nothing)."""

        def work(conn: psycopg.Connection) -> None:
            with conn.transaction(), conn.cursor() as cur:
                for mutation in mutations:
                    _apply_one(cur, mutation)

        with self._write_lock:
            self._run("writing group changes", work)


def _apply_one(cur: psycopg.Cursor, mutation: Mutation) -> None:
    if isinstance(mutation, PutOffsets):
        if mutation.offsets:
            cur.executemany(
                _PUT_OFFSET,
                [
                    (
                        mutation.group_id,
                        o.topic,
                        o.partition,
                        o.topic_id,
                        o.offset,
                        o.leader_epoch,
                        o.metadata,
                        o.commit_timestamp_ms,
                        o.expire_timestamp_ms,
                    )
                    for o in mutation.offsets
                ],
            )
            cur.execute("SELECT 1 FROM group_pending_offsets WHERE group_id = %s LIMIT 1", (mutation.group_id,))
            if cur.fetchone() is not None:  # a plain commit is the later write: it supersedes pending offsets
                cur.executemany(
                    "UPDATE group_pending_offsets SET superseded = TRUE "
                    "WHERE group_id = %s AND topic = %s AND partition = %s",
                    [(mutation.group_id, o.topic, o.partition) for o in mutation.offsets],
                )
    elif isinstance(mutation, DeleteOffsets):
        if mutation.partitions:
            for table in ("group_offsets", "group_pending_offsets"):
                cur.executemany(
                    f"DELETE FROM {table} WHERE group_id = %s AND topic = %s AND partition = %s",  # type: ignore[arg-type] - fixed names
                    [(mutation.group_id, topic, partition) for topic, partition in mutation.partitions],
                )
    elif isinstance(mutation, PutPendingOffsets):
        if mutation.offsets:
            cur.executemany(
                _PUT_PENDING,
                [
                    (
                        mutation.group_id,
                        p.producer_id,
                        p.offset.topic,
                        p.offset.partition,
                        p.offset.topic_id,
                        p.offset.offset,
                        p.offset.leader_epoch,
                        p.offset.metadata,
                        p.offset.commit_timestamp_ms,
                        p.offset.expire_timestamp_ms,
                        p.write_sequence,
                        p.superseded,
                    )
                    for p in mutation.offsets
                ],
            )
    elif isinstance(mutation, CompleteTransaction):
        group_id, producer_id = mutation.group_id, mutation.producer_id
        if mutation.commit:
            cur.execute(_MATERIALISE, (group_id, producer_id))
            cur.execute(_SUPERSEDE_OLDER, (group_id, producer_id, producer_id))
        cur.execute(
            "DELETE FROM group_pending_offsets WHERE group_id = %s AND producer_id = %s", (group_id, producer_id)
        )
    elif isinstance(mutation, PutGroup):
        g = mutation.group
        cur.execute(
            _PUT_GROUP,
            (g.group_id, g.protocol_type, g.protocol_name, g.generation, g.leader, g.state_timestamp_ms),
        )
        cur.execute("DELETE FROM group_members WHERE group_id = %s", (g.group_id,))
        if g.members:
            cur.executemany(
                _PUT_MEMBER,
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
            cur.execute(f"DELETE FROM {table} WHERE group_id = %s", (mutation.group_id,))  # type: ignore[arg-type] - fixed names
    else:  # pragma: no cover - the union is closed
        raise TypeError(f"unknown mutation {mutation!r}")
