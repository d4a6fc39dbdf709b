"""The group coordinator: Kafka's classic group protocol and committed offsets.

Every operation follows Kafka's GroupMetadataManager / OffsetMetadataManager (the
classic-group half of the group-coordinator module): which error each request gets in
each state, when a rebalance starts, when the join phase completes, what a heartbeat
keeps alive. All state lives on the event loop and is changed only by code running
there (request handlers and timer callbacks), so no locks are needed; a parked
JoinGroup or SyncGroup is a future completed when its phase ends.

Deadlines are keyed timers (``timer.py``): a member's session (or, for a new member,
the 5-minute join timeout; for a member id handed out with MEMBER_ID_REQUIRED, the
session timeout), the join phase (rebalance timeout, or the initial delay
``group.initial.rebalance.delay.ms`` for a new group, extended while members keep
arriving), and the sync phase (rebalance timeout for every member to SyncGroup).

Durable state goes through one ``StoreWriter``: committed offsets (answered only once
durable), and the group's metadata when a rebalance completes (the leader's assignment
is acknowledged only once stored, as Kafka does) or the group becomes empty. After a
restart, groups come back Stable with their members and generation (each member must
heartbeat within its session timeout) or Empty, and offsets come back as committed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shoal.config import Config
from shoal.groups.group import (
    UNKNOWN_MEMBER_ID,
    ClassicGroup,
    GroupState,
    JoinResponse,
    Member,
    Protocols,
    SyncResponse,
)
from shoal.groups.offsets import (
    CommittedOffset,
    DeleteGroup,
    DeleteOffsets,
    Mutation,
    PutGroup,
    PutOffsets,
    SqliteGroupStore,
    StoredGroup,
    StoredMember,
)
from shoal.groups.timer import LoopTimer, Timer
from shoal.groups.writer import StoreWriteError, StoreWriter
from shoal.protocol.errors import ErrorCode

log = logging.getLogger(__name__)

RunBlocking = Callable[..., Awaitable[Any]]
GROUP_TYPE_CLASSIC = "classic"
#: Kafka's group.coordinator's classic new-member join timeout (not configurable there either).
NEW_MEMBER_JOIN_TIMEOUT_MS = 5 * 60 * 1000
#: What a commit gets when its write did not reach the store: retriable, the consumer tries again.
STORE_FAILURE = ErrorCode.coordinator_not_available


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True, slots=True)
class GroupConfig:
    """The broker configs of the classic group coordinator, with Kafka's defaults."""

    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1800000
    initial_rebalance_delay_ms: int = 3000
    max_size: int = 2**31 - 1
    offsets_retention_ms: int = 10080 * 60 * 1000
    offsets_retention_check_interval_ms: int = 600000
    offset_metadata_max_bytes: int = 4096
    new_member_join_timeout_ms: int = NEW_MEMBER_JOIN_TIMEOUT_MS

    @classmethod
    def from_config(cls, config: Config) -> GroupConfig:
        return cls(
            min_session_timeout_ms=config["group.min.session.timeout.ms"],
            max_session_timeout_ms=config["group.max.session.timeout.ms"],
            initial_rebalance_delay_ms=config["group.initial.rebalance.delay.ms"],
            max_size=config["group.max.size"],
            offsets_retention_ms=config["offsets.retention.minutes"] * 60 * 1000,
            offsets_retention_check_interval_ms=config["offsets.retention.check.interval.ms"],
            offset_metadata_max_bytes=config["offset.metadata.max.bytes"],
        )


# -- results the request handlers turn into responses ---------------------------------------------


@dataclass(frozen=True, slots=True)
class LeaveResult:
    error: ErrorCode
    # (member id, group instance id, error) per member, as the request named them.
    members: tuple[tuple[str, str | None, ErrorCode], ...] = ()


@dataclass(frozen=True, slots=True)
class OffsetCommitEntry:
    topic: str
    partition: int
    topic_id: uuid.UUID | None
    offset: int
    leader_epoch: int
    metadata: str | None


@dataclass(frozen=True, slots=True)
class FetchedOffset:
    topic: str
    partition: int
    offset: int  # -1: none committed
    leader_epoch: int
    metadata: str


@dataclass(frozen=True, slots=True)
class DescribedMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupDescription:
    group_id: str
    state: str
    protocol_type: str
    protocol_data: str
    members: tuple[DescribedMember, ...]


@dataclass(frozen=True, slots=True)
class ListedGroup:
    group_id: str
    protocol_type: str
    state: str
    group_type: str = GROUP_TYPE_CLASSIC


@dataclass(frozen=True, slots=True)
class _JoinRequest:
    """One JoinGroup, as the join paths pass it along."""

    group_id: str
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: Protocols
    require_known_member_id: bool
    supports_skip_assignment: bool
    reason: str


def _join_key(group_id: str) -> tuple[str, str]:
    return ("join", group_id)


def _sync_key(group_id: str) -> tuple[str, str]:
    return ("sync", group_id)


def _heartbeat_key(group_id: str, member_id: str) -> tuple[str, str, str]:
    return ("heartbeat", group_id, member_id)


class GroupCoordinator:
    def __init__(
        self,
        store: SqliteGroupStore,
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
        self._topic_id_of = topic_id_of
        self._timer: Timer = timer if timer is not None else LoopTimer()
        self._now_ms = now_ms
        self._writer = StoreWriter(store.apply, run_blocking)
        self._groups: dict[str, ClassicGroup] = {}
        self._offsets: dict[str, dict[tuple[str, int], CommittedOffset]] = {}
        self._active = False
        self._retention_task: asyncio.Task[None] | None = None

    @classmethod
    async def open(
        cls,
        path: str | Path,
        run_blocking: RunBlocking,
        config: GroupConfig,
        topic_id_of: Callable[[str], uuid.UUID | None],
        **kwargs: Any,
    ) -> GroupCoordinator:
        """Open the store on the metadata database and load every group and committed offset."""
        store = await run_blocking(SqliteGroupStore, path)
        coordinator = cls(store, run_blocking, config, topic_id_of, **kwargs)
        await coordinator.load()
        return coordinator

    # -- lifecycle -------------------------------------------------------------------------------
    async def load(self) -> None:
        stored_groups, stored_offsets = await self._run_blocking(self._store.load)
        for stored in stored_groups:
            self._groups[stored.group_id] = self._group_from_store(stored)
        for group_id, offsets in stored_offsets.items():
            if group_id not in self._groups:
                self._groups[group_id] = self._new_group(group_id)
            self._offsets[group_id] = {(o.topic, o.partition): o for o in offsets}
        self._active = True
        for group in self._groups.values():
            for member in group.members.values():
                self._reschedule_heartbeat(group, member)
            if len(group.members) > self.config.max_size:
                self._prepare_rebalance(
                    group,
                    f"freshly-loaded group {group.group_id} (size {len(group.members)}) is over capacity "
                    f"{self.config.max_size}; rebalancing so consumers can commit offsets",
                )
        log.info(
            "group coordinator loaded %d groups and %d committed offsets",
            len(self._groups), sum(len(o) for o in self._offsets.values()),
        )

    def start(self) -> None:
        """Start the periodic offset retention check (``offsets.retention.check.interval.ms``)."""
        if self._retention_task is None:
            self._retention_task = asyncio.create_task(self._retention_loop(), name="group-offset-retention")

    async def close(self) -> None:
        """Stop serving: parked JoinGroup/SyncGroup requests get NOT_COORDINATOR (the clients look
        for the coordinator again), pending writes finish, the store closes."""
        self._active = False
        if self._retention_task is not None:
            self._retention_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._retention_task
        for group in self._groups.values():
            for member in list(group.members.values()):
                group.complete_join(member, JoinResponse(ErrorCode.not_coordinator, member.member_id))
                group.complete_sync(member, SyncResponse(ErrorCode.not_coordinator))
        self._timer.cancel_all()
        await self._writer.flush()
        await self._run_blocking(self._store.close)

    async def _retention_loop(self) -> None:
        interval = self.config.offsets_retention_check_interval_ms / 1000.0
        while True:
            await asyncio.sleep(interval)
            try:
                await self.cleanup_expired_offsets()
            except Exception:
                log.exception("offset retention check failed")

    # -- JoinGroup -------------------------------------------------------------------------------
    async def join_group(
        self,
        *,
        group_id: str,
        member_id: str,
        group_instance_id: str | None,
        client_id: str,
        client_host: str,
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        protocol_type: str,
        protocols: Protocols,
        require_known_member_id: bool,
        supports_skip_assignment: bool,
        reason: str | None = None,
    ) -> JoinResponse:
        """Join (or rejoin) a group; returns when the join phase completes for this member."""
        if not group_id:
            return JoinResponse(ErrorCode.invalid_group_id, member_id)
        if not self._active:
            return JoinResponse(ErrorCode.coordinator_not_available, member_id)
        if not self.config.min_session_timeout_ms <= session_timeout_ms <= self.config.max_session_timeout_ms:
            return JoinResponse(ErrorCode.invalid_session_timeout, member_id)
        future: asyncio.Future[JoinResponse] = asyncio.get_running_loop().create_future()
        request = _JoinRequest(
            group_id, member_id, group_instance_id, client_id, client_host, session_timeout_ms,
            rebalance_timeout_ms, protocol_type, tuple(protocols), require_known_member_id,
            supports_skip_assignment, reason or "not provided",
        )
        group = self._groups.get(group_id)
        is_new_group = group is None
        is_unknown_member = member_id == UNKNOWN_MEMBER_ID
        if group is None:
            if not is_unknown_member:
                return JoinResponse(ErrorCode.unknown_member_id, member_id)
            group = self._new_group(group_id)
            self._groups[group_id] = group
        if not self._accept_joining_member(group, member_id):
            group.remove(member_id)
            future.set_result(JoinResponse(ErrorCode.group_max_size_reached, UNKNOWN_MEMBER_ID))
        elif is_unknown_member:
            self._join_new_member(group, request, future)
        else:
            self._join_existing_member(group, request, future)
        if (
            is_new_group
            and group.is_in(GroupState.EMPTY)
            and not group.members
            and not group.pending_join_members
            and self._groups.get(group_id) is group
        ):
            # Nothing joined (e.g. INCONSISTENT_GROUP_PROTOCOL): the group was never really created.
            del self._groups[group_id]
        return await future

    def _accept_joining_member(self, group: ClassicGroup, member_id: str) -> bool:
        if group.is_in(GroupState.EMPTY, GroupState.DEAD):
            return True
        if group.is_in(GroupState.PREPARING_REBALANCE):
            member = group.members.get(member_id)
            return (member is not None and member.is_awaiting_join) or group.num_awaiting_join < self.config.max_size
        return member_id in group.members or len(group.members) < self.config.max_size

    def _join_new_member(self, group: ClassicGroup, req: _JoinRequest, future: asyncio.Future[JoinResponse]) -> None:
        if group.is_in(GroupState.DEAD):
            future.set_result(JoinResponse(ErrorCode.coordinator_not_available, UNKNOWN_MEMBER_ID))
            return
        if not group.supports_protocols(req.protocol_type, req.protocols):
            future.set_result(JoinResponse(ErrorCode.inconsistent_group_protocol, UNKNOWN_MEMBER_ID))
            return
        new_member_id = group.generate_member_id(req.client_id, req.group_instance_id)
        if req.group_instance_id is not None:
            existing = group.static_member_id(req.group_instance_id)
            if existing is not None:
                log.info(
                    "static member with group instance id %s and unknown member id joins group %s in state %s; "
                    "replacing previously mapped member %s", req.group_instance_id, group.group_id,
                    group.state.value, existing,
                )
                self._update_static_member_then_rebalance(group, req, existing, new_member_id, future)
            else:
                self._add_member_then_rebalance(group, req, new_member_id, future)
        elif req.require_known_member_id:
            # Kafka hands out the id first so a client that times out does not leave a ghost member.
            group.add_pending_member(new_member_id)
            self._timer.schedule(
                _heartbeat_key(group.group_id, new_member_id),
                req.session_timeout_ms,
                lambda gid=group.group_id, mid=new_member_id: self._expire_heartbeat(gid, mid),
            )
            future.set_result(JoinResponse(ErrorCode.member_id_required, new_member_id))
        else:
            self._add_member_then_rebalance(group, req, new_member_id, future)

    def _join_existing_member(
        self, group: ClassicGroup, req: _JoinRequest, future: asyncio.Future[JoinResponse]
    ) -> None:
        member_id = req.member_id
        if group.is_in(GroupState.DEAD):
            future.set_result(JoinResponse(ErrorCode.coordinator_not_available, member_id))
            return
        if not group.supports_protocols(req.protocol_type, req.protocols):
            future.set_result(JoinResponse(ErrorCode.inconsistent_group_protocol, member_id))
            return
        if group.is_pending_member(member_id):
            if req.group_instance_id is not None:
                # Pending ids are only handed to dynamic members.
                future.set_result(JoinResponse(ErrorCode.fenced_instance_id, member_id))
                return
            log.info("pending member %s joins group %s in state %s", member_id, group.group_id, group.state.value)
            self._add_member_then_rebalance(group, req, member_id, future)
            return
        error = group.validate_member(member_id, req.group_instance_id)
        if error is not None:
            future.set_result(JoinResponse(error, member_id))
            return
        member = group.members[member_id]
        if group.is_in(GroupState.PREPARING_REBALANCE):
            self._update_member_then_rebalance(
                group, member, req, future, f"member {member_id} is joining group during PreparingRebalance"
            )
        elif group.is_in(GroupState.COMPLETING_REBALANCE):
            if member.matches(req.protocols):
                # The member missed its JoinGroup response: give it the current generation again.
                future.set_result(self._join_response_for(group, member_id))
            else:
                self._update_member_then_rebalance(
                    group, member, req, future, f"updating metadata for member {member_id} during CompletingRebalance"
                )
        elif group.is_in(GroupState.STABLE):
            if group.is_leader(member_id):
                # The leader rejoins to have the assignment redone (e.g. topic metadata changed).
                self._update_member_then_rebalance(
                    group, member, req, future, f"leader {member_id} re-joining group during Stable"
                )
            elif not member.matches(req.protocols):
                self._update_member_then_rebalance(
                    group, member, req, future, f"updating metadata for member {member_id} during Stable"
                )
            else:
                future.set_result(
                    JoinResponse(
                        ErrorCode.none, member_id, group.generation_id, group.protocol_type,
                        group.protocol_name, group.leader_id or "",
                    )
                )
        else:
            log.warning(
                "rejoining member %s of group %s in unexpected state %s", member_id, group.group_id, group.state.value
            )
            future.set_result(JoinResponse(ErrorCode.unknown_member_id, member_id))

    def _join_response_for(self, group: ClassicGroup, member_id: str, skip_assignment: bool = False) -> JoinResponse:
        return JoinResponse(
            error=ErrorCode.none,
            member_id=member_id,
            generation_id=group.generation_id,
            protocol_type=group.protocol_type,
            protocol_name=group.protocol_name,
            leader=group.leader_id or "",
            skip_assignment=skip_assignment,
            members=group.current_member_metadata() if group.is_leader(member_id) else (),
        )

    def _add_member_then_rebalance(
        self, group: ClassicGroup, req: _JoinRequest, member_id: str, future: asyncio.Future[JoinResponse]
    ) -> None:
        member = Member(
            member_id=member_id,
            group_instance_id=req.group_instance_id,
            client_id=req.client_id,
            client_host=req.client_host,
            rebalance_timeout_ms=req.rebalance_timeout_ms,
            session_timeout_ms=req.session_timeout_ms,
            protocol_type=req.protocol_type,
            protocols=req.protocols,
            is_new=True,
        )
        if group.is_in(GroupState.PREPARING_REBALANCE) and group.previous_state is GroupState.EMPTY:
            group.new_member_added = True
        group.add(member, future)
        # A new member cannot heartbeat until its JoinGroup is answered, and a client that gave up
        # would leave a ghost in the rebalance: new members get a join timeout instead.
        self._reschedule_heartbeat(group, member, self.config.new_member_join_timeout_ms)
        self._maybe_prepare_rebalance_or_complete_join(
            group,
            f"adding new member {member_id} with group instance id {req.group_instance_id}; "
            f"client reason: {req.reason}",
        )

    def _update_member_then_rebalance(
        self,
        group: ClassicGroup,
        member: Member,
        req: _JoinRequest,
        future: asyncio.Future[JoinResponse],
        reason: str,
    ) -> None:
        self._answer_superseded_join(member)
        group.update_member(member, req.protocols, req.rebalance_timeout_ms, req.session_timeout_ms, future)
        self._maybe_prepare_rebalance_or_complete_join(group, f"{reason}; client reason: {req.reason}")

    def _answer_superseded_join(self, member: Member) -> None:
        # A second JoinGroup from the same member replaces the first; the first must still get an
        # answer or its connection would wait forever (Kafka drops it; the client has moved on).
        if member.join_future is not None and not member.join_future.done():
            member.join_future.set_result(JoinResponse(ErrorCode.rebalance_in_progress, member.member_id))

    def _update_static_member_then_rebalance(
        self,
        group: ClassicGroup,
        req: _JoinRequest,
        old_member_id: str,
        new_member_id: str,
        future: asyncio.Future[JoinResponse],
    ) -> None:
        assert req.group_instance_id is not None
        instance_id = req.group_instance_id
        current_leader = group.leader_id
        self._timer.cancel(_heartbeat_key(group.group_id, old_member_id))
        member = group.replace_static_member(instance_id, old_member_id, new_member_id)
        self._reschedule_heartbeat(group, member)
        old_protocols = member.protocols
        old_rebalance_timeout_ms, old_session_timeout_ms = member.rebalance_timeout_ms, member.session_timeout_ms
        group.update_member(member, req.protocols, req.rebalance_timeout_ms, req.session_timeout_ms, future)

        if group.is_in(GroupState.STABLE):
            if group.protocol_name == group.select_protocol():
                # Same protocol: no rebalance. Persist the new member id; the old one is fenced.
                log.info(
                    "static member %s of group %s rejoined as %s during Stable without changing the selected "
                    "protocol: no rebalance", instance_id, group.group_id, new_member_id,
                )
                write = self._writer.submit([PutGroup(self._stored(group))])

                def stored(done: asyncio.Future[None]) -> None:
                    if done.cancelled() or done.exception() is not None:
                        log.warning(
                            "persisting static member %s of group %s failed; reverting to member id %s",
                            instance_id, group.group_id, old_member_id,
                        )
                        parked = member.join_future
                        if group.static_member_id(instance_id) == new_member_id:
                            group.update_member(
                                member, old_protocols, old_rebalance_timeout_ms, old_session_timeout_ms, None
                            )
                            old = group.replace_static_member(instance_id, new_member_id, old_member_id)
                            self._timer.cancel(_heartbeat_key(group.group_id, new_member_id))
                            self._reschedule_heartbeat(group, old)
                        if parked is not None and not parked.done():
                            parked.set_result(
                                JoinResponse(
                                    STORE_FAILURE, UNKNOWN_MEMBER_ID, group.generation_id, group.protocol_type,
                                    group.protocol_name, current_leader or "",
                                )
                            )
                    elif req.supports_skip_assignment:
                        # JoinGroup v9+: the leader learns it leads but must not redo the assignment.
                        is_leader = group.is_leader(new_member_id)
                        group.complete_join(
                            member, self._join_response_for(group, new_member_id, skip_assignment=is_leader)
                        )
                    else:
                        # Older clients: report the old leader id so the new member id does not think it
                        # leads and redo an assignment a Stable group would never broadcast.
                        group.complete_join(
                            member,
                            JoinResponse(
                                ErrorCode.none, new_member_id, group.generation_id, group.protocol_type,
                                group.protocol_name, current_leader or "",
                            ),
                        )

                write.add_done_callback(stored)
            else:
                self._maybe_prepare_rebalance_or_complete_join(
                    group,
                    f"group's selected protocol will change because static member {new_member_id} with instance "
                    f"id {instance_id} joined with a change of protocol; client reason: {req.reason}",
                )
        elif group.is_in(GroupState.COMPLETING_REBALANCE):
            # The leader may already have been given the old member id: its assignment would miss the new one.
            self._prepare_rebalance(
                group,
                f"updating metadata for static member {new_member_id} with instance id {instance_id}; "
                f"client reason: {req.reason}",
            )
        else:
            self._maybe_complete_join_phase(group)

    # -- rebalance machinery ---------------------------------------------------------------------
    def _maybe_prepare_rebalance_or_complete_join(self, group: ClassicGroup, reason: str) -> None:
        if group.can_rebalance():
            self._prepare_rebalance(group, reason)
        else:
            self._maybe_complete_join_phase(group)

    def _prepare_rebalance(self, group: ClassicGroup, reason: str) -> None:
        if group.is_in(GroupState.COMPLETING_REBALANCE):
            self._reset_and_propagate_assignment_error(group, ErrorCode.rebalance_in_progress)
        group.pending_sync_members.clear()
        self._timer.cancel(_sync_key(group.group_id))
        is_initial = group.is_in(GroupState.EMPTY)
        if is_initial:
            delay_ms = self.config.initial_rebalance_delay_ms
            remaining_ms = max(group.rebalance_timeout_ms() - delay_ms, 0)
            self._timer.schedule(
                _join_key(group.group_id),
                delay_ms,
                lambda gid=group.group_id: self._try_complete_initial_rebalance(gid, delay_ms, remaining_ms),
            )
        group.transition_to(GroupState.PREPARING_REBALANCE, self._now_ms())
        log.info(
            "preparing to rebalance group %s in state PreparingRebalance with old generation %d (reason: %s)",
            group.group_id, group.generation_id, reason,
        )
        if not is_initial:
            self._maybe_complete_join_else_schedule(group)

    def _maybe_complete_join_else_schedule(self, group: ClassicGroup) -> None:
        if group.is_in(GroupState.PREPARING_REBALANCE) and group.has_all_members_joined():
            self._complete_join(group)
        else:
            self._timer.schedule(
                _join_key(group.group_id),
                group.rebalance_timeout_ms(),
                lambda gid=group.group_id: self._complete_join_of(gid),
            )

    def _try_complete_initial_rebalance(self, group_id: str, delay_ms: int, remaining_ms: int) -> None:
        group = self._groups.get(group_id)
        if group is None or not group.is_in(GroupState.PREPARING_REBALANCE):
            return
        if group.new_member_added and remaining_ms != 0:
            # Members are still arriving: wait a little longer, up to the rebalance timeout.
            group.new_member_added = False
            new_delay_ms = min(self.config.initial_rebalance_delay_ms, remaining_ms)
            new_remaining_ms = max(remaining_ms - delay_ms, 0)
            self._timer.schedule(
                _join_key(group_id),
                new_delay_ms,
                lambda: self._try_complete_initial_rebalance(group_id, new_delay_ms, new_remaining_ms),
            )
        else:
            self._complete_join(group)

    def _maybe_complete_join_phase(self, group: ClassicGroup) -> None:
        # The initial rebalance always waits out its delay, even when everyone has joined.
        if (
            group.is_in(GroupState.PREPARING_REBALANCE)
            and group.has_all_members_joined()
            and group.previous_state is not GroupState.EMPTY
        ):
            self._complete_join(group)

    def _complete_join_of(self, group_id: str) -> None:
        group = self._groups.get(group_id)
        if group is not None:
            self._complete_join(group)

    def _complete_join(self, group: ClassicGroup) -> None:
        """End the join phase: drop dynamic members that did not rejoin, start the next generation."""
        self._timer.cancel(_join_key(group.group_id))
        if not group.is_in(GroupState.PREPARING_REBALANCE):
            return
        gone = [m for m in group.not_yet_rejoined_members() if not m.is_static]
        if gone:
            log.info(
                "group %s removed dynamic members who haven't joined: %s",
                group.group_id, [m.member_id for m in gone],
            )
            for member in gone:
                self._drop_member(group, member)
        if not group.maybe_elect_new_joined_leader() and group.members:
            # Only static members that did not rejoin are left: wait for them or their sessions to expire.
            log.error("group %s could not complete rebalance because no members rejoined", group.group_id)
            self._timer.schedule(
                _join_key(group.group_id),
                group.rebalance_timeout_ms(),
                lambda gid=group.group_id: self._complete_join_of(gid),
            )
            return
        group.init_next_generation(self._now_ms())
        if group.is_in(GroupState.EMPTY):
            log.info("group %s with generation %d is now empty", group.group_id, group.generation_id)
            self._persist_group(group)
            return
        log.info(
            "stabilized group %s generation %d with %d members (protocol %s)",
            group.group_id, group.generation_id, len(group.members), group.protocol_name,
        )
        for member in list(group.members.values()):
            group.complete_join(member, self._join_response_for(group, member.member_id))
            self._reschedule_heartbeat(group, member)
            member.is_new = False
            group.pending_sync_members.add(member.member_id)
        generation = group.generation_id
        self._timer.schedule(
            _sync_key(group.group_id),
            group.rebalance_timeout_ms(),
            lambda gid=group.group_id: self._expire_pending_sync(gid, generation),
        )

    def _expire_pending_sync(self, group_id: str, generation: int) -> None:
        group = self._groups.get(group_id)
        if group is None or group.generation_id != generation:
            return
        if group.is_in(GroupState.COMPLETING_REBALANCE, GroupState.STABLE) and not (
            group.has_received_sync_from_all_members()
        ):
            pending = sorted(group.pending_sync_members)
            for member_id in pending:
                member = group.members.get(member_id)
                if member is not None:
                    self._drop_member(group, member)
            self._prepare_rebalance(group, f"removing {pending} on pending sync request expiration")

    def _remove_pending_sync_member(self, group: ClassicGroup, member_id: str) -> None:
        group.pending_sync_members.discard(member_id)
        if group.is_in(GroupState.DEAD, GroupState.EMPTY, GroupState.PREPARING_REBALANCE) or (
            group.has_received_sync_from_all_members()
        ):
            self._timer.cancel(_sync_key(group.group_id))

    def _propagate_assignment(self, group: ClassicGroup, error: ErrorCode) -> None:
        protocol_type, protocol_name = (
            (group.protocol_type, group.protocol_name) if error is ErrorCode.none else (None, None)
        )
        for member in group.members.values():
            if group.complete_sync(member, SyncResponse(error, protocol_type, protocol_name, member.assignment)):
                # The session restarts once the member has its assignment.
                self._reschedule_heartbeat(group, member)

    def _reset_and_propagate_assignment_error(self, group: ClassicGroup, error: ErrorCode) -> None:
        for member in group.members.values():
            member.assignment = b""
        self._propagate_assignment(group, error)

    def _drop_member(self, group: ClassicGroup, member: Member) -> None:
        """Remove a member; a request it still has parked gets UNKNOWN_MEMBER_ID so its client rejoins."""
        self._timer.cancel(_heartbeat_key(group.group_id, member.member_id))
        group.complete_join(member, JoinResponse(ErrorCode.unknown_member_id, UNKNOWN_MEMBER_ID))
        group.complete_sync(member, SyncResponse(ErrorCode.unknown_member_id))
        group.remove(member.member_id)

    def _remove_member_and_update_group(self, group: ClassicGroup, member: Member, reason: str) -> None:
        self._drop_member(group, member)
        if group.is_in(GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance_or_complete_join(group, reason)
        elif group.is_in(GroupState.PREPARING_REBALANCE):
            self._maybe_complete_join_phase(group)

    # -- sessions --------------------------------------------------------------------------------
    def _reschedule_heartbeat(self, group: ClassicGroup, member: Member, timeout_ms: int | None = None) -> None:
        group_id, member_id = group.group_id, member.member_id
        self._timer.schedule(
            _heartbeat_key(group_id, member_id),
            member.session_timeout_ms if timeout_ms is None else timeout_ms,
            lambda: self._expire_heartbeat(group_id, member_id),
        )

    def _expire_heartbeat(self, group_id: str, member_id: str) -> None:
        group = self._groups.get(group_id)
        if group is None or group.is_in(GroupState.DEAD):
            return
        if group.is_pending_member(member_id):
            log.info("pending member %s in group %s has been removed after session timeout", member_id, group_id)
            group.remove(member_id)
            if group.is_in(GroupState.PREPARING_REBALANCE):
                self._maybe_complete_join_phase(group)
            return
        member = group.members.get(member_id)
        if member is None or member.has_satisfied_heartbeat():
            return
        log.info("member %s in group %s has failed, removing it from the group", member_id, group_id)
        self._remove_member_and_update_group(group, member, f"removing member {member_id} on heartbeat expiration")

    # -- SyncGroup -------------------------------------------------------------------------------
    async def sync_group(
        self,
        *,
        group_id: str,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        protocol_type: str | None,
        protocol_name: str | None,
        assignments: Sequence[tuple[str, bytes]],
    ) -> SyncResponse:
        if not group_id:
            return SyncResponse(ErrorCode.invalid_group_id)
        if not self._active:
            return SyncResponse(ErrorCode.coordinator_not_available)
        group = self._groups.get(group_id)
        if group is None:
            return SyncResponse(ErrorCode.unknown_member_id)
        if group.is_in(GroupState.DEAD):
            return SyncResponse(ErrorCode.coordinator_not_available)
        error = group.validate_member(member_id, group_instance_id)
        if error is not None:
            return SyncResponse(error)
        if generation_id != group.generation_id:
            return SyncResponse(ErrorCode.illegal_generation)
        if _inconsistent(protocol_type, group.protocol_type) or _inconsistent(protocol_name, group.protocol_name):
            return SyncResponse(ErrorCode.inconsistent_group_protocol)
        if group.is_in(GroupState.PREPARING_REBALANCE):
            return SyncResponse(ErrorCode.rebalance_in_progress)
        member = group.members[member_id]
        if group.is_in(GroupState.STABLE):
            self._remove_pending_sync_member(group, member_id)
            return SyncResponse(ErrorCode.none, group.protocol_type, group.protocol_name, member.assignment)
        # CompletingRebalance: park until the leader's assignment is stored.
        future: asyncio.Future[SyncResponse] = asyncio.get_running_loop().create_future()
        if member.sync_future is not None and not member.sync_future.done():
            member.sync_future.set_result(SyncResponse(ErrorCode.rebalance_in_progress))
        member.sync_future = future
        self._remove_pending_sync_member(group, member_id)
        if group.is_leader(member_id):
            log.info(
                "assignment received from leader %s for group %s for generation %d; the group has %d members, "
                "%d of which are static", member_id, group_id, group.generation_id, len(group.members),
                len(group.static_members),
            )
            given = dict(assignments)
            assignment = {mid: given.get(mid, b"") for mid in group.members}
            missing = [mid for mid in group.members if mid not in given]
            if missing:
                log.warning(
                    "setting empty assignments for members %s of %s for generation %d",
                    missing, group_id, group.generation_id,
                )
            generation = group.generation_id
            write = self._writer.submit([PutGroup(self._stored(group, assignment))])
            write.add_done_callback(
                lambda done: self._on_assignment_stored(group, generation, assignment, member_id, done)
            )
        return await future

    def _on_assignment_stored(
        self,
        group: ClassicGroup,
        generation: int,
        assignment: dict[str, bytes],
        leader_id: str,
        done: asyncio.Future[None],
    ) -> None:
        # Another member may have joined meanwhile: only the same generation, still awaiting sync, applies.
        if self._groups.get(group.group_id) is not group:
            return
        if not group.is_in(GroupState.COMPLETING_REBALANCE) or group.generation_id != generation:
            return
        if done.cancelled() or done.exception() is not None:
            self._reset_and_propagate_assignment_error(group, STORE_FAILURE)
            self._maybe_prepare_rebalance_or_complete_join(
                group, f"error when storing group assignment during SyncGroup (member: {leader_id})"
            )
            return
        for member in group.members.values():
            member.assignment = assignment.get(member.member_id, b"")
        self._propagate_assignment(group, ErrorCode.none)
        group.transition_to(GroupState.STABLE, self._now_ms())

    # -- Heartbeat -------------------------------------------------------------------------------
    def heartbeat(
        self, *, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None
    ) -> ErrorCode:
        if not group_id:
            return ErrorCode.invalid_group_id
        if not self._active:
            return ErrorCode.coordinator_not_available
        group = self._groups.get(group_id)
        if group is None:
            return ErrorCode.unknown_member_id
        if group.is_in(GroupState.DEAD):
            return ErrorCode.coordinator_not_available
        error = group.validate_member(member_id, group_instance_id)
        if error is not None:
            return error
        if generation_id != group.generation_id:
            return ErrorCode.illegal_generation
        if group.is_in(GroupState.EMPTY):
            return ErrorCode.unknown_member_id
        self._reschedule_heartbeat(group, group.members[member_id])
        if group.is_in(GroupState.PREPARING_REBALANCE):
            return ErrorCode.rebalance_in_progress
        # CompletingRebalance counts too: consumers heartbeat as soon as they have their JoinGroup answer.
        return ErrorCode.none

    # -- LeaveGroup ------------------------------------------------------------------------------
    def leave_group(self, *, group_id: str, members: Sequence[tuple[str, str | None, str | None]]) -> LeaveResult:
        """``members``: (member id, group instance id, reason) each; an empty member id with an instance
        id removes that static member (the admin client's removeMembersFromConsumerGroup)."""
        if not group_id:
            return LeaveResult(ErrorCode.invalid_group_id)
        if not self._active:
            return LeaveResult(ErrorCode.coordinator_not_available)
        group = self._groups.get(group_id)
        if group is None:
            return LeaveResult(
                ErrorCode.none, tuple((mid, iid, ErrorCode.unknown_member_id) for mid, iid, _ in members)
            )
        if group.is_in(GroupState.DEAD):
            return LeaveResult(ErrorCode.coordinator_not_available)
        results: list[tuple[str, str | None, ErrorCode]] = []
        left: list[str] = []
        for member_id, instance_id, reason in members:
            why = reason or "not provided"
            if member_id == UNKNOWN_MEMBER_ID:
                static_id = group.static_member_id(instance_id) if instance_id is not None else None
                if static_id is None:
                    results.append((member_id, instance_id, ErrorCode.unknown_member_id))
                    continue
                self._leave(group, static_id, why)
                left.append(static_id)
            elif group.is_pending_member(member_id):
                group.remove(member_id)
                self._timer.cancel(_heartbeat_key(group_id, member_id))
                log.info("pending member %s has left group %s; client reason: %s", member_id, group_id, why)
                left.append(member_id)
            else:
                error = group.validate_member(member_id, instance_id)
                if error is not None:
                    results.append((member_id, instance_id, error))
                    continue
                self._leave(group, member_id, why)
                left.append(member_id)
            results.append((member_id, instance_id, ErrorCode.none))
        if left:
            reason = f"explicit LeaveGroup request for ({', '.join(left)}) members"
            if group.is_in(GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
                self._maybe_prepare_rebalance_or_complete_join(group, reason)
            elif group.is_in(GroupState.PREPARING_REBALANCE):
                self._maybe_complete_join_phase(group)
        return LeaveResult(ErrorCode.none, tuple(results))

    def _leave(self, group: ClassicGroup, member_id: str, reason: str) -> None:
        log.info("member %s has left group %s through LeaveGroup; client reason: %s", member_id, group.group_id, reason)
        self._drop_member(group, group.members[member_id])

    # -- OffsetCommit ----------------------------------------------------------------------------
    async def commit_offsets(
        self,
        *,
        group_id: str,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        entries: Sequence[OffsetCommitEntry],
        retention_ms: int = -1,
        api_version: int,
    ) -> list[ErrorCode]:
        """Commit offsets of partitions the caller checked exist; one error per entry, in order."""
        if not entries:
            return []
        if not self._active:
            return [ErrorCode.coordinator_not_available] * len(entries)
        group = self._groups.get(group_id)
        if group is None:
            if generation_id >= 0:
                # v9+ answers GROUP_ID_NOT_FOUND; older clients only know ILLEGAL_GENERATION here.
                error = ErrorCode.group_id_not_found if api_version >= 9 else ErrorCode.illegal_generation
                return [error] * len(entries)
            # A "simple" commit (admin client, manual assignment) creates the group once durable.
        else:
            error = group.validate_offset_commit(member_id, group_instance_id, generation_id)
            if error is not None:
                return [error] * len(entries)
            if group.is_in(GroupState.STABLE, GroupState.PREPARING_REBALANCE):
                # Committing keeps a classic member's session alive.
                self._reschedule_heartbeat(group, group.members[member_id])
        now = self._now_ms()
        expire = None if retention_ms == -1 else now + retention_ms
        results: list[ErrorCode] = []
        records: list[CommittedOffset] = []
        for entry in entries:
            if entry.metadata is not None and len(entry.metadata) > self.config.offset_metadata_max_bytes:
                results.append(ErrorCode.offset_metadata_too_large)
                continue
            results.append(ErrorCode.none)
            records.append(
                CommittedOffset(
                    topic=entry.topic,
                    partition=entry.partition,
                    topic_id=entry.topic_id,
                    offset=entry.offset,
                    leader_epoch=entry.leader_epoch,
                    metadata=entry.metadata or "",
                    commit_timestamp_ms=now,
                    expire_timestamp_ms=expire,
                )
            )
        if records:
            try:
                await self._writer.submit(
                    [PutOffsets(group_id, tuple(records))], lambda: self._apply_offsets(group_id, records)
                )
            except StoreWriteError:
                return [STORE_FAILURE if e is ErrorCode.none else e for e in results]
        return results

    def _apply_offsets(self, group_id: str, records: Iterable[CommittedOffset]) -> None:
        if group_id not in self._groups:
            log.info("creating simple consumer group %s via manual offset commit", group_id)
            self._groups[group_id] = self._new_group(group_id)
        offsets = self._offsets.setdefault(group_id, {})
        for record in records:
            offsets[(record.topic, record.partition)] = record

    # -- OffsetFetch -----------------------------------------------------------------------------
    def fetch_offsets(
        self, group_id: str, partitions: Sequence[tuple[str, int]] | None
    ) -> tuple[ErrorCode, list[FetchedOffset]]:
        """The committed offsets of the partitions (or of every partition with one, for None).

        Offsets are returned whatever the group's state: the group may use Kafka only to store them.
        """
        if not self._active:
            return ErrorCode.coordinator_not_available, []
        group = self._groups.get(group_id)
        offsets = self._offsets.get(group_id, {}) if group is not None and not group.is_in(GroupState.DEAD) else {}
        if partitions is None:
            return ErrorCode.none, [
                FetchedOffset(o.topic, o.partition, o.offset, o.leader_epoch, o.metadata)
                for _, o in sorted(offsets.items())
                if self._is_live(o)
            ]
        fetched = []
        for topic, partition in partitions:
            o = offsets.get((topic, partition))
            if o is None or not self._is_live(o):
                fetched.append(FetchedOffset(topic, partition, -1, -1, ""))
            else:
                fetched.append(FetchedOffset(topic, partition, o.offset, o.leader_epoch, o.metadata))
        return ErrorCode.none, fetched

    def _is_live(self, offset: CommittedOffset) -> bool:
        """False once the topic was deleted (or deleted and created again): its offsets are gone in Kafka."""
        current = self._topic_id_of(offset.topic)
        return current is not None and (offset.topic_id is None or offset.topic_id == current)

    # -- DescribeGroups / ListGroups -------------------------------------------------------------
    def describe_group(self, group_id: str) -> tuple[ErrorCode, GroupDescription | None]:
        """(error, description); (NONE, None) for a group that does not exist (Kafka shows it Dead)."""
        if not self._active:
            return ErrorCode.coordinator_not_available, None
        group = self._groups.get(group_id)
        if group is None or group.is_in(GroupState.DEAD):
            return ErrorCode.none, None
        stable = group.is_in(GroupState.STABLE)
        members = tuple(
            DescribedMember(
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                metadata=m.metadata(group.protocol_name) if stable else b"",
                assignment=m.assignment if stable else b"",
            )
            for m in group.members.values()
        )
        return ErrorCode.none, GroupDescription(
            group_id=group.group_id,
            state=group.state.value,
            protocol_type=group.protocol_type or "",
            protocol_data=(group.protocol_name or "") if stable else "",
            members=members,
        )

    def list_groups(self, states: Iterable[str] = (), types: Iterable[str] = ()) -> tuple[ErrorCode, list[ListedGroup]]:
        """Groups in any of ``states`` (case-insensitive; empty: all) of any of ``types`` (only "classic" exists)."""
        if not self._active:
            return ErrorCode.coordinator_not_available, []
        wanted_states = {s.lower() for s in states}
        wanted_types = {t.lower() for t in types}
        if wanted_types and GROUP_TYPE_CLASSIC not in wanted_types:
            return ErrorCode.none, []
        return ErrorCode.none, [
            ListedGroup(group.group_id, group.protocol_type or "", group.state.value)
            for group in self._groups.values()
            if not wanted_states or group.state.value.lower() in wanted_states
        ]

    # -- DeleteGroups / OffsetDelete -------------------------------------------------------------
    async def delete_groups(self, group_ids: Iterable[str]) -> dict[str, ErrorCode]:
        """Delete empty groups with their offsets: GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP or NONE each."""
        results: dict[str, ErrorCode] = {}
        deleted: list[str] = []
        for group_id in group_ids:
            if group_id in results:
                continue
            if not self._active:
                results[group_id] = ErrorCode.coordinator_not_available
                continue
            group = self._groups.get(group_id)
            if group is None or group.is_in(GroupState.DEAD):
                results[group_id] = ErrorCode.group_id_not_found
            elif not group.is_in(GroupState.EMPTY):
                results[group_id] = ErrorCode.non_empty_group
            else:
                self._forget_group(group)
                deleted.append(group_id)
                results[group_id] = ErrorCode.none
        if deleted:
            try:
                await self._writer.submit([DeleteGroup(gid) for gid in deleted])
            except StoreWriteError:
                for gid in deleted:
                    results[gid] = STORE_FAILURE
            else:
                log.info("deleted groups %s", ", ".join(deleted))
        return results

    def _forget_group(self, group: ClassicGroup) -> None:
        group.transition_to(GroupState.DEAD, self._now_ms())
        del self._groups[group.group_id]
        self._offsets.pop(group.group_id, None)
        self._timer.cancel(_join_key(group.group_id))
        self._timer.cancel(_sync_key(group.group_id))
        for member_id in list(group.members) + list(group.pending_join_members):
            self._timer.cancel(_heartbeat_key(group.group_id, member_id))

    async def delete_offsets(
        self, group_id: str, topics: Sequence[tuple[str, Sequence[int]]]
    ) -> tuple[ErrorCode, dict[tuple[str, int], ErrorCode]]:
        """OffsetDelete: (group error, error per partition) for topics the caller checked exist."""
        if not group_id:
            return ErrorCode.invalid_group_id, {}
        if not self._active:
            return ErrorCode.coordinator_not_available, {}
        group = self._groups.get(group_id)
        if group is None or group.is_in(GroupState.DEAD):
            return ErrorCode.group_id_not_found, {}
        if not group.is_in(GroupState.EMPTY) and not group.uses_consumer_protocol():
            return ErrorCode.non_empty_group, {}
        results: dict[tuple[str, int], ErrorCode] = {}
        removed: list[tuple[str, int]] = []
        offsets = self._offsets.get(group_id, {})
        for topic, partitions in topics:
            subscribed = group.is_subscribed_to_topic(topic)
            for partition in partitions:
                if subscribed:
                    results[(topic, partition)] = ErrorCode.group_subscribed_to_topic
                    continue
                results[(topic, partition)] = ErrorCode.none
                if offsets.pop((topic, partition), None) is not None:
                    removed.append((topic, partition))
        if removed:
            try:
                await self._writer.submit([DeleteOffsets(group_id, tuple(removed))])
            except StoreWriteError:
                return STORE_FAILURE, {}
            log.info("deleted offsets of group %s: %s", group_id, removed)
        return ErrorCode.none, results

    # -- retention -------------------------------------------------------------------------------
    async def cleanup_expired_offsets(self) -> int:
        """Expire offsets as Kafka does, forget offsets of deleted topics, and delete empty groups left
        without offsets. Returns how many offsets were removed."""
        if not self._active:
            return 0
        now = self._now_ms()
        retention_ms = self.config.offsets_retention_ms
        mutations: list[Mutation] = []
        removed_count = 0
        for group_id, group in list(self._groups.items()):
            offsets = self._offsets.get(group_id, {})
            base = self._expiration_base(group)
            expired: list[tuple[str, int]] = []
            kept = False
            for key, offset in offsets.items():
                if not self._is_live(offset):
                    expired.append(key)
                elif base is None or group.is_subscribed_to_topic(offset.topic):
                    kept = True
                elif (
                    now >= offset.expire_timestamp_ms
                    if offset.expire_timestamp_ms is not None
                    else now - base(offset) >= retention_ms
                ):
                    expired.append(key)
                else:
                    kept = True
            for key in expired:
                del offsets[key]
            if expired:
                removed_count += len(expired)
                mutations.append(DeleteOffsets(group_id, tuple(expired)))
                log.info("expired %d offsets of group %s", len(expired), group_id)
            if group.is_in(GroupState.EMPTY) and not kept:
                log.info("group %s is empty and has no offsets left: deleting it", group_id)
                self._forget_group(group)
                mutations.append(DeleteGroup(group_id))
        if mutations:
            try:
                await self._writer.submit(mutations)
            except StoreWriteError:
                log.warning("offset retention changes were not stored; they are retried at the next check")
        return removed_count

    def _expiration_base(self, group: ClassicGroup) -> Callable[[CommittedOffset], int] | None:
        """What an offset's retention counts from for this group, or None when its offsets don't expire."""
        if group.protocol_type:
            if group.is_in(GroupState.EMPTY):
                state_ts = group.state_timestamp_ms
                return lambda o: state_ts if state_ts is not None else o.commit_timestamp_ms
            if group.uses_consumer_protocol() and group.subscribed_topics is not None and group.is_in(
                GroupState.STABLE
            ):
                return lambda o: o.commit_timestamp_ms
            return None
        # A simple group (manual assignment, offsets only): each offset expires from its commit.
        return lambda o: o.commit_timestamp_ms

    # -- persistence helpers ---------------------------------------------------------------------
    def _new_group(self, group_id: str) -> ClassicGroup:
        return ClassicGroup(group_id, state_timestamp_ms=self._now_ms())

    def _group_from_store(self, stored: StoredGroup) -> ClassicGroup:
        group = ClassicGroup(
            stored.group_id,
            state=GroupState.STABLE if stored.members else GroupState.EMPTY,
            state_timestamp_ms=None if stored.state_timestamp_ms < 0 else stored.state_timestamp_ms,
            protocol_type=stored.protocol_type or None,
            protocol_name=stored.protocol_name,
            generation_id=stored.generation,
            leader_id=stored.leader,
        )
        for m in stored.members:
            group.add(
                Member(
                    member_id=m.member_id,
                    group_instance_id=m.group_instance_id,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    rebalance_timeout_ms=m.session_timeout_ms if m.rebalance_timeout_ms < 0 else m.rebalance_timeout_ms,
                    session_timeout_ms=m.session_timeout_ms,
                    protocol_type=stored.protocol_type or "",
                    protocols=((stored.protocol_name or "", m.subscription),),
                    assignment=m.assignment,
                )
            )
        if stored.leader is not None and stored.leader in group.members:
            group.leader_id = stored.leader
        group.subscribed_topics = group.compute_subscribed_topics()
        return group

    def _stored(self, group: ClassicGroup, assignment: dict[str, bytes] | None = None) -> StoredGroup:
        members = tuple(
            StoredMember(
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                rebalance_timeout_ms=m.rebalance_timeout_ms,
                session_timeout_ms=m.session_timeout_ms,
                subscription=m.metadata(group.protocol_name) if group.protocol_name is not None else b"",
                assignment=m.assignment if assignment is None else assignment.get(m.member_id, b""),
            )
            for m in group.members.values()
        )
        return StoredGroup(
            group_id=group.group_id,
            protocol_type=group.protocol_type,
            protocol_name=group.protocol_name,
            generation=group.generation_id,
            leader=group.leader_id,
            state_timestamp_ms=-1 if group.state_timestamp_ms is None else group.state_timestamp_ms,
            members=members,
        )

    def _persist_group(self, group: ClassicGroup) -> None:
        """Store the group's metadata without anyone waiting for it (a failure is only logged, as in Kafka:
        the previous generation comes back after a restart and its members simply rejoin)."""
        self._writer.submit([PutGroup(self._stored(group))])


def _inconsistent(requested: str | None, current: str | None) -> bool:
    return requested is not None and current is not None and requested != current
