"""The remote log metadata of tiered storage on PostgreSQL (``RemoteLogMetadataManager``): the
``remote_log_`` tables of the metadata database.

The same tables and semantics as ``shoal.store.sqlite.remote_log_metadata`` (schema component
``remote_log_metadata``; the rules are in ``shoal.store.remote_log_metadata``), for every broker
of a cluster sharing one database:

* An update locks the segment's row (``FOR UPDATE``) before checking its transition, so two
  brokers moving one segment at once apply one transition after the other (the second is checked
  against the state the first left).
* Adding a segment inserts ``ON CONFLICT DO NOTHING``: of two adds of one id, one is refused.
* The order in which copies finished (which of two copies of the same offsets a lookup prefers)
  comes from a sequence, ``remote_log_finish_seq``.
* Reads that take more than one statement run on one ``REPEATABLE READ`` snapshot.

Errors: when the database cannot be reached within ``timeout`` seconds, drops the connection or
times out on a lock, calls raise ``psycopg.OperationalError`` (one of ``UNAVAILABLE_ERRORS``)
naming the store; the pool reconnects by itself. Deadlocks and serialisation failures are retried
a few times: a failed transaction applied nothing.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence

import psycopg

from shoal.store.postgres.connection import PooledStore
from shoal.store.remote_log_metadata import (
    COPY_FINISHED,
    SEGMENT_COLUMNS,
    check_new_segment,
    check_update,
    epoch_ranges,
    segment_from_row,
)
from shoal.tiered.api import (
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    TopicIdPartition,
)

__all__ = ["PostgresRemoteLogMetadataManager"]

_COMPONENT = "remote_log_metadata"

_MIGRATIONS = [
    """
    CREATE TABLE remote_log_segments (
        segment_id UUID PRIMARY KEY,
        topic_id UUID NOT NULL,
        partition INTEGER NOT NULL,
        topic TEXT COLLATE "C" NOT NULL,
        start_offset BIGINT NOT NULL,
        end_offset BIGINT NOT NULL,
        max_timestamp_ms BIGINT NOT NULL,
        broker_id INTEGER NOT NULL,
        event_timestamp_ms BIGINT NOT NULL,
        segment_size BIGINT NOT NULL,
        state SMALLINT NOT NULL,
        custom_metadata BYTEA,
        tiered_epoch INTEGER NOT NULL,
        finished_seq BIGINT
    );
    CREATE INDEX remote_log_segments_by_offset ON remote_log_segments (topic_id, partition, start_offset);
    CREATE TABLE remote_log_segment_epochs (
        segment_id UUID NOT NULL REFERENCES remote_log_segments (segment_id) ON DELETE CASCADE,
        topic_id UUID NOT NULL,
        partition INTEGER NOT NULL,
        leader_epoch INTEGER NOT NULL,
        start_offset BIGINT NOT NULL,
        end_offset BIGINT NOT NULL,
        PRIMARY KEY (segment_id, leader_epoch)
    );
    CREATE INDEX remote_log_segment_epochs_by_epoch
        ON remote_log_segment_epochs (topic_id, partition, leader_epoch, start_offset);
    CREATE SEQUENCE remote_log_finish_seq;
    CREATE TABLE remote_log_partition_deletes (
        topic_id UUID NOT NULL,
        partition INTEGER NOT NULL,
        topic TEXT COLLATE "C" NOT NULL,
        state SMALLINT NOT NULL,
        event_timestamp_ms BIGINT NOT NULL,
        broker_id INTEGER NOT NULL,
        PRIMARY KEY (topic_id, partition)
    )
    """,
    """
    CREATE TABLE remote_log_start_offsets (
        topic_id UUID NOT NULL,
        partition INTEGER NOT NULL,
        log_start_offset BIGINT NOT NULL,
        PRIMARY KEY (topic_id, partition)
    )
    """,
]

_SELECT = "SELECT " + ", ".join(f"s.{c}" for c in SEGMENT_COLUMNS) + " FROM remote_log_segments s"
_FINISHED = int(COPY_FINISHED)


class PostgresRemoteLogMetadataManager(PooledStore):
    """Remote log segment metadata in the ``remote_log_`` tables of a PostgreSQL database.

    ``timeout`` bounds, in seconds, how long a call waits for a connection (and each connection
    attempt) and for a row lock; a call that exceeds it raises ``psycopg.OperationalError``.
    Thread-safe: calls may come from several threads at once (each uses its own connection).
    """

    def __init__(self, url: str, *, timeout: float = 10.0, max_connections: int = 4) -> None:
        super().__init__(
            url,
            what="remote log metadata store",
            component=_COMPONENT,
            migrations=_MIGRATIONS,
            timeout=timeout,
            max_connections=max_connections,
        )

    # -- writes ---------------------------------------------------------------------------------

    def add_remote_log_segment_metadata(self, metadata: RemoteLogSegmentMetadata) -> None:
        check_new_segment(metadata)
        tp = metadata.topic_id_partition
        sid = metadata.segment_id.id

        def work(conn: psycopg.Connection) -> None:
            with conn.transaction(), conn.cursor() as cur:
                cur.execute(
                    "INSERT INTO remote_log_segments (segment_id, topic_id, partition, topic, start_offset, "
                    "end_offset, max_timestamp_ms, broker_id, event_timestamp_ms, segment_size, state, "
                    "custom_metadata, tiered_epoch) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s) "
                    "ON CONFLICT (segment_id) DO NOTHING",
                    (
                        sid, tp.topic_id, tp.partition, tp.topic, metadata.start_offset, metadata.end_offset,
                        metadata.max_timestamp_ms, metadata.broker_id, metadata.event_timestamp_ms,
                        metadata.segment_size_in_bytes, int(metadata.state), metadata.custom_metadata,
                        metadata.tiered_epoch,
                    ),
                )
                if cur.rowcount != 1:
                    raise ValueError(f"remote log segment {sid} already exists")
                cur.executemany(
                    "INSERT INTO remote_log_segment_epochs (segment_id, topic_id, partition, leader_epoch, "
                    "start_offset, end_offset) VALUES (%s, %s, %s, %s, %s, %s)",
                    [(sid, tp.topic_id, tp.partition, e, first, last) for e, first, last in epoch_ranges(metadata)],
                )

        self._run("adding a remote log segment", work)

    def update_remote_log_segment_metadata(self, update: RemoteLogSegmentMetadataUpdate) -> None:
        sid = update.segment_id.id

        def work(conn: psycopg.Connection) -> None:
            with conn.transaction():
                row = conn.execute(
                    "SELECT state FROM remote_log_segments WHERE segment_id = %s FOR UPDATE", (sid,)
                ).fetchone()
                check_update(update, None if row is None else RemoteLogSegmentState(row[0]))
                if update.state == RemoteLogSegmentState.DELETE_SEGMENT_FINISHED:
                    conn.execute("DELETE FROM remote_log_segment_epochs WHERE segment_id = %s", (sid,))
                    conn.execute("DELETE FROM remote_log_segments WHERE segment_id = %s", (sid,))
                    return
                conn.execute(
                    "UPDATE remote_log_segments SET state = %s, event_timestamp_ms = %s, broker_id = %s, "
                    "custom_metadata = COALESCE(%s, custom_metadata), finished_seq = CASE WHEN %s "
                    "THEN nextval('remote_log_finish_seq') ELSE finished_seq END WHERE segment_id = %s",
                    (
                        int(update.state), update.event_timestamp_ms, update.broker_id, update.custom_metadata,
                        update.state == COPY_FINISHED, sid,
                    ),
                )

        self._run("updating a remote log segment", work)

    def put_remote_partition_delete_metadata(self, metadata: RemotePartitionDeleteMetadata) -> None:
        tp = metadata.topic_id_partition

        def work(conn: psycopg.Connection) -> None:
            conn.execute(
                "INSERT INTO remote_log_partition_deletes (topic_id, partition, topic, state, event_timestamp_ms, "
                "broker_id) VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (topic_id, partition) DO UPDATE SET "
                "topic = excluded.topic, state = excluded.state, event_timestamp_ms = excluded.event_timestamp_ms, "
                "broker_id = excluded.broker_id",
                (tp.topic_id, tp.partition, tp.topic, int(metadata.state), metadata.event_timestamp_ms,
                 metadata.broker_id),
            )

        self._run("recording a remote partition deletion", work)

    # -- reads ----------------------------------------------------------------------------------

    def remote_log_segment_metadata(
        self, tp: TopicIdPartition, leader_epoch: int, offset: int
    ) -> RemoteLogSegmentMetadata | None:
        def work(conn: psycopg.Connection) -> list[RemoteLogSegmentMetadata]:
            with _snapshot(conn):
                rows = conn.execute(
                    f"{_SELECT} JOIN remote_log_segment_epochs e ON e.segment_id = s.segment_id "  # type: ignore[arg-type] - fixed SQL
                    "WHERE e.topic_id = %s AND e.partition = %s AND e.leader_epoch = %s AND e.start_offset <= %s "
                    "AND e.end_offset >= %s AND s.state = %s "
                    "ORDER BY e.start_offset DESC, s.finished_seq DESC LIMIT 1",
                    (tp.topic_id, tp.partition, leader_epoch, offset, offset, _FINISHED),
                ).fetchall()
                return _with_epochs(conn, rows)

        found = self._run("looking up a remote log segment", work)
        return found[0] if found else None

    def highest_offset_for_epoch(self, tp: TopicIdPartition, leader_epoch: int) -> int | None:
        def work(conn: psycopg.Connection) -> int | None:
            row = conn.execute(
                "SELECT MAX(e.end_offset) FROM remote_log_segment_epochs e JOIN remote_log_segments s "
                "ON s.segment_id = e.segment_id WHERE e.topic_id = %s AND e.partition = %s "
                "AND e.leader_epoch = %s AND s.state = %s",
                (tp.topic_id, tp.partition, leader_epoch, _FINISHED),
            ).fetchone()
            return None if row is None or row[0] is None else int(row[0])

        return self._run("reading a leader epoch's highest remote offset", work)

    def list_remote_log_segments(
        self, tp: TopicIdPartition, leader_epoch: int | None = None
    ) -> list[RemoteLogSegmentMetadata]:
        def work(conn: psycopg.Connection) -> list[RemoteLogSegmentMetadata]:
            with _snapshot(conn):
                if leader_epoch is None:
                    rows = conn.execute(
                        f"{_SELECT} WHERE s.topic_id = %s AND s.partition = %s "  # type: ignore[arg-type] - fixed SQL
                        "ORDER BY s.start_offset, s.end_offset, s.segment_id",
                        (tp.topic_id, tp.partition),
                    ).fetchall()
                else:
                    rows = conn.execute(
                        f"{_SELECT} JOIN remote_log_segment_epochs e ON e.segment_id = s.segment_id "  # type: ignore[arg-type] - fixed SQL
                        "WHERE e.topic_id = %s AND e.partition = %s AND e.leader_epoch = %s AND s.state = %s "
                        "ORDER BY s.start_offset, s.end_offset, s.segment_id",
                        (tp.topic_id, tp.partition, leader_epoch, _FINISHED),
                    ).fetchall()
                return _with_epochs(conn, rows)

        return self._run("listing remote log segments", work)

    def remote_log_size(self, tp: TopicIdPartition) -> int:
        def work(conn: psycopg.Connection) -> int:
            row = conn.execute(
                "SELECT COALESCE(SUM(segment_size), 0) FROM remote_log_segments "
                "WHERE topic_id = %s AND partition = %s AND state = %s",
                (tp.topic_id, tp.partition, _FINISHED),
            ).fetchone()
            return int(row[0]) if row else 0

        return self._run("reading the remote log size", work)

    def remote_partition_delete_state(self, tp: TopicIdPartition) -> RemotePartitionDeleteState | None:
        def work(conn: psycopg.Connection) -> RemotePartitionDeleteState | None:
            row = conn.execute(
                "SELECT state FROM remote_log_partition_deletes WHERE topic_id = %s AND partition = %s",
                (tp.topic_id, tp.partition),
            ).fetchone()
            return None if row is None else RemotePartitionDeleteState(row[0])

        return self._run("reading a remote partition deletion", work)

    def put_log_start_offset(self, tp: TopicIdPartition, offset: int) -> None:
        def work(conn: psycopg.Connection) -> None:
            conn.execute(
                "INSERT INTO remote_log_start_offsets (topic_id, partition, log_start_offset) VALUES (%s, %s, %s) "
                "ON CONFLICT (topic_id, partition) DO UPDATE SET "
                "log_start_offset = GREATEST(remote_log_start_offsets.log_start_offset, excluded.log_start_offset)",
                (tp.topic_id, tp.partition, offset),
            )

        self._run("recording a remote log start offset", work)

    def log_start_offset(self, tp: TopicIdPartition) -> int | None:
        def work(conn: psycopg.Connection) -> int | None:
            row = conn.execute(
                "SELECT log_start_offset FROM remote_log_start_offsets WHERE topic_id = %s AND partition = %s",
                (tp.topic_id, tp.partition),
            ).fetchone()
            return None if row is None else int(row[0])

        return self._run("reading a remote log start offset", work)

    def partitions_with_segments(self) -> list[TopicIdPartition]:
        def work(conn: psycopg.Connection) -> list[TopicIdPartition]:
            rows = conn.execute(
                "SELECT topic_id, partition, MAX(topic) FROM remote_log_segments "
                "GROUP BY topic_id, partition ORDER BY topic_id, partition"
            ).fetchall()
            return [TopicIdPartition(r[0], r[1], r[2]) for r in rows]

        return self._run("listing partitions with remote segments", work)


@contextlib.contextmanager
def _snapshot(conn: psycopg.Connection) -> Iterator[None]:
    """A read-only transaction whose statements all read one snapshot."""
    with conn.transaction():
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        yield


def _with_epochs(conn: psycopg.Connection, rows: Sequence[tuple]) -> list[RemoteLogSegmentMetadata]:
    """The segments of ``rows`` with their leader epochs (read in the caller's transaction)."""
    if not rows:
        return []
    ids = [r[0] for r in rows]
    epochs: dict = {sid: {} for sid in ids}
    for sid, epoch, first in conn.execute(
        "SELECT segment_id, leader_epoch, start_offset FROM remote_log_segment_epochs "
        "WHERE segment_id = ANY(%s) ORDER BY leader_epoch",
        (ids,),
    ):
        epochs[sid][epoch] = first
    return [segment_from_row(r, epochs[r[0]]) for r in rows]
