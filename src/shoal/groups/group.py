"""One classic consumer group: its members, state, generation and protocol, as Kafka keeps them.

This is Kafka's ClassicGroup (group-coordinator module) in Python: the bookkeeping
only. Timers, persistence and the order of operations live in the coordinator
(``coordinator.py`` and the modules it lists); here are the rules that must hold
whatever drives them (valid state transitions, protocol selection by vote, leader
election, static member replacement, member validation). A parked JoinGroup or
SyncGroup is an asyncio future the coordinator completes.
"""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from dataclasses import dataclass, field
from enum import Enum

from shoal.groups.consumer_protocol import PROTOCOL_TYPE, MalformedSubscription, subscribed_topics
from shoal.protocol.errors import ErrorCode

NO_GENERATION = -1
NO_LEADER = ""
UNKNOWN_MEMBER_ID = ""


class GroupState(Enum):
    """Kafka's ClassicGroupState; the value is the name DescribeGroups and ListGroups show."""

    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


_VALID_PREVIOUS: dict[GroupState, frozenset[GroupState]] = {
    GroupState.DEAD: frozenset(GroupState),
    GroupState.COMPLETING_REBALANCE: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.STABLE: frozenset({GroupState.COMPLETING_REBALANCE}),
    GroupState.PREPARING_REBALANCE: frozenset(
        {GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY}
    ),
    GroupState.EMPTY: frozenset({GroupState.PREPARING_REBALANCE}),
}

Protocols = tuple[tuple[str, bytes], ...]


@dataclass(frozen=True, slots=True)
class JoinedMember:
    """One member as the leader's JoinGroup response lists it."""

    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(frozen=True, slots=True)
class JoinResponse:
    error: ErrorCode
    member_id: str
    generation_id: int = NO_GENERATION
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = NO_LEADER
    skip_assignment: bool = False
    members: tuple[JoinedMember, ...] = ()


@dataclass(frozen=True, slots=True)
class SyncResponse:
    error: ErrorCode
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@dataclass(eq=False)
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: Protocols
    assignment: bytes = b""
    # A new member is expired by its join timeout even while its JoinGroup is parked.
    is_new: bool = False
    join_future: asyncio.Future[JoinResponse] | None = None
    sync_future: asyncio.Future[SyncResponse] | None = None

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    @property
    def is_awaiting_join(self) -> bool:
        return self.join_future is not None

    @property
    def is_awaiting_sync(self) -> bool:
        return self.sync_future is not None

    def has_satisfied_heartbeat(self) -> bool:
        """Members parked in a rebalance need no heartbeat; new members and idle ones do."""
        if self.is_new:
            return False
        return self.is_awaiting_join or self.is_awaiting_sync

    def metadata(self, protocol: str | None) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol:
                return metadata
        raise ValueError(f"member {self.member_id} does not support protocol {protocol}")

    def matches(self, protocols: Protocols) -> bool:
        return tuple(protocols) == tuple(self.protocols)

    def vote(self, candidates: set[str]) -> str:
        """The member's most preferred protocol among those every member supports."""
        for name, _ in self.protocols:
            if name in candidates:
                return name
        raise ValueError(f"member {self.member_id} supports none of {sorted(candidates)}")


def _resolve(future: asyncio.Future | None, value: object) -> None:
    # A future whose request went away (connection closed) is cancelled: nothing to answer.
    if future is not None and not future.done():
        future.set_result(value)


@dataclass(eq=False)
class ClassicGroup:
    group_id: str
    state: GroupState = GroupState.EMPTY
    previous_state: GroupState = GroupState.DEAD
    state_timestamp_ms: int | None = None
    protocol_type: str | None = None
    protocol_name: str | None = None
    generation_id: int = 0
    leader_id: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)
    pending_join_members: set[str] = field(default_factory=set)
    pending_sync_members: set[str] = field(default_factory=set)
    num_awaiting_join: int = 0
    supported_protocols: Counter[str] = field(default_factory=Counter)
    subscribed_topics: frozenset[str] | None = None
    # Set when a member joins during the initial (delayed) rebalance: the delay is extended.
    new_member_added: bool = False

    # -- state -----------------------------------------------------------------------------------
    def is_in(self, *states: GroupState) -> bool:
        return self.state in states

    def can_rebalance(self) -> bool:
        return self.state in _VALID_PREVIOUS[GroupState.PREPARING_REBALANCE]

    def transition_to(self, target: GroupState, now_ms: int) -> None:
        if self.state not in _VALID_PREVIOUS[target]:
            raise RuntimeError(
                f"group {self.group_id} should be in one of {sorted(s.value for s in _VALID_PREVIOUS[target])} "
                f"before moving to {target.value}; it is {self.state.value}"
            )
        self.previous_state = self.state
        self.state = target
        self.state_timestamp_ms = now_ms

    # -- members ---------------------------------------------------------------------------------
    def has_member(self, member_id: str) -> bool:
        return member_id in self.members

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id is not None and self.leader_id == member_id

    def add(self, member: Member, join_future: asyncio.Future[JoinResponse] | None = None) -> None:
        if member.group_instance_id is not None:
            if member.group_instance_id in self.static_members:
                raise RuntimeError(f"static member {member.group_instance_id} is already in group {self.group_id}")
            self.static_members[member.group_instance_id] = member.member_id
        if not self.members:
            self.protocol_type = member.protocol_type
        if self.protocol_type != member.protocol_type:
            raise RuntimeError("the group and member protocol types must be the same")
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.members[member.member_id] = member
        self.supported_protocols.update(name for name, _ in member.protocols)
        member.join_future = join_future
        if member.is_awaiting_join:
            self.num_awaiting_join += 1
        self.pending_join_members.discard(member.member_id)

    def remove(self, member_id: str) -> None:
        member = self.members.pop(member_id, None)
        if member is not None:
            self.supported_protocols.subtract(name for name, _ in member.protocols)
            if member.is_awaiting_join:
                self.num_awaiting_join -= 1
            if member.group_instance_id is not None:
                self.static_members.pop(member.group_instance_id, None)
        if self.is_leader(member_id):
            self.leader_id = next(iter(self.members), None)
        self.pending_join_members.discard(member_id)
        self.pending_sync_members.discard(member_id)

    def update_member(
        self,
        member: Member,
        protocols: Protocols,
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        join_future: asyncio.Future[JoinResponse] | None,
    ) -> None:
        self.supported_protocols.subtract(name for name, _ in member.protocols)
        member.protocols = tuple(protocols)
        self.supported_protocols.update(name for name, _ in member.protocols)
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.session_timeout_ms = session_timeout_ms
        if join_future is not None and not member.is_awaiting_join:
            self.num_awaiting_join += 1
        elif join_future is None and member.is_awaiting_join:
            self.num_awaiting_join -= 1
        member.join_future = join_future

    def replace_static_member(self, group_instance_id: str, old_member_id: str, new_member_id: str) -> Member:
        """Give a static member a new member id; a request still parked for the old id is fenced."""
        old = self.members.pop(old_member_id)
        self.complete_join(old, JoinResponse(ErrorCode.fenced_instance_id, old_member_id))
        self.complete_sync(old, SyncResponse(ErrorCode.fenced_instance_id))
        new = Member(
            member_id=new_member_id,
            group_instance_id=old.group_instance_id,
            client_id=old.client_id,
            client_host=old.client_host,
            rebalance_timeout_ms=old.rebalance_timeout_ms,
            session_timeout_ms=old.session_timeout_ms,
            protocol_type=old.protocol_type,
            protocols=old.protocols,
            assignment=old.assignment,
        )
        self.members[new_member_id] = new
        if self.is_leader(old_member_id):
            self.leader_id = new_member_id
        self.static_members[group_instance_id] = new_member_id
        return new

    def maybe_elect_new_joined_leader(self) -> bool:
        """Keep the leader if it rejoined, else pick a member that did; False if none did."""
        if self.leader_id is None:
            return False
        leader = self.members[self.leader_id]
        if leader.is_awaiting_join:
            return True
        for member in self.members.values():
            if member.is_awaiting_join:
                self.leader_id = member.member_id
                return True
        return False

    def is_pending_member(self, member_id: str) -> bool:
        return member_id in self.pending_join_members

    def add_pending_member(self, member_id: str) -> None:
        if member_id in self.members:
            raise RuntimeError(f"pending member {member_id} is already a member of {self.group_id}")
        self.pending_join_members.add(member_id)

    def has_static_member(self, group_instance_id: str | None) -> bool:
        return group_instance_id is not None and group_instance_id in self.static_members

    def static_member_id(self, group_instance_id: str) -> str | None:
        return self.static_members.get(group_instance_id)

    def not_yet_rejoined_members(self) -> list[Member]:
        return [m for m in self.members.values() if not m.is_awaiting_join]

    def has_all_members_joined(self) -> bool:
        return len(self.members) == self.num_awaiting_join and not self.pending_join_members

    def has_received_sync_from_all_members(self) -> bool:
        return not self.pending_sync_members

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    @staticmethod
    def generate_member_id(client_id: str, group_instance_id: str | None) -> str:
        return f"{group_instance_id if group_instance_id is not None else client_id}-{uuid.uuid4()}"

    def validate_member(self, member_id: str, group_instance_id: str | None) -> ErrorCode | None:
        """UNKNOWN_MEMBER_ID or FENCED_INSTANCE_ID when the request does not come from a current member."""
        if group_instance_id is not None:
            existing = self.static_members.get(group_instance_id)
            if existing is None:
                return ErrorCode.unknown_member_id
            if existing != member_id:
                return ErrorCode.fenced_instance_id
        if member_id not in self.members:
            return ErrorCode.unknown_member_id
        return None

    def validate_offset_commit(
        self, member_id: str, group_instance_id: str | None, generation_id: int, *, transactional: bool = False
    ) -> ErrorCode | None:
        """Kafka's ClassicGroup.validateOffsetCommit. A transactional commit (TxnOffsetCommit) may come
        without member id and generation (v0-2 have none) and is not refused while the group completes
        a rebalance: the group's state does not bind a transaction."""
        if self.state is GroupState.DEAD:
            return ErrorCode.coordinator_not_available
        if generation_id < 0 and self.state is GroupState.EMPTY:
            # The admin client or a consumer using manual assignment: allowed while nobody is a member.
            return None
        if generation_id >= 0 or member_id != UNKNOWN_MEMBER_ID or group_instance_id is not None:
            error = self.validate_member(member_id, group_instance_id)
            if error is not None:
                return error
            if generation_id != self.generation_id:
                return ErrorCode.illegal_generation
        elif not transactional and self.state is not GroupState.EMPTY:
            return ErrorCode.unknown_member_id
        if not transactional and self.state is GroupState.COMPLETING_REBALANCE:
            return ErrorCode.rebalance_in_progress
        return None

    # -- protocols -------------------------------------------------------------------------------
    def _candidate_protocols(self) -> set[str]:
        size = len(self.members)
        return {name for name, count in self.supported_protocols.items() if count == size}

    def supports_protocols(self, protocol_type: str, protocols: Protocols) -> bool:
        if self.state is GroupState.EMPTY:
            return bool(protocol_type) and bool(protocols)
        size = len(self.members)
        return self.protocol_type == protocol_type and any(
            self.supported_protocols.get(name, 0) == size for name, _ in protocols
        )

    def select_protocol(self) -> str:
        """The protocol every member supports that most members prefer."""
        if not self.members:
            raise RuntimeError(f"cannot select a protocol for empty group {self.group_id}")
        candidates = self._candidate_protocols()
        votes = Counter(member.vote(candidates) for member in self.members.values())
        return votes.most_common(1)[0][0]

    def uses_consumer_protocol(self) -> bool:
        return self.protocol_type == PROTOCOL_TYPE

    def compute_subscribed_topics(self) -> frozenset[str] | None:
        """Topics the members subscribe to; None when unknown (not the consumer protocol, or unparsable)."""
        if self.protocol_type != PROTOCOL_TYPE:
            return None
        if not self.members:
            return frozenset()
        if self.protocol_name is None:
            return None
        topics: set[str] = set()
        try:
            for member in self.members.values():
                topics.update(subscribed_topics(member.metadata(self.protocol_name)))
        except (MalformedSubscription, ValueError):
            return None
        return frozenset(topics)

    def is_subscribed_to_topic(self, topic: str) -> bool:
        if self.subscribed_topics is not None:
            return topic in self.subscribed_topics
        return self.uses_consumer_protocol()

    # -- rebalance -------------------------------------------------------------------------------
    def init_next_generation(self, now_ms: int) -> None:
        self.generation_id += 1
        if self.members:
            self.protocol_name = self.select_protocol()
            self.subscribed_topics = self.compute_subscribed_topics()
            self.transition_to(GroupState.COMPLETING_REBALANCE, now_ms)
        else:
            self.protocol_name = None
            self.subscribed_topics = self.compute_subscribed_topics()
            self.transition_to(GroupState.EMPTY, now_ms)
        self.pending_sync_members.clear()

    def current_member_metadata(self) -> tuple[JoinedMember, ...]:
        if self.state in (GroupState.DEAD, GroupState.PREPARING_REBALANCE):
            raise RuntimeError(f"no member metadata for group {self.group_id} in state {self.state.value}")
        return tuple(
            JoinedMember(m.member_id, m.group_instance_id, m.metadata(self.protocol_name))
            for m in self.members.values()
        )

    def complete_join(self, member: Member, response: JoinResponse) -> bool:
        """Answer a member's parked JoinGroup; False when it had none."""
        if not member.is_awaiting_join:
            return False
        _resolve(member.join_future, response)
        member.join_future = None
        self.num_awaiting_join -= 1
        return True

    def complete_sync(self, member: Member, response: SyncResponse) -> bool:
        """Answer a member's parked SyncGroup; False when it had none."""
        if not member.is_awaiting_sync:
            return False
        _resolve(member.sync_future, response)
        member.sync_future = None
        return True
