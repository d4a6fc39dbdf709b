"""The classic group coordinator driven directly: a manual timer and a fake clock stand in for time,
the store is a real SQLite file. Error codes per state follow Kafka's GroupMetadataManager."""

from __future__ import annotations

import asyncio
import itertools
import struct
import uuid
from collections.abc import AsyncIterator, Callable, Hashable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from shoal.groups.coordinator import GroupConfig, GroupCoordinator, OffsetCommitEntry
from shoal.groups.group import JoinResponse, SyncResponse
from shoal.protocol.errors import ErrorCode as E
from shoal.store.sqlite.groups import SqliteGroupStore

SESSION_MS = 10_000
REBALANCE_MS = 30_000
DELAY_MS = 3_000
CONFIG = GroupConfig(initial_rebalance_delay_ms=DELAY_MS, offsets_retention_ms=60_000)


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000_000


class ManualTimer:
    """Kafka's MockTimer: deadlines fire, in order, only when the test advances the clock."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self._seq = itertools.count()
        self._tasks: dict[Hashable, tuple[int, int, Callable[[], None]]] = {}

    def schedule(self, key: Hashable, delay_ms: int, callback: Callable[[], None]) -> None:
        self._tasks[key] = (self.clock.now + delay_ms, next(self._seq), callback)

    def cancel(self, key: Hashable) -> None:
        self._tasks.pop(key, None)

    def is_scheduled(self, key: Hashable) -> bool:
        return key in self._tasks

    def cancel_all(self) -> None:
        self._tasks.clear()

    def advance(self, ms: int) -> None:
        target = self.clock.now + ms
        while True:
            due = [(deadline, seq, key) for key, (deadline, seq, _) in self._tasks.items() if deadline <= target]
            if not due:
                break
            deadline, _, key = min(due)
            callback = self._tasks.pop(key)[2]
            self.clock.now = deadline
            callback()
        self.clock.now = target


async def inline(fn: Callable[..., Any], *args: Any) -> Any:
    return fn(*args)


async def settle() -> None:
    for _ in range(10):
        await asyncio.sleep(0)


def subscription(*topics: str) -> bytes:
    """A ConsumerProtocolSubscription v0: version, topics, null user data."""
    out = struct.pack(">hi", 0, len(topics))
    for t in topics:
        out += struct.pack(">h", len(t)) + t.encode()
    return out + struct.pack(">i", -1)


@dataclass
class Env:
    coordinator: GroupCoordinator
    clock: Clock
    timer: ManualTimer
    topics: dict[str, uuid.UUID]
    db: Path

    async def reopen(self) -> GroupCoordinator:
        await self.coordinator.close()
        self.coordinator = await GroupCoordinator.open(
            SqliteGroupStore(self.db), inline, CONFIG, self.topics.get, timer=self.timer, now_ms=lambda: self.clock.now
        )
        return self.coordinator


@pytest.fixture
async def env(tmp_path: Path) -> AsyncIterator[Env]:
    clock = Clock()
    timer = ManualTimer(clock)
    topics = {"t": uuid.uuid4(), "u": uuid.uuid4()}
    db = tmp_path / "shoal.db"
    coordinator = await GroupCoordinator.open(
        SqliteGroupStore(db), inline, CONFIG, topics.get, timer=timer, now_ms=lambda: clock.now
    )
    e = Env(coordinator, clock, timer, topics, db)
    yield e
    await e.coordinator.close()


def join(
    env: Env,
    group: str,
    member_id: str = "",
    *,
    client: str = "client",
    instance: str | None = None,
    protocols: tuple[tuple[str, bytes], ...] = (("range", subscription("t")),),
    session: int = SESSION_MS,
    require_known: bool = True,
    skip: bool = False,
) -> asyncio.Task[JoinResponse]:
    return asyncio.create_task(
        env.coordinator.join_group(
            group_id=group,
            member_id=member_id,
            group_instance_id=instance,
            client_id=client,
            client_host="/127.0.0.1",
            session_timeout_ms=session,
            rebalance_timeout_ms=REBALANCE_MS,
            protocol_type="consumer",
            protocols=protocols,
            require_known_member_id=require_known,
            supports_skip_assignment=skip,
        )
    )


def sync(
    env: Env, group: str, generation: int, member_id: str, assignments: dict[str, bytes] | None = None,
    instance: str | None = None,
) -> asyncio.Task[SyncResponse]:
    return asyncio.create_task(
        env.coordinator.sync_group(
            group_id=group,
            generation_id=generation,
            member_id=member_id,
            group_instance_id=instance,
            protocol_type="consumer",
            protocol_name=None,
            assignments=tuple((assignments or {}).items()),
        )
    )


def heartbeat(env: Env, group: str, generation: int, member_id: str, instance: str | None = None) -> E:
    return env.coordinator.heartbeat(
        group_id=group, generation_id=generation, member_id=member_id, group_instance_id=instance
    )


def state(env: Env, group: str) -> str:
    _, desc = env.coordinator.describe_group(group)
    return "Dead" if desc is None else desc.state


async def member_id_for(env: Env, group: str, client: str = "client") -> str:
    first = await join(env, group, client=client)
    assert first.error is E.member_id_required and first.member_id.startswith(f"{client}-")
    return first.member_id


async def stable_group(env: Env, group: str, clients: list[str], **join_kw: Any) -> list[JoinResponse]:
    """Members join (with MEMBER_ID_REQUIRED first), the initial delay passes, everyone syncs."""
    if join_kw.get("instance") is not None:
        ids = ["" for _ in clients]  # static members join with their instance id straight away
    else:
        ids = [await member_id_for(env, group, c) for c in clients]
    tasks = [join(env, group, mid, client=c, **join_kw) for mid, c in zip(ids, clients, strict=True)]
    await settle()
    env.timer.advance(2 * DELAY_MS)
    joined = [await t for t in tasks]
    assert all(j.error is E.none for j in joined), joined
    leader = next(j for j in joined if j.leader == j.member_id)
    plan = {j.member_id: f"assign-{j.member_id}".encode() for j in joined}
    syncs = [sync(env, group, j.generation_id, j.member_id, plan if j is leader else None) for j in joined]
    for s, j in zip(syncs, joined, strict=True):
        got = await s
        assert got.error is E.none and got.assignment == plan[j.member_id]
    assert state(env, group) == "Stable"
    return joined


async def commit(env: Env, group: str, generation: int = -1, member_id: str = "", *, version: int = 9,
                 instance: str | None = None, entries: list[OffsetCommitEntry] | None = None) -> list[E]:
    return await env.coordinator.commit_offsets(
        group_id=group,
        generation_id=generation,
        member_id=member_id,
        group_instance_id=instance,
        entries=entries if entries is not None else [entry(env, "t", 0, 42)],
        api_version=version,
    )


def entry(env: Env, topic: str, partition: int, offset: int, metadata: str | None = "m") -> OffsetCommitEntry:
    return OffsetCommitEntry(topic, partition, env.topics.get(topic), offset, 5, metadata)


# -- JoinGroup ----------------------------------------------------------------------------------


async def test_join_v4_requires_a_member_id_and_rejects_bad_session_timeouts(env: Env) -> None:
    first = await join(env, "g", client="rdkafka")
    assert first.error is E.member_id_required
    assert first.member_id.startswith("rdkafka-") and first.generation_id == -1
    assert (await join(env, "g", session=5999)).error is E.invalid_session_timeout
    assert (await join(env, "g", session=1_800_001)).error is E.invalid_session_timeout
    assert (await join(env, "", client="x")).error is E.invalid_group_id
    # A member id the group never handed out, and a known member id for an unknown group.
    assert (await join(env, "g", "client-nobody")).error is E.unknown_member_id
    assert (await join(env, "other", "client-nobody")).error is E.unknown_member_id


async def test_two_members_rebalance_after_the_initial_delay_and_agree_on_a_protocol(env: Env) -> None:
    a_id = await member_id_for(env, "g", "a")
    b_id = await member_id_for(env, "g", "b")
    a = join(env, "g", a_id, client="a", protocols=(("range", b"ra"), ("roundrobin", b"rr-a")))
    await settle()
    assert state(env, "g") == "PreparingRebalance"
    b = join(env, "g", b_id, client="b", protocols=(("roundrobin", b"rr-b"),))
    await settle()
    env.timer.advance(DELAY_MS)
    await settle()
    assert not a.done(), "a member joined during the delay: the initial delay is extended"
    env.timer.advance(DELAY_MS)
    ra, rb = await a, await b
    assert (ra.error, rb.error) == (E.none, E.none)
    assert ra.generation_id == rb.generation_id == 1
    assert ra.protocol_name == rb.protocol_name == "roundrobin", "only roundrobin is supported by both"
    assert ra.protocol_type == "consumer"
    assert ra.leader == rb.leader == a_id, "the first member to join leads"
    assert {m.member_id: m.metadata for m in ra.members} == {a_id: b"rr-a", b_id: b"rr-b"}
    assert rb.members == ()
    assert state(env, "g") == "CompletingRebalance"
    # A third member whose protocols the group cannot use is refused.
    refused = await join(env, "g", client="c", protocols=(("sticky", b""),), require_known=False)
    assert refused.error is E.inconsistent_group_protocol


async def test_old_clients_join_without_a_member_id_round_trip(env: Env) -> None:
    task = join(env, "g", require_known=False)
    await settle()
    env.timer.advance(DELAY_MS)
    joined = await task
    assert joined.error is E.none and joined.member_id.startswith("client-") and joined.generation_id == 1


# -- SyncGroup, Heartbeat -----------------------------------------------------------------------


async def test_sync_parks_followers_until_the_leader_assigns(env: Env) -> None:
    a_id, b_id = await member_id_for(env, "g", "a"), await member_id_for(env, "g", "b")
    ta, tb = join(env, "g", a_id, client="a"), join(env, "g", b_id, client="b")
    await settle()
    env.timer.advance(2 * DELAY_MS)
    ra, rb = await ta, await tb
    follower = sync(env, "g", 1, b_id)
    await settle()
    assert not follower.done()
    assert heartbeat(env, "g", 1, b_id) is E.none, "CompletingRebalance heartbeats are answered NONE"
    assert (await commit(env, "g", 1, a_id)) == [E.rebalance_in_progress]
    assert (await sync(env, "g", 0, b_id)).error is E.illegal_generation
    assert (await sync(env, "g", 1, "nobody")).error is E.unknown_member_id
    leader = await sync(env, "g", 1, a_id, {a_id: b"A", b_id: b"B", "stranger": b"X"})
    assert (leader.error, leader.assignment, leader.protocol_name) == (E.none, b"A", "range")
    assert (await follower).assignment == b"B"
    assert state(env, "g") == "Stable"
    # Stable: a SyncGroup returns the assignment straight away; heartbeats work; stale ones don't.
    assert (await sync(env, "g", 1, b_id)).assignment == b"B"
    assert heartbeat(env, "g", 1, a_id) is E.none
    assert heartbeat(env, "g", 0, a_id) is E.illegal_generation
    assert heartbeat(env, "g", 1, "nobody") is E.unknown_member_id
    assert heartbeat(env, "missing", 1, a_id) is E.unknown_member_id
    del ra, rb


async def test_the_leader_rejoining_triggers_a_rebalance_heartbeats_say_so(env: Env) -> None:
    joined = await stable_group(env, "g", ["a", "b"])
    leader = next(j for j in joined if j.leader == j.member_id)
    follower = next(j for j in joined if j is not leader)
    rejoin = join(env, "g", leader.member_id, client="a")
    await settle()
    assert state(env, "g") == "PreparingRebalance"
    assert heartbeat(env, "g", 1, follower.member_id) is E.rebalance_in_progress
    assert (await sync(env, "g", 1, follower.member_id)).error is E.rebalance_in_progress
    # The old generation can still commit while PreparingRebalance (the heartbeat tells it to rejoin).
    assert await commit(env, "g", 1, follower.member_id) == [E.none]
    follower_rejoin = join(env, "g", follower.member_id, client="b")
    second = await rejoin, await follower_rejoin
    assert [r.generation_id for r in second] == [2, 2], "all members rejoined: no need to wait out the timeout"
    assert await commit(env, "g", 1, follower.member_id) == [E.illegal_generation]


async def test_a_member_that_stops_heartbeating_is_removed_and_the_rest_rebalance(env: Env) -> None:
    joined = await stable_group(env, "g", ["a", "b"])
    alive, dead = joined
    env.timer.advance(SESSION_MS // 2)
    assert heartbeat(env, "g", 1, alive.member_id) is E.none
    env.timer.advance(SESSION_MS // 2)  # the silent member's session has run out
    assert state(env, "g") == "PreparingRebalance"
    assert heartbeat(env, "g", 1, dead.member_id) is E.unknown_member_id
    assert heartbeat(env, "g", 1, alive.member_id) is E.rebalance_in_progress
    rejoined = await join(env, "g", alive.member_id, client="a")
    assert rejoined.generation_id == 2 and [m.member_id for m in rejoined.members] == [alive.member_id]


async def test_members_that_do_not_rejoin_in_the_rebalance_timeout_are_dropped(env: Env) -> None:
    joined = await stable_group(env, "g", ["a", "b"])
    a, b = joined
    rejoin = join(env, "g", a.member_id, client="a", protocols=(("range", subscription("t", "u")),))
    await settle()
    for _ in range(REBALANCE_MS // (SESSION_MS // 2)):
        env.timer.advance(SESSION_MS // 2)
        heartbeat(env, "g", 1, b.member_id)  # b heartbeats but never rejoins
    result = await rejoin
    assert result.generation_id == 2 and [m.member_id for m in result.members] == [a.member_id]
    assert heartbeat(env, "g", 2, b.member_id) is E.unknown_member_id


async def test_pending_member_ids_and_unsynced_members_expire(env: Env) -> None:
    pending = await member_id_for(env, "g")
    env.timer.advance(SESSION_MS)
    assert (await join(env, "g", pending)).error is E.unknown_member_id, "the handed-out id expired"
    joined = await stable_group(env, "h", ["a", "b"])
    rejoin = [join(env, "h", j.member_id, client="x") for j in joined]
    second = [await t for t in rejoin]
    leader = next(j for j in second if j.leader == j.member_id)
    parked = sync(env, "h", 2, leader.member_id, {})
    await settle()
    assert (await parked).error is E.none
    # The follower heartbeats but never sends SyncGroup: after the rebalance timeout it is removed.
    follower = next(j for j in second if j is not leader)
    for _ in range(REBALANCE_MS // (SESSION_MS // 2)):
        assert state(env, "h") == "Stable"
        assert heartbeat(env, "h", 2, leader.member_id) is E.none
        assert heartbeat(env, "h", 2, follower.member_id) is E.none
        env.timer.advance(SESSION_MS // 2)
    assert state(env, "h") == "PreparingRebalance"
    assert heartbeat(env, "h", 2, follower.member_id) is E.unknown_member_id
    assert heartbeat(env, "h", 2, leader.member_id) is E.rebalance_in_progress


# -- static membership ------------------------------------------------------------------------------


async def test_static_member_rejoining_while_stable_fences_its_old_id_without_a_rebalance(env: Env) -> None:
    joined = await stable_group(env, "g", ["a"], instance="instance-1")
    old = joined[0]
    assert old.member_id.startswith("instance-1-")
    again = await join(env, "g", "", client="a", instance="instance-1")
    assert again.error is E.none and again.member_id != old.member_id
    assert again.generation_id == old.generation_id, "same protocols while Stable: no rebalance"
    assert again.leader == old.member_id, "pre-v9: the old leader id, so the member does not reassign"
    assert state(env, "g") == "Stable"
    assert heartbeat(env, "g", 1, old.member_id, "instance-1") is E.fenced_instance_id
    assert (await join(env, "g", old.member_id, instance="instance-1")).error is E.fenced_instance_id
    assert (await sync(env, "g", 1, old.member_id, instance="instance-1")).error is E.fenced_instance_id
    assert await commit(env, "g", 1, old.member_id, instance="instance-1") == [E.fenced_instance_id]
    assert heartbeat(env, "g", 1, again.member_id, "instance-1") is E.none
    assert (await sync(env, "g", 1, again.member_id, instance="instance-1")).assignment.startswith(b"assign-")
    # v9 clients: the static leader learns it leads but must skip the assignment.
    v9 = await join(env, "g", "", client="a", instance="instance-1", skip=True)
    assert v9.leader == v9.member_id and v9.skip_assignment and len(v9.members) == 1
    assert heartbeat(env, "g", 2, v9.member_id, "other") is E.unknown_member_id


async def test_static_members_can_be_removed_by_instance_id(env: Env) -> None:
    await stable_group(env, "g", ["a", "b"], instance=None)
    joined = await stable_group(env, "s", ["a"], instance="i-1")
    result = env.coordinator.leave_group(group_id="s", members=[("", "i-1", "admin"), ("", "i-9", None)])
    assert [e for _, _, e in result.members] == [E.none, E.unknown_member_id]
    assert state(env, "s") == "Empty" or state(env, "s") == "PreparingRebalance"
    env.timer.advance(REBALANCE_MS)
    assert state(env, "s") == "Empty"
    del joined


# -- LeaveGroup -----------------------------------------------------------------------------------


async def test_leave_group_in_batches(env: Env) -> None:
    a, b = await stable_group(env, "g", ["a", "b"])
    result = env.coordinator.leave_group(
        group_id="g", members=[(a.member_id, None, "bye"), ("unknown", None, None), (b.member_id, "wrong", None)]
    )
    assert result.error is E.none
    assert [e for _, _, e in result.members] == [E.none, E.unknown_member_id, E.unknown_member_id]
    assert state(env, "g") == "PreparingRebalance"
    assert env.coordinator.leave_group(group_id="g", members=[(b.member_id, None, None)]).members[0][2] is E.none
    assert state(env, "g") == "Empty"
    missing = env.coordinator.leave_group(group_id="nope", members=[("m", None, None)])
    assert (missing.error, missing.members[0][2]) == (E.none, E.unknown_member_id)
    assert env.coordinator.leave_group(group_id="", members=[]).error is E.invalid_group_id


# -- offsets --------------------------------------------------------------------------------------


async def test_simple_commits_and_generation_checks(env: Env) -> None:
    # An admin or manual-assignment consumer commits to a group nobody is in: the group appears.
    assert await commit(env, "simple") == [E.none]
    listed = env.coordinator.list_groups()[1]
    assert [(g.group_id, g.protocol_type, g.state) for g in listed] == [("simple", "", "Empty")]
    # A generation for a group that does not exist: ILLEGAL_GENERATION before v9, GROUP_ID_NOT_FOUND after.
    assert await commit(env, "ghost", 3, "m", version=8) == [E.illegal_generation]
    assert await commit(env, "ghost", 3, "m", version=9) == [E.group_id_not_found]
    a, _ = await stable_group(env, "g", ["a", "b"])
    assert await commit(env, "g") == [E.unknown_member_id], "non-empty groups take commits from members only"
    assert await commit(env, "g", 0, a.member_id) == [E.illegal_generation]
    assert await commit(env, "g", 1, "stranger") == [E.unknown_member_id]
    too_big = "x" * (CONFIG.offset_metadata_max_bytes + 1)
    errors = await commit(
        env, "g", 1, a.member_id, entries=[entry(env, "t", 0, 7, too_big), entry(env, "t", 1, 8, None)]
    )
    assert errors == [E.offset_metadata_too_large, E.none]
    error, fetched = env.coordinator.fetch_offsets("g", [("t", 0), ("t", 1), ("u", 0)])
    assert error is E.none
    assert [(f.offset, f.leader_epoch, f.metadata) for f in fetched] == [(-1, -1, ""), (8, 5, ""), (-1, -1, "")]
    assert env.coordinator.fetch_offsets("nobody", [("t", 0)])[1][0].offset == -1
    assert env.coordinator.fetch_offsets("nobody", None) == (E.none, [])


async def test_offsets_and_groups_survive_a_restart(env: Env) -> None:
    a, b = await stable_group(env, "g", ["a", "b"])
    assert await commit(env, "g", 1, a.member_id, entries=[entry(env, "t", 0, 100), entry(env, "u", 1, 7)]) == [
        E.none,
        E.none,
    ]
    assert await commit(env, "simple", entries=[entry(env, "t", 3, 1, "hello")]) == [E.none]
    coordinator = await env.reopen()

    assert [(f.topic, f.partition, f.offset, f.leader_epoch, f.metadata) for f in coordinator.fetch_offsets("g", None)[1]] == [
        ("t", 0, 100, 5, "m"),
        ("u", 1, 7, 5, "m"),
    ]
    assert coordinator.fetch_offsets("simple", [("t", 3)])[1][0].metadata == "hello"
    # The group is back Stable, same generation and assignment; members must keep heartbeating.
    _, desc = coordinator.describe_group("g")
    assert desc is not None and (desc.state, desc.protocol_data) == ("Stable", "range")
    assert {m.member_id: m.assignment for m in desc.members} == {
        a.member_id: f"assign-{a.member_id}".encode(),
        b.member_id: f"assign-{b.member_id}".encode(),
    }
    assert {m.client_host for m in desc.members} == {"/127.0.0.1"}
    env.timer.advance(SESSION_MS // 2)
    assert heartbeat(env, "g", 1, a.member_id) is E.none
    env.timer.advance(SESSION_MS // 2)  # b never heartbeat after the restart
    assert state(env, "g") == "PreparingRebalance"
    assert heartbeat(env, "g", 1, b.member_id) is E.unknown_member_id


async def test_delete_groups_and_offsets(env: Env) -> None:
    a, _ = await stable_group(env, "g", ["a", "b"], protocols=(("range", subscription("t")),))
    assert await commit(env, "g", 1, a.member_id, entries=[entry(env, "t", 0, 1), entry(env, "u", 0, 2)]) == [
        E.none,
        E.none,
    ]
    assert await env.coordinator.delete_groups(["g", "missing", "g"]) == {
        "g": E.non_empty_group,
        "missing": E.group_id_not_found,
    }
    # OffsetDelete on an active consumer group: only topics it does not subscribe to.
    error, results = await env.coordinator.delete_offsets("g", [("t", [0]), ("u", [0, 5])])
    assert error is E.none
    assert results == {("t", 0): E.group_subscribed_to_topic, ("u", 0): E.none, ("u", 5): E.none}
    assert [f.topic for f in env.coordinator.fetch_offsets("g", None)[1]] == ["t"]
    assert (await env.coordinator.delete_offsets("missing", [("t", [0])]))[0] is E.group_id_not_found
    assert (await env.coordinator.delete_offsets("", []))[0] is E.invalid_group_id

    for member in list(env.coordinator.describe_group("g")[1].members):  # type: ignore[union-attr]
        env.coordinator.leave_group(group_id="g", members=[(member.member_id, None, None)])
    assert state(env, "g") == "Empty"
    assert await env.coordinator.delete_groups(["g"]) == {"g": E.none}
    assert await env.coordinator.delete_groups(["g"]) == {"g": E.group_id_not_found}
    coordinator = await env.reopen()
    assert coordinator.fetch_offsets("g", None) == (E.none, []), "deleted offsets stay deleted"
    assert coordinator.list_groups()[1] == []


async def test_offset_delete_on_a_non_consumer_group_needs_it_empty(env: Env) -> None:
    task = asyncio.create_task(
        env.coordinator.join_group(
            group_id="connect", member_id="", group_instance_id=None, client_id="w", client_host="/h",
            session_timeout_ms=SESSION_MS, rebalance_timeout_ms=REBALANCE_MS, protocol_type="connect",
            protocols=(("sessioned", b""),), require_known_member_id=False, supports_skip_assignment=False,
        )
    )
    await settle()
    env.timer.advance(DELAY_MS)
    await task
    assert (await env.coordinator.delete_offsets("connect", [("t", [0])]))[0] is E.non_empty_group


# -- retention ------------------------------------------------------------------------------------


async def test_offsets_expire_after_retention_and_empty_groups_go_with_them(env: Env) -> None:
    retention = CONFIG.offsets_retention_ms
    a, b = await stable_group(env, "g", ["a", "b"])
    assert await commit(env, "simple") == [E.none]
    assert await commit(env, "g", 1, a.member_id, entries=[entry(env, "t", 0, 5), entry(env, "u", 0, 6)]) == [
        E.none,
        E.none,
    ]
    env.clock.now += retention - 1
    assert await env.coordinator.cleanup_expired_offsets() == 0
    env.clock.now += 1
    # The simple group's offset expires from its commit, and so does the Stable consumer group's
    # offset of a topic it does not subscribe to; the subscribed topic's offset stays.
    assert await env.coordinator.cleanup_expired_offsets() == 2
    assert "simple" not in {g.group_id for g in env.coordinator.list_groups()[1]}
    assert [f.topic for f in env.coordinator.fetch_offsets("g", None)[1]] == ["t"]
    # Once empty, the group's offsets expire a retention period after it became empty.
    env.coordinator.leave_group(group_id="g", members=[(a.member_id, None, None), (b.member_id, None, None)])
    assert state(env, "g") == "Empty"
    env.clock.now += retention - 1
    assert await env.coordinator.cleanup_expired_offsets() == 0
    env.clock.now += 1
    assert await env.coordinator.cleanup_expired_offsets() == 1
    assert state(env, "g") == "Dead"
    coordinator = await env.reopen()
    assert coordinator.list_groups()[1] == []


async def test_offsets_of_deleted_topics_disappear(env: Env) -> None:
    assert await commit(env, "simple", entries=[entry(env, "t", 0, 5), entry(env, "u", 0, 6)]) == [E.none, E.none]
    env.topics["u"] = uuid.uuid4()  # u deleted and created again: a new topic id
    del env.topics["t"]
    assert env.coordinator.fetch_offsets("simple", [("t", 0), ("u", 0)])[1][1].offset == -1
    assert env.coordinator.fetch_offsets("simple", None)[1] == []
    assert await env.coordinator.cleanup_expired_offsets() == 2


# -- administration -------------------------------------------------------------------------------


async def test_list_groups_filters_by_state_and_type(env: Env) -> None:
    await stable_group(env, "stable", ["a"])
    assert await commit(env, "empty") == [E.none]
    assert {g.group_id for g in env.coordinator.list_groups()[1]} == {"stable", "empty"}
    assert [g.group_id for g in env.coordinator.list_groups(["STABLE"])[1]] == ["stable"]
    assert [g.group_id for g in env.coordinator.list_groups(["empty", "dead"])[1]] == ["empty"]
    assert env.coordinator.list_groups([], ["consumer"])[1] == []
    assert len(env.coordinator.list_groups([], ["Classic"])[1]) == 2
    listed = {g.group_id: g for g in env.coordinator.list_groups()[1]}
    assert (listed["stable"].protocol_type, listed["stable"].group_type) == ("consumer", "classic")


async def test_describe_shows_members_without_assignments_while_rebalancing(env: Env) -> None:
    a, b = await stable_group(env, "g", ["a", "b"])
    _, desc = env.coordinator.describe_group("g")
    assert desc is not None
    assert {(m.client_id, m.metadata) for m in desc.members} == {("a", subscription("t")), ("b", subscription("t"))}
    join(env, "g", a.member_id, client="a")
    await settle()
    _, desc = env.coordinator.describe_group("g")
    assert desc is not None and desc.state == "PreparingRebalance" and desc.protocol_data == ""
    assert {(m.metadata, m.assignment) for m in desc.members} == {(b"", b"")}
    assert env.coordinator.describe_group("none") == (E.none, None)
    del b


async def test_close_answers_parked_requests_with_not_coordinator(env: Env) -> None:
    parked = join(env, "g", require_known=False)
    await settle()
    await env.coordinator.close()
    assert (await parked).error is E.not_coordinator
    assert heartbeat(env, "g", 1, "m") is E.coordinator_not_available
    env.coordinator = await GroupCoordinator.open(
        SqliteGroupStore(env.db), inline, CONFIG, env.topics.get, timer=env.timer, now_ms=lambda: env.clock.now
    )


async def test_group_max_size(tmp_path: Path) -> None:
    clock = Clock()
    timer = ManualTimer(clock)
    config = GroupConfig(initial_rebalance_delay_ms=DELAY_MS, max_size=1)
    coordinator = await GroupCoordinator.open(
        SqliteGroupStore(tmp_path / "shoal.db"), inline, config, {}.get, timer=timer, now_ms=lambda: clock.now
    )
    env = Env(coordinator, clock, timer, {}, tmp_path / "shoal.db")
    first = join(env, "g", require_known=False)
    await settle()
    second = await join(env, "g", require_known=False)
    assert (second.error, second.member_id) == (E.group_max_size_reached, "")
    timer.advance(DELAY_MS)
    assert (await first).error is E.none
    await coordinator.close()
