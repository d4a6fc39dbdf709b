"""The PostgreSQL Batch Coordinator's tables, and the constants and SQL several of its parts share.

The same tables as the SQLite backend (``shoal.store.sqlite.coordinator.schema``), which
follow Inkless's PostgreSQL schema: ``logs`` (one row per partition), ``files`` (one row per
uploaded object), ``batches`` (the coordinates of every live batch), ``producer_state`` (the
last 5 batches of every idempotent producer), ``file_deleted_topics`` (for the topic
overview), ``producer_txns`` and ``aborted_txns`` (transactions). Offsets, timestamps (epoch milliseconds) and sizes are BIGINT; topic ids UUID.
"""

from __future__ import annotations

from datetime import UTC, datetime

from shoal.coordinator.api import BatchInfo, BatchMetadata, TopicIdPartition
from shoal.records.types import TimestampType

#: The ``schema_versions`` component of these tables (the same name as in the SQLite backend).
COMPONENT = "diskless_coordinator"

# Design notes (see the SQLite schema for the shared ones):
# - Locking: every write transaction that touches partitions first locks their diskless_logs
#   rows with ``ORDER BY log_id FOR UPDATE`` (``logs.lock_logs``), and only then touches
#   batches and producer state of those logs; objects' rows are locked afterwards, in file_id
#   order. Two brokers committing at once therefore queue per partition and never deadlock.
# - batch_id is an identity column: never reused, and inside a partition it grows with
#   offsets (batches of a partition are inserted under its log lock, in offset order).
# - No FOREIGN KEY from batches to logs or files: a foreign key would take a share lock on
#   the referenced rows for every inserted batch; the deletion paths keep the references
#   right themselves, as in the SQLite backend.
# - There is no index of batches by object (it would cost every commit): the compaction and
#   inspection queries that look batches up by object scan the table, as in SQLite.
MIGRATIONS = [
    """
CREATE TABLE diskless_logs (
    log_id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    topic_id UUID NOT NULL,
    partition INTEGER NOT NULL,
    topic_name TEXT NOT NULL,
    log_start_offset BIGINT NOT NULL DEFAULT 0,
    high_watermark BIGINT NOT NULL DEFAULT 0,
    byte_size BIGINT NOT NULL DEFAULT 0,
    max_timestamp BIGINT NOT NULL DEFAULT -1,
    UNIQUE (topic_id, partition)
);
CREATE TABLE diskless_files (
    file_id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    object_key TEXT NOT NULL UNIQUE,
    uploader_broker_id INTEGER NOT NULL,
    committed_at BIGINT NOT NULL,
    size BIGINT NOT NULL,
    used_size BIGINT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('uploaded', 'deleting')),
    marked_for_deletion_at BIGINT
);
CREATE INDEX diskless_files_deleting ON diskless_files (marked_for_deletion_at, file_id)
    WHERE state = 'deleting';
CREATE TABLE diskless_batches (
    log_id BIGINT NOT NULL,
    last_offset BIGINT NOT NULL,
    batch_id BIGINT GENERATED ALWAYS AS IDENTITY,
    base_offset BIGINT NOT NULL,
    file_id BIGINT NOT NULL,
    byte_offset BIGINT NOT NULL,
    byte_size BIGINT NOT NULL,
    log_append_time BIGINT NOT NULL,
    batch_max_timestamp BIGINT NOT NULL,
    timestamp_type SMALLINT NOT NULL,
    producer_id BIGINT NOT NULL,
    producer_epoch INTEGER NOT NULL,
    base_sequence INTEGER NOT NULL,
    last_sequence INTEGER NOT NULL,
    max_ts_so_far BIGINT NOT NULL,
    PRIMARY KEY (log_id, last_offset)
);
CREATE INDEX diskless_batches_by_time ON diskless_batches (log_id, max_ts_so_far);
CREATE TABLE diskless_producer_state (
    log_id BIGINT NOT NULL,
    producer_id BIGINT NOT NULL,
    row_id BIGINT NOT NULL,
    producer_epoch INTEGER NOT NULL,
    base_sequence INTEGER NOT NULL,
    last_sequence INTEGER NOT NULL,
    assigned_offset BIGINT NOT NULL,
    log_append_time BIGINT NOT NULL,
    PRIMARY KEY (log_id, producer_id, row_id)
);
CREATE TABLE diskless_file_deleted_topics (
    file_id BIGINT NOT NULL,
    topic_id UUID NOT NULL,
    PRIMARY KEY (file_id, topic_id)
);
CREATE INDEX diskless_file_deleted_topics_by_topic ON diskless_file_deleted_topics (topic_id)
""",
    # Transactions on diskless partitions, as in the SQLite backend (see its schema and
    # ``shoal.coordinator.transactions``): batch attributes, per (partition, producer) epochs and
    # the ongoing transaction (NULL: none), the aborted transactions keyed by their marker.
    """
ALTER TABLE diskless_batches ADD COLUMN is_transactional BOOLEAN NOT NULL DEFAULT FALSE;
ALTER TABLE diskless_batches ADD COLUMN is_control BOOLEAN NOT NULL DEFAULT FALSE;
CREATE TABLE diskless_producer_txns (
    log_id BIGINT NOT NULL,
    producer_id BIGINT NOT NULL,
    producer_epoch INTEGER NOT NULL,
    coordinator_epoch INTEGER NOT NULL,
    txn_first_offset BIGINT,
    PRIMARY KEY (log_id, producer_id)
);
CREATE INDEX diskless_producer_txns_ongoing ON diskless_producer_txns (log_id, txn_first_offset)
    WHERE txn_first_offset IS NOT NULL;
CREATE TABLE diskless_aborted_txns (
    log_id BIGINT NOT NULL,
    last_offset BIGINT NOT NULL,
    producer_id BIGINT NOT NULL,
    first_offset BIGINT NOT NULL,
    last_stable_offset BIGINT NOT NULL,
    PRIMARY KEY (log_id, last_offset)
)
""",
    # Log compaction (cleanup.policy=compact): each partition's cleaner checkpoint, the offset below
    # which its batches were cleaned (Kafka's cleaner-offset-checkpoint); 0: never cleaned. Offsets
    # below it that no batch covers are compacted records, not tiered ones (find_batches).
    """
ALTER TABLE diskless_logs ADD COLUMN cleaned_offset BIGINT NOT NULL DEFAULT 0
""",
]

#: ``diskless_batches.timestamp_type`` (the int of the TimestampType) back to the enum.
TIMESTAMP_TYPES = (TimestampType.CREATE_TIME, TimestampType.LOG_APPEND_TIME)

#: The timestamp a batch is found by (ListOffsets): its append time under LogAppendTime.
EFFECTIVE_TS = "CASE WHEN timestamp_type = 1 THEN log_append_time ELSE batch_max_timestamp END"

#: The columns of a batch that make a ``BatchMetadata`` (after the partition), in its field order.
BATCH_COLUMNS = (
    "b.byte_offset, b.byte_size, b.base_offset, b.last_offset, b.log_append_time, b.batch_max_timestamp, "
    "b.timestamp_type, b.producer_id, b.producer_epoch, b.base_sequence, b.last_sequence, "
    "b.is_transactional, b.is_control"
)


def utc(ms: int) -> datetime:
    """A stored epoch-milliseconds time as an aware UTC datetime."""
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


def object_batch(r: tuple) -> BatchInfo:
    """A BatchInfo from object_key, topic_id, partition, topic_name, batch_id, then BATCH_COLUMNS."""
    return BatchInfo(
        r[4],
        r[0],
        BatchMetadata(
            TopicIdPartition(r[1], r[2], r[3]),
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
            r[16],
            r[17],
        ),
    )
