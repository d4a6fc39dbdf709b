"""The classic group protocol: JoinGroup (11), SyncGroup (14), Heartbeat (12), LeaveGroup (13),
OffsetCommit (8), OffsetFetch (9), DescribeGroups (15), ListGroups (16), DeleteGroups (42) and
OffsetDelete (47).

These translate between each API version's wire shape and the group coordinator
(``shoal.groups.coordinator``), which holds all the rules. What Kafka checks in its
request layer rather than in the coordinator is checked here: topics and partitions of
OffsetCommit/OffsetDelete must exist (UNKNOWN_TOPIC_OR_PARTITION, or UNKNOWN_TOPIC_ID
for the topic-id versions), and version-dependent defaults (JoinGroup v0 has no
rebalance timeout, v4+ requires a member id, LeaveGroup v0-2 names one member). The partition
checks of OffsetCommit are shared with TxnOffsetCommit (``offset_commit_entries.py``).
"""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Sequence
from typing import Any

from shoal.metadata.image import TopicImage
from shoal.protocol.apis import RequestHeader, response_class
from shoal.protocol.build import make, nested
from shoal.protocol.errors import ErrorCode
from shoal.server.context import ServerContext
from shoal.server.handlers.offset_commit_entries import CommitPartitions

_ZERO = datetime.timedelta(0)
_MS = datetime.timedelta(milliseconds=1)
UNKNOWN_AUTHORIZED_OPERATIONS = -(2**31)


def _ms(value: datetime.timedelta) -> int:
    return value // _MS


# -- membership -----------------------------------------------------------------------------------


async def handle_join_group(ctx: ServerContext, header: RequestHeader, request: Any) -> Any:
    cls = response_class(header.api_key, header.api_version)
    version = header.api_version
    session_timeout_ms = _ms(request.session_timeout)
    result = await ctx.groups.join_group(
        group_id=request.group_id,
        member_id=request.member_id,
        group_instance_id=getattr(request, "group_instance_id", None),
        client_id=header.client_id or "",
        client_host=header.client_host,
        session_timeout_ms=session_timeout_ms,
        # v0 has no rebalance timeout: Kafka uses the session timeout for both.
        rebalance_timeout_ms=_ms(request.rebalance_timeout) if version >= 1 else session_timeout_ms,
        protocol_type=request.protocol_type,
        protocols=tuple((p.name, p.metadata) for p in request.protocols),
        require_known_member_id=version >= 4,
        supports_skip_assignment=version >= 9,
        reason=getattr(request, "reason", None),
    )
    member_cls = nested(cls, "JoinGroupResponseMember")
    return make(
        cls,
        throttle_time=_ZERO,
        error_code=result.error,
        generation_id=result.generation_id,
        protocol_type=result.protocol_type,
        # Nullable from v7; older versions say "" for "no protocol".
        protocol_name=result.protocol_name if version >= 7 else (result.protocol_name or ""),
        leader=result.leader,
        skip_assignment=result.skip_assignment,
        member_id=result.member_id,
        members=tuple(
            make(member_cls, member_id=m.member_id, group_instance_id=m.group_instance_id, metadata=m.metadata)
            for m in result.members
        ),
    )


async def handle_sync_group(ctx: ServerContext, header: RequestHeader, request: Any) -> Any:
    cls = response_class(header.api_key, header.api_version)
    result = await ctx.groups.sync_group(
        group_id=request.group_id,
        generation_id=request.generation_id,
        member_id=request.member_id,
        group_instance_id=getattr(request, "group_instance_id", None),
        protocol_type=getattr(request, "protocol_type", None),
        protocol_name=getattr(request, "protocol_name", None),
        assignments=tuple((a.member_id, a.assignment) for a in request.assignments),
    )
    return make(
        cls,
        throttle_time=_ZERO,
        error_code=result.error,
        protocol_type=result.protocol_type,
        protocol_name=result.protocol_name,
        assignment=result.assignment,
    )


async def handle_heartbeat(ctx: ServerContext, header: RequestHeader, request: Any) -> Any:
    cls = response_class(header.api_key, header.api_version)
    error = ctx.groups.heartbeat(
        group_id=request.group_id,
        generation_id=request.generation_id,
        member_id=request.member_id,
        group_instance_id=getattr(request, "group_instance_id", None),
    )
    return make(cls, throttle_time=_ZERO, error_code=error)


async def handle_leave_group(ctx: ServerContext, header: RequestHeader, request: Any) -> Any:
    cls = response_class(header.api_key, header.api_version)
    if header.api_version >= 3:
        members = [(m.member_id, m.group_instance_id, getattr(m, "reason", None)) for m in request.members]
    else:
        members = [(request.member_id, None, None)]
    result = ctx.groups.leave_group(group_id=request.group_id, members=members)
    if header.api_version < 3:
        # One member: its error is the response's error (Kafka's LeaveGroupResponse for v0-2).
        error = result.error
        if error is ErrorCode.none and result.members:
            error = result.members[0][2]
        return make(cls, throttle_time=_ZERO, error_code=error)
    member_cls = nested(cls, "MemberResponse")
    return make(
        cls,
        throttle_time=_ZERO,
        error_code=result.error,
        members=tuple(
            make(member_cls, member_id=member_id, group_instance_id=instance_id, error_code=error)
            for member_id, instance_id, error in result.members
        ),
    )


# -- offsets --------------------------------------------------------------------------------------


async def handle_offset_commit(ctx: ServerContext, header: RequestHeader, request: Any) -> Any:
    cls = response_class(header.api_key, header.api_version)
    topic_cls, partition_cls = nested(cls, "OffsetCommitResponseTopic"), nested(cls, "OffsetCommitResponsePartition")
    partitions = CommitPartitions(ctx.image, request.topics, by_id=header.api_version >= 10)
    retention = getattr(request, "retention_time", None)
    errors = await ctx.groups.commit_offsets(
        group_id=request.group_id,
        generation_id=request.generation_id_or_member_epoch,
        member_id=request.member_id,
        group_instance_id=getattr(request, "group_instance_id", None),
        entries=partitions.entries,
        retention_ms=-1 if retention is None else _ms(retention),
        api_version=header.api_version,
    )
    partitions.answer(errors)
    return make(cls, throttle_time=_ZERO, topics=partitions.topics(topic_cls, partition_cls))


async def handle_offset_fetch(ctx: ServerContext, header: RequestHeader, request: Any) -> Any:
    cls = response_class(header.api_key, header.api_version)
    version = header.api_version
    # v7+: partitions with a transaction's offset pending answer UNSTABLE_OFFSET_COMMIT (each partition,
    # in every version that has the flag, as Kafka's coordinator answers) until it commits or aborts.
    stable = bool(getattr(request, "require_stable", False))
    if version >= 8:
        group_cls = nested(cls, "OffsetFetchResponseGroup")
        return make(
            cls,
            throttle_time=_ZERO,
            groups=tuple(
                make(group_cls, group_id=g.group_id, **_fetch_group(ctx, version, g.group_id, g.topics, cls, stable))
                for g in request.groups
            ),
        )
    fields = _fetch_group(ctx, version, request.group_id, request.topics, cls, stable)
    return make(cls, throttle_time=_ZERO, **fields)


def _fetch_group(
    ctx: ServerContext, version: int, group_id: str, topics: Any, cls: type, require_stable: bool
) -> dict[str, Any]:
    """``topics`` and ``error_code`` of one group's OffsetFetch answer."""
    suffix = "s" if version >= 8 else ""
    topic_cls = nested(cls, f"OffsetFetchResponseTopic{suffix}")
    partition_cls = nested(cls, f"OffsetFetchResponsePartition{suffix}")
    by_id = version >= 10
    image = ctx.image

    def partition(index: int, offset: int, epoch: int, metadata: str, error: ErrorCode) -> Any:
        return make(
            partition_cls,
            partition_index=index,
            committed_offset=offset,
            committed_leader_epoch=epoch,
            metadata=metadata,
            error_code=error,
        )

    def topic(name: str | None, topic_id: uuid.UUID | None, partitions: Sequence[Any]) -> Any:
        return make(topic_cls, name=name, topic_id=topic_id, partitions=tuple(partitions))

    if topics is None:
        error, fetched = ctx.groups.fetch_offsets(group_id, None, require_stable=require_stable)
        grouped: dict[str, list[Any]] = {}
        for f in fetched:
            grouped.setdefault(f.topic, []).append(partition(f.partition, f.offset, f.leader_epoch, f.metadata, f.error))
        return {
            "error_code": error,
            "topics": tuple(topic(name, _topic_id(image.topic(name)), parts) for name, parts in grouped.items()),
        }

    wanted: list[tuple[str, int]] = []
    answers: list[tuple[str | None, uuid.UUID | None, list[tuple[int, ErrorCode | None]]]] = []
    for t in topics:
        if by_id:
            known = image.topics_by_id.get(t.topic_id)
            name = known.name if known is not None else None
        else:
            name = t.name
        cells: list[tuple[int, ErrorCode | None]] = []
        for index in t.partition_indexes:
            if name is None:
                cells.append((index, ErrorCode.unknown_topic_id))
            else:
                cells.append((index, None))
                wanted.append((name, index))
        answers.append((None if by_id else name, t.topic_id if by_id else None, cells))
    error, fetched = ctx.groups.fetch_offsets(group_id, wanted, require_stable=require_stable)
    if error is not ErrorCode.none:
        if version >= 2:
            return {"error_code": error, "topics": ()}
        # v1 has no group-level error: every partition carries it.
        return {
            "error_code": error,
            "topics": tuple(
                topic(name, topic_id, [partition(i, -1, -1, "", error) for i, _ in cells])
                for name, topic_id, cells in answers
            ),
        }
    results = iter(fetched)
    out = []
    for name, topic_id, cells in answers:
        parts = []
        for index, cell_error in cells:
            if cell_error is not None:
                parts.append(partition(index, -1, -1, "", cell_error))
            else:
                f = next(results)
                parts.append(partition(index, f.offset, f.leader_epoch, f.metadata, f.error))
        out.append(topic(name, topic_id, parts))
    return {"error_code": ErrorCode.none, "topics": tuple(out)}


def _topic_id(topic: TopicImage | None) -> uuid.UUID | None:
    return None if topic is None else topic.topic_id


# -- administration -------------------------------------------------------------------------------


async def handle_describe_groups(ctx: ServerContext, header: RequestHeader, request: Any) -> Any:
    cls = response_class(header.api_key, header.api_version)
    group_cls, member_cls = nested(cls, "DescribedGroup"), nested(cls, "DescribedGroupMember")
    described = []
    for group_id in request.groups:
        error, desc = ctx.groups.describe_group(group_id)
        fields: dict[str, Any] = {
            "group_id": group_id,
            "error_code": error,
            "error_message": None,
            "group_state": "",
            "protocol_type": "",
            "protocol_data": "",
            "members": (),
            "authorized_operations": UNKNOWN_AUTHORIZED_OPERATIONS,
        }
        if error is ErrorCode.none and desc is None:
            fields["group_state"] = "Dead"
            if header.api_version >= 6:
                fields.update(error_code=ErrorCode.group_id_not_found, error_message=f"Group {group_id} not found.")
        elif desc is not None:
            fields.update(
                group_state=desc.state,
                protocol_type=desc.protocol_type,
                protocol_data=desc.protocol_data,
                members=tuple(
                    make(
                        member_cls,
                        member_id=m.member_id,
                        group_instance_id=m.group_instance_id,
                        client_id=m.client_id,
                        client_host=m.client_host,
                        member_metadata=m.metadata,
                        member_assignment=m.assignment,
                    )
                    for m in desc.members
                ),
            )
        described.append(make(group_cls, **fields))
    return make(cls, throttle_time=_ZERO, groups=tuple(described))


async def handle_list_groups(ctx: ServerContext, header: RequestHeader, request: Any) -> Any:
    cls = response_class(header.api_key, header.api_version)
    group_cls = nested(cls, "ListedGroup")
    error, groups = ctx.groups.list_groups(
        getattr(request, "states_filter", ()), getattr(request, "types_filter", ())
    )
    return make(
        cls,
        throttle_time=_ZERO,
        error_code=error,
        groups=tuple(
            make(
                group_cls,
                group_id=g.group_id,
                protocol_type=g.protocol_type,
                group_state=g.state,
                group_type=g.group_type,
            )
            for g in groups
        ),
    )


async def handle_delete_groups(ctx: ServerContext, header: RequestHeader, request: Any) -> Any:
    cls = response_class(header.api_key, header.api_version)
    result_cls = nested(cls, "DeletableGroupResult")
    results = await ctx.groups.delete_groups(request.groups_names)
    return make(
        cls,
        throttle_time=_ZERO,
        results=tuple(make(result_cls, group_id=g, error_code=e) for g, e in results.items()),
    )


async def handle_offset_delete(ctx: ServerContext, header: RequestHeader, request: Any) -> Any:
    cls = response_class(header.api_key, header.api_version)
    topic_cls, partition_cls = nested(cls, "OffsetDeleteResponseTopic"), nested(cls, "OffsetDeleteResponsePartition")
    image = ctx.image
    answers: dict[str, dict[int, ErrorCode]] = {}
    known: list[tuple[str, list[int]]] = []
    for t in request.topics:
        cells = answers.setdefault(t.name, {})
        topic = image.topic(t.name)
        valid = []
        for p in t.partitions:
            if topic is None or p.partition_index not in topic.partitions:
                cells[p.partition_index] = ErrorCode.unknown_topic_or_partition
            else:
                valid.append(p.partition_index)
        if valid:
            known.append((t.name, valid))
    error, results = await ctx.groups.delete_offsets(request.group_id, known)
    for (name, index), partition_error in results.items():
        answers[name][index] = partition_error
    return make(
        cls,
        throttle_time=_ZERO,
        error_code=error,
        topics=tuple(
            make(
                topic_cls,
                name=name,
                partitions=tuple(make(partition_cls, partition_index=i, error_code=e) for i, e in cells.items()),
            )
            for name, cells in answers.items()
            if cells
        ),
    )
