"""The replica manager: what request handlers call for classic partitions.

It owns the LogManager (the JBOD log dirs, KIP-112 failure handling) and turns the
metadata's view of classic topics into logs on disk. Appends and reads run on the
event loop (page-cache I/O, and it keeps per-partition order trivially); fsync,
recovery, deletion and directory moves run in worker threads. Replication to
followers comes in a later release; the shape (leader epoch, high watermark kept by
the log, expected replicas) is here for it.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable, Collection, Mapping
from pathlib import Path
from typing import Any

from shoal.classic.log import PartitionLog
from shoal.classic.log_config import LogConfig
from shoal.classic.log_dirs import LogDirDescription, describe_log_dirs
from shoal.classic.log_manager import LogManager, TopicPartition
from shoal.classic.log_manager_failures import LogDirFailureEvent
from shoal.classic.log_results import AppendResult, ReadResult, TimestampAndOffset
from shoal.config import Config
from shoal.metadata.image import MetadataImage, TopicImage
from shoal.protocol.errors import ErrorCode, KafkaError
from shoal.records.batch import BatchHeader
from shoal.records.types import TimestampType
from shoal.topic_configs import TOPIC_CONFIGS

log = logging.getLogger(__name__)

# Left in a log dir by ``shoal log-dirs reset``; the broker acts on it at its next start.
RESET_MARKER = ".shoal-log-dir-reset"

# Topic configs that shape a classic log, by their Kafka names (``LogConfig.from_properties``).
LOG_CONFIG_NAMES = (
    "segment.bytes",
    "internal.segment.bytes",
    "segment.ms",
    "segment.jitter.ms",
    "segment.index.bytes",
    "index.interval.bytes",
    "flush.messages",
    "flush.ms",
    "retention.ms",
    "retention.bytes",
    "cleanup.policy",
    "file.delete.delay.ms",
)


def log_config_for(config: Config, topic: TopicImage | None) -> LogConfig:
    """The effective LogConfig of a topic: its own configs over the broker's defaults."""
    values: dict[str, object] = {}
    for name in LOG_CONFIG_NAMES:
        if topic is not None and name in topic.configs:
            values[name] = topic.configs[name]
        elif name in TOPIC_CONFIGS:
            default = config.topic_default(name)
            if default is not None:
                values[name] = default
    return LogConfig.from_properties(values)


class ReplicaManager:
    def __init__(
        self,
        config: Config,
        node_id: int,
        cluster_id: str,
        run_blocking: Callable[..., Awaitable[Any]],
        image: Callable[[], MetadataImage],
        on_halt: Callable[[str], None],
    ) -> None:
        self._config = config
        self._node_id = node_id
        self._run_blocking = run_blocking
        self._image = image
        self._on_halt = on_halt
        self._loop: asyncio.AbstractEventLoop | None = None
        self.logs = LogManager(
            config.log_dirs,
            node_id,
            cluster_id,
            default_config=log_config_for(config, None),
            config_for=lambda topic: log_config_for(config, image().topic(topic)),
            expected=self._hosted(image()),
            on_dir_failure=self._dir_failed_in_thread,
            retention_check_interval_ms=config["log.retention.check.interval.ms"],
        )

    def _hosted(self, image: MetadataImage) -> set[TopicPartition]:
        """Classic partitions the metadata places on this broker (KIP-112's "created" replicas)."""
        return {
            (topic.name, p.partition)
            for topic in image.topics_by_name.values()
            if not topic.is_diskless
            for p in topic.partitions.values()
            if self._node_id in p.replicas
        }

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        await self._run_blocking(self.logs.startup)
        for log_dir in self.logs.log_dirs:
            if (Path(log_dir) / RESET_MARKER).exists():
                await self._reset(log_dir)
        for log_dir in self.logs.offline_dirs():
            log.error("log dir %s is offline at start-up; its partitions answer KAFKA_STORAGE_ERROR", log_dir)
        if not self.logs.online_dirs():
            raise RuntimeError("every log dir is offline: the broker cannot start (as Kafka)")
        self.logs.start()

    async def stop(self) -> None:
        await self._run_blocking(self.logs.shutdown)

    async def _reset(self, log_dir: str) -> None:
        """KIP-112's recovery after a disk is fixed or replaced, asked for with ``shoal log-dirs reset``:
        the replicas that were lost with it are accepted as lost and re-created empty."""
        released = await self._run_blocking(self.logs.reset_dir, log_dir)
        image = self._image()
        for topic_name, partition in released:
            topic = image.topic(topic_name)
            if topic is not None and not topic.is_diskless:
                await self._run_blocking(self.logs.create_log, topic_name, topic.topic_id, partition)
        (Path(log_dir) / RESET_MARKER).unlink()
        log.warning(
            "log dir %s was reset by the operator: re-created %s empty",
            log_dir,
            ", ".join(f"{t}-{p}" for t, p in released) or "no partition",
        )

    # ------------------------------------------------------------------ failures

    def _dir_failed_in_thread(self, event: LogDirFailureEvent) -> None:
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._dir_failed, event)

    def _dir_failed(self, event: LogDirFailureEvent) -> None:
        log.error(
            "log dir %s is offline (%s): partitions %s answer KAFKA_STORAGE_ERROR until the broker restarts with "
            "the directory fixed",
            event.log_dir,
            event.message,
            ", ".join(f"{t}-{p}" for t, p in event.offline_partitions) or "none",
        )
        if event.halt:
            self._on_halt(f"every log dir is offline (last: {event.log_dir})")

    def offline_partitions(self) -> Mapping[TopicPartition, str | None]:
        return self.logs.offline_partitions()

    # ------------------------------------------------------------------ topics

    async def create_partitions(
        self, topic: TopicImage | Any, *, is_new: bool, only: Collection[int] | None = None
    ) -> None:
        """Create (or open) the logs of this broker's replicas of a classic topic (of the
        partitions in ``only``, when given)."""
        configs = {n: v for n, v in topic.configs.items() if n in LOG_CONFIG_NAMES}
        for p in topic.partitions.values():
            if self._node_id in p.replicas and (only is None or p.partition in only):
                await self._run_blocking(
                    functools.partial(self.logs.create_log, is_new=is_new),
                    topic.name,
                    topic.topic_id,
                    p.partition,
                    configs or None,
                )

    async def delete_topic(self, topic: TopicImage) -> None:
        for p in topic.partitions.values():
            if self.logs.has_log(topic.name, p.partition):
                await self._run_blocking(self.logs.delete_log, topic.name, p.partition)

    def update_topic_config(self, topic: TopicImage) -> None:
        self.logs.update_topic_config(topic.name, log_config_for(self._config, topic))

    # ------------------------------------------------------------------ data

    def get(self, topic: str, partition: int) -> PartitionLog:
        return self.logs.get_log(topic, partition)

    def append(
        self,
        topic: str,
        partition: int,
        records: memoryview,
        batches: list[tuple[int, BatchHeader]],
        timestamp_type: TimestampType,
    ) -> AppendResult:
        """Append as the leader, on the loop (so appends keep arrival order). When the result says
        ``flush_needed`` (``flush.messages``), ``await flush(...)`` before acknowledging."""
        return self.get(topic, partition).append(records, batches, timestamp_type, leader_epoch=0)

    async def flush(self, topic: str, partition: int) -> None:
        await self._run_blocking(self.get(topic, partition).flush)

    def read(
        self, topic: str, partition: int, offset: int, max_bytes: int, min_one_batch: bool
    ) -> ReadResult:
        return self.get(topic, partition).read(offset, max_bytes, min_one_batch)

    async def list_offset(self, topic: str, partition: int, timestamp: int) -> TimestampAndOffset | None:
        """On a worker: a lookup by time reads index and segment files and decodes a batch."""
        return await self._run_blocking(self.get(topic, partition).fetch_offset_by_timestamp, timestamp)

    async def delete_records(self, topic: str, partition: int, offset: int) -> int:
        return await self._run_blocking(self.get(topic, partition).delete_records, offset)

    # ------------------------------------------------------------------ log dirs

    async def describe_log_dirs(self, partitions: list[TopicPartition] | None) -> list[LogDirDescription]:
        return await self._run_blocking(describe_log_dirs, self.logs, partitions)

    async def alter_log_dir(self, topic: str, partition: int, log_dir: str) -> None:
        """Move a replica to another log dir through a future replica (AlterReplicaLogDirs)."""
        wanted = str(Path(log_dir).resolve())
        known = {str(Path(d).resolve()): d for d in self.logs.log_dirs}
        if wanted not in known:
            raise KafkaError(
                ErrorCode.log_dir_not_found, f"Log dir {log_dir} is not in log.dirs of this broker"
            )
        await self._run_blocking(self.logs.alter_log_dir, topic, partition, known[wanted])
