"""Builds the partitions seam and its kinds for a broker: the classic replica manager on the
JBOD log dirs, and the diskless data plane (appender, reader, range cache, cache replicas,
retention, object cleaner) on the Batch Coordinator and object storage; with
``remote.log.storage.system.enable``, tiered storage of both kinds (the remote log manager on the
same object storage and ``remote_log_metadata``)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import replace
from functools import partial
from typing import Any

from shoal.cache_replicas.manager import CacheReplicas
from shoal.classic.log_config import LogConfig
from shoal.classic.replica_manager import ReplicaManager, log_config_for
from shoal.cluster.partition_control import PartitionControl
from shoal.config import Config
from shoal.coordinator.api import BatchCoordinator, TopicIdPartition
from shoal.diskless.append import Appender
from shoal.diskless.cache import RangeCache
from shoal.diskless.cleaner import ObjectCleaner
from shoal.diskless.log_cleaner import DisklessLogCleaner
from shoal.diskless.read import DisklessReader
from shoal.diskless.retention import RetentionTask
from shoal.metadata.image import MetadataImage, TopicImage
from shoal.objects.storage import ObjectStorage
from shoal.observability.cleaner_metrics import track_cleaners
from shoal.observability.metrics import BrokerMetrics
from shoal.observability.remote_metrics import track_remote_log
from shoal.partitions.classic import ClassicPartitions
from shoal.partitions.diskless import DisklessPartitions
from shoal.partitions.manager import Partitions
from shoal.partitions.notify import CommitNotifier
from shoal.remote_log.diskless_chains import DisklessChains
from shoal.remote_log.manager import RemoteLogManager
from shoal.tiered.api import RemoteLogMetadataManager
from shoal.tiered.storage_manager import ObjectRemoteStorageManager


def chain_config(config: Config, topic: TopicImage) -> LogConfig:
    """A tiering chain's log settings: the topic's segment settings; a segment goes once it is
    in remote storage (local retention 0 bytes behind ``highest_offset_in_remote``), never fsynced
    (the coordinator holds the data until the copy finished)."""
    return replace(
        log_config_for(config, topic), retention_ms=-1, retention_bytes=0, cleanup_delete=True,
        remote_storage_enable=True, flush_messages=2**63 - 1, flush_ms=2**63 - 1,
    )


def build_partitions(
    config: Config,
    node_id: int,
    cluster_id: str,
    image: Callable[[], MetadataImage],
    coordinator: BatchCoordinator,
    storage: ObjectStorage,
    metrics: BrokerMetrics,
    run_blocking: Callable[..., Awaitable[Any]],
    on_halt: Callable[[str], None],
    is_controller: Callable[[], bool] = lambda: True,
    control: PartitionControl | None = None,
    remote_log_metadata: RemoteLogMetadataManager | None = None,
    finish_tiering_disablement: Callable[[Any, int], object] | None = None,
) -> Partitions:
    """Wire every kind; nothing runs until ``Partitions.start``. Diskless retention and the object
    cleaner run only while ``is_controller()`` (once per cluster). ``control`` decides classic
    ISR and leadership changes (none: a broker without replication, in tests)."""
    notifier = CommitNotifier()

    def wake_follower_reads(tp: tuple[str, int]) -> None:
        topic = image().topic(tp[0])
        if topic is not None:
            notifier.committed([(topic.topic_id, tp[1])])

    replicas = ReplicaManager(
        config, node_id, cluster_id, run_blocking, image, on_halt, control=control, wake=wake_follower_reads
    )
    metrics.track_log_dirs(replicas.logs)
    metrics.track_replicas(replicas)
    cache = RangeCache(config["diskless.fetch.cache.max.bytes"])
    metrics.track_cache(cache)
    reader = DisklessReader(storage, coordinator, run_blocking, cache, metrics)
    remote = None
    if config["remote.log.storage.system.enable"] and remote_log_metadata is not None:
        chains = DisklessChains(config.log_dirs, coordinator, reader, run_blocking, partial(chain_config, config))
        remote = RemoteLogManager(
            node_id, config["remote.log.manager.task.interval.ms"], image, replicas.find,
            ObjectRemoteStorageManager(storage), remote_log_metadata, run_blocking, is_controller,
            finish_tiering_disablement, chains, partial(log_config_for, config), config["remote.fetch.max.wait.ms"],
        )
        track_remote_log(metrics.registry, remote)
        replicas.replication.tiered_state = remote.aux_state
    classic = ClassicPartitions(replicas, notifier.committed, remote)

    caches = CacheReplicas(config, node_id, image, reader, coordinator, run_blocking, control, notifier.committed)
    metrics.caches.track(caches)

    def committed(ends: dict[TopicIdPartition, int]) -> None:
        """A WAL segment committed (``ends``: each partition's next offset): long-polls of those
        partitions wake, except where an in-sync cache replica here will wake them once it has
        the records (so they read them from it)."""
        waiting_on_cache = caches.committed({(tp.topic_id, tp.partition): end for tp, end in ends.items()})
        notifier.committed(k for k in ((tp.topic_id, tp.partition) for tp in ends) if k not in waiting_on_cache)

    appender = Appender(
        storage,
        coordinator,
        run_blocking,
        node_id,
        config["diskless.append.commit.interval.ms"],
        config["diskless.append.buffer.max.bytes"],
        cache,
        committed,
        metrics,
    )
    retention = RetentionTask(
        coordinator,
        run_blocking,
        image,
        config.topic_default,
        interval_ms=config["log.retention.check.interval.ms"],
        metrics=metrics,
    )
    cleaner = ObjectCleaner(
        storage,
        coordinator,
        run_blocking,
        interval_ms=config["diskless.object.cleaner.interval.ms"],
        delete_grace_ms=config["diskless.object.delete.grace.ms"],
        orphan_min_age_ms=config["diskless.object.orphan.min.age.ms"],
        metrics=metrics,
    )
    log_cleaner = DisklessLogCleaner(
        coordinator,
        storage,
        run_blocking,
        image,
        config.topic_default,
        broker_id=node_id,
        interval_ms=config["log.cleaner.backoff.ms"],
        dedupe_buffer_size=config["log.cleaner.dedupe.buffer.size"],
        io_max_bytes_per_second=config["log.cleaner.io.max.bytes.per.second"],
        enabled=config["log.cleaner.enable"],
    )
    track_cleaners(metrics.registry, [replicas.logs.cleaner.gauges, log_cleaner.gauges])
    retention.runs_here = cleaner.runs_here = log_cleaner.runs_here = is_controller
    diskless = DisklessPartitions(
        coordinator, appender, reader, [retention, cleaner, log_cleaner], run_blocking, image, caches, remote
    )
    return Partitions(config, image, {"classic": classic, "diskless": diskless}, classic, notifier, metrics)
