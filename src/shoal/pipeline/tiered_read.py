"""Read offsets of diskless partitions that moved to tiered storage (KIP-1163), straight from
object storage, as ``storage_read`` reads WAL objects (no broker involved).

Once the partition leader copied a segment built from the coordinator's batches, the coordinator
deletes those batches and ``find_batches`` answers OFFSET_MOVED_TO_TIERED_STORAGE below the first
batch left. The remote log metadata (RLMM) then says which segment holds an offset: the
COPY_SEGMENT_FINISHED one with the highest start offset (after a leader change two copies may
overlap), as the broker's ``remote_log.reader`` picks it (``tiered.segment_lookup``). The segment's log is read through the RemoteStorageManager
from the position its offset index gives, in GETs of at most ``chunk_bytes`` (segments are 1 GiB
by default), the next GET running while the current chunk decodes; a batch cut by a chunk's end
is completed by the next one. Segment batches already carry their real offsets and timestamps,
so only their CRC is checked before decoding. Control batches give no rows, and a
``read_committed`` read drops the batches of aborted transactions whole by their headers, with the
coordinator's aborted list: it keeps aborted transactions until the log start passes their
marker, tiered offsets included (``isolation.BatchFilter``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

from crc32c import crc32c

from shoal.config import Config
from shoal.pipeline.isolation import CONTROL_ONLY, BatchFilter
from shoal.pipeline.stored_batches import StoredBatch, stored_batch
from shoal.pipeline.stores import open_remote_log_metadata
from shoal.protocol.errors import ErrorCode, KafkaError
from shoal.records.batch import ATTRIBUTES_OFFSET, BatchHeader
from shoal.records.codec import iter_batches
from shoal.tiered.api import (
    IndexType,
    RemoteLogMetadataManager,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    RemoteResourceNotFoundError,
    RemoteStorageManager,
    TopicIdPartition,
)
from shoal.tiered.segment_lookup import floor_segment, index_position

__all__ = ["RemoteSegments", "SegmentReader", "floor_segment", "index_position"]

_T = TypeVar("_T")


class RemoteSegments:
    """The finished remote segments of partitions, from the RLMM opened on first use (reads of
    topics never tiered do not touch it), listed once per partition and listed again when no
    listed segment holds an offset (a copy may have finished since)."""

    def __init__(self, store: Config) -> None:
        self._store = store
        self._rlmm: RemoteLogMetadataManager | None = None
        self._listed: dict[TopicIdPartition, list[RemoteLogSegmentMetadata]] = {}

    def finished(self, tp: TopicIdPartition, *, fresh: bool = False) -> list[RemoteLogSegmentMetadata]:
        """COPY_SEGMENT_FINISHED segments of ``tp`` by start offset."""
        if fresh or tp not in self._listed:
            if self._rlmm is None:
                self._rlmm = open_remote_log_metadata(self._store)
            segments = self._rlmm.list_remote_log_segments(tp)
            done = RemoteLogSegmentState.COPY_SEGMENT_FINISHED
            self._listed[tp] = sorted((s for s in segments if s.state == done), key=lambda s: s.start_offset)
        return self._listed[tp]

    def holding(self, tp: TopicIdPartition, offset: int) -> RemoteLogSegmentMetadata | None:
        """The segment to read ``offset`` from (``floor_segment``), None when none holds it."""
        found = floor_segment(self.finished(tp), offset)
        return found if found is not None else floor_segment(self.finished(tp, fresh=True), offset)

    def close(self) -> None:
        if self._rlmm is not None:
            self._rlmm.close()
            self._rlmm = None


def _describe(segment: RemoteLogSegmentMetadata) -> str:
    tp = segment.topic_id_partition
    offsets = f"{segment.start_offset}..{segment.end_offset}"
    return f"remote segment {segment.segment_id.id} of {tp.topic}-{tp.partition} ({offsets})"


class SegmentReader:
    """Reads records out of remote segments in bounded chunks.

    RSM calls are coroutines; each runs with ``asyncio.run`` on ``pool`` (the caller's prefetch
    thread), so the caller's thread decodes while the next GET is in flight. ``stats`` counts
    GETs, bytes and batches into the caller's counters.
    """

    def __init__(
        self, rsm: RemoteStorageManager, pool: ThreadPoolExecutor, chunk_bytes: int, stats: dict[str, int]
    ) -> None:
        self._rsm = rsm
        self._pool = pool
        self._chunk_bytes = max(1, chunk_bytes)
        self.stats = stats

    def _submit(self, call: Callable[..., Coroutine[Any, Any, _T]], *args: Any) -> Future[_T]:
        """Run ``call(*args)`` on the pool; the coroutine is made there, so a GET cancelled before
        it starts leaves no coroutine behind."""
        return self._pool.submit(lambda: asyncio.run(call(*args)))

    def start_position(self, segment: RemoteLogSegmentMetadata, offset: int) -> int:
        """Where to start reading for ``offset``: from the offset index, or the segment's start
        when it has none (only an optimisation: batches below the offset are skipped anyway)."""
        if offset <= segment.start_offset:
            return 0
        try:
            index = self._submit(self._rsm.fetch_index, segment, IndexType.OFFSET).result()
        except RemoteResourceNotFoundError:
            return 0
        self.stats["gets"] += 1
        position = index_position(index, segment.start_offset, offset)
        return position if 0 <= position < segment.segment_size_in_bytes else 0

    def _get(self, segment: RemoteLogSegmentMetadata, position: int) -> Future[bytes] | None:
        end = min(position + self._chunk_bytes, segment.segment_size_in_bytes)
        if end <= position:
            return None
        return self._submit(self._rsm.fetch_log_segment, segment, position, end - 1)

    def read(
        self, segment: RemoteLogSegmentMetadata, offset: int, end: int, keep: BatchFilter = CONTROL_ONLY
    ) -> Iterator[tuple[list[StoredBatch], int]]:
        """The batches of ``segment`` with records ``offset <= o < end``, chunk by chunk, each with the
        offset after the chunk's last whole batch (how far the read got). Batches ``keep`` drops
        (control batches at least) give none. RemoteResourceNotFoundError when the segment is gone
        (retention)."""
        position = self.start_position(segment, offset)
        pending = self._get(segment, position)
        carry = b""  # the start of a batch the previous chunk cut off
        reached = offset
        try:
            while pending is not None:
                data = pending.result()
                got = len(data)
                self.stats["gets"] += 1
                self.stats["bytes"] += got
                asked = min(self._chunk_bytes, segment.segment_size_in_bytes - position)
                buf_position = position - len(carry)
                buf = carry + data if carry else data
                del data  # at most this chunk, the next one in flight and a cut batch are held
                position += got
                batches, consumed, done = self._whole_batches(buf, offset, end)
                if batches:
                    reached = batches[-1][1].last_offset + 1
                carry = buf[consumed:]
                # A short answer is the object's end (an object read is clipped there).
                last = done or got < asked or position >= segment.segment_size_in_bytes
                pending = None if last else self._get(segment, position)
                if last and not done and carry:
                    raise KafkaError(
                        ErrorCode.corrupt_message,
                        f"{_describe(segment)} ends in a partial batch at position {buf_position + consumed}",
                    )
                yield self._checked(segment, buf, buf_position, batches, offset, end, keep), reached
        finally:
            if pending is not None:
                pending.cancel()

    @staticmethod
    def _whole_batches(
        buf: bytes, offset: int, end: int
    ) -> tuple[list[tuple[int, BatchHeader]], int, bool]:
        """(the whole batches of ``buf`` holding offsets in [offset, end), bytes of whole batches
        looked at, whether the range is done)."""
        batches: list[tuple[int, BatchHeader]] = []
        consumed = 0
        for at, header in iter_batches(buf):
            if header.base_offset >= end:
                return batches, consumed, True
            consumed = at + header.size
            if header.last_offset >= offset:
                batches.append((at, header))
            if header.last_offset >= end - 1:
                return batches, consumed, True
        return batches, consumed, False

    def _checked(
        self,
        segment: RemoteLogSegmentMetadata,
        buf: bytes,
        buf_position: int,
        batches: list[tuple[int, BatchHeader]],
        offset: int,
        end: int,
        keep: BatchFilter,
    ) -> list[StoredBatch]:
        view = memoryview(buf)
        out: list[StoredBatch] = []
        for at, header in batches:
            computed = crc32c(view[at + ATTRIBUTES_OFFSET : at + header.size])
            if computed != header.crc:
                raise KafkaError(
                    ErrorCode.corrupt_message,
                    f"batch at position {buf_position + at} of {_describe(segment)}: CRC {header.crc} "
                    f"does not match {computed}",
                )
            self.stats["batches"] += 1
            if not keep.keeps_header(header):  # a marker, or a batch of an aborted transaction
                continue
            out.append(stored_batch(view, at, offset, end))
        return out
