"""The diskless produce and fetch paths together: Appender -> WAL object -> commit -> DisklessReader.

Real parts: MemoryObjectStorage, a SqliteBatchCoordinator on a file in tmp_path, blocking calls
run in a worker thread. Faults are injected by small MemoryObjectStorage subclasses.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from shoal.coordinator.api import (
    CommitBatchResponse,
    CreateTopicAndPartitionsRequest,
    FindBatchRequest,
    TopicIdPartition,
)
from shoal.diskless.append import Appender
from shoal.diskless.cache import RangeCache
from shoal.diskless.read import DisklessReader
from shoal.objects.local import LocalObjectStorage
from shoal.objects.memory import MemoryObjectStorage
from shoal.objects.storage import ObjectStorage, StorageBackendError
from shoal.observability.metrics import SEGMENT_STAGES, BrokerMetrics
from shoal.partitions.notify import CommitNotifier
from shoal.protocol.errors import ErrorCode, KafkaError
from shoal.records.batch import read_header
from shoal.records.codec import Record, build_batch, decode_batch, iter_batches
from shoal.records.types import TimestampType
from shoal.records.wal import iter_segment
from shoal.store.sqlite.coordinator import SqliteBatchCoordinator

TOPIC = uuid.UUID("0f0f0f0f-1111-2222-3333-444444444444")
APPEND_TIME = 1_700_000_000_000
MiB = 1024 * 1024


def tp(partition: int) -> TopicIdPartition:
    return TopicIdPartition(TOPIC, partition, "orders")


async def run_blocking(fn: Callable, *args):
    return await asyncio.to_thread(fn, *args)


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "shoal.db"


@pytest.fixture
def coordinator(db: Path):
    c = SqliteBatchCoordinator(db, clock=lambda: APPEND_TIME)
    c.create_topic_and_partitions({CreateTopicAndPartitionsRequest(TOPIC, "orders", 3)})
    yield c
    c.close()


def new_appender(
    storage: ObjectStorage,
    coordinator: SqliteBatchCoordinator,
    *,
    interval_ms: int = 20,
    max_bytes: int = MiB,
    cache: RangeCache | None = None,
    on_committed: Callable[[dict[TopicIdPartition, int]], None] = lambda partitions: None,
) -> Appender:
    appender = Appender(
        storage,
        coordinator,
        run_blocking,
        1,
        interval_ms,
        max_bytes,
        cache or RangeCache(64 * MiB),
        on_committed,
        BrokerMetrics(),
    )
    appender.start()
    return appender


def counter(component: Appender | DisklessReader, name: str) -> float:
    """A counter's value in the component's metrics registry."""
    return component._metrics.registry.get_sample_value(f"{name}_total") or 0.0


def make_batch(*values: bytes, key: bytes = b"k") -> bytes:
    return build_batch([(key, v, (), 1_000 + i) for i, v in enumerate(values)])


def produce(
    appender: Appender,
    partition: int,
    *values: bytes,
    key: bytes = b"k",
    ts_type: TimestampType = TimestampType.CREATE_TIME,
) -> asyncio.Future[CommitBatchResponse]:
    data = make_batch(*values, key=key)
    return appender.append(tp(partition), data, read_header(data), ts_type)


def decode_all(records: bytes) -> list[tuple[int, list[Record]]]:
    """(base offset, records) of every batch in a fetched records blob."""
    out = []
    for position, _ in iter_batches(records):
        h, recs = decode_batch(records, position)
        out.append((h.base_offset, recs))
    return out


async def wait_for(future, timeout: float = 5.0):
    return await asyncio.wait_for(asyncio.shield(future), timeout)


class TimedUploads(MemoryObjectStorage):
    """Notes when each upload starts (a segment's close)."""

    def __init__(self) -> None:
        super().__init__()
        self.started: list[float] = []

    async def upload(self, key: str, data: bytes | memoryview) -> None:
        self.started.append(time.monotonic())
        await super().upload(key, data)


class GatedUploads(MemoryObjectStorage):
    """Uploads wait for ``gate``; ``waiting`` lists the keys that started."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = asyncio.Event()
        self.started = asyncio.Event()
        self.waiting: list[str] = []

    async def upload(self, key: str, data: bytes | memoryview) -> None:
        self.waiting.append(key)
        self.started.set()
        await self.gate.wait()
        await super().upload(key, data)


class SlowFirstUpload(MemoryObjectStorage):
    """The first object's upload takes longer than the later ones."""

    def __init__(self, delay: float) -> None:
        super().__init__()
        self.delay = delay
        self.first_key: str | None = None
        self.finished: list[str] = []

    async def upload(self, key: str, data: bytes | memoryview) -> None:
        if self.first_key is None:
            self.first_key = key
            await asyncio.sleep(self.delay)
        await super().upload(key, data)
        self.finished.append(key)


class SlowFirstLocalUpload(LocalObjectStorage):
    """``SlowFirstUpload`` on the local directory store, whose blocking upload the appender uses."""

    def __init__(self, root: Path, delay: float) -> None:
        super().__init__(root)
        self.delay = delay
        self.first_key: str | None = None
        self.finished: list[str] = []

    def upload_blocking(self, key: str, data: bytes | memoryview) -> None:
        if self.first_key is None:
            self.first_key = key
            time.sleep(self.delay)
        super().upload_blocking(key, data)
        self.finished.append(key)


class FailingUploads(MemoryObjectStorage):
    """Uploads fail while ``failures`` is positive."""

    def __init__(self, failures: int) -> None:
        super().__init__()
        self.failures = failures

    async def upload(self, key: str, data: bytes | memoryview) -> None:
        if self.failures > 0:
            self.failures -= 1
            raise StorageBackendError("503 Slow Down")
        await super().upload(key, data)


# --------------------------------------------------------------------------- produce


async def test_batches_of_several_partitions_in_one_interval_share_one_object(coordinator) -> None:
    storage = MemoryObjectStorage()
    appender = new_appender(storage, coordinator, interval_ms=50)
    sent = [(0, b"a0"), (1, b"b0"), (0, b"a1"), (2, b"c0"), (1, b"b1")]
    futures = [produce(appender, p, v) for p, v in sent]
    responses = await asyncio.wait_for(asyncio.gather(*futures), 5)
    await appender.close()

    assert [r.errors for r in responses] == [ErrorCode.none] * 5
    assert [r.assigned_base_offset for r in responses] == [0, 0, 1, 0, 1]
    assert [r.request.topic_id_partition for r in responses] == [tp(p) for p, _ in sent]
    objects = await storage.list()
    assert len(objects) == 1 and objects[0].key.startswith("wal/")
    data = await storage.fetch(objects[0].key)
    assert data[0] == 0
    # Grouped by partition in the object: p0, p0, p1, p1, p2.
    positions = [position for position, _ in iter_segment(data)]
    values = [decode_batch(data, pos)[1][0].value for pos in positions]
    assert values == [b"a0", b"a1", b"b0", b"b1", b"c0"]
    # The coordinator points at exactly those bytes.
    found = coordinator.find_batches([FindBatchRequest(tp(p), 0, MiB) for p in range(3)], 10 * MiB)
    expected = {0: [b"a0", b"a1"], 1: [b"b0", b"b1"], 2: [b"c0"]}
    for partition, response in enumerate(found):
        values = []
        for b in response.batches:
            m = b.metadata
            assert b.object_key == objects[0].key
            values.append(decode_batch(data[m.byte_offset : m.byte_offset + m.byte_size])[1][0].value)
        assert values == expected[partition]
    assert counter(appender, "kafka_diskless_object_uploads") == counter(appender, "kafka_diskless_commits") == 1
    assert counter(appender, "kafka_diskless_object_upload_bytes") == len(data)
    # Each stage of the segment's way is timed once; it filled until its early close.
    registry = appender._metrics.registry
    stage = "kafka_diskless_segment_stage_time_seconds"
    for name in SEGMENT_STAGES:
        assert registry.get_sample_value(f"{stage}_count", {"stage": name}) == 1, name
    assert registry.get_sample_value(f"{stage}_sum", {"stage": "fill"}) > 0


async def test_full_buffer_closes_the_segment_before_the_interval(coordinator) -> None:
    storage = GatedUploads()
    size = len(make_batch(b"x" * 100))
    appender = new_appender(storage, coordinator, interval_ms=60_000, max_bytes=4 * size)
    holder = produce(appender, 0, b"x" * 100)  # a group close: this segment is in flight ...
    await storage.started.wait()
    first = produce(appender, 0, b"x" * 100)  # ... so these only close on size
    second = produce(appender, 1, b"x" * 100)
    third = produce(appender, 1, b"x" * 100)
    assert len(storage.waiting) == 1
    fourth = produce(appender, 0, b"x" * 100)  # 1 + 4 * size >= max_bytes: closes now
    fifth = produce(appender, 0, b"x")  # starts the next segment, smaller than max_bytes / 8
    await asyncio.sleep(0.01)  # the upload task starts
    assert len(storage.waiting) == 2
    storage.gate.set()
    await wait_for(asyncio.gather(holder, first, second, third, fourth))
    assert len(await storage.list()) == 2
    await asyncio.sleep(0.05)
    assert not fifth.done()  # holds less than max_bytes / 8 and the pipeline is idle: it waits
    await appender.close()
    assert fifth.result().assigned_base_offset == 3
    assert len(await storage.list()) == 3


async def test_a_group_close_when_no_segment_is_in_flight(coordinator) -> None:
    """With nothing uploading or committing, a segment of buffer.max.bytes / 8 closes at once; one
    that reaches that size while another is in flight closes when that one commits."""
    storage = GatedUploads()
    size = len(make_batch(b"x" * 100))
    appender = new_appender(storage, coordinator, interval_ms=60_000, max_bytes=4 * size)
    first = produce(appender, 0, b"x" * 100)
    await storage.started.wait()  # closed at once: not the 60 s interval
    second = produce(appender, 1, b"x" * 100)
    await asyncio.sleep(0.05)
    assert len(storage.waiting) == 1  # the second waits while the first is in flight
    storage.gate.set()
    await wait_for(asyncio.gather(first, second))  # ... and closes once the first commits
    assert len(await storage.list()) == 2
    assert first.result().assigned_base_offset == 0 and second.result().assigned_base_offset == 0
    await appender.close()


async def test_one_librdkafka_sized_batch_alone_closes_at_once(coordinator) -> None:
    """librdkafka's default batch.size is 1,000,000 bytes: at the default buffer.max.bytes (4 MiB)
    one such batch with nothing in flight is a group close, not a wait for the early close (a
    saturating producer's last requests came one per interval / 5 when the threshold was 1 MiB)."""
    storage = GatedUploads()
    appender = new_appender(storage, coordinator, interval_ms=60_000, max_bytes=4 * MiB)
    data = make_batch(*[b"x" * 1024] * 960)
    assert 900_000 < len(data) <= 1_000_000
    first = appender.append(tp(0), data, read_header(data), TimestampType.CREATE_TIME)
    await wait_for(storage.started.wait())  # closed at once: not the 60 s interval
    storage.gate.set()
    await wait_for(first)
    await appender.close()


class FakePipeline:
    """A connection as the appender sees it: at its in-flight limit or not."""

    def __init__(self, full: bool) -> None:
        self.full = full

    def is_full(self) -> bool:
        return self.full


async def test_a_segment_closes_early_once_every_producer_in_it_is_at_its_in_flight_limit(coordinator) -> None:
    """A segment whose connections can send no more closes interval / 5 after the previous close,
    not after the interval; one with a connection that still could and keeps sending waits for
    the interval."""
    from shoal.protocol.produce_pipeline import current_pipeline

    storage = MemoryObjectStorage()
    appender = new_appender(storage, coordinator, interval_ms=500)
    blocked, busy = FakePipeline(full=True), FakePipeline(full=False)
    token = current_pipeline.set(blocked)
    try:
        await asyncio.sleep(0.15)  # interval / 5 since the (initial) previous close
        started = time.monotonic()
        early = produce(appender, 0, b"b")
        await wait_for(early)
        early_s = time.monotonic() - started
        # A stream that never pauses for interval / 10 (50 ms): the interval decides.
        current_pipeline.set(busy)
        first = produce(appender, 0, b"c")
        for i in range(15):
            await asyncio.sleep(0.02)
            assert not first.done(), f"closed after {(i + 1) * 20} ms of a steady stream"
            produce(appender, 1, b"d")
        await wait_for(first)
    finally:
        current_pipeline.reset(token)
    assert early_s < 0.4  # at once + the commit, not the 500 ms interval
    await appender.close()


async def test_a_quiet_segment_closes_early(coordinator) -> None:
    """No batch joined for interval / 10: its producers wait for it (librdkafka keeps one request
    per partition in flight), so it closes without waiting for the interval."""
    from shoal.protocol.produce_pipeline import current_pipeline

    storage = TimedUploads()
    appender = new_appender(storage, coordinator, interval_ms=2_000)
    token = current_pipeline.set(FakePipeline(full=False))
    try:
        await asyncio.sleep(0.45)  # interval / 5 since the previous close
        started = time.monotonic()
        await wait_for(produce(appender, 0, b"q"))
        quiet_s = time.monotonic() - started
        # Right after a close, the next one waits for interval / 5 (the bound on objects a second).
        await wait_for(produce(appender, 0, b"r"))
    finally:
        current_pipeline.reset(token)
    assert quiet_s < 1.5  # 200 ms quiet + the commit, not the 2 s interval
    first, second = storage.started
    assert second - first >= 0.35  # interval / 5 = 400 ms apart (less scheduling slack)
    await appender.close()


async def test_a_segment_of_transaction_markers_only_closes_early(coordinator) -> None:
    storage = MemoryObjectStorage()
    appender = new_appender(storage, coordinator, interval_ms=4_000)
    from shoal.coordinator.api import TxnControl
    from shoal.records.codec import build_control_batch

    marker = build_control_batch(False, producer_id=1, producer_epoch=0)
    future = appender.append(tp(0), marker, read_header(marker), TimestampType.CREATE_TIME, TxnControl(False, 0))
    await wait_for(future, timeout=3)  # interval / 5 = 0.8 s, well before the 4 s interval
    await appender.close()


@pytest.mark.parametrize("store", ["memory", "local"])
async def test_commit_order_is_close_order_even_if_a_later_upload_finishes_first(
    coordinator, tmp_path: Path, store: str
) -> None:
    # The local store uploads (and commits, when first in line) in the worker thread itself.
    storage = SlowFirstUpload(delay=0.3) if store == "memory" else SlowFirstLocalUpload(tmp_path / "objects", 0.3)
    appender = new_appender(storage, coordinator, max_bytes=1)  # every batch closes its own segment
    first = produce(appender, 0, b"first")
    second = produce(appender, 0, b"second")
    await asyncio.sleep(0.15)
    assert len(storage.finished) == 1 and storage.finished[0] != storage.first_key  # second uploaded
    assert not second.done()  # but it is not committed before the first segment
    r1, r2 = await wait_for(asyncio.gather(first, second))
    await appender.close()
    assert storage.finished[1] == storage.first_key
    assert (r1.assigned_base_offset, r2.assigned_base_offset) == (0, 1)
    [found] = coordinator.find_batches([FindBatchRequest(tp(0), 0, MiB)], MiB)
    assert [(b.metadata.base_offset, b.object_key) for b in found.batches] == [
        (0, storage.first_key),
        (1, storage.finished[0]),
    ]


async def test_a_local_segment_is_laid_out_uploaded_and_committed_in_one_worker_hop(
    coordinator, tmp_path: Path
) -> None:
    storage = LocalObjectStorage(tmp_path / "objects")
    hops: list[str] = []

    async def counting(fn: Callable, *args):
        hops.append(fn.__name__)
        return await asyncio.to_thread(fn, *args)

    appender = Appender(storage, coordinator, counting, 1, 20, MiB, RangeCache(MiB), lambda _: None, BrokerMetrics())
    appender.start()
    responses = await wait_for(asyncio.gather(produce(appender, 0, b"a"), produce(appender, 1, b"b")))
    await appender.close()
    assert [(r.errors, r.assigned_base_offset) for r in responses] == [(ErrorCode.none, 0)] * 2
    assert hops == ["_ship_blocking"]  # no separate build or commit_file hop
    [obj] = await storage.list()
    found = coordinator.find_batches([FindBatchRequest(tp(p), 0, MiB) for p in (0, 1)], MiB)
    assert [[b.object_key for b in f.batches] for f in found] == [[obj.key], [obj.key]]
    registry = appender._metrics.registry
    for name in SEGMENT_STAGES:
        assert registry.get_sample_value("kafka_diskless_segment_stage_time_seconds_count", {"stage": name}) == 1
    assert counter(appender, "kafka_diskless_commits") == 1


async def test_upload_failure_fails_the_segment_and_commits_nothing(coordinator) -> None:
    storage = FailingUploads(failures=1)
    appender = new_appender(storage, coordinator)
    futures = [produce(appender, 0, b"a"), produce(appender, 1, b"b")]
    results = await wait_for(asyncio.gather(*futures, return_exceptions=True))
    for result in results:
        assert isinstance(result, KafkaError)
        assert result.code == ErrorCode.kafka_storage_error and result.retriable
        assert "503 Slow Down" in result.message
    assert await storage.list() == []
    assert coordinator.get_log_info(TOPIC, 0)[1] == coordinator.get_log_info(TOPIC, 1)[1] == 0
    assert counter(appender, "kafka_diskless_object_upload_errors") == 1 and counter(appender, "kafka_diskless_commits") == 0

    # The appender carries on: the retry gets the offsets the failed attempt never took.
    retry = await wait_for(produce(appender, 0, b"a"))
    await appender.close()
    assert (retry.errors, retry.assigned_base_offset) == (ErrorCode.none, 0)


@pytest.mark.parametrize("store", ["memory", "local"])  # local: the commit fails in the upload's hop
async def test_commit_failure_answers_request_timed_out(db: Path, coordinator, tmp_path: Path, store: str) -> None:
    storage = MemoryObjectStorage() if store == "memory" else LocalObjectStorage(tmp_path / "objects")
    appender = new_appender(storage, coordinator)
    coordinator.close()  # every commit_file now raises
    future = produce(appender, 0, b"a")
    with pytest.raises(KafkaError) as info:
        await wait_for(future)
    await appender.close()
    assert info.value.code == ErrorCode.request_timed_out and info.value.retriable
    assert counter(appender, "kafka_diskless_commit_errors") == 1
    assert len(await storage.list()) == 1  # uploaded, left for garbage collection
    reopened = SqliteBatchCoordinator(db)
    try:
        assert reopened.get_log_info(TOPIC, 0)[1] == 0
    finally:
        reopened.close()


async def test_close_flushes_the_active_segment_and_refuses_new_batches(coordinator) -> None:
    storage = MemoryObjectStorage()
    appender = new_appender(storage, coordinator, interval_ms=60_000)
    future = produce(appender, 2, b"last words")
    await asyncio.sleep(0.02)
    assert not future.done()
    await asyncio.wait_for(appender.close(), 5)
    assert future.result().assigned_base_offset == 0
    assert len(await storage.list()) == 1
    with pytest.raises(KafkaError) as info:
        produce(appender, 2, b"too late")
    assert info.value.code == ErrorCode.not_leader_or_follower


# --------------------------------------------------------------------------- fetch


async def produce_sample(appender: Appender) -> None:
    """p0: offsets 0-1 (one batch) and 2-4 (another, in a second object); p1: offset 0."""
    await wait_for(asyncio.gather(produce(appender, 0, b"v0", b"v1", key=b"k0"), produce(appender, 1, b"w0")))
    await wait_for(produce(appender, 0, b"v2", b"v3", b"v4", key=b"k1"))


async def test_read_returns_batches_with_assigned_offsets(coordinator) -> None:
    storage = MemoryObjectStorage()
    appender = new_appender(storage, coordinator)
    await produce_sample(appender)
    await appender.close()
    reader = DisklessReader(storage, coordinator, run_blocking, RangeCache(MiB), BrokerMetrics())

    p0, p1 = await reader.read([(tp(0), 0, MiB), (tp(1), 0, MiB)], 10 * MiB)
    assert (p0.error, p0.high_watermark, p0.log_start_offset) == (ErrorCode.none, 5, 0)
    batches = decode_all(p0.records)
    assert [base for base, _ in batches] == [0, 2]
    records = [r for _, recs in batches for r in recs]
    assert [r.offset for r in records] == [0, 1, 2, 3, 4]
    assert [r.value for r in records] == [b"v0", b"v1", b"v2", b"v3", b"v4"]
    assert [r.key for r in records] == [b"k0", b"k0", b"k1", b"k1", b"k1"]
    assert [r.timestamp for r in records] == [1000, 1001, 1000, 1001, 1002]  # CreateTime kept
    assert (p1.error, p1.high_watermark) == (ErrorCode.none, 1)
    assert [(r.offset, r.value) for _, recs in decode_all(p1.records) for r in recs] == [(0, b"w0")]

    # From an offset inside the second batch: the whole batch comes back, as Kafka does.
    [mid] = await reader.read([(tp(0), 3, MiB)], MiB)
    assert [base for base, _ in decode_all(mid.records)] == [2]


async def test_read_honours_partition_and_response_byte_limits(coordinator) -> None:
    storage = MemoryObjectStorage()
    appender = new_appender(storage, coordinator)
    await produce_sample(appender)
    await appender.close()
    reader = DisklessReader(storage, coordinator, run_blocking, RangeCache(MiB), BrokerMetrics())
    first_size = len(make_batch(b"v0", b"v1", key=b"k0"))

    [one] = await reader.read([(tp(0), 0, first_size)], MiB)
    assert [base for base, _ in decode_all(one.records)] == [0] and len(one.records) == first_size
    [tiny] = await reader.read([(tp(0), 0, 1)], MiB)  # the first batch always comes, to make progress
    assert [base for base, _ in decode_all(tiny.records)] == [0]

    # The response limit: p0's first batch uses it all, p1 gets nothing (but no error).
    p0, p1 = await reader.read([(tp(0), 0, MiB), (tp(1), 0, MiB)], first_size)
    assert [base for base, _ in decode_all(p0.records)] == [0]
    assert (p1.error, p1.records, p1.high_watermark) == (ErrorCode.none, b"", 1)


async def test_read_errors(coordinator) -> None:
    storage = MemoryObjectStorage()
    appender = new_appender(storage, coordinator)
    await produce_sample(appender)
    await appender.close()
    reader = DisklessReader(storage, coordinator, run_blocking, RangeCache(MiB), BrokerMetrics())

    past, at_end, empty, unknown = await reader.read(
        [(tp(0), 6, MiB), (tp(0), 5, MiB), (tp(2), 0, MiB), (TopicIdPartition(uuid.uuid4(), 0), 0, MiB)], MiB
    )
    assert (past.error, past.records, past.high_watermark, past.log_start_offset) == (
        ErrorCode.offset_out_of_range, b"", 5, 0,
    )
    assert (at_end.error, at_end.records, at_end.high_watermark) == (ErrorCode.none, b"", 5)
    assert (empty.error, empty.records, empty.high_watermark) == (ErrorCode.none, b"", 0)
    assert unknown.error == ErrorCode.unknown_topic_or_partition and unknown.records == b""
    [negative] = await reader.read([(tp(0), -1, MiB)], MiB)
    assert negative.error == ErrorCode.offset_out_of_range


async def test_tail_reads_come_from_the_cache_without_a_get(coordinator) -> None:
    storage = MemoryObjectStorage()
    cache = RangeCache(MiB)
    appender = new_appender(storage, coordinator, cache=cache)
    await produce_sample(appender)
    await appender.close()

    tailing = DisklessReader(storage, coordinator, run_blocking, cache, BrokerMetrics())
    p0, p1 = await tailing.read([(tp(0), 0, MiB), (tp(1), 0, MiB)], MiB)
    assert len(decode_all(p0.records)) == 2 and len(decode_all(p1.records)) == 1
    assert (counter(tailing, "kafka_diskless_fetches"), counter(tailing, "kafka_diskless_object_gets")) == (1, 0)

    # A reader with a cold cache GETs once per object (p0's and p1's batches of the first
    # object are coalesced into one range), then serves repeats from its cache.
    cold = DisklessReader(storage, coordinator, run_blocking, RangeCache(MiB), BrokerMetrics())
    again = await cold.read([(tp(0), 0, MiB), (tp(1), 0, MiB)], MiB)
    assert [r.records for r in again] == [p0.records, p1.records]
    assert counter(cold, "kafka_diskless_object_gets") == 2
    await cold.read([(tp(0), 0, MiB), (tp(1), 0, MiB)], MiB)
    assert (counter(cold, "kafka_diskless_fetches"), counter(cold, "kafka_diskless_object_gets")) == (2, 2)


async def test_log_append_time_is_stamped_on_the_way_out(coordinator) -> None:
    storage = MemoryObjectStorage()
    appender = new_appender(storage, coordinator)
    response = await wait_for(produce(appender, 0, b"a", b"b", ts_type=TimestampType.LOG_APPEND_TIME))
    await appender.close()
    assert response.log_append_time == APPEND_TIME
    reader = DisklessReader(storage, coordinator, run_blocking, RangeCache(MiB), BrokerMetrics())
    [read] = await reader.read([(tp(0), 0, MiB)], MiB)
    header, records = decode_batch(read.records)  # the CRC was recomputed: it checks
    assert header.timestamp_type == 1 and header.max_timestamp == APPEND_TIME
    assert [(r.offset, r.timestamp, r.value) for r in records] == [(0, APPEND_TIME, b"a"), (1, APPEND_TIME, b"b")]
    # The object keeps the producer's bytes; stamping happened on a copy.
    [obj] = await storage.list()
    data = await storage.fetch(obj.key)
    assert decode_batch(data, 1)[0].timestamp_type == 0


# --------------------------------------------------------------------------- notify


async def test_notifier_wakes_a_waiter_on_a_commit_of_its_partition() -> None:
    notifier = CommitNotifier()
    waiter = asyncio.create_task(notifier.wait([tp(0), tp(1)], 5, notifier.version([tp(0), tp(1)])))
    await asyncio.sleep(0.01)
    notifier.committed([tp(2)])  # nobody waits on it
    await asyncio.sleep(0.01)
    assert not waiter.done()
    notifier.committed([TopicIdPartition(TOPIC, 1)])  # equality ignores the topic name
    await asyncio.wait_for(waiter, 1)


async def test_notifier_times_out_without_a_commit_of_its_partition() -> None:
    notifier = CommitNotifier()

    async def commit_other() -> None:
        await asyncio.sleep(0.01)
        notifier.committed([tp(2)])

    started = time.monotonic()
    await asyncio.gather(notifier.wait([tp(0)], 0.1, notifier.version([tp(0)])), commit_other())
    assert time.monotonic() - started >= 0.09
    # Registrations are dropped on return: a commit now finds nobody and a later wait still waits.
    notifier.committed([tp(0)])
    started = time.monotonic()
    await notifier.wait([tp(0)], 0.05, notifier.version([tp(0)]))
    assert time.monotonic() - started >= 0.04
    # A commit between taking the version and waiting (the fetch's read) wakes at once.
    since = notifier.version([tp(0)])
    notifier.committed([tp(0)])
    started = time.monotonic()
    await notifier.wait([tp(0)], 5, since)
    assert time.monotonic() - started < 1


async def test_appender_commit_wakes_a_long_poll(coordinator) -> None:
    storage = MemoryObjectStorage()
    notifier = CommitNotifier()
    appender = new_appender(storage, coordinator, on_committed=notifier.committed)
    waiter = asyncio.create_task(notifier.wait([tp(2)], 10, notifier.version([tp(2)])))
    await asyncio.sleep(0)
    started = time.monotonic()
    await wait_for(produce(appender, 2, b"wake up"))
    await asyncio.wait_for(waiter, 5)
    assert time.monotonic() - started < 5
    await appender.close()
