"""The replica manager: what request handlers call for classic partitions.

It owns the LogManager (the JBOD log dirs, KIP-112 failure handling) and turns the
metadata's view of classic topics into logs on disk. Appends and reads run on the
event loop (page-cache I/O, and it keeps per-partition order trivially); fsync,
recovery, deletion and directory moves run in worker threads. Replication to
followers is ``replication``: this broker's replicas lead or follow as the metadata image says,
and a leader's appends are acknowledged per ``acks`` once its ISR has them.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable, Collection, Mapping
from pathlib import Path
from typing import Any

from shoal.classic.log import PartitionLog
from shoal.classic.log_cleaner import CleanerSettings
from shoal.classic.log_config import LogConfig
from shoal.classic.log_dirs import LogDirDescription, describe_log_dirs
from shoal.classic.log_manager import LogManager, TopicPartition
from shoal.classic.log_manager_failures import LogDirFailureEvent
from shoal.classic.log_results import AppendResult, ReadResult, TimestampAndOffset
from shoal.classic.replication import Replication
from shoal.classic.replication_quota import ReplicationQuota, dynamic_rate, is_throttled
from shoal.cluster.partition_control import PartitionControl
from shoal.config import Config
from shoal.metadata.image import MetadataImage, PartitionImage, TopicImage
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
    "remote.storage.enable",
    "local.retention.ms",
    "local.retention.bytes",
    "min.cleanable.dirty.ratio",
    "min.compaction.lag.ms",
    "max.compaction.lag.ms",
    "delete.retention.ms",
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
        control: PartitionControl | None = None,
        wake: Callable[[TopicPartition], None] = lambda tp: None,
    ) -> None:
        self._config = config
        self._control = control
        #: min.insync.replicas of topics that do not set it.
        self.default_min_isr: int = config["min.insync.replicas"]
        self._node_id = node_id
        self._run_blocking = run_blocking
        self._image = image
        self._on_halt = on_halt
        self._loop: asyncio.AbstractEventLoop | None = None
        self._reports: set[asyncio.Future[None]] = set()
        self.logs = LogManager(
            config.log_dirs,
            node_id,
            cluster_id,
            default_config=log_config_for(config, None),
            config_for=lambda topic: log_config_for(config, image().topic(topic)),
            expected=self._hosted(image()),
            on_dir_failure=self._dir_failed_in_thread,
            retention_check_interval_ms=config["log.retention.check.interval.ms"],
            cleaner=CleanerSettings(
                enabled=config["log.cleaner.enable"],
                threads=config["log.cleaner.threads"],
                dedupe_buffer_size=config["log.cleaner.dedupe.buffer.size"],
                io_max_bytes_per_second=config["log.cleaner.io.max.bytes.per.second"],
                backoff_ms=config["log.cleaner.backoff.ms"],
            ),
        )
        self.leader_quota = ReplicationQuota(
            lambda: dynamic_rate(config, image(), node_id, "leader.replication.throttled.rate")
        )
        follower_quota = ReplicationQuota(
            lambda: dynamic_rate(config, image(), node_id, "follower.replication.throttled.rate")
        )
        self.replication = Replication(
            config, node_id, self.get, run_blocking, control, wake,
            throttle=(lambda tp: self._throttled(tp, "follower.replication.throttled.replicas"), follower_quota),
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
        await self.report_offline_replicas()
        await self.apply_image(self._image())
        self.replication.start()

    async def stop(self) -> None:
        await self.replication.stop()
        await self._run_blocking(self.logs.shutdown)

    async def apply_image(self, image: MetadataImage) -> None:
        """Lead or follow each local replica as ``image`` says (``replication``), after creating
        the logs of replicas a reassignment adds here and deleting those it moved away."""
        await self._sync_reassigned_logs(image)
        await self.replication.apply(image, lambda tp: self.logs.has_log(*tp))

    async def _sync_reassigned_logs(self, image: MetadataImage) -> None:
        offline = self.logs.offline_partitions()
        for topic in image.topics_by_name.values():
            if topic.is_diskless:
                continue
            for p in topic.partitions.values():
                tp = (topic.name, p.partition)
                here = self.logs.has_log(*tp)
                if self._node_id in p.adding_replicas and not here and tp not in offline:
                    configs = {n: v for n, v in topic.configs.items() if n in LOG_CONFIG_NAMES}
                    log.info("%s-%d: a reassignment adds a replica here; creating its log", *tp)
                    await self._run_blocking(
                        functools.partial(self.logs.create_log, is_new=True), topic.name, topic.topic_id,
                        p.partition, configs or None,
                    )
                elif self._node_id not in p.replicas and here:
                    log.info("%s-%d: a reassignment moved the replica off this broker; deleting its log", *tp)
                    self.replication.forget(tp)
                    await self._run_blocking(self.logs.delete_log, topic.name, p.partition)

    async def report_offline_replicas(self) -> None:
        """Tell the cluster which of this broker's replicas are on failed log dirs (KIP-112): they
        leave ISRs and their leaderships move. Replicas the image still lists as offline whose
        logs are back (the disk returned, or ``shoal log-dirs reset`` re-created them) are online again."""
        if self._control is None:
            return
        image = self._image()
        offline = [tp for tp in self.logs.offline_partitions() if self._is_replica(image, tp)]
        online = [
            (topic.name, p.partition)
            for topic in image.topics_by_name.values()
            for p in topic.partitions.values()
            if self._node_id in p.offline_replicas and self.logs.has_log(topic.name, p.partition)
            and (topic.name, p.partition) not in self.logs.offline_partitions()
        ]
        try:
            if offline:
                await self._run_blocking(self._control.replicas_offline, self._node_id, offline)
            if online:
                await self._run_blocking(self._control.replicas_offline, self._node_id, online, False)
        except Exception as exc:
            log.warning("reporting offline replicas failed: %s", exc)

    def effective_min_isr(self, topic: TopicImage, partition: PartitionImage) -> int:
        """Kafka's effectiveMinIsr: ``min.insync.replicas`` (the topic's, else the broker's), at most
        the replication factor."""
        value = topic.configs.get("min.insync.replicas")
        configured = int(value) if value is not None else self.default_min_isr
        return min(configured, len(partition.replicas))

    def replica_counts(self) -> dict[str, int]:
        """Replication figures for the metrics (ReplicaManager's gauges, read at scrape time)."""
        image = self._image()
        counts = dict.fromkeys(
            ("leaders", "partitions", "under_replicated", "under_min_isr", "at_min_isr", "offline"), 0
        )
        for topic in image.topics_by_name.values():
            if topic.is_diskless:
                continue
            for p in topic.partitions.values():
                if p.leader < 0:
                    counts["offline"] += 1
                if self._node_id in p.replicas:
                    counts["partitions"] += 1
                if p.leader != self._node_id:
                    continue
                counts["leaders"] += 1
                counts["under_replicated"] += len(p.isr) < len(p.replicas)
                effective = self.effective_min_isr(topic, p)
                counts["under_min_isr"] += len(p.isr) < effective
                counts["at_min_isr"] += len(p.isr) == effective
        counts["isr_shrinks"] = self.replication.isr_shrinks
        counts["isr_expands"] = self.replication.isr_expands
        return counts

    def find(self, topic: str, partition: int) -> PartitionLog | None:
        """The partition's log when this broker has it online, else None."""
        try:
            return self.get(topic, partition)
        except KafkaError:
            return None

    def is_offline_here(self, topic: str, partition: int) -> bool:
        """Whether this broker's replica of the partition sits on a failed log dir."""
        return (topic, partition) in self.logs.offline_partitions()

    def _is_replica(self, image: MetadataImage, tp: TopicPartition) -> bool:
        topic = image.topic(tp[0])
        p = topic.partitions.get(tp[1]) if topic is not None else None
        return p is not None and self._node_id in p.replicas

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
        for tp in event.offline_partitions:
            self.replication.forget(tp)
        if event.halt:
            self._on_halt(f"every log dir is offline (last: {event.log_dir})")
            return
        task = asyncio.ensure_future(self.report_offline_replicas())
        self._reports.add(task)
        task.add_done_callback(self._reports.discard)

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
        await self.apply_image(self._image())

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
        """Append as the leader, on the loop (so appends keep arrival order), under the current
        leader epoch. When the result says ``flush_needed`` (``flush.messages``), ``await
        flush(...)`` before acknowledging; with acks=all, ``await replicated(...)``."""
        state = self.replication.leader((topic, partition))
        result = state.log.append(records, batches, timestamp_type, leader_epoch=state.leader_epoch)
        state.advance_high_watermark()
        return result

    def check_enough_replicas(self, topic: str, partition: int, min_isr: int) -> None:
        """Before an acks=all append: NOT_ENOUGH_REPLICAS when the ISR is below ``min.insync.replicas``."""
        state = self.replication.leader((topic, partition))
        isr = state.isr
        latest = self._image().topic(topic)
        p = latest.partitions.get(partition) if latest is not None else None
        if p is not None and p.leader_epoch == state.leader_epoch:
            isr = p.isr  # the image may be ahead of the leader state (the controller fenced a follower)
        if len(isr) < min_isr:
            raise KafkaError(
                ErrorCode.not_enough_replicas,
                f"The size of the current ISR {list(isr)} is insufficient to satisfy the min.isr "
                f"requirement of {min_isr} for partition {topic}-{partition}",
            )

    def replicated(self, topic: str, partition: int, end_offset: int, min_isr: int) -> asyncio.Future[ErrorCode]:
        """Completes when the ISR has every offset below ``end_offset`` (acks=all)."""
        return self.replication.leader((topic, partition)).wait_for(end_offset, min_isr)

    async def flush(self, topic: str, partition: int) -> None:
        await self._run_blocking(self.get(topic, partition).flush)

    def read(
        self, topic: str, partition: int, offset: int, max_bytes: int, min_one_batch: bool, replica_id: int = -1
    ) -> ReadResult:
        """A consumer's read (below the high watermark) or, with ``replica_id``, a follower's (up to
        the log end; its fetch offset is its log end, which may move the high watermark)."""
        if replica_id < 0:
            return self.get(topic, partition).read(offset, max_bytes, min_one_batch)
        tp = (topic, partition)
        state = self.replication.leader(tp)
        if replica_id not in state.partition.replicas:
            raise KafkaError(
                ErrorCode.not_leader_or_follower,
                f"Broker {replica_id} fetched {topic}-{partition} as a follower but is not one of its replicas "
                f"{list(state.partition.replicas)}",
            )
        leo = state.log.log_end_offset
        throttled = self._throttled(tp, "leader.replication.throttled.replicas")
        if throttled and self.leader_quota.exceeded():
            result = ReadResult(b"", state.log.high_watermark, state.log.log_start_offset)
        else:
            result = state.log.read(offset, max_bytes, min_one_batch, committed_only=False)
            if throttled:
                self.leader_quota.record(len(result.records))
        self.replication.replica_fetched(tp, replica_id, offset, leo)
        return ReadResult(result.records, state.log.high_watermark, result.log_start_offset)

    def _throttled(self, tp: TopicPartition, config_name: str) -> bool:
        """Whether this broker's replica of ``tp`` is in the topic's throttled replicas list."""
        topic = self._image().topic(tp[0])
        return topic is not None and is_throttled(topic.configs, config_name, tp[1], self._node_id)

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
