"""KIP-405's RemoteStorageManager on Shoal's ObjectStorage (local directory, S3, memory, faulty).

Object layout, after Kafka's reference RSMs (Aiven's tiered-storage-for-apache-kafka): one
object per file of a segment, all of them under the segment's *stem*::

    <prefix>/<topic>-<topic id>/<partition>/<start offset, 20 digits>-<segment id>.<suffix>

with Kafka's file suffixes (``log``, ``index``, ``timeindex``, ``snapshot``, ``txnindex``,
``leader-epoch-checkpoint``). Ids are printed as Kafka prints them (url-safe base64 without
padding, as ``kafka-topics --describe`` shows a topic id), so an operator can go from a topic
to its objects. Every key derives from the segment metadata alone: nothing needs listing to
find or delete a segment, and the RSM keeps no state. Hence a key depends on the topic *name*
of ``metadata.topic_id_partition``: whoever stores the metadata must give it back unchanged.

Crash safety: the remote log metadata manager records a segment (COPY_SEGMENT_STARTED) before
its copy and readers only use COPY_SEGMENT_FINISHED segments, so a crash mid-copy leaves
objects that nobody reads and that ``delete_log_segment_data`` removes, since it deletes every
key the segment can have (missing ones are not an error). Beyond that, objects are uploaded
one at a time with the log *last* and deleted with the log *first*, so in the store alone a
log object means a complete segment, and nothing is still uploading when a failed copy returns
(a concurrent upload that outlived its failed sibling could land after the cleanup's delete).
"""

from __future__ import annotations

import base64
import re
import uuid
from pathlib import Path

from shoal.objects.storage import (
    ByteRange,
    ObjectNotFoundError,
    ObjectStorage,
    StorageBackendError,
    validate_key,
)
from shoal.tiered.api import (
    IndexType,
    LogSegmentData,
    RemoteLogSegmentMetadata,
    RemoteResourceNotFoundError,
    RemoteStorageError,
)

__all__ = ["INDEX_SUFFIXES", "LOG_SUFFIX", "ObjectRemoteStorageManager", "kafka_uuid"]

LOG_SUFFIX = "log"
#: Kafka's file suffix (``LogFileUtils`` and friends) of each index type.
INDEX_SUFFIXES: dict[IndexType, str] = {
    IndexType.OFFSET: "index",
    IndexType.TIMESTAMP: "timeindex",
    IndexType.PRODUCER_SNAPSHOT: "snapshot",
    IndexType.TRANSACTION: "txnindex",
    IndexType.LEADER_EPOCH: "leader-epoch-checkpoint",
}

#: Kafka's legal topic characters; anything else (``/`` above all) would change the layout.
_TOPIC = re.compile(r"[A-Za-z0-9._-]*")
#: Size of a range "to the end of the object": every backend clips a range at the object's
#: end (HTTP lets a range's last byte lie past it), so this needs no size lookup.
_TO_END = 1 << 62


def kafka_uuid(value: uuid.UUID) -> str:
    """``value`` as Kafka's ``Uuid.toString`` prints it: url-safe base64 of the 16 bytes, unpadded."""
    return base64.urlsafe_b64encode(value.bytes).rstrip(b"=").decode("ascii")


class ObjectRemoteStorageManager:
    """A ``RemoteStorageManager`` keeping each segment file as one object of ``storage``.

    Memory: the files ``LogSegmentData`` names by path (log, offset and time indexes, transaction
    index, producer snapshot) go through ``ObjectStorage.upload_file``, which streams them in
    bounded chunks (the local backend copies 1 MiB at a time; S3 sends 5 MiB multipart parts, a
    few in flight), so a copy's memory no longer grows with ``segment.bytes`` (1 GiB by default);
    only the in-memory test backend still reads a file whole. The leader-epoch index arrives as
    bytes and is uploaded as such. Fetches return bytes, so callers should ask for bounded ranges.
    """

    def __init__(self, storage: ObjectStorage, prefix: str = "tiered") -> None:
        self._storage = storage
        self._prefix = prefix.strip("/")
        if self._prefix:
            validate_key(self._prefix)

    def __repr__(self) -> str:
        return f"ObjectRemoteStorageManager({self._storage!r}, prefix={self._prefix!r})"

    # ------------------------------------------------------------------ keys

    def segment_stem(self, metadata: RemoteLogSegmentMetadata) -> str:
        """The key of the segment without its ``.<suffix>``; ValueError for an illegal topic name."""
        tp = metadata.topic_id_partition
        if not _TOPIC.fullmatch(tp.topic) or tp.topic in (".", ".."):
            raise ValueError(f"not a legal Kafka topic name: {tp.topic!r}")
        if tp.partition < 0 or metadata.start_offset < 0:
            raise ValueError(f"negative partition or offset in {metadata.segment_id}")
        directory = f"{tp.topic}-{kafka_uuid(tp.topic_id)}/{tp.partition}"
        name = f"{metadata.start_offset:020d}-{kafka_uuid(metadata.segment_id.id)}"
        stem = f"{directory}/{name}"
        return validate_key(f"{self._prefix}/{stem}" if self._prefix else stem)

    def log_key(self, metadata: RemoteLogSegmentMetadata) -> str:
        """The key of the segment's log file."""
        return f"{self.segment_stem(metadata)}.{LOG_SUFFIX}"

    def index_key(self, metadata: RemoteLogSegmentMetadata, index_type: IndexType) -> str:
        """The key of one of the segment's indexes."""
        return f"{self.segment_stem(metadata)}.{INDEX_SUFFIXES[index_type]}"

    def segment_keys(self, metadata: RemoteLogSegmentMetadata) -> list[str]:
        """Every key the segment can have, the log first (the order ``delete`` removes them in)."""
        stem = self.segment_stem(metadata)
        return [f"{stem}.{LOG_SUFFIX}", *(f"{stem}.{suffix}" for suffix in INDEX_SUFFIXES.values())]

    # ------------------------------------------------------------------ RemoteStorageManager

    async def copy_log_segment_data(
        self, metadata: RemoteLogSegmentMetadata, data: LogSegmentData
    ) -> bytes | None:
        """Upload the indexes that exist, then the log; returns None (no custom metadata).

        None because every key derives from the metadata, so there is nothing to remember (and
        Kafka caps custom metadata at 128 bytes by default). An absent transaction index or
        producer snapshot is not uploaded: ``fetch_index`` then reports it missing, which Kafka's
        remote index cache reads as an empty index. On failure (RemoteStorageError, also for a
        local file that cannot be read) some objects may exist; ``delete_log_segment_data``
        removes them. Uploading again under the same metadata replaces the objects.
        """
        files: list[tuple[IndexType, Path | bytes | None]] = [
            (IndexType.OFFSET, data.offset_index),
            (IndexType.TIMESTAMP, data.time_index),
            (IndexType.TRANSACTION, data.transaction_index),
            (IndexType.PRODUCER_SNAPSHOT, data.producer_snapshot_index),
            (IndexType.LEADER_EPOCH, data.leader_epoch_index),
        ]
        for index_type, source in files:
            if source is not None:
                await self._upload(self.index_key(metadata, index_type), source)
        await self._upload(self.log_key(metadata), data.log_segment)
        return None

    async def fetch_log_segment(
        self, metadata: RemoteLogSegmentMetadata, start: int, end: int | None = None
    ) -> bytes:
        """Bytes ``[start, end]`` of the log (``end`` inclusive, None: to the end), clipped at its
        end like any object read; RemoteResourceNotFoundError when the segment is not there."""
        if start < 0 or (end is not None and end < start):
            raise ValueError(f"invalid segment byte range [{start}, {end}]")
        if end is None:
            byte_range = None if start == 0 else ByteRange(start, _TO_END)
        else:
            byte_range = ByteRange(start, end - start + 1)
        return await self._fetch(self.log_key(metadata), byte_range, metadata)

    async def fetch_index(self, metadata: RemoteLogSegmentMetadata, index_type: IndexType) -> bytes:
        """The whole index object; RemoteResourceNotFoundError when the segment has none of that type."""
        return await self._fetch(self.index_key(metadata, index_type), None, metadata)

    async def delete_log_segment_data(self, metadata: RemoteLogSegmentMetadata) -> None:
        """Delete every key the segment can have, the log first, without listing (idempotent).

        Two requests rather than one so that the log, whose presence marks a complete copy, never
        outlives an index when the second one fails; a retry finishes the job.
        """
        log_key, *index_keys = self.segment_keys(metadata)
        try:
            await self._storage.delete([log_key])
            await self._storage.delete(index_keys)
        except StorageBackendError as e:
            raise RemoteStorageError(f"cannot delete remote segment {self._describe(metadata)}: {e}") from e

    # ------------------------------------------------------------------ helpers

    async def _upload(self, key: str, source: Path | bytes) -> None:
        """Stream a local file (``upload_file``) or upload in-memory content to ``key``."""
        try:
            if isinstance(source, Path):
                await self._storage.upload_file(key, source)
            else:
                await self._storage.upload(key, source)
        except OSError as e:  # upload_file could not open the local file: nothing was stored
            raise RemoteStorageError(f"cannot read {source} to copy it to {key}: {e}") from e
        except StorageBackendError as e:
            raise RemoteStorageError(f"cannot upload {key}: {e}") from e

    async def _fetch(
        self, key: str, byte_range: ByteRange | None, metadata: RemoteLogSegmentMetadata
    ) -> bytes:
        try:
            return await self._storage.fetch(key, byte_range)
        except ObjectNotFoundError as e:
            raise RemoteResourceNotFoundError(
                f"{key} of remote segment {self._describe(metadata)} not found"
            ) from e
        except StorageBackendError as e:
            raise RemoteStorageError(f"cannot fetch {key}: {e}") from e

    @staticmethod
    def _describe(metadata: RemoteLogSegmentMetadata) -> str:
        tp = metadata.topic_id_partition
        offsets = f"offsets {metadata.start_offset}-{metadata.end_offset}"
        return f"{tp.topic}-{tp.partition} {metadata.segment_id.id} ({offsets})"
