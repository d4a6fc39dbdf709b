"""The read paths: find_batches (every Fetch), list_offsets and get_log_info.

find_batches reads every requested partition in ONE statement: each log row with its first
batches from the fetch offset on (a LATERAL index range scan per partition, at most
``_FIRST_PAGE`` batches), all from one snapshot. A partition that needs more batches than that
(many small ones) is continued with a follow-up read from where the first stopped.

Every answer carries the partition's last stable offset (its earliest ongoing transaction, read
in the same statement); READ_COMMITTED reads stop there and list the aborted transactions of
what they return, read on the same snapshot (``txns``).
"""

from __future__ import annotations

import dataclasses
import uuid
from functools import partial

import psycopg

from shoal.coordinator.api import (
    BatchInfo,
    BatchMetadata,
    FindBatchRequest,
    FindBatchResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    ListOffsetsTimestamp,
    TopicIdPartition,
)
from shoal.coordinator.log_compaction import compaction_gap, local_log_start
from shoal.coordinator.transactions import committed_offset_answer, last_stable_offset
from shoal.protocol.errors import ErrorCode
from shoal.store.postgres.coordinator.base import CoordinatorBase
from shoal.store.postgres.coordinator.schema import BATCH_COLUMNS, EFFECTIVE_TS, TIMESTAMP_TYPES
from shoal.store.postgres.coordinator.txns import FIRST_ONGOING, aborted_overlapping

#: Batches read per partition by the first statement of find_batches.
_FIRST_PAGE = 128
#: At least this many batches per follow-up read of one partition.
_MIN_NEXT_PAGE = 512

# Batches are returned only when the offset is in [log start, high watermark): the range check
# sits in the LATERAL, so an out-of-range offset reads no batch at all. Rows come back per
# request (ord) in offset order; a request for an unknown partition has no row. The first row
# of a request tells whether its offset is held here at all: below the first batch left (or
# with none left) it went to tiered storage (delete_tiered_batches), unless log compaction
# removed it (below the cleaner checkpoint, or after another batch: ``compaction_gap``). The
# first offset of the earliest ongoing transaction (for the LSO) is read once per partition,
# before its batches.
_FIND_SQL = f"""
SELECT k.ord, l.log_id, l.log_start_offset, l.high_watermark, b.batch_id, f.object_key, {BATCH_COLUMNS},
    o.first_ongoing, l.cleaned_offset
FROM unnest(%b::uuid[], %b::integer[], %b::bigint[]) WITH ORDINALITY AS k(topic_id, partition, fetch_offset, ord)
JOIN diskless_logs AS l ON l.topic_id = k.topic_id AND l.partition = k.partition
CROSS JOIN LATERAL (SELECT {FIRST_ONGOING} AS first_ongoing) AS o
LEFT JOIN LATERAL (
    SELECT * FROM diskless_batches AS b
    WHERE b.log_id = l.log_id AND b.last_offset >= k.fetch_offset
        AND k.fetch_offset >= l.log_start_offset AND k.fetch_offset < l.high_watermark
    ORDER BY b.last_offset
    LIMIT {_FIRST_PAGE}
) AS b ON TRUE
LEFT JOIN diskless_files AS f ON f.file_id = b.file_id
ORDER BY k.ord, b.last_offset
"""

_NEXT_PAGE_SQL = f"""
SELECT b.batch_id, f.object_key, {BATCH_COLUMNS}
FROM diskless_batches AS b JOIN diskless_files AS f ON f.file_id = b.file_id
WHERE b.log_id = %s AND b.last_offset > %s AND b.last_offset < %s
ORDER BY b.last_offset
LIMIT %s
"""

# EARLIEST_LOCAL also needs the first batch left (NULL: none left), from the same snapshot; CASE
# runs that subquery only for those requests.
_LOGS_SQL = f"""
SELECT k.ord, l.log_id, l.log_start_offset, l.high_watermark,
    CASE WHEN k.ts = {ListOffsetsTimestamp.EARLIEST_LOCAL} THEN (
        SELECT b.base_offset FROM diskless_batches AS b
        WHERE b.log_id = l.log_id ORDER BY b.last_offset LIMIT 1
    ) END,
    {FIRST_ONGOING}, l.cleaned_offset
FROM unnest(%b::uuid[], %b::integer[], %b::bigint[]) WITH ORDINALITY AS k(topic_id, partition, ts, ord)
JOIN diskless_logs AS l ON l.topic_id = k.topic_id AND l.partition = k.partition
"""

# Whether a batch of the log ends below an offset (one probe of the primary key): a missing offset
# after another batch is a compacted record, never a tiered one. Read only for a missing offset
# above the cleaner checkpoint (rare: a cleaner that checkpointed below its range).
_BATCH_BEFORE_SQL = "SELECT 1 FROM diskless_batches WHERE log_id = %s AND last_offset < %s LIMIT 1"

# The first batch with a timestamp >= target. Every batch before the first one whose running
# max reaches the target is below it, so the index on (log_id, max_ts_so_far) is scanned from
# there in offset order (max_ts_so_far never decreases along a log) until a batch reaches it.
_OFFSET_FOR_TIMESTAMP_SQL = f"""
SELECT {EFFECTIVE_TS}, base_offset FROM diskless_batches
WHERE log_id = %s AND max_ts_so_far >= %s AND {EFFECTIVE_TS} >= %s
ORDER BY max_ts_so_far, last_offset
LIMIT 1
"""

_MAX_TIMESTAMP_SQL = f"""
SELECT max_ts_so_far, last_offset, {EFFECTIVE_TS} FROM diskless_batches
WHERE log_id = %s AND max_ts_so_far = (SELECT MAX(max_ts_so_far) FROM diskless_batches WHERE log_id = %s)
ORDER BY max_ts_so_far, last_offset
LIMIT 1
"""

# When the batch that set the running max was deleted: a scan of the log.
_MAX_TIMESTAMP_SCAN_SQL = f"""
SELECT {EFFECTIVE_TS} AS ts, last_offset FROM diskless_batches WHERE log_id = %s
ORDER BY ts DESC, last_offset ASC
LIMIT 1
"""


def _batch(tip: TopicIdPartition, row: tuple, at: int) -> BatchInfo:
    """A BatchInfo from ``row[at:]`` = batch_id, object_key, then BATCH_COLUMNS."""
    return BatchInfo(
        row[at],
        row[at + 1],
        BatchMetadata(
            tip,
            row[at + 2],
            row[at + 3],
            row[at + 4],
            row[at + 5],
            row[at + 6],
            row[at + 7],
            TIMESTAMP_TYPES[row[at + 8]],
            row[at + 9],
            row[at + 10],
            row[at + 11],
            row[at + 12],
            row[at + 13],
            row[at + 14],
        ),
    )


class FindMixin(CoordinatorBase):
    """Batch coordinates and offsets, read on pooled autocommit connections."""

    def find_batches(
        self, find_batch_requests: list[FindBatchRequest], fetch_max_bytes: int
    ) -> list[FindBatchResponse]:
        """Batch coordinates from each requested offset on, bounded by the byte limits.

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
        reads on one snapshot (REPEATABLE READ), so batches, LSO and aborted transactions agree.
        """
        if not find_batch_requests:
            return []
        reqs = find_batch_requests
        read_committed = any(r.read_committed for r in reqs)

        def work(conn: psycopg.Connection) -> list[FindBatchResponse]:
            rows = conn.execute(
                _FIND_SQL,
                (
                    [r.topic_id_partition.topic_id for r in reqs],
                    [r.topic_id_partition.partition for r in reqs],
                    [r.offset for r in reqs],
                ),
            ).fetchall()
            by_request: dict[int, list[tuple]] = {}
            for row in rows:
                by_request.setdefault(row[0], []).append(row)
            responses: list[FindBatchResponse] = []
            committed: list[tuple[int, int, int, int]] = []  # (response index, log_id, offset, upper)
            remaining = fetch_max_bytes
            response_has_data = False
            for ord_, req in enumerate(reqs, start=1):
                tip = req.topic_id_partition
                found_rows = by_request.get(ord_)
                if found_rows is None:
                    responses.append(FindBatchResponse(ErrorCode.unknown_topic_or_partition, [], -1, -1))
                    continue
                log_id, log_start_offset, high_watermark = found_rows[0][1:4]
                lso = last_stable_offset(log_start_offset, high_watermark, found_rows[0][-2])
                if req.offset < log_start_offset or req.offset > high_watermark:
                    responses.append(
                        FindBatchResponse(
                            ErrorCode.offset_out_of_range, [], log_start_offset, high_watermark, lso
                        )
                    )
                    continue
                first = found_rows[0]
                if (
                    req.offset < high_watermark
                    and (first[4] is None or first[8] > req.offset)
                    and not compaction_gap(
                        req.offset,
                        first[-1],
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
                page = [_batch(tip, row, 4) for row in found_rows if row[4] is not None]
                page_full = len(page) == _FIRST_PAGE
                follow_up = False
                while page:
                    stopped = False
                    for info in page:
                        size = info.metadata.byte_size
                        if info.metadata.last_offset >= end:
                            stopped = True
                            break
                        if found:
                            if (
                                (follow_up and _gap_between_reads(found[-1], info, first[-1]))
                                or partition_bytes + size > req.max_partition_fetch_bytes
                                or size > remaining
                            ):
                                stopped = True
                                break
                            follow_up = False
                        elif response_has_data and size > remaining:
                            stopped = True
                            break
                        found.append(info)
                        partition_bytes += size
                        remaining -= size
                        response_has_data = True
                        if partition_bytes >= req.max_partition_fetch_bytes or remaining <= 0:
                            stopped = True
                            break
                    if stopped or not page_full:
                        break
                    # Every batch of the page fitted: read on from the last one.
                    average = max(1, partition_bytes // len(found))
                    wanted = min(req.max_partition_fetch_bytes - partition_bytes, remaining) // average
                    limit = max(_MIN_NEXT_PAGE, wanted + wanted // 4 + 1)
                    page = [
                        _batch(tip, row, 0)
                        for row in conn.execute(
                            _NEXT_PAGE_SQL, (log_id, found[-1].metadata.last_offset, high_watermark, limit)
                        ).fetchall()
                    ]
                    page_full = len(page) == limit
                    follow_up = True
                if req.read_committed and found:
                    committed.append((len(responses), log_id, req.offset, found[-1].metadata.last_offset + 1))
                responses.append(
                    FindBatchResponse(ErrorCode.none, found, log_start_offset, high_watermark, lso)
                )
            aborted = aborted_overlapping(conn, [c[1:] for c in committed])
            for (index, *_), txns in zip(committed, aborted, strict=True):
                responses[index] = dataclasses.replace(responses[index], aborted_transactions=txns)
            return responses

        return self._read("find_batches", work, snapshot=read_committed)

    def list_offsets(self, requests: list[ListOffsetsRequest]) -> list[ListOffsetsResponse]:
        """Earliest, latest, max-timestamp or first-offset-at-timestamp lookups.

        EARLIEST_LOCAL is the first batch left here (tiered storage may hold offsets below it).
        Unknown partitions answer UNKNOWN_TOPIC_OR_PARTITION, negative timestamps that are
        not special values INVALID_REQUEST. ``read_committed``: LATEST is the last stable
        offset, and other answers than EARLIEST / EARLIEST_LOCAL at or past it are none. The log rows of all requests come from one
        statement; the timestamp lookups then travel together in one round trip.
        """
        if not requests:
            return []

        def work(conn: psycopg.Connection) -> list[ListOffsetsResponse]:
            logs = {
                row[0]: row[1:]
                for row in conn.execute(
                    _LOGS_SQL,
                    (
                        [r.topic_id_partition.topic_id for r in requests],
                        [r.topic_id_partition.partition for r in requests],
                        [r.timestamp for r in requests],
                    ),
                ).fetchall()
            }
            lookups: dict[int, psycopg.Cursor] = {}
            for ord_, req in enumerate(requests, start=1):
                log = logs.get(ord_)
                if log is None:
                    continue
                if req.timestamp == ListOffsetsTimestamp.MAX_TIMESTAMP:
                    lookups[ord_] = conn.execute(_MAX_TIMESTAMP_SQL, (log[0], log[0]))
                elif req.timestamp >= 0:
                    lookups[ord_] = conn.execute(
                        _OFFSET_FOR_TIMESTAMP_SQL, (log[0], req.timestamp, req.timestamp)
                    )
            responses: list[ListOffsetsResponse] = []
            for ord_, req in enumerate(requests, start=1):
                tip = req.topic_id_partition
                log = logs.get(ord_)
                if log is None:
                    responses.append(ListOffsetsResponse(ErrorCode.unknown_topic_or_partition, tip, -1, -1))
                    continue
                log_id, log_start_offset, high_watermark, first_base, first_ongoing, cleaned_offset = log
                ts = req.timestamp
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
                    timestamp, offset = _max_timestamp(conn, log_id, lookups[ord_].fetchone())
                elif ts >= 0:
                    row = lookups[ord_].fetchone()
                    timestamp, offset = (-1, -1) if row is None else (row[0], max(row[1], log_start_offset))
                else:
                    responses.append(ListOffsetsResponse(ErrorCode.invalid_request, tip, -1, -1))
                    continue
                if req.read_committed:
                    lso = last_stable_offset(log_start_offset, high_watermark, first_ongoing)
                    timestamp, offset = committed_offset_answer(ts, timestamp, offset, lso)
                responses.append(ListOffsetsResponse(ErrorCode.none, tip, timestamp, offset))
            return responses

        return self._read("list_offsets", work)

    def get_log_info(self, topic_id: uuid.UUID, partition: int) -> tuple[int, int, int] | None:
        """(log_start_offset, high_watermark, byte_size) of a diskless partition, or None."""

        def work(conn: psycopg.Connection) -> tuple[int, int, int] | None:
            row = conn.execute(
                "SELECT log_start_offset, high_watermark, byte_size FROM diskless_logs "
                "WHERE topic_id = %s AND partition = %s",
                (topic_id, partition),
            ).fetchone()
            return None if row is None else (row[0], row[1], row[2])

        return self._read("get_log_info", work)


def _gap_between_reads(last: BatchInfo, first_next: BatchInfo, cleaned_offset: int) -> bool:
    """Whether a follow-up read must stop before its first batch, after ``last`` of the read before.

    Inside one read, gaps are compacted records; between two reads batches may have gone
    (DeleteRecords, retention, tiered storage taking them), so a gap there is read across only
    below the cleaner checkpoint (read with the first page), where every gap is compaction's.
    """
    base = first_next.metadata.base_offset
    return base != last.metadata.last_offset + 1 and base > cleaned_offset


def _max_timestamp(conn: psycopg.Connection, log_id: int, row: tuple | None) -> tuple[int, int]:
    """(timestamp, last offset) of the earliest batch with the greatest timestamp, from the
    row of ``_MAX_TIMESTAMP_SQL``."""
    if row is None:
        return -1, -1
    if row[2] == row[0]:
        return row[0], row[1]
    # The batch that set the running max was deleted: fall back to a scan.
    scan = conn.execute(_MAX_TIMESTAMP_SCAN_SQL, (log_id,)).fetchone()
    assert scan is not None
    return scan[0], scan[1]


def _batch_before(conn: psycopg.Connection, log_id: int, offset: int) -> bool:
    """Whether a batch of the log ends below ``offset`` (``_BATCH_BEFORE_SQL``)."""
    return conn.execute(_BATCH_BEFORE_SQL, (log_id, offset)).fetchone() is not None
