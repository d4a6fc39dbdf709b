"""Where cache logs live on disk and how they are opened, made and dropped.

Each log dir has a ``diskless-cache`` folder (the classic log manager skips it) holding one ``<topic>-<partition>`` dir per cached partition, in
Kafka's segment format with its ``partition.metadata``, so ``shoal dump-log`` and Kafka's tools
read it. A cache is safe to lose, so after a crash (no clean-shutdown marker) every cache is
deleted and rebuilt rather than recovered; after a clean stop the caches are opened as they are.

Cache logs obey the topic's segment settings and its *local* retention (``local.retention.ms``
and ``local.retention.bytes``, -2 meaning ``retention.ms`` / ``retention.bytes``), whatever the
cleanup policy: a cache only ever shrinks from its oldest end. Methods here touch the disk: run
them on a worker thread.
"""

from __future__ import annotations

import logging
import os
import shutil
import uuid
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

from shoal.classic.checkpoint import PARTITION_METADATA, parse_kafka_uuid, read_partition_metadata
from shoal.classic.failure import LogDirFailureChannel
from shoal.classic.log import PartitionLog
from shoal.classic.log_config import LogConfig
from shoal.classic.log_manager_startup import DISKLESS_CACHE_DIR
from shoal.metadata.image import TopicImage

log = logging.getLogger(__name__)

CACHE_DIR = DISKLESS_CACHE_DIR
CLEAN_SHUTDOWN = ".clean-shutdown"

#: A cached partition: (topic id, partition index).
CacheKey = tuple[uuid.UUID, int]


def cache_log_config(base: LogConfig, topic: TopicImage, topic_default: Callable[[str], object]) -> LogConfig:
    """The topic's log settings with its local retention in place of its retention."""

    def local(name: str, fallback: int) -> int:
        value = topic.configs.get(f"local.{name}")
        if value is None:
            default = topic_default(f"local.{name}")
            value = -2 if default is None else default
        value = int(value)  # type: ignore[call-overload]
        return fallback if value == -2 else value

    return replace(
        base,
        retention_ms=local("retention.ms", base.retention_ms),
        retention_bytes=local("retention.bytes", base.retention_bytes),
        cleanup_delete=True,
        remote_storage_enable=False,  # a tiered topic's cache drops segments by local retention alone
        flush_messages=2**63 - 1,  # a cache is never fsynced for durability
        flush_ms=2**63 - 1,
    )


class _CacheFailures(LogDirFailureChannel):
    """A cache log's failures stay its own (one channel per cache log) and are not a log dir
    failure: the filler logs them once and starts the cache over."""

    def maybe_add_offline_dir(self, log_dir: str, message: str, error: BaseException | None = None) -> None:
        with self._lock:
            self._offline.setdefault(log_dir, message)


class CacheLogs:
    """The cache folders of this broker's log dirs."""

    def __init__(self, log_dirs: Sequence[str]) -> None:
        self.roots = [Path(os.path.abspath(d)) / CACHE_DIR for d in log_dirs]
        self._counts = {root: 0 for root in self.roots}

    def load(self, config_for: Callable[[uuid.UUID], LogConfig | None]) -> dict[CacheKey, PartitionLog]:
        """Open the caches a clean stop left (``config_for`` gives None for a topic that is gone:
        its cache is deleted); after a crash, delete them all."""
        found: dict[CacheKey, PartitionLog] = {}
        for root in self.roots:
            try:
                root.mkdir(parents=True, exist_ok=True)
                clean = (root / CLEAN_SHUTDOWN).exists()
                (root / CLEAN_SHUTDOWN).unlink(missing_ok=True)
                entries = sorted(root.iterdir())
            except OSError as exc:
                log.warning("cache dir %s is unusable, caching without it: %s", root, exc)
                continue
            for entry in entries:
                opened = self._open(entry, config_for) if clean and entry.is_dir() else None
                if opened is None:
                    _remove(entry)
                    continue
                key, partition_log = opened
                if key in found:  # the same partition in two log dirs: keep one
                    _remove(entry)
                    partition_log.close_handles()
                    continue
                found[key] = partition_log
                self._counts[root] += 1
        return found

    def _open(
        self, entry: Path, config_for: Callable[[uuid.UUID], LogConfig | None]
    ) -> tuple[CacheKey, PartitionLog] | None:
        topic_name, _, index = entry.name.rpartition("-")
        stored = read_partition_metadata(entry / PARTITION_METADATA)
        if not topic_name or not index.isdigit() or stored is None:
            return None
        topic_id = parse_kafka_uuid(stored)
        config = config_for(topic_id) if topic_id is not None else None
        if topic_id is None or config is None:
            return None
        try:
            partition_log = PartitionLog.open(
                entry, topic_name, int(index), config, topic_id=topic_id, log_dir=str(entry.parent),
                channel=_CacheFailures(), clean_shutdown=True,
            )
        except Exception as exc:  # anything odd about a cache: rebuild it
            log.info("dropping the cache %s: %s", entry, exc)
            return None
        partition_log.hw_follows_leo = True
        return (topic_id, int(index)), partition_log

    def create(self, topic: TopicImage, partition: int, start_offset: int, config: LogConfig) -> PartitionLog:
        """An empty cache log at ``start_offset`` in the cache folder holding the fewest."""
        usable = [r for r in self.roots if _usable(r)]
        if not usable:
            raise OSError(f"no usable cache dir among {[str(r) for r in self.roots]}")
        root = min(usable, key=lambda r: self._counts[r])
        directory = root / f"{topic.name}-{partition}"
        _remove(directory)  # a cache of an older topic of the same name
        partition_log = PartitionLog.create(
            directory, topic.name, partition, topic.topic_id, config, log_dir=str(root),
            channel=_CacheFailures(), start_offset=start_offset,
        )
        partition_log.hw_follows_leo = True
        self._counts[root] += 1
        return partition_log

    def drop(self, partition_log: PartitionLog) -> None:
        """Forget a cache and delete its files."""
        partition_log.close_handles()
        root = partition_log.directory.parent
        if root in self._counts:
            self._counts[root] = max(self._counts[root] - 1, 0)
        _remove(partition_log.directory)

    def close(self, logs: Sequence[PartitionLog]) -> None:
        """Clean stop: close every cache and mark the folders, so the next start keeps them."""
        for partition_log in logs:
            try:
                partition_log.close()
            except Exception as exc:
                log.info("closing the cache %s failed, it will be rebuilt: %s", partition_log.directory, exc)
                return  # no marker: the next start deletes and rebuilds
        for root in self.roots:
            try:
                if root.is_dir():
                    (root / CLEAN_SHUTDOWN).touch()
            except OSError:
                pass


def _usable(root: Path) -> bool:
    try:
        root.mkdir(parents=True, exist_ok=True)
        return os.access(root, os.W_OK)
    except OSError:
        return False


def _remove(path: Path) -> None:
    try:
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
    except OSError:
        pass
