"""FindCoordinator (10) and InitProducerId (22).

A group's coordinator, and a transactional id's, is the alive broker owning its coordinator
partition (``shoal.cluster.placement``): ``__consumer_offsets`` partitions for groups,
``__transaction_state`` partitions for transactional ids, spread the same way.
"""

from __future__ import annotations

import datetime
from typing import Any

from shoal.cluster.placement import partition_owner
from shoal.protocol.apis import RequestHeader, response_class
from shoal.protocol.build import make, nested
from shoal.protocol.errors import ErrorCode, KafkaError
from shoal.protocol.key_partitions import group_partition, transaction_partition
from shoal.server.context import ServerContext

_ZERO = datetime.timedelta(0)
KEY_TYPE_GROUP = 0
KEY_TYPE_TRANSACTION = 1


def _find(ctx: ServerContext, key_type: int, key: str) -> tuple[ErrorCode, str | None, int, str, int]:
    """(error, message, node id, host, port) of the coordinator of one key."""
    if key_type == KEY_TYPE_TRANSACTION:
        if not key:
            return ErrorCode.invalid_request, "The transactional id must not be empty", -1, "", -1
        partition = transaction_partition(key, ctx.config["transaction.state.log.num.partitions"])
    elif key_type == KEY_TYPE_GROUP:
        partition = group_partition(key, ctx.config["offsets.topic.num.partitions"])
    else:
        return ErrorCode.invalid_request, f"Unsupported coordinator key type {key_type}", -1, "", -1
    image = ctx.image
    node = partition_owner(partition, list(image.brokers), [b.node_id for b in image.alive_brokers()])
    broker = image.brokers.get(node) if node is not None else None
    if broker is None:
        return ErrorCode.coordinator_not_available, "No broker is alive to coordinate it", -1, "", -1
    return ErrorCode.none, None, broker.node_id, broker.host, broker.port


async def handle_find_coordinator(ctx: ServerContext, header: RequestHeader, request: Any) -> Any:
    """The group's or transactional id's coordinator: the alive broker owning its coordinator
    partition (``shoal.cluster.placement``); v4+ answers a batch of keys."""
    cls = response_class(header.api_key, header.api_version)
    key_type = getattr(request, "key_type", KEY_TYPE_GROUP)
    if header.api_version >= 4:
        coordinator_cls = nested(cls, "Coordinator")
        coordinators = []
        for key in request.coordinator_keys:
            error, message, node, host, port = _find(ctx, key_type, key)
            coordinators.append(make(coordinator_cls, key=key, node_id=node, host=host, port=port,
                                     error_code=error, error_message=message))
        return make(cls, throttle_time=_ZERO, coordinators=tuple(coordinators))
    error, message, node, host, port = _find(ctx, key_type, request.key)
    return make(cls, throttle_time=_ZERO, error_code=error, error_message=message, node_id=node, host=host, port=port)


async def handle_init_producer_id(ctx: ServerContext, header: RequestHeader, request: Any) -> Any:
    cls = response_class(header.api_key, header.api_version)
    if request.transactional_id is not None:
        pid, epoch = int(getattr(request, "producer_id", -1)), int(getattr(request, "producer_epoch", -1))
        error, producer_id, producer_epoch = await ctx.transactions.init_producer_id(
            request.transactional_id,
            request.transaction_timeout // datetime.timedelta(milliseconds=1),
            None if pid == -1 and epoch == -1 else (pid, epoch),
        )
        return make(cls, throttle_time=_ZERO, error_code=error, producer_id=producer_id, producer_epoch=producer_epoch)
    # An idempotent producer (re)initialising always gets a fresh id at epoch 0, as in Kafka.
    try:
        producer_id = await ctx.producer_ids.next_id()
    except KafkaError as exc:  # no id block could be had (the metadata store is down): retriable
        return make(cls, throttle_time=_ZERO, error_code=exc.code, producer_id=-1, producer_epoch=-1)
    return make(cls, throttle_time=_ZERO, error_code=ErrorCode.none, producer_id=producer_id, producer_epoch=0)
