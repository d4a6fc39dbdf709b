"""commit_file: one object's batches get offsets, with Kafka's idempotent-producer dedup and
transaction bookkeeping (``txns``).

Also the log row a write transaction loads (``LogState``/``load_log``), shared with the
deletion paths.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

from shoal.coordinator.api import CommitBatchRequest, CommitBatchResponse
from shoal.coordinator.commit_decision import decide
from shoal.coordinator.idempotence import ProducerEntry, ProducerState
from shoal.coordinator.transactions import LogTxns, batch_flags
from shoal.store.sqlite.coordinator.base import CoordinatorBase
from shoal.store.sqlite.coordinator.txns import load_log_txns, save_txns


@dataclass(slots=True)
class LogState:
    """A log row loaded into a write transaction (a commit, a deletion), written back once at the end."""

    log_id: int
    log_start_offset: int
    high_watermark: int
    byte_size: int
    max_timestamp: int
    dirty: bool = False


def load_log(conn: sqlite3.Connection, key: tuple[bytes, int]) -> LogState | None:
    """The log row of (topic id bytes, partition), or None for an unknown partition."""
    row = conn.execute(
        "SELECT log_id, log_start_offset, high_watermark, byte_size, max_timestamp "
        "FROM diskless_logs WHERE topic_id = ? AND partition = ?",
        key,
    ).fetchone()
    return None if row is None else LogState(*row)


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
        Accepted batches all get the same log_append_time (taken after the write lock,
        so it never goes backwards with offsets when the wall clock does not).
        Raises sqlite3.IntegrityError if ``object_key`` was already committed.
        """
        responses: list[CommitBatchResponse] = []
        with self._write() as conn:
            now = self._clock()
            file_id = conn.execute(
                "INSERT INTO diskless_files (object_key, uploader_broker_id, committed_at, size, "
                "used_size, state) VALUES (?, ?, ?, ?, 0, 'uploaded')",
                (object_key, uploader_broker_id, now, file_size),
            ).lastrowid
            next_batch_id = first_batch_id = conn.execute(
                "SELECT next_value FROM diskless_id_sequences WHERE name = 'batch_id'"
            ).fetchone()[0]
            logs: dict[tuple[bytes, int], LogState | None] = {}
            producers: dict[tuple[int, int], ProducerState] = {}
            txns: dict[int, LogTxns] = {}
            batch_rows: list[tuple[int, ...]] = []
            used_size = 0

            def producer_state(log_id: int, producer_id: int) -> ProducerState:
                pkey = (log_id, producer_id)
                if pkey not in producers:
                    producers[pkey] = self._load_producer(conn, pkey)
                return producers[pkey]

            def log_txns(log_id: int) -> LogTxns:
                if log_id not in txns:
                    txns[log_id] = load_log_txns(conn, log_id)
                return txns[log_id]

            for req in batches:
                tip = req.topic_id_partition
                key = (tip.topic_id.bytes, tip.partition)
                if key not in logs:
                    logs[key] = load_log(conn, key)
                log = logs[key]
                answer, accepted = decide(req, log, producer_state, log_txns, now, file_size)
                responses.append(answer)
                if not accepted:
                    continue
                assert log is not None
                base_offset = answer.assigned_base_offset
                used_size += req.size
                batch_rows.append(
                    (
                        log.log_id,
                        base_offset + (req.last_offset - req.base_offset),
                        next_batch_id,
                        base_offset,
                        file_id,
                        req.byte_offset,
                        req.size,
                        now,
                        req.batch_max_timestamp,
                        int(req.message_timestamp_type),
                        req.producer_id,
                        req.producer_epoch,
                        req.base_sequence,
                        req.last_sequence,
                        log.max_timestamp,
                        *batch_flags(req),
                    )
                )
                next_batch_id += 1

            conn.executemany(
                "INSERT INTO diskless_batches (log_id, last_offset, batch_id, base_offset, file_id, byte_offset, "
                "byte_size, log_append_time, batch_max_timestamp, timestamp_type, producer_id, "
                "producer_epoch, base_sequence, last_sequence, max_ts_so_far, is_transactional, is_control) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                batch_rows,
            )
            conn.executemany(
                "UPDATE diskless_logs SET high_watermark = ?, byte_size = ?, max_timestamp = ? "
                "WHERE log_id = ?",
                [
                    (log.high_watermark, log.byte_size, log.max_timestamp, log.log_id)
                    for log in logs.values()
                    if log is not None and log.dirty
                ],
            )
            if next_batch_id != first_batch_id:
                conn.execute(
                    "UPDATE diskless_id_sequences SET next_value = ? WHERE name = 'batch_id'",
                    (next_batch_id,),
                )
            self._save_producers(conn, producers)
            save_txns(conn, txns)
            if used_size > 0:
                conn.execute(
                    "UPDATE diskless_files SET used_size = ? WHERE file_id = ?", (used_size, file_id)
                )
            else:
                conn.execute(
                    "UPDATE diskless_files SET state = 'deleting', marked_for_deletion_at = ? WHERE file_id = ?",
                    (now, file_id),
                )
        return responses

    @staticmethod
    def _load_producer(conn: sqlite3.Connection, pkey: tuple[int, int]) -> ProducerState:
        entries = [
            ProducerEntry(*row)
            for row in conn.execute(
                "SELECT row_id, producer_epoch, base_sequence, last_sequence, assigned_offset, "
                "log_append_time FROM diskless_producer_state WHERE log_id = ? AND producer_id = ? "
                "ORDER BY row_id",
                pkey,
            )
        ]
        return ProducerState(entries=entries)

    @staticmethod
    def _save_producers(conn: sqlite3.Connection, producers: dict[tuple[int, int], ProducerState]) -> None:
        """Write the kept entries of changed producers and drop everything older."""
        deletes: list[tuple[int, int, int]] = []
        inserts: list[tuple[int, ...]] = []
        for (log_id, producer_id), state in producers.items():
            if not state.dirty:
                continue
            deletes.append((log_id, producer_id, state.first_kept_row_id))
            inserts.extend(
                (
                    log_id,
                    producer_id,
                    e.row_id,
                    e.epoch,
                    e.base_sequence,
                    e.last_sequence,
                    e.assigned_offset,
                    e.log_append_time,
                )
                for e in state.entries
                if e.new
            )
        conn.executemany(
            "DELETE FROM diskless_producer_state WHERE log_id = ? AND producer_id = ? AND row_id < ?", deletes
        )
        conn.executemany("INSERT INTO diskless_producer_state VALUES (?, ?, ?, ?, ?, ?, ?, ?)", inserts)


