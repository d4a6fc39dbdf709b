"""ListOffsets (2): earliest, latest, max timestamp and offset-for-timestamp, answered by
``partitions`` for any kind of partition."""

from __future__ import annotations

import datetime
from typing import Any

from shoal.protocol.apis import RequestHeader, response_class
from shoal.protocol.build import make, nested
from shoal.server.context import ServerContext

_ZERO = datetime.timedelta(0)


async def handle_list_offsets(ctx: ServerContext, header: RequestHeader, request: Any) -> Any:
    cls = response_class(header.api_key, header.api_version)
    topic_cls, partition_cls = nested(cls, "ListOffsetsTopicResponse"), nested(cls, "ListOffsetsPartitionResponse")
    lookups = [(t.name, p.partition_index, p.timestamp) for t in request.topics for p in t.partitions]
    epochs = [int(getattr(p, "current_leader_epoch", -1)) for t in request.topics for p in t.partitions]
    outcomes = iter(await ctx.partitions.list_offsets(lookups, epochs))
    topics = []
    for t in request.topics:
        partitions = []
        for p in t.partitions:
            found = next(outcomes)
            partitions.append(
                make(partition_cls, partition_index=p.partition_index, leader_epoch=found.leader_epoch, old_style_offsets=(),
                     error_code=found.error, timestamp=found.timestamp, offset=found.offset)
            )
        topics.append(make(topic_cls, name=t.name, partitions=tuple(partitions)))
    return make(cls, throttle_time=_ZERO, topics=tuple(topics))
