"""Everything that removes data, and the topic creation it pairs with.

Topics are created and deleted; records go by DeleteRecords and by retention, batches that
tiered storage now holds by delete_tiered_batches (the log start stays); objects emptied by
those are marked for deletion, listed for the broker that deletes them and
forgotten once it has (get_files_to_delete / delete_files / is_safe_to_delete_file).
Every write locks the log rows it works on first (log_id order), then objects (file_id order).
Aborted transactions whose marker falls below a moved log start go with it; delete_tiered_batches
keeps them (the log start stays: those offsets are still read, from tiered segments).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import psycopg

from shoal.coordinator.api import (
    CreateTopicAndPartitionsRequest,
    DeleteFilesRequest,
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    DeleteTieredBatchesRequest,
    DeleteTieredBatchesResponse,
    EnforceRetentionRequest,
    EnforceRetentionResponse,
    FileToDelete,
)
from shoal.protocol.errors import ErrorCode
from shoal.store.postgres.coordinator.base import CoordinatorBase
from shoal.store.postgres.coordinator.logs import (
    ALL_OFFSETS,
    LogState,
    delete_batches_below,
    lock_logs,
)
from shoal.store.postgres.coordinator.schema import utc
from shoal.store.postgres.coordinator.txns import delete_log_txns, prune_aborted

# The age time retention judges a batch by. Kafka's LogSegment.largestTimestamp falls
# back to the segment file's mtime (about its append time) when the segment has no
# record timestamp; a batch without one (max timestamp -1) falls back to its append time.
_RETENTION_TS = "CASE WHEN timestamp_type = 1 OR batch_max_timestamp < 0 THEN log_append_time ELSE batch_max_timestamp END"
#: Batches of each log read by the first statement of enforce_retention (more are read as needed).
_RETENTION_PAGE = 256

_RETENTION_FIRST_PAGE_SQL = f"""
SELECT u.log_id, b.last_offset, b.base_offset, b.byte_size, b.ts
FROM unnest(%b::bigint[]) AS u(log_id)
CROSS JOIN LATERAL (
    SELECT last_offset, base_offset, byte_size, {_RETENTION_TS} AS ts FROM diskless_batches
    WHERE log_id = u.log_id ORDER BY last_offset LIMIT {_RETENTION_PAGE}
) AS b
ORDER BY u.log_id, b.last_offset
"""

_RETENTION_NEXT_PAGE_SQL = f"""
SELECT last_offset, base_offset, byte_size, {_RETENTION_TS} FROM diskless_batches
WHERE log_id = %s AND last_offset > %s ORDER BY last_offset LIMIT %s
"""

_CREATE_LOGS_SQL = """
INSERT INTO diskless_logs (topic_id, partition, topic_name)
SELECT * FROM unnest(%b::uuid[], %b::integer[], %b::text[])
ORDER BY 1, 2
ON CONFLICT (topic_id, partition) DO NOTHING
"""

# Per delete_tiered_batches request (ord): the batches and bytes in [lo, hi) of its log, and the
# base offset of the first batch from ``hi`` on (what is left once it applied). The logs are
# locked, so nothing changes between this read and the deletion.
_TIERED_STATS_SQL = """
SELECT u.ord, COUNT(b.last_offset), COALESCE(SUM(b.byte_size), 0)::bigint,
    (SELECT n.base_offset FROM diskless_batches AS n
     WHERE n.log_id = u.log_id AND n.last_offset >= u.hi ORDER BY n.last_offset LIMIT 1)
FROM unnest(%b::bigint[], %b::bigint[], %b::bigint[]) WITH ORDINALITY AS u(log_id, lo, hi, ord)
LEFT JOIN diskless_batches AS b ON b.log_id = u.log_id AND b.last_offset >= u.lo AND b.last_offset < u.hi
GROUP BY u.ord, u.log_id, u.hi
"""

_UPDATE_STARTS_SQL = """
UPDATE diskless_logs AS l SET log_start_offset = u.log_start_offset, byte_size = l.byte_size - u.freed
FROM unnest(%b::bigint[], %b::bigint[], %b::bigint[]) AS u(log_id, log_start_offset, freed)
WHERE l.log_id = u.log_id
"""


class DeleteMixin(CoordinatorBase):
    """Topic lifecycle, record deletion, retention and the deletion of emptied objects."""

    # ------------------------------------------------------------------ topics

    def create_topic_and_partitions(self, requests: set[CreateTopicAndPartitionsRequest]) -> None:
        """Create the missing logs; existing partitions keep their offsets (idempotent)."""
        rows = sorted(
            (req.topic_id, partition, req.topic_name)
            for req in requests
            for partition in range(req.num_partitions)
        )
        if not rows:
            return

        def work(conn: psycopg.Connection) -> None:
            conn.execute(_CREATE_LOGS_SQL, ([r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows]))

        self._transaction("create_topic_and_partitions", work)

    def delete_topics(self, topic_ids: set[uuid.UUID]) -> None:
        """Drop the logs, batches, producer and transaction state of the topics; shrink their objects."""
        if not topic_ids:
            return
        topics = sorted(topic_ids)

        def work(conn: psycopg.Connection) -> None:
            log_ids = [
                row[0]
                for row in conn.execute(
                    "SELECT log_id FROM diskless_logs WHERE topic_id = ANY(%b::uuid[]) ORDER BY log_id FOR UPDATE",
                    (topics,),
                ).fetchall()
            ]
            if not log_ids:
                return
            # Records the deleted topics from the log rows: before those rows go.
            delete_batches_below(conn, dict.fromkeys(log_ids, ALL_OFFSETS), self._clock())
            conn.execute("DELETE FROM diskless_producer_state WHERE log_id = ANY(%b::bigint[])", (log_ids,))
            delete_log_txns(conn, log_ids)
            conn.execute("DELETE FROM diskless_logs WHERE log_id = ANY(%b::bigint[])", (log_ids,))

        self._transaction("delete_topics", work)

    # ------------------------------------------------------------------ records

    def delete_records(self, requests: list[DeleteRecordsRequest]) -> list[DeleteRecordsResponse]:
        """Move log start offsets forward (never back) and drop the batches entirely below."""

        def work(conn: psycopg.Connection) -> list[DeleteRecordsResponse]:
            keys = [(r.topic_id_partition.topic_id, r.topic_id_partition.partition) for r in requests]
            logs = lock_logs(conn, keys)
            now = self._clock()
            responses: list[DeleteRecordsResponse] = []
            for req, key in zip(requests, keys, strict=True):
                log = logs.get(key)
                if log is None:
                    responses.append(DeleteRecordsResponse(ErrorCode.unknown_topic_or_partition, -1))
                    continue
                offset = log.high_watermark if req.offset == -1 else req.offset
                if offset < 0 or offset > log.high_watermark:
                    # Kafka answers errors with INVALID_LOW_WATERMARK (-1).
                    responses.append(DeleteRecordsResponse(ErrorCode.offset_out_of_range, -1))
                    continue
                if offset > log.log_start_offset:
                    log.log_start_offset = offset
                    log.dirty = True
                responses.append(DeleteRecordsResponse(ErrorCode.none, log.log_start_offset))
            moved = [log for log in logs.values() if log.dirty]
            starts = {log.log_id: log.log_start_offset for log in moved}
            freed = delete_batches_below(conn, starts, now)
            _update_starts(conn, moved, freed)
            prune_aborted(conn, starts)
            return responses

        return self._transaction("delete_records", work)

    def delete_tiered_batches(
        self, requests: list[DeleteTieredBatchesRequest]
    ) -> list[DeleteTieredBatchesResponse]:
        """Drop the batches tiered storage now holds, keeping the log start, in one transaction.

        Those offsets stay part of the log (read from tiered segments), so only the batches
        and their bytes go. Requests apply in order: each answers what it adds to the ones
        before it for the same partition, as in SQLite; the deletion itself is one statement.
        """

        def work(conn: psycopg.Connection) -> list[DeleteTieredBatchesResponse]:
            keys = [(r.topic_id_partition.topic_id, r.topic_id_partition.partition) for r in requests]
            logs = lock_logs(conn, keys)
            now = self._clock()
            bounds: dict[int, int] = {}  # log_id -> offset below which batches go, so far
            ranges: list[tuple[int, int, int]] = []  # (log_id, lo, hi) each valid request adds
            answers: list[DeleteTieredBatchesResponse | int] = []  # an error, or the index in ranges
            for req, key in zip(requests, keys, strict=True):
                log = logs.get(key)
                if log is None:
                    answers.append(
                        DeleteTieredBatchesResponse(ErrorCode.unknown_topic_or_partition, 0, 0, -1)
                    )
                elif req.offset < 0 or req.offset > log.high_watermark:
                    answers.append(DeleteTieredBatchesResponse(ErrorCode.offset_out_of_range, 0, 0, -1))
                else:
                    lo = bounds.get(log.log_id, 0)
                    hi = max(lo, req.offset)
                    bounds[log.log_id] = hi
                    answers.append(len(ranges))
                    ranges.append((log.log_id, lo, hi))
            if not ranges:
                return [a for a in answers if not isinstance(a, int)]
            # Queued: it runs before the deletion and travels with it (one round trip for both).
            stats_cur = conn.execute(
                _TIERED_STATS_SQL, ([r[0] for r in ranges], [r[1] for r in ranges], [r[2] for r in ranges])
            )
            freed = delete_batches_below(conn, bounds, now)
            stats = {ord_ - 1: (count, size, first) for ord_, count, size, first in stats_cur.fetchall()}
            by_id = {log.log_id: log for log in logs.values()}
            shrunk = [by_id[log_id] for log_id in sorted(freed)]
            for log in shrunk:
                log.byte_size -= freed[log.log_id]
            _update_starts(conn, shrunk, freed)  # the starts stay as they were: only byte sizes change
            responses: list[DeleteTieredBatchesResponse] = []
            for answer in answers:
                if not isinstance(answer, int):
                    responses.append(answer)
                    continue
                count, size, first = stats[answer]
                log = by_id[ranges[answer][0]]
                # A DeleteRecords inside the first batch moved the start past its base.
                local_start = max(log.log_start_offset, log.high_watermark if first is None else first)
                responses.append(DeleteTieredBatchesResponse(ErrorCode.none, count, size, local_start))
            return responses

        return self._transaction("delete_tiered_batches", work)

    def enforce_retention(self, requests: list[EnforceRetentionRequest]) -> list[EnforceRetentionResponse]:
        """Kafka's time then size retention over whole batches, in one transaction.

        Per partition, batches are taken in offset order from the log start: first
        while older than ``retention_ms`` (``now - timestamp > retention_ms``, Kafka's
        test), then while the log without the batch still holds ``retention_bytes``;
        the first batch that neither rule takes stops the deletion (as Kafka stops at
        the first segment it keeps). A round of Kafka's does the same, so repeated calls
        reach the same state. Only batches below the high watermark exist, so deletion
        never passes it. Unknown partitions answer UNKNOWN_TOPIC_OR_PARTITION.
        """

        def work(conn: psycopg.Connection) -> list[EnforceRetentionResponse]:
            keys = [(r.topic_id_partition.topic_id, r.topic_id_partition.partition) for r in requests]
            logs = lock_logs(conn, keys)
            now = self._clock()
            active = sorted(
                {
                    logs[key].log_id
                    for req, key in zip(requests, keys, strict=True)
                    if key in logs and (req.retention_ms >= 0 or req.retention_bytes >= 0)
                }
            )
            known = {log_id: _Batches([], False) for log_id in active}
            if active:
                for log_id, *batch in conn.execute(_RETENTION_FIRST_PAGE_SQL, (active,)).fetchall():
                    known[log_id].rows.append(tuple(batch))  # type: ignore[arg-type]
                for batches in known.values():
                    batches.complete = len(batches.rows) < _RETENTION_PAGE
            responses: list[EnforceRetentionResponse] = []
            for req, key in zip(requests, keys, strict=True):
                log = logs.get(key)
                if log is None:
                    responses.append(EnforceRetentionResponse(ErrorCode.unknown_topic_or_partition, 0, 0, -1))
                    continue
                count, freed = 0, 0
                if log.log_id in known:
                    count, freed = _retain(conn, log, req, known[log.log_id], now)
                responses.append(EnforceRetentionResponse(ErrorCode.none, count, freed, log.log_start_offset))
            return responses

        return self._transaction("enforce_retention", work)

    # ------------------------------------------------------------------ objects

    def get_files_to_delete(self) -> list[FileToDelete]:
        """Objects marked for deletion, oldest mark first, with the mark time in UTC."""

        def work(conn: psycopg.Connection) -> list[FileToDelete]:
            rows = conn.execute(
                "SELECT object_key, marked_for_deletion_at FROM diskless_files "
                "WHERE state = 'deleting' ORDER BY marked_for_deletion_at, file_id"
            ).fetchall()
            return [FileToDelete(key, utc(ms)) for key, ms in rows]

        return self._read("get_files_to_delete", work)

    def delete_files(self, request: DeleteFilesRequest) -> None:
        """Forget objects a broker deleted physically; objects still in use are kept."""
        keys = sorted(request.object_key_paths)
        if not keys:
            return

        def work(conn: psycopg.Connection) -> None:
            ids = [
                row[0]
                for row in conn.execute(
                    "SELECT file_id FROM diskless_files WHERE object_key = ANY(%b::text[]) AND state = 'deleting' "
                    "ORDER BY file_id FOR UPDATE",
                    (keys,),
                ).fetchall()
            ]
            if ids:
                conn.execute(
                    "DELETE FROM diskless_file_deleted_topics WHERE file_id = ANY(%b::bigint[])", (ids,)
                )
                conn.execute("DELETE FROM diskless_files WHERE file_id = ANY(%b::bigint[])", (ids,))

        self._transaction("delete_files", work)

    def is_safe_to_delete_file(self, object_key: str) -> bool:
        """True iff the object is unknown here (never committed, or already forgotten).

        A committed object is never safe for the orphan GC, even once marked for
        deletion: that deletion belongs to get_files_to_delete/delete_files.
        """

        def work(conn: psycopg.Connection) -> bool:
            row = conn.execute("SELECT 1 FROM diskless_files WHERE object_key = %s", (object_key,)).fetchone()
            return row is None

        return self._read("is_safe_to_delete_file", work)


@dataclass(slots=True)
class _Batches:
    """The live batches of a locked log read so far, in offset order, from its first one."""

    rows: list[tuple[int, int, int, int]]  # (last offset, base offset, size, retention timestamp)
    complete: bool  # no batch after the last of ``rows``


def _retain(
    conn: psycopg.Connection, log: LogState, req: EnforceRetentionRequest, known: _Batches, now: int
) -> tuple[int, int]:
    """Apply one request's limits to a locked log: (batches deleted, bytes freed).

    Batches are read on (``known`` grows) while every batch read so far goes. The log and
    ``known`` are updated, so several requests for one log in a call see each other's
    deletions, as in SQLite.
    """
    by_time = req.retention_ms >= 0
    by_size = req.retention_bytes >= 0
    remaining = log.byte_size
    boundary, count = log.log_start_offset, 0
    first_kept: int | None = None  # base offset of the first batch that stays
    while True:
        if count == len(known.rows):
            if known.complete:
                break
            limit = _RETENTION_PAGE * 16
            after = known.rows[-1][0] if known.rows else -1
            more = conn.execute(_RETENTION_NEXT_PAGE_SQL, (log.log_id, after, limit)).fetchall()
            known.rows.extend(more)
            known.complete = len(more) < limit
            continue
        last_offset, base_offset, size, timestamp = known.rows[count]
        if last_offset >= log.high_watermark:
            break
        if not (by_time and now - timestamp > req.retention_ms):
            by_time = False  # Kafka's size rule starts where its time rule stopped
            if not (by_size and remaining - size >= req.retention_bytes):
                first_kept = base_offset
                break
        boundary, count = last_offset + 1, count + 1
        remaining -= size
    if count == 0:
        return 0, 0
    del known.rows[:count]
    freed = delete_batches_below(conn, {log.log_id: boundary}, now).get(log.log_id, 0)
    # A DeleteRecords inside the first batch may already have moved the start past its base.
    log.log_start_offset = max(log.log_start_offset, log.high_watermark if first_kept is None else first_kept)
    log.byte_size -= freed
    _update_starts(conn, [log], {log.log_id: freed})
    prune_aborted(conn, {log.log_id: log.log_start_offset})
    return count, freed


def _update_starts(conn: psycopg.Connection, logs: list[LogState], freed: dict[int, int]) -> None:
    """Queue writing the new log start offsets, and the bytes freed below them, of ``logs``."""
    if logs:
        conn.execute(
            _UPDATE_STARTS_SQL,
            (
                [log.log_id for log in logs],
                [log.log_start_offset for log in logs],
                [freed.get(log.log_id, 0) for log in logs],
            ),
        )
