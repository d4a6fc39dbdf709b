"""Transactions on diskless partitions in SQLite: loading and saving what a commit decides
(``shoal.coordinator.transactions`` has the rules), the reads fetches need (last stable offset,
aborted transactions), pruning, ``transaction_state`` for the Spark reader and ``describe_producers``
for DescribeProducers."""

from __future__ import annotations

import sqlite3
import uuid

from shoal.coordinator.api import ProducerStateEntry
from shoal.coordinator.transactions import (
    NO_TXN,
    LogTxns,
    ProducerTxn,
    collect_aborted,
    last_stable_offset,
    producer_entries,
)
from shoal.store.sqlite.coordinator.base import CoordinatorBase

_ONGOING_SQL = (
    "SELECT producer_id, producer_epoch, coordinator_epoch, txn_first_offset FROM diskless_producer_txns "
    "WHERE log_id = ? AND txn_first_offset IS NOT NULL"
)
_PRODUCER_SQL = (
    "SELECT producer_epoch, coordinator_epoch, txn_first_offset FROM diskless_producer_txns "
    "WHERE log_id = ? AND producer_id = ?"
)
_UPSERT_SQL = (
    "INSERT INTO diskless_producer_txns (log_id, producer_id, producer_epoch, coordinator_epoch, "
    "txn_first_offset) VALUES (?, ?, ?, ?, ?) ON CONFLICT (log_id, producer_id) DO UPDATE SET "
    "producer_epoch = excluded.producer_epoch, coordinator_epoch = excluded.coordinator_epoch, "
    "txn_first_offset = excluded.txn_first_offset"
)
_INSERT_ABORTED_SQL = (
    "INSERT INTO diskless_aborted_txns (log_id, last_offset, producer_id, first_offset, last_stable_offset) "
    "VALUES (?, ?, ?, ?, ?)"
)

#: The first offset of a log's earliest ongoing transaction (NULL: none), for ``?`` = log_id.
FIRST_ONGOING_SQL = "SELECT MIN(txn_first_offset) FROM diskless_producer_txns WHERE log_id = ? AND txn_first_offset IS NOT NULL"

_ABORTED_FROM_SQL = (
    "SELECT producer_id, first_offset, last_offset, last_stable_offset FROM diskless_aborted_txns "
    "WHERE log_id = ? AND last_offset >= ? ORDER BY last_offset"
)

# Each producer's last remembered batch, with that batch's max timestamp (its append time under
# LogAppendTime) while the log still holds it (-1 once deleted): the first batch ending at or after
# its offset, one seek of the primary key, is it only if it starts there.
_LAST_BATCHES_SQL = """
SELECT s.producer_id, s.producer_epoch, s.last_sequence, COALESCE((
    SELECT CASE WHEN b.base_offset = s.assigned_offset THEN
        CASE WHEN b.timestamp_type = 1 THEN b.log_append_time ELSE b.batch_max_timestamp END END
    FROM diskless_batches AS b WHERE b.log_id = s.log_id AND b.last_offset >= s.assigned_offset
    ORDER BY b.last_offset LIMIT 1), -1)
FROM diskless_producer_state AS s
WHERE s.log_id = ? AND s.row_id = (
    SELECT MAX(r.row_id) FROM diskless_producer_state AS r WHERE r.log_id = s.log_id AND r.producer_id = s.producer_id)
"""


def load_log_txns(conn: sqlite3.Connection, log_id: int) -> LogTxns:
    """A log's ongoing transactions, and a loader for its other producers' rows (a write transaction)."""

    def load(producer_id: int) -> ProducerTxn | None:
        row = conn.execute(_PRODUCER_SQL, (log_id, producer_id)).fetchone()
        return None if row is None else ProducerTxn(row[0], row[1], NO_TXN if row[2] is None else row[2])

    producers = {
        pid: ProducerTxn(epoch, coordinator_epoch, first)
        for pid, epoch, coordinator_epoch, first in conn.execute(_ONGOING_SQL, (log_id,))
    }
    return LogTxns(producers=producers, load=load)


def save_txns(conn: sqlite3.Connection, logs: dict[int, LogTxns]) -> None:
    """Write the changed producers' rows and the newly aborted transactions."""
    conn.executemany(
        _UPSERT_SQL,
        [
            (log_id, pid, t.epoch, t.coordinator_epoch, None if t.first_offset == NO_TXN else t.first_offset)
            for log_id, txns in logs.items()
            for pid, t in txns.dirty()
        ],
    )
    conn.executemany(
        _INSERT_ABORTED_SQL,
        [
            (log_id, a.last_offset, a.producer_id, a.first_offset, a.last_stable_offset)
            for log_id, txns in logs.items()
            for a in txns.aborted
        ],
    )


def aborted_overlapping(
    conn: sqlite3.Connection, log_id: int, fetch_offset: int, upper: int
) -> list[tuple[int, int]]:
    """(producer id, first offset) of the log's aborted transactions overlapping [fetch_offset, upper)."""
    cur = conn.execute(_ABORTED_FROM_SQL, (log_id, fetch_offset))
    try:
        return collect_aborted(cur, fetch_offset, upper)
    finally:
        cur.close()  # it may stop early: do not leave the statement pinning a snapshot


def prune_aborted(conn: sqlite3.Connection, log_id: int, log_start_offset: int) -> None:
    """Forget the aborted transactions whose marker is below the log start (gone with its batches)."""
    conn.execute(
        "DELETE FROM diskless_aborted_txns WHERE log_id = ? AND last_offset < ?", (log_id, log_start_offset)
    )


def delete_log_txns(conn: sqlite3.Connection, log_id: int) -> None:
    """Every transaction row of a deleted log."""
    conn.execute("DELETE FROM diskless_producer_txns WHERE log_id = ?", (log_id,))
    conn.execute("DELETE FROM diskless_aborted_txns WHERE log_id = ?", (log_id,))


class TxnMixin(CoordinatorBase):
    """``transaction_state``: what a reader that skips Fetch needs to read committed data only;
    ``describe_producers``: what DescribeProducers shows of a partition's producers."""

    def transaction_state(
        self, topic_id: uuid.UUID, partition: int
    ) -> tuple[int, list[tuple[int, int, int]]] | None:
        """(last stable offset, aborted transactions as (producer id, first, last) in marker order)
        from one snapshot, or None for an unknown partition."""
        with self._read() as conn:
            conn.execute("BEGIN")  # one snapshot for the reads; _read rolls it back
            log = conn.execute(
                "SELECT log_id, log_start_offset, high_watermark FROM diskless_logs WHERE topic_id = ? AND partition = ?",
                (topic_id.bytes, partition),
            ).fetchone()
            if log is None:
                return None
            log_id, log_start_offset, high_watermark = log
            (first_ongoing,) = conn.execute(FIRST_ONGOING_SQL, (log_id,)).fetchone()
            aborted = conn.execute(
                "SELECT producer_id, first_offset, last_offset FROM diskless_aborted_txns WHERE log_id = ? "
                "ORDER BY last_offset",
                (log_id,),
            ).fetchall()
        lso = last_stable_offset(log_start_offset, high_watermark, first_ongoing)
        return lso, [(pid, first, last) for pid, first, last in aborted]

    def describe_producers(self, topic_id: uuid.UUID, partition: int) -> list[ProducerStateEntry] | None:
        """The producers the partition knows, in producer id order, from one snapshot, or None for an
        unknown partition (``BatchCoordinator.describe_producers``)."""
        with self._read() as conn:
            conn.execute("BEGIN")  # one snapshot for the reads; _read rolls it back
            log = conn.execute(
                "SELECT log_id FROM diskless_logs WHERE topic_id = ? AND partition = ?", (topic_id.bytes, partition)
            ).fetchone()
            if log is None:
                return None
            batches = conn.execute(_LAST_BATCHES_SQL, (log[0],)).fetchall()
            txns = conn.execute(
                "SELECT producer_id, producer_epoch, coordinator_epoch, txn_first_offset FROM diskless_producer_txns "
                "WHERE log_id = ?",
                (log[0],),
            ).fetchall()
        return producer_entries(batches, txns)
