"""Request dispatch: decode a frame, run the API's handler, encode its response."""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from shoal.protocol.apis import (
    SUPPORTED_APIS,
    ApiKey,
    RequestHeader,
    UnsupportedVersion,
    decode_request,
    encode_response,
)
from shoal.protocol.errors import KafkaError
from shoal.server.context import ServerContext
from shoal.server.handlers.admin import (
    handle_alter_configs,
    handle_create_partitions,
    handle_create_topics,
    handle_delete_topics,
    handle_describe_configs,
    handle_incremental_alter_configs,
)
from shoal.server.handlers.api_versions import handle_api_versions, unsupported_version_response
from shoal.server.handlers.coordinators import handle_find_coordinator, handle_init_producer_id
from shoal.server.handlers.delete_records import handle_delete_records
from shoal.server.handlers.describe_producers import handle_describe_producers
from shoal.server.handlers.elect_leaders import handle_elect_leaders
from shoal.server.handlers.fetch import handle_fetch
from shoal.server.handlers.groups import (
    handle_delete_groups,
    handle_describe_groups,
    handle_heartbeat,
    handle_join_group,
    handle_leave_group,
    handle_list_groups,
    handle_offset_commit,
    handle_offset_delete,
    handle_offset_fetch,
    handle_sync_group,
)
from shoal.server.handlers.list_offsets import handle_list_offsets
from shoal.server.handlers.log_dirs import handle_alter_replica_log_dirs, handle_describe_log_dirs
from shoal.server.handlers.metadata import (
    handle_describe_cluster,
    handle_describe_topic_partitions,
    handle_metadata,
)
from shoal.server.handlers.offset_for_leader_epoch import handle_offset_for_leader_epoch
from shoal.server.handlers.produce import handle_produce
from shoal.server.handlers.reassignments import (
    handle_alter_partition_reassignments,
    handle_list_partition_reassignments,
)
from shoal.server.handlers.transactions import (
    handle_add_offsets_to_txn,
    handle_add_partitions_to_txn,
    handle_describe_transactions,
    handle_end_txn,
    handle_list_transactions,
)
from shoal.server.handlers.txn_markers import handle_write_txn_markers
from shoal.server.handlers.txn_offset_commit import handle_txn_offset_commit

log = logging.getLogger(__name__)

Handler = Callable[[ServerContext, RequestHeader, Any], Awaitable[Any | None]]

HANDLERS: dict[int, Handler] = {
    ApiKey.PRODUCE: handle_produce,
    ApiKey.FETCH: handle_fetch,
    ApiKey.LIST_OFFSETS: handle_list_offsets,
    ApiKey.METADATA: handle_metadata,
    ApiKey.OFFSET_COMMIT: handle_offset_commit,
    ApiKey.OFFSET_FETCH: handle_offset_fetch,
    ApiKey.FIND_COORDINATOR: handle_find_coordinator,
    ApiKey.JOIN_GROUP: handle_join_group,
    ApiKey.HEARTBEAT: handle_heartbeat,
    ApiKey.LEAVE_GROUP: handle_leave_group,
    ApiKey.SYNC_GROUP: handle_sync_group,
    ApiKey.DESCRIBE_GROUPS: handle_describe_groups,
    ApiKey.LIST_GROUPS: handle_list_groups,
    ApiKey.API_VERSIONS: handle_api_versions,
    ApiKey.CREATE_TOPICS: handle_create_topics,
    ApiKey.DELETE_TOPICS: handle_delete_topics,
    ApiKey.DELETE_RECORDS: handle_delete_records,
    ApiKey.INIT_PRODUCER_ID: handle_init_producer_id,
    ApiKey.OFFSET_FOR_LEADER_EPOCH: handle_offset_for_leader_epoch,
    ApiKey.ADD_PARTITIONS_TO_TXN: handle_add_partitions_to_txn,
    ApiKey.ADD_OFFSETS_TO_TXN: handle_add_offsets_to_txn,
    ApiKey.END_TXN: handle_end_txn,
    ApiKey.WRITE_TXN_MARKERS: handle_write_txn_markers,
    ApiKey.TXN_OFFSET_COMMIT: handle_txn_offset_commit,
    ApiKey.DESCRIBE_PRODUCERS: handle_describe_producers,
    ApiKey.DESCRIBE_TRANSACTIONS: handle_describe_transactions,
    ApiKey.LIST_TRANSACTIONS: handle_list_transactions,
    ApiKey.DESCRIBE_CONFIGS: handle_describe_configs,
    ApiKey.ALTER_REPLICA_LOG_DIRS: handle_alter_replica_log_dirs,
    ApiKey.DESCRIBE_LOG_DIRS: handle_describe_log_dirs,
    ApiKey.ALTER_CONFIGS: handle_alter_configs,
    ApiKey.CREATE_PARTITIONS: handle_create_partitions,
    ApiKey.DELETE_GROUPS: handle_delete_groups,
    ApiKey.ELECT_LEADERS: handle_elect_leaders,
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: handle_alter_partition_reassignments,
    ApiKey.LIST_PARTITION_REASSIGNMENTS: handle_list_partition_reassignments,
    ApiKey.INCREMENTAL_ALTER_CONFIGS: handle_incremental_alter_configs,
    ApiKey.OFFSET_DELETE: handle_offset_delete,
    ApiKey.DESCRIBE_CLUSTER: handle_describe_cluster,
    ApiKey.DESCRIBE_TOPIC_PARTITIONS: handle_describe_topic_partitions,
}


def client_host(peer: str) -> str:
    """The address part of ``host:port``, as Kafka prints a client's address (``/127.0.0.1``)."""
    return "/" + peer.rsplit(":", 1)[0]


class CloseConnection(Exception):
    """The request cannot be answered in the protocol; Kafka closes the connection then."""


async def dispatch(ctx: ServerContext, frame: memoryview, peer: str) -> bytes | None:
    """The encoded response to one request frame, or None when none is due (acks=0)."""
    try:
        header, request = decode_request(frame)
    except UnsupportedVersion as exc:
        if exc.header.api_key == ApiKey.API_VERSIONS:
            return unsupported_version_response(exc.header)
        log.info("closing connection from %s: %s", peer, exc)
        raise CloseConnection(str(exc)) from None
    except KafkaError as exc:
        log.info("closing connection from %s: %s", peer, exc.message)
        raise CloseConnection(exc.message) from None
    header.client_host = client_host(peer)
    started = time.perf_counter()
    try:
        response = await HANDLERS[header.api_key](ctx, header, request)
        return None if response is None else encode_response(header, response)
    except Exception:
        log.exception("error handling api %d v%d from %s (%s)", header.api_key, header.api_version, peer,
                      header.client_id)
        raise CloseConnection("handler failed") from None
    finally:
        ctx.metrics.request_done(SUPPORTED_APIS[header.api_key].name, header.api_version, time.perf_counter() - started)
