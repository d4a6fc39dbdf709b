"""Fetch (API 1): read diskless partitions from object storage, long-polling for min_bytes.

Fetch sessions (KIP-227) are declined by answering session id 0, which every client
handles by sending full fetch requests.
"""

from __future__ import annotations

import datetime
import time
from typing import Any

from shoal.coordinator.api import TopicIdPartition
from shoal.diskless.read import PartitionRead
from shoal.protocol.apis import RequestHeader, response_class
from shoal.protocol.build import make, nested
from shoal.protocol.errors import ErrorCode
from shoal.server.context import ServerContext

_ZERO = datetime.timedelta(0)
# Even when our own commits would wake us, re-ask the coordinator this often for
# batches that other brokers commit.
REMOTE_COMMIT_POLL_S = 0.5


async def handle_fetch(ctx: ServerContext, header: RequestHeader, request: Any) -> Any:
    by_id = header.api_version >= 13
    image = ctx.image
    # (topic key as the client named it, partition index, partition key or error)
    slots: list[tuple[Any, int, TopicIdPartition | ErrorCode, int, int]] = []
    for fetch_topic in request.topics:
        topic = image.topics_by_id.get(fetch_topic.topic_id) if by_id else image.topic(fetch_topic.topic)
        topic_key = fetch_topic.topic_id if by_id else fetch_topic.topic
        for p in fetch_topic.partitions:
            if topic is None:
                error = ErrorCode.unknown_topic_id if by_id else ErrorCode.unknown_topic_or_partition
                slots.append((topic_key, p.partition, error, 0, 0))
            elif p.partition not in topic.partitions:
                slots.append((topic_key, p.partition, ErrorCode.unknown_topic_or_partition, 0, 0))
            else:
                tp = ctx.partition_key(topic, p.partition)
                slots.append((topic_key, p.partition, tp, p.fetch_offset, p.partition_max_bytes))
    reads_wanted = [(tp, offset, max_bytes) for _, _, tp, offset, max_bytes in slots if isinstance(tp, TopicIdPartition)]
    deadline = time.monotonic() + request.max_wait.total_seconds()
    reads: list[PartitionRead] = []
    waited = [tp for tp, _, _ in reads_wanted]
    while True:
        version = ctx.notifier.version(waited)
        reads = await ctx.reader.read(reads_wanted, request.max_bytes) if reads_wanted else []
        total = sum(len(r.records) for r in reads)
        remaining = deadline - time.monotonic()
        if (
            total >= max(request.min_bytes, 1)
            or remaining <= 0
            or len(reads) != len(slots)
            or any(r.error != ErrorCode.none for r in reads)
        ):
            break
        await ctx.notifier.wait(waited, min(remaining, REMOTE_COMMIT_POLL_S), version)
    for (_, _, tp, _, _), read in zip(
        (slot for slot in slots if isinstance(slot[2], TopicIdPartition)), reads, strict=True
    ):
        if read.records:
            ctx.metrics.bytes_out(tp.topic_name, len(read.records))
    return _response(header, slots, iter(reads))


def _response(header: RequestHeader, slots: list, reads: Any) -> Any:
    cls = response_class(header.api_key, header.api_version)
    partition_cls = nested(cls, "PartitionData")
    topic_cls = nested(cls, "FetchableTopicResponse")
    topics: dict[Any, list[Any]] = {}
    for topic_key, partition, tp, _, _ in slots:
        if isinstance(tp, TopicIdPartition):
            read = next(reads)
            error, hw, lso, records = read.error, read.high_watermark, read.log_start_offset, read.records
        else:
            error, hw, lso, records = tp, -1, -1, b""
        topics.setdefault(topic_key, []).append(
            make(
                partition_cls,
                partition_index=partition,
                error_code=error,
                high_watermark=hw,
                last_stable_offset=hw,
                log_start_offset=lso,
                aborted_transactions=None,
                preferred_read_replica=-1,
                records=records,
            )
        )
    key_field = "topic_id" if header.api_version >= 13 else "topic"
    return make(
        cls,
        throttle_time=_ZERO,
        error_code=ErrorCode.none,
        session_id=0,
        node_endpoints=(),
        responses=tuple(make(topic_cls, **{key_field: key}, partitions=tuple(parts)) for key, parts in topics.items()),
    )
