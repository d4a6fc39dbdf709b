"""commit_file: one object's batches get offsets, with Kafka's idempotent-producer dedup and
transaction bookkeeping (``txns``).

The same rules as the SQLite backend (``shoal.store.sqlite.coordinator.commit``), in one
transaction of three round trips whatever the number of batches:

1. the pool's liveness check of the connection;
2. BEGIN, lock the partitions' log rows in log_id order, read the state of the idempotent
   producers of those partitions and their transactional state (after the lock: it sees what
   the commits we queued behind wrote);
3. the object row with the batches (one INSERT ... SELECT over arrays), the new high
   watermarks, the producer and transaction state changes, COMMIT.

Offsets, deduplication and sequence checks are decided in Python between 2 and 3, while the
log rows are locked.
"""

from __future__ import annotations

import psycopg

from shoal.coordinator.api import CommitBatchRequest, CommitBatchResponse
from shoal.coordinator.commit_decision import decide
from shoal.coordinator.idempotence import (
    NO_PRODUCER,
    ProducerEntry,
    ProducerState,
)
from shoal.coordinator.transactions import LogTxns, batch_flags
from shoal.store.postgres.coordinator.base import CoordinatorBase
from shoal.store.postgres.coordinator.logs import LogKey, LogState, locked_logs, queue_lock_logs
from shoal.store.postgres.coordinator.txns import WRITE_CTES, loaded_txns, queue_load_txns, txn_params

_PRODUCERS_SQL = """
SELECT p.log_id, p.producer_id, p.row_id, p.producer_epoch, p.base_sequence, p.last_sequence,
       p.assigned_offset, p.log_append_time
FROM unnest(%b::uuid[], %b::integer[], %b::bigint[]) AS k(topic_id, partition, producer_id)
JOIN diskless_logs AS l ON l.topic_id = k.topic_id AND l.partition = k.partition
JOIN diskless_producer_state AS p ON p.log_id = l.log_id AND p.producer_id = k.producer_id
ORDER BY p.log_id, p.producer_id, p.row_id
"""

# Every write of a commit in ONE statement (data-modifying CTEs): the object, its batches (ids
# from the identity column in request order, so they grow with offsets inside a partition), the
# logs' new high watermarks, the producer state (old entries go, new ones come: disjoint
# row_ids, so the two CTEs, which see the same snapshot, never meet), and the transactions
# (``txns.WRITE_CTES``). Empty arrays are no-ops.
_WRITE_SQL = """
WITH f AS (
    INSERT INTO diskless_files (object_key, uploader_broker_id, committed_at, size, used_size, state,
                                marked_for_deletion_at)
    VALUES (%(key)s, %(broker)s, %(now)s, %(size)s, %(used)s, %(state)s, %(marked)s)
    RETURNING file_id
), batches AS (
    INSERT INTO diskless_batches (log_id, last_offset, base_offset, file_id, byte_offset, byte_size,
        log_append_time, batch_max_timestamp, timestamp_type, producer_id, producer_epoch, base_sequence,
        last_sequence, max_ts_so_far, is_transactional, is_control)
    SELECT u.log_id, u.last_offset, u.base_offset, f.file_id, u.byte_offset, u.byte_size, %(now)s,
        u.batch_max_timestamp, u.timestamp_type, u.producer_id, u.producer_epoch, u.base_sequence,
        u.last_sequence, u.max_ts_so_far, u.is_transactional, u.is_control
    FROM f CROSS JOIN unnest(%(b_log)b::bigint[], %(b_last)b::bigint[], %(b_base)b::bigint[],
        %(b_pos)b::bigint[], %(b_size)b::bigint[], %(b_max_ts)b::bigint[], %(b_ts_type)b::smallint[],
        %(b_pid)b::bigint[], %(b_epoch)b::integer[], %(b_base_seq)b::integer[], %(b_last_seq)b::integer[],
        %(b_ts_so_far)b::bigint[], %(b_txn)b::boolean[], %(b_ctl)b::boolean[])
        WITH ORDINALITY AS u(log_id, last_offset, base_offset, byte_offset, byte_size, batch_max_timestamp,
            timestamp_type, producer_id, producer_epoch, base_sequence, last_sequence, max_ts_so_far,
            is_transactional, is_control, ord)
    ORDER BY u.ord
), logs AS (
    UPDATE diskless_logs AS l
    SET high_watermark = u.high_watermark, byte_size = u.byte_size, max_timestamp = u.max_timestamp
    FROM unnest(%(l_log)b::bigint[], %(l_hwm)b::bigint[], %(l_size)b::bigint[], %(l_max_ts)b::bigint[])
        AS u(log_id, high_watermark, byte_size, max_timestamp)
    WHERE l.log_id = u.log_id
), trimmed AS (
    DELETE FROM diskless_producer_state AS p
    USING unnest(%(t_log)b::bigint[], %(t_pid)b::bigint[], %(t_first)b::bigint[])
        AS u(log_id, producer_id, first_kept)
    WHERE p.log_id = u.log_id AND p.producer_id = u.producer_id AND p.row_id < u.first_kept
), producers AS (
    INSERT INTO diskless_producer_state (log_id, producer_id, row_id, producer_epoch, base_sequence,
        last_sequence, assigned_offset, log_append_time)
    SELECT * FROM unnest(%(p_log)b::bigint[], %(p_pid)b::bigint[], %(p_row)b::bigint[],
        %(p_epoch)b::integer[], %(p_base_seq)b::integer[], %(p_last_seq)b::integer[],
        %(p_offset)b::bigint[], %(p_time)b::bigint[])
)""" + WRITE_CTES + """
SELECT 1
"""
_BATCH_ARRAYS = (
    "b_log", "b_last", "b_base", "b_pos", "b_size", "b_max_ts", "b_ts_type", "b_pid", "b_epoch",
    "b_base_seq", "b_last_seq", "b_ts_so_far", "b_txn", "b_ctl",
)  # fmt: skip
_LOG_ARRAYS = ("l_log", "l_hwm", "l_size", "l_max_ts")
_TRIM_ARRAYS = ("t_log", "t_pid", "t_first")
_PRODUCER_ARRAYS = ("p_log", "p_pid", "p_row", "p_epoch", "p_base_seq", "p_last_seq", "p_offset", "p_time")


class _Rows:
    """Columns of the batches to insert, as the arrays ``_WRITE_SQL`` unnests."""

    __slots__ = ("columns",)

    def __init__(self) -> None:
        self.columns: tuple[list[int], ...] = tuple([] for _ in range(len(_BATCH_ARRAYS)))

    def add(self, *values: int) -> None:
        for column, value in zip(self.columns, values, strict=True):
            column.append(value)


class CommitMixin(CoordinatorBase):
    """commit_file and the producer state it checks and keeps."""

    def commit_file(
        self,
        object_key: str,
        uploader_broker_id: int,
        file_size: int,
        batches: list[CommitBatchRequest],
    ) -> list[CommitBatchResponse]:
        """Register one uploaded object and assign offsets to its batches in ONE transaction.

        Batches are processed in request order against state updated as we go, so
        several batches of one producer in the same object are checked against each
        other. A rejected or duplicate batch consumes no offset and no used size.
        Accepted batches all get the same log_append_time (taken once the partitions are
        locked). Raises psycopg.errors.UniqueViolation (an IntegrityError) if
        ``object_key`` was already committed; nothing is written then.
        """
        keys = [(b.topic_id_partition.topic_id, b.topic_id_partition.partition) for b in batches]
        idempotent = list(
            dict.fromkeys(
                (key[0], key[1], b.producer_id)
                for key, b in zip(keys, batches, strict=True)
                if b.producer_id != NO_PRODUCER
            )
        )

        def work(conn: psycopg.Connection) -> list[CommitBatchResponse]:
            logs_cur = queue_lock_logs(conn, keys) if batches else None
            producers_cur = (
                conn.execute(
                    _PRODUCERS_SQL,
                    ([k[0] for k in idempotent], [k[1] for k in idempotent], [k[2] for k in idempotent]),
                )
                if idempotent
                else None
            )
            txns_cur = queue_load_txns(conn, idempotent)
            logs = locked_logs(logs_cur) if logs_cur is not None else {}
            producers = _load_producers(producers_cur)
            txns = loaded_txns(txns_cur)
            now = self._clock()
            responses, rows, used_size = _assign(batches, keys, logs, producers, txns, now, file_size)
            state, marked = ("uploaded", None) if used_size > 0 else ("deleting", now)
            params: dict[str, object] = {
                "key": object_key,
                "broker": uploader_broker_id,
                "now": now,
                "size": file_size,
                "used": used_size,
                "state": state,
                "marked": marked,
            }
            params.update(zip(_BATCH_ARRAYS, rows.columns, strict=True))
            dirty = [log for log in logs.values() if log.dirty]
            params.update(
                zip(
                    _LOG_ARRAYS,
                    (
                        [log.log_id for log in dirty],
                        [log.high_watermark for log in dirty],
                        [log.byte_size for log in dirty],
                        [log.max_timestamp for log in dirty],
                    ),
                    strict=True,
                )
            )
            trims, inserts = _producer_changes(producers)
            params.update(zip(_TRIM_ARRAYS, trims, strict=True))
            params.update(zip(_PRODUCER_ARRAYS, inserts, strict=True))
            params.update(txn_params(txns))
            conn.execute(_WRITE_SQL, params)
            return responses

        return self._transaction("commit_file", work)


def _load_producers(cur: psycopg.Cursor | None) -> dict[tuple[int, int], ProducerState]:
    producers: dict[tuple[int, int], ProducerState] = {}
    if cur is None:
        return producers
    for log_id, producer_id, *entry in cur.fetchall():
        state = producers.get((log_id, producer_id))
        if state is None:
            state = producers[(log_id, producer_id)] = ProducerState()
        state.entries.append(ProducerEntry(*entry))
    return producers


def _assign(
    batches: list[CommitBatchRequest],
    keys: list[LogKey],
    logs: dict[LogKey, LogState],
    producers: dict[tuple[int, int], ProducerState],
    txns: dict[int, LogTxns],
    now: int,
    file_size: int,
) -> tuple[list[CommitBatchResponse], _Rows, int]:
    """Offsets for the batches against the locked logs: (responses, batch rows, used size)."""
    responses: list[CommitBatchResponse] = []
    rows = _Rows()
    used_size = 0
    def producer_state(log_id: int, producer_id: int) -> ProducerState:
        # Loaded up front for every producer of the commit; a first batch starts empty.
        return producers.setdefault((log_id, producer_id), ProducerState())

    def log_txns(log_id: int) -> LogTxns:
        # Loaded up front: every ongoing transaction of the producers' logs, and their rows.
        return txns.setdefault(log_id, LogTxns())

    for req, key in zip(batches, keys, strict=True):
        log = logs.get(key)
        answer, accepted = decide(req, log, producer_state, log_txns, now, file_size)
        responses.append(answer)
        if not accepted:
            continue
        assert log is not None
        base_offset = answer.assigned_base_offset
        used_size += req.size
        rows.add(
            log.log_id,
            base_offset + (req.last_offset - req.base_offset),
            base_offset,
            req.byte_offset,
            req.size,
            req.batch_max_timestamp,
            int(req.message_timestamp_type),
            req.producer_id,
            req.producer_epoch,
            req.base_sequence,
            req.last_sequence,
            log.max_timestamp,
            *batch_flags(req),
        )
    return responses, rows, used_size


def _producer_changes(
    producers: dict[tuple[int, int], ProducerState],
) -> tuple[list[list[int]], list[list[int]]]:
    """The columns of the producer state to trim (log, producer, first row kept) and to insert."""
    trims: list[list[int]] = [[] for _ in _TRIM_ARRAYS]
    inserts: list[list[int]] = [[] for _ in _PRODUCER_ARRAYS]
    for (log_id, producer_id), state in producers.items():
        if not state.dirty:
            continue
        for column, value in zip(trims, (log_id, producer_id, state.first_kept_row_id), strict=True):
            column.append(value)
        for e in state.entries:
            if e.new:
                values = (
                    log_id,
                    producer_id,
                    e.row_id,
                    e.epoch,
                    e.base_sequence,
                    e.last_sequence,
                    e.assigned_offset,
                    e.log_append_time,
                )
                for column, value in zip(inserts, values, strict=True):
                    column.append(value)
    return trims, inserts


