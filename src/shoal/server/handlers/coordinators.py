"""FindCoordinator (10) and InitProducerId (22).

Every key is coordinated by this node for now. Transactions are not served yet:
transactional requests get a clear INVALID_REQUEST rather than a retry loop.
"""

from __future__ import annotations

import datetime
from typing import Any

from shoal.protocol.apis import RequestHeader, response_class
from shoal.protocol.build import make, nested
from shoal.protocol.errors import ErrorCode
from shoal.server.context import ServerContext

_ZERO = datetime.timedelta(0)
KEY_TYPE_GROUP = 0
KEY_TYPE_TRANSACTION = 1
_NO_TXN = "Transactions are not supported by this Shoal version yet"


async def handle_find_coordinator(ctx: ServerContext, header: RequestHeader, request: Any) -> Any:
    cls = response_class(header.api_key, header.api_version)
    me = ctx.image.brokers.get(ctx.node_id)
    host, port = (me.host, me.port) if me else ("", -1)
    key_type = getattr(request, "key_type", KEY_TYPE_GROUP)
    if key_type == KEY_TYPE_TRANSACTION:
        error, message, node, host, port = ErrorCode.invalid_request, _NO_TXN, -1, "", -1
    elif key_type != KEY_TYPE_GROUP:
        error, message, node = ErrorCode.invalid_request, f"Unsupported coordinator key type {key_type}", -1
        host, port = "", -1
    else:
        error, message, node = ErrorCode.none, None, ctx.node_id
    if header.api_version >= 4:
        coordinator_cls = nested(cls, "Coordinator")
        return make(
            cls,
            throttle_time=_ZERO,
            coordinators=tuple(
                make(coordinator_cls, key=key, node_id=node, host=host, port=port, error_code=error, error_message=message)
                for key in request.coordinator_keys
            ),
        )
    return make(cls, throttle_time=_ZERO, error_code=error, error_message=message, node_id=node, host=host, port=port)


async def handle_init_producer_id(ctx: ServerContext, header: RequestHeader, request: Any) -> Any:
    cls = response_class(header.api_key, header.api_version)
    if request.transactional_id is not None:
        return make(cls, throttle_time=_ZERO, error_code=ErrorCode.invalid_request, producer_id=-1, producer_epoch=-1)
    # An idempotent producer (re)initialising always gets a fresh id at epoch 0, as in Kafka.
    producer_id = await ctx.producer_ids.next_id()
    return make(cls, throttle_time=_ZERO, error_code=ErrorCode.none, producer_id=producer_id, producer_epoch=0)
