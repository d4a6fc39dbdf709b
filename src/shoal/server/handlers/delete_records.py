"""DeleteRecords (21): move log start offsets, through the Batch Coordinator (diskless) or the log (classic)."""

from __future__ import annotations

import datetime
import logging
from typing import Any

from shoal.coordinator.api import DeleteRecordsRequest
from shoal.protocol.apis import RequestHeader, response_class
from shoal.protocol.build import make, nested
from shoal.protocol.errors import ErrorCode, KafkaError
from shoal.server.context import ServerContext

log = logging.getLogger(__name__)

_ZERO = datetime.timedelta(0)


async def handle_delete_records(ctx: ServerContext, header: RequestHeader, request: Any) -> Any:
    cls = response_class(header.api_key, header.api_version)
    topic_cls, partition_cls = nested(cls, "DeleteRecordsTopicResult"), nested(cls, "DeleteRecordsPartitionResult")
    image = ctx.image
    wanted: list[DeleteRecordsRequest] = []
    plan: list[tuple[str, list[tuple[int, int | tuple[ErrorCode, int] | None]]]] = []
    for t in request.topics:
        topic = image.topic(t.name)
        entries: list[tuple[int, int | tuple[ErrorCode, int] | None]] = []
        for p in t.partitions:
            if topic is None or p.partition_index not in topic.partitions:
                entries.append((p.partition_index, None))
            elif not topic.is_diskless:
                entries.append((p.partition_index, await _classic(ctx, t.name, p.partition_index, p.offset)))
            else:
                entries.append((p.partition_index, len(wanted)))
                wanted.append(DeleteRecordsRequest(ctx.partition_key(topic, p.partition_index), p.offset))
        plan.append((t.name, entries))
    answers = await ctx.run_blocking(ctx.coordinator.delete_records, wanted) if wanted else []
    topics = []
    for name, entries in plan:
        partitions = []
        for partition, index in entries:
            if index is None:
                error, low = ErrorCode.unknown_topic_or_partition, -1
            elif isinstance(index, tuple):
                error, low = index
            else:
                error, low = answers[index].errors, answers[index].low_watermark
                log.info("DeleteRecords %s-%d up to %d from %s: %s, log start offset now %d",
                         name, partition, wanted[index].offset, header.client_id, error.name, low)
            partitions.append(make(partition_cls, partition_index=partition, low_watermark=low, error_code=error))
        topics.append(make(topic_cls, name=name, partitions=tuple(partitions)))
    return make(cls, throttle_time=_ZERO, topics=tuple(topics))


async def _classic(ctx: ServerContext, topic: str, partition: int, offset: int) -> tuple[ErrorCode, int]:
    try:
        low = await ctx.replicas.delete_records(topic, partition, offset)
    except KafkaError as exc:
        return exc.code, -1
    log.info("DeleteRecords %s-%d up to %d: log start offset now %d", topic, partition, offset, low)
    return ErrorCode.none, low
