"""The rebalance machinery: a group's join and sync phases, and the member sessions that end in rebalances.

Kafka's GroupMetadataManager drives these from deadlines (``timer.py``): a member's
session (or, for a new member, the 5-minute join timeout; for a member id handed out
with MEMBER_ID_REQUIRED, the session timeout), the join phase (rebalance timeout, or
the initial delay ``group.initial.rebalance.delay.ms`` for a new group, extended while
members keep arriving), and the sync phase (rebalance timeout for every member to
SyncGroup). The request paths (``join.py``, ``membership.py``, ``offsets.py``) call in
here whenever a member arrives, changes, leaves or proves it is alive.
"""

from __future__ import annotations

import logging

from shoal.groups.group import UNKNOWN_MEMBER_ID, ClassicGroup, GroupState, JoinResponse, Member, SyncResponse
from shoal.groups.state import CoordinatorState, heartbeat_key, join_key, sync_key
from shoal.protocol.errors import ErrorCode

log = logging.getLogger(__name__)


class Rebalancer:
    def __init__(self, state: CoordinatorState) -> None:
        self._state = state

    def join_response_for(self, group: ClassicGroup, member_id: str, skip_assignment: bool = False) -> JoinResponse:
        """The current generation as a member's JoinGroup answer; only the leader gets the members."""
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

    # -- the join phase ----------------------------------------------------------------------------
    def maybe_prepare_rebalance_or_complete_join(self, group: ClassicGroup, reason: str) -> None:
        if group.can_rebalance():
            self.prepare_rebalance(group, reason)
        else:
            self.maybe_complete_join_phase(group)

    def prepare_rebalance(self, group: ClassicGroup, reason: str) -> None:
        if group.is_in(GroupState.COMPLETING_REBALANCE):
            self.reset_and_propagate_assignment_error(group, ErrorCode.rebalance_in_progress)
        group.pending_sync_members.clear()
        self._state.timer.cancel(sync_key(group.group_id))
        is_initial = group.is_in(GroupState.EMPTY)
        if is_initial:
            delay_ms = self._state.config.initial_rebalance_delay_ms
            remaining_ms = max(group.rebalance_timeout_ms() - delay_ms, 0)
            self._state.timer.schedule(
                join_key(group.group_id),
                delay_ms,
                lambda gid=group.group_id: self._try_complete_initial_rebalance(gid, delay_ms, remaining_ms),
            )
        group.transition_to(GroupState.PREPARING_REBALANCE, self._state.now_ms())
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
            self._state.timer.schedule(
                join_key(group.group_id),
                group.rebalance_timeout_ms(),
                lambda gid=group.group_id: self._complete_join_of(gid),
            )

    def _try_complete_initial_rebalance(self, group_id: str, delay_ms: int, remaining_ms: int) -> None:
        group = self._state.groups.get(group_id)
        if group is None or not group.is_in(GroupState.PREPARING_REBALANCE):
            return
        if group.new_member_added and remaining_ms != 0:
            # Members are still arriving: wait a little longer, up to the rebalance timeout.
            group.new_member_added = False
            new_delay_ms = min(self._state.config.initial_rebalance_delay_ms, remaining_ms)
            new_remaining_ms = max(remaining_ms - delay_ms, 0)
            self._state.timer.schedule(
                join_key(group_id),
                new_delay_ms,
                lambda: self._try_complete_initial_rebalance(group_id, new_delay_ms, new_remaining_ms),
            )
        else:
            self._complete_join(group)

    def maybe_complete_join_phase(self, group: ClassicGroup) -> None:
        # The initial rebalance always waits out its delay, even when everyone has joined.
        if (
            group.is_in(GroupState.PREPARING_REBALANCE)
            and group.has_all_members_joined()
            and group.previous_state is not GroupState.EMPTY
        ):
            self._complete_join(group)

    def _complete_join_of(self, group_id: str) -> None:
        group = self._state.groups.get(group_id)
        if group is not None:
            self._complete_join(group)

    def _complete_join(self, group: ClassicGroup) -> None:
        """End the join phase: drop dynamic members that did not rejoin, start the next generation."""
        self._state.timer.cancel(join_key(group.group_id))
        if not group.is_in(GroupState.PREPARING_REBALANCE):
            return
        gone = [m for m in group.not_yet_rejoined_members() if not m.is_static]
        if gone:
            log.info(
                "group %s removed dynamic members who haven't joined: %s",
                group.group_id, [m.member_id for m in gone],
            )
            for member in gone:
                self.drop_member(group, member)
        if not group.maybe_elect_new_joined_leader() and group.members:
            # Only static members that did not rejoin are left: wait for them or their sessions to expire.
            log.error("group %s could not complete rebalance because no members rejoined", group.group_id)
            self._state.timer.schedule(
                join_key(group.group_id),
                group.rebalance_timeout_ms(),
                lambda gid=group.group_id: self._complete_join_of(gid),
            )
            return
        group.init_next_generation(self._state.now_ms())
        if group.is_in(GroupState.EMPTY):
            log.info("group %s with generation %d is now empty", group.group_id, group.generation_id)
            self._state.persist_group(group)
            return
        log.info(
            "stabilized group %s generation %d with %d members (protocol %s)",
            group.group_id, group.generation_id, len(group.members), group.protocol_name,
        )
        for member in list(group.members.values()):
            group.complete_join(member, self.join_response_for(group, member.member_id))
            self.reschedule_heartbeat(group, member)
            member.is_new = False
            group.pending_sync_members.add(member.member_id)
        generation = group.generation_id
        self._state.timer.schedule(
            sync_key(group.group_id),
            group.rebalance_timeout_ms(),
            lambda gid=group.group_id: self._expire_pending_sync(gid, generation),
        )

    # -- the sync phase ----------------------------------------------------------------------------
    def _expire_pending_sync(self, group_id: str, generation: int) -> None:
        group = self._state.groups.get(group_id)
        if group is None or group.generation_id != generation:
            return
        if group.is_in(GroupState.COMPLETING_REBALANCE, GroupState.STABLE) and not (
            group.has_received_sync_from_all_members()
        ):
            pending = sorted(group.pending_sync_members)
            for member_id in pending:
                member = group.members.get(member_id)
                if member is not None:
                    self.drop_member(group, member)
            self.prepare_rebalance(group, f"removing {pending} on pending sync request expiration")

    def remove_pending_sync_member(self, group: ClassicGroup, member_id: str) -> None:
        group.pending_sync_members.discard(member_id)
        if group.is_in(GroupState.DEAD, GroupState.EMPTY, GroupState.PREPARING_REBALANCE) or (
            group.has_received_sync_from_all_members()
        ):
            self._state.timer.cancel(sync_key(group.group_id))

    def propagate_assignment(self, group: ClassicGroup, error: ErrorCode) -> None:
        protocol_type, protocol_name = (
            (group.protocol_type, group.protocol_name) if error is ErrorCode.none else (None, None)
        )
        for member in group.members.values():
            if group.complete_sync(member, SyncResponse(error, protocol_type, protocol_name, member.assignment)):
                # The session restarts once the member has its assignment.
                self.reschedule_heartbeat(group, member)

    def reset_and_propagate_assignment_error(self, group: ClassicGroup, error: ErrorCode) -> None:
        for member in group.members.values():
            member.assignment = b""
        self.propagate_assignment(group, error)

    # -- members leaving ---------------------------------------------------------------------------
    def drop_member(self, group: ClassicGroup, member: Member) -> None:
        """Remove a member; a request it still has parked gets UNKNOWN_MEMBER_ID so its client rejoins."""
        self._state.timer.cancel(heartbeat_key(group.group_id, member.member_id))
        group.complete_join(member, JoinResponse(ErrorCode.unknown_member_id, UNKNOWN_MEMBER_ID))
        group.complete_sync(member, SyncResponse(ErrorCode.unknown_member_id))
        group.remove(member.member_id)

    def _remove_member_and_update_group(self, group: ClassicGroup, member: Member, reason: str) -> None:
        self.drop_member(group, member)
        if group.is_in(GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self.maybe_prepare_rebalance_or_complete_join(group, reason)
        elif group.is_in(GroupState.PREPARING_REBALANCE):
            self.maybe_complete_join_phase(group)

    # -- sessions ----------------------------------------------------------------------------------
    def reschedule_heartbeat(self, group: ClassicGroup, member: Member, timeout_ms: int | None = None) -> None:
        """Restart the member's session (``timeout_ms`` instead of its session timeout, when given)."""
        self.schedule_session_expiry(
            group.group_id, member.member_id, member.session_timeout_ms if timeout_ms is None else timeout_ms
        )

    def schedule_session_expiry(self, group_id: str, member_id: str, timeout_ms: int) -> None:
        """Remove the member (or pending member) unless its session is restarted within ``timeout_ms``."""
        self._state.timer.schedule(
            heartbeat_key(group_id, member_id), timeout_ms, lambda: self._expire_heartbeat(group_id, member_id)
        )

    def _expire_heartbeat(self, group_id: str, member_id: str) -> None:
        group = self._state.groups.get(group_id)
        if group is None or group.is_in(GroupState.DEAD):
            return
        if group.is_pending_member(member_id):
            log.info("pending member %s in group %s has been removed after session timeout", member_id, group_id)
            group.remove(member_id)
            if group.is_in(GroupState.PREPARING_REBALANCE):
                self.maybe_complete_join_phase(group)
            return
        member = group.members.get(member_id)
        if member is None or member.has_satisfied_heartbeat():
            return
        log.info("member %s in group %s has failed, removing it from the group", member_id, group_id)
        self._remove_member_and_update_group(group, member, f"removing member {member_id} on heartbeat expiration")
