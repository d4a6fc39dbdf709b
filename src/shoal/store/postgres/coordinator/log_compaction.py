"""Log compaction (cleanup.policy=compact): swap a partition's cleaned range for the cleaner's
batches, and the cleaner checkpoints, as in the SQLite backend (``shoal.coordinator.log_compaction``
has the shared rules).

compact_partition is one transaction of three round trips when it applies: lock the log row and
read the range with its neighbours; every write (the emptied objects come back); COMMIT. The log
row is locked first, the old objects' rows after (in file_id order, ``logs.shrink_files``): the
lock order of every writer.
"""

from __future__ import annotations

import uuid

import psycopg

from shoal.coordinator.api import ObjectState
from shoal.coordinator.compaction_types import CompactPartitionRequest, CompactPartitionResult
from shoal.coordinator.log_compaction import (
    HeldBatch,
    NewRow,
    check_request,
    freed_per_file,
    new_rows,
    unchanged,
)
from shoal.store.postgres.coordinator.base import CoordinatorBase
from shoal.store.postgres.coordinator.logs import (
    locked_logs,
    queue_lock_logs,
    record_deleted_topics,
    shrink_files,
)

# Every batch with last_offset in [start, end), in offset order (a range of the primary key).
_HELD_SQL = """
SELECT b.batch_id, f.object_key, b.file_id, b.byte_offset, b.byte_size, b.base_offset, b.last_offset,
       b.log_append_time
FROM diskless_logs AS l
JOIN diskless_batches AS b ON b.log_id = l.log_id
JOIN diskless_files AS f ON f.file_id = b.file_id
WHERE l.topic_id = %s AND l.partition = %s AND b.last_offset >= %s AND b.last_offset < %s
ORDER BY b.last_offset
"""

# The running max timestamp of the batch before the range (NULL: none), and the base offset and
# running max of the batch after it (NULL: none; a base below end straddles the range's end).
_NEIGHBOURS_SQL = """
SELECT
    (SELECT b.max_ts_so_far FROM diskless_batches AS b
     WHERE b.log_id = l.log_id AND b.last_offset < %s ORDER BY b.last_offset DESC LIMIT 1),
    a.base_offset, a.max_ts_so_far
FROM diskless_logs AS l
LEFT JOIN LATERAL (
    SELECT b.base_offset, b.max_ts_so_far FROM diskless_batches AS b
    WHERE b.log_id = l.log_id AND b.last_offset >= %s ORDER BY b.last_offset LIMIT 1
) AS a ON TRUE
WHERE l.topic_id = %s AND l.partition = %s
"""

_NEW_FILE_SQL = """
INSERT INTO diskless_files (object_key, uploader_broker_id, committed_at, size, used_size, state,
                            marked_for_deletion_at)
VALUES (%s, %s, %s, %s, %s, %s, %s)
"""

# The new object and its batches in one statement; batch ids come from the identity column (the
# one commit_file uses), in offset order.
_WRITE_SQL = """
WITH f AS (
    INSERT INTO diskless_files (object_key, uploader_broker_id, committed_at, size, used_size, state,
                                marked_for_deletion_at)
    VALUES (%(key)s, %(broker)s, %(now)s, %(size)s, %(used)s, %(state)s, %(marked)s)
    RETURNING file_id
)
INSERT INTO diskless_batches (log_id, last_offset, base_offset, file_id, byte_offset, byte_size,
    log_append_time, batch_max_timestamp, timestamp_type, producer_id, producer_epoch, base_sequence,
    last_sequence, max_ts_so_far, is_transactional, is_control)
SELECT %(log)s, u.last_offset, u.base_offset, f.file_id, u.byte_offset, u.byte_size, u.log_append_time,
    u.batch_max_timestamp, u.timestamp_type, u.producer_id, u.producer_epoch, u.base_sequence,
    u.last_sequence, u.max_ts_so_far, u.is_transactional, u.is_control
FROM f CROSS JOIN unnest(%(last)b::bigint[], %(base)b::bigint[], %(pos)b::bigint[], %(size_)b::bigint[],
    %(append)b::bigint[], %(max_ts)b::bigint[], %(ts_type)b::smallint[], %(pid)b::bigint[],
    %(epoch)b::integer[], %(base_seq)b::integer[], %(last_seq)b::integer[], %(ts_so_far)b::bigint[],
    %(txn)b::boolean[], %(ctl)b::boolean[])
    WITH ORDINALITY AS u(last_offset, base_offset, byte_offset, byte_size, log_append_time,
        batch_max_timestamp, timestamp_type, producer_id, producer_epoch, base_sequence, last_sequence,
        max_ts_so_far, is_transactional, is_control, ord)
ORDER BY u.ord
"""
_ROW_ARRAYS = (
    "last", "base", "pos", "size_", "append", "max_ts", "ts_type", "pid", "epoch", "base_seq", "last_seq",
    "ts_so_far", "txn", "ctl",
)  # fmt: skip

_UPDATE_LOG_SQL = """
UPDATE diskless_logs SET byte_size = byte_size - %s + %s, cleaned_offset = GREATEST(cleaned_offset, %s),
    max_timestamp = GREATEST(max_timestamp, %s)
WHERE log_id = %s
"""

# Keep the running max non-decreasing past the range (only when a cleaned batch's timestamp
# exceeds every old one's: the later batches' values were at least theirs).
_RAISE_RUNNING_MAX_SQL = """
UPDATE diskless_batches SET max_ts_so_far = %s WHERE log_id = %s AND last_offset >= %s AND max_ts_so_far < %s
"""


class LogCompactionMixin(CoordinatorBase):
    """compact_partition and cleaner_checkpoints."""

    def compact_partition(
        self,
        new_object_key: str,
        new_object_size: int,
        uploader_broker_id: int,
        request: CompactPartitionRequest,
    ) -> CompactPartitionResult:
        """Swap the range's batches for the cleaned ones if it is unchanged, in ONE transaction (see
        the protocol). Raises psycopg.errors.UniqueViolation for a known object key."""
        check_request(new_object_size, request)
        tip = request.topic_id_partition
        key = (tip.topic_id, tip.partition)
        start, end = request.start_offset, request.end_offset

        def work(conn: psycopg.Connection) -> CompactPartitionResult:
            # One round trip: the lock, then (after it) the range and its neighbours.
            lock_cur = queue_lock_logs(conn, [key])
            held_cur = conn.execute(_HELD_SQL, (tip.topic_id, tip.partition, start, end))
            neighbours_cur = conn.execute(_NEIGHBOURS_SQL, (start, end, tip.topic_id, tip.partition))
            log = locked_logs(lock_cur).get(key)
            held = [HeldBatch(*row) for row in held_cur.fetchall()]
            neighbours = neighbours_cur.fetchone()
            now = self._clock()
            if (
                log is None
                or neighbours is None
                or end > log.high_watermark
                or (neighbours[1] is not None and neighbours[1] < end)  # a batch straddles the end
                or not unchanged(held, request.source_batches)
            ):
                conn.execute(
                    _NEW_FILE_SQL,
                    (new_object_key, uploader_broker_id, now, new_object_size, 0, ObjectState.DELETING, now),
                )
                return CompactPartitionResult(False, 0, 0, ObjectState.DELETING, ())
            before, _, after_running_max = neighbours
            rows = new_rows(request, held, log.log_start_offset, -1 if before is None else before)
            added = sum(r.batch.size for r in rows)
            state = ObjectState.UPLOADED if added > 0 else ObjectState.DELETING
            conn.execute(
                "DELETE FROM diskless_batches WHERE log_id = %s AND last_offset >= %s AND last_offset < %s",
                (log.log_id, start, end),
            )
            params: dict[str, object] = {
                "key": new_object_key,
                "broker": uploader_broker_id,
                "now": now,
                "size": new_object_size,
                "used": added,
                "state": state,
                "marked": None if added > 0 else now,
                "log": log.log_id,
            }
            params.update(zip(_ROW_ARRAYS, _columns(rows), strict=True))
            conn.execute(_WRITE_SQL, params)
            freed = freed_per_file(held)
            shrunk = shrink_files(conn, freed, now)
            # Like the deletion paths: the topic overview shows the objects it leaves waiting for deletion.
            record_deleted_topics(conn, [(file_id, log.log_id) for file_id in freed])
            top = rows[-1].max_ts_so_far if rows else -1
            removed = sum(h.size for h in held)
            conn.execute(_UPDATE_LOG_SQL, (removed, added, request.cleaned_offset, top, log.log_id))
            if after_running_max is not None and after_running_max < top:
                conn.execute(_RAISE_RUNNING_MAX_SQL, (top, log.log_id, end, top))
            emptied = [] if shrunk is None else [k for k, used_size in shrunk.fetchall() if used_size <= 0]
            return CompactPartitionResult(True, len(held), removed, state, tuple(sorted(emptied)))

        return self._transaction("compact_partition", work)

    def cleaner_checkpoints(self, topic_id: uuid.UUID) -> dict[int, int]:
        """Partition -> cleaner checkpoint of every partition of the topic, from one query."""

        def work(conn: psycopg.Connection) -> dict[int, int]:
            rows = conn.execute(
                "SELECT partition, cleaned_offset FROM diskless_logs WHERE topic_id = %s", (topic_id,)
            ).fetchall()
            return {partition: offset for partition, offset in rows}

        return self._read("cleaner_checkpoints", work)


def _columns(rows: list[NewRow]) -> tuple[list[object], ...]:
    """The cleaned batches as the arrays ``_WRITE_SQL`` unnests (``_ROW_ARRAYS`` order)."""
    columns: tuple[list[object], ...] = tuple([] for _ in _ROW_ARRAYS)
    for r in rows:
        b = r.batch
        values = (
            b.last_offset, b.base_offset, b.byte_offset, b.size, r.log_append_time, b.batch_max_timestamp,
            int(b.message_timestamp_type), b.producer_id, b.producer_epoch, b.base_sequence, b.last_sequence,
            r.max_ts_so_far, b.is_transactional, b.is_control,
        )  # fmt: skip
        for column, value in zip(columns, values, strict=True):
            column.append(value)
    return columns
