"""ObjectCleaner: marked objects go after the grace period, orphans after the safety age,
and nothing is deleted while the coordinator cannot be asked."""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from shoal.coordinator.api import (
    CommitBatchRequest,
    CreateTopicAndPartitionsRequest,
    DeleteRecordsRequest,
    EnforceRetentionRequest,
    TopicIdPartition,
)
from shoal.diskless.append import Appender
from shoal.diskless.cache import RangeCache
from shoal.diskless.cleaner import CleanerRound, ObjectCleaner
from shoal.objects.faulty import Fault, FaultyObjectStorage
from shoal.objects.local import LocalObjectStorage
from shoal.objects.memory import MemoryObjectStorage
from shoal.observability.metrics import BrokerMetrics
from shoal.protocol.errors import ErrorCode, KafkaError
from shoal.records.batch import read_header
from shoal.records.codec import build_batch
from shoal.records.types import TimestampType
from shoal.store.sqlite.coordinator import SqliteBatchCoordinator

TOPIC = uuid.UUID("11111111-2222-3333-4444-555555555555")
T0 = datetime(2030, 1, 1, tzinfo=UTC)
GRACE_MS = 60_000
ORPHAN_AGE_MS = 3_600_000


class Clock:
    """One fake time for the coordinator (ms) and the cleaner (datetime)."""

    def __init__(self) -> None:
        self.now = T0

    def ms(self) -> int:
        return int(self.now.timestamp() * 1000)

    def __call__(self) -> datetime:
        return self.now


class FlakyCoordinator:
    """The real coordinator, except that the named methods raise (an unreachable coordinator)."""

    def __init__(self, inner: SqliteBatchCoordinator) -> None:
        self.inner = inner
        self.failing: set[str] = set()

    def __getattr__(self, name: str) -> Any:
        if name in self.failing:
            def fail(*args: Any) -> Any:
                raise ConnectionError(f"{name}: coordinator unreachable")
            return fail
        return getattr(self.inner, name)


async def inline(fn: Any, *args: Any) -> Any:
    return fn(*args)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def coord(tmp_path: Path, clock: Clock) -> Iterator[FlakyCoordinator]:
    c = SqliteBatchCoordinator(tmp_path / "shoal.db", clock=clock.ms)
    c.create_topic_and_partitions({CreateTopicAndPartitionsRequest(TOPIC, "orders", 1)})
    yield FlakyCoordinator(c)
    c.close()


@pytest.fixture
def storage(tmp_path: Path) -> FaultyObjectStorage:
    return FaultyObjectStorage(LocalObjectStorage(tmp_path / "objects"))


def make_cleaner(storage: Any, coord: Any, clock: Clock, metrics: BrokerMetrics | None = None) -> ObjectCleaner:
    return ObjectCleaner(
        storage, coord, inline, interval_ms=10, delete_grace_ms=GRACE_MS, orphan_min_age_ms=ORPHAN_AGE_MS,
        metrics=metrics, clock=clock,
    )


async def put(storage: FaultyObjectStorage, key: str, modified: datetime = T0) -> None:
    await storage.upload(key, b"x" * 10)
    path = storage.inner._root / key  # type: ignore[attr-defined]
    os.utime(path, (modified.timestamp(), modified.timestamp()))


async def commit(coord: FlakyCoordinator, storage: FaultyObjectStorage, key: str) -> None:
    await put(storage, key)
    request = CommitBatchRequest(0, TopicIdPartition(TOPIC, 0, "orders"), 0, 10, 0, 0, 0, TimestampType.CREATE_TIME)
    coord.commit_file(key, 1, 10, [request])


async def keys(storage: FaultyObjectStorage) -> list[str]:
    return [o.key for o in await storage.inner.list()]


async def test_marked_objects_are_deleted_after_the_grace_period(
    coord: FlakyCoordinator, storage: FaultyObjectStorage, clock: Clock
) -> None:
    await commit(coord, storage, "wal/a")
    await commit(coord, storage, "wal/b")
    coord.delete_records([DeleteRecordsRequest(TopicIdPartition(TOPIC, 0), 1)])  # empties wal/a
    metrics = BrokerMetrics()
    cleaner = make_cleaner(storage, coord, clock, metrics)

    clock.now = T0 + timedelta(milliseconds=GRACE_MS - 1)
    assert await cleaner.run_once(orphans=False) == CleanerRound()
    assert await keys(storage) == ["wal/a", "wal/b"]

    clock.now = T0 + timedelta(milliseconds=GRACE_MS)
    assert await cleaner.run_once(orphans=False) == CleanerRound(objects_deleted=1)
    assert await keys(storage) == ["wal/b"]
    assert coord.get_files_to_delete() == []
    assert coord.describe_object("wal/a") is None
    assert metrics.registry.get_sample_value("kafka_diskless_objects_deleted_total") == 1


async def test_only_old_unknown_objects_are_orphans(
    coord: FlakyCoordinator, storage: FaultyObjectStorage, clock: Clock
) -> None:
    old = T0 - timedelta(milliseconds=ORPHAN_AGE_MS)
    await put(storage, "wal/orphan", old)
    await put(storage, "wal/young-orphan", T0 - timedelta(milliseconds=ORPHAN_AGE_MS - 1))
    await put(storage, "tiered/not-ours", old)
    await commit(coord, storage, "wal/live")
    await commit(coord, storage, "wal/marked")
    for key in ("wal/live", "wal/marked"):
        os.utime(storage.inner._root / key, (old.timestamp(), old.timestamp()))  # type: ignore[attr-defined]
    coord.delete_records([DeleteRecordsRequest(TopicIdPartition(TOPIC, 0), 1)])  # marks wal/live (offset 0)
    metrics = BrokerMetrics()
    cleaner = make_cleaner(storage, coord, clock, metrics)

    # wal/live holds offset 0 and is now marked, but its grace has not passed: neither phase takes it.
    assert await cleaner.run_once() == CleanerRound(orphans_deleted=1)
    assert await keys(storage) == ["tiered/not-ours", "wal/live", "wal/marked", "wal/young-orphan"]
    assert metrics.registry.get_sample_value("kafka_diskless_orphan_objects_deleted_total") == 1


async def test_unreachable_coordinator_skips_the_round(
    coord: FlakyCoordinator, storage: FaultyObjectStorage, clock: Clock
) -> None:
    await commit(coord, storage, "wal/a")
    coord.delete_records([DeleteRecordsRequest(TopicIdPartition(TOPIC, 0), 1)])
    await put(storage, "wal/orphan", T0 - timedelta(days=1))
    clock.now = T0 + timedelta(days=1)
    metrics = BrokerMetrics()
    cleaner = make_cleaner(storage, coord, clock, metrics)

    coord.failing = {"get_files_to_delete"}
    assert await cleaner.run_once() == CleanerRound(skipped=("delete", "orphans"))
    coord.failing = {"is_safe_to_delete_file"}
    assert await cleaner.run_once(orphans=True) == CleanerRound(objects_deleted=1, skipped=("orphans",))
    assert await keys(storage) == ["wal/orphan"]
    assert metrics.registry.get_sample_value("kafka_diskless_object_cleaner_errors_total", {"phase": "orphans"}) == 2

    coord.failing = set()
    assert await cleaner.run_once() == CleanerRound(orphans_deleted=1)
    assert await keys(storage) == []


async def test_storage_failures_keep_objects_for_the_next_round(
    coord: FlakyCoordinator, storage: FaultyObjectStorage, clock: Clock
) -> None:
    await commit(coord, storage, "wal/a")
    coord.delete_records([DeleteRecordsRequest(TopicIdPartition(TOPIC, 0), 1)])
    clock.now = T0 + timedelta(days=1)
    cleaner = make_cleaner(storage, coord, clock)

    storage.set_fault("delete", Fault(failure_rate=1.0))
    assert await cleaner.run_once(orphans=False) == CleanerRound(skipped=("delete",))
    assert [f.object_key for f in coord.get_files_to_delete()] == ["wal/a"]  # not forgotten while it exists

    # Deleted from storage but the coordinator failed to forget it: the next round redoes both.
    storage.set_fault("delete", None)
    coord.failing = {"delete_files"}
    assert await cleaner.run_once(orphans=False) == CleanerRound(skipped=("delete",))
    assert await keys(storage) == []
    coord.failing = set()
    assert await cleaner.run_once(orphans=False) == CleanerRound(objects_deleted=1)
    assert coord.get_files_to_delete() == []

    storage.set_fault("list", Fault(failure_rate=1.0))
    assert await cleaner.run_once() == CleanerRound(skipped=("orphans",))


async def test_periodic_rounds(coord: FlakyCoordinator, storage: FaultyObjectStorage, clock: Clock) -> None:
    await put(storage, "wal/orphan", T0 - timedelta(days=1))
    cleaner = make_cleaner(storage, coord, clock)
    cleaner.start()
    try:
        for _ in range(200):
            if not await keys(storage):
                break
            await asyncio.sleep(0.01)
        assert await keys(storage) == []
    finally:
        await cleaner.stop()
    await cleaner.stop()  # idempotent


async def test_lifecycle_with_the_appender(tmp_path: Path) -> None:
    """A lost upload answer leaves an orphan; retention empties the committed object; one round removes both."""
    coordinator = SqliteBatchCoordinator(tmp_path / "shoal.db")
    coordinator.create_topic_and_partitions({CreateTopicAndPartitionsRequest(TOPIC, "orders", 1)})
    storage = FaultyObjectStorage(MemoryObjectStorage())
    appender = Appender(
        storage, coordinator, asyncio.to_thread, 1, 5, 1 << 20, RangeCache(1 << 20), lambda _: None, BrokerMetrics()
    )
    appender.start()
    partition = TopicIdPartition(TOPIC, 0, "orders")
    data = build_batch([(b"k", b"v", (), 1_000)])
    try:
        storage.set_fault("upload", Fault(failure_rate=1.0, after=True))
        with pytest.raises(KafkaError) as failed:
            await asyncio.wait_for(appender.append(partition, data, read_header(data), TimestampType.CREATE_TIME), 5)
        assert failed.value.code == ErrorCode.kafka_storage_error
        storage.set_fault("upload", None)
        committed = await asyncio.wait_for(
            appender.append(partition, data, read_header(data), TimestampType.CREATE_TIME), 5
        )
        assert committed.assigned_base_offset == 0
    finally:
        await appender.close()
    objects = [o.key for o in await storage.list("wal/")]
    assert len(objects) == 2 and all(k.startswith("wal/") for k in objects)

    retention = coordinator.enforce_retention([EnforceRetentionRequest(partition, 0, -1)])[0]
    assert (retention.batches_deleted, retention.log_start_offset) == (1, 1)
    later = datetime.now(UTC) + timedelta(milliseconds=ORPHAN_AGE_MS + GRACE_MS)
    cleaner = ObjectCleaner(
        storage, coordinator, asyncio.to_thread, interval_ms=10, delete_grace_ms=GRACE_MS,
        orphan_min_age_ms=ORPHAN_AGE_MS, clock=lambda: later,
    )
    try:
        assert await cleaner.run_once() == CleanerRound(objects_deleted=1, orphans_deleted=1)
        assert await storage.list() == []
        assert coordinator.get_files_to_delete() == []
        assert coordinator.get_log_info(TOPIC, 0) == (1, 1, 0)
    finally:
        coordinator.close()
