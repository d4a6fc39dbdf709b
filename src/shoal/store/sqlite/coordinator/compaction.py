"""Object compaction: pick small or sparse objects, list their batches, repoint the batches."""

from __future__ import annotations

import json
import uuid

from shoal.coordinator.api import BatchInfo, BatchMetadata, ObjectState, TopicIdPartition
from shoal.coordinator.compaction_types import BatchMove, ObjectCandidate, ReplaceResult
from shoal.store.sqlite.coordinator.base import CoordinatorBase
from shoal.store.sqlite.coordinator.schema import (
    RECORD_DELETED_TOPIC_SQL,
    SHRINK_FILE_SQL,
    TIMESTAMP_TYPES,
    utc,
)


class CompactionMixin(CoordinatorBase):
    """The coordinator side of compaction: candidates, their batches, the atomic replace."""

    def list_compaction_candidates(
        self, min_age_ms: int, max_object_bytes: int, limit: int
    ) -> list[ObjectCandidate]:
        """Small or sparse objects in state 'uploaded', committed ``min_age_ms`` ago or earlier, oldest first.

        A scan of the objects table (one row per object, not per batch): a batch job's query.
        """
        with self._read() as conn:
            rows = conn.execute(
                "SELECT object_key, size, used_size, committed_at FROM diskless_files "
                "WHERE state = 'uploaded' AND committed_at <= ? AND (size <= ? OR used_size * 2 <= size) "
                "ORDER BY committed_at, file_id LIMIT ?",
                (self._clock() - min_age_ms, max_object_bytes, limit),
            ).fetchall()
        return [ObjectCandidate(key, size, used, utc(at)) for key, size, used, at in rows]

    def list_object_batches(self, object_keys: list[str]) -> dict[str, list[BatchInfo]]:
        """Live batches of the objects in byte order, from ONE statement (one snapshot).

        There is no index of batches by object (it would cost every commit), so this is one
        scan of the batch table whatever the number of keys: call it once per compaction run.
        """
        out: dict[str, list[BatchInfo]] = {key: [] for key in object_keys}
        if not object_keys:
            return out
        with self._read() as conn:
            rows = conn.execute(
                "SELECT f.object_key, l.topic_id, l.partition, l.topic_name, b.batch_id, b.byte_offset, "
                "b.byte_size, b.base_offset, b.last_offset, b.log_append_time, b.batch_max_timestamp, "
                "b.timestamp_type, b.producer_id, b.producer_epoch, b.base_sequence, b.last_sequence, "
                "b.is_transactional, b.is_control "
                # CROSS JOIN pins the batch table as the outer loop: one scan, whatever the planner thinks.
                "FROM diskless_batches AS b "
                "CROSS JOIN diskless_files AS f ON f.file_id = b.file_id "
                "JOIN diskless_logs AS l ON l.log_id = b.log_id "
                "WHERE f.object_key IN (SELECT value FROM json_each(?)) "
                "ORDER BY f.object_key, b.byte_offset",
                (json.dumps(list(object_keys)),),
            ).fetchall()
        for r in rows:
            out[r[0]].append(
                BatchInfo(
                    r[4],
                    r[0],
                    BatchMetadata(
                        TopicIdPartition(uuid.UUID(bytes=r[1]), r[2], r[3]),
                        r[5],
                        r[6],
                        r[7],
                        r[8],
                        r[9],
                        r[10],
                        TIMESTAMP_TYPES[r[11]],
                        r[12],
                        r[13],
                        r[14],
                        r[15],
                        bool(r[16]),
                        bool(r[17]),
                    ),
                )
            )
        return out

    def replace_batches(
        self,
        new_object_key: str,
        new_object_size: int,
        moves: list[BatchMove],
        uploader_broker_id: int,
    ) -> ReplaceResult:
        """Register a compacted object and repoint the batches that are still where the compactor read them.

        One BEGIN IMMEDIATE transaction: any failure rolls everything back (the new object
        then stays unknown, an orphan for the cleaner). Rows of batches are only ever
        updated, never inserted, so a batch deleted meanwhile cannot come back; the logs'
        offsets and byte sizes do not change (the same bytes, elsewhere).
        """
        _check_moves(new_object_size, moves)
        with self._write() as conn:
            now = self._clock()
            new_file_id = conn.execute(
                "INSERT INTO diskless_files (object_key, uploader_broker_id, committed_at, size, "
                "used_size, state) VALUES (?, ?, ?, ?, 0, 'uploaded')",
                (new_object_key, uploader_broker_id, now, new_object_size),
            ).lastrowid
            old_files: dict[str, tuple[int, int] | None] = {}
            log_ids: dict[tuple[bytes, int], int | None] = {}
            freed: dict[int, int] = {}
            touched: set[tuple[int, int]] = set()
            updates: list[tuple[int, int, int, int]] = []
            for move in moves:
                if move.old_object_key not in old_files:
                    old_files[move.old_object_key] = conn.execute(
                        "SELECT file_id, used_size FROM diskless_files WHERE object_key = ?",
                        (move.old_object_key,),
                    ).fetchone()
                old = old_files[move.old_object_key]
                tip = move.topic_id_partition
                key = (tip.topic_id.bytes, tip.partition)
                if key not in log_ids:
                    row = conn.execute(
                        "SELECT log_id FROM diskless_logs WHERE topic_id = ? AND partition = ?", key
                    ).fetchone()
                    log_ids[key] = None if row is None else row[0]
                log_id = log_ids[key]
                if old is None or log_id is None:
                    continue
                current = conn.execute(
                    "SELECT batch_id, file_id, byte_offset, byte_size FROM diskless_batches "
                    "WHERE log_id = ? AND last_offset = ?",
                    (log_id, move.last_offset),
                ).fetchone()
                if current != (move.batch_id, old[0], move.old_byte_offset, move.byte_size):
                    continue  # deleted, or no longer there: leave it alone
                updates.append((new_file_id, move.new_byte_offset, log_id, move.last_offset))
                freed[old[0]] = freed.get(old[0], 0) + move.byte_size
                touched.add((old[0], log_id))
            conn.executemany(
                "UPDATE diskless_batches SET file_id = ?, byte_offset = ? WHERE log_id = ? AND last_offset = ?",
                updates,
            )
            moved_bytes = sum(freed.values())
            if moved_bytes > 0:
                conn.execute(
                    "UPDATE diskless_files SET used_size = ? WHERE file_id = ?", (moved_bytes, new_file_id)
                )
            else:
                conn.execute(
                    "UPDATE diskless_files SET state = 'deleting', marked_for_deletion_at = ? WHERE file_id = ?",
                    (now, new_file_id),
                )
            conn.executemany(SHRINK_FILE_SQL, [(size, now, file_id) for file_id, size in freed.items()])
            # Like the deletion paths: the topic overview shows the objects it leaves waiting for deletion.
            conn.executemany(RECORD_DELETED_TOPIC_SQL, sorted(touched))
            emptied = tuple(
                sorted(
                    key
                    for key, old in old_files.items()
                    if old is not None and old[0] in freed and old[1] - freed[old[0]] <= 0
                )
            )
        return ReplaceResult(
            moved=len(updates),
            skipped=len(moves) - len(updates),
            moved_bytes=moved_bytes,
            new_object_state=ObjectState.UPLOADED if moved_bytes > 0 else ObjectState.DELETING,
            emptied_object_keys=emptied,
        )


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
