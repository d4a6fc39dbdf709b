"""The group coordinator: Kafka's classic group protocol and committed offsets.

Every operation follows Kafka's GroupMetadataManager / OffsetMetadataManager (the
classic-group half of the group-coordinator module): which error each request gets in
each state, when a rebalance starts, when the join phase completes, what a heartbeat
keeps alive. ``GroupCoordinator`` is the face the request handlers call; the rules live
with their concern:

- ``join.py``: JoinGroup (new, pending, returning and static members);
- ``membership.py``: SyncGroup, Heartbeat and LeaveGroup;
- ``rebalance.py``: the join and sync phases and the member sessions that drive them;
- ``offsets.py``: OffsetCommit, OffsetFetch and OffsetDelete;
- ``txn_offsets.py``: TxnOffsetCommit and the transaction markers that settle its pending offsets
  (``pending.py`` holds them in memory);
- ``admin.py``: DescribeGroups, ListGroups and DeleteGroups;
- ``expiry.py``: offset retention and the deletion of empty groups left without offsets;
- ``loader.py``: groups read from the store at start-up, and loaded or unloaded as the
  groups this broker owns change (``set_ownership``; ``shoal.cluster.placement`` says which partition
  of ``__consumer_offsets``, hence which broker, owns a group);
- ``state.py``: the state they share, which lives on the event loop (no locks), and the one
  check every request passes first: is this group served here, now.

Durable state goes through one ``StoreWriter`` onto a ``GroupStore``: committed offsets and
transactions' pending offsets (answered only once durable), and the group's metadata when a rebalance completes (the
leader's assignment is acknowledged only once stored, as Kafka does) or the group becomes
empty. After a restart, groups come back Stable with their members and generation (each
member must heartbeat within its session timeout) or Empty, and offsets come back as
committed, or pending until their transaction's marker arrives.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

from shoal.groups.admin import GROUP_TYPE_CLASSIC, DescribedMember, GroupAdmin, GroupDescription, ListedGroup
from shoal.groups.config import NEW_MEMBER_JOIN_TIMEOUT_MS, GroupConfig
from shoal.groups.expiry import OffsetExpiry
from shoal.groups.join import Joiner
from shoal.groups.loader import GroupLoader
from shoal.groups.membership import LeaveResult, Membership
from shoal.groups.offsets import FetchedOffset, OffsetCommitEntry, OffsetManager
from shoal.groups.rebalance import Rebalancer
from shoal.groups.state import STORE_FAILURE, CoordinatorState
from shoal.groups.timer import LoopTimer, Timer
from shoal.groups.txn_offsets import TxnOffsetManager
from shoal.groups.writer import RunBlocking, StoreWriter
from shoal.store.groups import GroupStore

__all__ = [
    "GROUP_TYPE_CLASSIC",
    "NEW_MEMBER_JOIN_TIMEOUT_MS",
    "STORE_FAILURE",
    "DescribedMember",
    "FetchedOffset",
    "GroupConfig",
    "GroupCoordinator",
    "GroupDescription",
    "LeaveResult",
    "ListedGroup",
    "OffsetCommitEntry",
    "RunBlocking",
]


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class GroupCoordinator:
    def __init__(
        self,
        store: GroupStore,
        run_blocking: RunBlocking,
        config: GroupConfig,
        topic_id_of: Callable[[str], uuid.UUID | None],
        *,
        timer: Timer | None = None,
        now_ms: Callable[[], int] = _wall_clock_ms,
        owns: Callable[[str], bool] | None = None,
    ) -> None:
        """``owns``: the groups this broker coordinates from the start (default: every group; see
        ``set_ownership``)."""
        self.config = config
        self._store = store
        self._run_blocking = run_blocking
        self._writer = StoreWriter(store.apply, run_blocking)
        self._timer: Timer = timer if timer is not None else LoopTimer()
        self._state = CoordinatorState(config, self._writer, self._timer, now_ms, topic_id_of)
        self._rebalancer = Rebalancer(self._state)
        self._joiner = Joiner(self._state, self._rebalancer)
        self._membership = Membership(self._state, self._rebalancer)
        self._offsets = OffsetManager(self._state, self._rebalancer)
        self._txn_offsets = TxnOffsetManager(self._state, store, run_blocking)
        self._admin = GroupAdmin(self._state)
        self._expiry = OffsetExpiry(self._state)
        self._loader = GroupLoader(self._state, self._rebalancer, store, self._writer, run_blocking)
        if owns is not None:
            self._state.owns = owns
        # The requests the handlers make, each served by the part that holds its rules (their
        # docstrings say what each answers).
        self.join_group = self._joiner.join_group  # JoinGroup: returns when this member's join phase ends
        self.sync_group = self._membership.sync_group
        self.heartbeat = self._membership.heartbeat
        self.leave_group = self._membership.leave_group
        self.commit_offsets = self._offsets.commit_offsets
        self.fetch_offsets = self._offsets.fetch_offsets
        self.delete_offsets = self._offsets.delete_offsets
        self.txn_commit_offsets = self._txn_offsets.txn_commit_offsets  # TxnOffsetCommit
        self.complete_transaction = self._txn_offsets.complete_transaction  # a marker on __consumer_offsets-<p>
        self.has_pending = self._txn_offsets.has_pending
        self.describe_group = self._admin.describe_group
        self.list_groups = self._admin.list_groups
        self.delete_groups = self._admin.delete_groups
        self.cleanup_expired_offsets = self._expiry.cleanup_expired_offsets

    @classmethod
    async def open(
        cls,
        store: GroupStore,
        run_blocking: RunBlocking,
        config: GroupConfig,
        topic_id_of: Callable[[str], uuid.UUID | None],
        **kwargs: Any,
    ) -> GroupCoordinator:
        """Load every group (every owned group, given ``owns``) and its committed offsets from an opened
        store; the coordinator closes the store when it closes."""
        coordinator = cls(store, run_blocking, config, topic_id_of, **kwargs)
        await coordinator.load()
        return coordinator

    # -- lifecycle ---------------------------------------------------------------------------------
    async def load(self) -> None:
        """Read the owned groups and their offsets from the store and start serving."""
        await self._loader.load()

    async def set_ownership(self, owns: Callable[[str], bool]) -> None:
        """From now on serve only the groups ``owns`` accepts; every other group is answered NOT_COORDINATOR.

        Groups no longer owned leave memory once the writes already submitted for them are durable
        (their parked JoinGroup/SyncGroup get NOT_COORDINATOR); groups now owned are read from the
        store, and answered COORDINATOR_LOAD_IN_PROGRESS until they are. It returns when both are
        done: only then may the next owner load what this one let go.
        Calls run one after the other, in call order. ``owns`` must keep its answers (pass a new
        function for each change, e.g. one closing over a frozenset): groups are loaded where the
        new answer is yes and the previous one was no. If the store cannot be read the call
        raises and the groups it should have loaded stay refused; calling again retries them.
        Before ``load`` (or after ``close``) the new ownership is only remembered.
        """
        await self._loader.set_ownership(owns)

    def start(self) -> None:
        """Start the periodic offset retention check (``offsets.retention.check.interval.ms``)."""
        self._expiry.start()

    async def close(self) -> None:
        """Stop serving: parked JoinGroup/SyncGroup requests get NOT_COORDINATOR (the clients look
        for the coordinator again), pending writes finish, the store closes (after any ownership
        change under way, which may be reading it)."""
        self._state.active = False
        async with self._loader.lock:
            await self._expiry.stop()
            for group in self._state.groups.values():
                self._state.answer_parked_not_coordinator(group)
            self._timer.cancel_all()
            await self._writer.flush()
            await self._run_blocking(self._store.close)
