"""A live group to and from the record the group store keeps (Kafka's GroupMetadata value).

A group comes back from the store Stable with its members and generation (each member
must then heartbeat within its session timeout), or Empty when it had no members.
"""

from __future__ import annotations

from shoal.groups.group import ClassicGroup, GroupState, Member
from shoal.store.groups import StoredGroup, StoredMember


def group_from_store(stored: StoredGroup) -> ClassicGroup:
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


def stored_group(group: ClassicGroup, assignment: dict[str, bytes] | None = None) -> StoredGroup:
    """The group as the store keeps it; ``assignment`` (member id -> bytes) replaces the members' current
    assignments, for the leader's SyncGroup that is stored before the members get it."""
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
