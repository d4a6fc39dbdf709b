"""Transactions on diskless partitions in PostgreSQL, as in the SQLite backend
(``shoal.store.sqlite.coordinator.txns``; ``shoal.coordinator.transactions`` has the rules): the
state a commit loads and writes, the aborted transactions a READ_COMMITTED fetch reads, pruning,
``transaction_state`` for the Spark reader and ``describe_producers`` for DescribeProducers. Every
statement of the hot paths takes many partitions at once.
"""

from __future__ import annotations

import uuid

import psycopg

from shoal.coordinator.api import ProducerStateEntry
from shoal.coordinator.transactions import (
    NO_TXN,
    LogTxns,
    ProducerTxn,
    collect_aborted,
    last_stable_offset,
    producer_entries,
)
from shoal.store.postgres.coordinator.base import CoordinatorBase

#: The first offset of a log's earliest ongoing transaction (NULL: none), correlated on ``l.log_id``.
FIRST_ONGOING = (
    "(SELECT MIN(t.txn_first_offset) FROM diskless_producer_txns AS t "
    "WHERE t.log_id = l.log_id AND t.txn_first_offset IS NOT NULL)"
)

# What a commit needs of the transactional state of its producers' partitions: every ongoing
# transaction of those partitions (the LSO an ABORT records) and the rows of its producers. Run
# after the partitions are locked, so it sees what the commits queued before ours wrote.
_LOAD_SQL = """
SELECT t.log_id, t.producer_id, t.producer_epoch, t.coordinator_epoch, t.txn_first_offset
FROM diskless_producer_txns AS t
WHERE t.txn_first_offset IS NOT NULL AND t.log_id IN (
    SELECT l.log_id FROM unnest(%b::uuid[], %b::integer[]) AS k(topic_id, partition)
    JOIN diskless_logs AS l ON l.topic_id = k.topic_id AND l.partition = k.partition
)
UNION
SELECT t.log_id, t.producer_id, t.producer_epoch, t.coordinator_epoch, t.txn_first_offset
FROM unnest(%b::uuid[], %b::integer[], %b::bigint[]) AS k(topic_id, partition, producer_id)
JOIN diskless_logs AS l ON l.topic_id = k.topic_id AND l.partition = k.partition
JOIN diskless_producer_txns AS t ON t.log_id = l.log_id AND t.producer_id = k.producer_id
"""

#: The CTEs of a commit's write statement that store transactions (-1 first offset: none ongoing).
WRITE_CTES = """
, txns AS (
    INSERT INTO diskless_producer_txns (log_id, producer_id, producer_epoch, coordinator_epoch, txn_first_offset)
    SELECT u.log_id, u.producer_id, u.epoch, u.coordinator_epoch, NULLIF(u.first_offset, -1)
    FROM unnest(%(x_log)b::bigint[], %(x_pid)b::bigint[], %(x_epoch)b::integer[], %(x_coord)b::integer[],
        %(x_first)b::bigint[]) AS u(log_id, producer_id, epoch, coordinator_epoch, first_offset)
    ORDER BY 1, 2
    ON CONFLICT (log_id, producer_id) DO UPDATE SET producer_epoch = excluded.producer_epoch,
        coordinator_epoch = excluded.coordinator_epoch, txn_first_offset = excluded.txn_first_offset
), aborted AS (
    INSERT INTO diskless_aborted_txns (log_id, last_offset, producer_id, first_offset, last_stable_offset)
    SELECT * FROM unnest(%(a_log)b::bigint[], %(a_last)b::bigint[], %(a_pid)b::bigint[], %(a_first)b::bigint[],
        %(a_lso)b::bigint[])
)
"""
_TXN_ARRAYS = ("x_log", "x_pid", "x_epoch", "x_coord", "x_first")
_ABORTED_ARRAYS = ("a_log", "a_last", "a_pid", "a_first", "a_lso")

# Per READ_COMMITTED request (ord): the aborted transactions of its log from the fetch offset on
# (lo), in marker order, up to the first whose LSO reaches the bound (hi): no later one can
# start below it (Kafka's collectAbortedTxns stop). Both scans are ranges of the primary key.
_ABORTED_SQL = """
SELECT u.ord, a.producer_id, a.first_offset, a.last_offset, a.last_stable_offset
FROM unnest(%b::bigint[], %b::bigint[], %b::bigint[]) WITH ORDINALITY AS u(log_id, lo, hi, ord)
CROSS JOIN LATERAL (
    SELECT * FROM diskless_aborted_txns AS a
    WHERE a.log_id = u.log_id AND a.last_offset >= u.lo AND a.last_offset <= COALESCE(
        (SELECT MIN(s.last_offset) FROM diskless_aborted_txns AS s
         WHERE s.log_id = u.log_id AND s.last_offset >= u.lo AND s.last_stable_offset >= u.hi),
        9223372036854775807)
) AS a
ORDER BY u.ord, a.last_offset
"""

_PRUNE_SQL = """
DELETE FROM diskless_aborted_txns AS a
USING unnest(%b::bigint[], %b::bigint[]) AS u(log_id, log_start_offset)
WHERE a.log_id = u.log_id AND a.last_offset < u.log_start_offset
"""

_STATE_LOG_SQL = f"""
SELECT l.log_id, l.log_start_offset, l.high_watermark, {FIRST_ONGOING}
FROM diskless_logs AS l WHERE l.topic_id = %s AND l.partition = %s
"""

_STATE_ABORTED_SQL = """
SELECT a.producer_id, a.first_offset, a.last_offset
FROM diskless_logs AS l JOIN diskless_aborted_txns AS a ON a.log_id = l.log_id
WHERE l.topic_id = %s AND l.partition = %s
ORDER BY a.last_offset
"""

_PRODUCERS_LOG_SQL = "SELECT l.log_id FROM diskless_logs AS l WHERE l.topic_id = %s AND l.partition = %s"

# Each producer's last remembered batch, with that batch's max timestamp (its append time under
# LogAppendTime) while the log still holds it (-1 once deleted): the first batch ending at or after
# its offset, one seek of the primary key, is it only if it starts there.
_PRODUCER_BATCHES_SQL = """
SELECT s.producer_id, s.producer_epoch, s.last_sequence, COALESCE((
    SELECT CASE WHEN b.base_offset = s.assigned_offset THEN
        CASE WHEN b.timestamp_type = 1 THEN b.log_append_time ELSE b.batch_max_timestamp END END
    FROM diskless_batches AS b WHERE b.log_id = s.log_id AND b.last_offset >= s.assigned_offset
    ORDER BY b.last_offset LIMIT 1), -1)
FROM diskless_logs AS l JOIN diskless_producer_state AS s ON s.log_id = l.log_id
WHERE l.topic_id = %s AND l.partition = %s AND s.row_id = (
    SELECT MAX(r.row_id) FROM diskless_producer_state AS r WHERE r.log_id = s.log_id AND r.producer_id = s.producer_id)
"""

_PRODUCER_TXNS_SQL = """
SELECT t.producer_id, t.producer_epoch, t.coordinator_epoch, t.txn_first_offset
FROM diskless_logs AS l JOIN diskless_producer_txns AS t ON t.log_id = l.log_id
WHERE l.topic_id = %s AND l.partition = %s
"""


def queue_load_txns(
    conn: psycopg.Connection, keys: list[tuple[uuid.UUID, int, int]]
) -> psycopg.Cursor | None:
    """Queue reading the transactional state of the (topic id, partition, producer id) ``keys``."""
    if not keys:
        return None
    topics, partitions, producers = [k[0] for k in keys], [k[1] for k in keys], [k[2] for k in keys]
    return conn.execute(_LOAD_SQL, (topics, partitions, topics, partitions, producers))


def loaded_txns(cur: psycopg.Cursor | None) -> dict[int, LogTxns]:
    """Per log_id, what ``queue_load_txns`` read. Every row that exists was read, so a producer
    missing from its log's state has none (the default loader answers None)."""
    logs: dict[int, LogTxns] = {}
    if cur is None:
        return logs
    for log_id, producer_id, epoch, coordinator_epoch, first in cur.fetchall():
        txns = logs.setdefault(log_id, LogTxns())
        txns.producers[producer_id] = ProducerTxn(
            epoch, coordinator_epoch, NO_TXN if first is None else first
        )
    return logs


def txn_params(logs: dict[int, LogTxns]) -> dict[str, list[int]]:
    """The arrays ``WRITE_CTES`` takes: the changed producers' rows and the newly aborted transactions."""
    rows = [
        (log_id, pid, t.epoch, t.coordinator_epoch, t.first_offset)
        for log_id, txns in sorted(logs.items())
        for pid, t in txns.dirty()
    ]
    aborted = [
        (log_id, a.last_offset, a.producer_id, a.first_offset, a.last_stable_offset)
        for log_id, txns in logs.items()
        for a in txns.aborted
    ]
    params: dict[str, list[int]] = {name: [row[i] for row in rows] for i, name in enumerate(_TXN_ARRAYS)}
    params.update({name: [row[i] for row in aborted] for i, name in enumerate(_ABORTED_ARRAYS)})
    return params


def aborted_overlapping(
    conn: psycopg.Connection, requests: list[tuple[int, int, int]]
) -> list[list[tuple[int, int]]]:
    """For each (log_id, fetch offset, upper bound): (producer id, first offset) of the aborted
    transactions overlapping [fetch offset, upper bound), in one statement."""
    if not requests:
        return []
    rows = conn.execute(
        _ABORTED_SQL, ([r[0] for r in requests], [r[1] for r in requests], [r[2] for r in requests])
    ).fetchall()
    by_request: dict[int, list[tuple[int, int, int, int]]] = {}
    for ord_, *aborted in rows:
        by_request.setdefault(ord_, []).append(tuple(aborted))  # type: ignore[arg-type]
    return [collect_aborted(by_request.get(i, []), lo, hi) for i, (_, lo, hi) in enumerate(requests, start=1)]


def prune_aborted(conn: psycopg.Connection, starts: dict[int, int]) -> None:
    """Queue forgetting the aborted transactions whose marker is below each log's new start."""
    if starts:
        ids = sorted(starts)
        conn.execute(_PRUNE_SQL, (ids, [starts[i] for i in ids]))


def delete_log_txns(conn: psycopg.Connection, log_ids: list[int]) -> None:
    """Queue deleting every transaction row of deleted logs."""
    conn.execute("DELETE FROM diskless_producer_txns WHERE log_id = ANY(%b::bigint[])", (log_ids,))
    conn.execute("DELETE FROM diskless_aborted_txns WHERE log_id = ANY(%b::bigint[])", (log_ids,))


class TxnMixin(CoordinatorBase):
    """``transaction_state``: what a reader that skips Fetch needs to read committed data only;
    ``describe_producers``: what DescribeProducers shows of a partition's producers."""

    def transaction_state(
        self, topic_id: uuid.UUID, partition: int
    ) -> tuple[int, list[tuple[int, int, int]]] | None:
        """(last stable offset, aborted transactions as (producer id, first, last) in marker order)
        from one snapshot, or None for an unknown partition."""

        def work(conn: psycopg.Connection) -> tuple[tuple | None, list[tuple]]:
            log = conn.execute(_STATE_LOG_SQL, (topic_id, partition))
            aborted = conn.execute(_STATE_ABORTED_SQL, (topic_id, partition))
            return log.fetchone(), aborted.fetchall()

        log, aborted = self._read("transaction_state", work, snapshot=True)
        if log is None:
            return None
        _, log_start_offset, high_watermark, first_ongoing = log
        return last_stable_offset(log_start_offset, high_watermark, first_ongoing), [
            (pid, first, last) for pid, first, last in aborted
        ]

    def describe_producers(self, topic_id: uuid.UUID, partition: int) -> list[ProducerStateEntry] | None:
        """The producers the partition knows, in producer id order, from one snapshot (the three
        statements travel together), or None for an unknown partition."""

        def work(conn: psycopg.Connection) -> tuple[tuple | None, list[tuple], list[tuple]]:
            log = conn.execute(_PRODUCERS_LOG_SQL, (topic_id, partition))
            batches = conn.execute(_PRODUCER_BATCHES_SQL, (topic_id, partition))
            txns = conn.execute(_PRODUCER_TXNS_SQL, (topic_id, partition))
            return log.fetchone(), batches.fetchall(), txns.fetchall()

        log, batches, txns = self._read("describe_producers", work, snapshot=True)
        if log is None:
            return None
        return producer_entries(batches, txns)
