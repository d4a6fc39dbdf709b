"""This broker's diskless cache replicas: which it holds (as the metadata image says), serving
consumers from them, and the ISR duties of the leader and of the replicas (see the package
docstring). The diskless kind calls ``read`` before reading object storage directly."""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from shoal.cache_replicas.cache_log import CacheLogs, cache_log_config
from shoal.cache_replicas.filler import CacheFiller, FillSettings
from shoal.cache_replicas.leader import LeaderIsr
from shoal.cache_replicas.replica import CacheReplica, Key
from shoal.cache_replicas.reporter import PositionReporter, ReportSettings
from shoal.classic.log_config import LogConfig
from shoal.classic.replica_manager import log_config_for
from shoal.cluster.partition_control import PartitionControl
from shoal.config import Config
from shoal.coordinator.api import BatchCoordinator
from shoal.diskless.read import DisklessReader
from shoal.metadata.image import MetadataImage, TopicImage
from shoal.protocol.errors import ErrorCode, KafkaError
from shoal.records.codec import iter_batches

log = logging.getLogger(__name__)



def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class CacheRead:
    """A read answered from a cache log: records, and the coordinator's offsets as last learnt."""

    __slots__ = ("aborted_transactions", "high_watermark", "last_stable_offset", "log_start_offset", "records")

    def __init__(
        self,
        records: bytes,
        high_watermark: int,
        log_start_offset: int,
        *,
        last_stable_offset: int = -1,
        aborted_transactions: tuple[tuple[int, int], ...] | None = None,
    ) -> None:
        self.records, self.high_watermark, self.log_start_offset = records, high_watermark, log_start_offset
        #: READ_COMMITTED reads: where they stop and the aborted transactions of the records.
        self.last_stable_offset = high_watermark if last_stable_offset < 0 else last_stable_offset
        self.aborted_transactions = aborted_transactions


class CacheReplicas:
    def __init__(
        self,
        config: Config,
        node_id: int,
        image: Callable[[], MetadataImage],
        reader: DisklessReader,
        coordinator: BatchCoordinator,
        run_blocking: Callable[..., Awaitable[Any]],
        control: PartitionControl | None,
        wake: Callable[[Iterable[Key]], None],
    ) -> None:
        self._config = config
        self._node_id = node_id
        self._image = image
        self._run_blocking = run_blocking
        self._wake = wake
        self.lag_ms: int = config["replica.lag.time.max.ms"]
        self.replicas: dict[Key, CacheReplica] = {}
        self._logs = CacheLogs(config.log_dirs)
        self.filler = CacheFiller(
            lambda: list(self.replicas.values()),
            self._logs,
            reader,
            coordinator,
            run_blocking,
            FillSettings(
                start_bytes=config["diskless.replica.cache.start.bytes"],
                interval_ms=config["diskless.replica.fetch.interval.ms"],
                max_bytes=config["replica.fetch.response.max.bytes"],
                partition_max_bytes=config["replica.fetch.max.bytes"],
                retention_check_ms=config["log.retention.check.interval.ms"],
            ),
            self._log_config,
            self._appended,
        )
        self.leadership = LeaderIsr(node_id, self.lag_ms, control, run_blocking, image)
        self._reporter = PositionReporter(
            ReportSettings(
                node_id=node_id,
                interval_ms=config["diskless.replica.fetch.interval.ms"],
                max_wait_ms=config["replica.fetch.wait.max.ms"],
                socket_timeout_ms=config["replica.socket.timeout.ms"],
            ),
            image,
            lambda: list(self.replicas.values()),
        )
        #: Bytes consumers were served from cache logs.
        self.cache_read_bytes = 0

    def _compacted(self, topic: TopicImage) -> bool:
        """``cleanup.policy`` includes ``compact``: reads go to the coordinator, whose batches the
        diskless log cleaner compacts (a cache would keep serving what it removed)."""
        policy = topic.configs.get("cleanup.policy")
        items = policy.split(",") if isinstance(policy, str) else self._config.topic_default("cleanup.policy")
        return "compact" in {str(p).strip() for p in items}

    def _log_config(self, topic: TopicImage) -> LogConfig:
        return cache_log_config(log_config_for(self._config, topic), topic, self._config.topic_default)

    # ------------------------------------------------------------------------------- lifecycle

    async def start(self) -> None:
        image = self._image()

        def config_for(topic_id: Any) -> LogConfig | None:
            topic = image.topics_by_id.get(topic_id)
            return self._log_config(topic) if topic is not None and topic.is_diskless else None

        loaded = await self._run_blocking(self._logs.load, config_for)
        await self.publish(image)
        for key, cache in loaded.items():
            r = self.replicas.get(key)
            if r is None:
                await self._run_blocking(self._logs.drop, cache)
            else:
                r.log = cache
                log.info("%s: cache kept from the last run (offsets %d..%d)", r.name,
                         cache.log_start_offset, cache.log_end_offset)
        self.filler.start()
        self.leadership.start(lambda: self.replicas)
        self._reporter.start()

    async def stop(self) -> None:
        await self._reporter.stop()
        await self.leadership.stop()
        await self.filler.stop()
        logs = [r.log for r in self.replicas.values() if r.log is not None]
        await self._run_blocking(self._logs.close, logs)

    async def publish(self, image: MetadataImage) -> None:
        """Hold a cache for every diskless partition ``image`` places a replica of here."""
        wanted: dict[Key, TopicImage] = {}
        for topic in image.topics_by_name.values():
            if topic.is_diskless:
                for p in topic.partitions.values():
                    if self._node_id in p.replicas:
                        wanted[(topic.topic_id, p.partition)] = topic
        # Gone ones first: a re-created topic of the same name caches into the same dir.
        for key in set(self.replicas) - set(wanted):
            r = self.replicas.pop(key)
            if r.log is not None:
                log.info("%s: no longer a replica here, deleting its cache", r.name)
                await self._run_blocking(self._logs.drop, r.log)
        added = False
        for key, topic in wanted.items():
            r = self.replicas.get(key)
            if r is None:
                r = self.replicas[key] = CacheReplica(topic, key[1])
                if self._node_id in topic.partitions[key[1]].isr:
                    # In the ISR already (a new partition, a restart): as Kafka gives a follower
                    # at a new leadership, the cache has replica.lag.time.max.ms to catch up.
                    r.progress.caught_up_ms = _now_ms()
                added = True
            elif r.topic is not topic:
                configs_changed = r.topic.configs != topic.configs
                r.topic = topic
                if configs_changed:
                    self.filler.update_configs([r])
        self.leadership.apply(image)
        if added:
            self.filler.poke()

    def committed(self, ends: Mapping[Key, int]) -> set[Key]:
        """This broker committed an object (``ends``: each partition's next offset): fill those
        partitions' caches now (its data is in the range cache). Until a cache holds those records
        it reads nothing from its end, so a fetch after the produce's answer sees them. Returns
        the partitions whose in-sync cache will wake their long-polls once it has appended."""
        now = _now_ms()
        waking = set()
        for key, end in ends.items():
            r = self.replicas.get(key)
            if r is not None:
                r.committed_end = max(r.committed_end, end)
                if r.log is not None and r.progress.in_sync(now, self.lag_ms):
                    waking.add(key)
        self.filler.poke(ends)
        return waking

    def _appended(self, replicas: Iterable[CacheReplica]) -> None:
        replicas = list(replicas)
        self._wake(r.key for r in replicas)
        self._reporter.moved()

    # ------------------------------------------------------------------------------------ reads

    def read(self, key: Key, offset: int, max_bytes: int, min_one_batch: bool, *,
             caught_up_since_ms: int | None = None, read_committed: bool = False) -> CacheRead | None:
        """The records at ``offset`` from the cache, or None when it cannot serve them (no cache,
        not in sync with the coordinator, or the offset is outside it; at its end, with
        ``caught_up_since_ms``, only when a fill round that began then or later caught up): read
        directly then."""
        r = self.replicas.get(key)
        if r is None or not r.covers(offset) or not r.progress.in_sync(_now_ms(), self.lag_ms):
            return None
        if self._compacted(r.topic):
            return None  # the log cleaner rewrites the coordinator's batches, not this copy
        if caught_up_since_ms is not None and offset == r.cache_end and r.progress.caught_up_ms < caught_up_since_ms:
            return None
        if r.committed_end > r.cache_end:
            return None  # behind a commit of this broker: a produce was answered, the cache lacks it
        assert r.log is not None
        bound = r.committed_bound() if read_committed else None
        if read_committed and (bound is None or offset > bound):
            return None  # the coordinator knows the transactions: read directly
        try:
            result = r.log.read(offset, max_bytes, min_one_batch, max_offset=bound)
        except KafkaError:
            return None  # retention moved the cache start meanwhile, or the cache failed
        records = bytes(result.records)
        self.cache_read_bytes += len(records)
        hw = max(r.high_watermark, r.log.log_end_offset)
        if not read_committed:
            return CacheRead(records, hw, r.log_start)
        assert bound is not None
        end = offset
        for _, header in iter_batches(records):
            end = header.next_offset
        return CacheRead(records, hw, r.log_start, last_stable_offset=bound,
                         aborted_transactions=r.aborted_between(offset, end) if records else ())

    def follower_fetch(self, key: Key, replica_id: int, position: int) -> tuple[ErrorCode, int, int]:
        """A replica's (empty) Fetch reached this leader: (error, high watermark, log start)."""
        r = self.replicas.get(key)
        hw = r.high_watermark if r is not None else -1
        error = self.leadership.follower_fetch(key, replica_id, position, hw)
        return error, hw, r.log_start if r is not None else -1

    # ---------------------------------------------------------------------------------- metrics

    def lags(self) -> Mapping[tuple[str, int], tuple[int, int, bool]]:
        """Per cached partition: (offsets behind the coordinator, ms since caught up, in sync)."""
        now = _now_ms()
        return {
            (r.topic.name, r.partition): (
                r.lag_offsets(), max(now - r.progress.caught_up_ms, 0) if r.progress.caught_up_ms else -1,
                r.progress.in_sync(now, self.lag_ms),
            )
            for r in self.replicas.values()
        }

    def filled_bytes(self) -> int:
        return self.filler.bytes_filled

    def cache_bytes(self) -> int:
        return sum(r.log.size for r in self.replicas.values() if r.log is not None and not r.log.is_closed)
