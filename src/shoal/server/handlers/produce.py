"""Produce (API 0): decode the request, hand every partition's records to ``partitions`` (which
validates and appends them to whatever kind of partition it is), encode the answers."""

from __future__ import annotations

import datetime
from typing import Any

from shoal.partitions.api import AppendRequest, ProduceOptions
from shoal.protocol.apis import RequestHeader, response_class
from shoal.protocol.build import make, nested
from shoal.server.context import ServerContext
from shoal.server.handlers.leader_hints import LeaderHints

_ZERO = datetime.timedelta(0)


async def handle_produce(ctx: ServerContext, header: RequestHeader, request: Any) -> Any | None:
    requests = [
        AppendRequest(topic_data.name, partition_data.index, partition_data.records)
        for topic_data in request.topic_data
        for partition_data in topic_data.partition_data
    ]
    options = ProduceOptions(
        request.acks, header.api_version, request.transactional_id, header.client_id,
        timeout_ms=int(request.timeout.total_seconds() * 1000),
    )
    outcomes = iter(await ctx.partitions.append(requests, options))
    if request.acks == 0:
        return None
    cls = response_class(header.api_key, header.api_version)
    partition_cls = nested(cls, "PartitionProduceResponse")
    topic_cls = nested(cls, "TopicProduceResponse")
    record_error_cls = nested(cls, "BatchIndexAndErrorMessage")
    hints = LeaderHints(ctx.image, cls)
    responses = []
    for topic_data in request.topic_data:
        partitions = []
        for partition_data in topic_data.partition_data:
            r = next(outcomes)
            partitions.append(
                make(
                    partition_cls,
                    index=partition_data.index,
                    error_code=r.error,
                    base_offset=r.base_offset,
                    log_append_time=(
                        datetime.datetime.fromtimestamp(r.log_append_time / 1000, datetime.UTC)
                        if r.log_append_time >= 0
                        else None
                    ),
                    log_start_offset=r.log_start_offset,
                    record_errors=tuple(
                        record_error_cls(batch_index=index, batch_index_error_message=message)
                        for index, message in r.record_errors
                    ) if record_error_cls is not None else (),
                    error_message=r.message,
                    **hints.current_leader(topic_data.name, partition_data.index, r.error),
                )
            )
        responses.append(make(topic_cls, name=topic_data.name, partition_responses=tuple(partitions)))
    return make(cls, throttle_time=_ZERO, node_endpoints=hints.node_endpoints(), responses=tuple(responses))
