"""The diskless fetch path of KIP-1163: find -> plan -> get -> stamp.

The coordinator says where each batch lives; neighbouring batches of one object
are read with one ranged GET (through the range cache), and each batch gets its
assigned base offset (and, for LogAppendTime topics, the append time) stamped in
before it goes to the consumer.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from shoal.coordinator.api import (
    BatchCoordinator,
    BatchInfo,
    FindBatchRequest,
    FindBatchResponse,
    TopicIdPartition,
)
from shoal.diskless.cache import RangeCache
from shoal.objects.ranges import Span, coalesce_ranges
from shoal.objects.storage import ByteRange, ObjectStorage
from shoal.observability.metrics import BrokerMetrics
from shoal.protocol.errors import ErrorCode
from shoal.records.batch import stamp_batch
from shoal.records.codec import decode_batch
from shoal.records.types import TimestampType


@dataclass(frozen=True, slots=True)
class PartitionRead:
    error: ErrorCode
    high_watermark: int
    log_start_offset: int
    #: The stamped batches (a bytearray when read: no copy into bytes; never changed after).
    records: bytes | bytearray
    #: The coordinator's last stable offset (-1: unknown).
    last_stable_offset: int = -1
    #: READ_COMMITTED reads: (producer id, first offset) of the aborted transactions overlapping
    #: the records returned.
    aborted_transactions: tuple[tuple[int, int], ...] = ()


def plan_ranges(batches: list[BatchInfo]) -> list[Span]:
    """One ranged GET per run of nearby batches in each object."""
    return coalesce_ranges(b.byte_range for b in batches)


@dataclass(slots=True)
class Located:
    """Batches found and fetched for a read, not yet copied out: ``records`` is pure (any thread
    may call it), so a cache fill copies and appends in one worker-thread hop."""

    found: list[FindBatchResponse]
    #: The bytes of each span read (range-cache views).
    fetched: dict[Span, bytes | memoryview]
    spans_by_key: dict[str, list[Span]] = field(init=False)

    def __post_init__(self) -> None:
        self.spans_by_key = {}
        for span in self.fetched:
            self.spans_by_key.setdefault(span.key, []).append(span)

    def records(self, index: int) -> bytearray:
        """Request ``index``'s batches copied out and stamped with their offsets (and append
        times for LogAppendTime topics)."""
        out = bytearray()
        for batch in self.found[index].batches:
            m = batch.metadata
            span = next(
                s for s in self.spans_by_key[batch.object_key]
                if s.start <= m.byte_offset and m.byte_offset + m.byte_size <= s.end
            )
            position = len(out)
            out += self.fetched[span][m.byte_offset - span.start : m.byte_offset - span.start + m.byte_size]
            stamp_batch(
                out,
                position,
                m.base_offset,
                0,
                m.log_append_timestamp if m.timestamp_type == TimestampType.LOG_APPEND_TIME else None,
            )
        return out

    def result(self, index: int) -> PartitionRead:
        response = self.found[index]
        if response.errors != ErrorCode.none:
            return PartitionRead(response.errors, response.high_watermark, response.log_start_offset, b"",
                                 response.last_stable_offset)
        return PartitionRead(
            ErrorCode.none, response.high_watermark, response.log_start_offset, self.records(index),
            response.last_stable_offset, tuple(response.aborted_transactions),
        )


class DisklessReader:
    """Serves Fetch for diskless partitions straight from object storage."""

    def __init__(
        self,
        storage: ObjectStorage,
        coordinator: BatchCoordinator,
        run_blocking: Callable[..., Awaitable],
        cache: RangeCache,
        metrics: BrokerMetrics,
    ) -> None:
        self._storage = storage
        self._coordinator = coordinator
        self.run_blocking = self._run_blocking = run_blocking
        self._cache = cache
        self._metrics = metrics

    async def read(
        self,
        requests: list[tuple[TopicIdPartition, int, int]],
        fetch_max_bytes: int,
        *,
        for_cache: bool = False,
        read_committed: Sequence[bool] = (),
    ) -> list[PartitionRead]:
        """Read (partition, fetch offset, partition max bytes) requests; results in request order.
        ``read_committed`` (per request): stop at the last stable offset and list the aborted
        transactions of what is returned. ``for_cache``: see ``locate``."""
        located = await self.locate(requests, fetch_max_bytes, for_cache=for_cache, read_committed=read_committed)
        return [located.result(i) for i in range(len(located.found))]

    async def locate(
        self,
        requests: list[tuple[TopicIdPartition, int, int]],
        fetch_max_bytes: int,
        *,
        for_cache: bool = False,
        read_committed: Sequence[bool] = (),
    ) -> Located:
        """Find the requested batches and get their bytes; ``Located`` stamps them out.
        ``for_cache``: the reads fill cache replicas' logs rather than answer a consumer (metrics)."""
        committed = list(read_committed) or [False] * len(requests)
        finds = [
            FindBatchRequest(tp, offset, max_bytes, read_committed=rc)
            for (tp, offset, max_bytes), rc in zip(requests, committed, strict=True)
        ]
        found = await self._run_blocking(self._coordinator.find_batches, finds, fetch_max_bytes)
        all_batches = [b for response in found for b in response.batches]
        spans = plan_ranges(all_batches)
        gets = 0

        async def get(span: Span) -> bytes:
            nonlocal gets
            gets += 1
            return await self._get(span)

        views = await asyncio.gather(
            *(self._cache.get_or_fetch(s.key, s.start, s.end, lambda s=s: get(s)) for s in spans)
        )
        if for_cache:
            self._metrics.cache_fill_done(gets)
        else:
            self._metrics.fetch_done(gets)
        return Located(found, dict(zip(spans, views, strict=True)))

    async def _get(self, span: Span) -> bytes:
        started = time.monotonic()
        try:
            data = await self._storage.fetch(span.key, ByteRange(span.start, span.end - span.start))
        except Exception:
            self._metrics.object_get_failed()
            raise
        self._metrics.object_get_done(len(data), time.monotonic() - started)
        return data


async def exact_timestamp_offset(
    reader: DisklessReader, partition: TopicIdPartition, batch_offset: int, target: int
) -> tuple[int, int] | None:
    """Narrow a batch-level timestamp lookup to the record Kafka would answer.

    The coordinator knows batches; ListOffsets answers records. ``target >= 0``: the first
    record at or after ``batch_offset`` with timestamp >= target. ``target == -3`` (max
    timestamp): the first record carrying the batch's max timestamp. Returns (offset,
    timestamp), or None when the batch is gone (deleted meanwhile).
    """
    (read,) = await reader.read([(partition, batch_offset, 1)], 1)
    if read.error != ErrorCode.none or not read.records:
        return None
    # Decompressing and decoding a batch is work for a worker thread, not the event loop.
    _, records = await reader.run_blocking(decode_batch, read.records)
    candidates = records if target == -3 else [r for r in records if r.offset >= batch_offset] or records
    if target == -3:
        best = max(r.timestamp for r in candidates)
        first = next(r for r in candidates if r.timestamp == best)
    else:
        first = next((r for r in candidates if r.timestamp >= target), candidates[-1])
    return first.offset, first.timestamp
