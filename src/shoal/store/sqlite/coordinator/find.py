"""The read paths: find_batches (every Fetch), list_offsets and get_log_info.

Every answer carries the partition's last stable offset; READ_COMMITTED reads stop there and
list the aborted transactions of what they return (``txns``).
"""

from __future__ import annotations

import sqlite3
import uuid
from functools import partial

from shoal.coordinator.api import (
    BatchInfo,
    BatchMetadata,
    FindBatchRequest,
    FindBatchResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    ListOffsetsTimestamp,
)
from shoal.coordinator.log_compaction import compaction_gap, local_log_start
from shoal.coordinator.transactions import committed_offset_answer, last_stable_offset
from shoal.protocol.errors import ErrorCode
from shoal.store.sqlite.coordinator.base import CoordinatorBase
from shoal.store.sqlite.coordinator.schema import TIMESTAMP_TYPES
from shoal.store.sqlite.coordinator.txns import aborted_overlapping

_EFFECTIVE_TS = "CASE WHEN timestamp_type = 1 THEN log_append_time ELSE batch_max_timestamp END"

# One statement per partition: the log row and its batches from one snapshot. The range
# check sits in the join so an out-of-range offset reads no batch at all. The first row tells
# whether the offset is held here at all: below the first batch left (or with none left) it
# went to tiered storage (delete_tiered_batches), unless log compaction removed it (below the
# cleaner checkpoint, or after another batch: ``compaction_gap``). The first ongoing
# transaction's offset (for the LSO) is a non-correlated subquery, which SQLite runs once per
# statement, not once per row.
_FIND_SQL = """
SELECT l.log_start_offset, l.high_watermark,
       b.batch_id, f.object_key, b.byte_offset, b.byte_size, b.base_offset, b.last_offset,
       b.log_append_time, b.batch_max_timestamp, b.timestamp_type,
       b.producer_id, b.producer_epoch, b.base_sequence, b.last_sequence, b.is_transactional, b.is_control,
       l.log_id,
       (SELECT MIN(t.txn_first_offset) FROM diskless_producer_txns AS t
        WHERE t.log_id = (SELECT log_id FROM diskless_logs WHERE topic_id = ?2 AND partition = ?3)
        AND t.txn_first_offset IS NOT NULL),
       l.cleaned_offset
FROM diskless_logs AS l
LEFT JOIN diskless_batches AS b
    ON b.log_id = l.log_id AND b.last_offset >= ?1
    AND ?1 >= l.log_start_offset AND ?1 < l.high_watermark
LEFT JOIN diskless_files AS f ON f.file_id = b.file_id
WHERE l.topic_id = ?2 AND l.partition = ?3
ORDER BY b.last_offset
"""

_FIRST_ONGOING = """(SELECT MIN(t.txn_first_offset) FROM diskless_producer_txns AS t
        WHERE t.log_id = l.log_id AND t.txn_first_offset IS NOT NULL)"""

_LOG_SQL = f"""
SELECT l.log_id, l.log_start_offset, l.high_watermark, {_FIRST_ONGOING}, NULL, l.cleaned_offset
FROM diskless_logs AS l WHERE l.topic_id = ? AND l.partition = ?
"""

# EARLIEST_LOCAL also needs the first batch left (none: every batch went), from the same snapshot.
_LOG_LOCAL_START_SQL = f"""
SELECT l.log_id, l.log_start_offset, l.high_watermark, {_FIRST_ONGOING},
       (SELECT b.base_offset FROM diskless_batches AS b
        WHERE b.log_id = l.log_id ORDER BY b.last_offset LIMIT 1), l.cleaned_offset
FROM diskless_logs AS l WHERE l.topic_id = ? AND l.partition = ?
"""

# Whether a batch of the log ends below an offset (one seek of the primary key): a missing offset
# after another batch is a compacted record, never a tiered one. Read only for a missing offset
# above the cleaner checkpoint (rare: a cleaner that checkpointed below its range), on the same
# snapshot as the batches while their statement still has rows.
_BATCH_BEFORE_SQL = "SELECT 1 FROM diskless_batches WHERE log_id = ? AND last_offset < ? LIMIT 1"


class FindMixin(CoordinatorBase):
    """Batch coordinates and offsets, read from a pooled connection."""

    def find_batches(
        self, find_batch_requests: list[FindBatchRequest], fetch_max_bytes: int
    ) -> list[FindBatchResponse]:
        """Batch coordinates from each requested offset on, one indexed query per partition.

        Limits work like Kafka's log reads: a batch is added only while the partition
        stays within ``max_partition_fetch_bytes`` and the response within
        ``fetch_max_bytes``, except that the first batch of a partition is always
        returned when it is the first batch of the response (so a consumer always makes
        progress) or when it fits in what is left of ``fetch_max_bytes``. Batches are
        contiguous: we stop at the first batch that does not fit. An offset in [log start,
        high watermark) that no batch covers any more answers OFFSET_MOVED_TO_TIERED_STORAGE:
        the reader must fetch it from tiered storage, never skip ahead to later batches; unless
        log compaction removed it (``compaction_gap``): then the batches from the next one on
        answer (none when compaction left none after it), and later gaps are read across.

        A ``read_committed`` request stops before the first batch reaching the last stable
        offset and lists the aborted transactions overlapping what it returns; such a call
        reads in one transaction, so batches, LSO and aborted transactions share a snapshot.
        """
        responses: list[FindBatchResponse] = []
        remaining = fetch_max_bytes
        response_has_data = False
        with self._read() as conn:
            if any(req.read_committed for req in find_batch_requests):
                conn.execute("BEGIN")  # _read rolls it back
            for req in find_batch_requests:
                tip = req.topic_id_partition
                cur = conn.execute(_FIND_SQL, (req.offset, tip.topic_id.bytes, tip.partition))
                try:
                    row = cur.fetchone()
                    if row is None:
                        responses.append(FindBatchResponse(ErrorCode.unknown_topic_or_partition, [], -1, -1))
                        continue
                    log_start_offset, high_watermark, log_id = row[0], row[1], row[17]
                    lso = last_stable_offset(log_start_offset, high_watermark, row[18])
                    if req.offset < log_start_offset or req.offset > high_watermark:
                        responses.append(
                            FindBatchResponse(
                                ErrorCode.offset_out_of_range, [], log_start_offset, high_watermark, lso
                            )
                        )
                        continue
                    if (
                        req.offset < high_watermark
                        and (row[2] is None or row[6] > req.offset)
                        and not compaction_gap(
                            req.offset,
                            row[19],
                            partial(_batch_before, conn, log_id, req.offset),
                        )
                    ):
                        responses.append(
                            FindBatchResponse(
                                ErrorCode.offset_moved_to_tiered_storage,
                                [],
                                log_start_offset,
                                high_watermark,
                                lso,
                            )
                        )
                        continue
                    found: list[BatchInfo] = []
                    partition_bytes = 0
                    # READ_COMMITTED: whole batches below the LSO only (Kafka's maxOffset).
                    end = lso if req.read_committed else high_watermark
                    while row is not None and row[2] is not None and row[7] < end:
                        size = row[5]
                        if found:
                            if partition_bytes + size > req.max_partition_fetch_bytes or size > remaining:
                                break
                        elif response_has_data and size > remaining:
                            break
                        # Positional: this loop runs once per fetched batch.
                        found.append(
                            BatchInfo(
                                row[2],
                                row[3],
                                BatchMetadata(
                                    tip,
                                    row[4],
                                    size,
                                    row[6],
                                    row[7],
                                    row[8],
                                    row[9],
                                    TIMESTAMP_TYPES[row[10]],
                                    row[11],
                                    row[12],
                                    row[13],
                                    row[14],
                                    bool(row[15]),
                                    bool(row[16]),
                                ),
                            )
                        )
                        partition_bytes += size
                        remaining -= size
                        response_has_data = True
                        if partition_bytes >= req.max_partition_fetch_bytes or remaining <= 0:
                            break
                        row = cur.fetchone()
                finally:
                    # Resets the statement: an unfinished SELECT would pin its WAL snapshot.
                    cur.close()
                aborted: list[tuple[int, int]] = []
                if req.read_committed and found:
                    aborted = aborted_overlapping(
                        conn, log_id, req.offset, found[-1].metadata.last_offset + 1
                    )
                responses.append(
                    FindBatchResponse(ErrorCode.none, found, log_start_offset, high_watermark, lso, aborted)
                )
        return responses

    # ------------------------------------------------------------------ offsets

    def list_offsets(self, requests: list[ListOffsetsRequest]) -> list[ListOffsetsResponse]:
        """Earliest / latest / max-timestamp / by-timestamp lookups at batch granularity.

        Kafka answers a timestamp lookup with the exact first record whose timestamp is
        >= the target; the coordinator only knows batches, so it answers the base offset
        (at least the log start offset) of the first batch whose max timestamp is >= the
        target, with that batch's max timestamp (log append time for LogAppendTime
        batches). MAX_TIMESTAMP answers the last offset of the earliest batch holding the
        greatest timestamp. The broker may refine both by reading the batch. EARLIEST_LOCAL
        is the first batch left here (tiered storage may hold offsets below it). Other
        negative timestamps answer INVALID_REQUEST. ``read_committed``: LATEST is the last
        stable offset, and other answers than EARLIEST / EARLIEST_LOCAL at or past it are none.
        """
        responses: list[ListOffsetsResponse] = []
        with self._read() as conn:
            for req in requests:
                tip = req.topic_id_partition
                ts = req.timestamp
                log = conn.execute(
                    _LOG_LOCAL_START_SQL if ts == ListOffsetsTimestamp.EARLIEST_LOCAL else _LOG_SQL,
                    (tip.topic_id.bytes, tip.partition),
                ).fetchone()
                if log is None:
                    responses.append(ListOffsetsResponse(ErrorCode.unknown_topic_or_partition, tip, -1, -1))
                    continue
                log_id, log_start_offset, high_watermark, first_ongoing, first_base, cleaned_offset = log
                lso = last_stable_offset(log_start_offset, high_watermark, first_ongoing)
                if ts == ListOffsetsTimestamp.EARLIEST:
                    timestamp, offset = -1, log_start_offset
                elif ts == ListOffsetsTimestamp.EARLIEST_LOCAL:
                    offset = local_log_start(log_start_offset, high_watermark, first_base, cleaned_offset)
                    timestamp = -1
                elif ts == ListOffsetsTimestamp.LATEST:
                    timestamp, offset = -1, high_watermark
                elif ts == ListOffsetsTimestamp.LATEST_TIERED:
                    timestamp, offset = -1, -1
                elif ts == ListOffsetsTimestamp.MAX_TIMESTAMP:
                    timestamp, offset = self._max_timestamp(conn, log_id)
                elif ts >= 0:
                    timestamp, offset = self._offset_for_timestamp(conn, log_id, ts)
                    if offset >= 0:
                        offset = max(offset, log_start_offset)
                else:
                    responses.append(ListOffsetsResponse(ErrorCode.invalid_request, tip, -1, -1))
                    continue
                if req.read_committed:
                    timestamp, offset = committed_offset_answer(ts, timestamp, offset, lso)
                responses.append(ListOffsetsResponse(ErrorCode.none, tip, timestamp, offset))
        return responses

    @staticmethod
    def _offset_for_timestamp(conn: sqlite3.Connection, log_id: int, target: int) -> tuple[int, int]:
        """(timestamp, base offset) of the first batch with timestamp >= target, or (-1, -1).

        Every batch before the first one whose running max reaches ``target`` is below
        it; from there we scan for the first batch that itself reaches it (usually that
        same one; further only when the batch that raised the running max was deleted).
        """
        cur = conn.execute(
            f"SELECT base_offset, {_EFFECTIVE_TS} FROM diskless_batches "
            "WHERE log_id = ? AND max_ts_so_far >= ? ORDER BY max_ts_so_far, last_offset",
            (log_id, target),
        )
        try:
            for base_offset, timestamp in cur:
                if timestamp >= target:
                    return timestamp, base_offset
        finally:
            cur.close()
        return -1, -1

    @staticmethod
    def _max_timestamp(conn: sqlite3.Connection, log_id: int) -> tuple[int, int]:
        """(timestamp, last offset) of the earliest batch with the greatest timestamp."""
        row = conn.execute(
            f"SELECT max_ts_so_far, last_offset, {_EFFECTIVE_TS} FROM diskless_batches "
            "WHERE log_id = ?1 AND max_ts_so_far = "
            "(SELECT MAX(max_ts_so_far) FROM diskless_batches WHERE log_id = ?1) "
            "ORDER BY max_ts_so_far, last_offset LIMIT 1",
            (log_id,),
        ).fetchone()
        if row is None:
            return -1, -1
        if row[2] == row[0]:
            return row[0], row[1]
        # The batch that set the running max was deleted: fall back to a scan.
        row = conn.execute(
            f"SELECT {_EFFECTIVE_TS} AS ts, last_offset FROM diskless_batches WHERE log_id = ? "
            "ORDER BY ts DESC, last_offset ASC LIMIT 1",
            (log_id,),
        ).fetchone()
        return row[0], row[1]

    def get_log_info(self, topic_id: uuid.UUID, partition: int) -> tuple[int, int, int] | None:
        """(log_start_offset, high_watermark, byte_size) of a diskless partition, or None."""
        with self._read() as conn:
            row = conn.execute(
                "SELECT log_start_offset, high_watermark, byte_size FROM diskless_logs "
                "WHERE topic_id = ? AND partition = ?",
                (topic_id.bytes, partition),
            ).fetchone()
        return None if row is None else (row[0], row[1], row[2])


def _batch_before(conn: sqlite3.Connection, log_id: int, offset: int) -> bool:
    """Whether a batch of the log ends below ``offset`` (``_BATCH_BEFORE_SQL``)."""
    return conn.execute(_BATCH_BEFORE_SQL, (log_id, offset)).fetchone() is not None
