"""The SQLite group store: group metadata and committed offsets on a real database file."""

from __future__ import annotations

import sqlite3
import uuid
from pathlib import Path

import pytest

from shoal.store.groups import (
    CommittedOffset,
    DeleteGroup,
    DeleteOffsets,
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


def test_offsets_and_groups_round_trip_across_reopen(tmp_path: Path) -> None:
    db = tmp_path / "shoal.db"
    store = SqliteGroupStore(db)
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

    groups, offsets = SqliteGroupStore(db).load()
    assert groups == [group], "members must come back in their stored order with their assignments"
    assert offsets["g"] == [
        offset("t", 0, 11, leader_epoch=-1),
        offset("t", 1, 20, expire_timestamp_ms=99, topic_id=None),
    ]
    assert offsets["simple"] == [offset("t", 0, 5, metadata="")]


def test_put_group_replaces_members_and_delete_group_removes_everything(tmp_path: Path) -> None:
    store = SqliteGroupStore(tmp_path / "shoal.db")
    store.apply([PutGroup(StoredGroup("g", "consumer", "range", 1, "a", 1, (member("a"), member("b"))))])
    store.apply([PutGroup(StoredGroup("g", "consumer", None, 2, None, 2, ()))])  # became Empty
    groups, _ = store.load()
    assert groups == [StoredGroup("g", "consumer", None, 2, None, 2, ())]

    store.apply([PutOffsets("g", (offset("t", 0, 1), offset("u", 0, 2))), DeleteOffsets("g", (("t", 0),))])
    assert store.load()[1] == {"g": [offset("u", 0, 2)]}
    store.apply([DeleteGroup("g")])
    assert store.load() == ([], {})


def test_a_failing_batch_applies_nothing(tmp_path: Path) -> None:
    store = SqliteGroupStore(tmp_path / "shoal.db")
    bad = CommittedOffset("t", 0, None, 1, -1, None, 1)  # type: ignore[arg-type]  # metadata NOT NULL
    with pytest.raises(sqlite3.IntegrityError):
        store.apply([PutOffsets("g", (offset("t", 1, 1),)), PutOffsets("g", (bad,))])
    assert store.load() == ([], {})


def test_shares_the_metadata_database_file(tmp_path: Path) -> None:
    db = tmp_path / "shoal.db"
    metadata = SqliteMetadataStore(db)
    store = SqliteGroupStore(db)
    store.apply([PutOffsets("g", (offset("t", 0, 1),))])
    tables = {row[0] for row in sqlite3.connect(db).execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert {"group_metadata", "group_members", "group_offsets", "metadata_log"} <= tables
    metadata.close()
