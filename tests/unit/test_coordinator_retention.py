"""Retention in the Batch Coordinator (Kafka's time and size rules over whole batches) and the
inspection views for tools, run unchanged on every backend (the ``store_url`` fixture: an SQLite
file, then a PostgreSQL database)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from shoal.coordinator.api import (
    CommitBatchRequest,
    CreateTopicAndPartitionsRequest,
    DeleteFilesRequest,
    DeleteRecordsRequest,
    EnforceRetentionRequest,
    EnforceRetentionResponse,
    FindBatchRequest,
    ObjectState,
    TopicIdPartition,
)
from shoal.protocol.errors import ErrorCode
from shoal.records.types import TimestampType
from shoal.store.factory import open_batch_coordinator_at

TOPIC = uuid.UUID("11111111-2222-3333-4444-555555555555")
OTHER = uuid.UUID("66666666-7777-8888-9999-000000000000")
NOW = 1_700_000_000_000
HOUR = 3_600_000

#: A BatchCoordinator that is also a CoordinatorInspector with get_log_info (every backend).
Coordinator = Any


class FakeClock:
    def __init__(self, now: int = NOW) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def tp(partition: int = 0, topic: uuid.UUID = TOPIC) -> TopicIdPartition:
    return TopicIdPartition(topic, partition, "orders" if topic == TOPIC else "other")


def batch(
    partition: int = 0,
    *,
    records: int = 2,
    size: int = 100,
    ts: int = NOW,
    ts_type: TimestampType = TimestampType.CREATE_TIME,
    topic: uuid.UUID = TOPIC,
) -> CommitBatchRequest:
    return CommitBatchRequest(0, tp(partition, topic), 0, size, 0, records - 1, ts, ts_type)


def commit(coord: Coordinator, key: str, *batches: CommitBatchRequest) -> None:
    """Commit batches laid out back to back in one object."""
    laid_out, pos = [], 0
    for i, b in enumerate(batches):
        laid_out.append(CommitBatchRequest(i, b.topic_id_partition, pos, b.size, b.base_offset, b.last_offset,
                                           b.batch_max_timestamp, b.message_timestamp_type))
        pos += b.size
    responses = coord.commit_file(key, 1, pos, laid_out)
    assert all(r.errors == ErrorCode.none for r in responses)


def enforce(
    coord: Coordinator, retention_bytes: int = -1, retention_ms: int = -1, partition: int = 0
) -> EnforceRetentionResponse:
    return coord.enforce_retention([EnforceRetentionRequest(tp(partition), retention_bytes, retention_ms)])[0]


def live_offsets(coord: Coordinator, partition: int = 0) -> list[int]:
    start = coord.get_log_info(TOPIC, partition)[0]  # type: ignore[index]
    found = coord.find_batches([FindBatchRequest(tp(partition), start, 10**9)], 10**9)[0]
    return [b.metadata.base_offset for b in found.batches]


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def coord(store_url: str, clock: FakeClock) -> Iterator[Coordinator]:
    c = open_batch_coordinator_at(store_url, clock)
    c.create_topic_and_partitions(
        {CreateTopicAndPartitionsRequest(TOPIC, "orders", 2), CreateTopicAndPartitionsRequest(OTHER, "other", 1)}
    )
    yield c
    c.close()


def test_unlimited_retention_deletes_nothing(coord: Coordinator) -> None:
    commit(coord, "a", batch(ts=0), batch(ts=0))
    assert enforce(coord) == EnforceRetentionResponse(ErrorCode.none, 0, 0, 0)
    assert live_offsets(coord) == [0, 2]


def test_time_retention_stops_at_the_first_young_batch(coord: Coordinator) -> None:
    # Offsets 0, 2, 4, 6: two expired batches, a young one, then an expired one behind it.
    commit(coord, "a", batch(ts=NOW - 3 * HOUR), batch(ts=NOW - 2 * HOUR), batch(ts=NOW), batch(ts=NOW - 5 * HOUR))
    assert enforce(coord, retention_ms=HOUR) == EnforceRetentionResponse(ErrorCode.none, 2, 200, 4)
    assert live_offsets(coord) == [4, 6]
    assert coord.get_log_info(TOPIC, 0) == (4, 8, 200)
    # Exactly retention.ms old is kept: Kafka deletes when now - timestamp > retention.ms.
    assert enforce(coord, retention_ms=0).batches_deleted == 0


def test_log_append_time_batches_age_by_append_time(coord: Coordinator, clock: FakeClock) -> None:
    commit(coord, "a", batch(ts=0, ts_type=TimestampType.LOG_APPEND_TIME))
    assert enforce(coord, retention_ms=HOUR).batches_deleted == 0
    clock.now += HOUR + 1
    assert enforce(coord, retention_ms=HOUR) == EnforceRetentionResponse(ErrorCode.none, 1, 100, 2)


def test_batch_without_timestamp_ages_by_append_time(coord: Coordinator, clock: FakeClock) -> None:
    commit(coord, "a", batch(ts=-1))
    assert enforce(coord, retention_ms=HOUR).batches_deleted == 0
    clock.now += HOUR + 1
    assert enforce(coord, retention_ms=HOUR).batches_deleted == 1


def test_size_retention_keeps_at_least_retention_bytes(coord: Coordinator) -> None:
    commit(coord, "a", *(batch() for _ in range(5)))
    # 500 bytes, limit 250: deleting a batch is allowed while 250 or more remain after it.
    assert enforce(coord, retention_bytes=250) == EnforceRetentionResponse(ErrorCode.none, 2, 200, 4)
    assert coord.get_log_info(TOPIC, 0) == (4, 10, 300)
    assert enforce(coord, retention_bytes=250).batches_deleted == 0
    assert enforce(coord, retention_bytes=0) == EnforceRetentionResponse(ErrorCode.none, 3, 300, 10)


def test_size_rule_continues_where_time_rule_stops(coord: Coordinator) -> None:
    commit(coord, "a", batch(ts=NOW - 2 * HOUR), batch(ts=NOW), batch(ts=NOW - 2 * HOUR), batch(ts=NOW))
    # Time takes offset 0 and stops at the young batch; size then takes offset 2 (200 stay >= 200)
    # and stops at offset 4, although that batch is old: Kafka does not go back to the time rule.
    assert enforce(coord, retention_bytes=200, retention_ms=HOUR) == EnforceRetentionResponse(
        ErrorCode.none, 2, 200, 4
    )
    # The next round takes it by time.
    assert enforce(coord, retention_bytes=200, retention_ms=HOUR).log_start_offset == 6


def test_everything_expired_moves_start_to_high_watermark(coord: Coordinator) -> None:
    commit(coord, "a", batch(ts=0), batch(ts=0))
    assert enforce(coord, retention_ms=HOUR) == EnforceRetentionResponse(ErrorCode.none, 2, 200, 4)
    assert coord.get_log_info(TOPIC, 0) == (4, 4, 0)
    found = coord.find_batches([FindBatchRequest(tp(), 4, 10**9)], 10**9)[0]
    assert (found.errors, found.batches, found.log_start_offset, found.high_watermark) == (ErrorCode.none, [], 4, 4)
    commit(coord, "b", batch())
    assert live_offsets(coord) == [4]


def test_start_never_moves_back_behind_delete_records(coord: Coordinator) -> None:
    commit(coord, "a", batch(records=10, ts=0), batch(records=10, ts=0), batch(records=10))
    # DeleteRecords to offset 15 drops the first batch and leaves the start inside the second.
    assert coord.delete_records([DeleteRecordsRequest(tp(), 15)])[0].low_watermark == 15
    response = enforce(coord, retention_ms=HOUR)
    assert response == EnforceRetentionResponse(ErrorCode.none, 1, 100, 20)
    # Nothing more to delete: the start stays where it is.
    assert coord.delete_records([DeleteRecordsRequest(tp(), 25)])[0].low_watermark == 25
    assert enforce(coord, retention_ms=HOUR) == EnforceRetentionResponse(ErrorCode.none, 0, 0, 25)


def test_objects_shrink_and_empty_ones_are_marked_for_deletion(coord: Coordinator) -> None:
    commit(coord, "shared", batch(0, ts=0), batch(1, ts=0))
    commit(coord, "only-p0", batch(0, ts=0))
    commit(coord, "young", batch(0))
    enforce(coord, retention_ms=HOUR, partition=0)
    assert [f.object_key for f in coord.get_files_to_delete()] == ["only-p0"]
    shared = coord.describe_object("shared")
    assert shared is not None
    assert (shared.size, shared.used_size, shared.state) == (200, 100, ObjectState.UPLOADED)
    assert [b.metadata.topic_id_partition for b in shared.batches] == [tp(1)]
    enforce(coord, retention_ms=HOUR, partition=1)
    assert {f.object_key for f in coord.get_files_to_delete()} == {"only-p0", "shared"}
    assert not coord.is_safe_to_delete_file("shared")  # committed objects never go to the orphan GC


def test_long_runs_of_batches(coord: Coordinator) -> None:
    # More batches than a backend may read in one go: the rules hold across its reads.
    for key in ("a", "b", "c"):
        commit(coord, key, *(batch(size=10, ts=0) for _ in range(300)))  # offsets 0-1799
    commit(coord, "young", batch(size=10), batch(size=10, ts=0))  # offsets 1800-1803: 9020 bytes in all
    assert enforce(coord, retention_bytes=3000) == EnforceRetentionResponse(ErrorCode.none, 602, 6020, 1204)
    assert enforce(coord, retention_ms=HOUR) == EnforceRetentionResponse(ErrorCode.none, 298, 2980, 1800)
    assert live_offsets(coord) == [1800, 1802]
    assert [f.object_key for f in coord.get_files_to_delete()] == ["a", "b", "c"]
    # Two requests for one partition in one call: the second sees what the first deleted.
    responses = coord.enforce_retention([EnforceRetentionRequest(tp(), 10, -1), EnforceRetentionRequest(tp(), 0, -1)])
    assert responses == [
        EnforceRetentionResponse(ErrorCode.none, 1, 10, 1802),
        EnforceRetentionResponse(ErrorCode.none, 1, 10, 1804),
    ]


def test_one_call_answers_each_partition_in_order(coord: Coordinator) -> None:
    commit(coord, "a", batch(0, ts=0), batch(1))
    responses = coord.enforce_retention(
        [
            EnforceRetentionRequest(tp(1), -1, HOUR),
            EnforceRetentionRequest(tp(7), -1, HOUR),
            EnforceRetentionRequest(tp(0), -1, HOUR),
        ]
    )
    assert responses == [
        EnforceRetentionResponse(ErrorCode.none, 0, 0, 0),
        EnforceRetentionResponse(ErrorCode.unknown_topic_or_partition, 0, 0, -1),
        EnforceRetentionResponse(ErrorCode.none, 1, 100, 2),
    ]


def test_describe_topic_counts_live_and_deleted_objects(coord: Coordinator) -> None:
    commit(coord, "mixed", batch(0, ts=0), batch(0, topic=OTHER))  # 200 bytes, shared with another topic
    commit(coord, "old", batch(1, ts=0, size=50))  # 50 bytes, only ours
    commit(coord, "new", batch(1, size=70))
    described = coord.describe_topic(TOPIC)
    assert described is not None
    assert described.topic_name == "orders"
    assert [(p.partition, p.log_start_offset, p.high_watermark, p.byte_size) for p in described.partitions] == [
        (0, 0, 2, 100),
        (1, 0, 4, 120),
    ]
    assert (described.object_count, described.object_bytes) == (3, 320)
    assert (described.deleted_object_count, described.deleted_object_bytes) == (0, 0)

    enforce(coord, retention_ms=HOUR, partition=0)
    enforce(coord, retention_ms=HOUR, partition=1)
    described = coord.describe_topic(TOPIC)
    assert described is not None
    # "mixed" stays alive for the other topic and no longer counts for ours; "old" awaits deletion.
    assert (described.object_count, described.object_bytes) == (1, 70)
    assert (described.deleted_object_count, described.deleted_object_bytes) == (1, 50)

    coord.delete_topics({TOPIC})
    described = coord.describe_topic(TOPIC)
    assert described is not None and described.partitions == []
    assert (described.deleted_object_count, described.deleted_object_bytes) == (2, 120)
    coord.delete_files(DeleteFilesRequest(frozenset({"old", "new"})))
    assert coord.describe_topic(TOPIC) is None
    assert coord.describe_topic(uuid.uuid4()) is None


def test_describe_object(coord: Coordinator, clock: FakeClock) -> None:
    commit(coord, "obj", batch(0, size=30), batch(1, size=40, ts_type=TimestampType.LOG_APPEND_TIME))
    described = coord.describe_object("obj")
    assert described is not None
    assert (described.object_key, described.size, described.used_size, described.state) == ("obj", 70, 70, "uploaded")
    assert described.uploader_broker_id == 1
    assert described.committed_at.timestamp() * 1000 == NOW
    assert described.marked_for_deletion_at is None
    assert [(b.metadata.byte_offset, b.metadata.byte_size, b.metadata.topic_id_partition.partition)
            for b in described.batches] == [(0, 30, 0), (30, 40, 1)]
    assert described.batches[1].metadata.timestamp_type == TimestampType.LOG_APPEND_TIME
    assert described.batches[0].metadata.topic_id_partition.topic_name == "orders"

    clock.now += 5
    coord.delete_records([DeleteRecordsRequest(tp(0), -1), DeleteRecordsRequest(tp(1), -1)])
    described = coord.describe_object("obj")
    assert described is not None
    assert (described.used_size, described.state, described.batches) == (0, ObjectState.DELETING, [])
    assert described.marked_for_deletion_at is not None
    assert described.marked_for_deletion_at.timestamp() * 1000 == NOW + 5
    coord.delete_files(DeleteFilesRequest(frozenset({"obj"})))
    assert coord.describe_object("obj") is None
