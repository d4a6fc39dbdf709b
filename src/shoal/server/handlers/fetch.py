"""Fetch (API 1): diskless partitions from object storage, classic ones from the local log,
long-polling for min_bytes.

Fetch sessions (KIP-227) are declined by answering session id 0, which every client
handles by sending full fetch requests.
"""

from __future__ import annotations

import datetime
import logging
import time
from typing import Any

from shoal.coordinator.api import TopicIdPartition
from shoal.diskless.read import PartitionRead
from shoal.protocol.apis import RequestHeader, response_class
from shoal.protocol.build import make, nested
from shoal.protocol.errors import ErrorCode, KafkaError
from shoal.server.context import ServerContext

log = logging.getLogger(__name__)

_ZERO = datetime.timedelta(0)
# Even when our own commits would wake us, re-ask the coordinator this often for
# batches that other brokers commit.
REMOTE_COMMIT_POLL_S = 0.5


async def handle_fetch(ctx: ServerContext, header: RequestHeader, request: Any) -> Any:
    by_id = header.api_version >= 13
    image = ctx.image
    # (topic key as the client named it, partition index, partition key or error, offset, max bytes, diskless)
    slots: list[tuple[Any, int, TopicIdPartition | ErrorCode, int, int, bool]] = []
    for fetch_topic in request.topics:
        topic = image.topics_by_id.get(fetch_topic.topic_id) if by_id else image.topic(fetch_topic.topic)
        topic_key = fetch_topic.topic_id if by_id else fetch_topic.topic
        for p in fetch_topic.partitions:
            if topic is None:
                error = ErrorCode.unknown_topic_id if by_id else ErrorCode.unknown_topic_or_partition
                slots.append((topic_key, p.partition, error, 0, 0, False))
            elif p.partition not in topic.partitions:
                slots.append((topic_key, p.partition, ErrorCode.unknown_topic_or_partition, 0, 0, False))
            else:
                tp = ctx.partition_key(topic, p.partition)
                slots.append((topic_key, p.partition, tp, p.fetch_offset, p.partition_max_bytes, topic.is_diskless))
    deadline = time.monotonic() + request.max_wait.total_seconds()
    waited = [slot[2] for slot in slots if isinstance(slot[2], TopicIdPartition)]
    errors = len(waited) != len(slots)
    while True:
        version = ctx.notifier.version(waited)
        reads = await _read_all(ctx, slots, request.max_bytes)
        total = sum(len(r.records) for r in reads.values())
        remaining = deadline - time.monotonic()
        if (
            total >= max(request.min_bytes, 1)
            or remaining <= 0
            or errors
            or any(r.error != ErrorCode.none for r in reads.values())
        ):
            break
        await ctx.notifier.wait(waited, min(remaining, REMOTE_COMMIT_POLL_S), version)
    for index, read in reads.items():
        if read.records:
            tp = slots[index][2]
            assert isinstance(tp, TopicIdPartition)
            ctx.metrics.bytes_out(tp.topic_name, len(read.records))
    return _response(header, slots, reads)


async def _read_all(ctx: ServerContext, slots: list, max_bytes: int) -> dict[int, PartitionRead]:
    """Read every partition: diskless ones from object storage, classic ones from the local log,
    within the response's ``max_bytes`` (the first batch always comes, as in Kafka)."""
    reads: dict[int, PartitionRead] = {}
    diskless = [i for i, slot in enumerate(slots) if isinstance(slot[2], TopicIdPartition) and slot[5]]
    if diskless:
        try:
            results = await ctx.reader.read([(slots[i][2], slots[i][3], slots[i][4]) for i in diskless], max_bytes)
        except Exception as exc:  # object storage or coordinator unreachable: retriable, keep the connection
            log.warning("diskless read failed, answering KAFKA_STORAGE_ERROR: %s: %s", type(exc).__name__, exc)
            results = [PartitionRead(ErrorCode.kafka_storage_error, -1, -1, b"") for _ in diskless]
        reads.update(zip(diskless, results, strict=True))
    used = sum(len(r.records) for r in reads.values())
    for i, (_, partition, tp, offset, partition_max, is_diskless) in enumerate(slots):
        if not isinstance(tp, TopicIdPartition) or is_diskless:
            continue
        try:
            result = ctx.replicas.read(tp.topic_name, partition, offset, min(partition_max, max(max_bytes - used, 0)),
                                       min_one_batch=used == 0)
            reads[i] = PartitionRead(ErrorCode.none, result.high_watermark, result.log_start_offset, bytes(result.records))
            used += len(result.records)
        except KafkaError as exc:
            reads[i] = _classic_error(ctx, tp, exc)
    return reads


def _classic_error(ctx: ServerContext, tp: TopicIdPartition, exc: KafkaError) -> PartitionRead:
    """An error answer, with the log's offsets when the log is there (OFFSET_OUT_OF_RANGE)."""
    try:
        log = ctx.replicas.get(tp.topic_name, tp.partition)
        return PartitionRead(exc.code, log.high_watermark, log.log_start_offset, b"")
    except KafkaError:
        return PartitionRead(exc.code, -1, -1, b"")


def _response(header: RequestHeader, slots: list, reads: dict[int, PartitionRead]) -> Any:
    cls = response_class(header.api_key, header.api_version)
    partition_cls = nested(cls, "PartitionData")
    topic_cls = nested(cls, "FetchableTopicResponse")
    topics: dict[Any, list[Any]] = {}
    for index, (topic_key, partition, tp, _, _, _) in enumerate(slots):
        read = reads.get(index)
        if read is not None:
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
