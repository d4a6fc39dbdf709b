"""Cut the offset ranges of a read into Spark input partitions (one task each).

Diskless partitions are cut by size: the Batch Coordinator knows every batch's byte size, so
the driver walks the range in steps of at most ``max_partition_bytes`` of batches (one
indexed query per step, never loading the whole partition's batch list) and cuts at batch
boundaries. A single batch larger than the limit still makes one task. ``minPartitions``
then splits the ranges with the most offsets in halves until there are enough, as Spark's
Kafka source divides big ranges. Ranges read through the brokers have no sizes, so only
``minPartitions`` splits them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from shoal.config import Config
from shoal.coordinator.api import BatchCoordinator, FindBatchRequest, TopicIdPartition
from shoal.pipeline.options import TopicPartition
from shoal.pipeline.stores import open_coordinator
from shoal.pipeline.topics import STORAGE, PartitionSource
from shoal.protocol.errors import ErrorCode

__all__ = ["ReadRange", "plan_ranges"]


@dataclass(frozen=True, slots=True)
class ReadRange:
    """Offsets ``[start, end)`` of one topic-partition for one task; ``size`` is the planned bytes (-1 unknown)."""

    source: PartitionSource
    start: int
    end: int
    size: int = -1


def _split_by_size(coordinator: BatchCoordinator, rng: ReadRange, max_bytes: int) -> list[ReadRange]:
    src = rng.source
    tip = TopicIdPartition(src.topic_uuid(), src.partition, src.topic)
    pieces: list[ReadRange] = []
    offset = rng.start
    while offset < rng.end:
        (resp,) = coordinator.find_batches([FindBatchRequest(tip, offset, max_bytes)], max_bytes)
        if resp.errors != ErrorCode.none or not resp.batches:
            # Out of range or gone: one task finds out and applies failOnDataLoss.
            pieces.append(replace(rng, start=offset))
            break
        batches = [b for b in resp.batches if b.metadata.base_offset < rng.end]
        size = sum(b.metadata.byte_size for b in batches)
        cut = batches[-1].metadata.last_offset + 1
        if cut >= rng.end:
            pieces.append(ReadRange(src, offset, rng.end, size))
            break
        pieces.append(ReadRange(src, offset, cut, size))
        offset = cut
    return pieces


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
        try:
            sized: list[ReadRange] = []
            for r in ranges:
                sized.extend(
                    _split_by_size(coordinator, r, max_partition_bytes) if r.source.via == STORAGE else [r]
                )
            ranges = sized
        finally:
            coordinator.close()
    if min_partitions:
        ranges = _split_for_min(ranges, min_partitions)
    return sorted(ranges, key=lambda r: (r.source.topic, r.source.partition, r.start))
