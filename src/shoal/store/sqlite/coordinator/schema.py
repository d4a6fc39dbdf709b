"""The Batch Coordinator's tables, and the constants and SQL several of its parts share.

The tables follow Inkless's PostgreSQL schema: ``logs`` (one row per partition),
``files`` (one row per uploaded object), ``batches`` (the coordinates of every live
batch) and ``producer_state`` (the last 5 batches of every idempotent producer); transactions
add ``producer_txns`` (per partition and producer: epochs, ongoing transaction) and
``aborted_txns`` (see ``shoal.coordinator.transactions`` for why they are split so).
Tables are prefixed ``diskless_`` because the same database file also holds the
cluster metadata log.
"""

from __future__ import annotations

from datetime import UTC, datetime

from shoal.records.types import TimestampType

#: The ``schema_versions`` component of these tables: existing database files record it, keep it.
COMPONENT = "diskless_coordinator"

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
MIGRATIONS = [
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
    # Transactions on diskless partitions (``shoal.coordinator.transactions``): each batch's
    # transactional and control attributes; per (partition, producer) the epoch its last
    # transactional event left, the coordinator epoch of its last marker and the first offset of
    # its ongoing transaction (NULL: none; the partial index finds the ongoing ones for the LSO);
    # the aborted transactions (Kafka's .txnindex), clustered on the marker's offset as a
    # READ_COMMITTED fetch reads them, with the LSO right after the marker that bounds that read.
    """
ALTER TABLE diskless_batches ADD COLUMN is_transactional INTEGER NOT NULL DEFAULT 0;
ALTER TABLE diskless_batches ADD COLUMN is_control INTEGER NOT NULL DEFAULT 0;
CREATE TABLE diskless_producer_txns (
    log_id INTEGER NOT NULL,
    producer_id INTEGER NOT NULL,
    producer_epoch INTEGER NOT NULL,
    coordinator_epoch INTEGER NOT NULL,
    txn_first_offset INTEGER,
    PRIMARY KEY (log_id, producer_id)
) WITHOUT ROWID;
CREATE INDEX diskless_producer_txns_ongoing ON diskless_producer_txns (log_id, txn_first_offset)
    WHERE txn_first_offset IS NOT NULL;
CREATE TABLE diskless_aborted_txns (
    log_id INTEGER NOT NULL,
    last_offset INTEGER NOT NULL,
    producer_id INTEGER NOT NULL,
    first_offset INTEGER NOT NULL,
    last_stable_offset INTEGER NOT NULL,
    PRIMARY KEY (log_id, last_offset)
) WITHOUT ROWID
""",
    # Log compaction (cleanup.policy=compact): each partition's cleaner checkpoint, the offset below
    # which its batches were cleaned (Kafka's cleaner-offset-checkpoint); 0: never cleaned. Offsets
    # below it that no batch covers are compacted records, not tiered ones (find_batches).
    """
ALTER TABLE diskless_logs ADD COLUMN cleaned_offset INTEGER NOT NULL DEFAULT 0
""",
]

#: ``diskless_batches.timestamp_type`` (the int of the TimestampType) back to the enum.
TIMESTAMP_TYPES = (TimestampType.CREATE_TIME, TimestampType.LOG_APPEND_TIME)

# An object loses ?1 used bytes; at zero it is marked for deletion (kept marked if it already was).
SHRINK_FILE_SQL = (
    "UPDATE diskless_files SET used_size = used_size - ?1, "
    "state = CASE WHEN used_size - ?1 <= 0 THEN 'deleting' ELSE state END, "
    "marked_for_deletion_at = CASE WHEN used_size - ?1 <= 0 "
    "THEN COALESCE(marked_for_deletion_at, ?2) ELSE marked_for_deletion_at END "
    "WHERE file_id = ?3"
)

# Remember that the topic of log ?2 left bytes in object ?1 (for the topic overview of
# the objects it leaves waiting for deletion): (file_id, log_id) parameters.
RECORD_DELETED_TOPIC_SQL = (
    "INSERT OR IGNORE INTO diskless_file_deleted_topics (file_id, topic_id) "
    "SELECT ?, topic_id FROM diskless_logs WHERE log_id = ?"
)


def utc(ms: int) -> datetime:
    """A stored epoch-milliseconds time as an aware UTC datetime."""
    return datetime.fromtimestamp(ms / 1000, tz=UTC)
