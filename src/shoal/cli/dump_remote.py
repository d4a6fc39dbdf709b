"""``shoal dump-log --remote-segment TOPIC:PARTITION:OFFSET``: a tiered segment (KIP-405) dumped
as kafka-dump-log.sh dumps a local one. The segment holding the offset is found in the remote log
metadata (the metadata store) and read through the RemoteStorageManager, so it works on any
object storage (an S3 bucket included) without downloading anything by hand."""

from __future__ import annotations

import asyncio
from pathlib import Path

from shoal.cli.diskless_metadata import MetadataStoreReader, ToolError, UsageError
from shoal.config import Config
from shoal.objects.factory import open_object_storage
from shoal.remote_log.reader import floor_segment
from shoal.store.factory import StoreNotFoundError, object_storage_url, open_remote_log_metadata_manager
from shoal.tiered.api import RemoteLogSegmentMetadata, RemoteLogSegmentState, TopicIdPartition
from shoal.tiered.storage_manager import ObjectRemoteStorageManager


def parse_spec(spec: str) -> tuple[str, int, int]:
    """``TOPIC:PARTITION:OFFSET`` (Kafka's topic names have no colon)."""
    parts = spec.rsplit(":", 2)
    if len(parts) != 3 or not parts[1].isdigit() or not parts[2].isdigit():
        raise UsageError(f"--remote-segment takes TOPIC:PARTITION:OFFSET, not {spec!r}")
    return parts[0], int(parts[1]), int(parts[2])


def fetch_remote_segment(config: Config, spec: str) -> tuple[RemoteLogSegmentMetadata, bytes]:
    """The copied segment holding the offset, and its log file's bytes."""
    topic_name, partition, offset = parse_spec(spec)
    reader = MetadataStoreReader(config)
    try:
        topic = reader.image().topic(topic_name)
    finally:
        reader.close()
    if topic is None or partition not in topic.partitions:
        raise ToolError(f"No partition {topic_name}-{partition} in the metadata store")
    try:
        rlmm = open_remote_log_metadata_manager(config, must_exist=True)
    except StoreNotFoundError as exc:
        raise ToolError(str(exc)) from None
    try:
        tp = TopicIdPartition(topic.topic_id, partition, topic.name)
        finished = [s for s in rlmm.list_remote_log_segments(tp)
                    if s.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED]
    finally:
        rlmm.close()
    segment = floor_segment(finished, offset)
    if segment is None:
        raise ToolError(f"No remote segment of {topic_name}-{partition} holds offset {offset}")

    async def fetch() -> bytes:
        storage = open_object_storage(object_storage_url(config))
        try:
            return await ObjectRemoteStorageManager(storage).fetch_log_segment(segment, 0)
        finally:
            await storage.close()

    return segment, asyncio.run(fetch())


def remote_label(segment: RemoteLogSegmentMetadata) -> Path:
    """A name for the dump's header line, as the segment's log object is named in storage."""
    tp = segment.topic_id_partition
    return Path(f"remote:{tp.topic}-{tp.partition}/{segment.start_offset:020d}-{segment.segment_id.id}.log")
