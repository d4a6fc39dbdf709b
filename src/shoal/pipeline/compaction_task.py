"""One compaction output, as a Spark task runs it: read -> verify -> write -> upload -> replace.

The task reads the planned batches' byte ranges from the old objects (neighbours within
1 MiB of one object in one ranged GET, as the broker's Fetch does), checks every batch's
length, magic and CRC32C, writes them as a new WAL segment (version byte 0, then the
batches grouped by partition in offset order: the broker reads it unchanged) under a fresh
``wal/<uuid>`` key, and calls ``replace_batches`` itself, right after the upload.

Why the task and not the driver: the gap between upload and replace stays seconds, not the
length of the whole job. An object uploaded but never registered is an orphan that the
broker's cleaner deletes once it is older than ``diskless.object.orphan.min.age.ms`` and
unknown to the coordinator; a registration arriving after that age could lose its object.
So the task refuses to replace (and deletes its upload) when more than
``max_replace_delay_ms`` passed since the upload started. A replace that fails leaves the
upload as such an orphan; Spark's retry writes a new object.

Never moved (they stay where they are, still served from the old object):
- batches of an object that is gone (everything in it was deleted and the cleaner removed it:
  the replace would skip them anyway);
- batches whose bytes fail the checks (reported in ``corrupt``).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from shoal.config import Config
from shoal.coordinator.api import TopicIdPartition
from shoal.coordinator.compaction_types import BatchMove
from shoal.objects.factory import open_object_storage
from shoal.objects.ranges import coalesce_ranges
from shoal.objects.storage import ByteRange, ObjectNotFoundError, ObjectStorage
from shoal.pipeline.compaction_plan import OutputPlan, PlannedBatch
from shoal.pipeline.stores import open_coordinator
from shoal.records.batch import HEADER_SIZE, LOG_OVERHEAD, crc_of, read_header
from shoal.records.wal import build_segment, new_wal_key

__all__ = ["COMPACTION_UPLOADER_ID", "OutputResult", "TaskSettings", "compact_output", "verify_batch"]

#: ``uploader_broker_id`` of objects written by the compaction job (no broker uploaded them).
COMPACTION_UPLOADER_ID = -1
#: Ranged GETs in flight at once per task.
GET_CONCURRENCY = 8


@dataclass(frozen=True, slots=True)
class TaskSettings:
    store: Config
    storage_url: str
    max_replace_delay_ms: int


@dataclass(slots=True)
class OutputResult:
    """What one task did; plain data so it travels back to the driver."""

    index: int
    object_key: str | None = None  # None: nothing uploaded
    object_size: int = 0
    planned: int = 0
    moved: int = 0
    skipped: int = 0  # planned but not moved: deleted or moved meanwhile, object gone, or corrupt
    moved_bytes: int = 0
    bytes_read: int = 0
    gets: int = 0
    missing_objects: list[str] = field(default_factory=list)
    corrupt: list[str] = field(default_factory=list)
    emptied: list[str] = field(default_factory=list)
    abandoned: bool = False  # uploaded, then deleted: the replace would have come too late
    elapsed_s: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def verify_batch(data: bytes | memoryview, expected_size: int) -> str | None:
    """Why ``data`` is not the v2 record batch of ``expected_size`` bytes the coordinator describes, or None."""
    if len(data) != expected_size:
        return f"{len(data)} bytes read, {expected_size} expected"
    if expected_size < HEADER_SIZE:
        return f"{expected_size} bytes: shorter than a batch header"
    header = read_header(data, 0)
    if header.magic != 2:
        return f"magic {header.magic}, not a v2 record batch"
    if header.batch_length + LOG_OVERHEAD != expected_size:
        return f"batch length {header.batch_length + LOG_OVERHEAD} != {expected_size}"
    computed = crc_of(data, 0, expected_size)
    if computed != header.crc:
        return f"CRC {header.crc} does not match {computed}"
    return None


def _spans(batches: Sequence[PlannedBatch]) -> list[tuple[str, int, int]]:
    """(key, start, end) GETs: one per run of batches of an object less than 1 MiB apart."""
    return coalesce_ranges((b.object_key, b.byte_offset, b.byte_offset + b.byte_size) for b in batches)


async def _read(
    storage: ObjectStorage, batches: Sequence[PlannedBatch], result: OutputResult
) -> dict[PlannedBatch, memoryview]:
    """The bytes of every batch whose object still exists."""
    limit = asyncio.Semaphore(GET_CONCURRENCY)
    spans = _spans(batches)

    async def get(key: str, start: int, end: int) -> bytes | None:
        async with limit:
            try:
                return await storage.fetch(key, ByteRange(start, end - start))
            except ObjectNotFoundError:
                return None

    blobs = await asyncio.gather(*(get(*span) for span in spans))
    result.gets = len(spans)
    result.bytes_read = sum(len(b) for b in blobs if b is not None)
    result.missing_objects = sorted(
        {span[0] for span, blob in zip(spans, blobs, strict=True) if blob is None}
    )
    fetched: dict[str, list[tuple[int, int, bytes]]] = {}
    for (key, start, end), blob in zip(spans, blobs, strict=True):
        if blob is not None:
            fetched.setdefault(key, []).append((start, end, blob))
    out: dict[PlannedBatch, memoryview] = {}
    for b in batches:
        for start, end, blob in fetched.get(b.object_key, ()):
            if start <= b.byte_offset < end:  # every batch lies in exactly one span of its object
                # A view, not a copy; a short read (object shorter than the coordinator says) shows up
                # as a length mismatch.
                out[b] = memoryview(blob)[b.byte_offset - start : b.byte_offset - start + b.byte_size]
                break
    return out


async def _run(plan: OutputPlan, settings: TaskSettings, result: OutputResult) -> None:
    storage = open_object_storage(settings.storage_url)
    try:
        data = await _read(storage, plan.batches, result)
        keep: list[PlannedBatch] = []
        for b in plan.batches:
            if b not in data:
                continue
            problem = verify_batch(data[b], b.byte_size)
            if problem is not None:
                result.corrupt.append(f"{b.object_key}:{b.byte_offset} (batch {b.batch_id}): {problem}")
                continue
            keep.append(b)
        if not keep:
            return
        # The plan is in (topic, partition, offset) order: build_segment keeps it, grouped by partition.
        segment, placed = build_segment([((b.topic_id, b.partition), data[b]) for b in keep])
        key = new_wal_key()
        started = time.monotonic()
        await storage.upload(key, segment)
        result.object_key, result.object_size = key, len(segment)
        if (time.monotonic() - started) * 1000 > settings.max_replace_delay_ms:
            # Too close to the orphan GC's age: never register it; it was never known, so deleting is safe.
            result.abandoned = True
            await storage.delete([key])
            return
        moves = [
            BatchMove(
                b.batch_id, TopicIdPartition(uuid.UUID(bytes=b.topic_id), b.partition, b.topic_name),
                b.base_offset, b.last_offset, b.object_key, b.byte_offset, p.byte_offset, b.byte_size,
            )
            for p in placed
            for b in (keep[p.index],)
        ]  # fmt: skip
        coordinator = open_coordinator(settings.store)
        try:
            replaced = await asyncio.to_thread(
                coordinator.replace_batches, key, len(segment), moves, COMPACTION_UPLOADER_ID
            )
        finally:
            coordinator.close()
        result.moved, result.skipped, result.moved_bytes = (
            replaced.moved,
            replaced.skipped,
            replaced.moved_bytes,
        )
        result.emptied = list(replaced.emptied_object_keys)
    finally:
        await storage.close()


def compact_output(plan: OutputPlan, settings: TaskSettings) -> OutputResult:
    """Write one output object and swap its batches' coordinates (see the module docstring)."""
    started = time.monotonic()
    result = OutputResult(plan.index, planned=len(plan.batches))
    asyncio.run(_run(plan, settings, result))
    result.skipped = result.planned - result.moved  # deleted meanwhile, object gone, or corrupt
    result.elapsed_s = round(time.monotonic() - started, 3)
    return result
