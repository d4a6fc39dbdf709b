"""Object compaction in the Batch Coordinator: candidates, batches by object, replace_batches, run
unchanged on every backend (the ``store_url`` fixture: an SQLite file, then a PostgreSQL database).

replace_batches must never bring back a batch deleted while the compactor worked, must mark
emptied objects for deletion (not forget them: the cleaner deletes them after the grace
period), and must be all-or-nothing.
"""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import psycopg
import pytest

from shoal.coordinator.api import (
    BatchCoordinator,
    BatchInfo,
    CommitBatchRequest,
    CreateTopicAndPartitionsRequest,
    DeleteRecordsRequest,
    EnforceRetentionRequest,
    FindBatchRequest,
    ObjectState,
    TopicIdPartition,
)
from shoal.coordinator.compaction_types import BatchMove
from shoal.protocol.errors import ErrorCode
from shoal.records.types import TimestampType
from shoal.store.factory import open_batch_coordinator_at

TOPIC = uuid.UUID("11111111-2222-3333-4444-555555555555")
OTHER = uuid.UUID("66666666-7777-8888-9999-000000000000")
NOW = 1_700_000_000_000

#: A BatchCoordinator that is also a CoordinatorInspector with get_log_info (every backend).
Coordinator = Any
#: What a backend raises for a known object key: its driver's integrity error.
INTEGRITY_ERRORS = (sqlite3.IntegrityError, psycopg.IntegrityError)


class FakeClock:
    def __init__(self, now: int = NOW) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def tp(partition: int, topic: uuid.UUID = TOPIC) -> TopicIdPartition:
    return TopicIdPartition(topic, partition, "orders" if topic == TOPIC else "other")


def commit(coord: Coordinator, key: str, *batches: tuple[TopicIdPartition, int], ts: int = NOW) -> None:
    """Commit (partition, size) batches laid out after a 1-byte WAL header in object ``key``."""
    reqs, pos = [], 1
    for i, (tip, size) in enumerate(batches):
        reqs.append(CommitBatchRequest(i, tip, pos, size, 0, 1, ts, TimestampType.CREATE_TIME))
        pos += size
    responses = coord.commit_file(key, 1, pos, reqs)
    assert all(r.errors == ErrorCode.none for r in responses)


def moves_for(batches: list[BatchInfo], start: int = 1) -> tuple[list[BatchMove], int]:
    """Moves that pack ``batches`` back to back (in the given order) after a 1-byte header."""
    out, pos = [], start
    for b in batches:
        m = b.metadata
        out.append(
            BatchMove(
                b.batch_id, m.topic_id_partition, m.base_offset, m.last_offset, b.object_key,
                m.byte_offset, pos, m.byte_size,
            )
        )  # fmt: skip
        pos += m.byte_size
    return out, pos


def all_batches(coord: Coordinator, tip: TopicIdPartition) -> list[BatchInfo]:
    log_start = coord.get_log_info(tip.topic_id, tip.partition)
    assert log_start is not None
    (resp,) = coord.find_batches([FindBatchRequest(tip, log_start[0], 10**9)], 10**9)
    return resp.batches


def side_sql(url: str, sql: str) -> list[tuple[Any, ...]]:
    """Run ``sql`` on the store through a separate connection (committed); its rows, if any."""
    if url.startswith("sqlite:"):
        conn = sqlite3.connect(Path(unquote(urlsplit(url).path)))
        try:
            rows = conn.execute(sql).fetchall()
            conn.commit()
            return rows
        finally:
            conn.close()
    with psycopg.connect(url, autocommit=True) as pg:
        cur = pg.execute(sql)  # type: ignore[arg-type] - test SQL
        return cur.fetchall() if cur.description else []


def snapshot(url: str) -> dict[str, list[tuple[object, ...]]]:
    """Every coordinator table, row by row, through a separate connection."""
    list_tables = (
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE 'diskless_%'"
        if url.startswith("sqlite:")
        else "SELECT tablename FROM pg_tables WHERE schemaname = current_schema() AND tablename LIKE 'diskless_%'"
    )
    tables = sorted(r[0] for r in side_sql(url, list_tables))
    return {t: sorted(side_sql(url, f"SELECT * FROM {t}")) for t in tables}


def files(url: str) -> dict[str, tuple[int, int, str, int | None]]:
    return {
        r[0]: (r[1], r[2], r[3], r[4])
        for r in side_sql(
            url, "SELECT object_key, size, used_size, state, marked_for_deletion_at FROM diskless_files"
        )
    }


def fail_updates_of_used_size(url: str, object_key: str) -> None:
    """Make every change of ``object_key``'s used size fail with 'injected failure' (a trigger)."""
    if url.startswith("sqlite:"):
        side_sql(
            url,
            "CREATE TRIGGER fail_midway BEFORE UPDATE OF used_size ON diskless_files "
            f"WHEN OLD.object_key = '{object_key}' BEGIN SELECT RAISE(ABORT, 'injected failure'); END",
        )
        return
    side_sql(
        url,
        "CREATE FUNCTION fail_midway() RETURNS trigger LANGUAGE plpgsql AS "
        "$$ BEGIN RAISE EXCEPTION 'injected failure'; END $$",
    )
    side_sql(
        url,
        "CREATE TRIGGER fail_midway BEFORE UPDATE OF used_size ON diskless_files FOR EACH ROW "
        f"WHEN (OLD.object_key = '{object_key}') EXECUTE FUNCTION fail_midway()",
    )


def stop_failing(url: str) -> None:
    side_sql(url, "DROP TRIGGER fail_midway" + ("" if url.startswith("sqlite:") else " ON diskless_files"))


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def db(store_url: str) -> str:
    """The store's URL, for the checks that read its tables directly (``snapshot``, ``files``)."""
    return store_url


@pytest.fixture
def coord(db: str, clock: FakeClock) -> Iterator[Coordinator]:
    c = open_batch_coordinator_at(db, clock)
    c.create_topic_and_partitions(
        {
            CreateTopicAndPartitionsRequest(TOPIC, "orders", 2),
            CreateTopicAndPartitionsRequest(OTHER, "other", 1),
        }
    )
    yield c
    c.close()


def test_satisfies_protocol(coord: Coordinator) -> None:
    protocol: BatchCoordinator = coord
    assert protocol.replace_batches is not None


def test_candidates_are_old_enough_small_or_sparse(coord: Coordinator, clock: FakeClock) -> None:
    commit(coord, "small", (tp(0), 100))
    commit(coord, "big", (tp(0), 5000))
    commit(coord, "sparse", (tp(0), 3000), (tp(1), 3000))
    coord.delete_records([DeleteRecordsRequest(tp(0), 6)])  # drops small's, big's and sparse's p0 batches
    clock.now += 10_000
    commit(coord, "young", (tp(1), 100))
    # "small" and "big" are now empty ('deleting'): never candidates.
    commit(coord, "small2", (tp(1), 100))
    got = coord.list_compaction_candidates(min_age_ms=5_000, max_object_bytes=1000, limit=10)
    assert [c.object_key for c in got] == ["sparse"]
    assert (got[0].size, got[0].used_size) == (6001, 3000)
    assert got[0].committed_at.timestamp() * 1000 == NOW
    everything = coord.list_compaction_candidates(min_age_ms=0, max_object_bytes=1000, limit=10)
    assert [c.object_key for c in everything] == ["sparse", "young", "small2"]
    assert [c.object_key for c in coord.list_compaction_candidates(0, 1000, 2)] == ["sparse", "young"]
    assert coord.list_compaction_candidates(0, 10, 10)[0].object_key == "sparse"  # sparse whatever its size


def test_object_batches_in_byte_order_from_one_scan(coord: Coordinator) -> None:
    commit(coord, "a", (tp(1), 10), (tp(0), 20), (tp(0, OTHER), 30))
    commit(coord, "b", (tp(0), 40))
    got = coord.list_object_batches(["a", "b", "nope"])
    assert set(got) == {"a", "b", "nope"} and got["nope"] == []
    assert [
        (b.metadata.topic_id_partition, b.metadata.byte_offset, b.metadata.byte_size) for b in got["a"]
    ] == [
        (tp(1), 1, 10),
        (tp(0), 11, 20),
        (tp(0, OTHER), 31, 30),
    ]
    assert got["a"][2].metadata.topic_id_partition.topic_name == "other"
    assert [b.metadata.base_offset for b in got["b"]] == [2]
    assert coord.list_object_batches([]) == {}


def test_replace_moves_batches_and_marks_emptied_objects(
    coord: Coordinator, clock: FakeClock, db: str
) -> None:
    commit(coord, "a", (tp(0), 100), (tp(1), 50))
    commit(coord, "b", (tp(0), 70), (tp(0, OTHER), 30))
    commit(coord, "c", (tp(1), 20), (tp(0), 10))
    logs_before = [coord.get_log_info(TOPIC, p) for p in (0, 1)] + [coord.get_log_info(OTHER, 0)]
    offsets_before = {tip: [(b.metadata.base_offset, b.metadata.last_offset, b.batch_id) for b in all_batches(coord, tip)]
                      for tip in (tp(0), tp(1), tp(0, OTHER))}  # fmt: skip
    by_object = coord.list_object_batches(["a", "b"])
    # Only a and b, laid out per partition in offset order (what the compaction job writes).
    planned = sorted(
        by_object["a"] + by_object["b"],
        key=lambda b: (b.metadata.topic_id_partition.topic_id.bytes, b.metadata.topic_id_partition.partition,
                       b.metadata.last_offset),
    )  # fmt: skip
    moves, size = moves_for(planned)
    clock.now += 1000
    result = coord.replace_batches("new", size, moves, -1)
    assert (result.moved, result.skipped, result.moved_bytes) == (4, 0, 250)
    assert result.new_object_state == ObjectState.UPLOADED
    assert result.emptied_object_keys == ("a", "b")

    state = files(db)
    assert state["new"] == (251, 250, "uploaded", None)
    assert state["a"] == (151, 0, "deleting", NOW + 1000)
    assert state["b"] == (101, 0, "deleting", NOW + 1000)
    assert state["c"] == (31, 30, "uploaded", None)
    assert {f.object_key for f in coord.get_files_to_delete()} == {"a", "b"}
    assert not coord.is_safe_to_delete_file("new")

    # Same offsets, same batch ids, new coordinates; logs unchanged.
    for tip, expected in offsets_before.items():
        got = all_batches(coord, tip)
        assert [(b.metadata.base_offset, b.metadata.last_offset, b.batch_id) for b in got] == expected
    new_coords = {m.batch_id: m.new_byte_offset for m in moves}
    for tip in (tp(0), tp(1), tp(0, OTHER)):
        for b in all_batches(coord, tip):
            if b.batch_id in new_coords:
                assert (b.object_key, b.metadata.byte_offset) == ("new", new_coords[b.batch_id])
            else:
                assert b.object_key == "c"
    assert [coord.get_log_info(TOPIC, p) for p in (0, 1)] + [coord.get_log_info(OTHER, 0)] == logs_before
    described = coord.describe_object("new")
    assert described is not None and [b.metadata.byte_offset for b in described.batches] == [1, 101, 171, 221]
    overview = coord.describe_topic(TOPIC)
    assert overview is not None and overview.object_count == 2 and overview.deleted_object_count == 2

    # Retention later shrinks the NEW object, and empties it like any other.
    coord.enforce_retention([EnforceRetentionRequest(tip, -1, 0) for tip in (tp(0), tp(1), tp(0, OTHER))])
    assert files(db)["new"][1:3] == (0, "deleting")


def test_batches_deleted_meanwhile_are_skipped_never_resurrected(coord: Coordinator, db: str) -> None:
    commit(coord, "a", (tp(0), 100), (tp(1), 50), (tp(0, OTHER), 10))
    commit(coord, "b", (tp(0), 70), (tp(1), 30))
    planned = [b for key in ("a", "b") for b in coord.list_object_batches(["a", "b"])[key]]
    moves, size = moves_for(planned)

    # While the compactor copies: DeleteRecords on p0 (both batches), retention on p1 (the first),
    # DeleteTopics on OTHER.
    coord.delete_records([DeleteRecordsRequest(tp(0), 4)])
    coord.enforce_retention([EnforceRetentionRequest(tp(1), 30, -1)])
    coord.delete_topics({OTHER})
    assert [b.metadata.byte_size for b in all_batches(coord, tp(1))] == [30]
    before = snapshot(db)["diskless_batches"]

    result = coord.replace_batches("new", size, moves, -1)
    assert (result.moved, result.skipped, result.moved_bytes) == (1, 4, 30)
    assert all_batches(coord, tp(0)) == []
    assert coord.get_log_info(TOPIC, 0) == (4, 4, 0)
    (only,) = all_batches(coord, tp(1))
    assert (only.object_key, only.metadata.base_offset) == ("new", 2)
    assert coord.get_log_info(OTHER, 0) is None
    after = snapshot(db)["diskless_batches"]
    assert len(after) == len(before) == 1  # updated in place, nothing inserted
    state = files(db)
    assert state["new"][:3] == (size, 30, "uploaded")  # the skipped batches' bytes are dead space
    assert state["a"][1:3] == (0, "deleting") and state["b"][1:3] == (0, "deleting")
    assert result.emptied_object_keys == ("b",)  # a was already emptied by the deletions, not by us


def test_second_compactor_with_the_same_plan_moves_nothing(coord: Coordinator, db: str) -> None:
    commit(coord, "a", (tp(0), 100), (tp(1), 50))
    planned = coord.list_object_batches(["a"])["a"]
    moves, size = moves_for(planned)
    first = coord.replace_batches("new-1", size, moves, -1)
    second = coord.replace_batches("new-2", size, moves, -1)  # e.g. a retried Spark task
    assert (first.moved, second.moved, second.skipped) == (2, 0, 2)
    assert second.new_object_state == ObjectState.DELETING and second.emptied_object_keys == ()
    state = files(db)
    assert state["new-1"][1:3] == (150, "uploaded")
    assert state["new-2"][1:3] == (0, "deleting") and state["new-2"][3] is not None
    assert {b.object_key for b in all_batches(coord, tp(0)) + all_batches(coord, tp(1))} == {"new-1"}


def test_moves_that_do_not_match_the_current_coordinates_are_skipped(coord: Coordinator, db: str) -> None:
    commit(coord, "a", (tp(0), 100), (tp(1), 50))
    b0, b1 = coord.list_object_batches(["a"])["a"]
    (m0, m1), size = moves_for([b0, b1])
    wrong_offset = BatchMove(m0.batch_id, m0.topic_id_partition, m0.base_offset, m0.last_offset, "a",
                             m0.old_byte_offset + 1, m0.new_byte_offset, m0.byte_size)  # fmt: skip
    result = coord.replace_batches("new", size, [wrong_offset, m1], -1)
    assert (result.moved, result.skipped) == (1, 1)
    assert files(db)["a"][1:3] == (100, "uploaded")  # partly moved: still alive with its p0 batch
    assert result.emptied_object_keys == ()
    assert all_batches(coord, tp(0))[0].object_key == "a"


def test_replace_is_atomic_when_it_fails_midway(coord: Coordinator, db: str) -> None:
    commit(coord, "a", (tp(0), 100), (tp(1), 50))
    commit(coord, "b", (tp(0), 70))
    planned = [b for key in ("a", "b") for b in coord.list_object_batches(["a", "b"])[key]]
    moves, size = moves_for(planned)
    before = snapshot(db)
    # Fail inside the transaction after the batches were repointed: when old object "b" is shrunk.
    fail_updates_of_used_size(db, "b")
    with pytest.raises(Exception, match="injected failure"):
        coord.replace_batches("new", size, moves, -1)
    assert snapshot(db) == before
    assert coord.is_safe_to_delete_file("new")  # unknown: an orphan for the cleaner
    assert {b.object_key for b in all_batches(coord, tp(0)) + all_batches(coord, tp(1))} == {"a", "b"}

    stop_failing(db)
    assert coord.replace_batches("new", size, moves, -1).moved == 3  # the coordinator still works


def test_invalid_moves_and_a_known_key_change_nothing(coord: Coordinator, db: str) -> None:
    commit(coord, "a", (tp(0), 100), (tp(1), 50))
    (m0, m1), size = moves_for(coord.list_object_batches(["a"])["a"])
    before = snapshot(db)
    overlapping = BatchMove(m1.batch_id, m1.topic_id_partition, m1.base_offset, m1.last_offset, "a",
                            m1.old_byte_offset, m0.new_byte_offset + 1, m1.byte_size)  # fmt: skip
    with pytest.raises(ValueError, match="overlap"):
        coord.replace_batches("new", size, [m0, overlapping], -1)
    with pytest.raises(ValueError, match="outside"):
        coord.replace_batches("new", size - 1, [m0, m1], -1)
    with pytest.raises(ValueError, match="more than once"):
        coord.replace_batches("new", size, [m0, m0], -1)
    with pytest.raises(INTEGRITY_ERRORS):
        coord.replace_batches("a", size, [m0, m1], -1)  # an object key is never reused
    assert snapshot(db) == before
