"""The statements every write path shares: lock partitions' log rows, delete batches, shrink objects.

All of them work on many partitions or objects at once (arrays passed with ``unnest``), so a
transaction costs a few statements whatever its size; in pipeline mode the ones whose result
is not needed right away travel together with the next fetch or the COMMIT.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass

import psycopg

#: Bound of ``delete_batches_below`` that deletes every batch of a log.
ALL_OFFSETS = 2**63 - 1


@dataclass(slots=True)
class LogState:
    """A log row locked by a write transaction (a commit, a deletion), written back once at the end."""

    log_id: int
    log_start_offset: int
    high_watermark: int
    byte_size: int
    max_timestamp: int
    dirty: bool = False


# The lock order of every writer: log rows by log_id (LockRows sits above the sort, so rows are
# locked in that order). READ COMMITTED re-reads a row that was updated while we waited for it,
# so the values returned are the committed ones; later statements of the transaction run on
# new snapshots, so they see everything the transactions we waited for wrote.
_LOCK_LOGS_SQL = """
SELECT l.log_id, l.topic_id, l.partition, l.log_start_offset, l.high_watermark, l.byte_size, l.max_timestamp
FROM diskless_logs AS l
JOIN unnest(%b::uuid[], %b::integer[]) AS k(topic_id, partition)
    ON l.topic_id = k.topic_id AND l.partition = k.partition
ORDER BY l.log_id
FOR UPDATE OF l
"""

LogKey = tuple[uuid.UUID, int]


def queue_lock_logs(conn: psycopg.Connection, keys: Iterable[LogKey]) -> psycopg.Cursor:
    """Queue the locking of the log rows of ``keys``; ``locked_logs`` reads the result."""
    unique = dict.fromkeys(keys)
    return conn.execute(_LOCK_LOGS_SQL, ([k[0] for k in unique], [k[1] for k in unique]))


def locked_logs(cur: psycopg.Cursor) -> dict[LogKey, LogState]:
    """The logs ``queue_lock_logs`` locked, by (topic id, partition); unknown partitions are absent."""
    return {(row[1], row[2]): LogState(row[0], row[3], row[4], row[5], row[6]) for row in cur.fetchall()}


def lock_logs(conn: psycopg.Connection, keys: Iterable[LogKey]) -> dict[LogKey, LogState]:
    """Lock the log rows of ``keys`` (in log_id order) and return them."""
    return locked_logs(queue_lock_logs(conn, keys))


_DELETE_BATCHES_SQL = """
WITH deleted AS (
    DELETE FROM diskless_batches AS b
    USING unnest(%b::bigint[], %b::bigint[]) AS u(log_id, bound)
    WHERE b.log_id = u.log_id AND b.last_offset < u.bound
    RETURNING b.log_id, b.file_id, b.byte_size
)
SELECT log_id, file_id, SUM(byte_size)::bigint FROM deleted GROUP BY log_id, file_id
"""

_LOCK_FILES_SQL = (
    "SELECT file_id FROM diskless_files WHERE file_id = ANY(%b::bigint[]) ORDER BY file_id FOR UPDATE"
)

# An object loses u.freed used bytes; at zero it is marked for deletion (kept marked if it already
# was). SET expressions all see the row as it was, as in SQLite.
_SHRINK_FILES_SQL = """
UPDATE diskless_files AS f SET
    used_size = f.used_size - u.freed,
    state = CASE WHEN f.used_size - u.freed <= 0 THEN 'deleting' ELSE f.state END,
    marked_for_deletion_at = CASE WHEN f.used_size - u.freed <= 0
        THEN COALESCE(f.marked_for_deletion_at, %s::bigint) ELSE f.marked_for_deletion_at END
FROM unnest(%b::bigint[], %b::bigint[]) AS u(file_id, freed)
WHERE f.file_id = u.file_id
RETURNING f.object_key, f.used_size
"""

# Remember which topics left bytes in which objects (the topic overview of objects waiting for
# deletion): written only on deletion paths, in key order.
_RECORD_DELETED_TOPICS_SQL = """
INSERT INTO diskless_file_deleted_topics (file_id, topic_id)
SELECT DISTINCT u.file_id, l.topic_id
FROM unnest(%b::bigint[], %b::bigint[]) AS u(file_id, log_id)
JOIN diskless_logs AS l ON l.log_id = u.log_id
ORDER BY 1, 2
ON CONFLICT DO NOTHING
"""


def delete_batches_below(conn: psycopg.Connection, bounds: dict[int, int], now: int) -> dict[int, int]:
    """Delete the batches of each log entirely below its bound; return the bytes freed per log.

    The logs must be locked by the caller. Objects lose the bytes of their deleted batches; an
    object left with no used byte becomes 'deleting' so a broker deletes it after the grace
    period. The object updates are queued (they run with the next fetch or the COMMIT).
    """
    if not bounds:
        return {}
    rows = conn.execute(_DELETE_BATCHES_SQL, (list(bounds), list(bounds.values()))).fetchall()
    per_log: dict[int, int] = {}
    per_file: dict[int, int] = {}
    for log_id, file_id, freed in rows:
        per_log[log_id] = per_log.get(log_id, 0) + freed
        per_file[file_id] = per_file.get(file_id, 0) + freed
    shrink_files(conn, per_file, now)
    record_deleted_topics(conn, [(file_id, log_id) for log_id, file_id, _ in rows])
    return per_log


def shrink_files(conn: psycopg.Connection, freed: dict[int, int], now: int) -> psycopg.Cursor | None:
    """Queue taking ``freed[file_id]`` used bytes from each object (locked in file_id order).

    The returned cursor yields (object key, used size left) of every object shrunk.
    """
    if not freed:
        return None
    ids = sorted(freed)
    conn.execute(_LOCK_FILES_SQL, (ids,))
    return conn.execute(_SHRINK_FILES_SQL, (now, ids, [freed[i] for i in ids]))


def record_deleted_topics(conn: psycopg.Connection, file_logs: list[tuple[int, int]]) -> None:
    """Queue remembering that the topic of each (file_id, log_id) had batches deleted from the file."""
    if file_logs:
        pairs = sorted(set(file_logs))
        conn.execute(_RECORD_DELETED_TOPICS_SQL, ([p[0] for p in pairs], [p[1] for p in pairs]))
