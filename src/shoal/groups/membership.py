"""SyncGroup, Heartbeat and LeaveGroup: what members of a generation do once they have joined.

The leader's assignment is acknowledged only once stored, as Kafka does: a SyncGroup in
CompletingRebalance is a future completed when the leader's write is durable (or fails,
and the group rebalances again).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass

from shoal.groups.group import UNKNOWN_MEMBER_ID, ClassicGroup, GroupState, SyncResponse
from shoal.groups.rebalance import Rebalancer
from shoal.groups.state import STORE_FAILURE, CoordinatorState, heartbeat_key
from shoal.groups.stored import stored_group
from shoal.protocol.errors import ErrorCode
from shoal.store.groups import PutGroup

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class LeaveResult:
    error: ErrorCode
    # (member id, group instance id, error) per member, as the request named them.
    members: tuple[tuple[str, str | None, ErrorCode], ...] = ()


class Membership:
    def __init__(self, state: CoordinatorState, rebalancer: Rebalancer) -> None:
        self._state = state
        self._rebalancer = rebalancer

    # -- SyncGroup ---------------------------------------------------------------------------------
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
        unavailable = self._state.unavailable(group_id)
        if unavailable is not None:
            return SyncResponse(unavailable)
        group = self._state.groups.get(group_id)
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
            self._rebalancer.remove_pending_sync_member(group, member_id)
            return SyncResponse(ErrorCode.none, group.protocol_type, group.protocol_name, member.assignment)
        # CompletingRebalance: park until the leader's assignment is stored.
        future: asyncio.Future[SyncResponse] = asyncio.get_running_loop().create_future()
        if member.sync_future is not None and not member.sync_future.done():
            member.sync_future.set_result(SyncResponse(ErrorCode.rebalance_in_progress))
        member.sync_future = future
        self._rebalancer.remove_pending_sync_member(group, member_id)
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
            write = self._state.writer.submit([PutGroup(stored_group(group, assignment))])
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
        if self._state.groups.get(group.group_id) is not group:
            return
        if not group.is_in(GroupState.COMPLETING_REBALANCE) or group.generation_id != generation:
            return
        if done.cancelled() or done.exception() is not None:
            self._rebalancer.reset_and_propagate_assignment_error(group, STORE_FAILURE)
            self._rebalancer.maybe_prepare_rebalance_or_complete_join(
                group, f"error when storing group assignment during SyncGroup (member: {leader_id})"
            )
            return
        for member in group.members.values():
            member.assignment = assignment.get(member.member_id, b"")
        self._rebalancer.propagate_assignment(group, ErrorCode.none)
        group.transition_to(GroupState.STABLE, self._state.now_ms())

    # -- Heartbeat ---------------------------------------------------------------------------------
    def heartbeat(
        self, *, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None
    ) -> ErrorCode:
        if not group_id:
            return ErrorCode.invalid_group_id
        unavailable = self._state.unavailable(group_id)
        if unavailable is not None:
            return unavailable
        group = self._state.groups.get(group_id)
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
        self._rebalancer.reschedule_heartbeat(group, group.members[member_id])
        if group.is_in(GroupState.PREPARING_REBALANCE):
            return ErrorCode.rebalance_in_progress
        # CompletingRebalance counts too: consumers heartbeat as soon as they have their JoinGroup answer.
        return ErrorCode.none

    # -- LeaveGroup --------------------------------------------------------------------------------
    def leave_group(self, *, group_id: str, members: Sequence[tuple[str, str | None, str | None]]) -> LeaveResult:
        """``members``: (member id, group instance id, reason) each; an empty member id with an instance
        id removes that static member (the admin client's removeMembersFromConsumerGroup)."""
        if not group_id:
            return LeaveResult(ErrorCode.invalid_group_id)
        unavailable = self._state.unavailable(group_id)
        if unavailable is not None:
            return LeaveResult(unavailable)
        group = self._state.groups.get(group_id)
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
                self._state.timer.cancel(heartbeat_key(group_id, member_id))
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
                self._rebalancer.maybe_prepare_rebalance_or_complete_join(group, reason)
            elif group.is_in(GroupState.PREPARING_REBALANCE):
                self._rebalancer.maybe_complete_join_phase(group)
        return LeaveResult(ErrorCode.none, tuple(results))

    def _leave(self, group: ClassicGroup, member_id: str, reason: str) -> None:
        log.info("member %s has left group %s through LeaveGroup; client reason: %s", member_id, group.group_id, reason)
        self._rebalancer.drop_member(group, group.members[member_id])


def _inconsistent(requested: str | None, current: str | None) -> bool:
    return requested is not None and current is not None and requested != current
