"""Object compaction: pick small or sparse objects, list their batches, repoint the batches."""

from __future__ import annotations

import psycopg

from shoal.coordinator.api import BatchInfo, ObjectState
from shoal.coordinator.compaction_types import BatchMove, ObjectCandidate, ReplaceResult
from shoal.store.postgres.coordinator.base import CoordinatorBase
from shoal.store.postgres.coordinator.logs import (
    queue_lock_logs,
    record_deleted_topics,
    shrink_files,
)
from shoal.store.postgres.coordinator.schema import BATCH_COLUMNS, object_batch, utc

_OBJECT_BATCHES_SQL = f"""
SELECT f.object_key, l.topic_id, l.partition, l.topic_name, b.batch_id, {BATCH_COLUMNS}
FROM diskless_batches AS b
JOIN diskless_files AS f ON f.file_id = b.file_id
JOIN diskless_logs AS l ON l.log_id = b.log_id
WHERE f.object_key = ANY(%b::text[])
ORDER BY f.object_key, b.byte_offset
"""

# Where each moved batch is now (the logs are locked: nothing moves or goes meanwhile).
_CURRENT_SQL = """
SELECT k.ord, l.log_id, b.batch_id, b.file_id, f.object_key, b.byte_offset, b.byte_size
FROM unnest(%b::uuid[], %b::integer[], %b::bigint[]) WITH ORDINALITY AS k(topic_id, partition, last_offset, ord)
JOIN diskless_logs AS l ON l.topic_id = k.topic_id AND l.partition = k.partition
JOIN diskless_batches AS b ON b.log_id = l.log_id AND b.last_offset = k.last_offset
JOIN diskless_files AS f ON f.file_id = b.file_id
"""

_NEW_FILE_SQL = """
INSERT INTO diskless_files (object_key, uploader_broker_id, committed_at, size, used_size, state,
                            marked_for_deletion_at)
VALUES (%s, %s, %s, %s, %s, %s, %s)
RETURNING file_id
"""

_REPOINT_SQL = """
UPDATE diskless_batches AS b SET file_id = %s, byte_offset = u.byte_offset
FROM unnest(%b::bigint[], %b::bigint[], %b::bigint[]) AS u(log_id, last_offset, byte_offset)
WHERE b.log_id = u.log_id AND b.last_offset = u.last_offset
"""


class CompactionMixin(CoordinatorBase):
    """The coordinator side of compaction: candidates, their batches, the atomic replace."""

    def list_compaction_candidates(
        self, min_age_ms: int, max_object_bytes: int, limit: int
    ) -> list[ObjectCandidate]:
        """Small or sparse objects in state 'uploaded', committed ``min_age_ms`` ago or earlier, oldest first.

        A scan of the objects table (one row per object, not per batch): a batch job's query.
        """

        def work(conn: psycopg.Connection) -> list[ObjectCandidate]:
            rows = conn.execute(
                "SELECT object_key, size, used_size, committed_at FROM diskless_files "
                "WHERE state = 'uploaded' AND committed_at <= %s AND (size <= %s OR used_size * 2 <= size) "
                "ORDER BY committed_at, file_id LIMIT %s",
                (self._clock() - min_age_ms, max_object_bytes, limit),
            ).fetchall()
            return [ObjectCandidate(key, size, used, utc(at)) for key, size, used, at in rows]

        return self._read("list_compaction_candidates", work)

    def list_object_batches(self, object_keys: list[str]) -> dict[str, list[BatchInfo]]:
        """Live batches of the objects in byte order, from ONE statement (one snapshot).

        There is no index of batches by object (it would cost every commit), so this is one
        scan of the batch table whatever the number of keys: call it once per compaction run.
        """
        out: dict[str, list[BatchInfo]] = {key: [] for key in object_keys}
        if not object_keys:
            return out

        def work(conn: psycopg.Connection) -> list[tuple]:
            return conn.execute(_OBJECT_BATCHES_SQL, (list(object_keys),)).fetchall()

        for r in self._read("list_object_batches", work):
            out[r[0]].append(object_batch(r))
        return out

    def replace_batches(
        self,
        new_object_key: str,
        new_object_size: int,
        moves: list[BatchMove],
        uploader_broker_id: int,
    ) -> ReplaceResult:
        """Register a compacted object and repoint the batches that are still where the compactor read them.

        One transaction: any failure rolls everything back (the new object then stays
        unknown, an orphan for the cleaner). The moved batches' logs are locked first (so no
        commit, deletion or other compactor changes them meanwhile), then the old objects.
        Rows of batches are only ever updated, never inserted, so a batch deleted meanwhile
        cannot come back; the logs' offsets and byte sizes do not change (the same bytes,
        elsewhere). Raises psycopg.errors.UniqueViolation if ``new_object_key`` is known.
        """
        _check_moves(new_object_size, moves)
        keys = [(m.topic_id_partition.topic_id, m.topic_id_partition.partition) for m in moves]

        def work(conn: psycopg.Connection) -> ReplaceResult:
            now = self._clock()
            queue_lock_logs(conn, keys)
            current = {
                row[0]: row[1:]
                for row in conn.execute(
                    _CURRENT_SQL, ([k[0] for k in keys], [k[1] for k in keys], [m.last_offset for m in moves])
                ).fetchall()
            }
            freed: dict[int, int] = {}
            touched: set[tuple[int, int]] = set()
            updates: list[tuple[int, int, int]] = []
            for ord_, move in enumerate(moves, start=1):
                now_at = current.get(ord_)
                if now_at is None:
                    continue  # deleted, or its partition is gone
                log_id, batch_id, file_id, object_key, byte_offset, byte_size = now_at
                if (batch_id, object_key, byte_offset, byte_size) != (
                    move.batch_id,
                    move.old_object_key,
                    move.old_byte_offset,
                    move.byte_size,
                ):
                    continue  # no longer there: leave it alone
                updates.append((log_id, move.last_offset, move.new_byte_offset))
                freed[file_id] = freed.get(file_id, 0) + move.byte_size
                touched.add((file_id, log_id))
            moved_bytes = sum(freed.values())
            state, marked = ("uploaded", None) if moved_bytes > 0 else ("deleting", now)
            new_file_id = conn.execute(
                _NEW_FILE_SQL,
                (new_object_key, uploader_broker_id, now, new_object_size, moved_bytes, state, marked),
            ).fetchone()[0]
            emptied: list[str] = []
            if updates:
                conn.execute(
                    _REPOINT_SQL,
                    (new_file_id, [u[0] for u in updates], [u[1] for u in updates], [u[2] for u in updates]),
                )
                shrunk = shrink_files(conn, freed, now)
                # Like the deletion paths: the topic overview shows the objects it leaves waiting for deletion.
                record_deleted_topics(conn, sorted(touched))
                assert shrunk is not None
                emptied = [key for key, used_size in shrunk.fetchall() if used_size <= 0]
            return ReplaceResult(
                moved=len(updates),
                skipped=len(moves) - len(updates),
                moved_bytes=moved_bytes,
                new_object_state=ObjectState.UPLOADED if moved_bytes > 0 else ObjectState.DELETING,
                emptied_object_keys=tuple(sorted(emptied)),
            )

        return self._transaction("replace_batches", work)


def _check_moves(new_object_size: int, moves: list[BatchMove]) -> None:
    """Refuse moves that cannot describe the new object: out of it, overlapping, or repeated."""
    if new_object_size <= 0:
        raise ValueError(f"new object size must be positive, got {new_object_size}")
    if len({m.batch_id for m in moves}) != len(moves):
        raise ValueError("a batch is moved more than once")
    end = 0
    for move in sorted(moves, key=lambda m: m.new_byte_offset):
        if (
            move.byte_size <= 0
            or move.new_byte_offset < end
            or move.new_byte_offset + move.byte_size > new_object_size
        ):
            raise ValueError(
                f"batch {move.batch_id}: bytes {move.new_byte_offset}..{move.new_byte_offset + move.byte_size} "
                f"overlap another batch or fall outside the new object of {new_object_size} bytes"
            )
        end = move.new_byte_offset + move.byte_size
