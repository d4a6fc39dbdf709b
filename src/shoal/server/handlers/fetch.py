"""Fetch (API 1): decode, ask ``partitions`` to read (it long-polls for ``min_bytes``), encode.

Fetch sessions (KIP-227) are declined by answering session id 0, which every client
handles by sending full fetch requests. Every answer carries the last stable offset; a
READ_COMMITTED one also the aborted transactions its records overlap (KIP-98), which the
consumer drops.
"""

from __future__ import annotations

import datetime
from typing import Any

from shoal.partitions.api import FetchOptions, IsolationLevel, ReadRequest
from shoal.protocol.apis import RequestHeader, response_class
from shoal.protocol.build import make, nested
from shoal.protocol.errors import ErrorCode
from shoal.server.context import ServerContext
from shoal.server.handlers.leader_hints import LeaderHints

_ZERO = datetime.timedelta(0)


def replica_id_of(request: Any) -> int:
    """The fetching follower's node id (``ReplicaId`` before v15, ``ReplicaState`` after), -1 for a
    consumer."""
    state = getattr(request, "replica_state", None)
    if state is not None:
        return int(state.replica_id)
    return int(getattr(request, "replica_id", -1))


async def handle_fetch(ctx: ServerContext, header: RequestHeader, request: Any) -> Any:
    by_id = header.api_version >= 13
    keys: list[Any] = []  # the topic as the client named it, per partition
    reads: list[ReadRequest] = []
    for fetch_topic in request.topics:
        key = fetch_topic.topic_id if by_id else fetch_topic.topic
        for p in fetch_topic.partitions:
            keys.append(key)
            reads.append(
                ReadRequest(
                    None if by_id else fetch_topic.topic,
                    fetch_topic.topic_id if by_id else None,
                    p.partition,
                    p.fetch_offset,
                    p.partition_max_bytes,
                    getattr(p, "current_leader_epoch", -1),
                )
            )
    options = FetchOptions(
        max_bytes=request.max_bytes,
        min_bytes=request.min_bytes,
        max_wait_s=request.max_wait.total_seconds(),
        replica_id=replica_id_of(request),
        client_rack=getattr(request, "rack_id", None) or None,
        follower_reads=header.api_version >= 11,
        isolation=IsolationLevel.of(int(getattr(request, "isolation_level", 0))),
    )
    outcomes = await ctx.partitions.read(reads, options)
    cls = response_class(header.api_key, header.api_version)
    partition_cls = nested(cls, "PartitionData")
    topic_cls = nested(cls, "FetchableTopicResponse")
    aborted_cls = nested(cls, "AbortedTransaction")
    hints = LeaderHints(ctx.image, cls)
    topics: dict[Any, list[Any]] = {}
    for key, read, outcome in zip(keys, reads, outcomes, strict=True):
        if read.topic is not None:
            name = read.topic
        else:
            found = ctx.image.topics_by_id.get(read.topic_id)
            name = found.name if found is not None else None
        topics.setdefault(key, []).append(
            make(
                partition_cls,
                partition_index=read.partition,
                error_code=outcome.error,
                high_watermark=outcome.high_watermark,
                last_stable_offset=outcome.last_stable_offset,
                log_start_offset=outcome.log_start_offset,
                aborted_transactions=None if outcome.aborted_transactions is None else tuple(
                    make(aborted_cls, producer_id=pid, first_offset=first) for pid, first in outcome.aborted_transactions
                ),
                preferred_read_replica=outcome.preferred_read_replica,
                records=outcome.records,
                **hints.current_leader(name, read.partition, outcome.error),
            )
        )
    key_field = "topic_id" if by_id else "topic"
    return make(
        cls,
        throttle_time=_ZERO,
        error_code=ErrorCode.none,
        session_id=0,
        node_endpoints=hints.node_endpoints(),
        responses=tuple(make(topic_cls, **{key_field: key}, partitions=tuple(parts)) for key, parts in topics.items()),
    )
