"""JoinGroup: admitting new, pending, returning and static members into a group's rebalance.

Which error each JoinGroup gets in each state, and when it starts a rebalance instead of
joining the current one, follow Kafka's GroupMetadataManager (classicGroupJoin). A parked
JoinGroup is a future the end of the join phase completes (``rebalance.py``).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from shoal.groups.group import UNKNOWN_MEMBER_ID, ClassicGroup, GroupState, JoinResponse, Member, Protocols
from shoal.groups.rebalance import Rebalancer
from shoal.groups.state import STORE_FAILURE, CoordinatorState, heartbeat_key
from shoal.groups.stored import stored_group
from shoal.protocol.errors import ErrorCode
from shoal.store.groups import PutGroup

log = logging.getLogger(__name__)


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


class Joiner:
    def __init__(self, state: CoordinatorState, rebalancer: Rebalancer) -> None:
        self._state = state
        self._rebalancer = rebalancer

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
        unavailable = self._state.unavailable(group_id)
        if unavailable is not None:
            return JoinResponse(unavailable, member_id)
        config = self._state.config
        if not config.min_session_timeout_ms <= session_timeout_ms <= config.max_session_timeout_ms:
            return JoinResponse(ErrorCode.invalid_session_timeout, member_id)
        future: asyncio.Future[JoinResponse] = asyncio.get_running_loop().create_future()
        request = _JoinRequest(
            group_id, member_id, group_instance_id, client_id, client_host, session_timeout_ms,
            rebalance_timeout_ms, protocol_type, tuple(protocols), require_known_member_id,
            supports_skip_assignment, reason or "not provided",
        )
        group = self._state.groups.get(group_id)
        is_new_group = group is None
        is_unknown_member = member_id == UNKNOWN_MEMBER_ID
        if group is None:
            if not is_unknown_member:
                return JoinResponse(ErrorCode.unknown_member_id, member_id)
            group = self._state.new_group(group_id)
            self._state.groups[group_id] = group
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
            and self._state.groups.get(group_id) is group
        ):
            # Nothing joined (e.g. INCONSISTENT_GROUP_PROTOCOL): the group was never really created.
            del self._state.groups[group_id]
        return await future

    def _accept_joining_member(self, group: ClassicGroup, member_id: str) -> bool:
        max_size = self._state.config.max_size
        if group.is_in(GroupState.EMPTY, GroupState.DEAD):
            return True
        if group.is_in(GroupState.PREPARING_REBALANCE):
            member = group.members.get(member_id)
            return (member is not None and member.is_awaiting_join) or group.num_awaiting_join < max_size
        return member_id in group.members or len(group.members) < max_size

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
            self._rebalancer.schedule_session_expiry(group.group_id, new_member_id, req.session_timeout_ms)
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
                future.set_result(self._rebalancer.join_response_for(group, member_id))
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
        self._rebalancer.reschedule_heartbeat(group, member, self._state.config.new_member_join_timeout_ms)
        self._rebalancer.maybe_prepare_rebalance_or_complete_join(
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
        self._rebalancer.maybe_prepare_rebalance_or_complete_join(group, f"{reason}; client reason: {req.reason}")

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
        self._state.timer.cancel(heartbeat_key(group.group_id, old_member_id))
        member = group.replace_static_member(instance_id, old_member_id, new_member_id)
        self._rebalancer.reschedule_heartbeat(group, member)
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
                write = self._state.writer.submit([PutGroup(stored_group(group))])

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
                            self._state.timer.cancel(heartbeat_key(group.group_id, new_member_id))
                            self._rebalancer.reschedule_heartbeat(group, old)
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
                        response = self._rebalancer.join_response_for(group, new_member_id, skip_assignment=is_leader)
                        group.complete_join(member, response)
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
                self._rebalancer.maybe_prepare_rebalance_or_complete_join(
                    group,
                    f"group's selected protocol will change because static member {new_member_id} with instance "
                    f"id {instance_id} joined with a change of protocol; client reason: {req.reason}",
                )
        elif group.is_in(GroupState.COMPLETING_REBALANCE):
            # The leader may already have been given the old member id: its assignment would miss the new one.
            self._rebalancer.prepare_rebalance(
                group,
                f"updating metadata for static member {new_member_id} with instance id {instance_id}; "
                f"client reason: {req.reason}",
            )
        else:
            self._rebalancer.maybe_complete_join_phase(group)
