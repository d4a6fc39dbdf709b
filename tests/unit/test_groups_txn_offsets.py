"""Transactional offset commits in the group coordinator (TxnOffsetCommit and the transaction markers
on ``__consumer_offsets``), driven directly on a real SQLite store, as Kafka's OffsetMetadataManager
behaves: pending until the COMMIT marker, dropped by ABORT, UNSTABLE_OFFSET_COMMIT for require_stable,
durable across restarts and coordinator moves. Then the TxnOffsetCommit and OffsetFetch handlers."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from kio.schema.offset_fetch import v7 as fetch_v7
from kio.schema.offset_fetch import v8 as fetch_v8
from kio.schema.txn_offset_commit import v0 as txn_v0
from kio.schema.txn_offset_commit import v3 as txn_v3
from kio.schema.txn_offset_commit import v5 as txn_v5

from shoal.groups.coordinator import GroupCoordinator, OffsetCommitEntry
from shoal.groups.marker_fence import MarkerEpochs
from shoal.metadata.image import MetadataImage, PartitionImage, TopicImage
from shoal.protocol.apis import ApiKey, RequestHeader, decode_response, encode_response
from shoal.protocol.errors import ErrorCode as E
from shoal.server.handlers.groups import handle_offset_fetch
from shoal.server.handlers.txn_offset_commit import handle_txn_offset_commit
from shoal.store.sqlite.groups import SqliteGroupStore
from tests.unit.test_groups_coordinator import (
    CONFIG,
    DELAY_MS,
    Clock,
    Env,
    ManualTimer,
    commit,
    entry,
    join,
    member_id_for,
    settle,
    stable_group,
    state,
)
from tests.unit.test_groups_ownership import NOTHING, Gate, everything, open_env, owning

PID = 4000


@pytest.fixture
async def env(tmp_path: Path) -> AsyncIterator[Env]:
    """One broker on a real SQLite store, with the coordinator tests' manual timer and clock."""
    e = await open_env(tmp_path / "shoal.db", {"t": uuid.uuid4(), "u": uuid.uuid4()})
    yield e
    await e.coordinator.close()


async def txn_commit(
    env: Env,
    group: str,
    entries: Sequence[OffsetCommitEntry] | None = None,
    *,
    producer_id: int = PID,
    generation: int = -1,
    member_id: str = "",
    instance: str | None = None,
    version: int = 3,
) -> list[E]:
    return await env.coordinator.txn_commit_offsets(
        group_id=group,
        transactional_id=f"txn-{producer_id}",
        producer_id=producer_id,
        producer_epoch=0,
        generation_id=generation,
        member_id=member_id,
        group_instance_id=instance,
        entries=entries if entries is not None else [entry(env, "t", 0, 42)],
        api_version=version,
    )


async def complete(env: Env, commit: bool, producer_id: int = PID, in_partition: Callable[[str], bool] = everything) -> E:
    return await env.coordinator.complete_transaction(producer_id, commit, in_partition)


def offsets(env: Env, group: str, partitions: list[tuple[str, int]] | None = None, **kw: Any) -> list[tuple[Any, ...]]:
    error, fetched = env.coordinator.fetch_offsets(group, partitions, **kw)
    assert error is E.none
    return [(f.topic, f.partition, f.offset, f.error) for f in fetched]


# -- pending until the marker ----------------------------------------------------------------------


async def test_pending_offsets_are_invisible_until_a_commit_marker(env: Env) -> None:
    assert await commit(env, "g", entries=[entry(env, "t", 0, 5)]) == [E.none]
    assert await txn_commit(env, "g", [entry(env, "t", 0, 10), entry(env, "t", 1, 11, None)]) == [E.none, E.none]
    assert offsets(env, "g", [("t", 0), ("t", 1)]) == [("t", 0, 5, E.none), ("t", 1, -1, E.none)]
    assert env.coordinator.has_pending("g", "t", 0) and not env.coordinator.has_pending("g", "u", 0)

    assert await complete(env, commit=True) is E.none
    assert offsets(env, "g", [("t", 0), ("t", 1)]) == [("t", 0, 10, E.none), ("t", 1, 11, E.none)]
    fetched = env.coordinator.fetch_offsets("g", [("t", 1)])[1][0]
    assert (fetched.leader_epoch, fetched.metadata) == (5, "")
    assert not env.coordinator.has_pending("g", "t", 0)
    # Markers are retried: the same one again, or one for a producer with nothing pending, is a no-op.
    assert await complete(env, commit=True) is E.none
    assert await complete(env, commit=False) is E.none
    assert await complete(env, commit=True, producer_id=PID + 1) is E.none
    assert offsets(env, "g", [("t", 0), ("t", 1)]) == [("t", 0, 10, E.none), ("t", 1, 11, E.none)]


async def test_an_abort_marker_drops_the_pending_offsets(env: Env) -> None:
    assert await commit(env, "g", entries=[entry(env, "t", 0, 5)]) == [E.none]
    assert await txn_commit(env, "g", [entry(env, "t", 0, 10)]) == [E.none]
    assert await complete(env, commit=False) is E.none
    assert offsets(env, "g", [("t", 0)]) == [("t", 0, 5, E.none)]
    assert await complete(env, commit=True) is E.none, "a late COMMIT has nothing left to apply"
    assert offsets(env, "g", [("t", 0)]) == [("t", 0, 5, E.none)]


async def test_a_later_pending_commit_of_the_producer_replaces_the_earlier_one(env: Env) -> None:
    assert await txn_commit(env, "g", [entry(env, "t", 0, 10), entry(env, "t", 1, 20)]) == [E.none, E.none]
    assert await txn_commit(env, "g", [entry(env, "t", 0, 15)]) == [E.none]
    assert await complete(env, commit=True) is E.none
    assert offsets(env, "g", None) == [("t", 0, 15, E.none), ("t", 1, 20, E.none)]


async def test_the_latest_write_of_a_partition_wins_across_plain_and_transactional_commits(env: Env) -> None:
    assert await txn_commit(env, "g", [entry(env, "t", 0, 10), entry(env, "t", 1, 11)]) == [E.none, E.none]
    assert await commit(env, "g", entries=[entry(env, "t", 0, 99)]) == [E.none]
    assert await complete(env, commit=True) is E.none
    assert offsets(env, "g", None) == [("t", 0, 99, E.none), ("t", 1, 11, E.none)], "the plain commit came later"

    # Two transactions: the later write commits first; the earlier one no longer applies.
    assert await txn_commit(env, "g", [entry(env, "t", 0, 20)], producer_id=1) == [E.none]
    assert await txn_commit(env, "g", [entry(env, "t", 0, 30)], producer_id=2) == [E.none]
    assert await complete(env, commit=True, producer_id=2) is E.none
    assert await complete(env, commit=True, producer_id=1) is E.none
    assert offsets(env, "g", [("t", 0)]) == [("t", 0, 30, E.none)]
    coordinator = await env.reopen()  # the store made the same decisions
    assert coordinator.fetch_offsets("g", [("t", 0)])[1][0].offset == 30


# -- OffsetFetch's require_stable ------------------------------------------------------------------


async def test_require_stable_answers_unstable_for_partitions_with_pending_offsets(env: Env) -> None:
    assert await commit(env, "g", entries=[entry(env, "t", 0, 5), entry(env, "t", 1, 6)]) == [E.none, E.none]
    assert await txn_commit(env, "g", [entry(env, "t", 0, 10), entry(env, "u", 0, 1)]) == [E.none, E.none]
    wanted = [("t", 0), ("t", 1), ("u", 0)]
    assert offsets(env, "g", wanted) == [("t", 0, 5, E.none), ("t", 1, 6, E.none), ("u", 0, -1, E.none)]
    assert offsets(env, "g", wanted, require_stable=True) == [
        ("t", 0, -1, E.unstable_offset_commit),
        ("t", 1, 6, E.none),
        ("u", 0, -1, E.unstable_offset_commit),
    ]
    # Every partition: those with a committed offset, as Kafka lists them.
    assert offsets(env, "g", None, require_stable=True) == [("t", 0, -1, E.unstable_offset_commit), ("t", 1, 6, E.none)]
    assert await complete(env, commit=True) is E.none
    assert offsets(env, "g", wanted, require_stable=True) == [
        ("t", 0, 10, E.none),
        ("t", 1, 6, E.none),
        ("u", 0, 1, E.none),
    ]


# -- validation ------------------------------------------------------------------------------------


async def test_generation_member_and_group_checks_as_kafkas_classic_group(env: Env) -> None:
    assert await txn_commit(env, "ghost", generation=3, member_id="m") == [E.illegal_generation]
    assert await txn_commit(env, "") == [E.invalid_group_id]
    assert await txn_commit(env, "g", []) == []

    a, _ = await stable_group(env, "g", ["a", "b"])
    assert await txn_commit(env, "g", generation=0, member_id=a.member_id) == [E.illegal_generation]
    assert await txn_commit(env, "g", generation=1, member_id="stranger") == [E.unknown_member_id]
    assert await txn_commit(env, "g", member_id=a.member_id) == [E.illegal_generation], "a member id binds the generation"
    # v0-2 carry neither member nor generation: accepted even though the group has members.
    assert await txn_commit(env, "g", version=2) == [E.none]
    too_big = "x" * (CONFIG.offset_metadata_max_bytes + 1)
    assert await txn_commit(
        env, "g", [entry(env, "t", 0, 7, too_big), entry(env, "t", 1, 8)], generation=1, member_id=a.member_id
    ) == [E.offset_metadata_too_large, E.none]

    # A rebalance under way does not refuse a transaction's commit (a plain one gets REBALANCE_IN_PROGRESS).
    x_id = await member_id_for(env, "g2", "x")
    joining = join(env, "g2", x_id, client="x")
    await settle()
    env.timer.advance(DELAY_MS)
    joined = await joining
    assert state(env, "g2") == "CompletingRebalance"
    assert await commit(env, "g2", joined.generation_id, x_id) == [E.rebalance_in_progress]
    assert await txn_commit(env, "g2", generation=joined.generation_id, member_id=x_id) == [E.none]


async def test_a_fenced_static_member_is_refused(env: Env) -> None:
    (joined,) = await stable_group(env, "g", ["a"], instance="i-1")
    assert await txn_commit(env, "g", generation=1, member_id="old-id", instance="i-1") == [E.fenced_instance_id]
    assert await txn_commit(env, "g", generation=1, member_id=joined.member_id, instance="i-2") == [E.unknown_member_id]
    assert await txn_commit(env, "g", generation=1, member_id=joined.member_id, instance="i-1") == [E.none]


async def test_a_transaction_creates_a_simple_group_that_a_restart_keeps(env: Env) -> None:
    assert await txn_commit(env, "simple") == [E.none]
    assert [(g.group_id, g.state) for g in env.coordinator.list_groups()[1]] == [("simple", "Empty")]
    coordinator = await env.reopen()
    assert [g.group_id for g in coordinator.list_groups()[1]] == ["simple"]
    assert coordinator.has_pending("simple", "t", 0)
    assert offsets(env, "simple", [("t", 0)], require_stable=True) == [("t", 0, -1, E.unstable_offset_commit)]
    assert await complete(env, commit=True) is E.none
    assert offsets(env, "simple", [("t", 0)], require_stable=True) == [("t", 0, 42, E.none)]


# -- durability ------------------------------------------------------------------------------------


async def test_pending_offsets_survive_a_restart_and_settle_after_it(env: Env) -> None:
    a, _ = await stable_group(env, "g", ["a", "b"])
    assert await commit(env, "g", 1, a.member_id, entries=[entry(env, "t", 0, 5)]) == [E.none]
    assert await txn_commit(env, "g", [entry(env, "t", 0, 10)], generation=1, member_id=a.member_id) == [E.none]
    assert await txn_commit(env, "g", [entry(env, "t", 1, 20)], producer_id=PID + 1) == [E.none]
    await env.reopen()
    assert offsets(env, "g", [("t", 0), ("t", 1)]) == [("t", 0, 5, E.none), ("t", 1, -1, E.none)]
    assert env.coordinator.has_pending("g", "t", 0) and env.coordinator.has_pending("g", "t", 1)

    assert await complete(env, commit=True) is E.none
    assert await complete(env, commit=False, producer_id=PID + 1) is E.none
    await env.reopen()
    assert offsets(env, "g", [("t", 0), ("t", 1)], require_stable=True) == [("t", 0, 10, E.none), ("t", 1, -1, E.none)]
    # A commit made after the restart still loses to nothing older: the sequence goes on past the stored ones.
    assert await txn_commit(env, "g", [entry(env, "t", 0, 11)], producer_id=7) == [E.none]
    assert await txn_commit(env, "g", [entry(env, "t", 0, 12)], producer_id=8) == [E.none]
    assert await complete(env, commit=True, producer_id=8) is E.none
    assert await complete(env, commit=True, producer_id=7) is E.none
    assert offsets(env, "g", [("t", 0)]) == [("t", 0, 12, E.none)]


async def test_a_marker_settles_only_the_groups_of_its_partition(env: Env) -> None:
    for group in ("g1", "g2"):
        assert await txn_commit(env, group) == [E.none]
    assert await complete(env, commit=True, in_partition=lambda g: g == "g1") is E.none
    assert offsets(env, "g1", [("t", 0)]) == [("t", 0, 42, E.none)]
    assert offsets(env, "g2", [("t", 0)]) == [("t", 0, -1, E.none)]
    assert await complete(env, commit=True, in_partition=lambda g: g == "g2") is E.none
    assert offsets(env, "g2", [("t", 0)]) == [("t", 0, 42, E.none)]


async def test_pending_offsets_move_with_the_group_to_another_broker(tmp_path: Path) -> None:
    topics = {"t": uuid.uuid4(), "u": uuid.uuid4()}
    db = tmp_path / "shoal.db"
    gate = Gate()
    a = await open_env(db, topics)
    b = await open_env(db, topics, gate, owns=NOTHING)
    try:
        assert await txn_commit(a, "g") == [E.none]
        in_flight = asyncio.create_task(txn_commit(a, "h", [entry(a, "u", 1, 7)]))
        await asyncio.sleep(0)
        await a.coordinator.set_ownership(NOTHING)  # waits for the write in flight
        assert await in_flight == [E.none]
        # The marker reaches the old owner: the store shows offsets pending in groups it no longer
        # serves, so it is refused (and retried) rather than lost.
        assert await complete(a, commit=True) is E.not_coordinator

        gate.hold("load")
        loading = asyncio.create_task(b.coordinator.set_ownership(everything))
        await settle()
        assert await complete(b, commit=True) is E.coordinator_load_in_progress
        gate.release()
        await loading
        assert offsets(b, "g", [("t", 0)], require_stable=True) == [("t", 0, -1, E.unstable_offset_commit)]
        assert await complete(b, commit=True, in_partition=owning("g", "h")) is E.none
        assert offsets(b, "g", [("t", 0)]) == [("t", 0, 42, E.none)]
        assert offsets(b, "h", [("u", 1)]) == [("u", 1, 7, E.none)]
    finally:
        gate.release()
        await a.coordinator.close()
        await b.coordinator.close()


async def test_a_store_failure_answers_a_retriable_error_and_changes_nothing(tmp_path: Path) -> None:
    failing: set[str] = set()

    async def run_blocking(fn: Callable[..., Any], *args: Any) -> Any:
        if getattr(fn, "__name__", "") in failing:
            raise OSError("the metadata store is unreachable")
        return fn(*args)

    clock = Clock()
    timer = ManualTimer(clock)
    topics = {"t": uuid.uuid4()}
    coordinator = await GroupCoordinator.open(
        SqliteGroupStore(tmp_path / "shoal.db"), run_blocking, CONFIG, topics.get, timer=timer, now_ms=lambda: clock.now
    )
    env = Env(coordinator, clock, timer, topics, tmp_path / "shoal.db")
    try:
        failing.add("apply")
        assert await txn_commit(env, "g") == [E.coordinator_not_available]
        assert not coordinator.has_pending("g", "t", 0) and coordinator.list_groups()[1] == []
        failing.clear()
        assert await txn_commit(env, "g") == [E.none]
        failing.add("apply")
        assert await complete(env, commit=True) is E.coordinator_not_available
        failing.add("load_pending")
        assert await complete(env, commit=True) is E.coordinator_not_available
        assert coordinator.has_pending("g", "t", 0)
        failing.clear()
        assert await complete(env, commit=True) is E.none
        assert offsets(env, "g", [("t", 0)]) == [("t", 0, 42, E.none)]
    finally:
        await coordinator.close()


# -- deletion and retention ------------------------------------------------------------------------


async def test_delete_groups_takes_pending_offsets_with_the_group_as_kafka_does(env: Env) -> None:
    assert await txn_commit(env, "g") == [E.none]
    assert await env.coordinator.delete_groups(["g"]) == {"g": E.none}
    assert not env.coordinator.has_pending("g", "t", 0)
    assert await complete(env, commit=True) is E.none
    assert env.coordinator.list_groups()[1] == [] and offsets(env, "g", None) == []
    coordinator = await env.reopen()
    assert coordinator.list_groups()[1] == []


async def test_offset_delete_drops_the_partitions_pending_offsets(env: Env) -> None:
    assert await txn_commit(env, "g", [entry(env, "t", 0, 1), entry(env, "t", 1, 2)]) == [E.none, E.none]
    assert await env.coordinator.delete_offsets("g", [("t", [0])]) == (E.none, {("t", 0): E.none})
    assert not env.coordinator.has_pending("g", "t", 0) and env.coordinator.has_pending("g", "t", 1)
    assert await complete(env, commit=True) is E.none
    assert offsets(env, "g", None) == [("t", 1, 2, E.none)]
    await env.reopen()
    assert offsets(env, "g", None) == [("t", 1, 2, E.none)]


async def test_retention_spares_partitions_and_groups_with_pending_offsets(env: Env) -> None:
    retention = CONFIG.offsets_retention_ms
    assert await commit(env, "g", entries=[entry(env, "t", 0, 1), entry(env, "t", 1, 2)]) == [E.none, E.none]
    assert await txn_commit(env, "g", [entry(env, "t", 0, 10)]) == [E.none]
    assert await txn_commit(env, "only-pending", [entry(env, "t", 0, 10)]) == [E.none]
    env.clock.now += retention
    assert await env.coordinator.cleanup_expired_offsets() == 1  # t-1; t-0 waits for its transaction
    assert {g.group_id for g in env.coordinator.list_groups()[1]} == {"g", "only-pending"}
    assert await complete(env, commit=True) is E.none
    assert offsets(env, "g", None) == [("t", 0, 10, E.none)]
    assert offsets(env, "only-pending", None) == [("t", 0, 10, E.none)]


async def test_pending_offsets_of_deleted_topics_go_at_the_next_check(env: Env) -> None:
    assert await txn_commit(env, "g", [entry(env, "t", 0, 1), entry(env, "u", 0, 2)]) == [E.none, E.none]
    del env.topics["u"]
    assert await env.coordinator.cleanup_expired_offsets() == 1
    assert env.coordinator.has_pending("g", "t", 0) and not env.coordinator.has_pending("g", "u", 0)
    await env.reopen()
    assert not env.coordinator.has_pending("g", "u", 0)


# -- the handlers ----------------------------------------------------------------------------------


def context(env: Env) -> Any:
    topics = {
        name: TopicImage(name, topic_id, {p: PartitionImage(p, (1,), (1,), 1, 0, 0) for p in range(2)}, {})
        for name, topic_id in env.topics.items()
    }
    image = MetadataImage(topics_by_name=topics, topics_by_id={t.topic_id: t for t in topics.values()})
    return SimpleNamespace(image=image, groups=env.coordinator)


def header(api_key: int, version: int) -> RequestHeader:
    return RequestHeader(api_key, version, 1, "client", client_host="/127.0.0.1")


def answers(response: Any) -> dict[tuple[str, int], E]:
    return {(t.name, p.partition_index): p.error_code for t in response.topics for p in t.partitions}


@pytest.mark.parametrize("version", [0, 3, 5])
async def test_txn_offset_commit_handler(env: Env, version: int) -> None:
    schema = {0: txn_v0, 3: txn_v3, 5: txn_v5}[version].request
    partition_cls, topic_cls = schema.TxnOffsetCommitRequestPartition, schema.TxnOffsetCommitRequestTopic

    def part(index: int, offset: int) -> Any:
        fields: dict[str, Any] = {"partition_index": index, "committed_offset": offset, "committed_metadata": "m"}
        if version >= 2:
            fields["committed_leader_epoch"] = 3
        return partition_cls(**fields)

    fields: dict[str, Any] = {
        "transactional_id": "txn",
        "group_id": "g",
        "producer_id": PID,
        "producer_epoch": 0,
        "topics": (
            topic_cls(name="t", partitions=(part(0, 10), part(7, 1))),
            topic_cls(name="nope", partitions=(part(0, 1),)),
        ),
    }
    request = schema.TxnOffsetCommitRequest(**fields)
    response = await handle_txn_offset_commit(context(env), header(ApiKey.TXN_OFFSET_COMMIT, version), request)
    assert answers(response) == {
        ("t", 0): E.none,
        ("t", 7): E.unknown_topic_or_partition,
        ("nope", 0): E.unknown_topic_or_partition,
    }
    frame = encode_response(header(ApiKey.TXN_OFFSET_COMMIT, version), response)
    assert decode_response(ApiKey.TXN_OFFSET_COMMIT, version, frame[4:]) == response, "the answer encodes"
    assert env.coordinator.has_pending("g", "t", 0)
    assert await complete(env, commit=True) is E.none
    fetched = env.coordinator.fetch_offsets("g", [("t", 0)])[1][0]
    assert (fetched.offset, fetched.leader_epoch, fetched.metadata) == (10, 3 if version >= 2 else -1, "m")

    if version >= 3:  # the member fields reach the coordinator
        bad = schema.TxnOffsetCommitRequest(**fields, generation_id=4, member_id="m")
        response = await handle_txn_offset_commit(context(env), header(ApiKey.TXN_OFFSET_COMMIT, version), bad)
        assert answers(response)[("t", 0)] is E.unknown_member_id  # "m" is no member of the simple group


async def test_txn_offset_commit_v0_reads_a_loading_group_as_not_available(tmp_path: Path) -> None:
    topics = {"t": uuid.uuid4()}
    gate = Gate()
    env = await open_env(tmp_path / "shoal.db", topics, gate, owns=NOTHING)
    try:
        gate.hold("load")
        loading = asyncio.create_task(env.coordinator.set_ownership(everything))
        await settle()
        for version, error in ((0, E.coordinator_not_available), (3, E.coordinator_load_in_progress)):
            schema = {0: txn_v0, 3: txn_v3}[version].request
            request = schema.TxnOffsetCommitRequest(
                transactional_id="txn", group_id="g", producer_id=PID, producer_epoch=0,
                topics=(
                    schema.TxnOffsetCommitRequestTopic(
                        name="t",
                        partitions=(schema.TxnOffsetCommitRequestPartition(
                            partition_index=0, committed_offset=1, committed_metadata=None
                        ),),
                    ),
                ),
            )
            response = await handle_txn_offset_commit(context(env), header(ApiKey.TXN_OFFSET_COMMIT, version), request)
            assert answers(response) == {("t", 0): error}
        gate.release()
        await loading
    finally:
        gate.release()
        await env.coordinator.close()


async def test_offset_fetch_handler_honours_require_stable(env: Env) -> None:
    assert await commit(env, "g", entries=[entry(env, "t", 0, 5), entry(env, "t", 1, 6)]) == [E.none, E.none]
    assert await txn_commit(env, "g", [entry(env, "t", 0, 10)]) == [E.none]
    ctx = context(env)

    def parts(topics: Any) -> dict[tuple[str, int], tuple[int, E]]:
        return {(t.name, p.partition_index): (p.committed_offset, p.error_code) for t in topics for p in t.partitions}

    for stable in (False, True):
        r7 = fetch_v7.request.OffsetFetchRequest(
            group_id="g",
            topics=(fetch_v7.request.OffsetFetchRequestTopic(name="t", partition_indexes=(0, 1)),),
            require_stable=stable,
        )
        response = await handle_offset_fetch(ctx, header(ApiKey.OFFSET_FETCH, 7), r7)
        assert response.error_code is E.none
        first = (-1, E.unstable_offset_commit) if stable else (5, E.none)
        assert parts(response.topics) == {("t", 0): first, ("t", 1): (6, E.none)}

        r8 = fetch_v8.request.OffsetFetchRequest(
            groups=(fetch_v8.request.OffsetFetchRequestGroup(group_id="g", topics=None),), require_stable=stable
        )
        response = await handle_offset_fetch(ctx, header(ApiKey.OFFSET_FETCH, 8), r8)
        (group,) = response.groups
        assert group.error_code is E.none
        assert parts(group.topics) == {("t", 0): first, ("t", 1): (6, E.none)}


def test_a_deposed_coordinators_late_group_marker_is_fenced() -> None:
    """Kafka's checkCoordinatorEpoch on __consumer_offsets: once a marker of coordinator epoch 9
    settled a producer's offsets in a partition, one of epoch 3 is refused; other partitions and
    producers are not affected, and the memory stays bounded."""
    fence = MarkerEpochs(max_remembered=2)
    assert not fence.fenced(4, 1000, 3)
    fence.applied(4, 1000, 9)
    assert fence.fenced(4, 1000, 3)
    assert not fence.fenced(4, 1000, 9) and not fence.fenced(4, 1000, 10)
    assert not fence.fenced(5, 1000, 3) and not fence.fenced(4, 1001, 3)
    fence.applied(4, 1000, 3)  # never moves back
    assert fence.fenced(4, 1000, 8)
    fence.applied(5, 1000, 1)
    fence.applied(6, 1000, 1)  # the oldest entry is forgotten
    assert not fence.fenced(4, 1000, 3)
