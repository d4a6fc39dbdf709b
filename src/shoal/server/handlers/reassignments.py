"""AlterPartitionReassignments (45, v0-1) and ListPartitionReassignments (46, v0): moving replicas
between brokers (KIP-455), decided by ``PartitionControl`` like Kafka's controller.

A reassignment adds the new replicas (classic ones copy the partition from its leader as
followers, diskless ones build their caches from object storage, KIP-1163) and,
once they are all in the ISR, the controller's next round removes the old ones; null replicas
cancel one in progress. Any broker answers, as every broker may decide metadata changes.
"""

from __future__ import annotations

import datetime
from typing import Any

from shoal.cluster.partition_control import reassignments_in_progress
from shoal.protocol.apis import RequestHeader, response_class
from shoal.protocol.build import make, nested
from shoal.protocol.errors import ErrorCode, KafkaError
from shoal.server.context import ServerContext

_ZERO = datetime.timedelta(0)


async def handle_alter_partition_reassignments(ctx: ServerContext, header: RequestHeader, request: Any) -> Any:
    cls = response_class(header.api_key, header.api_version)
    topic_cls, partition_cls = nested(cls, "ReassignableTopicResponse"), nested(cls, "ReassignablePartitionResponse")
    allow_rf_change = bool(getattr(request, "allow_replication_factor_change", True))
    wanted: dict[tuple[str, int], tuple[int, ...] | None] = {}
    refused: dict[tuple[str, int], tuple[ErrorCode, str]] = {}
    image = ctx.image
    for t in request.topics:
        for p in t.partitions:
            key = (t.name, int(p.partition_index))
            replicas = None if p.replicas is None else tuple(int(b) for b in p.replicas)
            topic = image.topic(key[0])
            current = topic.partitions.get(key[1]) if topic is not None else None
            if replicas is not None and current is not None and not allow_rf_change:
                original = [b for b in current.replicas if b not in current.adding_replicas]
                if len(original) != len(replicas):
                    refused[key] = (
                        ErrorCode.invalid_replication_factor,
                        f"The replication factor is changed from {len(original)} to {len(replicas)} but "
                        "allowReplicationFactorChange is false",
                    )
                    continue
            wanted[key] = replicas
    error, message = ErrorCode.none, None
    outcome: dict[tuple[str, int], tuple[ErrorCode, str | None]] = {}
    try:
        if wanted:
            outcome = await ctx.control(ctx.partition_control.alter_reassignments, wanted)
    except KafkaError as exc:
        error, message = exc.code, exc.message
    responses = []
    for t in request.topics:
        name = t.name
        parts = []
        for p in t.partitions:
            key = (name, int(p.partition_index))
            code, text = refused.get(key) or outcome.get(key) or (error, message)
            parts.append(make(partition_cls, partition_index=p.partition_index, error_code=code, error_message=text))
        responses.append(make(topic_cls, name=name, partitions=tuple(parts)))
    return make(
        cls, throttle_time=_ZERO, allow_replication_factor_change=allow_rf_change, error_code=error,
        error_message=message, responses=tuple(responses),
    )


async def handle_list_partition_reassignments(ctx: ServerContext, header: RequestHeader, request: Any) -> Any:
    cls = response_class(header.api_key, header.api_version)
    topic_cls, partition_cls = nested(cls, "OngoingTopicReassignment"), nested(cls, "OngoingPartitionReassignment")
    asked = (
        None if request.topics is None
        else {(t.name, int(i)) for t in request.topics for i in t.partition_indexes}
    )
    image = await ctx.run_blocking(ctx.metadata.catch_up)
    by_topic: dict[str, list[Any]] = {}
    for name, index, p in reassignments_in_progress(image, asked):
        by_topic.setdefault(name, []).append(
            make(partition_cls, partition_index=index, replicas=p.replicas, adding_replicas=p.adding_replicas,
                 removing_replicas=p.removing_replicas)
        )
    return make(
        cls, throttle_time=_ZERO, error_code=ErrorCode.none, error_message=None,
        topics=tuple(make(topic_cls, name=n, partitions=tuple(ps)) for n, ps in by_topic.items()),
    )
