"""OffsetForLeaderEpoch (23, v2-4): where a leader epoch ends in a partition's log.

Consumers ask it to validate their position after a leader change (KIP-320: a position past
the end of its epoch means the log was truncated under them); followers will ask it before
fetching (KIP-101/279). ``partitions`` answers for every kind.
"""

from __future__ import annotations

import datetime
from typing import Any

from shoal.protocol.apis import RequestHeader, response_class
from shoal.protocol.build import make, nested
from shoal.server.context import ServerContext

_ZERO = datetime.timedelta(0)


async def handle_offset_for_leader_epoch(ctx: ServerContext, header: RequestHeader, request: Any) -> Any:
    cls = response_class(header.api_key, header.api_version)
    topic_cls, partition_cls = nested(cls, "OffsetForLeaderTopicResult"), nested(cls, "EpochEndOffset")
    lookups = [
        (t.topic, p.partition, p.current_leader_epoch, p.leader_epoch) for t in request.topics for p in t.partitions
    ]
    outcomes = iter(await ctx.partitions.end_offsets_for_epochs(lookups))
    topics = []
    for t in request.topics:
        partitions = []
        for p in t.partitions:
            found = next(outcomes)
            partitions.append(
                make(partition_cls, error_code=found.error, partition=p.partition,
                     leader_epoch=found.leader_epoch, end_offset=found.end_offset)
            )
        topics.append(make(topic_cls, topic=t.topic, partitions=tuple(partitions)))
    return make(cls, throttle_time=_ZERO, topics=tuple(topics))
