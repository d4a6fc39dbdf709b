"""KIP-1163's inspection queries for tools: a topic's overview and one object's batches."""

from __future__ import annotations

import uuid

import psycopg

from shoal.coordinator.api import ObjectDescription, PartitionDescription, TopicDescription
from shoal.store.postgres.coordinator.base import CoordinatorBase
from shoal.store.postgres.coordinator.schema import BATCH_COLUMNS, object_batch, utc

_TOPIC_LOGS_SQL = """
SELECT partition, topic_name, log_start_offset, high_watermark, byte_size
FROM diskless_logs WHERE topic_id = %s ORDER BY partition
"""

_TOPIC_OBJECTS_SQL = """
SELECT COUNT(*), COALESCE(SUM(size), 0)::bigint FROM diskless_files WHERE file_id IN (
    SELECT b.file_id FROM diskless_batches AS b JOIN diskless_logs AS l ON l.log_id = b.log_id
    WHERE l.topic_id = %s
)
"""

_TOPIC_DELETED_OBJECTS_SQL = """
SELECT COUNT(*), COALESCE(SUM(f.size), 0)::bigint FROM diskless_file_deleted_topics AS d
JOIN diskless_files AS f ON f.file_id = d.file_id
WHERE d.topic_id = %s AND f.state = 'deleting'
"""

_OBJECT_SQL = """
SELECT file_id, size, used_size, state, uploader_broker_id, committed_at, marked_for_deletion_at
FROM diskless_files WHERE object_key = %s
"""

_OBJECT_BATCHES_SQL = f"""
SELECT f.object_key, l.topic_id, l.partition, l.topic_name, b.batch_id, {BATCH_COLUMNS}
FROM diskless_files AS f
JOIN diskless_batches AS b ON b.file_id = f.file_id
JOIN diskless_logs AS l ON l.log_id = b.log_id
WHERE f.object_key = %s
ORDER BY b.byte_offset
"""


class InspectMixin(CoordinatorBase):
    """describe_topic and describe_object: tools' queries (they scan batches), never on a request path."""

    def describe_topic(self, topic_id: uuid.UUID) -> TopicDescription | None:
        """KIP-1163's topic overview, from one snapshot; None when nothing is known of the topic.

        Reads every live batch of the topic to find its objects: a tool's query, not
        one for a request path. A deleted topic is still described (with no partition)
        while objects it emptied wait for physical deletion.
        """

        def work(conn: psycopg.Connection) -> tuple[list[tuple], tuple, tuple]:
            logs = conn.execute(_TOPIC_LOGS_SQL, (topic_id,))
            objects = conn.execute(_TOPIC_OBJECTS_SQL, (topic_id,))
            deleted = conn.execute(_TOPIC_DELETED_OBJECTS_SQL, (topic_id,))
            return logs.fetchall(), objects.fetchone(), deleted.fetchone()  # type: ignore[return-value]

        logs, (object_count, object_bytes), (deleted_count, deleted_bytes) = self._read(
            "describe_topic", work, snapshot=True
        )
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

        def work(conn: psycopg.Connection) -> tuple[tuple | None, list[tuple]]:
            row = conn.execute(_OBJECT_SQL, (object_key,))
            batches = conn.execute(_OBJECT_BATCHES_SQL, (object_key,))
            return row.fetchone(), batches.fetchall()

        row, batch_rows = self._read("describe_object", work, snapshot=True)
        if row is None:
            return None
        _, size, used_size, state, uploader, committed_at, marked_at = row
        return ObjectDescription(
            object_key=object_key,
            size=size,
            used_size=used_size,
            state=state,
            uploader_broker_id=uploader,
            committed_at=utc(committed_at),
            marked_for_deletion_at=None if marked_at is None else utc(marked_at),
            batches=[object_batch(r) for r in batch_rows],
        )
