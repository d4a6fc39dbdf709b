"""Consumer group calls, each sent to the group's coordinator and following it when it moves.

What Kafka's admin tools send: FindCoordinator for the group, DescribeGroups, OffsetFetch,
OffsetCommit as an admin (generation -1, no member id), DeleteGroups; ListGroups on every broker.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from shoal.cli.kafka_client.cluster import Node, TopicPartition
from shoal.cli.kafka_client.connection import Api, BrokerConnection
from shoal.cli.kafka_client.errors import (
    BrokerConnectionError,
    KafkaApiError,
    KafkaClientError,
    RetriableAnswer,
)
from shoal.cli.kafka_client.router import BrokerRouter, T
from shoal.protocol.apis import request_class
from shoal.protocol.build import make, nested
from shoal.protocol.errors import ErrorCode

_COORDINATOR_KEY_GROUP = 0
_COORDINATOR_MOVED = frozenset({ErrorCode.not_coordinator, ErrorCode.coordinator_not_available})
_COORDINATOR_BUSY = frozenset({ErrorCode.coordinator_load_in_progress, ErrorCode.unstable_offset_commit})


def check_coordinator_error(code: ErrorCode, message: str | None = None) -> None:
    if code in _COORDINATOR_MOVED or code in _COORDINATOR_BUSY:
        raise RetriableAnswer(code, message)


@dataclass(frozen=True, slots=True)
class GroupListing:
    group_id: str
    protocol_type: str
    state: str | None  # None when the broker's ListGroups is older than v4


@dataclass(frozen=True, slots=True)
class MemberDescription:
    member_id: str
    group_instance_id: str | None
    client_id: str
    host: str
    metadata: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupDescription:
    group_id: str
    error: ErrorCode
    error_message: str | None
    state: str
    protocol_type: str
    protocol: str
    members: tuple[MemberDescription, ...]
    coordinator: Node


class GroupApis(BrokerRouter):
    """The group operations of KafkaClient."""

    # -- coordinators ------------------------------------------------------------------------------
    def find_coordinator(self, group_id: str, deadline: float | None = None) -> Node:
        """The broker coordinating ``group_id`` (cached until it says it no longer is)."""
        cached = self._coordinators.get(group_id)
        if cached is not None:
            return cached
        node = self._retrying(
            f"FindCoordinator for group '{group_id}'", lambda: self._find_coordinator_once(group_id), deadline
        )
        self._coordinators[group_id] = node
        return node

    def _find_coordinator_once(self, group_id: str) -> Node:
        conn = self.any_connection()
        version = conn.version(Api.FIND_COORDINATOR)
        cls = request_class(Api.FIND_COORDINATOR, version)
        if version >= 4:
            request = make(cls, key_type=_COORDINATOR_KEY_GROUP, coordinator_keys=(group_id,))
            response = conn.request(Api.FIND_COORDINATOR, version, request)
            matches = [c for c in response.coordinators if c.key == group_id]
            if not matches:
                raise KafkaClientError(f"FindCoordinator from {conn.address} did not answer for group '{group_id}'")
            answer = matches[0]
        else:
            request = make(cls, key=group_id, key_type=_COORDINATOR_KEY_GROUP)
            answer = conn.request(Api.FIND_COORDINATOR, version, request)
        code = answer.error_code
        message = getattr(answer, "error_message", None)
        if code in _COORDINATOR_MOVED or code in _COORDINATOR_BUSY:
            raise RetriableAnswer(code, message)
        if code != ErrorCode.none:
            raise KafkaApiError(code, message, context=f"FindCoordinator for group '{group_id}'")
        return Node(int(answer.node_id), answer.host, int(answer.port))

    def _with_coordinator(self, group_id: str, what: str, call: Callable[[BrokerConnection, Node], T]) -> T:
        """Run ``call`` against the group's coordinator, following it when it moves."""
        deadline = self._deadline()
        while True:
            try:
                node = self.find_coordinator(group_id, deadline)
                return call(self.connection(node.host, node.port), node)
            except (RetriableAnswer, BrokerConnectionError) as exc:
                if not isinstance(exc, RetriableAnswer) or exc.code in _COORDINATOR_MOVED:
                    self._coordinators.pop(group_id, None)
                self._backoff(deadline, what, exc)

    # -- groups ------------------------------------------------------------------------------------
    def list_groups(self, states: Sequence[str] = ()) -> list[GroupListing]:
        """ListGroups on every broker (each knows only the groups it coordinates), merged."""
        brokers = self.metadata([]).brokers
        found: dict[str, GroupListing] = {}
        for node in sorted(brokers.values(), key=lambda n: n.node_id):
            what = f"ListGroups on broker {node.node_id} ({node.address})"
            listings = self._retrying(what, lambda node=node, what=what: self._list_groups_once(node, states, what))
            for listing in listings:
                found.setdefault(listing.group_id, listing)
        return list(found.values())

    def _list_groups_once(self, node: Node, states: Sequence[str], what: str) -> list[GroupListing]:
        conn = self.connection(node.host, node.port)
        version = conn.version(Api.LIST_GROUPS)
        request = make(request_class(Api.LIST_GROUPS, version), states_filter=tuple(states), types_filter=())
        response = conn.request(Api.LIST_GROUPS, version, request)
        if response.error_code in _COORDINATOR_BUSY or response.error_code in _COORDINATOR_MOVED:
            raise RetriableAnswer(response.error_code)
        if response.error_code != ErrorCode.none:
            raise KafkaApiError(response.error_code, context=what)
        return [GroupListing(g.group_id, g.protocol_type, getattr(g, "group_state", None)) for g in response.groups]

    def describe_group(self, group_id: str) -> GroupDescription:
        """DescribeGroups at the coordinator; a missing group comes back as state Dead or GROUP_ID_NOT_FOUND."""

        def call(conn: BrokerConnection, node: Node) -> GroupDescription:
            version = conn.version(Api.DESCRIBE_GROUPS)
            request = make(
                request_class(Api.DESCRIBE_GROUPS, version), groups=(group_id,), include_authorized_operations=False
            )
            response = conn.request(Api.DESCRIBE_GROUPS, version, request)
            matches = [g for g in response.groups if g.group_id == group_id]
            if not matches:
                raise KafkaClientError(f"DescribeGroups from {conn.address} did not answer for group '{group_id}'")
            g = matches[0]
            message = getattr(g, "error_message", None)
            check_coordinator_error(g.error_code, message)
            members = tuple(
                MemberDescription(
                    member_id=m.member_id,
                    group_instance_id=getattr(m, "group_instance_id", None),
                    client_id=m.client_id,
                    host=m.client_host,
                    metadata=bytes(m.member_metadata),
                    assignment=bytes(m.member_assignment),
                )
                for m in g.members
            )
            return GroupDescription(
                group_id=g.group_id,
                error=g.error_code,
                error_message=message,
                state=g.group_state,
                protocol_type=g.protocol_type,
                protocol=g.protocol_data,
                members=members,
                coordinator=node,
            )

        return self._with_coordinator(group_id, f"DescribeGroups for group '{group_id}'", call)

    def fetch_offsets(self, group_id: str) -> dict[TopicPartition, int]:
        """The group's committed offsets (OffsetFetch for all topics); partitions without one are left out."""
        what = f"OffsetFetch for group '{group_id}'"

        def call(conn: BrokerConnection, node: Node) -> dict[TopicPartition, int]:
            version = conn.version(Api.OFFSET_FETCH)
            cls = request_class(Api.OFFSET_FETCH, version)
            if version >= 8:
                group = make(nested(cls, "OffsetFetchRequestGroup"), group_id=group_id, member_id=None,
                             member_epoch=-1, topics=None)
                request = make(cls, groups=(group,), require_stable=False)
            else:
                request = make(cls, group_id=group_id, topics=None, require_stable=False)
            response = conn.request(Api.OFFSET_FETCH, version, request)
            if version >= 8:
                matches = [g for g in response.groups if g.group_id == group_id]
                if not matches:
                    raise KafkaClientError(f"OffsetFetch from {conn.address} did not answer for group '{group_id}'")
                group_error, topics = matches[0].error_code, matches[0].topics
            else:
                group_error, topics = getattr(response, "error_code", ErrorCode.none), response.topics
            check_coordinator_error(group_error)
            if group_error == ErrorCode.group_id_not_found:
                return {}
            if group_error != ErrorCode.none:
                raise KafkaApiError(group_error, context=what)
            offsets: dict[TopicPartition, int] = {}
            for t in topics:
                for p in t.partitions:
                    check_coordinator_error(p.error_code)
                    if p.error_code == ErrorCode.unknown_topic_or_partition:
                        continue
                    if p.error_code != ErrorCode.none:
                        raise KafkaApiError(p.error_code, context=f"{what}, {t.name}-{p.partition_index}")
                    if p.committed_offset >= 0:
                        offsets[TopicPartition(t.name, int(p.partition_index))] = int(p.committed_offset)
            return offsets

        return self._with_coordinator(group_id, what, call)

    def commit_offsets(
        self, group_id: str, offsets: Mapping[TopicPartition, int], *, generation: int = -1, member_id: str = ""
    ) -> dict[TopicPartition, ErrorCode]:
        """OffsetCommit; returns each partition's error code.

        Without a generation and member id it commits as an admin does, which the coordinator only
        accepts for a group without active members; a group member passes its own."""
        by_topic: dict[str, list[tuple[int, int]]] = {}
        for tp, offset in sorted(offsets.items()):
            by_topic.setdefault(tp.topic, []).append((tp.partition, offset))

        def call(conn: BrokerConnection, node: Node) -> dict[TopicPartition, ErrorCode]:
            version = conn.version(Api.OFFSET_COMMIT)
            cls = request_class(Api.OFFSET_COMMIT, version)
            topic_cls, partition_cls = nested(cls, "OffsetCommitRequestTopic"), nested(cls, "OffsetCommitRequestPartition")
            topics = tuple(
                make(
                    topic_cls,
                    name=topic,
                    partitions=tuple(
                        make(partition_cls, partition_index=p, committed_offset=o, committed_leader_epoch=-1,
                             committed_metadata="")
                        for p, o in parts
                    ),
                )
                for topic, parts in by_topic.items()
            )
            request = make(cls, group_id=group_id, generation_id_or_member_epoch=generation, member_id=member_id,
                           group_instance_id=None, topics=topics)
            response = conn.request(Api.OFFSET_COMMIT, version, request)
            results = {
                TopicPartition(t.name, int(p.partition_index)): p.error_code for t in response.topics for p in t.partitions
            }
            for code in results.values():
                check_coordinator_error(code)
            return results

        return self._with_coordinator(group_id, f"OffsetCommit for group '{group_id}'", call)

    def delete_group(self, group_id: str) -> ErrorCode:
        """DeleteGroups for one group at its coordinator; returns the group's error code."""

        def call(conn: BrokerConnection, node: Node) -> ErrorCode:
            version = conn.version(Api.DELETE_GROUPS)
            request = make(request_class(Api.DELETE_GROUPS, version), groups_names=(group_id,))
            response = conn.request(Api.DELETE_GROUPS, version, request)
            matches = [r for r in response.results if r.group_id == group_id]
            if not matches:
                raise KafkaClientError(f"DeleteGroups from {conn.address} did not answer for group '{group_id}'")
            check_coordinator_error(matches[0].error_code)
            return ErrorCode(matches[0].error_code)

        self._coordinators.pop(group_id, None)  # a deleted group may come back elsewhere
        try:
            return self._with_coordinator(group_id, f"DeleteGroups for group '{group_id}'", call)
        finally:
            self._coordinators.pop(group_id, None)
