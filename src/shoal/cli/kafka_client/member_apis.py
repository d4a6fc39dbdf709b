"""Membership of a classic consumer group: JoinGroup, SyncGroup, Heartbeat, LeaveGroup.

Each call goes to the group's coordinator and follows it when it moves (as GroupApis does);
the answers that steer a member (MEMBER_ID_REQUIRED, REBALANCE_IN_PROGRESS, UNKNOWN_MEMBER_ID,
ILLEGAL_GENERATION...) are returned to the caller, the consumer, which decides what to do.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from shoal.cli.kafka_client.cluster import Node
from shoal.cli.kafka_client.connection import Api, BrokerConnection
from shoal.cli.kafka_client.group_apis import GroupApis, check_coordinator_error
from shoal.protocol.apis import request_class
from shoal.protocol.build import make, nested
from shoal.protocol.errors import ErrorCode


@dataclass(frozen=True, slots=True)
class JoinAnswer:
    error: ErrorCode
    generation: int
    protocol: str | None
    leader: str
    member_id: str
    members: tuple[tuple[str, bytes], ...]  # (member id, subscription metadata); only the leader gets them


class MemberApis(GroupApis):
    """The group membership calls of KafkaClient."""

    def join_group(
        self,
        group_id: str,
        member_id: str,
        protocol_type: str,
        protocols: Sequence[tuple[str, bytes]],
        *,
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
    ) -> JoinAnswer:
        """JoinGroup; the coordinator may hold it until every member has joined (rebalance timeout)."""

        def call(conn: BrokerConnection, node: Node) -> JoinAnswer:
            version = conn.version(Api.JOIN_GROUP)
            cls = request_class(Api.JOIN_GROUP, version)
            protocol_cls = nested(cls, "JoinGroupRequestProtocol")
            request = make(
                cls,
                group_id=group_id,
                session_timeout=datetime.timedelta(milliseconds=session_timeout_ms),
                rebalance_timeout=datetime.timedelta(milliseconds=rebalance_timeout_ms),
                member_id=member_id,
                group_instance_id=None,
                protocol_type=protocol_type,
                protocols=tuple(make(protocol_cls, name=name, metadata=meta) for name, meta in protocols),
                reason=None,
            )
            response = conn.request(
                Api.JOIN_GROUP, version, request, timeout=self.timeout + rebalance_timeout_ms / 1000
            )
            check_coordinator_error(response.error_code)
            return JoinAnswer(
                response.error_code,
                int(response.generation_id),
                getattr(response, "protocol_name", None),
                response.leader,
                response.member_id,
                tuple((m.member_id, bytes(m.metadata)) for m in response.members),
            )

        return self._with_coordinator(group_id, f"JoinGroup for group '{group_id}'", call)

    def sync_group(
        self,
        group_id: str,
        generation: int,
        member_id: str,
        protocol_type: str,
        protocol: str | None,
        assignments: Mapping[str, bytes],
        *,
        rebalance_timeout_ms: int,
    ) -> tuple[ErrorCode, bytes]:
        """SyncGroup: the leader sends every member's assignment, each member gets its own."""

        def call(conn: BrokerConnection, node: Node) -> tuple[ErrorCode, bytes]:
            version = conn.version(Api.SYNC_GROUP)
            cls = request_class(Api.SYNC_GROUP, version)
            assignment_cls = nested(cls, "SyncGroupRequestAssignment")
            request = make(
                cls,
                group_id=group_id,
                generation_id=generation,
                member_id=member_id,
                group_instance_id=None,
                protocol_type=protocol_type,
                protocol_name=protocol,
                assignments=tuple(make(assignment_cls, member_id=m, assignment=a) for m, a in assignments.items()),
            )
            response = conn.request(
                Api.SYNC_GROUP, version, request, timeout=self.timeout + rebalance_timeout_ms / 1000
            )
            check_coordinator_error(response.error_code)
            return response.error_code, bytes(response.assignment)

        return self._with_coordinator(group_id, f"SyncGroup for group '{group_id}'", call)

    def heartbeat(self, group_id: str, generation: int, member_id: str) -> ErrorCode:
        def call(conn: BrokerConnection, node: Node) -> ErrorCode:
            version = conn.version(Api.HEARTBEAT)
            request = make(
                request_class(Api.HEARTBEAT, version),
                group_id=group_id,
                generation_id=generation,
                member_id=member_id,
                group_instance_id=None,
            )
            response = conn.request(Api.HEARTBEAT, version, request)
            check_coordinator_error(response.error_code)
            return ErrorCode(response.error_code)

        return self._with_coordinator(group_id, f"Heartbeat for group '{group_id}'", call)

    def leave_group(self, group_id: str, member_id: str) -> ErrorCode:
        def call(conn: BrokerConnection, node: Node) -> ErrorCode:
            version = conn.version(Api.LEAVE_GROUP)
            cls = request_class(Api.LEAVE_GROUP, version)
            if version >= 3:
                identity = make(nested(cls, "MemberIdentity"), member_id=member_id, group_instance_id=None,
                                reason="the consumer is being closed")
                request = make(cls, group_id=group_id, members=(identity,))
            else:
                request = make(cls, group_id=group_id, member_id=member_id)
            response = conn.request(Api.LEAVE_GROUP, version, request)
            check_coordinator_error(response.error_code)
            return ErrorCode(response.error_code)

        return self._with_coordinator(group_id, f"LeaveGroup for group '{group_id}'", call)
