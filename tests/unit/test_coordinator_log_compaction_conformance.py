"""Log compaction (cleanup.policy=compact) in the Batch Coordinator: ``compact_partition`` and
``cleaner_checkpoints``, run unchanged on every backend (the ``store_url`` fixture: an SQLite file,
then a database of the session's PostgreSQL server).

The swap must apply only to the range exactly as the cleaner read it (never bringing back a batch
deleted or moved meanwhile), must leave no object untracked, must be all-or-nothing, and must leave
a log whose gaps every reader reads across (fetch, ListOffsets, READ_COMMITTED).
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from shoal.coordinator.api import (
    BatchCoordinator,
    BatchInfo,
    CommitBatchRequest,
    CoordinatorUnavailableError,
    CreateTopicAndPartitionsRequest,
    DeleteRecordsRequest,
    EnforceRetentionRequest,
    FindBatchRequest,
    ListOffsetsRequest,
    ListOffsetsTimestamp,
    ObjectState,
)
from shoal.coordinator.compaction_types import CleanedBatch, CompactPartitionRequest, SourceBatch
from shoal.coordinator.faulty import Fault, FaultyBatchCoordinator
from shoal.protocol.errors import ErrorCode
from shoal.records.types import TimestampType
from tests.unit.test_coordinator_compaction import (
    INTEGRITY_ERRORS,
    fail_updates_of_used_size,
    files,
    moves_for,
    snapshot,
    stop_failing,
)
from tests.unit.test_coordinator_conformance import TOPIC, Coordinator, FakeClock, open_coordinator, tp
from tests.unit.test_coordinator_txn_conformance import data, marker, plain

NOW = FakeClock().now
OTHER_TOPIC = uuid.UUID("66666666-7777-8888-9999-000000000000")


def batch(
    records: int, size: int = 100, ts: int = 1000, *, partition: int = 0, lat: bool = False
) -> CommitBatchRequest:
    ts_type = TimestampType.LOG_APPEND_TIME if lat else TimestampType.CREATE_TIME
    return CommitBatchRequest(0, tp(partition), 0, size, 0, records - 1, ts, ts_type)


def put(coord: Coordinator, key: str, *batches: CommitBatchRequest) -> list[int]:
    """Commit the batches after a 1-byte header in object ``key``; their base offsets."""
    laid_out, pos = [], 1
    for b in batches:
        laid_out.append(dataclasses.replace(b, byte_offset=pos))
        pos += b.size
    responses = coord.commit_file(key, 1, pos, laid_out)
    assert all(r.errors == ErrorCode.none for r in responses)
    return [r.assigned_base_offset for r in responses]


def fetch(
    coord: Coordinator, offset: int, partition: int = 0, *, committed: bool = False, max_bytes: int = 10**6
) -> tuple[ErrorCode, list[BatchInfo]]:
    (r,) = coord.find_batches([FindBatchRequest(tp(partition), offset, max_bytes, committed)], 10**6)
    return r.errors, r.batches


def bases(batches: list[BatchInfo]) -> list[tuple[int, int]]:
    return [(b.metadata.base_offset, b.metadata.last_offset) for b in batches]


def held(coord: Coordinator, start: int, end: int, partition: int = 0) -> list[BatchInfo]:
    """The batches of [start, end) as a cleaner reads them."""
    info = coord.get_log_info(TOPIC, partition)
    assert info is not None
    errors, batches = fetch(coord, info[0], partition)
    assert errors == ErrorCode.none
    return [b for b in batches if start <= b.metadata.base_offset and b.metadata.last_offset < end]


def source(b: BatchInfo) -> SourceBatch:
    m = b.metadata
    return SourceBatch(b.batch_id, b.object_key, m.byte_offset, m.byte_size, m.base_offset, m.last_offset)


def cleaned(
    b: BatchInfo, base: int | None = None, last: int | None = None, size: int = 10, **changes: object
) -> CleanedBatch:
    """``b`` rebuilt with the records of [base, last] (all of them by default) in ``size`` bytes."""
    m = b.metadata
    out = CleanedBatch(
        m.base_offset if base is None else base, m.last_offset if last is None else last, 0, size,
        m.batch_max_timestamp, m.timestamp_type, m.producer_id, m.producer_epoch, m.base_sequence,
        m.last_sequence, m.is_transactional, m.is_control,
    )  # fmt: skip
    return dataclasses.replace(out, **changes)  # type: ignore[arg-type]


def request(
    start: int,
    end: int,
    read: list[BatchInfo],
    new: list[CleanedBatch],
    cleaned_offset: int | None = None,
    partition: int = 0,
) -> tuple[CompactPartitionRequest, int]:
    """The request swapping ``read`` for ``new`` laid out after a 1-byte header; and the object's size."""
    laid_out, pos = [], 1
    for b in new:
        laid_out.append(dataclasses.replace(b, byte_offset=pos))
        pos += b.size
    req = CompactPartitionRequest(
        tp(partition),
        start,
        end,
        [source(b) for b in read],
        laid_out,
        end if cleaned_offset is None else cleaned_offset,
    )
    return req, pos


def lookup(coord: Coordinator, ts: int, partition: int = 0) -> tuple[int, int]:
    (r,) = coord.list_offsets([ListOffsetsRequest(tp(partition), ts)])
    assert r.errors == ErrorCode.none
    return r.timestamp, r.offset


def without_files(state: dict[str, list[tuple[object, ...]]]) -> dict[str, list[tuple[object, ...]]]:
    return {table: rows for table, rows in state.items() if table != "diskless_files"}


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def db(store_url: str) -> str:
    return store_url


@pytest.fixture
def coord(db: str, clock: FakeClock) -> Iterator[Coordinator]:
    c = open_coordinator(db, clock)
    c.create_topic_and_partitions({CreateTopicAndPartitionsRequest(TOPIC, "orders", 2)})
    yield c
    c.close()


@pytest.fixture
def log(coord: Coordinator, clock: FakeClock) -> Coordinator:
    """Partition 0: a 0-9 (ts 1000), 10-19 (2000), [p1 0-4]; b 20-29 (3000), 30-39 (4000); c 40-49 (5000)."""
    assert put(coord, "a", batch(10, ts=1000), batch(10, ts=2000), batch(5, 50, partition=1)) == [0, 10, 0]
    assert put(coord, "b", batch(10, ts=3000), batch(10, ts=4000)) == [20, 30]
    assert put(coord, "c", batch(10, ts=5000)) == [40]
    clock.now += 1000
    return coord


def test_satisfies_protocol_and_checkpoints_start_at_zero(coord: Coordinator) -> None:
    protocol: BatchCoordinator = coord
    assert protocol.compact_partition is not None
    assert coord.cleaner_checkpoints(TOPIC) == {0: 0, 1: 0}
    assert coord.cleaner_checkpoints(OTHER_TOPIC) == {}


def test_applied_swap_leaves_gaps_every_reader_reads_across(
    log: Coordinator, db: str, clock: FakeClock
) -> None:
    coord = log
    read = held(coord, 0, 40)
    old_ids = [b.batch_id for b in read]
    r0, _, r2, r3 = read
    # 0-9 keeps 5-9, 10-19 goes entirely, 20-29 keeps everything smaller, 30-39 keeps 38-39.
    new = [cleaned(r0, base=5, size=40), cleaned(r2, size=60), cleaned(r3, base=38, size=30)]
    req, size = request(0, 40, read, new)
    result = coord.compact_partition("compacted", size, 7, req)
    assert result.applied and (result.removed_batches, result.removed_bytes) == (4, 400)
    assert result.new_object_state == ObjectState.UPLOADED and result.emptied_object_keys == ("b",)

    state = files(db)
    assert state["compacted"] == (131, 130, "uploaded", None)
    assert state["a"][1:3] == (50, "uploaded")  # still holds partition 1's batch
    assert state["b"] == (201, 0, "deleting", clock.now)
    assert state["c"][1:3] == (100, "uploaded")
    marked = coord.get_files_to_delete()
    assert [(f.object_key, f.marked_for_deletion_at) for f in marked] == [
        ("b", datetime.fromtimestamp(clock.now / 1000, tz=UTC))
    ]
    assert not coord.is_safe_to_delete_file("compacted")
    described = coord.describe_object("compacted")
    assert described is not None and described.used_size == 130 and described.uploader_broker_id == 7
    overview = coord.describe_topic(TOPIC)
    assert overview is not None and (overview.deleted_object_count, overview.deleted_object_bytes) == (1, 201)

    # Offsets never move; the log's bytes follow; the checkpoint is stored.
    assert coord.get_log_info(TOPIC, 0) == (0, 50, 230)
    assert coord.get_log_info(TOPIC, 1) == (0, 5, 50)
    assert coord.cleaner_checkpoints(TOPIC) == {0: 40, 1: 0}
    errors, everything = fetch(coord, 0)
    assert errors == ErrorCode.none
    assert bases(everything) == [(5, 9), (20, 29), (38, 39), (40, 49)]
    assert [(b.object_key, b.metadata.byte_offset, b.metadata.byte_size) for b in everything] == [
        ("compacted", 1, 40), ("compacted", 41, 60), ("compacted", 101, 30), ("c", 1, 100),
    ]  # fmt: skip
    new_ids = [b.batch_id for b in everything[:3]]
    assert len(set(new_ids)) == 3 and min(new_ids) > max(old_ids) and everything[3].batch_id not in new_ids
    # A fetch inside a gap answers the next batch.
    for offset, first in ((0, 5), (4, 5), (7, 5), (10, 20), (19, 20), (30, 38), (37, 38), (40, 40)):
        errors, got = fetch(coord, offset)
        assert errors == ErrorCode.none and got[0].metadata.base_offset == first, offset
    assert fetch(coord, 50) == (ErrorCode.none, [])
    # Byte limits still cut at whole batches, across gaps.
    assert bases(fetch(coord, 0, max_bytes=100)[1]) == [(5, 9), (20, 29)]
    # ListOffsets: offsets stay; time lookups find the first batch left at or after the time.
    assert lookup(coord, ListOffsetsTimestamp.EARLIEST) == (-1, 0)
    assert lookup(coord, ListOffsetsTimestamp.EARLIEST_LOCAL) == (-1, 0)  # compacted, not tiered
    assert lookup(coord, ListOffsetsTimestamp.LATEST) == (-1, 50)
    assert lookup(coord, ListOffsetsTimestamp.MAX_TIMESTAMP) == (5000, 49)
    assert lookup(coord, 0) == (1000, 5)
    assert lookup(coord, 1500) == (3000, 20)  # 10-19 (2000) went
    assert lookup(coord, 3500) == (4000, 38)
    assert lookup(coord, 5001) == (-1, -1)
    # Later writes and deletions work on the compacted log as on any other.
    assert put(coord, "d", batch(1, ts=6000)) == [50]
    coord.delete_records([DeleteRecordsRequest(tp(0), 30)])  # 5-9 and 20-29 go; the log start is in a gap
    assert coord.get_log_info(TOPIC, 0) == (30, 51, 230)
    assert files(db)["compacted"][1:3] == (30, "uploaded")
    assert bases(fetch(coord, 30)[1]) == [(38, 39), (40, 49), (50, 50)]
    assert fetch(coord, 29)[0] == ErrorCode.offset_out_of_range
    coord.enforce_retention([EnforceRetentionRequest(tp(0), -1, 0)])
    assert files(db)["compacted"][1:3] == (0, "deleting")


def test_a_batch_deleted_between_read_and_swap_is_never_resurrected(log: Coordinator, db: str) -> None:
    coord = log
    read = held(coord, 0, 40)
    req, size = request(0, 40, read, [cleaned(b) for b in read])
    coord.delete_records([DeleteRecordsRequest(tp(0), 10)])  # 0-9 goes meanwhile
    coord.enforce_retention([EnforceRetentionRequest(tp(1), 0, -1)])  # and partition 1's batch
    before = snapshot(db)
    result = coord.compact_partition("compacted", size, 1, req)
    assert (result.applied, result.removed_batches, result.removed_bytes) == (False, 0, 0)
    assert (result.new_object_state, result.emptied_object_keys) == (ObjectState.DELETING, ())
    assert without_files(snapshot(db)) == without_files(before)
    assert files(db)["compacted"] == (size, 0, "deleting", NOW + 1000)  # tracked, marked for deletion
    assert "compacted" in {f.object_key for f in coord.get_files_to_delete()}
    assert bases(fetch(coord, 10)[1]) == [(10, 19), (20, 29), (30, 39), (40, 49)]
    assert coord.cleaner_checkpoints(TOPIC) == {0: 0, 1: 0}


def test_a_batch_expired_by_retention_between_read_and_swap(log: Coordinator, db: str) -> None:
    coord = log
    read = held(coord, 0, 40)
    req, size = request(0, 40, read, [cleaned(read[0], base=9)])
    (retained,) = coord.enforce_retention([EnforceRetentionRequest(tp(0), 400, -1)])
    assert retained.batches_deleted == 1
    before = snapshot(db)
    assert not coord.compact_partition("compacted", size, 1, req).applied
    assert without_files(snapshot(db)) == without_files(before)
    assert files(db)["compacted"][1:3] == (0, "deleting")
    assert fetch(coord, 9)[0] == ErrorCode.offset_out_of_range  # 0-9 stays gone


def test_a_batch_moved_by_object_compaction_between_read_and_swap(log: Coordinator, db: str) -> None:
    coord = log
    read = held(coord, 0, 40)
    req, size = request(0, 40, read, [cleaned(b) for b in read])
    moves, merged_size = moves_for(coord.list_object_batches(["b"])["b"])
    assert coord.replace_batches("merged", merged_size, moves, -1).moved == 2
    before = snapshot(db)
    assert not coord.compact_partition("compacted", size, 1, req).applied
    assert without_files(snapshot(db)) == without_files(before)
    assert files(db)["compacted"][1:3] == (0, "deleting") and files(db)["merged"][1:3] == (200, "uploaded")
    assert [b.object_key for b in held(coord, 0, 40)] == ["a", "a", "merged", "merged"]


@pytest.mark.parametrize(
    "what",
    ["missing source", "unknown batch id", "wrong coordinates", "straddles end", "straddles start", "past hw",
     "unknown partition", "deleted topic"],
)  # fmt: skip
def test_a_range_that_is_not_what_was_read_changes_nothing(log: Coordinator, db: str, what: str) -> None:
    coord = log
    read = held(coord, 0, 40)
    start, end, sources = 0, 40, [source(b) for b in read]
    partition = 0
    if what == "missing source":  # e.g. a batch committed in the range after the cleaner read it
        sources = sources[:1] + sources[2:]
    elif what == "unknown batch id":
        sources[3] = dataclasses.replace(sources[3], batch_id=10**6)
    elif what == "wrong coordinates":
        sources[1] = dataclasses.replace(sources[1], byte_offset=sources[1].byte_offset + 1)
    elif what == "straddles end":  # 10-19 reaches past the range's end
        start, end, sources = 0, 15, sources[:1]
    elif what == "straddles start":
        start, end, sources = 5, 20, sources[1:2]
    elif what == "past hw":
        sources = [source(b) for b in held(coord, 0, 50)]
        start, end = 0, 60
    elif what == "unknown partition":
        partition = 7
    elif what == "deleted topic":
        coord.delete_topics({TOPIC})
    req = CompactPartitionRequest(tp(partition), start, end, sources, [], end)
    before = snapshot(db)
    result = coord.compact_partition("compacted", 1, 1, req)
    assert (result.applied, result.removed_batches, result.removed_bytes) == (False, 0, 0)
    assert (result.new_object_state, result.emptied_object_keys) == (ObjectState.DELETING, ())
    assert without_files(snapshot(db)) == without_files(before)
    assert files(db)["compacted"] == (1, 0, "deleting", NOW + 1000)


def test_everything_compacted_away(coord: Coordinator, db: str, clock: FakeClock) -> None:
    assert put(coord, "a", batch(10), batch(10)) == [0, 10]
    read = held(coord, 0, 20)
    req, size = request(0, 20, read, [])
    assert size == 1
    result = coord.compact_partition("compacted", 0, 1, req)  # an empty object: nothing written
    assert result.applied and (result.removed_batches, result.removed_bytes) == (2, 200)
    assert (result.new_object_state, result.emptied_object_keys) == (ObjectState.DELETING, ("a",))
    assert files(db)["compacted"] == (0, 0, "deleting", NOW)
    assert files(db)["a"][1:3] == (0, "deleting")
    assert {f.object_key for f in coord.get_files_to_delete()} == {"a", "compacted"}
    assert coord.get_log_info(TOPIC, 0) == (0, 20, 0)
    assert coord.cleaner_checkpoints(TOPIC)[0] == 20
    # Nothing to read yet, and no error (compacted, not tiered), until something is committed.
    assert fetch(coord, 0) == fetch(coord, 19) == (ErrorCode.none, [])
    assert lookup(coord, ListOffsetsTimestamp.EARLIEST_LOCAL) == (-1, 0)
    assert lookup(coord, 0) == (-1, -1) and lookup(coord, ListOffsetsTimestamp.MAX_TIMESTAMP) == (-1, -1)
    assert put(coord, "b", batch(1, ts=900)) == [20]
    assert bases(fetch(coord, 3)[1]) == [(20, 20)]
    assert lookup(coord, 0) == (900, 20)


def test_cleaned_offset_is_stored_and_never_lowered(log: Coordinator) -> None:
    coord = log
    req, size = request(0, 10, held(coord, 0, 10), [cleaned(held(coord, 0, 10)[0])], cleaned_offset=20)
    assert coord.compact_partition("c1", size, 1, req).applied
    assert coord.cleaner_checkpoints(TOPIC) == {0: 20, 1: 0}
    read = held(coord, 10, 30)
    req, size = request(10, 30, read, [cleaned(b) for b in read], cleaned_offset=15)
    assert coord.compact_partition("c2", size, 1, req).applied
    assert coord.cleaner_checkpoints(TOPIC) == {0: 20, 1: 0}  # not lowered
    read = held(coord, 30, 40)
    req, size = request(30, 40, read, [cleaned(b) for b in read], cleaned_offset=40)
    assert coord.compact_partition("c3", size, 1, req).applied
    assert coord.cleaner_checkpoints(TOPIC) == {0: 40, 1: 0}
    req, size = request(30, 40, read, [cleaned(b) for b in read], cleaned_offset=50)  # stale: not applied
    assert not coord.compact_partition("c4", size, 1, req).applied
    assert coord.cleaner_checkpoints(TOPIC) == {0: 40, 1: 0}
    # A checkpoint below the range (the cleaner's choice): its interior gaps are still read across.
    assert put(coord, "d", batch(5, partition=1), batch(5, partition=1)) == [5, 10]
    read = held(coord, 5, 15, partition=1)
    req, size = request(5, 15, read, [cleaned(read[0], last=5), cleaned(read[1], base=14)], 0, partition=1)
    assert coord.compact_partition("c5", size, 1, req).applied
    assert coord.cleaner_checkpoints(TOPIC) == {0: 40, 1: 0}
    assert bases(fetch(coord, 0, partition=1)[1]) == [(0, 4), (5, 5), (14, 14)]
    assert bases(fetch(coord, 7, partition=1)[1]) == [(14, 14)]


def test_transaction_flags_and_state_survive(coord: Coordinator) -> None:
    laid_out, pos = [], 1
    for b in (
        plain(),
        data(1, 0, 0, records=3),
        marker(1, 0, commit=False),
        data(2, 0, 0, records=2),
        plain(),
    ):
        laid_out.append(dataclasses.replace(b, byte_offset=pos))
        pos += b.size
    responses = coord.commit_file("txns", 1, pos, laid_out)
    assert [r.assigned_base_offset for r in responses] == [0, 1, 4, 5, 7]  # 5-6: 2's ongoing transaction
    state_before = coord.transaction_state(TOPIC, 0)
    assert state_before == (5, [(1, 1, 4)])
    producers_before = coord.describe_producers(TOPIC, 0)
    read = held(coord, 0, 5)
    # The plain batch goes; the aborted transaction's data is rebuilt smaller (Kafka keeps a
    # rebuilt batch's offsets); the marker stays as it was.
    req, size = request(0, 5, read, [cleaned(read[1], size=20), cleaned(read[2])])
    assert coord.compact_partition("compacted", size, 1, req).applied
    assert coord.transaction_state(TOPIC, 0) == state_before
    assert coord.describe_producers(TOPIC, 0) == producers_before
    errors, got = fetch(coord, 0)
    assert errors == ErrorCode.none
    assert [(b.object_key, b.metadata.base_offset, b.metadata.last_offset, b.metadata.is_transactional,
             b.metadata.is_control, b.metadata.producer_id, b.metadata.producer_epoch,
             b.metadata.base_sequence, b.metadata.last_sequence) for b in got] == [
        ("compacted", 1, 3, True, False, 1, 0, 0, 2),
        ("compacted", 4, 4, True, True, 1, 0, -1, -1),
        ("txns", 5, 6, True, False, 2, 0, 0, 1),
        ("txns", 7, 7, False, False, -1, -1, -1, -1),
    ]  # fmt: skip
    (committed,) = coord.find_batches([FindBatchRequest(tp(0), 0, 10**6, True)], 10**6)
    assert bases(committed.batches) == [(1, 3), (4, 4)]  # below the LSO (5) only
    assert (committed.last_stable_offset, committed.aborted_transactions) == (5, [(1, 1)])


def test_append_times_and_time_lookups(coord: Coordinator, clock: FakeClock) -> None:
    appended_at = clock.now
    assert put(
        coord, "a", batch(10, ts=1, lat=True, partition=1), batch(10, ts=2, lat=True, partition=1)
    ) == [0, 10]
    assert put(coord, "b", batch(10, ts=1000), batch(10, ts=2000), batch(10, ts=3000)) == [0, 10, 20]
    clock.now += 5000
    # LogAppendTime: the same base offset keeps its append time; another one takes the batch's max timestamp.
    read = held(coord, 0, 20, partition=1)
    req, size = request(0, 20, read, [cleaned(read[0]), cleaned(read[1], base=15)], partition=1)
    assert coord.compact_partition("c1", size, 1, req).applied
    got = fetch(coord, 0, partition=1)[1]
    assert [(b.metadata.base_offset, b.metadata.log_append_timestamp) for b in got] == [
        (0, appended_at),
        (15, 2),
    ]
    assert lookup(coord, appended_at, partition=1) == (appended_at, 0)
    assert lookup(coord, appended_at + 1, partition=1) == (-1, -1)
    assert lookup(coord, ListOffsetsTimestamp.MAX_TIMESTAMP, partition=1) == (appended_at, 9)
    # A cleaned batch claiming a later time than the batches after it (2500 before 2000) keeps
    # the log's time index ordered: a lookup still finds the first batch at or after the time.
    read = held(coord, 0, 10)
    req, size = request(0, 10, read, [cleaned(read[0], batch_max_timestamp=2500)])
    assert coord.compact_partition("c2", size, 1, req).applied
    assert lookup(coord, 1500) == lookup(coord, 2200) == (2500, 0)
    assert lookup(coord, 2700) == (3000, 20)
    assert lookup(coord, ListOffsetsTimestamp.MAX_TIMESTAMP) == (3000, 29)
    assert put(coord, "c", batch(1, ts=2600)) == [30]
    assert lookup(coord, 2550) == (3000, 20)
    assert lookup(coord, 3001) == (-1, -1)


def test_the_swap_is_atomic_when_it_fails_midway(log: Coordinator, db: str) -> None:
    coord = log
    read = held(coord, 0, 40)
    req, size = request(0, 40, read, [cleaned(read[0])])
    before = snapshot(db)
    fail_updates_of_used_size(db, "b")  # fails after the batches were swapped, when "b" shrinks
    with pytest.raises(Exception, match="injected failure"):
        coord.compact_partition("compacted", size, 1, req)
    assert snapshot(db) == before
    assert coord.is_safe_to_delete_file("compacted")  # unknown: an orphan for the cleaner
    stop_failing(db)
    assert coord.compact_partition("compacted", size, 1, req).applied  # the coordinator still works


def test_invalid_requests_and_a_known_key_change_nothing(log: Coordinator, db: str) -> None:
    coord = log
    read = held(coord, 0, 40)
    good, size = request(0, 40, read, [cleaned(read[0]), cleaned(read[2], base=25)])
    new = good.new_batches

    def bad(**changes: object) -> CompactPartitionRequest:
        return dataclasses.replace(good, **changes)  # type: ignore[arg-type]

    srcs = good.source_batches
    cases: list[tuple[CompactPartitionRequest, int, str]] = [
        (bad(start_offset=40, end_offset=40), size, "empty"),
        (bad(start_offset=-1), size, "negative"),
        (bad(cleaned_offset=-1), size, "cleaned offset"),
        (good, -1, "size"),
        (bad(start_offset=5), size, "source batch 0..9"),
        (bad(end_offset=35), size, "source batch 30..39"),
        (bad(source_batches=[srcs[1], srcs[0], *srcs[2:]]), size, "out of offset order"),
        (bad(source_batches=[srcs[0], srcs[0]]), size, "more than once"),
        (bad(new_batches=[new[0], dataclasses.replace(new[1], last_offset=40)]), size, "new batch 25..40"),
        (bad(new_batches=[new[1], new[0]]), size, "out of offset order"),
        (bad(new_batches=[new[0], dataclasses.replace(new[1], base_offset=9)]), size, "overlaps"),
        (
            bad(new_batches=[dataclasses.replace(new[0], base_offset=9, last_offset=8)]),
            size,
            "new batch 9..8",
        ),
        (good, size - 1, "outside the new object"),
        (
            bad(new_batches=[new[0], dataclasses.replace(new[1], byte_offset=5)]),
            size,
            "overlap another batch",
        ),
        (bad(new_batches=[dataclasses.replace(new[0], size=0)]), size, "overlap another batch"),
    ]
    before = snapshot(db)
    for req, object_size, message in cases:
        with pytest.raises(ValueError, match=message):
            coord.compact_partition("compacted", object_size, 1, req)
    with pytest.raises(INTEGRITY_ERRORS):
        coord.compact_partition("a", size, 1, good)  # an object key is never reused
    with pytest.raises(INTEGRITY_ERRORS):
        coord.compact_partition("a", size, 1, bad(topic_id_partition=tp(7)))  # not even when nothing applies
    assert snapshot(db) == before
    assert coord.compact_partition("compacted", size, 1, good).applied


def test_faulty_wrapper_forwards_and_injects(log: Coordinator) -> None:
    faulty = FaultyBatchCoordinator(log)
    assert faulty.cleaner_checkpoints(TOPIC) == {0: 0, 1: 0}
    read = held(log, 0, 10)
    req, size = request(0, 10, read, [cleaned(read[0], base=9)])
    faulty.set_fault("compact_partition", Fault(failure_rate=1.0, after=True))
    with pytest.raises(CoordinatorUnavailableError, match="answer was lost"):
        faulty.compact_partition("compacted", size, 1, req)
    assert faulty.cleaner_checkpoints(TOPIC) == {0: 10, 1: 0}  # it ran
    faulty.set_fault("compact_partition", None)
    assert not faulty.compact_partition("again", size, 1, req).applied  # a retry finds the range changed
    faulty.set_fault("compact_partition", Fault(failure_rate=1.0))
    with pytest.raises(CoordinatorUnavailableError):
        faulty.compact_partition("never", size, 1, req)
    assert log.is_safe_to_delete_file("never")
    faulty.set_fault("cleaner_checkpoints", Fault(failure_rate=1.0))
    with pytest.raises(CoordinatorUnavailableError):
        faulty.cleaner_checkpoints(TOPIC)
    assert faulty.injected["compact_partition"] == 2 and faulty.injected["cleaner_checkpoints"] == 1


def test_long_reads_cross_many_gaps(coord: Coordinator) -> None:
    """More batches than a backend reads at once (PostgreSQL pages its reads): still every one."""
    assert put(coord, "many", *[batch(1, 10, ts=i) for i in range(300)]) == list(range(300))
    read = held(coord, 0, 300)
    req, size = request(0, 300, read, [cleaned(b) for b in read[1::2]])  # every odd offset survives
    assert coord.compact_partition("compacted", size, 1, req).applied
    odd = [(o, o) for o in range(1, 300, 2)]
    assert bases(fetch(coord, 0)[1]) == bases(fetch(coord, 0, committed=True)[1]) == odd
    assert bases(fetch(coord, 0, max_bytes=1000)[1]) == odd[:100]
    assert bases(fetch(coord, 200)[1]) == odd[100:]
    assert lookup(coord, 100) == (101, 101)


def test_cleaned_batches_wholly_below_the_log_start_are_not_kept(log: Coordinator, db: str) -> None:
    coord = log
    coord.delete_records([DeleteRecordsRequest(tp(0), 5)])  # inside 0-9, which stays
    read = held(coord, 0, 20)
    assert bases(read) == [(0, 9), (10, 19)]
    req, size = request(0, 20, read, [cleaned(read[0], last=3, size=30), cleaned(read[0], base=7, size=20)])
    result = coord.compact_partition("compacted", size, 1, req)
    assert result.applied and (result.removed_batches, result.removed_bytes) == (2, 200)
    assert files(db)["compacted"] == (51, 20, "uploaded", None)  # 0-3 is dead space: DeleteRecords took it
    assert coord.get_log_info(TOPIC, 0) == (5, 50, 320)
    assert bases(fetch(coord, 5)[1])[:2] == [(7, 9), (20, 29)]


def test_a_store_of_the_previous_schema_gains_the_checkpoints(db: str, clock: FakeClock) -> None:
    """The migration adds ``cleaned_offset`` to existing logs (0: never cleaned), their data kept."""
    if db.startswith("sqlite"):
        from shoal.store.sqlite.connection import apply_schema, open_sqlite
        from shoal.store.sqlite.coordinator.schema import COMPONENT, MIGRATIONS

        conn = open_sqlite(db.removeprefix("sqlite:///"))
        apply_schema(conn, COMPONENT, MIGRATIONS[:-1])
        conn.execute(
            "INSERT INTO diskless_logs (topic_id, partition, topic_name, high_watermark) VALUES (?, 0, 'orders', 7)",
            (TOPIC.bytes,),
        )
        conn.close()
    else:
        from shoal.store.postgres.connection import apply_schema as apply_pg_schema
        from shoal.store.postgres.connection import open_pool
        from shoal.store.postgres.coordinator.schema import COMPONENT as PG_COMPONENT
        from shoal.store.postgres.coordinator.schema import MIGRATIONS as PG_MIGRATIONS

        pool = open_pool(db, name="old-schema", max_size=1, timeout=10.0)
        try:
            apply_pg_schema(pool, PG_COMPONENT, PG_MIGRATIONS[:-1])
            with pool.connection() as pg:
                pg.execute(
                    "INSERT INTO diskless_logs (topic_id, partition, topic_name, high_watermark) "
                    "VALUES (%s, 0, 'orders', 7)",
                    (TOPIC,),
                )
        finally:
            pool.close()
    coord = open_coordinator(db, clock)
    try:
        assert coord.cleaner_checkpoints(TOPIC) == {0: 0}
        assert coord.get_log_info(TOPIC, 0) == (0, 7, 0)
    finally:
        coord.close()
