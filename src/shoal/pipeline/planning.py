"""Cut the offset ranges of a read into Spark input partitions (one task each).

Diskless partitions are cut by size: the Batch Coordinator knows every batch's byte size, so
the driver walks the range in steps of at most ``max_partition_bytes`` of batches (one
indexed query per step, never loading the whole partition's batch list) and cuts at batch
boundaries. A single batch larger than the limit still makes one task.

Offsets of a tiered diskless topic whose batches went to tiered storage (the coordinator
answers OFFSET_MOVED_TO_TIERED_STORAGE) are cut by the remote segments the RLMM lists:
consecutive segments share a task up to the limit, and a bigger segment is cut into equal
offset spans (its bytes per offset estimate their sizes; a cut inside a batch costs the two
tasks one decode each, never a record twice). Pieces next to each other merge while they fit.

``minPartitions`` then splits the ranges with the most offsets in halves until there are
enough, as Spark's Kafka source divides big ranges. Ranges read through the brokers have no
sizes, so only ``minPartitions`` splits them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from itertools import pairwise

from shoal.config import Config
from shoal.coordinator.api import BatchCoordinator, FindBatchRequest, TopicIdPartition
from shoal.pipeline.options import TopicPartition
from shoal.pipeline.stores import open_coordinator
from shoal.pipeline.tiered_read import RemoteSegments
from shoal.pipeline.topics import STORAGE, PartitionSource
from shoal.protocol.errors import ErrorCode
from shoal.tiered.api import RemoteLogSegmentMetadata
from shoal.tiered.api import TopicIdPartition as RemotePartition

__all__ = ["ReadRange", "plan_ranges"]


@dataclass(frozen=True, slots=True)
class ReadRange:
    """Offsets ``[start, end)`` of one topic-partition for one task; ``size`` is the planned bytes (-1 unknown)."""

    source: PartitionSource
    start: int
    end: int
    size: int = -1


class _Pieces:
    """Contiguous pieces of one range, each merged into the previous while both fit ``max_bytes``."""

    def __init__(self, source: PartitionSource, max_bytes: int) -> None:
        self._source = source
        self._max_bytes = max_bytes
        self.out: list[ReadRange] = []

    def add(self, start: int, end: int, size: int) -> None:
        last = self.out[-1] if self.out else None
        if last is not None and last.end == start and last.size >= 0 and last.size + size <= self._max_bytes:
            self.out[-1] = replace(last, end=end, size=last.size + size)
        else:
            self.out.append(ReadRange(self._source, start, end, size))


def _segment_pieces(
    segment: RemoteLogSegmentMetadata, start: int, end: int, max_bytes: int
) -> list[tuple[int, int, int]]:
    """``[start, end)`` of a remote segment as (start, end, estimated bytes) spans of at most
    ``max_bytes`` each, by the segment's average bytes per offset."""
    offsets = max(1, segment.end_offset - segment.start_offset + 1)
    size = segment.segment_size_in_bytes * (end - start) // offsets
    count = max(1, min(end - start, -(-size // max_bytes)))
    cuts = [start + (end - start) * i // count for i in range(count + 1)]
    return [(a, b, size * (b - a) // (end - start)) for a, b in pairwise(cuts)]


def _split_by_size(
    coordinator: BatchCoordinator, remote: RemoteSegments, rng: ReadRange, max_bytes: int
) -> list[ReadRange]:
    src = rng.source
    tip = TopicIdPartition(src.topic_uuid(), src.partition, src.topic)
    pieces = _Pieces(src, max_bytes)
    offset = rng.start
    while offset < rng.end:
        (resp,) = coordinator.find_batches([FindBatchRequest(tip, offset, max_bytes)], max_bytes)
        if resp.errors == ErrorCode.offset_moved_to_tiered_storage:
            segment = remote.holding(RemotePartition(tip.topic_id, tip.partition, src.topic), offset)
            if segment is not None:
                cut = min(rng.end, segment.end_offset + 1)
                for start, end, size in _segment_pieces(segment, offset, cut, max_bytes):
                    pieces.add(start, end, size)
                offset = cut
                continue
        if resp.errors != ErrorCode.none or not resp.batches:
            # Out of range or gone: one task finds out and applies failOnDataLoss.
            pieces.out.append(replace(rng, start=offset))
            break
        batches = [b for b in resp.batches if b.metadata.base_offset < rng.end]
        size = sum(b.metadata.byte_size for b in batches)
        cut = min(rng.end, batches[-1].metadata.last_offset + 1)
        pieces.add(offset, cut, size)
        offset = cut
    return pieces.out


def _split_for_min(ranges: list[ReadRange], min_partitions: int) -> list[ReadRange]:
    out = list(ranges)
    while len(out) < min_partitions:
        i = max(range(len(out)), key=lambda j: out[j].end - out[j].start, default=-1)
        if i < 0 or out[i].end - out[i].start < 2:
            break
        r = out[i]
        middle = r.start + (r.end - r.start) // 2
        half = -1 if r.size < 0 else r.size // 2
        out[i : i + 1] = [replace(r, end=middle, size=half), replace(r, start=middle, size=half)]
    return out


def plan_ranges(
    partitions: list[PartitionSource],
    starts: Mapping[TopicPartition, int],
    ends: Mapping[TopicPartition, int],
    *,
    store: Config | None,
    max_partition_bytes: int,
    min_partitions: int | None,
) -> list[ReadRange]:
    """Input ranges for every partition with ``start < end``, in (topic, partition, offset) order."""
    ranges = [ReadRange(p, starts[p.tp], ends[p.tp]) for p in partitions if starts[p.tp] < ends[p.tp]]
    if any(r.source.via == STORAGE for r in ranges):
        assert store is not None
        coordinator = open_coordinator(store)
        remote = RemoteSegments(store)  # opened only for offsets in tiered storage
        try:
            sized: list[ReadRange] = []
            for r in ranges:
                sized.extend(
                    _split_by_size(coordinator, remote, r, max_partition_bytes)
                    if r.source.via == STORAGE
                    else [r]
                )
            ranges = sized
        finally:
            try:
                remote.close()
            finally:
                coordinator.close()
    if min_partitions:
        ranges = _split_for_min(ranges, min_partitions)
    return sorted(ranges, key=lambda r: (r.source.topic, r.source.partition, r.start))
