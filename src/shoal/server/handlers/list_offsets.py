"""ListOffsets (2): earliest, latest, max timestamp and offset-for-timestamp, from the coordinator
(diskless) or the log's indexes (classic)."""

from __future__ import annotations

import asyncio
import datetime
import logging
from typing import Any

from shoal.coordinator.api import ListOffsetsRequest, ListOffsetsResponse
from shoal.diskless.read import exact_timestamp_offset
from shoal.protocol.apis import RequestHeader, response_class
from shoal.protocol.build import make, nested
from shoal.protocol.errors import ErrorCode, KafkaError
from shoal.server.context import ServerContext

log = logging.getLogger(__name__)

_ZERO = datetime.timedelta(0)


async def handle_list_offsets(ctx: ServerContext, header: RequestHeader, request: Any) -> Any:
    cls = response_class(header.api_key, header.api_version)
    topic_cls, partition_cls = nested(cls, "ListOffsetsTopicResponse"), nested(cls, "ListOffsetsPartitionResponse")
    image = ctx.image
    lookups: list[ListOffsetsRequest] = []
    # topic -> (partition, index into lookups | None | a classic answer's fields)
    plan: list[tuple[str, list[tuple[int, int | dict | None]]]] = []
    for t in request.topics:
        topic = image.topic(t.name)
        entries: list[tuple[int, int | dict | None]] = []
        for p in t.partitions:
            if topic is None or p.partition_index not in topic.partitions:
                entries.append((p.partition_index, None))
            elif not topic.is_diskless:
                entries.append((p.partition_index, _classic(ctx, t.name, p.partition_index, p.timestamp)))
            else:
                entries.append((p.partition_index, len(lookups)))
                lookups.append(ListOffsetsRequest(ctx.partition_key(topic, p.partition_index), p.timestamp))
        plan.append((t.name, entries))
    try:
        answers = await ctx.run_blocking(ctx.coordinator.list_offsets, lookups) if lookups else []
    except Exception as exc:  # coordinator unreachable: retriable, keep the connection
        log.warning("ListOffsets on the Batch Coordinator failed: %s: %s", type(exc).__name__, exc)
        answers = [ListOffsetsResponse(ErrorCode.kafka_storage_error, lookup.topic_id_partition, -1, -1)
                   for lookup in lookups]
    refined = await asyncio.gather(
        *(
            exact_timestamp_offset(ctx.reader, lookup.topic_id_partition, answer.offset, lookup.timestamp)
            if answer.errors == ErrorCode.none and answer.offset >= 0 and (lookup.timestamp >= 0 or lookup.timestamp == -3)
            else _none()
            for lookup, answer in zip(lookups, answers, strict=True)
        ),
        return_exceptions=True,  # a failed read falls back to the batch-level answer
    )
    topics = []
    for name, entries in plan:
        partitions = []
        for partition, index in entries:
            if index is None:
                fields = {"error_code": ErrorCode.unknown_topic_or_partition, "timestamp": -1, "offset": -1}
            elif isinstance(index, dict):
                fields = index
            else:
                answer, exact = answers[index], refined[index]
                if isinstance(exact, BaseException):
                    exact = None
                offset, timestamp = exact if exact is not None else (answer.offset, answer.timestamp)
                fields = {"error_code": answer.errors, "timestamp": timestamp, "offset": offset}
            partitions.append(make(partition_cls, partition_index=partition, leader_epoch=0,
                                   old_style_offsets=(), **fields))
        topics.append(make(topic_cls, name=name, partitions=tuple(partitions)))
    return make(cls, throttle_time=_ZERO, topics=tuple(topics))


async def _none() -> None:
    return None


def _classic(ctx: ServerContext, topic: str, partition: int, timestamp: int) -> dict:
    """A classic partition's answer, from its log's indexes."""
    try:
        found = ctx.replicas.list_offset(topic, partition, timestamp)
    except KafkaError as exc:
        return {"error_code": exc.code, "timestamp": -1, "offset": -1}
    if found is None:
        return {"error_code": ErrorCode.none, "timestamp": -1, "offset": -1}
    return {"error_code": ErrorCode.none, "timestamp": found.timestamp, "offset": found.offset}
