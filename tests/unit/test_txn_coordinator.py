"""The transaction coordinator's state machine on a real SQLite transaction store, with the
markers captured instead of sent: Kafka's answers for InitProducerId, AddPartitionsToTxn,
AddOffsetsToTxn, EndTxn and verification; zombie fencing; timeouts; expiration; and a second
coordinator taking over a prepared transaction from the store."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from shoal.protocol.errors import ErrorCode
from shoal.protocol.key_partitions import group_partition
from shoal.store.sqlite.transactions import SqliteTransactionStore
from shoal.store.transactions import (
    COMPLETE_ABORT,
    COMPLETE_COMMIT,
    EMPTY,
    ONGOING,
    PREPARE_COMMIT,
)
from shoal.txn.config import TxnConfig
from shoal.txn.coordinator import TransactionCoordinator
from shoal.txn.markers import GROUP_METADATA_TOPIC, MarkerSend

TID = "txn-a"


async def run_inline(fn: Callable[..., Any], *args: Any) -> Any:
    return fn(*args)


class Markers:
    """Captures markers; answers each with ``answer`` (NONE by default)."""

    def __init__(self) -> None:
        self.sent: list[MarkerSend] = []
        self.answer = ErrorCode.none

    async def __call__(self, sends: Sequence[MarkerSend]) -> list[ErrorCode]:
        self.sent.extend(sends)
        return [self.answer] * len(sends)


class Clock:
    def __init__(self) -> None:
        self.ms = 1_700_000_000_000

    def __call__(self) -> int:
        return self.ms


def make_coordinator(
    path: Path, markers: Markers, clock: Clock, **config: Any
) -> tuple[TransactionCoordinator, SqliteTransactionStore]:
    store = SqliteTransactionStore(path / "txn.db", partitions=3)
    ids = iter(range(1000, 2000))

    async def next_id() -> int:
        return next(ids)

    coordinator = TransactionCoordinator(
        store, run_inline, TxnConfig(state_partitions=3, offsets_partitions=5, **config), next_id, markers, now_ms=clock
    )
    return coordinator, store


@contextlib.asynccontextmanager
async def two_coordinators(
    path: Path, clock: Clock, old_markers: Markers, new_markers: Markers
) -> AsyncIterator[tuple[TransactionCoordinator, TransactionCoordinator, SqliteTransactionStore]]:
    """Two brokers' coordinators on one transaction store (ownership moving from ``old`` to
    ``new``): both, and the new one's store handle to check what is durable."""
    old, old_store = make_coordinator(path, old_markers, clock)
    new, new_store = make_coordinator(path, new_markers, clock)
    try:
        yield old, new, new_store
    finally:
        await old.close()
        await new.close()
        old_store.close()
        new_store.close()


@pytest.fixture
def markers() -> Markers:
    return Markers()


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
async def coordinator(tmp_path: Path, markers: Markers, clock: Clock) -> Any:
    coordinator, store = make_coordinator(tmp_path, markers, clock)
    await coordinator.set_ownership(lambda p: True, 7)
    yield coordinator
    await coordinator.close()
    store.close()


async def settle(coordinator: TransactionCoordinator, tid: str = TID) -> None:
    for _ in range(200):
        if coordinator.describe(tid)[1].state not in ("PrepareCommit", "PrepareAbort"):  # type: ignore[union-attr]
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"{tid} still prepared: {coordinator.describe(tid)}")


async def test_init_bumps_the_epoch_each_time(coordinator: TransactionCoordinator) -> None:
    assert await coordinator.init_producer_id(TID, 60_000) == (ErrorCode.none, 1000, 0)
    assert await coordinator.init_producer_id(TID, 60_000) == (ErrorCode.none, 1000, 1)
    error, txn = coordinator.describe(TID)
    assert error == ErrorCode.none and txn is not None and txn.state == EMPTY and txn.txn_timeout_ms == 60_000


async def test_init_refuses_bad_requests(coordinator: TransactionCoordinator) -> None:
    assert (await coordinator.init_producer_id(TID, 900_001))[0] == ErrorCode.invalid_transaction_timeout
    assert (await coordinator.init_producer_id(TID, 0))[0] == ErrorCode.invalid_transaction_timeout
    assert (await coordinator.init_producer_id("", 1000))[0] == ErrorCode.invalid_request


async def test_a_transaction_commits_with_markers_to_every_partition(
    coordinator: TransactionCoordinator, markers: Markers
) -> None:
    _, pid, epoch = await coordinator.init_producer_id(TID, 60_000)
    assert await coordinator.add_partitions(TID, pid, epoch, [("a", 0), ("b", 1)]) == ErrorCode.none
    assert await coordinator.add_offsets(TID, pid, epoch, "group-1") == ErrorCode.none
    offsets_partition = group_partition("group-1", 5)
    assert coordinator.describe(TID)[1].state == ONGOING  # type: ignore[union-attr]
    assert coordinator.verify_partitions(TID, pid, epoch, [("a", 0), ("a", 1)]) == [
        ErrorCode.none, ErrorCode.invalid_txn_state
    ]
    assert await coordinator.end_transaction(TID, pid, epoch, commit=True) == ErrorCode.none
    await settle(coordinator)
    assert sorted((m.topic, m.partition, m.commit, m.coordinator_epoch) for m in markers.sent) == sorted(
        [("a", 0, True, 7), ("b", 1, True, 7), (GROUP_METADATA_TOPIC, offsets_partition, True, 7)]
    )
    txn = coordinator.describe(TID)[1]
    assert txn is not None and txn.state == COMPLETE_COMMIT and txn.partitions == ()
    # A retried EndTxn of the same result is fine; the other result is not.
    assert await coordinator.end_transaction(TID, pid, epoch, commit=True) == ErrorCode.none
    assert await coordinator.end_transaction(TID, pid, epoch, commit=False) == ErrorCode.invalid_txn_state
    # After the commit, the partitions are no longer in a transaction.
    assert coordinator.verify_partitions(TID, pid, epoch, [("a", 0)]) == [ErrorCode.invalid_txn_state]


async def test_wrong_producer_answers(coordinator: TransactionCoordinator) -> None:
    _, pid, epoch = await coordinator.init_producer_id(TID, 60_000)
    assert await coordinator.add_partitions(TID, pid + 1, epoch, [("a", 0)]) == ErrorCode.invalid_producer_id_mapping
    assert await coordinator.add_partitions(TID, pid, epoch + 1, [("a", 0)]) == ErrorCode.producer_fenced
    assert await coordinator.add_partitions("other", pid, epoch, [("a", 0)]) == ErrorCode.invalid_producer_id_mapping
    assert await coordinator.end_transaction(TID, pid, epoch, commit=True) == ErrorCode.invalid_txn_state  # Empty


async def test_a_new_producer_instance_fences_the_zombie_and_aborts_its_transaction(
    coordinator: TransactionCoordinator, markers: Markers
) -> None:
    _, pid, zombie_epoch = await coordinator.init_producer_id(TID, 60_000)
    await coordinator.add_partitions(TID, pid, zombie_epoch, [("a", 0)])
    # The new instance is told to retry while the zombie's transaction is aborted with a bumped epoch.
    assert (await coordinator.init_producer_id(TID, 60_000))[0] == ErrorCode.concurrent_transactions
    await settle(coordinator)
    assert [(m.topic, m.commit, m.producer_epoch) for m in markers.sent] == [("a", False, zombie_epoch + 1)]
    assert coordinator.describe(TID)[1].state == COMPLETE_ABORT  # type: ignore[union-attr]
    assert await coordinator.init_producer_id(TID, 60_000) == (ErrorCode.none, pid, zombie_epoch + 2)
    assert await coordinator.add_partitions(TID, pid, zombie_epoch, [("a", 0)]) == ErrorCode.producer_fenced
    assert await coordinator.end_transaction(TID, pid, zombie_epoch, commit=True) == ErrorCode.producer_fenced


async def test_kip_360_recovery_with_the_current_epoch(coordinator: TransactionCoordinator) -> None:
    _, pid, epoch = await coordinator.init_producer_id(TID, 60_000)
    assert await coordinator.init_producer_id(TID, 60_000, (pid, epoch)) == (ErrorCode.none, pid, epoch + 1)
    # The answer was lost and the producer retries with the epoch it held: the same answer.
    assert await coordinator.init_producer_id(TID, 60_000, (pid, epoch)) == (ErrorCode.none, pid, epoch + 1)
    assert (await coordinator.init_producer_id(TID, 60_000, (pid + 5, epoch)))[0] == ErrorCode.producer_fenced


async def test_a_timed_out_transaction_is_aborted_and_its_producer_fenced(
    coordinator: TransactionCoordinator, markers: Markers, clock: Clock
) -> None:
    _, pid, epoch = await coordinator.init_producer_id(TID, 1_000)
    await coordinator.add_partitions(TID, pid, epoch, [("a", 0)])
    assert await coordinator.abort_timed_out() == 0
    clock.ms += 1_001
    assert await coordinator.abort_timed_out() == 1
    await settle(coordinator)
    assert [(m.commit, m.producer_epoch) for m in markers.sent] == [(False, epoch + 1)]
    assert await coordinator.end_transaction(TID, pid, epoch, commit=True) == ErrorCode.producer_fenced


async def test_idle_transactional_ids_expire(
    tmp_path: Path, coordinator: TransactionCoordinator, clock: Clock
) -> None:
    await coordinator.init_producer_id(TID, 1_000)
    _, pid, epoch = await coordinator.init_producer_id("busy", 1_000)
    await coordinator.add_partitions("busy", pid, epoch, [("a", 0)])
    clock.ms += coordinator.config.id_expiration_ms + 1
    assert await coordinator.expire_transactional_ids() == 1
    assert coordinator.describe(TID)[0] == ErrorCode.transactional_id_not_found
    assert coordinator.describe("busy")[0] == ErrorCode.none  # an open transaction is never expired
    # A new producer with the expired id starts over with a new producer id.
    assert (await coordinator.init_producer_id(TID, 1_000))[1:] == (1002, 0)


async def test_partitions_not_owned_answer_not_coordinator(tmp_path: Path, markers: Markers, clock: Clock) -> None:
    coordinator, store = make_coordinator(tmp_path, markers, clock)
    try:
        await coordinator.set_ownership(lambda p: False, 1)
        assert (await coordinator.init_producer_id(TID, 1_000))[0] == ErrorCode.not_coordinator
        assert coordinator.describe(TID)[0] == ErrorCode.not_coordinator
    finally:
        await coordinator.close()
        store.close()


async def test_a_new_coordinator_finishes_a_prepared_commit_and_fences_the_old_one(
    tmp_path: Path, clock: Clock
) -> None:
    stuck, healthy = Markers(), Markers()
    stuck.answer = ErrorCode.not_leader_or_follower  # the old coordinator's markers never land
    async with two_coordinators(tmp_path, clock, stuck, healthy) as (old, new, new_store):
        await old.set_ownership(lambda p: True, 3)
        _, pid, epoch = await old.init_producer_id(TID, 60_000)
        await old.add_partitions(TID, pid, epoch, [("a", 0), ("a", 1)])
        assert await old.end_transaction(TID, pid, epoch, commit=True) == ErrorCode.none
        await asyncio.sleep(0.05)
        assert old.describe(TID)[1].state == PREPARE_COMMIT  # type: ignore[union-attr]
        # The partition moves: the new owner loads it at a higher epoch and sends the markers.
        await new.set_ownership(lambda p: True, 9)
        await settle(new)
        assert {(m.partition, m.commit, m.coordinator_epoch) for m in healthy.sent} == {(0, True, 9), (1, True, 9)}
        assert new.describe(TID)[1].state == COMPLETE_COMMIT  # type: ignore[union-attr]
        # The old coordinator answers from the store, not from its cache (still PrepareCommit): the
        # producer's next transaction begins there.
        assert await old.add_partitions(TID, pid, epoch, [("b", 0)]) == ErrorCode.none
        sent = len(stuck.sent)
        stuck.answer = ErrorCode.none
        await asyncio.sleep(0.3)  # its marker loop ends: the transaction it prepared is over, it writes nothing
        # No late marker either: one landing after the next transaction's TxnOffsetCommit would settle it.
        assert len(stuck.sent) == sent
        txn = new_store.get(TID)
        assert txn is not None and txn.state == ONGOING and txn.partitions == (("b", 0),)


async def test_resync_finishes_what_a_stale_owner_prepared_and_dropped(tmp_path: Path, clock: Clock) -> None:
    """Both brokers act for the partition for a moment: the old owner prepares a commit and lets
    go (its marker task cancelled); the new owner's cache still says Ongoing. Its periodic re-read
    of the store takes the prepared record and sends the markers."""
    old_markers, new_markers = Markers(), Markers()
    old_markers.answer = ErrorCode.not_leader_or_follower
    async with two_coordinators(tmp_path, clock, old_markers, new_markers) as (old, new, new_store):
        await old.set_ownership(lambda p: True, 3)
        _, pid, epoch = await old.init_producer_id(TID, 60_000)
        await old.add_partitions(TID, pid, epoch, [("a", 0)])
        await new.set_ownership(lambda p: True, 9)  # loads Ongoing
        assert await old.end_transaction(TID, pid, epoch, commit=True) == ErrorCode.none
        await old.set_ownership(lambda p: False, 10)  # lets go: its completion is cancelled
        assert new.describe(TID)[1].state == ONGOING  # type: ignore[union-attr]
        assert await new.resync() == 1
        await settle(new)
        assert [(m.topic, m.commit, m.coordinator_epoch) for m in new_markers.sent] == [("a", True, 9)]
        assert new_store.get(TID).state == COMPLETE_COMMIT  # type: ignore[union-attr]
        assert await new.resync() == 0


async def test_a_stale_cache_never_answers_the_next_transaction(tmp_path: Path, clock: Clock) -> None:
    """Both brokers act for the partition for a moment. The new owner loaded the transaction while
    it was Ongoing; the old one then prepared its commit. The producer's next transaction adds the
    same partitions at the new owner: it must not be told they are in (its offsets would join the
    ended transaction on the group coordinator, and that transaction's commit marker would make
    them visible without their records). The store holds a prepared commit: CONCURRENT_TRANSACTIONS."""
    old_markers, new_markers = Markers(), Markers()
    old_markers.answer = ErrorCode.not_leader_or_follower
    async with two_coordinators(tmp_path, clock, old_markers, new_markers) as (old, new, new_store):
        await old.set_ownership(lambda p: True, 3)
        _, pid, epoch = await old.init_producer_id(TID, 60_000)
        await old.add_partitions(TID, pid, epoch, [("a", 0)])
        await old.add_offsets(TID, pid, epoch, "group-1")
        await new.set_ownership(lambda p: True, 9)  # caches Ongoing
        assert await old.end_transaction(TID, pid, epoch, commit=True) == ErrorCode.none
        assert await new.add_partitions(TID, pid, epoch, [("a", 0)]) == ErrorCode.concurrent_transactions
        assert await new.add_offsets(TID, pid, epoch, "group-1") == ErrorCode.concurrent_transactions
        await settle(new)  # it took the prepared commit over from the store and finished it
        assert new_store.get(TID).state == COMPLETE_COMMIT  # type: ignore[union-attr]
        assert await new.add_partitions(TID, pid, epoch, [("a", 0)]) == ErrorCode.none
        assert new_store.get(TID).state == ONGOING  # type: ignore[union-attr]


async def test_a_stale_cache_never_answers_end_txn_or_fences_a_newer_epoch(tmp_path: Path, clock: Clock) -> None:
    """The new owner cached a completed commit; the old one then began the next transaction and a
    new producer epoch. An EndTxn of that transaction is no retry of the completed one: it
    commits it. A producer with the newer epoch is not fenced by the older cached one."""
    old_markers, new_markers = Markers(), Markers()
    async with two_coordinators(tmp_path, clock, old_markers, new_markers) as (old, new, new_store):
        await old.set_ownership(lambda p: True, 3)
        _, pid, epoch = await old.init_producer_id(TID, 60_000)
        await old.add_partitions(TID, pid, epoch, [("a", 0)])
        assert await old.end_transaction(TID, pid, epoch, commit=True) == ErrorCode.none
        await settle(old)
        await new.set_ownership(lambda p: True, 9)  # caches CompleteCommit
        assert await old.add_partitions(TID, pid, epoch, [("b", 1)]) == ErrorCode.none
        assert await new.end_transaction(TID, pid, epoch, commit=True) == ErrorCode.none
        await settle(new)
        assert [(m.topic, m.partition, m.commit, m.coordinator_epoch) for m in new_markers.sent] == [("b", 1, True, 9)]
        assert new_store.get(TID).state == COMPLETE_COMMIT  # type: ignore[union-attr]
        assert (await old.init_producer_id(TID, 60_000))[0] == ErrorCode.none  # epoch + 1, in the store
        assert await new.add_partitions(TID, pid, epoch + 1, [("a", 0)]) == ErrorCode.none
