"""Everything that removes data, and the topic creation it pairs with.

Topics are created and deleted; records go by DeleteRecords and by retention, batches that
tiered storage now holds by delete_tiered_batches (the log start stays); objects emptied by
those are marked for deletion, listed for the broker that deletes them and
forgotten once it has (get_files_to_delete / delete_files / is_safe_to_delete_file).
Aborted transactions whose marker falls below a moved log start go with it; delete_tiered_batches
keeps them (the log start stays: those offsets are still read, from tiered segments).
"""

from __future__ import annotations

import sqlite3
import uuid

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
from shoal.store.sqlite.coordinator.base import CoordinatorBase
from shoal.store.sqlite.coordinator.commit import LogState, load_log
from shoal.store.sqlite.coordinator.schema import RECORD_DELETED_TOPIC_SQL, SHRINK_FILE_SQL, utc
from shoal.store.sqlite.coordinator.txns import delete_log_txns, prune_aborted

# The age time retention judges a batch by. Kafka's LogSegment.largestTimestamp falls
# back to the segment file's mtime (about its append time) when the segment has no
# record timestamp; a batch without one (max timestamp -1) falls back to its append time.
_RETENTION_TS = (
    "CASE WHEN timestamp_type = 1 OR batch_max_timestamp < 0 THEN log_append_time ELSE batch_max_timestamp END"
)


class DeleteMixin(CoordinatorBase):
    """Topic lifecycle, record deletion, retention and the deletion of emptied objects."""

    # ------------------------------------------------------------------ topics

    def create_topic_and_partitions(self, requests: set[CreateTopicAndPartitionsRequest]) -> None:
        """Create the missing logs; existing partitions keep their offsets (idempotent)."""
        rows = [
            (req.topic_id.bytes, partition, req.topic_name)
            for req in requests
            for partition in range(req.num_partitions)
        ]
        with self._write() as conn:
            conn.executemany(
                "INSERT INTO diskless_logs (topic_id, partition, topic_name) VALUES (?, ?, ?) "
                "ON CONFLICT (topic_id, partition) DO NOTHING",
                rows,
            )

    def delete_topics(self, topic_ids: set[uuid.UUID]) -> None:
        """Drop the logs, batches, producer and transaction state of the topics; shrink their objects."""
        with self._write() as conn:
            now = self._clock()
            for topic_id in topic_ids:
                log_ids = [
                    row[0]
                    for row in conn.execute(
                        "SELECT log_id FROM diskless_logs WHERE topic_id = ?", (topic_id.bytes,)
                    )
                ]
                for log_id in log_ids:
                    self._delete_batches_below(conn, log_id, None, now)
                    conn.execute("DELETE FROM diskless_producer_state WHERE log_id = ?", (log_id,))
                    delete_log_txns(conn, log_id)
                    conn.execute("DELETE FROM diskless_logs WHERE log_id = ?", (log_id,))

    @staticmethod
    def _delete_batches_below(conn: sqlite3.Connection, log_id: int, offset: int | None, now: int) -> int:
        """Delete the batches of a log entirely below ``offset`` (all if None); return bytes freed.

        Objects lose the bytes of their deleted batches; an object left with no used
        byte becomes 'deleting' so a broker deletes it after the grace period.
        """
        where = "log_id = ?" if offset is None else "log_id = ? AND last_offset < ?"
        params: tuple[int, ...] = (log_id,) if offset is None else (log_id, offset)
        per_file = conn.execute(
            f"SELECT file_id, SUM(byte_size) FROM diskless_batches WHERE {where} GROUP BY file_id", params
        ).fetchall()
        if not per_file:
            return 0
        conn.execute(f"DELETE FROM diskless_batches WHERE {where}", params)
        conn.executemany(SHRINK_FILE_SQL, [(freed, now, file_id) for file_id, freed in per_file])
        conn.executemany(RECORD_DELETED_TOPIC_SQL, [(file_id, log_id) for file_id, _ in per_file])
        return sum(freed for _, freed in per_file)

    # ------------------------------------------------------------------ records

    def delete_records(self, requests: list[DeleteRecordsRequest]) -> list[DeleteRecordsResponse]:
        """Move log start offsets forward (never back) and drop the batches entirely below."""
        responses: list[DeleteRecordsResponse] = []
        with self._write() as conn:
            now = self._clock()
            for req in requests:
                tip = req.topic_id_partition
                log = load_log(conn, (tip.topic_id.bytes, tip.partition))
                if log is None:
                    responses.append(DeleteRecordsResponse(ErrorCode.unknown_topic_or_partition, -1))
                    continue
                offset = log.high_watermark if req.offset == -1 else req.offset
                if offset < 0 or offset > log.high_watermark:
                    # Kafka answers errors with INVALID_LOW_WATERMARK (-1).
                    responses.append(DeleteRecordsResponse(ErrorCode.offset_out_of_range, -1))
                    continue
                if offset > log.log_start_offset:
                    freed = self._delete_batches_below(conn, log.log_id, offset, now)
                    conn.execute(
                        "UPDATE diskless_logs SET log_start_offset = ?, byte_size = byte_size - ? "
                        "WHERE log_id = ?",
                        (offset, freed, log.log_id),
                    )
                    prune_aborted(conn, log.log_id, offset)
                    log.log_start_offset = offset
                responses.append(DeleteRecordsResponse(ErrorCode.none, log.log_start_offset))
        return responses

    def delete_tiered_batches(
        self, requests: list[DeleteTieredBatchesRequest]
    ) -> list[DeleteTieredBatchesResponse]:
        """Drop the batches tiered storage now holds, keeping the log start, in one transaction.

        Those offsets stay part of the log (read from tiered segments), so only the batches
        and their bytes go; requests apply in order, so several for one partition see each
        other's deletions.
        """
        responses: list[DeleteTieredBatchesResponse] = []
        with self._write() as conn:
            now = self._clock()
            for req in requests:
                tip = req.topic_id_partition
                log = load_log(conn, (tip.topic_id.bytes, tip.partition))
                if log is None:
                    responses.append(
                        DeleteTieredBatchesResponse(ErrorCode.unknown_topic_or_partition, 0, 0, -1)
                    )
                    continue
                if req.offset < 0 or req.offset > log.high_watermark:
                    responses.append(DeleteTieredBatchesResponse(ErrorCode.offset_out_of_range, 0, 0, -1))
                    continue
                # The helper answers bytes only; in this write transaction the count cannot go stale.
                (count,) = conn.execute(
                    "SELECT COUNT(*) FROM diskless_batches WHERE log_id = ? AND last_offset < ?",
                    (log.log_id, req.offset),
                ).fetchone()
                freed = 0
                if count:
                    freed = self._delete_batches_below(conn, log.log_id, req.offset, now)
                    conn.execute(
                        "UPDATE diskless_logs SET byte_size = byte_size - ? WHERE log_id = ?",
                        (freed, log.log_id),
                    )
                responses.append(
                    DeleteTieredBatchesResponse(ErrorCode.none, count, freed, self._local_start(conn, log))
                )
        return responses

    @staticmethod
    def _local_start(conn: sqlite3.Connection, log: LogState) -> int:
        """The first offset still held by a batch here: its base, or the high watermark when none is left.

        At least the log start: a DeleteRecords inside the first batch moved the start past its base.
        """
        first = conn.execute(
            "SELECT base_offset FROM diskless_batches WHERE log_id = ? ORDER BY last_offset LIMIT 1",
            (log.log_id,),
        ).fetchone()
        return max(log.log_start_offset, log.high_watermark if first is None else first[0])

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
        responses: list[EnforceRetentionResponse] = []
        with self._write() as conn:
            now = self._clock()
            for req in requests:
                tip = req.topic_id_partition
                log = load_log(conn, (tip.topic_id.bytes, tip.partition))
                if log is None:
                    responses.append(EnforceRetentionResponse(ErrorCode.unknown_topic_or_partition, 0, 0, -1))
                    continue
                boundary, batches = self._retention_boundary(conn, log, req, now)
                freed = 0
                if batches:
                    freed = self._delete_batches_below(conn, log.log_id, boundary, now)
                    start = self._local_start(conn, log)
                    conn.execute(
                        "UPDATE diskless_logs SET log_start_offset = ?, byte_size = byte_size - ? WHERE log_id = ?",
                        (start, freed, log.log_id),
                    )
                    prune_aborted(conn, log.log_id, start)
                    log.log_start_offset = start
                responses.append(EnforceRetentionResponse(ErrorCode.none, batches, freed, log.log_start_offset))
        return responses

    @staticmethod
    def _retention_boundary(
        conn: sqlite3.Connection, log: LogState, req: EnforceRetentionRequest, now: int
    ) -> tuple[int, int]:
        """(offset below which every batch goes, number of those batches) under the request's limits."""
        by_time = req.retention_ms >= 0
        by_size = req.retention_bytes >= 0
        if not (by_time or by_size):
            return log.log_start_offset, 0
        remaining = log.byte_size
        boundary, count = log.log_start_offset, 0
        cur = conn.execute(
            f"SELECT last_offset, byte_size, {_RETENTION_TS} FROM diskless_batches "
            "WHERE log_id = ? ORDER BY last_offset",
            (log.log_id,),
        )
        try:
            for last_offset, size, timestamp in cur:
                if last_offset >= log.high_watermark:
                    break
                if by_time and now - timestamp > req.retention_ms:
                    pass
                else:
                    by_time = False  # Kafka's size rule starts where its time rule stopped
                    if not (by_size and remaining - size >= req.retention_bytes):
                        break
                boundary, count = last_offset + 1, count + 1
                remaining -= size
        finally:
            cur.close()
        return boundary, count

    # ------------------------------------------------------------------ objects

    def get_files_to_delete(self) -> list[FileToDelete]:
        """Objects marked for deletion, oldest mark first, with the mark time in UTC."""
        with self._read() as conn:
            rows = conn.execute(
                "SELECT object_key, marked_for_deletion_at FROM diskless_files "
                "WHERE state = 'deleting' ORDER BY marked_for_deletion_at, file_id"
            ).fetchall()
        return [FileToDelete(key, utc(ms)) for key, ms in rows]

    def delete_files(self, request: DeleteFilesRequest) -> None:
        """Forget objects a broker deleted physically; objects still in use are kept."""
        keys = [(key,) for key in request.object_key_paths]
        with self._write() as conn:
            conn.executemany(
                "DELETE FROM diskless_file_deleted_topics WHERE file_id = "
                "(SELECT file_id FROM diskless_files WHERE object_key = ? AND state = 'deleting')",
                keys,
            )
            conn.executemany("DELETE FROM diskless_files WHERE object_key = ? AND state = 'deleting'", keys)

    def is_safe_to_delete_file(self, object_key: str) -> bool:
        """True iff the object is unknown here (never committed, or already forgotten).

        A committed object is never safe for the orphan GC, even once marked for
        deletion: that deletion belongs to get_files_to_delete/delete_files.
        """
        with self._read() as conn:
            row = conn.execute("SELECT 1 FROM diskless_files WHERE object_key = ?", (object_key,)).fetchone()
        return row is None
