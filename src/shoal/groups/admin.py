"""DescribeGroups, ListGroups and DeleteGroups: the admin client's view of the groups."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass

from shoal.groups.group import GroupState
from shoal.groups.state import STORE_FAILURE, CoordinatorState
from shoal.groups.writer import StoreWriteError
from shoal.protocol.errors import ErrorCode
from shoal.store.groups import DeleteGroup

log = logging.getLogger(__name__)

GROUP_TYPE_CLASSIC = "classic"


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


class GroupAdmin:
    def __init__(self, state: CoordinatorState) -> None:
        self._state = state

    # -- DescribeGroups / ListGroups ---------------------------------------------------------------
    def describe_group(self, group_id: str) -> tuple[ErrorCode, GroupDescription | None]:
        """(error, description); (NONE, None) for a group that does not exist (Kafka shows it Dead)."""
        unavailable = self._state.unavailable(group_id)
        if unavailable is not None:
            return unavailable, None
        group = self._state.groups.get(group_id)
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
        """Groups in any of ``states`` (case-insensitive; empty: all) of any of ``types`` (only "classic" exists).

        Only the groups this broker coordinates: ListGroups goes to every broker and the admin client
        merges the answers. While groups it just took over are loading, the answer is
        COORDINATOR_LOAD_IN_PROGRESS with the groups it has (Kafka's GroupCoordinator.handleListGroups),
        and the admin client asks again.
        """
        if not self._state.active:
            return ErrorCode.coordinator_not_available, []
        error = ErrorCode.none if self._state.loading is None else ErrorCode.coordinator_load_in_progress
        wanted_states = {s.lower() for s in states}
        wanted_types = {t.lower() for t in types}
        if wanted_types and GROUP_TYPE_CLASSIC not in wanted_types:
            return error, []
        owns = self._state.owns
        return error, [
            ListedGroup(group.group_id, group.protocol_type or "", group.state.value)
            for group in self._state.groups.values()
            if owns(group.group_id) and (not wanted_states or group.state.value.lower() in wanted_states)
        ]

    # -- DeleteGroups ------------------------------------------------------------------------------
    async def delete_groups(self, group_ids: Iterable[str]) -> dict[str, ErrorCode]:
        """Delete empty groups with their offsets: GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP or NONE each."""
        results: dict[str, ErrorCode] = {}
        deleted: list[str] = []
        for group_id in group_ids:
            if group_id in results:
                continue
            unavailable = self._state.unavailable(group_id)
            if unavailable is not None:
                results[group_id] = unavailable
                continue
            group = self._state.groups.get(group_id)
            if group is None or group.is_in(GroupState.DEAD):
                results[group_id] = ErrorCode.group_id_not_found
            elif not group.is_in(GroupState.EMPTY):
                results[group_id] = ErrorCode.non_empty_group
            else:
                self._state.forget_group(group)
                deleted.append(group_id)
                results[group_id] = ErrorCode.none
        if deleted:
            try:
                await self._state.writer.submit([DeleteGroup(gid) for gid in deleted])
            except StoreWriteError:
                for gid in deleted:
                    results[gid] = STORE_FAILURE
            else:
                log.info("deleted groups %s", ", ".join(deleted))
        return results
