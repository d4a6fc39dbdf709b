"""Read offset ranges of diskless partitions straight from object storage (no broker involved).

The same path a broker's Fetch takes, done in a Spark task: the Batch Coordinator says
where each batch lives, neighbouring batches of one object are read with one ranged GET
(``shoal.objects.ranges``, as the broker plans them), each batch's CRC is checked, its coordinator-assigned
base offset (and, for LogAppendTime topics, the append time) is stamped in, and the records
are decoded, whatever the codec. The next chunk's GETs run while the current one decodes.

On a tiered diskless topic (KIP-1163) the coordinator answers OFFSET_MOVED_TO_TIERED_STORAGE
for offsets whose batches went to tiered segments; those are read from the segment holding
them, on the same object storage (``tiered_read``), and the read goes on with the coordinator's
batches after the segment's end. A WAL object or segment deleted meanwhile is data loss when
the log start moved past it (``failOnDataLoss``); a WAL object emptied by tiering sends the read
to the segment now holding its offsets.

Isolation (``isolation``): control batches (transaction markers) never give rows, and are not even
fetched when the coordinator's flags say what they are. With ``read_committed`` the high end of a
partition is its last stable offset, and each read takes the partition's aborted transactions from
the coordinator before it looks up any batch, then drops the batches of aborted transactions whole
(WAL batches before their GET, tiered ones before decoding).
"""

from __future__ import annotations

import asyncio
from collections.abc import Generator, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace

from crc32c import crc32c

from shoal.config import Config
from shoal.coordinator.api import (
    BatchInfo,
    FindBatchRequest,
    ListOffsetsRequest,
    ListOffsetsTimestamp,
    TopicIdPartition,
)
from shoal.objects.factory import open_object_storage
from shoal.objects.ranges import coalesce_ranges
from shoal.objects.storage import ByteRange, ObjectNotFoundError, ObjectStorage
from shoal.pipeline.isolation import CONTROL_ONLY, BatchFilter
from shoal.pipeline.stored_batches import StoredBatch, StoredRecord, records_of, stored_batch
from shoal.pipeline.stores import open_coordinator
from shoal.pipeline.tiered_read import RemoteSegments, SegmentReader
from shoal.pipeline.topics import PartitionSource
from shoal.protocol.errors import ErrorCode, KafkaError
from shoal.records.batch import ATTRIBUTES_OFFSET, TIMESTAMP_TYPE_FLAG, read_header
from shoal.records.types import TimestampType
from shoal.tiered.api import RemoteResourceNotFoundError
from shoal.tiered.api import TopicIdPartition as RemotePartition
from shoal.tiered.storage_manager import ObjectRemoteStorageManager

__all__ = ["DataLossError", "DisklessRangeReader", "StoredBatch", "StoredRecord"]

#: Bytes of batches planned (and fetched) per step; two steps are in memory at once.
CHUNK_BYTES = 16 * 1024 * 1024
#: Ranged GETs in flight at once within a step.
GET_CONCURRENCY = 8


class DataLossError(RuntimeError):
    """Records that the read must return are gone (retention, deletion); see ``failOnDataLoss``."""


@dataclass(frozen=True, slots=True)
class _Step:
    offset: int  # the first offset this step must return
    batches: list[BatchInfo]  # the batches to fetch and decode (markers and aborted ones left out)
    next_offset: int


@dataclass(frozen=True, slots=True)
class _Tiered:
    offset: int  # the coordinator answered OFFSET_MOVED_TO_TIERED_STORAGE here


#: What reading one part of a range yields, then returns: where the read goes on (None: done).
_Part = Generator[list[StoredBatch], None, int | None]


def _data_loss(message: str) -> DataLossError:
    return DataLossError(
        f"{message}. Some data may have been lost because it is not available any more (deleted by "
        "retention or with its topic). If you want the query to go on, set the option failOnDataLoss=false."
    )


class DisklessRangeReader:
    """Opens the coordinator (read-only use) and the object storage once per task; ``close`` them after.

    The remote segment metadata of tiered topics is opened only when a read reaches tiered data.
    ``read_committed``: Kafka's READ_COMMITTED (see the module docstring).
    """

    def __init__(
        self, store: Config, storage_url: str, *, chunk_bytes: int = CHUNK_BYTES, read_committed: bool = False
    ) -> None:
        self._read_committed = read_committed
        self._coordinator = open_coordinator(store)
        self._storage: ObjectStorage = open_object_storage(storage_url)
        self._chunk_bytes = chunk_bytes
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="shoal-prefetch")
        self.stats = {"gets": 0, "bytes": 0, "batches": 0, "segments": 0}
        self._remote = RemoteSegments(store)
        rsm = ObjectRemoteStorageManager(self._storage)  # the broker's, on the same object storage
        self._segments = SegmentReader(rsm, self._pool, chunk_bytes, self.stats)

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
        try:
            asyncio.run(self._storage.close())
        finally:
            try:
                self._remote.close()
            finally:
                self._coordinator.close()

    def __enter__(self) -> DisklessRangeReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ offsets

    def bounds(self, src: PartitionSource) -> tuple[int, int]:
        """(log start offset, high watermark) of a diskless partition (tiered offsets included);
        with ``read_committed`` the high end is the last stable offset, as a READ_COMMITTED
        consumer's end offset is: what every planned end (latest, streaming) is bounded by."""
        info = self._coordinator.get_log_info(src.topic_uuid(), src.partition)
        if info is None:
            raise _data_loss(f"{src.topic}-{src.partition} is unknown to the Batch Coordinator")
        if not self._read_committed:
            return info[0], info[1]
        state = self._coordinator.transaction_state(src.topic_uuid(), src.partition)
        if state is None:
            raise _data_loss(f"{src.topic}-{src.partition} is unknown to the Batch Coordinator")
        return info[0], state[0]  # from a later snapshot: never below info's log start

    def batch_filter(self, src: PartitionSource) -> BatchFilter:
        """What a read of ``src`` keeps: every data batch (``read_uncommitted``), or those of no
        aborted transaction, from the coordinator now (one snapshot; an unknown partition keeps
        everything, the read then finds it gone)."""
        if not self._read_committed:
            return CONTROL_ONLY
        state = self._coordinator.transaction_state(src.topic_uuid(), src.partition)
        return CONTROL_ONLY if state is None else BatchFilter(state[1])

    def offset_for_timestamp(self, src: PartitionSource, target: int) -> int | None:
        """Kafka's ListOffsets by timestamp: the first offset whose timestamp is >= ``target``, or None.

        The coordinator answers the first *batch* it holds that reaches the target; below its
        first batch (tiered data) the first remote segment whose max timestamp reaches it comes
        first. From there the records are read and decoded to answer the exact one, as the
        broker does.
        """
        tip = TopicIdPartition(src.topic_uuid(), src.partition, src.topic)
        resp, local, earliest = self._coordinator.list_offsets([
            ListOffsetsRequest(tip, target),
            ListOffsetsRequest(tip, ListOffsetsTimestamp.EARLIEST_LOCAL),
            ListOffsetsRequest(tip, ListOffsetsTimestamp.EARLIEST),
        ])
        for answer in (resp, local, earliest):
            if answer.errors != ErrorCode.none:
                raise KafkaError(answer.errors, f"ListOffsets by timestamp for {src.topic}-{src.partition}")
        starts = [resp.offset] if resp.offset >= 0 else []
        if local.offset > earliest.offset:  # offsets [earliest, local) are in tiered segments
            remote = RemotePartition(src.topic_uuid(), src.partition, src.topic)
            first = next(
                (
                    s for s in self._remote.finished(remote, fresh=True)
                    if s.end_offset >= earliest.offset and s.max_timestamp_ms >= target
                ),
                None,
            )
            if first is not None:
                starts.append(max(first.start_offset, earliest.offset))
        if not starts:
            return None
        log_start, high_watermark = self.bounds(src)  # read_committed: the LSO, as Kafka bounds the answer
        first_offset = max(min(starts), log_start)
        # Any data record answers, an aborted one too: Kafka's time index does not know transactions.
        for batches in self._read(src, first_offset, high_watermark, False, CONTROL_ONLY):
            for rec in records_of(batches):
                if rec[1] >= target:
                    return rec[0]
        return None

    # ------------------------------------------------------------------ reading

    def read(
        self, src: PartitionSource, start: int, end: int, *, fail_on_data_loss: bool = True
    ) -> Iterator[list[StoredRecord]]:
        """The records with ``start <= offset < end``, in offset order, in chunks (control records
        skipped; with ``read_committed`` aborted transactions too)."""
        for batches in self.read_batches(src, start, end, fail_on_data_loss=fail_on_data_loss):
            yield records_of(batches)

    def read_batches(
        self, src: PartitionSource, start: int, end: int, *, fail_on_data_loss: bool = True
    ) -> Iterator[list[StoredBatch]]:
        """The batches holding the records ``read`` returns, chunk by chunk, ready to decode.

        Alternates between the coordinator's batches and tiered segments as the coordinator
        says where the offsets are.
        """
        # Taken before any batch is looked up: an aborted transaction is forgotten only once the
        # log start passed its marker, and the coordinator then refuses its offsets to this read.
        keep = self.batch_filter(src) if start < end else CONTROL_ONLY
        yield from self._read(src, start, end, fail_on_data_loss, keep)

    def _read(
        self, src: PartitionSource, start: int, end: int, fail_on_data_loss: bool, keep: BatchFilter
    ) -> Iterator[list[StoredBatch]]:
        offset: int | None = start
        while offset is not None and offset < end:
            offset = yield from self._read_local(src, offset, end, fail_on_data_loss, keep)
            if offset is not None and offset < end:
                offset = yield from self._read_tiered(src, offset, end, fail_on_data_loss, keep)

    def _read_local(
        self, src: PartitionSource, start: int, end: int, fail_on_data_loss: bool, keep: BatchFilter
    ) -> _Part:
        """The coordinator's batches from ``start``; returns the offset found in tiered storage, if any."""
        tip = TopicIdPartition(src.topic_uuid(), src.partition, src.topic)
        step = self._plan(tip, start, end, fail_on_data_loss, keep)
        future = self._submit(step)
        while isinstance(step, _Step):
            assert future is not None
            following = (
                self._plan(tip, step.next_offset, end, fail_on_data_loss, keep)
                if step.next_offset < end
                else None
            )
            following_future = self._submit(following)
            try:
                data = future.result()
            except ObjectNotFoundError:
                # Retention or deletion removed the object after we planned: that is data loss if
                # the log moved past us; tiering may have emptied it (its batches are in a
                # segment now); otherwise a real inconsistency.
                if following_future is not None:
                    following_future.cancel()
                log_start, _ = self.bounds(src)
                if step.offset >= log_start:
                    moved = self._plan(tip, step.offset, end, fail_on_data_loss, keep)
                    if isinstance(moved, _Tiered):
                        return moved.offset
                    raise
                if fail_on_data_loss:
                    raise _data_loss(
                        f"{src.topic}-{src.partition}: offsets {step.offset}..{log_start - 1} were deleted while reading"
                    ) from None
                step = self._plan(tip, log_start, end, fail_on_data_loss, keep)
                future = self._submit(step)
                continue
            yield self._checked(step, data, end, keep)
            step, future = following, following_future
        return step.offset if isinstance(step, _Tiered) else None

    def _read_tiered(
        self, src: PartitionSource, offset: int, end: int, fail_on_data_loss: bool, keep: BatchFilter
    ) -> _Part:
        """The batches of the remote segment holding ``offset``; returns the offset after it."""
        where = f"{src.topic}-{src.partition}"
        remote = RemotePartition(src.topic_uuid(), src.partition, src.topic)
        segment = self._remote.holding(remote, offset)
        reached = offset
        if segment is not None:
            stop = min(end, segment.end_offset + 1)
            self.stats["segments"] += 1
            try:
                for batches, progress in self._segments.read(segment, offset, stop, keep):
                    reached = progress
                    yield batches
                return stop
            except RemoteResourceNotFoundError:
                pass  # deleted since it was listed: retention, below
        # Retention deletes segments after moving the log start past them.
        log_start, _ = self.bounds(src)
        if reached >= log_start:
            raise KafkaError(
                ErrorCode.offset_moved_to_tiered_storage,
                f"{where}: offset {reached} moved to tiered storage, but no remote segment has it",
            )
        if fail_on_data_loss:
            raise _data_loss(
                f"{where}: offsets {reached}..{min(end, log_start) - 1} were deleted while reading"
            )
        return log_start

    def _plan(
        self, tip: TopicIdPartition, offset: int, end: int, fail_on_data_loss: bool, keep: BatchFilter
    ) -> _Step | _Tiered | None:
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
            if resp.errors == ErrorCode.offset_moved_to_tiered_storage:
                return _Tiered(offset)
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
                return None  # log compaction removed every record from here to the range's end
            # Markers and aborted batches are left out before their GET (the decoder checks the
            # bytes' own header too); the step still goes on after the last batch found.
            kept = [b for b in batches if keep.keeps_batch(b.metadata)]
            return _Step(offset, kept, batches[-1].metadata.last_offset + 1)
        return None

    def _submit(self, step: _Step | _Tiered | None) -> Future[dict[tuple[str, int], bytes]] | None:
        if not isinstance(step, _Step):
            return None
        planned: _Step = step
        # The coroutine is made in the worker: a step cancelled before it runs leaves none behind.
        return self._pool.submit(lambda: asyncio.run(self._fetch(planned)))

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

    def _checked(
        self, step: _Step, data: dict[tuple[str, int], bytes], end: int, keep: BatchFilter
    ) -> list[StoredBatch]:
        """The step's batches cut from the fetched spans (views, not copies), CRC checked, with the
        coordinator's offsets (and LogAppendTime) in their headers, control and aborted ones left out."""
        by_key: dict[str, list[tuple[int, bytes]]] = {}
        for (key, start), blob in data.items():
            by_key.setdefault(key, []).append((start, blob))
        out: list[StoredBatch] = []
        for batch in step.batches:
            m = batch.metadata
            start, blob = next(
                (s, b)
                for s, b in by_key[batch.object_key]
                if s <= m.byte_offset and m.byte_offset + m.byte_size <= s + len(b)
            )
            buf = memoryview(blob)[m.byte_offset - start : m.byte_offset - start + m.byte_size]
            if len(buf) != m.byte_size:
                raise KafkaError(
                    ErrorCode.corrupt_message, f"object {batch.object_key} is shorter than its batches"
                )
            header = read_header(buf, 0)
            computed = crc32c(buf[ATTRIBUTES_OFFSET:])
            if computed != header.crc:
                raise KafkaError(
                    ErrorCode.corrupt_message,
                    f"batch at {batch.object_key}:{m.byte_offset}: CRC {header.crc} does not match {computed}",
                )
            self.stats["batches"] += 1
            if not keep.keeps_header(header, m.base_offset):  # a marker, or an aborted transaction's
                continue
            # What stamping the bytes would do (``stamp_batch``), on the header alone: no copy.
            if m.timestamp_type == TimestampType.LOG_APPEND_TIME:
                header = replace(
                    header,
                    base_offset=m.base_offset,
                    attributes=header.attributes | TIMESTAMP_TYPE_FLAG,
                    max_timestamp=m.log_append_timestamp,
                )
            else:
                header = replace(header, base_offset=m.base_offset)
            out.append(stored_batch(buf, 0, step.offset, end, header))
        return out
