"""The group store contract (group metadata and committed offsets), run unchanged on every backend.

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
    DeleteGroup,
    DeleteOffsets,
    GroupStore,
    PutGroup,
    PutOffsets,
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
    assert {"group_metadata", "group_members", "group_offsets", "metadata_log"} <= tables
    store.close()
    metadata.close()
