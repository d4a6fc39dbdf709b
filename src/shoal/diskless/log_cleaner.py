"""Log compaction of diskless topics (``cleanup.policy=compact``): Kafka's log cleaner as a broker task.

KIP-1163 lists compaction among what diskless topics share with classic ones. A diskless partition
has no local log, so the cleaner works on the Batch Coordinator's batches and the WAL objects:

1. Every ``log.cleaner.backoff.ms`` the task (on the broker holding the controller lease, once per
   cluster, like retention) looks at each partition of each compacted diskless topic: its
   batches (``find_batches`` from the log start), its cleaner checkpoint
   (``cleaner_checkpoints``), its last stable offset and aborted transactions
   (``transaction_state``).
2. The cleanable range ends below the last stable offset and below the first batch newer than
   ``min.compaction.lag.ms``. Bytes below the checkpoint are clean, those above dirty; the
   partition is cleaned when dirty / (clean + dirty) reaches ``min.cleanable.dirty.ratio``, when
   its first dirty batch is older than ``max.compaction.lag.ms``, or when a tombstone it keeps
   passed its delete horizon.
3. The batches of the range are read from object storage (nearby ranges in one GET), the dirty
   ones' keys mapped (``records.compaction``, the map sized by ``log.cleaner.dedupe.buffer.size``;
   the range ends early, at a batch boundary, when the map fills), every batch cleaned by the
   same rules as a classic log's, and the survivors written as ONE new WAL object for the
   partition.
4. ``compact_partition`` swaps the range's batches for the cleaned ones in one coordinator
   transaction, only if the range is still exactly what was read: a batch deleted or moved
   meanwhile (retention, DeleteRecords, object compaction) makes it refuse, so nothing deleted
   comes back; the upload is then marked for deletion and the next round starts over. Emptied
   objects are marked for deletion and the object cleaner removes them after its grace period,
   so fetches that looked up the old coordinates still read them.

Why a broker task and not only a Spark job: compacted topics (Connect, Streams, schema
registries) must stay compact without anyone running a pipeline, as on Kafka. The Spark
object-compaction job (``shoal pipeline compact``) keeps merging small objects, compacted
topics' included; the two never undo each other (each swap checks the coordinates it read).

Offsets never move: the partition keeps gaps where records went, as a Kafka log does. Producer
state lives in the coordinator's own tables, so no batch is kept empty for it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from shoal.coordinator.api import BatchCoordinator, BatchInfo, FindBatchRequest, TopicIdPartition
from shoal.coordinator.compaction_types import CleanedBatch, CompactPartitionRequest, SourceBatch
from shoal.diskless.periodic import PeriodicTask
from shoal.metadata.image import MetadataImage, TopicImage
from shoal.objects.ranges import coalesce_ranges
from shoal.objects.storage import ByteRange, ObjectStorage
from shoal.observability.cleaner_metrics import CleanerGauges
from shoal.protocol.errors import ErrorCode
from shoal.records.batch import read_header, stamp_batch
from shoal.records.codec import control_record_type, decode_batch
from shoal.records.compaction import (
    AbortedTransaction,
    CleanedTransactions,
    CleanStats,
    OffsetMap,
    clean_batch,
    latest_offsets,
    offset_map_capacity,
)
from shoal.records.types import TimestampType
from shoal.records.wal import build_segment, new_wal_key

__all__ = ["DisklessCleanerGauges", "DisklessLogCleaner", "PartitionClean"]

log = logging.getLogger(__name__)

#: Bytes of batch coordinates asked per ``find_batches`` page.
_PAGE_BYTES = 256 * 1024 * 1024
#: Ranged GETs in flight at once.
_GET_CONCURRENCY = 8
#: The label of diskless partitions in ``uncleanable-partitions-count`` (Kafka's is a log dir).
DISKLESS_LOG_DIRECTORY = "diskless"


@dataclass(slots=True)
class DisklessCleanerGauges(CleanerGauges):
    """The gauges, with uncleanable diskless partitions under one ``diskless`` label."""

    uncleanable: set[TopicIdPartition] = field(default_factory=set)

    def uncleanable_counts(self) -> dict[str, int]:
        return {DISKLESS_LOG_DIRECTORY: len(self.uncleanable)}


@dataclass(slots=True)
class PartitionClean:
    """What one pass over one partition did."""

    topic_id_partition: TopicIdPartition
    start_offset: int
    end_offset: int
    applied: bool
    stats: CleanStats
    elapsed_s: float


@dataclass(frozen=True, slots=True)
class _Settings:
    min_cleanable_ratio: float
    min_compaction_lag_ms: int
    max_compaction_lag_ms: int
    delete_retention_ms: int


def _compacts(topic: TopicImage, topic_default: Callable[[str], Any]) -> bool:
    policy = topic.configs.get("cleanup.policy")
    items = policy.split(",") if isinstance(policy, str) else list(topic_default("cleanup.policy"))
    return "compact" in {str(p).strip() for p in items}


def _settings(topic: TopicImage, topic_default: Callable[[str], Any]) -> _Settings:
    def get(name: str) -> Any:
        value = topic.configs.get(name)
        return topic_default(name) if value is None else value

    return _Settings(
        float(get("min.cleanable.dirty.ratio")),
        int(get("min.compaction.lag.ms")),
        int(get("max.compaction.lag.ms")),
        int(get("delete.retention.ms")),
    )


class DisklessLogCleaner(PeriodicTask):
    """Compacts the diskless partitions of compacted topics (see the module docstring)."""

    def __init__(
        self,
        coordinator: BatchCoordinator,
        storage: ObjectStorage,
        run_blocking: Callable[..., Awaitable[Any]],
        image: Callable[[], MetadataImage],
        topic_default: Callable[[str], Any],
        *,
        broker_id: int,
        interval_ms: int,
        dedupe_buffer_size: int,
        io_max_bytes_per_second: float = float("inf"),
        enabled: bool = True,
        clock: Callable[[], int] | None = None,
    ) -> None:
        self._coordinator = coordinator
        self._storage = storage
        self._run_blocking = run_blocking
        self._image = image
        self._topic_default = topic_default
        self._broker_id = broker_id
        self._interval = max(interval_ms, 1) / 1000
        self._name = "diskless-log-cleaner"
        self._enabled = enabled
        self._clock = clock or (lambda: time.time_ns() // 1_000_000)
        self._capacity = offset_map_capacity(dedupe_buffer_size, 1)
        self._io_rate = io_max_bytes_per_second
        #: Partitions to clean again once their earliest kept delete horizon passed.
        self._horizons: dict[TopicIdPartition, int] = {}
        self.gauges = DisklessCleanerGauges(last_run_ms=self._clock())

    async def round(self) -> None:
        if self._enabled:
            await self.run_once()

    async def run_once(self) -> list[PartitionClean]:
        """One look at every compacted diskless partition; cleans those that need it."""
        done: list[PartitionClean] = []
        max_dirty = max_delay = 0.0
        for topic in list(self._image().topics_by_name.values()):
            if not topic.is_diskless or not _compacts(topic, self._topic_default):
                continue
            settings = _settings(topic, self._topic_default)
            checkpoints = await self._run_blocking(self._coordinator.cleaner_checkpoints, topic.topic_id)
            for partition in sorted(topic.partitions):
                tip = TopicIdPartition(topic.topic_id, partition, topic.name)
                if tip in self.gauges.uncleanable:
                    continue
                try:
                    result = await self._maybe_clean(tip, checkpoints.get(partition, 0), settings)
                except Exception as e:  # a corrupt batch, a bug: this partition only, as Kafka does
                    log.error("Cleaning %s-%d failed; marking it uncleanable: %s", topic.name, partition, e)
                    self.gauges.uncleanable.add(tip)
                    continue
                if result is None:
                    continue
                ratio, delay, clean = result
                max_dirty, max_delay = max(max_dirty, ratio), max(max_delay, delay)
                if clean is not None:
                    done.append(clean)
        self.gauges.max_dirty_percent = 100 * max_dirty
        self.gauges.max_compaction_delay_secs = max_delay
        self.gauges.last_run_ms = self._clock()
        return done

    async def _batches(self, tip: TopicIdPartition) -> tuple[list[BatchInfo], int] | None:
        """Every batch of the partition and its last stable offset (None: unknown, or partly in
        tiered storage, which compacted topics never are)."""
        info = await self._run_blocking(self._coordinator.get_log_info, tip.topic_id, tip.partition)
        if info is None:
            return None
        offset, high_watermark, _ = info
        batches: list[BatchInfo] = []
        lso = high_watermark
        while offset < high_watermark:
            request = FindBatchRequest(tip, offset, _PAGE_BYTES)
            (response,) = await self._run_blocking(self._coordinator.find_batches, [request], _PAGE_BYTES)
            if response.errors != ErrorCode.none:
                return None
            lso = response.last_stable_offset
            if not response.batches:
                break
            batches += response.batches
            offset = response.batches[-1].metadata.last_offset + 1
        return batches, lso

    async def _maybe_clean(
        self, tip: TopicIdPartition, checkpoint: int, settings: _Settings
    ) -> tuple[float, float, PartitionClean | None] | None:
        found = await self._batches(tip)
        if found is None:
            return None
        batches, lso = found
        now = self._clock()
        cleanable: list[BatchInfo] = []
        for b in batches:
            m = b.metadata
            if m.last_offset >= lso:
                break
            if settings.min_compaction_lag_ms > 0 and m.batch_max_timestamp > now - settings.min_compaction_lag_ms:
                break
            cleanable.append(b)
        clean = sum(b.metadata.byte_size for b in cleanable if b.metadata.last_offset < checkpoint)
        dirty_batches = [b for b in cleanable if b.metadata.last_offset >= checkpoint]
        dirty = sum(b.metadata.byte_size for b in dirty_batches)
        if not dirty:
            return None
        ratio = dirty / (clean + dirty)
        delay = max(0.0, (now - dirty_batches[0].metadata.batch_max_timestamp - settings.max_compaction_lag_ms) / 1000)
        horizon = self._horizons.get(tip)
        if ratio < settings.min_cleanable_ratio and delay <= 0 and (horizon is None or horizon > now):
            return ratio, delay, None
        return ratio, delay, await self._clean(tip, cleanable, checkpoint, settings, now)

    async def _throttle(self, size: int) -> None:
        """``log.cleaner.io.max.bytes.per.second``: wait as long as moving ``size`` bytes takes at it."""
        if self._io_rate < 1e300:
            await asyncio.sleep(size / self._io_rate)

    async def _read(self, batches: Sequence[BatchInfo]) -> list[memoryview]:
        """Each batch's bytes, in order (nearby ranges of one object in one GET)."""
        spans = coalesce_ranges(b.byte_range for b in batches)
        limit = asyncio.Semaphore(_GET_CONCURRENCY)

        async def get(key: str, start: int, end: int) -> tuple[str, int, bytes]:
            async with limit:
                return key, start, await self._storage.fetch(key, ByteRange(start, end - start))

        blobs = await asyncio.gather(*(get(*span) for span in spans))
        by_object: dict[str, list[tuple[int, memoryview]]] = {}
        for key, start, data in blobs:
            by_object.setdefault(key, []).append((start, memoryview(data)))
        out: list[memoryview] = []
        for b in batches:
            key, start, end = b.byte_range
            for span_start, view in by_object[key]:
                if span_start <= start and end <= span_start + len(view):
                    # WAL bytes carry the producer's offsets: stamp the assigned ones as Fetch does.
                    data = bytearray(view[start - span_start : end - span_start])
                    if read_header(data).size != len(data):
                        raise ValueError(f"object {key} bytes {start}-{end} are not batch {b.metadata.base_offset}")
                    m = b.metadata
                    append_time = m.log_append_timestamp if m.timestamp_type == TimestampType.LOG_APPEND_TIME else None
                    stamp_batch(data, 0, m.base_offset, 0, append_time)
                    out.append(memoryview(data))
                    break
        self.gauges.bytes_read += sum(len(d) for d in out)
        return out

    async def _clean(
        self, tip: TopicIdPartition, cleanable: list[BatchInfo], checkpoint: int, settings: _Settings, now: int
    ) -> PartitionClean:
        started = time.monotonic()
        data = await self._read(cleanable)
        await self._throttle(sum(len(d) for d in data))
        state = await self._run_blocking(self._coordinator.transaction_state, tip.topic_id, tip.partition)
        aborted = [AbortedTransaction(pid, first, last, -1) for pid, first, last in (state[1] if state else [])]
        cleaned, end, stats, utilization = await self._run_blocking(
            _clean_batches, cleanable, data, checkpoint, aborted, self._capacity, now, settings.delete_retention_ms
        )
        source = [b for b in cleanable if b.metadata.last_offset < end]
        segment, placed = build_segment([(tip, bytes(c)) for c, _ in cleaned])
        key = new_wal_key()
        await self._throttle(len(segment))
        await self._storage.upload(key, segment)
        new_batches = []
        for place, (_, info) in zip(placed, cleaned, strict=True):
            m = info.metadata
            header = read_header(segment, place.byte_offset)
            new_batches.append(CleanedBatch(
                m.base_offset, m.last_offset, place.byte_offset, place.size,
                header.max_timestamp, TimestampType(m.timestamp_type), m.producer_id, m.producer_epoch,
                m.base_sequence, m.last_sequence, m.is_transactional, m.is_control,
            ))
        request = CompactPartitionRequest(
            tip, source[0].metadata.base_offset, end,
            [SourceBatch(b.batch_id, b.object_key, b.metadata.byte_offset, b.metadata.byte_size,
                         b.metadata.base_offset, b.metadata.last_offset) for b in source],
            new_batches, end,
        )
        result = await self._run_blocking(self._coordinator.compact_partition, key, len(segment), self._broker_id, request)
        elapsed = time.monotonic() - started
        g = self.gauges
        if result.applied:
            if stats.next_delete_horizon_ms >= 0:
                self._horizons[tip] = stats.next_delete_horizon_ms
            else:
                self._horizons.pop(tip, None)
            g.pass_done(stats.bytes_read, stats.bytes_written, elapsed, utilization)
            log.info(
                "Cleaned diskless partition %s-%d [%d, %d): %d of %d bytes kept in %s, %.2f s",
                tip.topic_name, tip.partition, request.start_offset, end, stats.bytes_written, stats.bytes_read,
                key, elapsed,
            )
        else:
            log.info("Cleaning %s-%d lost a race (its batches changed meanwhile); next round retries",
                     tip.topic_name, tip.partition)
        return PartitionClean(tip, request.start_offset, end, result.applied, stats, elapsed)


def _clean_batches(
    batches: list[BatchInfo],
    data: list[memoryview],
    checkpoint: int,
    aborted: list[AbortedTransaction],
    capacity: int,
    now: int,
    delete_retention_ms: int,
) -> tuple[list[tuple[bytes | memoryview, BatchInfo]], int, CleanStats, float]:
    """Map the dirty batches' keys, then clean every batch up to where the map ended (worker thread).
    Returns (kept batches with their source, end offset, stats, map utilization)."""
    offset_map = OffsetMap(capacity)
    map_txns = CleanedTransactions(aborted)
    end = batches[-1].metadata.last_offset + 1
    for info, raw in zip(batches, data, strict=True):
        if info.metadata.last_offset < checkpoint:
            continue
        header, records = decode_batch(raw, check_crc=False)
        control = control_record_type(records[0]) if header.is_control and records else None
        offsets: dict[bytes, int] = {}
        if not map_txns.on_batch(header, control) and not header.is_control:
            latest_offsets(records, offsets)
        if not offset_map.add_all(offsets):
            if info.metadata.base_offset <= max(checkpoint, batches[0].metadata.base_offset):
                raise ValueError("the first dirty batch holds more keys than log.cleaner.dedupe.buffer.size maps")
            end = info.metadata.base_offset
            break
    offset_map.latest_offset = max(offset_map.latest_offset, end - 1)
    txns = CleanedTransactions(aborted)
    stats = CleanStats()
    kept: list[tuple[bytes | memoryview, BatchInfo]] = []
    for info, raw in zip(batches, data, strict=True):
        if info.metadata.base_offset >= end:
            break
        out = clean_batch(raw, offset_map, txns, now_ms=now, delete_retention_ms=delete_retention_ms, stats=stats)
        if out is not None:
            kept.append((out, info))
    return kept, end, stats, len(offset_map) / offset_map.capacity
