"""DeleteRecords (21): move log start offsets forward, through ``partitions`` for any kind."""

from __future__ import annotations

import datetime
from typing import Any

from shoal.protocol.apis import RequestHeader, response_class
from shoal.protocol.build import make, nested
from shoal.server.context import ServerContext

_ZERO = datetime.timedelta(0)


async def handle_delete_records(ctx: ServerContext, header: RequestHeader, request: Any) -> Any:
    cls = response_class(header.api_key, header.api_version)
    topic_cls, partition_cls = nested(cls, "DeleteRecordsTopicResult"), nested(cls, "DeleteRecordsPartitionResult")
    deletes = [(t.name, p.partition_index, p.offset) for t in request.topics for p in t.partitions]
    outcomes = iter(await ctx.partitions.delete_records(deletes))
    topics = []
    for t in request.topics:
        partitions = []
        for p in t.partitions:
            done = next(outcomes)
            partitions.append(make(partition_cls, partition_index=p.partition_index, low_watermark=done.low_watermark,
                                   error_code=done.error))
        topics.append(make(topic_cls, name=t.name, partitions=tuple(partitions)))
    return make(cls, throttle_time=_ZERO, topics=tuple(topics))
