"""Log compaction (cleanup.policy=compact): swap a partition's cleaned range for the cleaner's
batches, and the cleaner checkpoints (``shoal.coordinator.log_compaction`` has the shared rules)."""

from __future__ import annotations

import sqlite3
import uuid

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
from shoal.store.sqlite.coordinator.base import CoordinatorBase
from shoal.store.sqlite.coordinator.schema import RECORD_DELETED_TOPIC_SQL, SHRINK_FILE_SQL

# Every batch ending in [start, end), in offset order: a range of the primary key (one that
# straddles start is among them; one that straddles end is the batch after, ``_AFTER_SQL``).
_HELD_SQL = """
SELECT b.batch_id, f.object_key, b.file_id, b.byte_offset, b.byte_size, b.base_offset, b.last_offset,
       b.log_append_time
FROM diskless_batches AS b JOIN diskless_files AS f ON f.file_id = b.file_id
WHERE b.log_id = ? AND b.last_offset >= ? AND b.last_offset < ?
ORDER BY b.last_offset
"""

_BEFORE_SQL = (
    "SELECT max_ts_so_far FROM diskless_batches WHERE log_id = ? AND last_offset < ? "
    "ORDER BY last_offset DESC LIMIT 1"
)
_AFTER_SQL = (
    "SELECT base_offset, max_ts_so_far FROM diskless_batches WHERE log_id = ? AND last_offset >= ? "
    "ORDER BY last_offset LIMIT 1"
)

_NEW_FILE_SQL = (
    "INSERT INTO diskless_files (object_key, uploader_broker_id, committed_at, size, used_size, state, "
    "marked_for_deletion_at) VALUES (?, ?, ?, ?, ?, ?, ?)"
)

_INSERT_BATCH_SQL = (
    "INSERT INTO diskless_batches (log_id, last_offset, batch_id, base_offset, file_id, byte_offset, "
    "byte_size, log_append_time, batch_max_timestamp, timestamp_type, producer_id, producer_epoch, "
    "base_sequence, last_sequence, max_ts_so_far, is_transactional, is_control) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)


class LogCompactionMixin(CoordinatorBase):
    """compact_partition and cleaner_checkpoints."""

    def compact_partition(
        self,
        new_object_key: str,
        new_object_size: int,
        uploader_broker_id: int,
        request: CompactPartitionRequest,
    ) -> CompactPartitionResult:
        """Swap the range's batches for the cleaned ones if it is unchanged, in ONE BEGIN IMMEDIATE
        transaction (see the protocol). Raises sqlite3.IntegrityError for a known object key."""
        check_request(new_object_size, request)
        tip = request.topic_id_partition
        with self._write() as conn:
            now = self._clock()
            log = conn.execute(
                "SELECT log_id, log_start_offset, high_watermark FROM diskless_logs "
                "WHERE topic_id = ? AND partition = ?",
                (tip.topic_id.bytes, tip.partition),
            ).fetchone()
            held, after = ([], None) if log is None else _held(conn, log[0], request)
            if (
                log is None
                or (after is not None and after[0] < request.end_offset)  # a batch straddles the end
                or request.end_offset > log[2]
                or not unchanged(held, request.source_batches)
            ):
                conn.execute(
                    _NEW_FILE_SQL,
                    (new_object_key, uploader_broker_id, now, new_object_size, 0, ObjectState.DELETING, now),
                )
                return CompactPartitionResult(False, 0, 0, ObjectState.DELETING, ())
            log_id, log_start_offset, _ = log
            before = conn.execute(_BEFORE_SQL, (log_id, request.start_offset)).fetchone()
            rows = new_rows(request, held, log_start_offset, -1 if before is None else before[0])
            added = sum(r.batch.size for r in rows)
            state = ObjectState.UPLOADED if added > 0 else ObjectState.DELETING
            file_id = conn.execute(
                _NEW_FILE_SQL,
                (new_object_key, uploader_broker_id, now, new_object_size, added, state,
                 None if added > 0 else now),
            ).lastrowid  # fmt: skip
            assert file_id is not None
            conn.execute(
                "DELETE FROM diskless_batches WHERE log_id = ? AND last_offset >= ? AND last_offset < ?",
                (log_id, request.start_offset, request.end_offset),
            )
            _insert(conn, log_id, file_id, rows)
            freed = freed_per_file(held)
            conn.executemany(SHRINK_FILE_SQL, [(size, now, fid) for fid, size in freed.items()])
            # Like the deletion paths: the topic overview shows the objects it leaves waiting for deletion.
            conn.executemany(RECORD_DELETED_TOPIC_SQL, [(fid, log_id) for fid in sorted(freed)])
            emptied = _emptied(conn, list(freed))
            top = rows[-1].max_ts_so_far if rows else -1
            removed = sum(h.size for h in held)
            conn.execute(
                "UPDATE diskless_logs SET byte_size = byte_size - ? + ?, "
                "cleaned_offset = MAX(cleaned_offset, ?), max_timestamp = MAX(max_timestamp, ?) "
                "WHERE log_id = ?",
                (removed, added, request.cleaned_offset, top, log_id),
            )
            # Keep the running max non-decreasing past the range (only when a cleaned batch's
            # timestamp exceeds every old one's: the later batches' values were at least theirs).
            if after is not None and after[1] < top:
                conn.execute(
                    "UPDATE diskless_batches SET max_ts_so_far = ? "
                    "WHERE log_id = ? AND last_offset >= ? AND max_ts_so_far < ?",
                    (top, log_id, request.end_offset, top),
                )
            return CompactPartitionResult(True, len(held), removed, state, emptied)

    def cleaner_checkpoints(self, topic_id: uuid.UUID) -> dict[int, int]:
        """Partition -> cleaner checkpoint of every partition of the topic, from one query."""
        with self._read() as conn:
            rows = conn.execute(
                "SELECT partition, cleaned_offset FROM diskless_logs WHERE topic_id = ?", (topic_id.bytes,)
            ).fetchall()
        return dict(rows)


def _held(
    conn: sqlite3.Connection, log_id: int, request: CompactPartitionRequest
) -> tuple[list[HeldBatch], tuple[int, int] | None]:
    """The batches the log holds in the range now, and (base offset, running max timestamp) of
    the batch after it (None: none)."""
    start, end = request.start_offset, request.end_offset
    held = [HeldBatch(*row) for row in conn.execute(_HELD_SQL, (log_id, start, end))]
    return held, conn.execute(_AFTER_SQL, (log_id, end)).fetchone()


def _emptied(conn: sqlite3.Connection, file_ids: list[int]) -> tuple[str, ...]:
    """Keys of the objects among ``file_ids`` left with no used byte, sorted."""
    if not file_ids:
        return ()
    marks = ",".join("?" * len(file_ids))
    rows = conn.execute(
        f"SELECT object_key FROM diskless_files WHERE used_size <= 0 AND file_id IN ({marks}) ORDER BY object_key",
        file_ids,
    ).fetchall()
    return tuple(key for (key,) in rows)


def _insert(conn: sqlite3.Connection, log_id: int, file_id: int, rows: list[NewRow]) -> None:
    """Insert the cleaned batches with ids from the sequence commit_file uses."""
    if not rows:
        return
    (first_id,) = conn.execute(
        "SELECT next_value FROM diskless_id_sequences WHERE name = 'batch_id'"
    ).fetchone()
    conn.executemany(
        _INSERT_BATCH_SQL,
        [
            (
                log_id, b.last_offset, first_id + i, b.base_offset, file_id, b.byte_offset, b.size,
                r.log_append_time, b.batch_max_timestamp, int(b.message_timestamp_type), b.producer_id,
                b.producer_epoch, b.base_sequence, b.last_sequence, r.max_ts_so_far, int(b.is_transactional),
                int(b.is_control),
            )
            for i, (r, b) in enumerate((r, r.batch) for r in rows)
        ],
    )  # fmt: skip
    conn.execute(
        "UPDATE diskless_id_sequences SET next_value = ? WHERE name = 'batch_id'", (first_id + len(rows),)
    )
