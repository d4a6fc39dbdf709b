"""RetentionTask: walks the diskless topics of the image with their effective retention configs."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from shoal.config import Config
from shoal.coordinator.api import (
    CommitBatchRequest,
    CreateTopicAndPartitionsRequest,
    EnforceRetentionRequest,
    TopicIdPartition,
)
from shoal.diskless.retention import PARTITIONS_PER_CALL, RetentionResult, RetentionTask, retention_requests
from shoal.metadata.image import MetadataImage, PartitionImage, TopicImage
from shoal.observability.metrics import BrokerMetrics
from shoal.records.types import TimestampType
from shoal.store.sqlite.coordinator import SqliteBatchCoordinator

NOW = 1_700_000_000_000
HOUR = 3_600_000
DEFAULTS = Config.from_raw({"log.retention.ms": str(HOUR), "log.retention.bytes": "-1"})


def topic(name: str, partitions: int = 1, **configs: str) -> TopicImage:
    parts = {p: PartitionImage(p, (1,), (1,), 1, 0, 0) for p in range(partitions)}
    return TopicImage(name, uuid.uuid5(uuid.NAMESPACE_DNS, name), parts, configs)


def image(*topics: TopicImage) -> MetadataImage:
    by_name: Mapping[str, TopicImage] = {t.name: t for t in topics}
    return MetadataImage(topics_by_name=by_name, topics_by_id={t.topic_id: t for t in topics})


async def inline(fn: Any, *args: Any) -> Any:
    return fn(*args)


def test_requests_use_topic_overrides_then_broker_defaults() -> None:
    img = image(
        topic("defaults", 2, **{"diskless.enable": "true"}),
        topic("sized", 1, **{"diskless.enable": "true", "retention.bytes": "1000", "retention.ms": "-1"}),
        topic("forever", 1, **{"diskless.enable": "true", "retention.ms": "-1"}),
        topic("compacted", 1, **{"diskless.enable": "true", "cleanup.policy": "compact"}),
        topic("both", 1, **{"diskless.enable": "true", "cleanup.policy": "compact,delete"}),
        topic("classic", 1),
    )
    requests = retention_requests(img, DEFAULTS.topic_default)
    assert [(r.topic_id_partition.topic_name, r.topic_id_partition.partition, r.retention_bytes, r.retention_ms)
            for r in requests] == [
        ("defaults", 0, -1, HOUR),
        ("defaults", 1, -1, HOUR),
        ("sized", 0, 1000, -1),
        ("both", 0, -1, HOUR),
    ]
    assert requests[0].topic_id_partition == TopicIdPartition(uuid.uuid5(uuid.NAMESPACE_DNS, "defaults"), 0)


@pytest.fixture
def coord(tmp_path: Path) -> Iterator[SqliteBatchCoordinator]:
    clock = lambda: NOW  # noqa: E731
    c = SqliteBatchCoordinator(tmp_path / "shoal.db", clock=clock)
    yield c
    c.close()


def fill(coord: SqliteBatchCoordinator, t: TopicImage, timestamps: list[int]) -> None:
    coord.create_topic_and_partitions({CreateTopicAndPartitionsRequest(t.topic_id, t.name, len(t.partitions))})
    for i, ts in enumerate(timestamps):
        for p in t.partitions:
            req = CommitBatchRequest(0, TopicIdPartition(t.topic_id, p, t.name), 0, 100, 0, 0, ts,
                                     TimestampType.CREATE_TIME)
            coord.commit_file(f"{t.name}-{p}-{i}", 1, 100, [req])


async def test_round_deletes_expired_batches(coord: SqliteBatchCoordinator) -> None:
    timed = topic("timed", 2, **{"diskless.enable": "true"})
    sized = topic("sized", 1, **{"diskless.enable": "true", "retention.ms": "-1", "retention.bytes": "100"})
    fill(coord, timed, [NOW - 2 * HOUR, NOW])
    fill(coord, sized, [NOW, NOW, NOW])
    metrics = BrokerMetrics()
    task = RetentionTask(coord, inline, lambda: image(timed, sized), DEFAULTS.topic_default, interval_ms=10,
                         metrics=metrics)
    assert await task.run_once() == RetentionResult(partitions=3, batches_deleted=4, bytes_deleted=400)
    assert coord.get_log_info(timed.topic_id, 0) == (1, 2, 100)
    assert coord.get_log_info(timed.topic_id, 1) == (1, 2, 100)
    assert coord.get_log_info(sized.topic_id, 0) == (2, 3, 100)
    assert len(coord.get_files_to_delete()) == 4
    assert metrics.registry.get_sample_value("kafka_diskless_retention_deleted_batches_total") == 4
    assert metrics.registry.get_sample_value("kafka_diskless_retention_deleted_bytes_total") == 400
    assert await task.run_once() == RetentionResult(partitions=3)


async def test_failed_call_is_counted_and_the_rest_still_runs(coord: SqliteBatchCoordinator) -> None:
    many = topic("many", PARTITIONS_PER_CALL + 1, **{"diskless.enable": "true"})
    fill(coord, many, [0])
    calls: list[list[EnforceRetentionRequest]] = []

    async def flaky(fn: Any, requests: list[EnforceRetentionRequest]) -> Any:
        calls.append(requests)
        if len(calls) == 1:
            raise TimeoutError("database is locked")
        return fn(requests)

    metrics = BrokerMetrics()
    task = RetentionTask(coord, flaky, lambda: image(many), DEFAULTS.topic_default, interval_ms=10, metrics=metrics)
    result = await task.run_once()
    assert [len(c) for c in calls] == [PARTITIONS_PER_CALL, 1]
    assert result == RetentionResult(partitions=PARTITIONS_PER_CALL + 1, batches_deleted=1, bytes_deleted=100,
                                     failed_calls=1)
    assert metrics.registry.get_sample_value("kafka_diskless_retention_errors_total") == 1


async def test_deleted_topic_in_a_stale_image_is_skipped(coord: SqliteBatchCoordinator) -> None:
    gone = topic("gone", 1, **{"diskless.enable": "true"})  # never created in the coordinator
    task = RetentionTask(coord, inline, lambda: image(gone), DEFAULTS.topic_default, interval_ms=10)
    assert await task.run_once() == RetentionResult(partitions=1)


async def test_periodic_rounds(coord: SqliteBatchCoordinator) -> None:
    timed = topic("timed", 1, **{"diskless.enable": "true"})
    fill(coord, timed, [0])
    task = RetentionTask(coord, asyncio.to_thread, lambda: image(timed), DEFAULTS.topic_default, interval_ms=10)
    task.start()
    try:
        for _ in range(200):
            if coord.get_log_info(timed.topic_id, 0) == (1, 1, 0):
                break
            await asyncio.sleep(0.01)
        assert coord.get_log_info(timed.topic_id, 0) == (1, 1, 0)
    finally:
        await task.stop()
