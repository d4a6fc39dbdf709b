"""ListOffsets (2): earliest, latest, max timestamp and offset-for-timestamp, answered by
``partitions`` for any kind of partition. A consumer's lookup (replica id -1) is bounded by its
isolation level (v2+; READ_UNCOMMITTED before): latest is the high watermark, READ_COMMITTED the
last stable offset, and no answer lies at or past it; a replica's (or a debugging tool's, -2)
reads to the log end, as Kafka's ``KafkaApis.handleListOffsetRequest`` decides."""

from __future__ import annotations

import datetime
from typing import Any

from shoal.partitions.api import IsolationLevel
from shoal.protocol.apis import RequestHeader, response_class
from shoal.protocol.build import make, nested
from shoal.server.context import ServerContext

_ZERO = datetime.timedelta(0)
#: ListOffsetsRequest.CONSUMER_REPLICA_ID: the only requester Kafka bounds by an isolation level.
_CONSUMER = -1


async def handle_list_offsets(ctx: ServerContext, header: RequestHeader, request: Any) -> Any:
    cls = response_class(header.api_key, header.api_version)
    topic_cls, partition_cls = nested(cls, "ListOffsetsTopicResponse"), nested(cls, "ListOffsetsPartitionResponse")
    lookups = [(t.name, p.partition_index, p.timestamp) for t in request.topics for p in t.partitions]
    epochs = [int(getattr(p, "current_leader_epoch", -1)) for t in request.topics for p in t.partitions]
    isolation = (
        IsolationLevel.of(int(getattr(request, "isolation_level", 0)))
        if int(getattr(request, "replica_id", _CONSUMER)) == _CONSUMER
        else None
    )
    outcomes = iter(await ctx.partitions.list_offsets(lookups, epochs, isolation))
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
