"""Reading remote segments: the batches from an offset (Fetch) and the first record at a time
(ListOffsets), through the RemoteStorageManager.

A fetch finds the segment holding the offset (the copied segment with the highest start at or
below it: after a leader change two copies may overlap), reads the segment's offset index
(cached, bounded), and GETs the log from the indexed position: whole batches from the one
holding the offset, up to ``max_bytes`` (at least one batch when asked), as Kafka's
``RemoteLogManager.read`` answers.
"""

from __future__ import annotations

import struct
from collections import OrderedDict

from shoal.records.batch import HEADER_SIZE
from shoal.records.codec import decode_batch, iter_batches
from shoal.tiered.api import IndexType, RemoteLogSegmentMetadata, RemoteStorageManager
from shoal.tiered.segment_lookup import floor_segment, index_position

__all__ = ["RemoteReader", "floor_segment", "index_position"]

#: A GET reads at least this much, so small fetches of one batch do not need a second GET.
_MIN_READ = 64 * 1024


class RemoteReader:
    def __init__(self, rsm: RemoteStorageManager, index_cache_entries: int = 1024) -> None:
        self._rsm = rsm
        self._indexes: OrderedDict[object, bytes] = OrderedDict()
        self._max_indexes = index_cache_entries
        #: Bytes read from remote storage (every GET's, indexes aside).
        self.bytes_fetched = 0
        #: Topic -> record bytes ``read`` returned (Kafka's RemoteFetchBytesPerSec).
        self.fetched_bytes: dict[str, int] = {}
        #: ``read`` calls that raised (Kafka's RemoteFetchErrorsPerSec).
        self.fetch_errors = 0

    async def _index(self, segment: RemoteLogSegmentMetadata) -> bytes:
        key = segment.segment_id.id
        found = self._indexes.get(key)
        if found is not None:
            self._indexes.move_to_end(key)
            return found
        data = await self._rsm.fetch_index(segment, IndexType.OFFSET)
        self._indexes[key] = data
        while len(self._indexes) > self._max_indexes:
            self._indexes.popitem(last=False)
        return data

    async def read(self, segment: RemoteLogSegmentMetadata, offset: int, max_bytes: int, min_one_batch: bool) -> bytes:
        """Whole batches of ``segment`` from the one holding ``offset``, within ``max_bytes``."""
        try:
            out = await self._read(segment, offset, max_bytes, min_one_batch)
        except Exception:
            self.fetch_errors += 1
            raise
        topic = segment.segment_id.topic_id_partition.topic
        self.fetched_bytes[topic] = self.fetched_bytes.get(topic, 0) + len(out)
        return out

    async def _read(self, segment: RemoteLogSegmentMetadata, offset: int, max_bytes: int, min_one_batch: bool) -> bytes:
        position = index_position(await self._index(segment), segment.start_offset, offset)
        out = bytearray()
        want = max(max_bytes, _MIN_READ)
        while position < segment.segment_size_in_bytes and len(out) < max_bytes:
            data = await self._fetch(segment, position, want)
            consumed = 0
            for at, header in iter_batches(data):
                if at + header.size > len(data):
                    break  # cut off by the range: read on from it
                consumed = at + header.size
                if header.last_offset < offset:
                    continue
                if len(out) + header.size > max_bytes and (out or not min_one_batch):
                    return bytes(out)
                out += data[at:consumed]
            if consumed == 0:
                if not data:
                    break
                want = max(want, _batch_size(data))  # a batch bigger than the range: read it whole
                continue
            position += consumed
        return bytes(out)

    async def _fetch(self, segment: RemoteLogSegmentMetadata, position: int, size: int) -> bytes:
        end = min(position + size, segment.segment_size_in_bytes) - 1
        if end < position:
            return b""
        data = await self._rsm.fetch_log_segment(segment, position, end)
        self.bytes_fetched += len(data)
        return data

    async def offset_for_timestamp(self, segment: RemoteLogSegmentMetadata, timestamp: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record of ``segment`` at or after ``timestamp``."""
        data = await self._fetch(segment, 0, segment.segment_size_in_bytes)
        for at, header in iter_batches(data):
            if header.max_timestamp < timestamp:
                continue
            _, records = decode_batch(data[at : at + header.size])
            for r in records:
                if r.timestamp >= timestamp:
                    return r.offset, r.timestamp
        return None


def _batch_size(data: bytes) -> int:
    """The size of the batch ``data`` starts with (a header's worth when even its length is cut off)."""
    if len(data) >= 12:
        (length,) = struct.unpack_from(">i", data, 8)
        return 12 + length
    return HEADER_SIZE
