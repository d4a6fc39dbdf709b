"""DescribeLogDirs (API 35): what each log dir holds, as Kafka's ReplicaManager.describeLogDirs answers.

Per dir: an error (KAFKA_STORAGE_ERROR when offline, with no partitions and -1 for the byte
counts, as Kafka answers), then every current or future replica in it with its size in bytes and
its offset lag (Kafka's: ``max(0, high watermark - log end)`` for a current replica, how far it
is behind the current replica for a future one), plus TotalBytes/UsableBytes of the file system
(v4) from ``os.statvfs``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass

from shoal.classic.log_manager import LogManager, TopicPartition
from shoal.protocol.errors import ErrorCode, KafkaError

__all__ = ["UNKNOWN_VOLUME_BYTES", "LogDirDescription", "ReplicaDescription", "describe_log_dirs"]

UNKNOWN_VOLUME_BYTES = -1


@dataclass(frozen=True, slots=True)
class ReplicaDescription:
    """One partition replica in a log dir."""

    topic: str
    partition: int
    size: int
    offset_lag: int
    is_future: bool


@dataclass(frozen=True, slots=True)
class LogDirDescription:
    """One log dir in a DescribeLogDirs response."""

    path: str
    error: ErrorCode
    total_bytes: int
    usable_bytes: int
    replicas: list[ReplicaDescription]


def describe_log_dirs(
    manager: LogManager, partitions: Iterable[TopicPartition] | None = None
) -> list[LogDirDescription]:
    """Describe every configured log dir, limited to ``partitions`` when given."""
    wanted = None if partitions is None else set(partitions)
    out = []
    for log_dir in manager.log_dirs:
        if manager.channel.is_offline(log_dir):
            out.append(
                LogDirDescription(
                    log_dir, ErrorCode.kafka_storage_error, UNKNOWN_VOLUME_BYTES, UNKNOWN_VOLUME_BYTES, []
                )
            )
            continue
        try:
            with manager.channel.guard(log_dir, "describing"):
                st = os.statvfs(log_dir)
                total = st.f_blocks * st.f_frsize
                usable = st.f_bavail * st.f_frsize
                replicas = []
                for log in manager.logs_in_dir(log_dir):
                    tp = (log.topic, log.partition)
                    if wanted is not None and tp not in wanted:
                        continue
                    if log.is_future:
                        move = manager.future_move(*tp)
                        lag = move.lag if move is not None else 0
                    else:
                        lag = max(0, log.high_watermark - log.log_end_offset)
                    replicas.append(
                        ReplicaDescription(log.topic, log.partition, log.size, lag, log.is_future)
                    )
        except KafkaError:
            out.append(
                LogDirDescription(
                    log_dir, ErrorCode.kafka_storage_error, UNKNOWN_VOLUME_BYTES, UNKNOWN_VOLUME_BYTES, []
                )
            )
            continue
        replicas.sort(key=lambda r: (r.topic, r.partition, r.is_future))
        out.append(LogDirDescription(log_dir, ErrorCode.none, total, usable, replicas))
    return out
