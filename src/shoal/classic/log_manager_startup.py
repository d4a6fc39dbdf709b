"""``LogManager`` start-up: checking and loading each log dir, recovering its logs after a crash,
resuming future replicas, and the isNewReplica rule (the whole story is in ``log_manager``).
"""

from __future__ import annotations

import errno
import logging
import os
import re
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from shoal.classic.checkpoint import (
    LOG_START_OFFSET_CHECKPOINT,
    META_PROPERTIES,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    fsync_dir,
    has_clean_shutdown,
    new_kafka_uuid,
    read_meta_properties,
    read_offset_checkpoint,
    remove_clean_shutdown,
    write_meta_properties,
)
from shoal.classic.failure import storage_error
from shoal.classic.future_replica import FutureReplicaMove, delete_dir_name
from shoal.classic.log import PartitionLog
from shoal.protocol.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from shoal.classic.log_manager import TopicPartition

__all__ = ["LogDirConfigError", "StartupMixin"]

# One logger for all of LogManager, whichever of its modules logs.
_log = logging.getLogger("shoal.classic.log_manager")

_SPECIAL_DIR = re.compile(r"^(?P<topic>.+)-(?P<partition>\d+)\.(?P<id>[0-9a-f]{32})-(?P<kind>delete|future)$")
_PARTITION_DIR = re.compile(r"^(?P<topic>.+)-(?P<partition>\d+)$")

#: The folder of a log dir where diskless cache replicas keep their cache logs (``cache_replicas``).
DISKLESS_CACHE_DIR = "diskless-cache"
#: The folder where leaders of tiered diskless partitions build their segments (``remote_log``).
DISKLESS_TIERING_DIR = "diskless-tiering"


class LogDirConfigError(Exception):
    """A log dir belongs to another cluster or node: Kafka refuses to start, and so do we."""


class StartupMixin:
    """``LogManager``'s start-up and log-dir loading (the state is set up in ``LogManager.__init__``)."""

    def startup(self) -> None:
        """Load every good dir (recovering after a crash) and apply the isNewReplica rule."""
        with self._lock:
            for log_dir in self.log_dirs:
                try:
                    self._load_dir(log_dir)
                except KafkaError as e:
                    if e.code != ErrorCode.kafka_storage_error:
                        raise
            self._attach_pending_futures()
            for tp in self._expected:
                if tp not in self._logs and tp not in self._offline:
                    self._offline[tp] = None
                    _log.error(
                        "Partition %s-%d was created on this broker before but is in no online log dir; "
                        "it stays offline until the log dir is reset",
                        *tp,
                    )
            self._started = True
        if not self.online_dirs():
            raise storage_error(f"Every log dir is offline: {self.channel.offline_dirs()}")

    def _check_meta_properties(self, path: Path) -> None:
        meta_path = path / META_PROPERTIES
        props = read_meta_properties(meta_path)
        if props is None:
            props = {
                "node.id": str(self.node_id),
                "directory.id": new_kafka_uuid(),
                "version": "1",
                "cluster.id": self.cluster_id,
            }
            write_meta_properties(meta_path, props)
        else:
            stored_cluster = props.get("cluster.id")
            if stored_cluster and stored_cluster != self.cluster_id:
                raise LogDirConfigError(
                    f"Invalid cluster.id in: {meta_path}. Expected {self.cluster_id}, but read {stored_cluster}"
                )
            stored_node = props.get("node.id", props.get("broker.id"))
            if stored_node is not None and stored_node != str(self.node_id):
                raise LogDirConfigError(
                    f"Stored node id {stored_node} doesn't match previous node id {self.node_id} in {meta_path}"
                )
            if "directory.id" not in props or props.get("version") != "1":
                props = {
                    "node.id": str(self.node_id),
                    "directory.id": props.get("directory.id") or new_kafka_uuid(),
                    "version": "1",
                    "cluster.id": self.cluster_id,
                }
                write_meta_properties(meta_path, props)
        self.directory_ids[str(path)] = props["directory.id"]

    def _load_dir(self, log_dir: str) -> None:
        """Load one log dir; any OSError puts it offline (KafkaError KAFKA_STORAGE_ERROR)."""
        with self.channel.guard(log_dir, "loading log dir"):
            path = Path(log_dir)
            if not path.exists():
                path.mkdir(parents=True)
            if not path.is_dir():
                raise NotADirectoryError(errno.ENOTDIR, "is not a directory", log_dir)
            if not os.access(path, os.R_OK | os.W_OK | os.X_OK):
                raise PermissionError(errno.EACCES, "is not a readable and writable directory", log_dir)
            self._check_meta_properties(path)
            clean = has_clean_shutdown(path)
            recovery_points = read_offset_checkpoint(path / RECOVERY_POINT_CHECKPOINT)
            log_starts = read_offset_checkpoint(path / LOG_START_OFFSET_CHECKPOINT)
            high_watermarks = read_offset_checkpoint(path / REPLICATION_OFFSET_CHECKPOINT)
            remove_clean_shutdown(path)
            for entry in sorted(os.listdir(path)):
                child = path / entry
                if not child.is_dir():
                    continue
                special = _SPECIAL_DIR.match(entry)
                if special and special["kind"] == "delete":
                    shutil.rmtree(child)
                    continue
                match = special or _PARTITION_DIR.match(entry)
                if match is None and entry in (DISKLESS_CACHE_DIR, DISKLESS_TIERING_DIR):
                    continue
                if match is None:
                    _log.warning("Ignoring %s: not a partition dir (<topic>-<partition>)", child)
                    continue
                tp = (match["topic"], int(match["partition"]))
                loaded = self._pending_futures.get(tp) if special else self._logs.get(tp)
                if loaded is not None and loaded.directory == child:
                    continue  # already loaded from here (reset_dir of a dir that stayed online)
                log = PartitionLog.open(
                    child,
                    tp[0],
                    tp[1],
                    self._config(tp[0]),
                    log_dir=log_dir,
                    channel=self.channel,
                    clock=self._clock,
                    recovery_point=recovery_points.get(tp, 0),
                    log_start_offset=log_starts.get(tp, 0),
                    high_watermark=high_watermarks.get(tp),
                    clean_shutdown=clean,
                    is_future=bool(special),
                )
                if special:
                    self._pending_futures[tp] = log
                else:
                    self._add_loaded(tp, log)
            fsync_dir(path)

    def _add_loaded(self, tp: TopicPartition, log: PartitionLog) -> None:
        """Register a loaded log; of two copies (a crash mid-move), keep the longer one."""
        other = self._logs.get(tp)
        if other is not None:
            keep, drop = (other, log) if other.log_end_offset >= log.log_end_offset else (log, other)
            _log.warning(
                "Partition %s-%d found in %s and %s (a move interrupted by a crash); keeping the copy in %s",
                *tp,
                other.log_dir,
                log.log_dir,
                keep.log_dir,
            )
            drop.close_handles()
            drop.rename_dir(drop.directory.with_name(delete_dir_name(*tp)))
            drop.delete_dir()
            log = keep
        self._logs[tp] = log
        self._offline.pop(tp, None)

    def _attach_pending_futures(self) -> None:
        for tp, future in list(self._pending_futures.items()):
            current = self._logs.get(tp)
            del self._pending_futures[tp]
            if current is None or current.log_dir == future.log_dir or future.is_offline:
                _log.warning(
                    "Future replica %s has no current replica to follow; leaving it", future.directory
                )
                future.close_handles()
                continue
            self._moves[tp] = FutureReplicaMove(current, future, self.channel)
