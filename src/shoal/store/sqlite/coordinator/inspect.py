"""KIP-1163's inspection queries for tools: a topic's overview and one object's batches."""

from __future__ import annotations

import uuid

from shoal.coordinator.api import (
    BatchInfo,
    BatchMetadata,
    ObjectDescription,
    PartitionDescription,
    TopicDescription,
    TopicIdPartition,
)
from shoal.store.sqlite.coordinator.base import CoordinatorBase
from shoal.store.sqlite.coordinator.schema import TIMESTAMP_TYPES, utc


class InspectMixin(CoordinatorBase):
    """describe_topic and describe_object: tools' queries (they scan batches), never on a request path."""

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
                "b.producer_id, b.producer_epoch, b.base_sequence, b.last_sequence, b.is_transactional, b.is_control "
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
                    TIMESTAMP_TYPES[r[10]],
                    r[11],
                    r[12],
                    r[13],
                    r[14],
                    bool(r[15]),
                    bool(r[16]),
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
            committed_at=utc(committed_at),
            marked_for_deletion_at=None if marked_at is None else utc(marked_at),
            batches=batches,
        )
