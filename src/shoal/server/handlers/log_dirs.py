"""DescribeLogDirs (35) and AlterReplicaLogDirs (34): JBOD log directories (KIP-112/KIP-113)."""

from __future__ import annotations

import datetime
import logging
from typing import Any

from shoal.protocol.apis import RequestHeader, response_class
from shoal.protocol.build import make, nested
from shoal.protocol.errors import ErrorCode, KafkaError
from shoal.server.context import ServerContext

log = logging.getLogger(__name__)

_ZERO = datetime.timedelta(0)


async def handle_describe_log_dirs(ctx: ServerContext, header: RequestHeader, request: Any) -> Any:
    cls = response_class(header.api_key, header.api_version)
    result_cls = nested(cls, "DescribeLogDirsResult")
    topic_cls, partition_cls = nested(cls, "DescribeLogDirsTopic"), nested(cls, "DescribeLogDirsPartition")
    wanted = None
    if request.topics is not None:
        wanted = [(t.topic, p) for t in request.topics for p in t.partitions]
    results = []
    for described in await ctx.partitions.describe_log_dirs(wanted):
        topics: dict[str, list[Any]] = {}
        for replica in described.replicas:
            topics.setdefault(replica.topic, []).append(
                make(partition_cls, partition_index=replica.partition, partition_size=replica.size,
                     offset_lag=replica.offset_lag, is_future_key=replica.is_future)
            )
        results.append(
            make(
                result_cls,
                error_code=described.error,
                log_dir=described.path,
                topics=tuple(make(topic_cls, name=name, partitions=tuple(parts)) for name, parts in topics.items()),
                total_bytes=described.total_bytes,
                usable_bytes=described.usable_bytes,
            )
        )
    return make(cls, throttle_time=_ZERO, error_code=ErrorCode.none, results=tuple(results))


async def handle_alter_replica_log_dirs(ctx: ServerContext, header: RequestHeader, request: Any) -> Any:
    cls = response_class(header.api_key, header.api_version)
    topic_cls = nested(cls, "AlterReplicaLogDirTopicResult")
    partition_cls = nested(cls, "AlterReplicaLogDirPartitionResult")
    results: dict[str, list[Any]] = {}
    for wanted_dir in request.dirs:
        for t in wanted_dir.topics:
            for partition in t.partitions:
                error = ErrorCode.none
                try:
                    await ctx.partitions.alter_log_dir(t.name, partition, wanted_dir.path)
                    log.info("moving %s-%d to log dir %s", t.name, partition, wanted_dir.path)
                except KafkaError as exc:
                    log.info("AlterReplicaLogDirs %s-%d -> %s refused: %s", t.name, partition, wanted_dir.path,
                             exc.message)
                    error = exc.code
                results.setdefault(t.name, []).append(make(partition_cls, partition_index=partition, error_code=error))
    return make(
        cls,
        throttle_time=_ZERO,
        results=tuple(make(topic_cls, topic_name=name, partitions=tuple(parts)) for name, parts in results.items()),
    )
