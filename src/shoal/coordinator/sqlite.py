"""The Batch Coordinator of KIP-1164 on a local SQLite file.

SQLite is what the KIP itself proposes for materialising coordinator state, and what
Inkless's PostgreSQL schema maps onto directly: ``logs`` (one row per partition),
``files`` (one row per uploaded object), ``batches`` (the coordinates of every live
batch) and ``producer_state`` (the last 5 batches of every idempotent producer).
Tables are prefixed ``diskless_`` because the same database file also holds the
cluster metadata log.

Concurrency: every write runs on ONE writer connection under a ``threading.Lock``
inside ``BEGIN IMMEDIATE``, so offsets are assigned strictly serially (and SQLite's
write lock also serialises us against other processes on the file). Reads
(``find_batches``, ``list_offsets`` ...) take a connection from a small pool instead:
WAL mode lets them run in parallel with a commit that is waiting on fsync, so the
Fetch hot path never queues behind a producer's durable commit. Each read is a
single SELECT where consistency matters, which SQLite runs on one snapshot.
"""

from __future__ import annotations

import json
import queue
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from shoal.coordinator.api import (
    BatchInfo,
    BatchMetadata,
    BatchMove,
    CommitBatchRequest,
    CommitBatchResponse,
    CreateTopicAndPartitionsRequest,
    DeleteFilesRequest,
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    EnforceRetentionRequest,
    EnforceRetentionResponse,
    FileToDelete,
    FindBatchRequest,
    FindBatchResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    ListOffsetsTimestamp,
    ObjectCandidate,
    ObjectDescription,
    ObjectState,
    PartitionDescription,
    ReplaceResult,
    TopicDescription,
    TopicIdPartition,
)
from shoal.protocol.errors import ErrorCode
from shoal.records.types import TimestampType
from shoal.store.sqlite.connection import apply_schema, open_sqlite

__all__ = ["SqliteBatchCoordinator", "PRODUCER_STATE_BATCHES"]

#: Kafka keeps the metadata of the last 5 batches per producer for deduplication
#: (it is also the client's max.in.flight.requests.per.connection for idempotence).
PRODUCER_STATE_BATCHES = 5

_INT32_MAX = 2**31 - 1
_NO_PRODUCER = -1

_COMPONENT = "diskless_coordinator"

# Design notes:
# - logs get an integer log_id; batches and producer state reference it instead of
#   repeating the 16-byte topic id, which keeps rows and keys small.
# - diskless_batches is a WITHOUT ROWID table clustered on (log_id, last_offset): "the
#   batches of a partition whose last_offset >= X in offset order" (every Fetch) is one
#   contiguous range scan of the table itself, no index-then-row hop (measured 2x
#   faster per batch than a rowid table plus index). Batches of a partition never
#   overlap, so last_offset order is base_offset order. The same range serves
#   delete_records and delete_topics.
# - batch_id comes from diskless_id_sequences, so an id is never reused after deletion
#   (readers may cache by it) and grows with offsets inside a partition.
# - max_ts_so_far is the running maximum of the (effective) batch timestamp in offset
#   order, so it is non-decreasing within a partition, like Kafka's time index: the
#   first batch with max_ts_so_far >= T is found with one index seek.
# - No FOREIGN KEY from batches to files: SQLite would scan batches on every file
#   delete without an extra index; delete_files only forgets objects in state
#   'deleting', which the used_size accounting reaches only once no batch is left
#   (batches have size > 0).
_MIGRATIONS = [
    """
CREATE TABLE diskless_logs (
    log_id INTEGER PRIMARY KEY,
    topic_id BLOB NOT NULL,
    partition INTEGER NOT NULL,
    topic_name TEXT NOT NULL,
    log_start_offset INTEGER NOT NULL DEFAULT 0,
    high_watermark INTEGER NOT NULL DEFAULT 0,
    byte_size INTEGER NOT NULL DEFAULT 0,
    max_timestamp INTEGER NOT NULL DEFAULT -1,
    UNIQUE (topic_id, partition)
);
CREATE TABLE diskless_files (
    file_id INTEGER PRIMARY KEY AUTOINCREMENT,
    object_key TEXT NOT NULL UNIQUE,
    uploader_broker_id INTEGER NOT NULL,
    committed_at INTEGER NOT NULL,
    size INTEGER NOT NULL,
    used_size INTEGER NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('uploaded', 'deleting')),
    marked_for_deletion_at INTEGER
);
CREATE INDEX diskless_files_deleting ON diskless_files (file_id) WHERE state = 'deleting';
CREATE TABLE diskless_batches (
    log_id INTEGER NOT NULL,
    last_offset INTEGER NOT NULL,
    batch_id INTEGER NOT NULL,
    base_offset INTEGER NOT NULL,
    file_id INTEGER NOT NULL,
    byte_offset INTEGER NOT NULL,
    byte_size INTEGER NOT NULL,
    log_append_time INTEGER NOT NULL,
    batch_max_timestamp INTEGER NOT NULL,
    timestamp_type INTEGER NOT NULL,
    producer_id INTEGER NOT NULL,
    producer_epoch INTEGER NOT NULL,
    base_sequence INTEGER NOT NULL,
    last_sequence INTEGER NOT NULL,
    max_ts_so_far INTEGER NOT NULL,
    PRIMARY KEY (log_id, last_offset)
) WITHOUT ROWID;
CREATE INDEX diskless_batches_by_time ON diskless_batches (log_id, max_ts_so_far);
CREATE TABLE diskless_producer_state (
    log_id INTEGER NOT NULL,
    producer_id INTEGER NOT NULL,
    row_id INTEGER NOT NULL,
    producer_epoch INTEGER NOT NULL,
    base_sequence INTEGER NOT NULL,
    last_sequence INTEGER NOT NULL,
    assigned_offset INTEGER NOT NULL,
    log_append_time INTEGER NOT NULL,
    PRIMARY KEY (log_id, producer_id, row_id)
) WITHOUT ROWID;
CREATE TABLE diskless_id_sequences (
    name TEXT PRIMARY KEY,
    next_value INTEGER NOT NULL
) WITHOUT ROWID;
INSERT INTO diskless_id_sequences (name, next_value) VALUES ('batch_id', 1)
""",
    # Which topics had batches deleted from which object, so an operator can see the
    # objects a topic leaves waiting for physical deletion (KIP-1163's topic overview)
    # once the batch rows that linked them are gone. Written only on deletion paths,
    # never by commit_file; rows go when delete_files forgets the object.
    """
CREATE TABLE diskless_file_deleted_topics (
    file_id INTEGER NOT NULL,
    topic_id BLOB NOT NULL,
    PRIMARY KEY (file_id, topic_id)
) WITHOUT ROWID;
CREATE INDEX diskless_file_deleted_topics_by_topic ON diskless_file_deleted_topics (topic_id)
""",
]

_TIMESTAMP_TYPES = (TimestampType.CREATE_TIME, TimestampType.LOG_APPEND_TIME)

_EFFECTIVE_TS = "CASE WHEN timestamp_type = 1 THEN log_append_time ELSE batch_max_timestamp END"

# The age time retention judges a batch by. Kafka's LogSegment.largestTimestamp falls
# back to the segment file's mtime (about its append time) when the segment has no
# record timestamp; a batch without one (max timestamp -1) falls back to its append time.
_RETENTION_TS = (
    "CASE WHEN timestamp_type = 1 OR batch_max_timestamp < 0 THEN log_append_time ELSE batch_max_timestamp END"
)

# One statement per partition: the log row and its batches from one snapshot. The range
# check sits in the join so an out-of-range offset reads no batch at all.
_FIND_SQL = """
SELECT l.log_start_offset, l.high_watermark,
       b.batch_id, f.object_key, b.byte_offset, b.byte_size, b.base_offset, b.last_offset,
       b.log_append_time, b.batch_max_timestamp, b.timestamp_type,
       b.producer_id, b.producer_epoch, b.base_sequence, b.last_sequence
FROM diskless_logs AS l
LEFT JOIN diskless_batches AS b
    ON b.log_id = l.log_id AND b.last_offset >= ?1
    AND ?1 >= l.log_start_offset AND ?1 < l.high_watermark
LEFT JOIN diskless_files AS f ON f.file_id = b.file_id
WHERE l.topic_id = ?2 AND l.partition = ?3
ORDER BY b.last_offset
"""


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


def _next_sequence(sequence: int) -> int:
    """Kafka's sequence successor: int32 sequences wrap from 2**31-1 to 0."""
    return 0 if sequence >= _INT32_MAX else sequence + 1


@dataclass(slots=True)
class _LogState:
    """A log row loaded into a commit transaction, written back once at the end."""

    log_id: int
    log_start_offset: int
    high_watermark: int
    byte_size: int
    max_timestamp: int
    dirty: bool = False


@dataclass(slots=True)
class _ProducerEntry:
    row_id: int
    epoch: int
    base_sequence: int
    last_sequence: int
    assigned_offset: int
    log_append_time: int
    new: bool = False


@dataclass(slots=True)
class _ProducerState:
    """The last batches of one producer on one partition, as Kafka's ProducerStateEntry."""

    entries: list[_ProducerEntry] = field(default_factory=list)
    next_row_id: int = 0
    dirty: bool = False

    @property
    def epoch(self) -> int:
        return self.entries[-1].epoch if self.entries else _NO_PRODUCER

    def find_duplicate(self, epoch: int, base_sequence: int, last_sequence: int) -> _ProducerEntry | None:
        if epoch != self.epoch:
            return None
        for entry in self.entries:
            if entry.base_sequence == base_sequence and entry.last_sequence == last_sequence:
                return entry
        return None

    def append(self, entry: _ProducerEntry, reset: bool) -> None:
        if reset:
            self.entries.clear()
        self.entries.append(entry)
        del self.entries[:-PRODUCER_STATE_BATCHES]
        self.dirty = True


class SqliteBatchCoordinator:
    """KIP-1164 Batch Coordinator persisted in SQLite (see the module docstring)."""

    def __init__(self, path: str | Path, clock: Callable[[], int] = _wall_clock_ms) -> None:
        self._path = Path(path)
        self._clock = clock
        self._write_lock = threading.Lock()
        self._conn = open_sqlite(self._path)
        apply_schema(self._conn, _COMPONENT, _MIGRATIONS)
        self._readers: queue.SimpleQueue[sqlite3.Connection] = queue.SimpleQueue()
        self._all_readers: list[sqlite3.Connection] = []
        self._readers_lock = threading.Lock()
        self._closed = False

    # ------------------------------------------------------------------ plumbing

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("batch coordinator is closed")

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One serialised BEGIN IMMEDIATE transaction; committed (durably) on success."""
        with self._write_lock:
            self._check_open()
            conn = self._conn
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
                conn.execute("COMMIT")
            except BaseException:
                # SQLite may already have rolled back (e.g. on SQLITE_FULL); never leave a
                # transaction open on the shared connection, the next BEGIN would fail.
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise

    @contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        """A pooled read-only connection, so reads do not wait behind a commit's fsync."""
        self._check_open()
        try:
            conn = self._readers.get_nowait()
        except queue.Empty:
            conn = open_sqlite(self._path)
            conn.execute("PRAGMA query_only=ON")
            with self._readers_lock:
                self._all_readers.append(conn)
        try:
            yield conn
        finally:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            self._readers.put(conn)

    def close(self) -> None:
        """Close every connection; later calls raise RuntimeError."""
        with self._write_lock:
            if self._closed:
                return
            self._closed = True
            self._conn.close()
        with self._readers_lock:
            for conn in self._all_readers:
                conn.close()
            self._all_readers.clear()

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
        """Drop the logs, batches and producer state of the topics; shrink their objects."""
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
        conn.executemany(
            "UPDATE diskless_files SET used_size = used_size - ?1, "
            "state = CASE WHEN used_size - ?1 <= 0 THEN 'deleting' ELSE state END, "
            "marked_for_deletion_at = CASE WHEN used_size - ?1 <= 0 "
            "THEN COALESCE(marked_for_deletion_at, ?2) ELSE marked_for_deletion_at END "
            "WHERE file_id = ?3",
            [(freed, now, file_id) for file_id, freed in per_file],
        )
        conn.executemany(
            "INSERT OR IGNORE INTO diskless_file_deleted_topics (file_id, topic_id) "
            "SELECT ?, topic_id FROM diskless_logs WHERE log_id = ?",
            [(file_id, log_id) for file_id, _ in per_file],
        )
        return sum(freed for _, freed in per_file)

    # ------------------------------------------------------------------ commit

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
            logs: dict[tuple[bytes, int], _LogState | None] = {}
            producers: dict[tuple[int, int], _ProducerState] = {}
            batch_rows: list[tuple[int, ...]] = []
            used_size = 0

            for req in batches:
                tip = req.topic_id_partition
                key = (tip.topic_id.bytes, tip.partition)
                if key in logs:
                    log = logs[key]
                else:
                    log = logs[key] = self._load_log(conn, key)
                if log is None:
                    responses.append(_rejected(ErrorCode.unknown_topic_or_partition, -1, req))
                    continue
                if (
                    req.last_offset < req.base_offset
                    or req.size <= 0
                    or req.byte_offset < 0
                    or req.byte_offset + req.size > file_size
                ):
                    responses.append(_rejected(ErrorCode.corrupt_message, log.log_start_offset, req))
                    continue

                state: _ProducerState | None = None
                reset = False
                if req.producer_id != _NO_PRODUCER:
                    pkey = (log.log_id, req.producer_id)
                    state = producers.get(pkey)
                    if state is None:
                        state = producers[pkey] = self._load_producer(conn, pkey)
                    duplicate = state.find_duplicate(req.producer_epoch, req.base_sequence, req.last_sequence)
                    if duplicate is not None:
                        responses.append(
                            CommitBatchResponse(
                                errors=ErrorCode.none,
                                assigned_base_offset=duplicate.assigned_offset,
                                log_append_time=duplicate.log_append_time,
                                log_start_offset=log.log_start_offset,
                                is_duplicate=True,
                                request=req,
                            )
                        )
                        continue
                    error, reset = _check_sequence(state, req)
                    if error is not ErrorCode.none:
                        responses.append(_rejected(error, log.log_start_offset, req))
                        continue

                base_offset = log.high_watermark
                last_offset = base_offset + (req.last_offset - req.base_offset)
                log.high_watermark = last_offset + 1
                log.byte_size += req.size
                effective_ts = (
                    now
                    if req.message_timestamp_type == TimestampType.LOG_APPEND_TIME
                    else req.batch_max_timestamp
                )
                log.max_timestamp = max(log.max_timestamp, effective_ts)
                log.dirty = True
                used_size += req.size
                batch_rows.append(
                    (
                        log.log_id,
                        last_offset,
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
                    )
                )
                next_batch_id += 1
                if state is not None:
                    state.append(
                        _ProducerEntry(
                            row_id=state.next_row_id,
                            epoch=req.producer_epoch,
                            base_sequence=req.base_sequence,
                            last_sequence=req.last_sequence,
                            assigned_offset=base_offset,
                            log_append_time=now,
                            new=True,
                        ),
                        reset,
                    )
                    state.next_row_id += 1
                responses.append(
                    CommitBatchResponse(
                        errors=ErrorCode.none,
                        assigned_base_offset=base_offset,
                        log_append_time=now,
                        log_start_offset=log.log_start_offset,
                        is_duplicate=False,
                        request=req,
                    )
                )

            conn.executemany(
                "INSERT INTO diskless_batches (log_id, last_offset, batch_id, base_offset, file_id, byte_offset, "
                "byte_size, log_append_time, batch_max_timestamp, timestamp_type, producer_id, "
                "producer_epoch, base_sequence, last_sequence, max_ts_so_far) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
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
    def _load_log(conn: sqlite3.Connection, key: tuple[bytes, int]) -> _LogState | None:
        row = conn.execute(
            "SELECT log_id, log_start_offset, high_watermark, byte_size, max_timestamp "
            "FROM diskless_logs WHERE topic_id = ? AND partition = ?",
            key,
        ).fetchone()
        return None if row is None else _LogState(*row)

    @staticmethod
    def _load_producer(conn: sqlite3.Connection, pkey: tuple[int, int]) -> _ProducerState:
        entries = [
            _ProducerEntry(*row)
            for row in conn.execute(
                "SELECT row_id, producer_epoch, base_sequence, last_sequence, assigned_offset, "
                "log_append_time FROM diskless_producer_state WHERE log_id = ? AND producer_id = ? "
                "ORDER BY row_id",
                pkey,
            )
        ]
        return _ProducerState(entries=entries, next_row_id=entries[-1].row_id + 1 if entries else 0)

    @staticmethod
    def _save_producers(conn: sqlite3.Connection, producers: dict[tuple[int, int], _ProducerState]) -> None:
        """Write the kept entries of changed producers and drop everything older."""
        deletes: list[tuple[int, int, int]] = []
        inserts: list[tuple[int, ...]] = []
        for (log_id, producer_id), state in producers.items():
            if not state.dirty:
                continue
            deletes.append((log_id, producer_id, state.entries[0].row_id))
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

    # ------------------------------------------------------------------ fetch

    def find_batches(
        self, find_batch_requests: list[FindBatchRequest], fetch_max_bytes: int
    ) -> list[FindBatchResponse]:
        """Batch coordinates from each requested offset on, one indexed query per partition.

        Limits work like Kafka's log reads: a batch is added only while the partition
        stays within ``max_partition_fetch_bytes`` and the response within
        ``fetch_max_bytes``, except that the first batch of a partition is always
        returned when it is the first batch of the response (so a consumer always makes
        progress) or when it fits in what is left of ``fetch_max_bytes``. Batches are
        contiguous: we stop at the first batch that does not fit.
        """
        responses: list[FindBatchResponse] = []
        remaining = fetch_max_bytes
        response_has_data = False
        with self._read() as conn:
            for req in find_batch_requests:
                tip = req.topic_id_partition
                cur = conn.execute(_FIND_SQL, (req.offset, tip.topic_id.bytes, tip.partition))
                try:
                    row = cur.fetchone()
                    if row is None:
                        responses.append(FindBatchResponse(ErrorCode.unknown_topic_or_partition, [], -1, -1))
                        continue
                    log_start_offset, high_watermark = row[0], row[1]
                    if req.offset < log_start_offset or req.offset > high_watermark:
                        responses.append(
                            FindBatchResponse(
                                ErrorCode.offset_out_of_range, [], log_start_offset, high_watermark
                            )
                        )
                        continue
                    found: list[BatchInfo] = []
                    partition_bytes = 0
                    while row is not None and row[2] is not None:
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
                                    _TIMESTAMP_TYPES[row[10]],
                                    row[11],
                                    row[12],
                                    row[13],
                                    row[14],
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
                responses.append(FindBatchResponse(ErrorCode.none, found, log_start_offset, high_watermark))
        return responses

    # ------------------------------------------------------------------ offsets

    def list_offsets(self, requests: list[ListOffsetsRequest]) -> list[ListOffsetsResponse]:
        """Earliest / latest / max-timestamp / by-timestamp lookups at batch granularity.

        Kafka answers a timestamp lookup with the exact first record whose timestamp is
        >= the target; the coordinator only knows batches, so it answers the base offset
        (at least the log start offset) of the first batch whose max timestamp is >= the
        target, with that batch's max timestamp (log append time for LogAppendTime
        batches). MAX_TIMESTAMP answers the last offset of the earliest batch holding the
        greatest timestamp. The broker may refine both by reading the batch. Other
        negative timestamps answer INVALID_REQUEST.
        """
        responses: list[ListOffsetsResponse] = []
        with self._read() as conn:
            for req in requests:
                tip = req.topic_id_partition
                log = conn.execute(
                    "SELECT log_id, log_start_offset, high_watermark FROM diskless_logs "
                    "WHERE topic_id = ? AND partition = ?",
                    (tip.topic_id.bytes, tip.partition),
                ).fetchone()
                if log is None:
                    responses.append(ListOffsetsResponse(ErrorCode.unknown_topic_or_partition, tip, -1, -1))
                    continue
                log_id, log_start_offset, high_watermark = log
                ts = req.timestamp
                if ts in (ListOffsetsTimestamp.EARLIEST, ListOffsetsTimestamp.EARLIEST_LOCAL):
                    timestamp, offset = -1, log_start_offset
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

    # ------------------------------------------------------------------ deletion

    def delete_records(self, requests: list[DeleteRecordsRequest]) -> list[DeleteRecordsResponse]:
        """Move log start offsets forward (never back) and drop the batches entirely below."""
        responses: list[DeleteRecordsResponse] = []
        with self._write() as conn:
            now = self._clock()
            for req in requests:
                tip = req.topic_id_partition
                log = self._load_log(conn, (tip.topic_id.bytes, tip.partition))
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
                    log.log_start_offset = offset
                responses.append(DeleteRecordsResponse(ErrorCode.none, log.log_start_offset))
        return responses

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
                log = self._load_log(conn, (tip.topic_id.bytes, tip.partition))
                if log is None:
                    responses.append(EnforceRetentionResponse(ErrorCode.unknown_topic_or_partition, 0, 0, -1))
                    continue
                boundary, batches = self._retention_boundary(conn, log, req, now)
                freed = 0
                if batches:
                    freed = self._delete_batches_below(conn, log.log_id, boundary, now)
                    first = conn.execute(
                        "SELECT base_offset FROM diskless_batches WHERE log_id = ? ORDER BY last_offset LIMIT 1",
                        (log.log_id,),
                    ).fetchone()
                    # A DeleteRecords inside the first batch may already have moved the start past its base.
                    start = max(log.log_start_offset, log.high_watermark if first is None else first[0])
                    conn.execute(
                        "UPDATE diskless_logs SET log_start_offset = ?, byte_size = byte_size - ? WHERE log_id = ?",
                        (start, freed, log.log_id),
                    )
                    log.log_start_offset = start
                responses.append(EnforceRetentionResponse(ErrorCode.none, batches, freed, log.log_start_offset))
        return responses

    @staticmethod
    def _retention_boundary(
        conn: sqlite3.Connection, log: _LogState, req: EnforceRetentionRequest, now: int
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

    # ------------------------------------------------------------------ inspection (tools)

    def describe_topic(self, topic_id: uuid.UUID) -> TopicDescription | None:
        """KIP-1163's topic overview, from one snapshot; None when nothing is known of the topic.

        Reads every live batch of the topic to find its objects: a tool's query, not
        one for a request path. A deleted topic is still described (with no partition)
        while objects it emptied wait for physical deletion.
        """
        with self._read() as conn:
            conn.execute("BEGIN")  # one snapshot for the three reads; _read rolls it back
            logs = conn.execute(
                "SELECT partition, topic_name, log_start_offset, high_watermark, byte_size "
                "FROM diskless_logs WHERE topic_id = ? ORDER BY partition",
                (topic_id.bytes,),
            ).fetchall()
            object_count, object_bytes = conn.execute(
                "SELECT COUNT(*), COALESCE(SUM(size), 0) FROM diskless_files WHERE file_id IN "
                "(SELECT b.file_id FROM diskless_batches AS b JOIN diskless_logs AS l ON l.log_id = b.log_id "
                "WHERE l.topic_id = ?)",
                (topic_id.bytes,),
            ).fetchone()
            deleted_count, deleted_bytes = conn.execute(
                "SELECT COUNT(*), COALESCE(SUM(f.size), 0) FROM diskless_file_deleted_topics AS d "
                "JOIN diskless_files AS f ON f.file_id = d.file_id WHERE d.topic_id = ? AND f.state = 'deleting'",
                (topic_id.bytes,),
            ).fetchone()
        if not logs and deleted_count == 0:
            return None
        return TopicDescription(
            topic_id=topic_id,
            topic_name=logs[0][1] if logs else "",
            partitions=[PartitionDescription(row[0], row[2], row[3], row[4]) for row in logs],
            object_count=object_count,
            object_bytes=object_bytes,
            deleted_object_count=deleted_count,
            deleted_object_bytes=deleted_bytes,
        )

    def describe_object(self, object_key: str) -> ObjectDescription | None:
        """KIP-1163's object metadata with the object's live batches in byte order.

        Batches are found by scanning the batch table (there is no index by object, to
        keep commits cheap): a tool's query, not one for a request path.
        """
        with self._read() as conn:
            conn.execute("BEGIN")  # the object row and its batches from one snapshot
            row = conn.execute(
                "SELECT file_id, size, used_size, state, uploader_broker_id, committed_at, marked_for_deletion_at "
                "FROM diskless_files WHERE object_key = ?",
                (object_key,),
            ).fetchone()
            if row is None:
                return None
            file_id, size, used_size, state, uploader, committed_at, marked_at = row
            rows = conn.execute(
                "SELECT l.topic_id, l.partition, l.topic_name, b.batch_id, b.byte_offset, b.byte_size, "
                "b.base_offset, b.last_offset, b.log_append_time, b.batch_max_timestamp, b.timestamp_type, "
                "b.producer_id, b.producer_epoch, b.base_sequence, b.last_sequence "
                "FROM diskless_batches AS b JOIN diskless_logs AS l ON l.log_id = b.log_id "
                "WHERE b.file_id = ? ORDER BY b.byte_offset",
                (file_id,),
            ).fetchall()
        batches = [
            BatchInfo(
                r[3],
                object_key,
                BatchMetadata(
                    TopicIdPartition(uuid.UUID(bytes=r[0]), r[1], r[2]),
                    r[4],
                    r[5],
                    r[6],
                    r[7],
                    r[8],
                    r[9],
                    _TIMESTAMP_TYPES[r[10]],
                    r[11],
                    r[12],
                    r[13],
                    r[14],
                ),
            )
            for r in rows
        ]
        return ObjectDescription(
            object_key=object_key,
            size=size,
            used_size=used_size,
            state=state,
            uploader_broker_id=uploader,
            committed_at=_utc(committed_at),
            marked_for_deletion_at=None if marked_at is None else _utc(marked_at),
            batches=batches,
        )

    def get_files_to_delete(self) -> list[FileToDelete]:
        """Objects marked for deletion, oldest mark first, with the mark time in UTC."""
        with self._read() as conn:
            rows = conn.execute(
                "SELECT object_key, marked_for_deletion_at FROM diskless_files "
                "WHERE state = 'deleting' ORDER BY marked_for_deletion_at, file_id"
            ).fetchall()
        return [FileToDelete(key, _utc(ms)) for key, ms in rows]

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

    # ------------------------------------------------------------------ object compaction

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
        return [ObjectCandidate(key, size, used, _utc(at)) for key, size, used, at in rows]

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
                "b.timestamp_type, b.producer_id, b.producer_epoch, b.base_sequence, b.last_sequence "
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
                        _TIMESTAMP_TYPES[r[11]],
                        r[12],
                        r[13],
                        r[14],
                        r[15],
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
            conn.executemany(_SHRINK_FILE_SQL, [(size, now, file_id) for file_id, size in freed.items()])
            # Like the deletion paths: the topic overview shows the objects it leaves waiting for deletion.
            conn.executemany(
                "INSERT OR IGNORE INTO diskless_file_deleted_topics (file_id, topic_id) "
                "SELECT ?, topic_id FROM diskless_logs WHERE log_id = ?",
                sorted(touched),
            )
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


def _utc(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


# An object loses ?1 used bytes; at zero it is marked for deletion (kept marked if it already was).
_SHRINK_FILE_SQL = (
    "UPDATE diskless_files SET used_size = used_size - ?1, "
    "state = CASE WHEN used_size - ?1 <= 0 THEN 'deleting' ELSE state END, "
    "marked_for_deletion_at = CASE WHEN used_size - ?1 <= 0 "
    "THEN COALESCE(marked_for_deletion_at, ?2) ELSE marked_for_deletion_at END "
    "WHERE file_id = ?3"
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


def _rejected(error: ErrorCode, log_start_offset: int, req: CommitBatchRequest) -> CommitBatchResponse:
    return CommitBatchResponse(
        errors=error,
        assigned_base_offset=-1,
        log_append_time=-1,
        log_start_offset=log_start_offset,
        is_duplicate=False,
        request=req,
    )


def _check_sequence(state: _ProducerState, req: CommitBatchRequest) -> tuple[ErrorCode, bool]:
    """Kafka's ProducerAppendInfo checks for a non-duplicate batch: (error, resets state)."""
    if not state.entries:
        return ErrorCode.none, False
    if req.producer_epoch < state.epoch:
        return ErrorCode.invalid_producer_epoch, False
    if req.producer_epoch > state.epoch:
        if req.base_sequence != 0:
            return ErrorCode.out_of_order_sequence_number, False
        return ErrorCode.none, True
    if req.base_sequence != _next_sequence(state.entries[-1].last_sequence):
        return ErrorCode.out_of_order_sequence_number, False
    return ErrorCode.none, False
