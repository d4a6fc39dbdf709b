"""Read offset ranges of diskless partitions straight from object storage (no broker involved).

The same path a broker's Fetch takes, done in a Spark task: the Batch Coordinator says
where each batch lives, neighbouring batches of one object are read with one ranged GET
(``shoal.objects.ranges``, as the broker plans them), each batch's CRC is checked, its coordinator-assigned
base offset (and, for LogAppendTime topics, the append time) is stamped in, and the records
are decoded, whatever the codec. The next chunk's GETs run while the current one decodes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

from crc32c import crc32c

from shoal.config import Config
from shoal.coordinator.api import (
    BatchInfo,
    FindBatchRequest,
    ListOffsetsRequest,
    TopicIdPartition,
)
from shoal.objects.factory import open_object_storage
from shoal.objects.ranges import coalesce_ranges
from shoal.objects.storage import ByteRange, ObjectNotFoundError, ObjectStorage
from shoal.pipeline.stores import open_coordinator
from shoal.pipeline.topics import PartitionSource
from shoal.protocol.errors import ErrorCode, KafkaError
from shoal.records.batch import ATTRIBUTES_OFFSET, TIMESTAMP_TYPE_FLAG, read_header, stamp_batch
from shoal.records.codec import Record, decode_batch
from shoal.records.types import TimestampType

__all__ = ["DataLossError", "DisklessRangeReader", "StoredRecord"]

#: Bytes of batches planned (and fetched) per step; two steps are in memory at once.
CHUNK_BYTES = 16 * 1024 * 1024
#: Ranged GETs in flight at once within a step.
GET_CONCURRENCY = 8

# (offset, timestamp ms, timestamp type, key, value, headers)
StoredRecord = tuple[int, int, int, bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...]]


class DataLossError(RuntimeError):
    """Records that the read must return are gone (retention, deletion); see ``failOnDataLoss``."""


@dataclass(frozen=True, slots=True)
class _Step:
    offset: int  # the first offset this step must return
    batches: list[BatchInfo]
    next_offset: int


def _data_loss(message: str) -> DataLossError:
    return DataLossError(
        f"{message}. Some data may have been lost because it is not available any more (deleted by "
        "retention or with its topic). If you want the query to go on, set the option failOnDataLoss=false."
    )


class DisklessRangeReader:
    """Opens the coordinator (read-only use) and the object storage once per task; ``close`` them after."""

    def __init__(self, store: Config, storage_url: str, *, chunk_bytes: int = CHUNK_BYTES) -> None:
        self._coordinator = open_coordinator(store)
        self._storage: ObjectStorage = open_object_storage(storage_url)
        self._chunk_bytes = chunk_bytes
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="shoal-prefetch")
        self.stats = {"gets": 0, "bytes": 0, "batches": 0}

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
        try:
            asyncio.run(self._storage.close())
        finally:
            self._coordinator.close()

    def __enter__(self) -> DisklessRangeReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ offsets

    def bounds(self, src: PartitionSource) -> tuple[int, int]:
        """(log start offset, high watermark) of a diskless partition."""
        info = self._coordinator.get_log_info(src.topic_uuid(), src.partition)
        if info is None:
            raise _data_loss(f"{src.topic}-{src.partition} is unknown to the Batch Coordinator")
        return info[0], info[1]

    def offset_for_timestamp(self, src: PartitionSource, target: int) -> int | None:
        """Kafka's ListOffsets by timestamp: the first offset whose timestamp is >= ``target``, or None.

        The coordinator answers the first *batch* that reaches the target; that batch is read
        and decoded to answer the exact record, as the broker does.
        """
        tip = TopicIdPartition(src.topic_uuid(), src.partition, src.topic)
        (resp,) = self._coordinator.list_offsets([ListOffsetsRequest(tip, target)])
        if resp.errors != ErrorCode.none:
            raise KafkaError(resp.errors, f"ListOffsets by timestamp for {src.topic}-{src.partition}")
        if resp.offset < 0:
            return None
        log_start, high_watermark = self.bounds(src)
        for records in self.read(src, resp.offset, high_watermark, fail_on_data_loss=False):
            for rec in records:
                if rec[1] >= target:
                    return rec[0]
        return None

    # ------------------------------------------------------------------ reading

    def read(
        self, src: PartitionSource, start: int, end: int, *, fail_on_data_loss: bool = True
    ) -> Iterator[list[StoredRecord]]:
        """The records with ``start <= offset < end``, in offset order, in chunks (control records skipped)."""
        tip = TopicIdPartition(src.topic_uuid(), src.partition, src.topic)
        step = self._plan(tip, start, end, fail_on_data_loss)
        future = self._submit(step)
        while step is not None and future is not None:
            following = (
                self._plan(tip, step.next_offset, end, fail_on_data_loss) if step.next_offset < end else None
            )
            following_future = self._submit(following)
            try:
                data = future.result()
            except ObjectNotFoundError:
                # Retention or deletion removed the object after we planned: that is data loss if
                # the log moved past us, otherwise a real inconsistency.
                log_start, _ = self.bounds(src)
                if step.offset >= log_start:
                    raise
                if following_future is not None:
                    following_future.cancel()
                if fail_on_data_loss:
                    raise _data_loss(
                        f"{src.topic}-{src.partition}: offsets {step.offset}..{log_start - 1} were deleted while reading"
                    ) from None
                step = self._plan(tip, log_start, end, fail_on_data_loss)
                future = self._submit(step)
                continue
            yield self._decode(step, data, end)
            step, future = following, following_future

    def _plan(self, tip: TopicIdPartition, offset: int, end: int, fail_on_data_loss: bool) -> _Step | None:
        while offset < end:
            (resp,) = self._coordinator.find_batches(
                [FindBatchRequest(tip, offset, self._chunk_bytes)], self._chunk_bytes
            )
            where = f"{tip.topic_name}-{tip.partition}"
            if resp.errors == ErrorCode.unknown_topic_or_partition:
                if fail_on_data_loss:
                    raise _data_loss(f"{where} does not exist any more")
                return None
            if resp.errors == ErrorCode.offset_out_of_range:
                if offset < resp.log_start_offset:
                    if fail_on_data_loss:
                        raise _data_loss(
                            f"{where}: offsets {offset}..{min(end, resp.log_start_offset) - 1} are below the log "
                            f"start offset {resp.log_start_offset}"
                        )
                    offset = resp.log_start_offset
                    continue
                if fail_on_data_loss:
                    raise _data_loss(
                        f"{where}: offset {offset} is past the high watermark {resp.high_watermark}"
                    )
                return None
            if resp.errors != ErrorCode.none:
                raise KafkaError(resp.errors, f"finding batches of {where} from offset {offset}")
            batches = [b for b in resp.batches if b.metadata.base_offset < end]
            if not batches:
                if offset >= resp.high_watermark:
                    if fail_on_data_loss:
                        raise _data_loss(
                            f"{where}: offset {offset} is past the high watermark {resp.high_watermark}"
                        )
                    return None
                raise KafkaError(ErrorCode.unknown_server_error, f"{where}: no batch holds offset {offset}")
            return _Step(offset, batches, batches[-1].metadata.last_offset + 1)
        return None

    def _submit(self, step: _Step | None) -> Future[dict[tuple[str, int], bytes]] | None:
        if step is None:
            return None
        return self._pool.submit(asyncio.run, self._fetch(step))

    async def _fetch(self, step: _Step) -> dict[tuple[str, int], bytes]:
        spans = coalesce_ranges(b.byte_range for b in step.batches)
        limit = asyncio.Semaphore(GET_CONCURRENCY)

        async def get(key: str, start: int, end: int) -> bytes:
            async with limit:
                return await self._storage.fetch(key, ByteRange(start, end - start))

        blobs = await asyncio.gather(*(get(s.key, s.start, s.end) for s in spans))
        self.stats["gets"] += len(spans)
        self.stats["bytes"] += sum(len(b) for b in blobs)
        return {(s.key, s.start): blob for s, blob in zip(spans, blobs, strict=True)}

    def _decode(self, step: _Step, data: dict[tuple[str, int], bytes], end: int) -> list[StoredRecord]:
        by_key: dict[str, list[tuple[int, bytes]]] = {}
        for (key, start), blob in data.items():
            by_key.setdefault(key, []).append((start, blob))
        out: list[StoredRecord] = []
        for batch in step.batches:
            m = batch.metadata
            start, blob = next(
                (s, b)
                for s, b in by_key[batch.object_key]
                if s <= m.byte_offset and m.byte_offset + m.byte_size <= s + len(b)
            )
            buf = bytearray(blob[m.byte_offset - start : m.byte_offset - start + m.byte_size])
            if len(buf) != m.byte_size:
                raise KafkaError(
                    ErrorCode.corrupt_message, f"object {batch.object_key} is shorter than its batches"
                )
            header = read_header(buf, 0)
            computed = crc32c(memoryview(buf)[ATTRIBUTES_OFFSET:])
            if computed != header.crc:
                raise KafkaError(
                    ErrorCode.corrupt_message,
                    f"batch at {batch.object_key}:{m.byte_offset}: CRC {header.crc} does not match {computed}",
                )
            log_append = m.timestamp_type == TimestampType.LOG_APPEND_TIME
            stamp_batch(buf, 0, m.base_offset, 0, m.log_append_timestamp if log_append else None)
            header, records = decode_batch(buf, check_crc=False)
            self.stats["batches"] += 1
            if header.is_control:
                continue
            ts_type = 1 if header.attributes & TIMESTAMP_TYPE_FLAG else 0
            first = step.offset
            rec: Record
            for rec in records:
                if first <= rec.offset < end:
                    out.append((rec.offset, rec.timestamp, ts_type, rec.key, rec.value, rec.headers))
        return out
