"""The group store contract (group metadata, committed offsets and transactions' pending offsets), run
unchanged on every backend.

Each test runs once on an SQLite file and once on a fresh PostgreSQL database (the ``store_url``
fixture), through the factory's ``open_group_store_at``: what the broker opens.
"""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from shoal.store.factory import open_group_store_at, open_metadata_store_at
from shoal.store.groups import (
    CommittedOffset,
    CompleteTransaction,
    DeleteGroup,
    DeleteOffsets,
    GroupStore,
    PendingOffset,
    PutGroup,
    PutOffsets,
    PutPendingOffsets,
    StoredGroup,
    StoredMember,
)
from shoal.store.sqlite.groups import SqliteGroupStore
from shoal.store.sqlite.metadata_log import SqliteMetadataStore

TOPIC_ID = uuid.uuid4()


def offset(topic: str, partition: int, value: int, **kw: object) -> CommittedOffset:
    fields: dict = {
        "topic": topic,
        "partition": partition,
        "topic_id": TOPIC_ID,
        "offset": value,
        "leader_epoch": 3,
        "metadata": "meta",
        "commit_timestamp_ms": 1000,
    }
    fields.update(kw)
    return CommittedOffset(**fields)


def member(member_id: str, assignment: bytes = b"a") -> StoredMember:
    return StoredMember(member_id, None, "client", "/127.0.0.1", 30000, 10000, b"sub-" + member_id.encode(), assignment)


@pytest.fixture
def store(store_url: str) -> Iterator[GroupStore]:
    s = open_group_store_at(store_url)
    yield s
    s.close()


def test_offsets_and_groups_round_trip_across_reopen(store_url: str) -> None:
    store = open_group_store_at(store_url)
    group = StoredGroup("g", "consumer", "range", 7, "m2", 12345, (member("m2"), member("m1", b"")))
    store.apply(
        [
            PutOffsets("g", (offset("t", 0, 10), offset("t", 1, 20, expire_timestamp_ms=99, topic_id=None))),
            PutGroup(group),
            PutOffsets("simple", (offset("t", 0, 5, metadata=""),)),
        ]
    )
    store.apply([PutOffsets("g", (offset("t", 0, 11, leader_epoch=-1),))])  # a later commit replaces the row
    store.close()

    reopened = open_group_store_at(store_url)
    try:
        groups, offsets = reopened.load()
    finally:
        reopened.close()
    assert groups == [group], "members must come back in their stored order with their assignments"
    assert offsets["g"] == [
        offset("t", 0, 11, leader_epoch=-1),
        offset("t", 1, 20, expire_timestamp_ms=99, topic_id=None),
    ]
    assert offsets["simple"] == [offset("t", 0, 5, metadata="")]


def test_put_group_replaces_members_and_delete_group_removes_everything(store: GroupStore) -> None:
    store.apply([PutGroup(StoredGroup("g", "consumer", "range", 1, "a", 1, (member("a"), member("b"))))])
    store.apply([PutGroup(StoredGroup("g", "consumer", None, 2, None, 2, ()))])  # became Empty
    groups, _ = store.load()
    assert groups == [StoredGroup("g", "consumer", None, 2, None, 2, ())]

    store.apply([PutOffsets("g", (offset("t", 0, 1), offset("u", 0, 2))), DeleteOffsets("g", (("t", 0),))])
    assert store.load()[1] == {"g": [offset("u", 0, 2)]}
    store.apply([DeleteGroup("g")])
    assert store.load() == ([], {})


def test_mutations_apply_in_order_within_a_batch(store: GroupStore) -> None:
    store.apply(
        [
            PutOffsets("g", (offset("t", 0, 1),)),
            DeleteGroup("g"),
            PutOffsets("g", (offset("t", 0, 2),)),
            PutGroup(StoredGroup("g", "consumer", "range", 1, "a", 1, (member("a"),))),
            PutGroup(StoredGroup("g", "consumer", "range", 2, "b", 2, (member("b"),))),
            DeleteOffsets("h", (("t", 0),)),  # nothing there: a no-op
            PutOffsets("g", ()),
            DeleteOffsets("g", ()),
        ]
    )
    groups, offsets = store.load()
    assert groups == [StoredGroup("g", "consumer", "range", 2, "b", 2, (member("b"),))]
    assert offsets == {"g": [offset("t", 0, 2)]}
    store.apply([])
    assert store.load() == (groups, offsets)


def test_load_orders_by_code_point_whatever_the_locale(store: GroupStore) -> None:
    ids = ["b", "B", "_x", "a", "A-1", "ä", "a.b", "10", "9"]
    store.apply([PutGroup(StoredGroup(g, None, None, 0, None, -1)) for g in ids])
    store.apply([PutOffsets("g", tuple(offset(t, p, 1) for t in ("t_b", "T", "t.a", "ta") for p in (10, 2, 0)))])
    groups, offsets = store.load()
    assert [g.group_id for g in groups] == sorted(ids)  # Python sorts str by code point, as SQLite's BINARY
    assert [(o.topic, o.partition) for o in offsets["g"]] == sorted(
        (t, p) for t in ("t_b", "T", "t.a", "ta") for p in (10, 2, 0)
    )


def test_values_at_the_edges_round_trip(store: GroupStore) -> None:
    big = 2**63 - 1
    members = (
        StoredMember("m-ü", "static-1", "client ☃", "/::1", 2**31 - 1, 1, bytes(range(256)), b"\x00" * 10),
        member("m2", b""),
    )
    group = StoredGroup("g'\"\\", "consumer", "cooperative-sticky", 2**31 - 1, "m-ü", big, members)
    offsets = (
        offset("t", 2**31 - 1, big, leader_epoch=2**31 - 1, commit_timestamp_ms=big, expire_timestamp_ms=big),
        offset("u", 0, -1, leader_epoch=-1, metadata="x" * 10_000, topic_id=uuid.UUID(int=0)),
    )
    store.apply([PutGroup(group), PutOffsets(group.group_id, offsets)])
    assert store.load() == ([group], {group.group_id: list(offsets)})


def test_a_failing_batch_applies_nothing(store: GroupStore) -> None:
    store.apply([PutOffsets("g", (offset("t", 0, 1),))])
    bad = CommittedOffset("t", 0, None, 1, -1, None, 1)  # type: ignore[arg-type]  # metadata NOT NULL
    with pytest.raises((sqlite3.IntegrityError, psycopg.IntegrityError)):
        store.apply([PutOffsets("g", (offset("t", 1, 1),)), DeleteGroup("g"), PutOffsets("g", (bad,))])
    assert store.load() == ([], {"g": [offset("t", 0, 1)]})
    store.apply([PutOffsets("g", (offset("t", 1, 1),))])  # the store is still usable
    assert store.load()[1] == {"g": [offset("t", 0, 1), offset("t", 1, 1)]}


def test_two_stores_on_one_database_see_each_others_writes(store_url: str) -> None:
    first, second = open_group_store_at(store_url), open_group_store_at(store_url)
    try:
        first.apply([PutOffsets("g", (offset("t", 0, 1),))])
        assert second.load()[1] == {"g": [offset("t", 0, 1)]}
        second.apply([PutOffsets("g", (offset("t", 0, 2),))])
        assert first.load()[1] == {"g": [offset("t", 0, 2)]}
    finally:
        first.close()
        second.close()


def test_shares_the_store_with_the_metadata_log(store_url: str) -> None:
    metadata = open_metadata_store_at(store_url)
    store = open_group_store_at(store_url)
    try:
        store.apply([PutOffsets("g", (offset("t", 0, 1),))])
        assert metadata.append([], -1, 1) == -1
        assert store.load()[1] == {"g": [offset("t", 0, 1)]}
    finally:
        store.close()
        metadata.close()


def test_sqlite_shares_the_metadata_database_file(tmp_path: Path) -> None:
    db = tmp_path / "shoal.db"
    metadata = SqliteMetadataStore(db)
    store = SqliteGroupStore(db)
    store.apply([PutOffsets("g", (offset("t", 0, 1),))])
    tables = {row[0] for row in sqlite3.connect(db).execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert {"group_metadata", "group_members", "group_offsets", "group_pending_offsets", "metadata_log"} <= tables
    store.close()
    metadata.close()


# -- pending transactional offsets (TxnOffsetCommit) ------------------------------------------------


def pending(producer_id: int, topic: str, partition: int, value: int, sequence: int, **kw: object) -> PendingOffset:
    superseded = bool(kw.pop("superseded", False))
    return PendingOffset(producer_id, offset(topic, partition, value, **kw), sequence, superseded)


def test_pending_offsets_are_kept_apart_replaced_per_producer_and_partition_and_reloaded(store_url: str) -> None:
    store = open_group_store_at(store_url)
    store.apply(
        [
            PutOffsets("g", (offset("t", 0, 5),)),
            PutPendingOffsets("g", (pending(7, "t", 0, 10, 1), pending(7, "t", 1, 20, 2, topic_id=None))),
            PutPendingOffsets("g", (pending(9, "t", 0, 30, 3, metadata="", leader_epoch=-1),)),
            PutPendingOffsets("h", (pending(7, "u", 2, 1, 4),)),
        ]
    )
    store.apply([PutPendingOffsets("g", (pending(7, "t", 0, 11, 5, commit_timestamp_ms=2000),))])  # replaces
    assert store.load()[1] == {"g": [offset("t", 0, 5)]}, "pending offsets are not committed offsets"
    store.close()

    reopened = open_group_store_at(store_url)
    try:
        everything = reopened.load_pending()
        of_seven = reopened.load_pending(7)
        assert reopened.load_pending(8) == {}
    finally:
        reopened.close()
    assert everything == {
        "g": [
            pending(7, "t", 0, 11, 5, commit_timestamp_ms=2000),
            pending(7, "t", 1, 20, 2, topic_id=None),
            pending(9, "t", 0, 30, 3, metadata="", leader_epoch=-1),
        ],
        "h": [pending(7, "u", 2, 1, 4)],
    }
    assert of_seven == {"g": everything["g"][:2], "h": everything["h"]}


def test_a_commit_marker_makes_pending_offsets_committed_and_an_abort_drops_them(store: GroupStore) -> None:
    store.apply(
        [
            PutOffsets("g", (offset("t", 0, 5), offset("t", 9, 1))),
            PutPendingOffsets("g", (pending(7, "t", 0, 10, 1, leader_epoch=-1), pending(7, "u", 0, 20, 2))),
            PutPendingOffsets("g", (pending(8, "t", 1, 30, 3),)),
            PutPendingOffsets("h", (pending(7, "t", 0, 40, 4),)),
        ]
    )
    store.apply([CompleteTransaction("g", 7, commit=True)])
    assert store.load()[1] == {
        "g": [offset("t", 0, 10, leader_epoch=-1), offset("t", 9, 1), offset("u", 0, 20)],  # t-0 replaced
    }
    assert store.load_pending() == {"g": [pending(8, "t", 1, 30, 3)], "h": [pending(7, "t", 0, 40, 4)]}

    store.apply([CompleteTransaction("g", 8, commit=False), CompleteTransaction("g", 8, commit=True)])
    assert store.load()[1]["g"] == [offset("t", 0, 10, leader_epoch=-1), offset("t", 9, 1), offset("u", 0, 20)]
    assert store.load_pending() == {"h": [pending(7, "t", 0, 40, 4)]}

    # Markers are retried: completing again, or a producer with nothing pending, changes nothing.
    store.apply([CompleteTransaction("g", 7, commit=True), CompleteTransaction("x", 1, commit=False)])
    assert store.load()[1]["g"] == [offset("t", 0, 10, leader_epoch=-1), offset("t", 9, 1), offset("u", 0, 20)]
    assert store.load_pending() == {"h": [pending(7, "t", 0, 40, 4)]}


def test_the_latest_write_of_a_partition_wins_as_in_kafka(store: GroupStore) -> None:
    # A plain commit after a pending offset: that transaction's commit leaves the plain one in place.
    store.apply([PutPendingOffsets("g", (pending(7, "t", 0, 10, 1), pending(7, "t", 1, 11, 2)))])
    store.apply([PutOffsets("g", (offset("t", 0, 99),))])
    assert store.load_pending()["g"] == [pending(7, "t", 0, 10, 1, superseded=True), pending(7, "t", 1, 11, 2)]
    store.apply([CompleteTransaction("g", 7, commit=True)])
    assert store.load()[1] == {"g": [offset("t", 0, 99), offset("t", 1, 11)]}

    # Written again after the plain commit, a pending offset is the latest write once more.
    store.apply([PutPendingOffsets("g", (pending(7, "t", 0, 10, 3),)), PutOffsets("g", (offset("t", 0, 100),))])
    store.apply([PutPendingOffsets("g", (pending(7, "t", 0, 12, 4),))])
    store.apply([CompleteTransaction("g", 7, commit=True)])
    assert store.load()[1]["g"][0] == offset("t", 0, 12)

    # Two transactions: the later write commits first, so the earlier one no longer applies ...
    store.apply([PutPendingOffsets("g", (pending(1, "t", 0, 20, 5), pending(1, "u", 0, 1, 6)))])
    store.apply([PutPendingOffsets("g", (pending(2, "t", 0, 30, 7), pending(2, "u", 1, 2, 8)))])
    store.apply([CompleteTransaction("g", 2, commit=True)])
    assert store.load_pending()["g"] == [pending(1, "t", 0, 20, 5, superseded=True), pending(1, "u", 0, 1, 6)]
    store.apply([CompleteTransaction("g", 1, commit=True)])
    assert store.load()[1]["g"] == [offset("t", 0, 30), offset("t", 1, 11), offset("u", 0, 1), offset("u", 1, 2)]
    # ... while an earlier write committing first is replaced by the later one when that commits.
    store.apply([PutPendingOffsets("g", (pending(1, "t", 0, 40, 9),)), PutPendingOffsets("g", (pending(2, "t", 0, 50, 10),))])
    store.apply([CompleteTransaction("g", 1, commit=True)])
    assert store.load_pending()["g"] == [pending(2, "t", 0, 50, 10)]
    store.apply([CompleteTransaction("g", 2, commit=True)])
    assert store.load()[1]["g"][0] == offset("t", 0, 50)
    assert store.load_pending() == {}


def test_deleting_offsets_or_the_group_drops_its_pending_offsets(store: GroupStore) -> None:
    store.apply(
        [
            PutOffsets("g", (offset("t", 0, 1),)),
            PutPendingOffsets("g", (pending(7, "t", 0, 2, 1), pending(7, "t", 1, 3, 2), pending(8, "t", 1, 4, 3))),
            PutPendingOffsets("h", (pending(7, "t", 1, 5, 4),)),
        ]
    )
    store.apply([DeleteOffsets("g", (("t", 1),))])  # Kafka's tombstone: committed and pending alike
    assert store.load_pending() == {"g": [pending(7, "t", 0, 2, 1)], "h": [pending(7, "t", 1, 5, 4)]}
    store.apply([DeleteGroup("g")])
    assert store.load() == ([], {})
    assert store.load_pending() == {"h": [pending(7, "t", 1, 5, 4)]}
    store.apply([CompleteTransaction("g", 7, commit=True)])  # the group's part of the transaction went with it
    assert store.load() == ([], {})


def test_pending_offsets_at_the_edges_round_trip_and_a_failing_batch_applies_none(store: GroupStore) -> None:
    big = 2**63 - 1
    edge = PendingOffset(
        big, offset("t'\"", 2**31 - 1, big, leader_epoch=2**31 - 1, commit_timestamp_ms=big, expire_timestamp_ms=big), big
    )
    store.apply([PutPendingOffsets("g-ü", (edge, pending(-1, "u", 0, -1, 0, metadata="x" * 10_000)))])
    assert store.load_pending() == {"g-ü": [pending(-1, "u", 0, -1, 0, metadata="x" * 10_000), edge]}
    bad = PendingOffset(1, CommittedOffset("t", 0, None, 1, -1, None, 1), 1)  # type: ignore[arg-type]
    with pytest.raises((sqlite3.IntegrityError, psycopg.IntegrityError)):
        store.apply([CompleteTransaction("g-ü", big, commit=True), PutPendingOffsets("g-ü", (bad,))])
    assert store.load()[1] == {}
    assert len(store.load_pending()["g-ü"]) == 2


def test_a_database_of_the_previous_schema_gains_the_pending_table(store_url: str) -> None:
    """Version 1 of the group tables (before TxnOffsetCommit) is migrated in place, its data kept."""
    if store_url.startswith("sqlite"):
        from shoal.store.sqlite.connection import apply_schema, open_sqlite
        from shoal.store.sqlite.groups import _MIGRATIONS as SQLITE_MIGRATIONS

        conn = open_sqlite(store_url.removeprefix("sqlite:///"))
        apply_schema(conn, "group_coordinator", SQLITE_MIGRATIONS[:1])
        conn.execute(
            "INSERT INTO group_offsets VALUES ('g', 't', 0, NULL, 5, 3, 'meta', 1000, NULL)"
        )
        conn.close()
    else:
        from shoal.store.postgres.connection import PooledStore
        from shoal.store.postgres.groups import _MIGRATIONS as POSTGRES_MIGRATIONS

        old = PooledStore(
            store_url, what="group store", component="group_coordinator", migrations=POSTGRES_MIGRATIONS[:1],
            timeout=10.0, max_connections=1,
        )
        old._run(
            "seeding",
            lambda conn: conn.execute("INSERT INTO group_offsets VALUES ('g', 't', 0, NULL, 5, 3, 'meta', 1000, NULL)"),
        )
        old.close()
    store = open_group_store_at(store_url)
    try:
        assert store.load() == ([], {"g": [offset("t", 0, 5, topic_id=None)]})
        store.apply([PutPendingOffsets("g", (pending(7, "t", 0, 6, 1),)), CompleteTransaction("g", 7, commit=True)])
        assert store.load()[1] == {"g": [offset("t", 0, 6)]}
    finally:
        store.close()
