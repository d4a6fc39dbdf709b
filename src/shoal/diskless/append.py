"""The diskless produce path of KIP-1163: buffer -> WAL segment -> upload -> commit.

One appender per broker collects the validated batches of every producer and
partition into the active buffer. The buffer closes when the commit interval
elapses or it reaches the size limit; its segment is uploaded under a fresh key
(several uploads may run at once) and committed to the Batch Coordinator strictly
in the order the segments were closed. Only then are the produce requests in the
segment answered: an answer means the data is in object storage and its offsets
are in the coordinator.

Early close: waiting out the whole interval only adds latency when no more data is coming for the
open segment soon, and producers wait on it: an idempotent producer (the default of Java and
kafka-python; librdkafka's with ``enable.idempotence=true``) has at most
``PRODUCE_PIPELINE_DEPTH`` (5) Produce requests in the broker, and librdkafka was measured keeping
one per partition, so a producer blocked on this segment sends
nothing until it commits (p50 445 ms / p99 974 ms at 5,000 records/s with the 250 ms default;
3.5 MB/s for one idempotent producer on one partition). The open segment therefore closes
before the interval when it has been ``commit interval / EARLY_CLOSE_FRACTION`` since the
previous close and either

- every connection with data in it has its most pipelined Produce requests in flight (and it
  holds nothing else but transaction markers, which nobody adds to): no more can come; or
- no batch has joined it for ``commit interval / QUIET_FRACTION``: its producers are waiting
  for it, or have nothing to send.

Group close: while no segment is uploading or committing, a segment holding at least
``diskless.append.buffer.max.bytes / GROUP_CLOSE_FRACTION`` closes at once, and when the last
upload in flight commits, the open segment closes if it holds that much. A fast producer's
window (librdkafka: 5 requests of up to 1 MB) then spreads over two segments, one uploading while
the next fills, instead of all of it waiting on one segment in lockstep (measured: one idempotent
producer, 6 partitions, local storage, 77-105 -> 135-155 MB/s).

One hop: on a store whose upload can block a worker thread (the local directory), the layout,
the upload and, when every earlier segment is settled, the commit run in one worker-thread call
instead of three, since on a busy machine each hop waits for a core. Where a segment's time goes
is in ``kafka_diskless_segment_stage_time_seconds`` (fill, build, upload, commit_wait, commit).

So a broker writes at most ``EARLY_CLOSE_FRACTION / commit interval`` objects a second (20/s at
the 250 ms default) plus one per ``buffer.max.bytes / GROUP_CLOSE_FRACTION`` bytes written (512 KiB
at the 4 MiB default: group and size-triggered closes), and a steady stream of batches that never
pauses for the quiet time gets one object per interval.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from shoal.coordinator.api import (
    BatchCoordinator,
    CommitBatchRequest,
    CommitBatchResponse,
    TopicIdPartition,
    TxnControl,
)
from shoal.diskless.cache import RangeCache
from shoal.objects.storage import BlockingUploads, ObjectStorage
from shoal.observability.metrics import BrokerMetrics
from shoal.protocol.errors import ErrorCode, KafkaError
from shoal.protocol.produce_pipeline import ProducePipeline, current_pipeline
from shoal.records.batch import BatchHeader
from shoal.records.types import TimestampType
from shoal.records.wal import PlacedBatch, build_segment, new_wal_key

log = logging.getLogger(__name__)

MAX_INFLIGHT_SEGMENTS = 4
#: An early close (see the module docstring) comes at least this fraction of the commit interval
#: after the previous close: the bound on objects per second.
EARLY_CLOSE_FRACTION = 5
#: A segment no batch joined for this fraction of the commit interval may close early.
QUIET_FRACTION = 10
#: With no segment in flight, a segment of this fraction of ``buffer.max.bytes`` closes at once:
#: 512 KiB at the 4 MiB default, below librdkafka's default ``batch.size`` (1,000,000 bytes), so one
#: full batch alone does not wait for an early close (at 1 MiB it did, and a saturating producer's
#: last requests drained at one per ``interval / 5``: 20 MB/s).
GROUP_CLOSE_FRACTION = 8

#: Segments of at least this many bytes are laid out on a worker thread: CPython copies a large
#: ``bytes.join`` without the GIL, so the event loop goes on serving requests meanwhile.
BUILD_OFF_LOOP_BYTES = 1 << 20


@dataclass(slots=True)
class _Entry:
    partition: TopicIdPartition
    data: bytes | memoryview
    header: BatchHeader
    timestamp_type: TimestampType
    future: asyncio.Future[CommitBatchResponse]
    control: TxnControl | None = None


@dataclass(slots=True)
class _Segment:
    entries: list[_Entry] = field(default_factory=list)
    size: int = 1
    #: When the previous segment closed (this one became the open one).
    opened_at: float = field(default_factory=time.monotonic)
    #: When the first and the last batch joined.
    first_append: float = 0.0
    last_append: float = 0.0
    #: Its place in close order (1, 2, ...): commits follow it.
    seq: int = 0
    #: When it closed, its upload started and ended, and its commit started and ended
    #: (``kafka_diskless_segment_stage_time_seconds``).
    closed_at: float = 0.0
    upload_started: float = 0.0
    uploaded_at: float = 0.0
    commit_started: float = 0.0
    committed_at: float = 0.0
    #: Set by a commit made in the upload's own worker thread (``_ship_blocking``).
    responses: list[CommitBatchResponse] | None = None
    commit_error: Exception | None = None
    #: The connections whose Produce requests have batches here (by id).
    sources: dict[int, ProducePipeline] = field(default_factory=dict)
    #: A batch came from no known connection: whether more follows cannot be told.
    open_ended: bool = False

    def waits_for_nothing(self) -> bool:
        """Every source is at its in-flight limit (markers have none): no more data can come."""
        return not self.open_ended and all(p.is_full() for p in self.sources.values())


class Appender:
    """Buffers batches from all producers and partitions into shared WAL segments."""

    def __init__(
        self,
        storage: ObjectStorage,
        coordinator: BatchCoordinator,
        run_blocking: Callable[..., Awaitable],
        broker_id: int,
        commit_interval_ms: int,
        buffer_max_bytes: int,
        cache: RangeCache,
        on_committed: Callable[[dict[TopicIdPartition, int]], None],
        metrics: BrokerMetrics,
    ) -> None:
        self._storage = storage
        #: The store's blocking upload, if it has one: then a segment is laid out, uploaded and,
        #: when first in line, committed in one worker-thread hop (``BlockingUploads``).
        self._upload_blocking = storage.upload_blocking if isinstance(storage, BlockingUploads) else None
        self._coordinator = coordinator
        self._run_blocking = run_blocking
        self._broker_id = broker_id
        self._interval = commit_interval_ms / 1000
        self._max_bytes = buffer_max_bytes
        self._group_close_bytes = buffer_max_bytes // GROUP_CLOSE_FRACTION
        self._cache = cache
        self._on_committed = on_committed
        self._active = _Segment()
        self._timer: asyncio.TimerHandle | None = None
        self._commit_queue: asyncio.Queue[tuple[_Segment, str, asyncio.Task[None]] | None] = asyncio.Queue()
        self._slots = asyncio.Semaphore(MAX_INFLIGHT_SEGMENTS)
        self._committer: asyncio.Task[None] | None = None
        self._closed = False
        self._metrics = metrics
        self._early_check: asyncio.Handle | asyncio.TimerHandle | None = None
        #: The pending check runs this tick (``call_soon``), not later (uvloop's handles are not
        #: asyncio's classes, so this is tracked rather than told from the handle's type).
        self._early_check_soon = False
        #: Segments closed and not yet committed (or failed).
        self._in_flight = 0
        #: The ``seq`` of the last segment closed, and of the last one committed or failed.
        self._closed_seq = 0
        self._settled_seq = 0

    def start(self) -> None:
        self._committer = asyncio.create_task(self._commit_loop(), name="diskless-committer")

    def append(
        self,
        partition: TopicIdPartition,
        data: bytes | memoryview,
        header: BatchHeader,
        timestamp_type: TimestampType,
        control: TxnControl | None = None,
    ) -> asyncio.Future[CommitBatchResponse]:
        """Add one validated batch to the active segment; the future completes at commit.
        ``control``: the batch is a transaction marker (the coordinator ends the transaction).

        Synchronous on purpose: the order of calls is the order of the batches in the
        segment, which keeps a producer's pipelined requests in order.
        """
        if self._closed:
            raise KafkaError(ErrorCode.not_leader_or_follower, "broker is shutting down")
        future: asyncio.Future[CommitBatchResponse] = asyncio.get_running_loop().create_future()
        segment = self._active
        now = time.monotonic()
        if not segment.entries:
            segment.first_append = now
        segment.entries.append(_Entry(partition, data, header, timestamp_type, future, control))
        segment.size += len(data)
        segment.last_append = now
        if control is None:
            pipeline = current_pipeline.get()
            if pipeline is None:
                segment.open_ended = True
            else:
                segment.sources[id(pipeline)] = pipeline
        if segment.size >= self._max_bytes or (self._in_flight == 0 and segment.size >= self._group_close_bytes):
            self._close_active()
            return future
        loop = asyncio.get_running_loop()
        if self._timer is None:
            self._timer = loop.call_later(self._interval, self._close_active)
        if not self._early_check_soon:
            # Check again (its producers may be at their limit now), after the caller's other
            # batches of this request (same tick) are in too.
            if self._early_check is not None:
                self._early_check.cancel()
            self._early_check = loop.call_soon(self._maybe_close_early)
            self._early_check_soon = True
        return future

    def _maybe_close_early(self) -> None:
        """Close the active segment now if it may close early (module docstring), or check again
        when it may."""
        self._early_check = None
        self._early_check_soon = False
        segment = self._active
        if not segment.entries:
            return
        now = time.monotonic()
        at = segment.opened_at + self._interval / EARLY_CLOSE_FRACTION
        if not segment.waits_for_nothing():
            at = max(at, segment.last_append + self._interval / QUIET_FRACTION)
        if at > now:
            self._early_check = asyncio.get_running_loop().call_later(at - now, self._maybe_close_early)
            return
        self._close_active()

    def _close_active(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._early_check is not None:
            self._early_check.cancel()
            self._early_check = None
        self._early_check_soon = False
        segment = self._active
        if not segment.entries:
            return
        self._active = _Segment()
        self._in_flight += 1
        self._closed_seq += 1
        segment.seq = self._closed_seq
        segment.closed_at = time.monotonic()
        self._metrics.segment_stage("fill", segment.closed_at - segment.first_append)
        key = new_wal_key()
        upload = asyncio.create_task(self._upload(segment, key), name=f"upload {key}")
        self._commit_queue.put_nowait((segment, key, upload))

    async def _upload(self, segment: _Segment, key: str) -> None:
        async with self._slots:
            parts = [(e.partition, e.data) for e in segment.entries]
            if self._upload_blocking is not None:
                # Every segment closed before this one is settled: nothing may commit before it,
                # so its commit can follow the upload in the same thread.
                commit = self._settled_seq == segment.seq - 1
                data, placed = await self._run_blocking(self._ship_blocking, segment, key, parts, commit)
            else:
                if segment.size >= BUILD_OFF_LOOP_BYTES:
                    data, placed = await self._run_blocking(build_segment, parts)
                else:
                    data, placed = build_segment(parts)
                self._place(segment, placed)
                segment.upload_started = time.monotonic()
                await self._storage.upload(key, data)
                segment.uploaded_at = time.monotonic()
            elapsed = segment.uploaded_at - segment.upload_started
            self._metrics.segment_stage("build", segment.upload_started - segment.closed_at)
            self._metrics.object_uploaded(len(data), elapsed)
            self._metrics.segment_stage("upload", elapsed)
            log.debug("uploaded %s (%d bytes, %d batches) in %.1f ms", key, len(data), len(placed), elapsed * 1000)
            self._cache.put(key, 0, data)

    @staticmethod
    def _place(segment: _Segment, placed: list[PlacedBatch[TopicIdPartition]]) -> None:
        """Reorder entries to their place in the object so commit requests follow the layout."""
        segment.entries = [segment.entries[p.index] for p in placed]

    def _ship_blocking(
        self, segment: _Segment, key: str, parts: list[tuple[TopicIdPartition, bytes | memoryview]], commit: bool
    ) -> tuple[bytes, list[PlacedBatch[TopicIdPartition]]]:
        """In a worker thread: lay out, upload and, if ``commit``, commit the segment. A commit
        failure is kept in the segment (the commit loop reports it); an upload failure raises."""
        data, placed = build_segment(parts)
        self._place(segment, placed)
        segment.upload_started = time.monotonic()
        assert self._upload_blocking is not None
        self._upload_blocking(key, data)
        segment.uploaded_at = time.monotonic()
        if commit:
            segment.commit_started = segment.uploaded_at
            requests, size = self._commit_requests(segment)
            try:
                segment.responses = self._coordinator.commit_file(key, self._broker_id, size, requests)
            except Exception as exc:
                segment.commit_error = exc
            segment.committed_at = time.monotonic()
        return data, placed

    async def _commit_loop(self) -> None:
        while True:
            item = await self._commit_queue.get()
            if item is None:
                return
            segment, key, upload = item
            try:
                await upload
            except Exception as exc:
                self._metrics.object_upload_failed()
                log.warning("upload of WAL segment %s failed: %s; failing %d batches", key, exc, len(segment.entries))
                self._fail(segment, KafkaError(ErrorCode.kafka_storage_error, f"object storage upload failed: {exc}"))
            else:
                await self._commit(segment, key)
            self._in_flight -= 1
            self._settled_seq = segment.seq
            if self._in_flight == 0 and self._active.size >= self._group_close_bytes:
                self._close_active()  # a group close (module docstring)

    async def _commit(self, segment: _Segment, key: str) -> None:
        """Commit the uploaded segment (unless its upload's thread did) and answer its batches."""
        if segment.committed_at == 0.0:
            segment.commit_started = time.monotonic()
            requests, size = self._commit_requests(segment)
            try:
                segment.responses = await self._run_blocking(
                    self._coordinator.commit_file, key, self._broker_id, size, requests
                )
            except Exception as exc:
                segment.commit_error = exc
            segment.committed_at = time.monotonic()
        self._metrics.segment_stage("commit_wait", segment.commit_started - segment.uploaded_at)
        responses = segment.responses
        if responses is None:
            # The object may or may not be committed: leave it for the garbage collector,
            # and let (idempotent) producers retry.
            exc = segment.commit_error
            self._metrics.commit_failed()
            log.warning("commit of WAL segment %s failed: %s; failing %d batches", key, exc, len(segment.entries))
            self._fail(segment, KafkaError(ErrorCode.request_timed_out, f"batch coordinator commit failed: {exc}"))
            return
        elapsed = segment.committed_at - segment.commit_started
        self._metrics.file_committed(elapsed, len(responses))
        self._metrics.segment_stage("commit", elapsed)
        for entry, response in zip(segment.entries, responses, strict=True):
            if not entry.future.done():
                entry.future.set_result(response)
        ends: dict[TopicIdPartition, int] = {}
        for response in responses:
            if response.errors == ErrorCode.none and response.assigned_base_offset >= 0:
                r = response.request
                end = response.assigned_base_offset + r.last_offset - r.base_offset + 1
                ends[r.topic_id_partition] = max(ends.get(r.topic_id_partition, 0), end)
        self._on_committed(ends)

    @staticmethod
    def _commit_requests(segment: _Segment) -> tuple[list[CommitBatchRequest], int]:
        """The commit requests of the segment's batches, in object order, and the object's size."""
        requests = []
        position = 1
        for index, entry in enumerate(segment.entries):
            h = entry.header
            requests.append(
                CommitBatchRequest(
                    request_id=index,
                    topic_id_partition=entry.partition,
                    byte_offset=position,
                    size=len(entry.data),
                    base_offset=h.base_offset,
                    last_offset=h.last_offset,
                    batch_max_timestamp=h.max_timestamp,
                    message_timestamp_type=entry.timestamp_type,
                    producer_id=h.producer_id,
                    producer_epoch=h.producer_epoch,
                    base_sequence=h.base_sequence,
                    last_sequence=h.last_sequence,
                    is_transactional=h.is_transactional,
                    control=entry.control,
                )
            )
            position += len(entry.data)
        return requests, position

    @staticmethod
    def _fail(segment: _Segment, error: KafkaError) -> None:
        for entry in segment.entries:
            if not entry.future.done():
                entry.future.set_exception(error)
                entry.future.exception()  # retrieved: callers may have gone (acks=0)

    async def close(self) -> None:
        """Flush the active segment and finish every upload and commit already started."""
        self._closed = True
        self._close_active()
        self._commit_queue.put_nowait(None)
        if self._committer is not None:
            await self._committer
