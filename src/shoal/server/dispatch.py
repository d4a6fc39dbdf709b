"""Request dispatch: decode a frame, run the API's handler, encode its response."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from shoal.protocol.apis import ApiKey, RequestHeader, UnsupportedVersion, decode_request, encode_response
from shoal.protocol.errors import KafkaError
from shoal.server.context import ServerContext
from shoal.server.handlers.admin import (
    handle_alter_configs,
    handle_create_topics,
    handle_delete_topics,
    handle_describe_configs,
    handle_incremental_alter_configs,
)
from shoal.server.handlers.api_versions import handle_api_versions, unsupported_version_response
from shoal.server.handlers.coordinators import handle_find_coordinator, handle_init_producer_id
from shoal.server.handlers.fetch import handle_fetch
from shoal.server.handlers.list_offsets import handle_list_offsets
from shoal.server.handlers.metadata import (
    handle_describe_cluster,
    handle_describe_topic_partitions,
    handle_metadata,
)
from shoal.server.handlers.produce import handle_produce

log = logging.getLogger(__name__)

Handler = Callable[[ServerContext, RequestHeader, Any], Awaitable[Any | None]]

HANDLERS: dict[int, Handler] = {
    ApiKey.PRODUCE: handle_produce,
    ApiKey.FETCH: handle_fetch,
    ApiKey.LIST_OFFSETS: handle_list_offsets,
    ApiKey.METADATA: handle_metadata,
    ApiKey.FIND_COORDINATOR: handle_find_coordinator,
    ApiKey.API_VERSIONS: handle_api_versions,
    ApiKey.CREATE_TOPICS: handle_create_topics,
    ApiKey.DELETE_TOPICS: handle_delete_topics,
    ApiKey.INIT_PRODUCER_ID: handle_init_producer_id,
    ApiKey.DESCRIBE_CONFIGS: handle_describe_configs,
    ApiKey.ALTER_CONFIGS: handle_alter_configs,
    ApiKey.INCREMENTAL_ALTER_CONFIGS: handle_incremental_alter_configs,
    ApiKey.DESCRIBE_CLUSTER: handle_describe_cluster,
    ApiKey.DESCRIBE_TOPIC_PARTITIONS: handle_describe_topic_partitions,
}


class CloseConnection(Exception):
    """The request cannot be answered in the protocol; Kafka closes the connection then."""


async def dispatch(ctx: ServerContext, frame: memoryview, peer: str) -> bytes | None:
    """The encoded response to one request frame, or None when none is due (acks=0)."""
    try:
        header, request = decode_request(frame)
    except UnsupportedVersion as exc:
        if exc.header.api_key == ApiKey.API_VERSIONS:
            return unsupported_version_response(exc.header)
        log.warning("closing connection from %s: %s", peer, exc)
        raise CloseConnection(str(exc)) from None
    except KafkaError as exc:
        log.warning("closing connection from %s: %s", peer, exc.message)
        raise CloseConnection(exc.message) from None
    try:
        response = await HANDLERS[header.api_key](ctx, header, request)
    except Exception:
        log.exception("error handling api %d v%d from %s (%s)", header.api_key, header.api_version, peer,
                      header.client_id)
        raise CloseConnection("handler failed") from None
    return None if response is None else encode_response(header, response)
