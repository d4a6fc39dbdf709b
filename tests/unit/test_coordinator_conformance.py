"""The Batch Coordinator contract (KIP-1164): offsets, idempotence, fetch, deletion, run unchanged on every backend.

Each test runs once on an SQLite file and once on a fresh PostgreSQL database (the ``store_url``
fixture), through the factory's ``open_batch_coordinator_at``: what the broker opens. What only
PostgreSQL faces (several brokers at once, the server going away) is in test_coordinator_postgres.py.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Protocol, cast

import pytest

from shoal.coordinator.api import (
    BatchCoordinator,
    CommitBatchRequest,
    CoordinatorInspector,
    CreateTopicAndPartitionsRequest,
    DeleteFilesRequest,
    DeleteRecordsRequest,
    DeleteTieredBatchesRequest,
    EnforceRetentionRequest,
    FindBatchRequest,
    ListOffsetsRequest,
    ListOffsetsTimestamp,
    TopicIdPartition,
)
from shoal.protocol.errors import ErrorCode
from shoal.records.types import TimestampType
from shoal.store.factory import open_batch_coordinator_at

TOPIC = uuid.UUID("11111111-2222-3333-4444-555555555555")
OTHER = uuid.UUID("66666666-7777-8888-9999-000000000000")


class Coordinator(BatchCoordinator, CoordinatorInspector, Protocol):
    """What every backend offers: the protocols, and the log info the broker's tools read."""

    def get_log_info(self, topic_id: uuid.UUID, partition: int) -> tuple[int, int, int] | None: ...


def open_coordinator(store_url: str, clock: FakeClock) -> Coordinator:
    return cast(Coordinator, open_batch_coordinator_at(store_url, clock))


class FakeClock:
    """Deterministic milliseconds so log append times can be asserted."""

    def __init__(self, now: int = 1_700_000_000_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def tp(partition: int = 0, topic: uuid.UUID = TOPIC) -> TopicIdPartition:
    return TopicIdPartition(topic, partition, "orders")


def batch(
    partition: int = 0,
    records: int = 1,
    size: int = 100,
    byte_offset: int = 0,
    *,
    topic: uuid.UUID = TOPIC,
    ts: int = 1000,
    ts_type: TimestampType = TimestampType.CREATE_TIME,
    pid: int = -1,
    epoch: int = -1,
    seq: int = -1,
    request_id: int = 0,
) -> CommitBatchRequest:
    return CommitBatchRequest(
        request_id=request_id,
        topic_id_partition=tp(partition, topic),
        byte_offset=byte_offset,
        size=size,
        base_offset=0,
        last_offset=records - 1,
        batch_max_timestamp=ts,
        message_timestamp_type=ts_type,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        last_sequence=seq + records - 1 if seq >= 0 else -1,
    )


_keys = iter(range(10**9))


def commit(coord: Coordinator, *batches: CommitBatchRequest, key: str | None = None):
    """Commit batches laid out back to back in one object (byte offsets recomputed)."""
    laid_out = []
    pos = 0
    for b in batches:
        laid_out.append(
            CommitBatchRequest(**{**{f: getattr(b, f) for f in b.__dataclass_fields__}, "byte_offset": pos})
        )
        pos += b.size
    return coord.commit_file(key or f"obj-{next(_keys)}", 1, pos, laid_out)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def coord(store_url: str, clock: FakeClock) -> Iterator[Coordinator]:
    c = open_coordinator(store_url, clock)
    c.create_topic_and_partitions({CreateTopicAndPartitionsRequest(TOPIC, "orders", 3)})
    yield c
    c.close()


def test_satisfies_protocol(coord: Coordinator) -> None:
    protocol: BatchCoordinator = coord
    assert protocol is coord


def test_gapless_offsets_across_commits_and_partitions(coord: Coordinator) -> None:
    expected = {0: 0, 1: 0, 2: 0}
    for i in range(30):
        reqs = [batch(p, records=(i + p) % 4 + 1) for p in (0, 1, 2, 0)]
        responses = commit(coord, *reqs)
        for req, resp in zip(reqs, responses, strict=True):
            p = req.topic_id_partition.partition
            assert resp.errors == ErrorCode.none
            assert resp.request.topic_id_partition == req.topic_id_partition
            assert resp.assigned_base_offset == expected[p]
            expected[p] += req.last_offset - req.base_offset + 1
    for p, hwm in expected.items():
        assert coord.get_log_info(TOPIC, p) == (0, hwm, 100 * (60 if p == 0 else 30))
        found = coord.find_batches([FindBatchRequest(tp(p), 0, 10**9)], 10**9)[0]
        offsets = [(b.metadata.base_offset, b.metadata.last_offset) for b in found.batches]
        assert offsets[0][0] == 0
        assert all(prev[1] + 1 == nxt[0] for prev, nxt in zip(offsets, offsets[1:], strict=False))
        assert offsets[-1][1] + 1 == hwm == found.high_watermark


def test_unknown_partition_and_corrupt_batch_consume_no_offsets(coord: Coordinator) -> None:
    responses = commit(coord, batch(0), batch(7), batch(0, topic=OTHER), batch(0, records=3))
    assert [r.errors for r in responses] == [
        ErrorCode.none,
        ErrorCode.unknown_topic_or_partition,
        ErrorCode.unknown_topic_or_partition,
        ErrorCode.none,
    ]
    assert [r.assigned_base_offset for r in responses] == [0, -1, -1, 1]
    bad = CommitBatchRequest(0, tp(0), 0, 100, 5, 2, 0, TimestampType.CREATE_TIME)
    assert coord.commit_file("bad", 1, 100, [bad])[0].errors == ErrorCode.corrupt_message
    assert coord.get_log_info(TOPIC, 0) == (0, 4, 200)


def test_offsets_survive_reopen(store_url: str, clock: FakeClock) -> None:
    first = open_coordinator(store_url, clock)
    first.create_topic_and_partitions({CreateTopicAndPartitionsRequest(TOPIC, "orders", 1)})
    commit(first, batch(0, records=5, pid=9, epoch=0, seq=0))
    first.close()
    with pytest.raises(RuntimeError):
        first.get_log_info(TOPIC, 0)

    second = open_coordinator(store_url, clock)
    try:
        second.create_topic_and_partitions({CreateTopicAndPartitionsRequest(TOPIC, "orders", 1)})
        assert second.get_log_info(TOPIC, 0) == (0, 5, 100)
        # Producer state survived too: the retry is a duplicate, the next batch follows on.
        dup, nxt = commit(second, batch(0, records=5, pid=9, epoch=0, seq=0), batch(0, pid=9, epoch=0, seq=5))
        assert dup.is_duplicate and dup.assigned_base_offset == 0
        assert nxt.assigned_base_offset == 5 and not nxt.is_duplicate
    finally:
        second.close()


def test_create_topic_is_idempotent_and_adds_partitions(coord: Coordinator) -> None:
    commit(coord, batch(0, records=3))
    coord.create_topic_and_partitions({CreateTopicAndPartitionsRequest(TOPIC, "orders", 5)})
    assert coord.get_log_info(TOPIC, 0) == (0, 3, 100)
    assert coord.get_log_info(TOPIC, 4) == (0, 0, 0)
    assert coord.get_log_info(TOPIC, 5) is None


def test_duplicate_in_later_commit_returns_original_offset(coord: Coordinator, clock: FakeClock) -> None:
    commit(coord, batch(0, records=2))  # non-idempotent data first: offsets 0-1
    first = commit(coord, batch(0, records=3, pid=42, epoch=1, seq=0))[0]
    assert first.assigned_base_offset == 2
    original_time = clock.now
    clock.now += 5000
    retry = coord.commit_file("retry", 1, 100, [batch(0, records=3, pid=42, epoch=1, seq=0)])[0]
    assert retry.errors == ErrorCode.none
    assert retry.is_duplicate
    assert retry.assigned_base_offset == 2
    assert retry.log_append_time == original_time
    assert coord.get_log_info(TOPIC, 0) == (0, 5, 200)
    # The retried object holds no live batch: it is marked for deletion at once.
    assert [f.object_key for f in coord.get_files_to_delete()] == ["retry"]
    assert not coord.is_safe_to_delete_file("retry")


def test_duplicate_within_one_commit(coord: Coordinator) -> None:
    responses = commit(
        coord,
        batch(0, records=2, pid=7, epoch=0, seq=0),
        batch(0, records=2, pid=7, epoch=0, seq=2),
        batch(0, records=2, pid=7, epoch=0, seq=0),
        batch(0, records=2, pid=7, epoch=0, seq=4),
    )
    assert [(r.assigned_base_offset, r.is_duplicate) for r in responses] == [
        (0, False),
        (2, False),
        (0, True),
        (4, False),
    ]
    assert coord.get_log_info(TOPIC, 0) == (0, 6, 300)


def test_only_last_five_batches_are_remembered(coord: Coordinator) -> None:
    for seq in range(7):
        commit(coord, batch(0, pid=3, epoch=0, seq=seq))
    recent = commit(coord, batch(0, pid=3, epoch=0, seq=2))[0]
    assert recent.is_duplicate and recent.assigned_base_offset == 2
    forgotten = commit(coord, batch(0, pid=3, epoch=0, seq=1))[0]
    assert forgotten.errors == ErrorCode.out_of_order_sequence_number
    assert coord.get_log_info(TOPIC, 0)[1] == 7


def test_out_of_order_and_fenced_epoch(coord: Coordinator) -> None:
    commit(coord, batch(0, records=5, pid=1, epoch=3, seq=10))  # first batch: any sequence
    gap, old_epoch, ok = commit(
        coord,
        batch(0, pid=1, epoch=3, seq=16),
        batch(0, pid=1, epoch=2, seq=15),
        batch(0, pid=1, epoch=3, seq=15),
    )
    assert gap.errors == ErrorCode.out_of_order_sequence_number
    assert gap.assigned_base_offset == -1
    assert old_epoch.errors == ErrorCode.invalid_producer_epoch
    assert ok.errors == ErrorCode.none and ok.assigned_base_offset == 5
    assert coord.get_log_info(TOPIC, 0)[1] == 6
    # The producer state is per partition: another partition starts fresh.
    assert commit(coord, batch(1, pid=1, epoch=3, seq=99))[0].errors == ErrorCode.none


def test_epoch_bump_requires_sequence_zero(coord: Coordinator) -> None:
    commit(coord, batch(0, records=3, pid=5, epoch=0, seq=0))
    bad, good, old, nxt = commit(
        coord,
        batch(0, pid=5, epoch=1, seq=3),
        batch(0, records=2, pid=5, epoch=1, seq=0),
        batch(0, records=3, pid=5, epoch=0, seq=0),  # duplicate of the old epoch: fenced now
        batch(0, pid=5, epoch=1, seq=2),
    )
    assert bad.errors == ErrorCode.out_of_order_sequence_number
    assert (good.errors, good.assigned_base_offset) == (ErrorCode.none, 3)
    assert old.errors == ErrorCode.invalid_producer_epoch
    assert (nxt.errors, nxt.assigned_base_offset) == (ErrorCode.none, 5)


def test_sequence_wraps_after_int32_max(coord: Coordinator) -> None:
    top = 2**31 - 1
    first = CommitBatchRequest(0, tp(0), 0, 100, 0, 1, 0, TimestampType.CREATE_TIME, 8, 0, top - 1, top)
    wrapped = CommitBatchRequest(0, tp(0), 100, 100, 0, 1, 0, TimestampType.CREATE_TIME, 8, 0, 0, 1)
    responses = coord.commit_file("wrap", 1, 200, [first, wrapped])
    assert [r.errors for r in responses] == [ErrorCode.none, ErrorCode.none]
    assert responses[1].assigned_base_offset == 2


def test_find_batches_limits_and_ranges(coord: Coordinator) -> None:
    commit(coord, *[batch(0, records=10, size=100) for _ in range(10)])  # offsets 0-99
    commit(coord, batch(1, records=1, size=5000), batch(1, records=1, size=50))
    commit(coord, batch(2, size=10), batch(2, size=10))

    def find(*reqs: FindBatchRequest, fetch_max: int = 10**9):
        return coord.find_batches(list(reqs), fetch_max)

    # From the batch containing offset 35, within 250 bytes of partition limit.
    r = find(FindBatchRequest(tp(0), 35, 250))[0]
    assert r.errors == ErrorCode.none and (r.log_start_offset, r.high_watermark) == (0, 100)
    assert [b.metadata.base_offset for b in r.batches] == [30, 40]
    assert r.batches[0].object_key.startswith("obj-")
    assert r.batches[0].metadata.byte_offset == 300 and r.batches[0].metadata.byte_size == 100
    assert r.batches[0].metadata.topic_id_partition == tp(0)
    # Exactly reaching the limit stops there.
    assert len(find(FindBatchRequest(tp(0), 0, 300))[0].batches) == 3
    # The first batch is always returned even when larger than the partition limit.
    r = find(FindBatchRequest(tp(1), 0, 100))[0]
    assert [b.metadata.byte_size for b in r.batches] == [5000]
    # fetch_max_bytes across partitions: the first partition with data always gets one batch.
    r0, r1, r2 = find(
        FindBatchRequest(tp(1), 0, 10**6),
        FindBatchRequest(tp(0), 0, 10**6),
        FindBatchRequest(tp(2), 0, 100),
        fetch_max=5120,
    )
    assert [b.metadata.byte_size for b in r0.batches] == [5000, 50]
    assert [b.metadata.base_offset for b in r1.batches] == []  # 100 > 70 bytes left
    assert [b.metadata.byte_size for b in r2.batches] == [10, 10]
    assert (r1.log_start_offset, r1.high_watermark) == (0, 100)
    r0, r1 = find(FindBatchRequest(tp(0), 0, 10**6), FindBatchRequest(tp(1), 0, 10**6), fetch_max=250)
    assert len(r0.batches) == 2 and r1.batches == []
    # Ranges: high watermark is valid and empty, beyond it and below log start are not.
    at_end = find(FindBatchRequest(tp(0), 100, 1000))[0]
    assert (at_end.errors, at_end.batches, at_end.high_watermark) == (ErrorCode.none, [], 100)
    assert find(FindBatchRequest(tp(0), 101, 1000))[0].errors == ErrorCode.offset_out_of_range
    assert find(FindBatchRequest(tp(0), -1, 1000))[0].errors == ErrorCode.offset_out_of_range
    assert find(FindBatchRequest(tp(9), 0, 1000))[0].errors == ErrorCode.unknown_topic_or_partition
    coord.delete_records([DeleteRecordsRequest(tp(0), 45)])
    low = find(FindBatchRequest(tp(0), 44, 1000))[0]
    assert (low.errors, low.log_start_offset) == (ErrorCode.offset_out_of_range, 45)
    assert find(FindBatchRequest(tp(0), 45, 100))[0].batches[0].metadata.base_offset == 40


def test_find_batches_over_long_runs_of_small_batches(coord: Coordinator) -> None:
    # More batches than a backend may read in one go: limits and contiguity hold across its reads.
    for _ in range(4):
        commit(coord, *[batch(0, records=2, size=10) for _ in range(150)])  # offsets 0-1199

    def offsets(offset: int, partition_max: int, fetch_max: int = 10**9) -> list[int]:
        found = coord.find_batches([FindBatchRequest(tp(0), offset, partition_max)], fetch_max)[0]
        return [b.metadata.base_offset for b in found.batches]

    assert offsets(0, 10**9) == list(range(0, 1200, 2))
    assert offsets(0, 4000) == list(range(0, 800, 2))
    assert offsets(275, 10**9, fetch_max=3333) == list(range(274, 274 + 2 * 333, 2))
    r0, r1 = coord.find_batches(
        [FindBatchRequest(tp(0), 1, 2500), FindBatchRequest(tp(0), 1001, 10**6)], 4000
    )
    assert [b.metadata.base_offset for b in r0.batches] == list(range(0, 500, 2))
    assert [b.metadata.base_offset for b in r1.batches] == list(range(1000, 1200, 2))
    coord.delete_records([DeleteRecordsRequest(tp(0), 333)])
    assert offsets(333, 10**9) == list(range(332, 1200, 2))


def test_reads_after_an_interrupted_scan_see_new_commits(coord: Coordinator) -> None:
    commit(coord, *[batch(0) for _ in range(5)])
    # A scan cut short by the byte limit must not pin the reader connection's snapshot.
    assert len(coord.find_batches([FindBatchRequest(tp(0), 0, 100)], 100)[0].batches) == 1
    commit(coord, batch(0, records=2))
    r = coord.find_batches([FindBatchRequest(tp(0), 5, 100)], 100)[0]
    assert (r.high_watermark, [b.metadata.base_offset for b in r.batches]) == (7, [5])
    assert coord.list_offsets([ListOffsetsRequest(tp(0), ListOffsetsTimestamp.LATEST)])[0].offset == 7


def test_list_offsets(coord: Coordinator, clock: FakeClock) -> None:
    def lookup(ts: int, partition: int = 0) -> tuple[ErrorCode, int, int]:
        r = coord.list_offsets([ListOffsetsRequest(tp(partition), ts)])[0]
        return r.errors, r.timestamp, r.offset

    assert lookup(ListOffsetsTimestamp.MAX_TIMESTAMP) == (ErrorCode.none, -1, -1)
    assert lookup(500) == (ErrorCode.none, -1, -1)
    commit(
        coord,
        batch(0, records=10, ts=100),  # 0-9
        batch(0, records=10, ts=300),  # 10-19
        batch(0, records=10, ts=200),  # 20-29
        batch(0, records=10, ts=300),  # 30-39
    )
    clock.now = 5000
    commit(coord, batch(0, records=5, ts=1, ts_type=TimestampType.LOG_APPEND_TIME))  # 40-44 @5000
    assert lookup(ListOffsetsTimestamp.EARLIEST) == (ErrorCode.none, -1, 0)
    assert lookup(ListOffsetsTimestamp.EARLIEST_LOCAL) == (ErrorCode.none, -1, 0)
    assert lookup(ListOffsetsTimestamp.LATEST) == (ErrorCode.none, -1, 45)
    assert lookup(ListOffsetsTimestamp.LATEST_TIERED) == (ErrorCode.none, -1, -1)
    assert lookup(ListOffsetsTimestamp.MAX_TIMESTAMP) == (ErrorCode.none, 5000, 44)
    assert lookup(0) == (ErrorCode.none, 100, 0)
    assert lookup(150) == (ErrorCode.none, 300, 10)
    assert lookup(250) == (ErrorCode.none, 300, 10)
    assert lookup(301) == (ErrorCode.none, 5000, 40)
    assert lookup(5001) == (ErrorCode.none, -1, -1)
    assert lookup(0, partition=1) == (ErrorCode.none, -1, -1)
    assert lookup(0, partition=9)[0] == ErrorCode.unknown_topic_or_partition
    assert lookup(-7)[0] == ErrorCode.invalid_request

    # After deleting the batches that raised the running max, lookups still answer exactly.
    commit(coord, batch(1, records=1, ts=900), batch(1, records=1, ts=50), batch(1, records=1, ts=60))
    coord.delete_records([DeleteRecordsRequest(tp(1), 1)])
    assert lookup(55, partition=1) == (ErrorCode.none, 60, 2)
    assert lookup(ListOffsetsTimestamp.MAX_TIMESTAMP, partition=1) == (ErrorCode.none, 60, 2)
    # A log start inside the found batch is the answer, never an offset below it.
    coord.delete_records([DeleteRecordsRequest(tp(0), 13)])
    assert lookup(0) == (ErrorCode.none, 300, 13)
    assert lookup(ListOffsetsTimestamp.EARLIEST) == (ErrorCode.none, -1, 13)
    assert lookup(ListOffsetsTimestamp.EARLIEST_LOCAL) == (ErrorCode.none, -1, 13)
    # MAX_TIMESTAMP ties: the earliest batch holding the max.
    commit(coord, batch(2, ts=7), batch(2, ts=9), batch(2, ts=9))
    assert lookup(ListOffsetsTimestamp.MAX_TIMESTAMP, partition=2) == (ErrorCode.none, 9, 1)


def test_delete_records_moves_start_and_marks_objects(coord: Coordinator, clock: FakeClock) -> None:
    commit(coord, batch(0, records=10), batch(0, records=10), key="a")  # 0-19
    commit(coord, batch(0, records=10), batch(1, records=10), key="b")  # 20-29, p1 0-9
    clock.now += 1000
    r = coord.delete_records(
        [
            DeleteRecordsRequest(tp(0), 15),
            DeleteRecordsRequest(tp(1), 11),
            DeleteRecordsRequest(tp(9), 0),
        ]
    )
    assert [(x.errors, x.low_watermark) for x in r] == [
        (ErrorCode.none, 15),
        (ErrorCode.offset_out_of_range, -1),
        (ErrorCode.unknown_topic_or_partition, -1),
    ]
    # Batch 0-9 is gone; "a" still holds 10-19, so nothing to delete yet.
    assert coord.get_log_info(TOPIC, 0) == (15, 30, 200)
    assert coord.get_files_to_delete() == []
    assert coord.delete_records([DeleteRecordsRequest(tp(0), 5)])[0].low_watermark == 15  # never back
    r = coord.delete_records([DeleteRecordsRequest(tp(0), -1)])[0]  # -1 = high watermark
    assert (r.errors, r.low_watermark) == (ErrorCode.none, 30)
    assert coord.get_log_info(TOPIC, 0) == (30, 30, 0)
    files = coord.get_files_to_delete()
    assert [f.object_key for f in files] == ["a"]  # "b" still holds partition 1
    assert files[0].marked_for_deletion_at == datetime.fromtimestamp(clock.now / 1000, tz=UTC)
    assert commit(coord, batch(0))[0].assigned_base_offset == 30


def test_delete_tiered_batches_keeps_log_start(coord: Coordinator, clock: FakeClock) -> None:
    commit(coord, batch(0, records=10), batch(0, records=10), key="a")  # 0-19
    commit(coord, batch(0, records=10), batch(1, records=5), key="b")  # 20-29, p1 0-4
    commit(coord, batch(0, records=10), batch(0, records=10), key="c")  # 30-49
    clock.now += 1000
    moved = ErrorCode.offset_moved_to_tiered_storage

    def delete(*reqs: tuple[int, int]) -> list[tuple[ErrorCode, int, int, int]]:
        rs = coord.delete_tiered_batches([DeleteTieredBatchesRequest(tp(p), o) for p, o in reqs])
        return [(r.errors, r.batches_deleted, r.bytes_deleted, r.local_start_offset) for r in rs]

    def find(offset: int, partition: int = 0) -> tuple[ErrorCode, list[int], int, int]:
        r = coord.find_batches([FindBatchRequest(tp(partition), offset, 10**6)], 10**6)[0]
        return r.errors, [b.metadata.base_offset for b in r.batches], r.log_start_offset, r.high_watermark

    def lookup(ts: int, partition: int = 0) -> int:
        return coord.list_offsets([ListOffsetsRequest(tp(partition), ts)])[0].offset

    assert delete((0, 30), (0, 51), (0, -1), (9, 0)) == [
        (ErrorCode.none, 3, 300, 30),
        (ErrorCode.offset_out_of_range, 0, 0, -1),
        (ErrorCode.offset_out_of_range, 0, 0, -1),
        (ErrorCode.unknown_topic_or_partition, 0, 0, -1),
    ]
    assert coord.get_log_info(TOPIC, 0) == (0, 50, 200)
    assert (lookup(ListOffsetsTimestamp.EARLIEST), lookup(ListOffsetsTimestamp.EARLIEST_LOCAL)) == (0, 30)
    assert lookup(ListOffsetsTimestamp.LATEST) == 50
    for offset in (0, 15, 29):
        assert find(offset) == (moved, [], 0, 50)
    assert find(30) == find(35) == (ErrorCode.none, [30, 40], 0, 50)
    assert find(50) == (ErrorCode.none, [], 0, 50)
    assert find(-1)[0] == find(51)[0] == ErrorCode.offset_out_of_range
    assert find(0, partition=1) == (ErrorCode.none, [0], 0, 5)
    # Every batch of "a" went; "b" still holds partition 1.
    files = coord.get_files_to_delete()
    assert [f.object_key for f in files] == ["a"]
    assert files[0].marked_for_deletion_at == datetime.fromtimestamp(clock.now / 1000, tz=UTC)
    desc = coord.describe_topic(TOPIC)
    assert desc is not None and desc.partitions[0].byte_size == 200
    assert (desc.object_count, desc.object_bytes, desc.deleted_object_count, desc.deleted_object_bytes) == (
        2,
        400,
        1,
        200,
    )
    # Offsets inside a batch or already gone delete nothing; requests apply in order.
    assert delete((0, 35), (0, 10)) == [(ErrorCode.none, 0, 0, 30)] * 2
    assert delete((0, 40), (0, 50)) == [(ErrorCode.none, 1, 100, 40), (ErrorCode.none, 1, 100, 50)]
    assert coord.get_log_info(TOPIC, 0) == (0, 50, 0)
    assert (lookup(ListOffsetsTimestamp.EARLIEST), lookup(ListOffsetsTimestamp.EARLIEST_LOCAL)) == (0, 50)
    assert find(50) == (ErrorCode.none, [], 0, 50)
    assert find(49)[0] == find(0)[0] == moved
    assert {f.object_key for f in coord.get_files_to_delete()} == {"a", "c"}
    # DeleteRecords into the tiered range moves the log start; below it is out of range.
    assert coord.delete_records([DeleteRecordsRequest(tp(0), 20)])[0].low_watermark == 20
    assert find(19) == (ErrorCode.offset_out_of_range, [], 20, 50)
    assert find(20) == (moved, [], 20, 50)
    assert commit(coord, batch(0, records=5))[0].assigned_base_offset == 50
    assert (lookup(ListOffsetsTimestamp.EARLIEST), lookup(ListOffsetsTimestamp.EARLIEST_LOCAL)) == (20, 50)
    assert find(49)[0] == moved and find(50) == (ErrorCode.none, [50], 20, 55)
    assert coord.get_log_info(TOPIC, 0) == (20, 55, 100)
    # A log start inside the first batch left is covered there, not tiered.
    coord.delete_records([DeleteRecordsRequest(tp(1), 2)])
    assert delete((1, 3)) == [(ErrorCode.none, 0, 0, 2)]
    assert lookup(ListOffsetsTimestamp.EARLIEST_LOCAL, partition=1) == 2
    assert find(2, partition=1) == (ErrorCode.none, [0], 2, 5)


def test_retention_after_tiered_deletion(coord: Coordinator, clock: FakeClock) -> None:
    old, new = clock.now - 60_000, clock.now
    commit(coord, *[batch(0, records=10, ts=ts) for ts in (old, old, old, new)])  # 0-39
    assert coord.delete_tiered_batches([DeleteTieredBatchesRequest(tp(0), 20)])[0].batches_deleted == 2

    def retain(retention_ms: int) -> tuple[ErrorCode, int, int, int]:
        r = coord.enforce_retention([EnforceRetentionRequest(tp(0), -1, retention_ms)])[0]
        return r.errors, r.batches_deleted, r.bytes_deleted, r.log_start_offset

    # Nothing expired: the log start stays below the local batches (tiered storage holds 0-19).
    assert retain(3_600_000) == (ErrorCode.none, 0, 0, 0)
    assert coord.get_log_info(TOPIC, 0) == (0, 40, 200)
    # Batch 20-29 expires: the log start moves to the first batch left.
    assert retain(30_000) == (ErrorCode.none, 1, 100, 30)
    assert coord.get_log_info(TOPIC, 0) == (30, 40, 100)
    earliest, local = coord.list_offsets(
        [
            ListOffsetsRequest(tp(0), ListOffsetsTimestamp.EARLIEST),
            ListOffsetsRequest(tp(0), ListOffsetsTimestamp.EARLIEST_LOCAL),
        ]
    )
    assert earliest.offset == local.offset == 30
    low, at = coord.find_batches([FindBatchRequest(tp(0), 29, 10**6), FindBatchRequest(tp(0), 30, 10**6)], 10**6)
    assert low.errors == ErrorCode.offset_out_of_range
    assert (at.errors, [b.metadata.base_offset for b in at.batches]) == (ErrorCode.none, [30])


def test_delete_topics(coord: Coordinator) -> None:
    coord.create_topic_and_partitions({CreateTopicAndPartitionsRequest(OTHER, "other", 1)})
    commit(coord, batch(0, records=4, pid=1, epoch=0, seq=0), batch(0, topic=OTHER), key="mixed")
    commit(coord, batch(0, topic=OTHER), key="other-only")
    commit(coord, batch(2), key="orders-only")
    coord.delete_topics({TOPIC})
    assert coord.get_log_info(TOPIC, 0) is None
    assert commit(coord, batch(0))[0].errors == ErrorCode.unknown_topic_or_partition
    assert {f.object_key for f in coord.get_files_to_delete()} >= {"orders-only"}
    assert "mixed" not in {f.object_key for f in coord.get_files_to_delete()}
    # Recreating the topic starts from zero with no producer state left behind.
    coord.create_topic_and_partitions({CreateTopicAndPartitionsRequest(TOPIC, "orders", 1)})
    again = commit(coord, batch(0, records=4, pid=1, epoch=0, seq=0))[0]
    assert (again.assigned_base_offset, again.is_duplicate) == (0, False)
    coord.delete_topics({OTHER, uuid.uuid4()})
    assert "mixed" in {f.object_key for f in coord.get_files_to_delete()}
    assert coord.find_batches([FindBatchRequest(tp(0, OTHER), 0, 100)], 100)[0].errors == (
        ErrorCode.unknown_topic_or_partition
    )


def test_files_to_delete_and_orphan_safety(coord: Coordinator) -> None:
    assert coord.is_safe_to_delete_file("never-committed")
    commit(coord, batch(0), key="live")
    coord.commit_file("empty", 1, 0, [])
    commit(coord, batch(9), key="rejected")
    assert not coord.is_safe_to_delete_file("live")
    assert not coord.is_safe_to_delete_file("empty")
    assert {f.object_key for f in coord.get_files_to_delete()} == {"empty", "rejected"}
    coord.delete_files(DeleteFilesRequest(frozenset({"empty", "live", "unknown"})))
    assert coord.is_safe_to_delete_file("empty")
    assert not coord.is_safe_to_delete_file("live")  # still in use: never forgotten
    assert [f.object_key for f in coord.get_files_to_delete()] == ["rejected"]
    assert coord.find_batches([FindBatchRequest(tp(0), 0, 100)], 100)[0].batches[0].object_key == "live"


def test_duplicate_object_key_is_rejected_atomically(coord: Coordinator) -> None:
    commit(coord, batch(0), key="same")
    with pytest.raises(Exception, match="(?i)unique"):  # sqlite3 / psycopg IntegrityError
        commit(coord, batch(0), key="same")
    assert coord.get_log_info(TOPIC, 0) == (0, 1, 100)
    assert commit(coord, batch(0))[0].assigned_base_offset == 1


def test_concurrent_commits_are_gapless_and_unique(coord: Coordinator) -> None:
    results: list[tuple[int, int, int]] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def producer(worker: int) -> None:
        try:
            for i in range(25):
                reqs = [batch(p, records=worker + 1) for p in (0, 1)]
                for r in commit(coord, *reqs, key=f"w{worker}-{i}"):
                    with lock:
                        results.append(
                            (r.request.topic_id_partition.partition, r.assigned_base_offset, worker + 1)
                        )
                coord.find_batches([FindBatchRequest(tp(0), 0, 1000)], 1000)
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=producer, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for p in (0, 1):
        spans = sorted((base, base + n) for part, base, n in results if part == p)
        assert spans[0][0] == 0
        assert all(a[1] == b[0] for a, b in zip(spans, spans[1:], strict=False))
        assert coord.get_log_info(TOPIC, p)[1] == spans[-1][1] == 25 * (1 + 2 + 3 + 4)


def test_commit_of_200_batches_latency(coord: Coordinator) -> None:
    coord.create_topic_and_partitions({CreateTopicAndPartitionsRequest(OTHER, "other", 50)})
    reqs = [
        batch(i % 50, records=10, size=1000, topic=OTHER, pid=100 + i % 7, epoch=0, seq=(i // 50) * 10)
        for i in range(200)
    ]
    # 7 idempotent producers over 50 partitions: every (partition, producer) pair is new.
    start = time.perf_counter()
    responses = commit(coord, *reqs)
    commit_ms = (time.perf_counter() - start) * 1000
    assert all(r.errors == ErrorCode.none for r in responses)
    start = time.perf_counter()
    found = coord.find_batches([FindBatchRequest(tp(p, OTHER), 0, 1 << 20) for p in range(50)], 50 << 20)
    find_ms = (time.perf_counter() - start) * 1000
    assert sum(len(f.batches) for f in found) == 200
    print(f"\ncommit of 200 batches: {commit_ms:.1f} ms; find_batches over 50 partitions: {find_ms:.2f} ms")
