"""Produce (API 0): validate batches; diskless ones go to the appender and are answered at
commit, classic ones are appended to the local log. A request naming both kinds is answered
when its diskless partitions are committed (KIP-1163)."""

from __future__ import annotations

import asyncio
import datetime
import logging
from collections.abc import Awaitable
from typing import Any

from shoal.coordinator.api import CommitBatchResponse
from shoal.protocol.apis import RequestHeader, response_class
from shoal.protocol.build import make, nested
from shoal.protocol.errors import ErrorCode, KafkaError
from shoal.records.batch import validate_records
from shoal.records.types import TimestampType
from shoal.server.context import ServerContext

log = logging.getLogger(__name__)

_ZERO = datetime.timedelta(0)
# Flushes of acks=0 requests: nobody waits for them, but they must run (and not be collected).
_background: set[asyncio.Future[None]] = set()


class _PartitionResult:
    __slots__ = (
        "index", "error", "message", "futures", "flush", "base_offset", "log_append_time", "log_start_offset",
        "size", "records",
    )

    def __init__(self, index: int) -> None:
        self.index = index
        self.error = ErrorCode.none
        self.message: str | None = None
        self.futures: list[asyncio.Future[CommitBatchResponse]] = []
        self.flush: Awaitable[None] | None = None
        self.base_offset = -1
        self.log_append_time = -1
        self.log_start_offset = -1
        self.size = 0
        self.records = 0

    def fail(self, error: ErrorCode, message: str | None) -> None:
        self.error, self.message = error, message


async def handle_produce(ctx: ServerContext, header: RequestHeader, request: Any) -> Any | None:
    image = ctx.image
    results: list[tuple[str, list[_PartitionResult]]] = []
    for topic_data in request.topic_data:
        topic = image.topic(topic_data.name)
        partitions: list[_PartitionResult] = []
        results.append((topic_data.name, partitions))
        for partition_data in topic_data.partition_data:
            result = _PartitionResult(partition_data.index)
            partitions.append(result)
            if request.transactional_id is not None:
                result.fail(ErrorCode.invalid_request, "Transactions are not supported by this Shoal version yet")
                continue
            if request.acks not in (0, 1, -1):
                result.fail(ErrorCode.invalid_required_acks, f"acks={request.acks} is not one of 0, 1, -1")
                continue
            if topic is None or partition_data.index not in topic.partitions:
                result.fail(
                    ErrorCode.unknown_topic_or_partition,
                    f"This server does not host this topic-partition: {topic_data.name}-{partition_data.index}",
                )
                continue
            max_bytes = int(topic.configs.get("max.message.bytes", ctx.config.topic_default("max.message.bytes")))
            timestamp_type = (
                TimestampType.LOG_APPEND_TIME
                if topic.configs.get("message.timestamp.type", ctx.config.topic_default("message.timestamp.type"))
                == "LogAppendTime"
                else TimestampType.CREATE_TIME
            )
            records = memoryview(partition_data.records or b"")
            try:
                batches = validate_records(records, max_bytes, produce_version=header.api_version)
                for _, batch in batches:
                    if batch.is_transactional:
                        raise KafkaError(
                            ErrorCode.invalid_record, "Transactional batches are not supported by this Shoal version yet"
                        )
                tp = ctx.partition_key(topic, partition_data.index)
                for _, batch in batches:
                    result.size += batch.size
                    result.records += batch.records_count
                if topic.is_diskless:
                    for position, batch in batches:
                        result.futures.append(
                            ctx.appender.append(tp, records[position : position + batch.size], batch, timestamp_type)
                        )
                else:
                    appended = ctx.replicas.append(topic.name, tp.partition, records, batches, timestamp_type)
                    result.base_offset = appended.base_offset
                    result.log_start_offset = appended.log_start_offset
                    result.log_append_time = appended.log_append_time
                    if appended.flush_needed:
                        result.flush = ctx.replicas.flush(topic.name, tp.partition)
                    ctx.notifier.committed([tp])
            except KafkaError as exc:
                log.info(
                    "rejected produce to %s-%d from %s: %s (%s)",
                    topic_data.name, partition_data.index, header.client_id, exc.message, exc.code.name,
                )
                result.fail(exc.code, exc.message)
    if request.acks == 0:
        for _, partitions in results:
            for result in partitions:
                if result.flush is not None:
                    _background.add(task := asyncio.ensure_future(result.flush))
                    task.add_done_callback(_background.discard)
        return None
    for name, partitions in results:
        for result in partitions:
            await _settle(result)
            if result.error == ErrorCode.none and result.size:
                ctx.metrics.bytes_in(name, result.size, result.records)
    cls = response_class(header.api_key, header.api_version)
    partition_cls = nested(cls, "PartitionProduceResponse")
    topic_cls = nested(cls, "TopicProduceResponse")
    return make(
        cls,
        throttle_time=_ZERO,
        node_endpoints=(),
        responses=tuple(
            make(
                topic_cls,
                name=name,
                partition_responses=tuple(
                    make(
                        partition_cls,
                        index=r.index,
                        error_code=r.error,
                        base_offset=r.base_offset,
                        log_append_time=(
                            datetime.datetime.fromtimestamp(r.log_append_time / 1000, datetime.UTC)
                            if r.log_append_time >= 0
                            else None
                        ),
                        log_start_offset=r.log_start_offset,
                        record_errors=(),
                        error_message=r.message,
                    )
                    for r in partitions
                ),
            )
            for name, partitions in results
        ),
    )


async def _settle(result: _PartitionResult) -> None:
    """Wait for the partition's batches to commit (diskless) or to be flushed when the topic's
    ``flush.messages`` asks for it (classic); a diskless partition answers its first batch's offset."""
    if result.flush is not None:
        try:
            await result.flush
        except KafkaError as exc:
            result.fail(exc.code, exc.message)
        return
    if not result.futures:
        return
    outcomes = await asyncio.gather(*result.futures, return_exceptions=True)
    for outcome in outcomes:
        if isinstance(outcome, KafkaError):
            result.fail(outcome.code, outcome.message)
            return
        if isinstance(outcome, BaseException):
            result.fail(ErrorCode.unknown_server_error, str(outcome))
            return
        if outcome.errors != ErrorCode.none:
            result.fail(outcome.errors, None)
            return
    first = outcomes[0]
    assert isinstance(first, CommitBatchResponse)
    result.base_offset = first.assigned_base_offset
    result.log_start_offset = first.log_start_offset
    if first.request.message_timestamp_type == TimestampType.LOG_APPEND_TIME:
        result.log_append_time = first.log_append_time
