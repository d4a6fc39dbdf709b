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
- ``admin.py``: DescribeGroups, ListGroups and DeleteGroups;
- ``expiry.py``: offset retention and the deletion of empty groups left without offsets;
- ``state.py``: the state they share, which lives on the event loop (no locks).

Durable state goes through one ``StoreWriter`` onto a ``GroupStore``: committed offsets
(answered only once durable), and the group's metadata when a rebalance completes (the
leader's assignment is acknowledged only once stored, as Kafka does) or the group becomes
empty. After a restart, groups come back Stable with their members and generation (each
member must heartbeat within its session timeout) or Empty, and offsets come back as
committed.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from typing import Any

from shoal.groups.admin import GROUP_TYPE_CLASSIC, DescribedMember, GroupAdmin, GroupDescription, ListedGroup
from shoal.groups.config import NEW_MEMBER_JOIN_TIMEOUT_MS, GroupConfig
from shoal.groups.expiry import OffsetExpiry
from shoal.groups.group import JoinResponse, SyncResponse
from shoal.groups.join import Joiner
from shoal.groups.membership import LeaveResult, Membership
from shoal.groups.offsets import FetchedOffset, OffsetCommitEntry, OffsetManager
from shoal.groups.rebalance import Rebalancer
from shoal.groups.state import STORE_FAILURE, CoordinatorState
from shoal.groups.stored import group_from_store
from shoal.groups.timer import LoopTimer, Timer
from shoal.groups.writer import RunBlocking, StoreWriter
from shoal.protocol.errors import ErrorCode
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

log = logging.getLogger(__name__)


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
    ) -> None:
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
        self._admin = GroupAdmin(self._state)
        self._expiry = OffsetExpiry(self._state)
        # The requests the handlers make, each served by the part that holds its rules (their
        # docstrings say what each answers).
        self.join_group = self._joiner.join_group  # JoinGroup: returns when this member's join phase ends
        self.sync_group = self._membership.sync_group
        self.heartbeat = self._membership.heartbeat
        self.leave_group = self._membership.leave_group
        self.commit_offsets = self._offsets.commit_offsets
        self.fetch_offsets = self._offsets.fetch_offsets
        self.delete_offsets = self._offsets.delete_offsets
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
        """Load every group and committed offset from an opened store; the coordinator closes the store
        when it closes."""
        coordinator = cls(store, run_blocking, config, topic_id_of, **kwargs)
        await coordinator.load()
        return coordinator

    # -- lifecycle ---------------------------------------------------------------------------------
    async def load(self) -> None:
        state = self._state
        stored_groups, stored_offsets = await self._run_blocking(self._store.load)
        for stored in stored_groups:
            state.groups[stored.group_id] = group_from_store(stored)
        for group_id, offsets in stored_offsets.items():
            if group_id not in state.groups:
                state.groups[group_id] = state.new_group(group_id)
            state.offsets[group_id] = {(o.topic, o.partition): o for o in offsets}
        state.active = True
        for group in state.groups.values():
            for member in group.members.values():
                self._rebalancer.reschedule_heartbeat(group, member)
            if len(group.members) > self.config.max_size:
                self._rebalancer.prepare_rebalance(
                    group,
                    f"freshly-loaded group {group.group_id} (size {len(group.members)}) is over capacity "
                    f"{self.config.max_size}; rebalancing so consumers can commit offsets",
                )
        log.info(
            "group coordinator loaded %d groups and %d committed offsets",
            len(state.groups), sum(len(o) for o in state.offsets.values()),
        )

    def start(self) -> None:
        """Start the periodic offset retention check (``offsets.retention.check.interval.ms``)."""
        self._expiry.start()

    async def close(self) -> None:
        """Stop serving: parked JoinGroup/SyncGroup requests get NOT_COORDINATOR (the clients look
        for the coordinator again), pending writes finish, the store closes."""
        self._state.active = False
        await self._expiry.stop()
        for group in self._state.groups.values():
            for member in list(group.members.values()):
                group.complete_join(member, JoinResponse(ErrorCode.not_coordinator, member.member_id))
                group.complete_sync(member, SyncResponse(ErrorCode.not_coordinator))
        self._timer.cancel_all()
        await self._writer.flush()
        await self._run_blocking(self._store.close)
