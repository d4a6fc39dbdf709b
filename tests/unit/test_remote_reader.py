"""Reading remote segments: the segment holding an offset when two leaders' copies overlap, the
offset index lookup, and whole batches from an offset within a byte budget."""

from __future__ import annotations

import struct
import uuid

import pytest

from shoal.records.batch import stamp_batch
from shoal.records.codec import NewRecord, build_batch, iter_batches
from shoal.remote_log.reader import RemoteReader, floor_segment, index_position
from shoal.tiered.api import (
    IndexType,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    TopicIdPartition,
)

TP = TopicIdPartition(uuid.uuid4(), 0, "t")


def segment(start: int, end: int, size: int = 0) -> RemoteLogSegmentMetadata:
    return RemoteLogSegmentMetadata(RemoteLogSegmentId.generate(TP), start, end, 0, 1, 0, size, {0: start},
                                    RemoteLogSegmentState.COPY_SEGMENT_FINISHED)


def test_floor_segment_prefers_the_latest_start() -> None:
    old, new = segment(0, 99), segment(50, 149)
    assert floor_segment([old, new], 60) is new
    assert floor_segment([old, new], 10) is old
    assert floor_segment([old, new], 150) is None


def test_index_position() -> None:
    index = struct.pack(">iiii", 10, 4000, 20, 8000) + b"\0" * 16  # a preallocated tail
    assert index_position(index, 100, 105) == 0
    assert index_position(index, 100, 110) == 4000
    assert index_position(index, 100, 125) == 8000


class FakeRsm:
    def __init__(self, log: bytes) -> None:
        self.log = log
        self.gets: list[tuple[int, int]] = []

    async def fetch_index(self, metadata: RemoteLogSegmentMetadata, index_type: IndexType) -> bytes:
        return b""

    async def fetch_log_segment(self, metadata: RemoteLogSegmentMetadata, start: int, end: int | None = None) -> bytes:
        self.gets.append((start, end if end is not None else -1))
        return self.log[start : (end + 1) if end is not None else None]


async def test_reads_whole_batches_from_the_offset_within_the_budget() -> None:
    log = bytearray()
    for i in range(10):  # ten batches of two records, offsets 100..119
        raw = bytearray(build_batch([NewRecord(None, b"v" * 50, (), 0), NewRecord(None, b"w" * 50, (), 0)]))
        stamp_batch(raw, 0, 100 + 2 * i)
        log += raw
    seg = segment(100, 119, len(log))
    reader = RemoteReader(FakeRsm(bytes(log)))  # type: ignore[arg-type]
    data = await reader.read(seg, 105, 10_000, True)
    bases = [h.base_offset for _, h in iter_batches(data)]
    assert bases == [104, 106, 108, 110, 112, 114, 116, 118]
    one = await reader.read(seg, 105, 10, True)  # a budget below one batch: the first one all the same
    assert [h.base_offset for _, h in iter_batches(one)] == [104]
    assert await reader.read(seg, 105, 10, False) == b""


class FailingRsm(FakeRsm):
    async def fetch_log_segment(self, metadata: RemoteLogSegmentMetadata, start: int, end: int | None = None) -> bytes:
        raise OSError("storage down")


async def test_counts_fetched_bytes_per_topic_and_failed_reads() -> None:
    raw = bytearray(build_batch([NewRecord(None, b"v" * 50, (), 0)]))
    stamp_batch(raw, 0, 100)
    seg = segment(100, 100, len(raw))
    reader = RemoteReader(FakeRsm(bytes(raw)))  # type: ignore[arg-type]
    assert await reader.read(seg, 100, 10_000, True) == bytes(raw)
    assert reader.fetched_bytes == {"t": len(raw)} and reader.fetch_errors == 0
    failing = RemoteReader(FailingRsm(bytes(raw)))  # type: ignore[arg-type]
    with pytest.raises(OSError):
        await failing.read(seg, 100, 10_000, True)
    assert failing.fetch_errors == 1 and failing.fetched_bytes == {}
