"""Groups split between brokers: Kafka's group -> ``__consumer_offsets`` partition mapping, and group
coordinators that serve only the groups they own, handing groups over through the shared store.

Two coordinators on one SQLite file stand for two brokers; each has its own manual timer and clock
(the helpers of test_groups_coordinator.py drive them).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable, Collection
from pathlib import Path
from typing import Any

import pytest

from shoal.groups.coordinator import GroupCoordinator
from shoal.groups.state import heartbeat_key, join_key
from shoal.protocol.errors import ErrorCode as E
from shoal.protocol.key_partitions import group_partition, java_string_hash, kafka_abs
from shoal.store.sqlite.groups import SqliteGroupStore
from tests.unit.test_groups_coordinator import (
    CONFIG,
    DELAY_MS,
    SESSION_MS,
    Clock,
    Env,
    ManualTimer,
    commit,
    entry,
    heartbeat,
    inline,
    join,
    member_id_for,
    settle,
    stable_group,
    state,
    sync,
)

# -- group -> partition ---------------------------------------------------------------------------


def reference_hash(s: str) -> int:
    """String.hashCode as its javadoc defines it, s[0]*31^(n-1) + ... + s[n-1] over UTF-16 code units,
    summed exactly and only then wrapped to a Java int."""
    units: list[int] = []
    for ch in s:
        cp = ord(ch)
        if cp > 0xFFFF:
            cp -= 0x10000
            units += [0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF)]
        else:
            units.append(cp)
    n = len(units)
    total = sum(u * 31 ** (n - 1 - i) for i, u in enumerate(units)) % 2**32
    return total - 2**32 if total >= 2**31 else total


@pytest.mark.parametrize(
    ("group_id", "java_hash"),
    [
        ("", 0),
        ("hello", 99162322),  # Java: "hello".hashCode()
        ("Aa", 2112),  # the classic collision: "Aa" and "BB"
        ("BB", 2112),
        ("Hello World", -862545276),
        ("polygenelubricants", -(2**31)),  # hashCode() == Integer.MIN_VALUE
        ("\U0001f600", 0xD83D * 31 + 0xDE00),  # one code point, two UTF-16 units
    ],
)
def test_java_string_hash_of_known_strings(group_id: str, java_hash: int) -> None:
    assert java_string_hash(group_id) == java_hash


def test_group_partition_is_kafkas_utils_abs_of_the_hash_modulo_the_partitions() -> None:
    assert group_partition("", 50) == 0
    assert group_partition("hello", 50) == 99162322 % 50
    # Utils.abs, not the producer's toPositive (h & 0x7fffffff): they differ for negative hashes.
    assert kafka_abs(-862545276) == 862545276 and group_partition("Hello World", 50) == 862545276 % 50 == 26
    assert (-862545276 & 0x7FFFFFFF) % 50 != 26
    # Math.abs(Integer.MIN_VALUE) is still negative: Kafka's Utils.abs makes it 0.
    assert kafka_abs(-(2**31)) == 0 and group_partition("polygenelubricants", 7) == 0
    with pytest.raises(ValueError):
        group_partition("g", 0)


@pytest.mark.parametrize(
    "group_id",
    ["group-1", "group-2", "console-consumer-12345", "connect-cluster", "ünïcödé", "组", "a\U0001f600b", "𝔊" * 9,
     "x" * 500],
)
def test_group_partition_agrees_with_the_reference(group_id: str) -> None:
    java = reference_hash(group_id)
    assert java_string_hash(group_id) == java
    for partitions in (1, 3, 50, 1000):
        expected = (0 if java == -(2**31) else abs(java)) % partitions
        assert group_partition(group_id, partitions) == expected


# -- two coordinators on one store ----------------------------------------------------------------


def owning(*group_ids: str) -> Callable[[str], bool]:
    owned = frozenset(group_ids)
    return lambda group_id: group_id in owned


def everything(group_id: str) -> bool:
    return True


NOTHING = owning()


class Gate:
    """A ``run_blocking`` that holds back the store calls named in ``held`` until the test opens it."""

    def __init__(self) -> None:
        self.held: Collection[str] = ()
        self.opened = asyncio.Event()
        self.fail_next_load = False

    def hold(self, *names: str) -> None:
        self.held = names
        self.opened.clear()

    def release(self) -> None:
        self.held = ()
        self.opened.set()

    async def __call__(self, fn: Callable[..., Any], *args: Any) -> Any:
        name = getattr(fn, "__name__", "")
        if name in self.held:
            await self.opened.wait()
        if name == "load" and self.fail_next_load:
            self.fail_next_load = False
            raise OSError("the metadata store is unreachable")
        return fn(*args)


async def open_env(db: Path, topics: dict[str, uuid.UUID], run_blocking: Any = inline, **kwargs: Any) -> Env:
    clock = Clock()
    timer = ManualTimer(clock)
    coordinator = await GroupCoordinator.open(
        SqliteGroupStore(db), run_blocking, CONFIG, topics.get, timer=timer, now_ms=lambda: clock.now, **kwargs
    )
    return Env(coordinator, clock, timer, topics, db)


def stored_group_ids(db: Path) -> set[str]:
    store = SqliteGroupStore(db)
    try:
        groups, offsets = store.load()
    finally:
        store.close()
    return {g.group_id for g in groups} | set(offsets)


def listed(env: Env) -> set[str]:
    error, groups = env.coordinator.list_groups()
    assert error is E.none
    return {g.group_id for g in groups}


@pytest.fixture
async def brokers(tmp_path: Path) -> AsyncIterator[tuple[Env, Env, Gate]]:
    """A owns every group (the single-node default); B owns none yet and its store calls go through a Gate."""
    topics = {"t": uuid.uuid4(), "u": uuid.uuid4()}
    db = tmp_path / "shoal.db"
    gate = Gate()
    a = await open_env(db, topics)
    b = await open_env(db, topics, gate, owns=NOTHING)
    yield a, b, gate
    gate.release()
    await a.coordinator.close()
    await b.coordinator.close()


async def test_a_group_not_owned_gets_not_coordinator_from_every_api_and_nothing_changes(
    brokers: tuple[Env, Env, Gate],
) -> None:
    _, b, _ = brokers
    await b.coordinator.set_ownership(owning("mine"))
    assert await commit(b, "mine") == [E.none]
    g = "theirs"

    assert (await join(b, g, require_known=False)).error is E.not_coordinator
    assert (await join(b, g, "client-1")).error is E.not_coordinator
    assert (await sync(b, g, 1, "client-1")).error is E.not_coordinator
    assert heartbeat(b, g, 1, "client-1") is E.not_coordinator
    assert b.coordinator.leave_group(group_id=g, members=[("client-1", None, None)]).error is E.not_coordinator
    assert await commit(b, g, entries=[entry(b, "t", 0, 1), entry(b, "t", 1, 2)]) == [E.not_coordinator] * 2
    assert await commit(b, g, 3, "client-1") == [E.not_coordinator]
    assert b.coordinator.fetch_offsets(g, [("t", 0)]) == (E.not_coordinator, [])
    assert b.coordinator.fetch_offsets(g, None) == (E.not_coordinator, [])
    assert await b.coordinator.delete_offsets(g, [("t", [0])]) == (E.not_coordinator, {})
    assert b.coordinator.describe_group(g) == (E.not_coordinator, None)
    assert await b.coordinator.delete_groups([g, "mine", "missing"]) == {
        g: E.not_coordinator,
        "mine": E.none,
        "missing": E.not_coordinator,
    }
    # Requests that are malformed whoever owns the group still say so first.
    assert (await join(b, "", require_known=False)).error is E.invalid_group_id
    assert heartbeat(b, "", 1, "m") is E.invalid_group_id

    # Nothing was created, stored or scheduled for the group.
    assert g not in stored_group_ids(b.db)
    assert not b.timer.is_scheduled(join_key(g))
    await b.coordinator.set_ownership(everything)
    assert g not in listed(b) and b.coordinator.fetch_offsets(g, None) == (E.none, [])


async def test_list_groups_lists_only_owned_groups(brokers: tuple[Env, Env, Gate]) -> None:
    a, _, _ = brokers
    await stable_group(a, "stable", ["c1"])
    for group_id in ("one", "two"):
        assert await commit(a, group_id) == [E.none]
    assert listed(a) == {"stable", "one", "two"}

    await a.coordinator.set_ownership(owning("stable", "two", "not-stored"))
    assert listed(a) == {"stable", "two"}
    assert [g.group_id for g in a.coordinator.list_groups(["Empty"])[1]] == ["two"]
    assert a.coordinator.fetch_offsets("one", None)[0] is E.not_coordinator
    # Retention only ever looks at owned groups: "one" is past it, but no longer this broker's to expire.
    a.clock.now += CONFIG.offsets_retention_ms
    assert await a.coordinator.cleanup_expired_offsets() == 1  # "two"'s offset
    assert "one" in stored_group_ids(a.db)

    await a.coordinator.set_ownership(everything)
    assert listed(a) == {"stable", "one"}, "'one' comes back from the store; 'two' expired meanwhile"
    assert [f.offset for f in a.coordinator.fetch_offsets("one", None)[1]] == [42]


async def test_ownership_moving_away_mid_rebalance_answers_parked_requests_not_coordinator(
    brokers: tuple[Env, Env, Gate],
) -> None:
    a, _, _ = brokers
    x_id, y_id = await member_id_for(a, "syncing", "x"), await member_id_for(a, "syncing", "y")
    joins = [join(a, "syncing", x_id, client="x"), join(a, "syncing", y_id, client="y")]
    await settle()
    a.timer.advance(2 * DELAY_MS)
    joined = [await j for j in joins]
    follower = next(j for j in joined if j.leader != j.member_id)
    parked_sync = sync(a, "syncing", follower.generation_id, follower.member_id)  # until the leader assigns
    parked_join = join(a, "joining", require_known=False)  # PreparingRebalance: the initial delay
    kept = join(a, "kept", require_known=False)
    await settle()
    assert not parked_sync.done() and not parked_join.done() and not kept.done()

    await a.coordinator.set_ownership(owning("kept"))
    assert (await asyncio.wait_for(parked_sync, 1)).error is E.not_coordinator
    answer = await asyncio.wait_for(parked_join, 1)
    assert answer.error is E.not_coordinator and answer.member_id.startswith("client-")
    # Their sessions and rebalance deadlines are gone: nothing fires for groups served elsewhere.
    assert not a.timer.is_scheduled(heartbeat_key("syncing", follower.member_id))
    assert not a.timer.is_scheduled(join_key("joining"))
    assert heartbeat(a, "syncing", follower.generation_id, follower.member_id) is E.not_coordinator
    # The group still owned carries on.
    assert not kept.done()
    a.timer.advance(DELAY_MS)
    assert (await asyncio.wait_for(kept, 1)).error is E.none
    assert state(a, "kept") == "CompletingRebalance"


async def test_a_group_moves_to_another_coordinator_with_its_members_and_offsets(
    brokers: tuple[Env, Env, Gate],
) -> None:
    a, b, _ = brokers
    first, second = await stable_group(a, "g", ["c1", "c2"])
    assert await commit(a, "g", 1, first.member_id, entries=[entry(a, "t", 0, 100), entry(a, "u", 1, 7)]) == [
        E.none,
        E.none,
    ]
    assert heartbeat(b, "g", 1, first.member_id) is E.not_coordinator
    assert b.coordinator.fetch_offsets("g", None) == (E.not_coordinator, [])

    # A commit is still being written when A lets the group go: A's hand-over waits for it.
    in_flight = asyncio.create_task(commit(a, "simple", entries=[entry(a, "t", 3, 9, "late")]))
    await asyncio.sleep(0)
    await a.coordinator.set_ownership(NOTHING)
    assert await in_flight == [E.none]
    await b.coordinator.set_ownership(everything)

    assert heartbeat(a, "g", 1, first.member_id) is E.not_coordinator
    assert listed(a) == set() and listed(b) == {"g", "simple"}
    assert [(f.topic, f.partition, f.offset) for f in b.coordinator.fetch_offsets("g", None)[1]] == [
        ("t", 0, 100),
        ("u", 1, 7),
    ]
    assert b.coordinator.fetch_offsets("simple", [("t", 3)])[1][0].metadata == "late"
    # The group carries on at B: same generation and assignments; sessions restart there.
    _, desc = b.coordinator.describe_group("g")
    assert desc is not None and desc.state == "Stable"
    assert {m.member_id: m.assignment for m in desc.members} == {
        first.member_id: f"assign-{first.member_id}".encode(),
        second.member_id: f"assign-{second.member_id}".encode(),
    }
    b.timer.advance(SESSION_MS // 2)
    assert heartbeat(b, "g", 1, first.member_id) is E.none
    assert (await sync(b, "g", 1, second.member_id)).assignment == f"assign-{second.member_id}".encode()
    b.timer.advance(SESSION_MS // 2)  # the second member never heartbeat at B
    assert heartbeat(b, "g", 1, first.member_id) is E.rebalance_in_progress
    assert heartbeat(b, "g", 1, second.member_id) is E.unknown_member_id


async def test_groups_being_loaded_answer_load_in_progress_and_changes_run_in_order(
    brokers: tuple[Env, Env, Gate],
) -> None:
    a, b, gate = brokers
    await stable_group(a, "g", ["c1"])
    assert await commit(a, "simple") == [E.none]
    await a.coordinator.set_ownership(NOTHING)
    await b.coordinator.set_ownership(owning("simple"))

    gate.hold("load")
    loading = asyncio.create_task(b.coordinator.set_ownership(owning("simple", "g")))
    await settle()
    assert not loading.done()
    assert heartbeat(b, "g", 1, "c1-x") is E.coordinator_load_in_progress
    assert b.coordinator.describe_group("g") == (E.coordinator_load_in_progress, None)
    assert (await join(b, "g", require_known=False)).error is E.coordinator_load_in_progress
    assert b.coordinator.fetch_offsets("simple", None)[0] is E.none, "groups owned all along are served"
    error, groups = b.coordinator.list_groups()
    assert (error, [x.group_id for x in groups]) == (E.coordinator_load_in_progress, ["simple"])
    # A second change waits for the first.
    second = asyncio.create_task(b.coordinator.set_ownership(owning("g")))
    await settle()
    assert not second.done()

    gate.release()
    await loading
    await second
    assert listed(b) == {"g"}
    assert b.coordinator.fetch_offsets("simple", None)[0] is E.not_coordinator
    assert state(b, "g") == "Stable"


async def test_a_failed_load_leaves_the_new_groups_refused_until_retried(brokers: tuple[Env, Env, Gate]) -> None:
    a, b, gate = brokers
    assert await commit(a, "simple") == [E.none]
    await a.coordinator.set_ownership(NOTHING)

    gate.fail_next_load = True
    with pytest.raises(OSError):
        await b.coordinator.set_ownership(everything)
    # Not served as if it had never existed (a commit or join now would start it from scratch).
    assert b.coordinator.fetch_offsets("simple", None) == (E.not_coordinator, [])
    assert await commit(b, "simple") == [E.not_coordinator]
    await b.coordinator.set_ownership(everything)
    assert [f.offset for f in b.coordinator.fetch_offsets("simple", None)[1]] == [42]


async def test_groups_let_go_are_neither_expired_nor_rebalanced_while_their_writes_finish(tmp_path: Path) -> None:
    gate = Gate()
    env = await open_env(tmp_path / "shoal.db", {"t": uuid.uuid4()}, gate)
    try:
        assert await commit(env, "simple") == [E.none]
        (member,) = await stable_group(env, "g", ["c1"])
        gate.hold("apply")
        in_flight = asyncio.create_task(commit(env, "other"))
        await settle()
        moving = asyncio.create_task(env.coordinator.set_ownership(owning("other")))
        await settle()
        assert not moving.done(), "waiting for the pending write"
        env.clock.now += CONFIG.offsets_retention_ms
        assert await env.coordinator.cleanup_expired_offsets() == 0, "'simple' is still in memory, not ours"
        env.timer.advance(2 * SESSION_MS)  # g's member is silent, but g is no longer this broker's to rebalance
        gate.release()
        await moving
        assert await in_flight == [E.none]
        assert listed(env) == {"other"}
        store = SqliteGroupStore(env.db)
        try:
            groups, offsets = store.load()
        finally:
            store.close()
        assert "simple" in offsets
        (g,) = [x for x in groups if x.group_id == "g"]
        assert (g.generation, [m.member_id for m in g.members]) == (1, [member.member_id]), "stored as handed over"
    finally:
        gate.release()
        await env.coordinator.close()


async def test_ownership_given_before_loading_decides_what_loads(tmp_path: Path) -> None:
    topics = {"t": uuid.uuid4()}
    db = tmp_path / "shoal.db"
    first = await open_env(db, topics)
    for group_id in ("mine", "theirs"):
        assert await commit(first, group_id) == [E.none]
    await first.coordinator.close()

    env = await open_env(db, topics, owns=owning("mine"))
    try:
        assert listed(env) == {"mine"}
        await env.coordinator.close()
        await env.coordinator.set_ownership(everything)  # closed: only remembered, the store is not read
        assert env.coordinator.list_groups() == (E.coordinator_not_available, [])
    finally:
        await env.coordinator.close()


async def test_close_waits_for_an_ownership_change_reading_the_store(brokers: tuple[Env, Env, Gate]) -> None:
    a, b, gate = brokers
    assert await commit(a, "simple") == [E.none]
    gate.hold("load")
    loading = asyncio.create_task(b.coordinator.set_ownership(everything))
    await settle()
    closing = asyncio.create_task(b.coordinator.close())
    await settle()
    assert not closing.done()
    assert heartbeat(b, "simple", 1, "m") is E.coordinator_not_available
    gate.release()
    await loading
    await closing
    assert b.coordinator.list_groups() == (E.coordinator_not_available, [])
