"""FaultyBatchCoordinator around a real SqliteBatchCoordinator: delegation, injected outages, the lost answer."""

from __future__ import annotations

import inspect
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from shoal.coordinator.api import (
    BatchCoordinator,
    CommitBatchRequest,
    CoordinatorInspector,
    CoordinatorUnavailableError,
    CreateTopicAndPartitionsRequest,
    DeleteFilesRequest,
    DeleteRecordsRequest,
    EnforceRetentionRequest,
    FindBatchRequest,
    ListOffsetsRequest,
    ListOffsetsTimestamp,
    TopicIdPartition,
)
from shoal.coordinator.faulty import OPERATIONS, Fault, FaultyBatchCoordinator, write_control_file
from shoal.diskless.cleaner import ObjectCleaner
from shoal.objects.memory import MemoryObjectStorage
from shoal.protocol.errors import ErrorCode
from shoal.records.types import TimestampType
from shoal.store.sqlite.coordinator import SqliteBatchCoordinator

TOPIC = uuid.UUID("0f0f0f0f-1111-2222-3333-444444444444")
TP = TopicIdPartition(TOPIC, 0, "faulty")


def batch(pid: int = -1, seq: int = -1, records: int = 2) -> CommitBatchRequest:
    return CommitBatchRequest(
        request_id=0,
        topic_id_partition=TP,
        byte_offset=1,
        size=100,
        base_offset=0,
        last_offset=records - 1,
        batch_max_timestamp=1000,
        message_timestamp_type=TimestampType.CREATE_TIME,
        producer_id=pid,
        producer_epoch=0 if pid >= 0 else -1,
        base_sequence=seq,
        last_sequence=seq + records - 1 if seq >= 0 else -1,
    )


@pytest.fixture
def inner(tmp_path: Path) -> Iterator[SqliteBatchCoordinator]:
    coord = SqliteBatchCoordinator(tmp_path / "shoal.db")
    coord.create_topic_and_partitions({CreateTopicAndPartitionsRequest(TOPIC, "faulty", 1)})
    yield coord
    coord.close()


def high_watermark(coord: BatchCoordinator) -> int:
    (resp,) = coord.list_offsets([ListOffsetsRequest(TP, ListOffsetsTimestamp.LATEST)])
    return resp.offset


def test_every_protocol_method_is_wrapped() -> None:
    """A method added to the protocols must be added here too, or the wrapper silently lacks it."""
    wanted = {
        name
        for proto in (BatchCoordinator, CoordinatorInspector)
        for name, _ in inspect.getmembers(proto, inspect.isfunction)
        if not name.startswith("_")
    }
    assert wanted - {"close"} == set(OPERATIONS)
    for name in wanted:
        assert inspect.signature(getattr(FaultyBatchCoordinator, name)).parameters.keys() == (
            inspect.signature(getattr(SqliteBatchCoordinator, name)).parameters.keys()
        ), name


def test_passes_everything_through(inner: SqliteBatchCoordinator) -> None:
    coord = FaultyBatchCoordinator(inner)
    coord.create_topic_and_partitions({CreateTopicAndPartitionsRequest(TOPIC, "faulty", 1)})  # idempotent
    (resp,) = coord.commit_file("wal/a", 1, 101, [batch()])
    assert resp.errors == ErrorCode.none and resp.assigned_base_offset == 0
    (found,) = coord.find_batches([FindBatchRequest(TP, 0, 1 << 20)], 1 << 20)
    assert [b.object_key for b in found.batches] == ["wal/a"] and found.high_watermark == 2
    assert high_watermark(coord) == 2
    assert not coord.is_safe_to_delete_file("wal/a") and coord.is_safe_to_delete_file("wal/never")
    desc = coord.describe_topic(TOPIC)
    assert desc is not None and desc.partitions[0].high_watermark == 2
    obj = coord.describe_object("wal/a")
    assert obj is not None and obj.used_size == 100
    assert [b.object_key for b in coord.list_object_batches(["wal/a"])["wal/a"]] == ["wal/a"]
    assert "wal/a" in [c.object_key for c in coord.list_compaction_candidates(0, 1 << 20, 10)]
    (deleted,) = coord.delete_records([DeleteRecordsRequest(TP, 2)])
    assert deleted.low_watermark == 2
    (retained,) = coord.enforce_retention([EnforceRetentionRequest(TP, -1, 1)])
    assert retained.errors == ErrorCode.none
    assert [f.object_key for f in coord.get_files_to_delete()] == ["wal/a"]
    coord.delete_files(DeleteFilesRequest(frozenset({"wal/a"})))
    assert coord.get_files_to_delete() == [] and coord.describe_object("wal/a") is None
    coord.delete_topics({TOPIC})
    assert coord.describe_topic(TOPIC) is None
    assert set(coord.injected.values()) == {0}


def test_down_commit_commits_nothing(inner: SqliteBatchCoordinator) -> None:
    coord = FaultyBatchCoordinator(inner)
    coord.set_fault("commit_file", Fault(failure_rate=1.0))
    with pytest.raises(CoordinatorUnavailableError, match="injected commit_file failure"):
        coord.commit_file("wal/a", 1, 101, [batch(pid=7, seq=0)])
    assert high_watermark(coord) == 0
    assert coord.is_safe_to_delete_file("wal/a")  # an orphan: the GC may take it
    assert coord.injected["commit_file"] == 1
    # Reads are untouched by a commit_file fault.
    assert coord.find_batches([FindBatchRequest(TP, 0, 1 << 20)], 1 << 20)[0].errors == ErrorCode.none
    coord.set_fault("commit_file", None)
    (resp,) = coord.commit_file("wal/b", 1, 101, [batch(pid=7, seq=0)])
    assert resp.assigned_base_offset == 0 and not resp.is_duplicate


def test_lost_answer_commits_and_retry_is_a_duplicate(inner: SqliteBatchCoordinator) -> None:
    """``after``: the commit happened, the broker saw an error; the producer's retry must not duplicate."""
    coord = FaultyBatchCoordinator(inner)
    coord.set_fault("commit_file", Fault(failure_rate=1.0, after=True))
    with pytest.raises(CoordinatorUnavailableError, match="answer was lost"):
        coord.commit_file("wal/a", 1, 101, [batch(pid=7, seq=0)])
    assert high_watermark(coord) == 2
    assert not coord.is_safe_to_delete_file("wal/a")  # committed: never an orphan
    coord.clear()
    (resp,) = coord.commit_file("wal/b", 1, 101, [batch(pid=7, seq=0)])
    assert resp.is_duplicate and resp.assigned_base_offset == 0
    assert high_watermark(coord) == 2


def test_all_and_operation_faults(inner: SqliteBatchCoordinator) -> None:
    coord = FaultyBatchCoordinator(inner)
    coord.set_fault("all", Fault(failure_rate=1.0))
    coord.set_fault("find_batches", Fault())
    assert coord.find_batches([FindBatchRequest(TP, 0, 1 << 20)], 1 << 20)[0].high_watermark == 0
    for call in (
        coord.get_files_to_delete,
        lambda: coord.replace_batches("wal/new", 10, [], 1),
        lambda: coord.is_safe_to_delete_file("wal/x"),
        lambda: coord.describe_topic(TOPIC),
        lambda: coord.delete_topics({TOPIC}),
    ):
        with pytest.raises(CoordinatorUnavailableError):
            call()
    coord.close()  # never faulted
    with pytest.raises(ValueError):
        coord.set_fault("commit", Fault())


def test_latency_delays_blocking_calls(inner: SqliteBatchCoordinator) -> None:
    coord = FaultyBatchCoordinator(inner)
    coord.set_fault("list_offsets", Fault(latency_ms=60))
    started = time.monotonic()
    assert high_watermark(coord) == 0
    assert time.monotonic() - started >= 0.055


def test_control_file_and_seed(inner: SqliteBatchCoordinator, tmp_path: Path) -> None:
    control = tmp_path / "coordinator-faults.json"
    coord = FaultyBatchCoordinator(inner, control_file=control)
    assert coord.is_safe_to_delete_file("wal/x")  # no file: no faults

    def outcomes(n: int) -> list[bool]:
        result = []
        for _ in range(n):
            try:
                coord.is_safe_to_delete_file("wal/x")
                result.append(True)
            except CoordinatorUnavailableError:
                result.append(False)
        return result

    write_control_file(control, {"is_safe_to_delete_file": Fault(failure_rate=0.5)}, seed=3)
    first = outcomes(60)
    assert 10 < first.count(False) < 50
    write_control_file(control, {"is_safe_to_delete_file": Fault(failure_rate=0.5)}, seed=3)  # reload re-seeds
    assert outcomes(60) == first
    control.unlink()
    assert outcomes(10) == [True] * 10
    with pytest.raises(ValueError):
        write_control_file(control, {"upload": Fault(failure_rate=1.0)})  # a storage operation


def test_decisions_are_thread_safe(inner: SqliteBatchCoordinator) -> None:
    """The broker calls from 8 worker threads: every failure raised is counted exactly once."""
    coord = FaultyBatchCoordinator(inner, seed=11)
    coord.set_fault("get_files_to_delete", Fault(failure_rate=0.4))
    failures = [0] * 8

    def worker(i: int) -> None:
        for _ in range(50):
            try:
                coord.get_files_to_delete()
            except CoordinatorUnavailableError:
                failures[i] += 1

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sum(failures) == coord.injected["get_files_to_delete"]
    assert 0 < sum(failures) < 400


async def test_cleaner_deletes_nothing_while_the_coordinator_is_unreachable(inner: SqliteBatchCoordinator) -> None:
    """A committed object is never taken for an orphan, whichever coordinator call fails."""
    storage = MemoryObjectStorage()
    coord = FaultyBatchCoordinator(inner)
    await storage.upload("wal/committed", b"\x00" + b"x" * 100)
    coord.commit_file("wal/committed", 1, 101, [batch()])
    await storage.upload("wal/orphan", b"\x00")

    async def run_blocking(fn: Callable[..., Any], *args: Any) -> Any:
        return fn(*args)

    later = datetime.now(UTC) + timedelta(hours=2)
    cleaner = ObjectCleaner(
        storage, coord, run_blocking, interval_ms=1000, delete_grace_ms=0, orphan_min_age_ms=60_000,
        clock=lambda: later,
    )
    for operation in ("is_safe_to_delete_file", "get_files_to_delete", "all"):
        coord.clear()
        coord.set_fault(operation, Fault(failure_rate=1.0))
        result = await cleaner.run_once()
        assert result.orphans_deleted == 0 and result.objects_deleted == 0, operation
        assert "orphans" in result.skipped
        assert sorted(o.key for o in await storage.list("wal/")) == ["wal/committed", "wal/orphan"]
    coord.clear()
    result = await cleaner.run_once()
    assert result.orphans_deleted == 1
    assert [o.key for o in await storage.list("wal/")] == ["wal/committed"]
