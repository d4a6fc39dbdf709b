"""The broker's classic logs across its JBOD log dirs (Kafka's LogManager, with KIP-112 failures).

Start-up (``startup``, on a worker thread: recovery reads whole segments):

- each dir in ``log.dirs`` is created if missing; one that is not a usable directory (a regular
  file, unreadable, any OSError) goes offline, the others load. ``meta.properties`` is checked
  (cluster id, node id) or written with a fresh ``directory.id``.
- without the clean-shutdown marker, each partition is recovered from its recovery point
  (``recovery-point-offset-checkpoint``); with it, recovery is skipped. The marker is removed
  as loading starts, so a crash from then on means recovery next time.
- ``<topic>-<p>.<id>-delete`` dirs are removed; ``-future`` dirs resume their move.
- the isNewReplica rule (KIP-112): ``expected`` names the partitions the metadata says this
  broker hosts and that were created before. One of them missing from every good dir is
  *offline* (its data may be on a failed disk, or the disk was replaced), never silently
  re-created empty: ``get_log`` and ``create_log(..., is_new=False)`` answer
  KAFKA_STORAGE_ERROR for it. Only ``create_log(..., is_new=True)`` (the controller says the
  replica is new) or an operator's ``reset_dir`` (the disk was fixed and the loss accepted)
  lets it be created again. A partition neither expected nor new is created when no dir is
  offline, and refused while one is (it could be on the failed dir), as the KIP says.

At run time any OSError in a dir's files reaches the ``LogDirFailureChannel``: the dir goes
offline, its logs are closed and dropped, their partitions answer KAFKA_STORAGE_ERROR, and
``on_dir_failure`` tells the broker (with ``halt=True`` once every dir is offline, when Kafka
stops the broker). The callback runs in whichever thread hit the error: make it thread-safe
(``loop.call_soon_threadsafe``).

Background work (``start``/``stop`` run it on one daemon thread; ``run_periodic_tasks`` does one
round synchronously): flushing (``flush.ms``, ``flush.messages``, rolled segments), retention
every ``log.retention.check.interval.ms``, the three offset checkpoints at Kafka's intervals,
producer-id expiry, and copying future replicas. ``shutdown`` closes every log (fsync), writes
the checkpoints and leaves the clean-shutdown marker in every dir still online.

Deleting a partition renames it to ``<topic>-<p>.<id>-delete`` and then removes it at once
(Kafka waits ``file.delete.delay.ms``): call ``delete_log`` from a worker thread.
"""

from __future__ import annotations

import errno
import logging
import os
import re
import shutil
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from shoal.classic.checkpoint import (
    LOG_START_OFFSET_CHECKPOINT,
    META_PROPERTIES,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    fsync_dir,
    has_clean_shutdown,
    kafka_uuid_str,
    new_kafka_uuid,
    read_meta_properties,
    read_offset_checkpoint,
    remove_clean_shutdown,
    write_clean_shutdown,
    write_meta_properties,
    write_offset_checkpoint,
)
from shoal.classic.failure import LogDirFailureChannel, storage_error
from shoal.classic.future_replica import FutureReplicaMove, delete_dir_name
from shoal.classic.log import PartitionLog
from shoal.classic.log_config import LogConfig
from shoal.protocol.errors import ErrorCode, KafkaError

__all__ = ["LogDirConfigError", "LogDirFailureEvent", "LogManager", "TopicPartition"]

_log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]

_SPECIAL_DIR = re.compile(r"^(?P<topic>.+)-(?P<partition>\d+)\.(?P<id>[0-9a-f]{32})-(?P<kind>delete|future)$")
_PARTITION_DIR = re.compile(r"^(?P<topic>.+)-(?P<partition>\d+)$")


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class LogDirConfigError(Exception):
    """A log dir belongs to another cluster or node: Kafka refuses to start, and so do we."""


@dataclass(frozen=True, slots=True)
class LogDirFailureEvent:
    """What the broker hears when a log dir goes offline."""

    log_dir: str
    message: str
    offline_partitions: list[TopicPartition]
    #: Every log dir is offline: Kafka halts the broker.
    halt: bool


@dataclass(slots=True)
class _Intervals:
    """Kafka's broker settings for the background tasks (ms)."""

    flush_check: int = 1000
    retention_check: int = 300_000  # log.retention.check.interval.ms
    recovery_point_checkpoint: int = 60_000  # log.flush.offset.checkpoint.interval.ms
    log_start_checkpoint: int = 60_000  # log.flush.start.offset.checkpoint.interval.ms
    high_watermark_checkpoint: int = 5_000  # replica.high.watermark.checkpoint.interval.ms
    producer_expiration_check: int = 600_000  # producer.id.expiration.check.interval.ms
    next_due: dict[str, int] = field(default_factory=dict)


class LogManager:
    """Every classic log of this broker, across its log dirs (see the module docstring)."""

    def __init__(
        self,
        log_dirs: Sequence[str | Path],
        node_id: int,
        cluster_id: str,
        *,
        default_config: LogConfig | None = None,
        config_for: Callable[[str], LogConfig] | None = None,
        expected: Iterable[TopicPartition] = (),
        on_dir_failure: Callable[[LogDirFailureEvent], None] | None = None,
        clock: Callable[[], int] | None = None,
        broker_epoch: int = -1,
        flush_check_interval_ms: int = 1000,
        retention_check_interval_ms: int = 300_000,
        recovery_point_checkpoint_interval_ms: int = 60_000,
        log_start_checkpoint_interval_ms: int = 60_000,
        high_watermark_checkpoint_interval_ms: int = 5_000,
        producer_expiration_check_interval_ms: int = 600_000,
    ) -> None:
        if not log_dirs:
            raise ValueError("at least one log dir is needed")
        self.log_dirs = [os.path.abspath(str(d)) for d in log_dirs]
        self.node_id = node_id
        self.cluster_id = cluster_id
        self.broker_epoch = broker_epoch
        self.default_config = default_config or LogConfig()
        self._config_for = config_for
        self._expected: set[TopicPartition] = set(expected)
        self._on_dir_failure = on_dir_failure
        self._clock = clock or _wall_clock_ms
        self.channel = LogDirFailureChannel()
        self.channel.add_listener(self._on_dir_offline)
        self._lock = threading.RLock()
        self._logs: dict[TopicPartition, PartitionLog] = {}
        self._moves: dict[TopicPartition, FutureReplicaMove] = {}
        self._pending_futures: dict[TopicPartition, PartitionLog] = {}
        #: Offline partition -> the dir it was on (None: missing from every good dir at start-up).
        self._offline: dict[TopicPartition, str | None] = {}
        #: Released by ``reset_dir``: may be created again even with ``is_new=False``.
        self._recreatable: set[TopicPartition] = set()
        self.directory_ids: dict[str, str] = {}
        self._intervals = _Intervals(
            flush_check_interval_ms,
            retention_check_interval_ms,
            recovery_point_checkpoint_interval_ms,
            log_start_checkpoint_interval_ms,
            high_watermark_checkpoint_interval_ms,
            producer_expiration_check_interval_ms,
        )
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._started = False

    # ------------------------------------------------------------------ start-up

    def _config(self, topic: str, configs: Mapping[str, object] | LogConfig | None = None) -> LogConfig:
        if isinstance(configs, LogConfig):
            return configs
        if configs:
            base = self._config_for(topic) if self._config_for else self.default_config
            merged: dict[str, object] = dict(base.to_properties())
            merged.update(configs)
            return LogConfig.from_properties(merged)
        return self._config_for(topic) if self._config_for else self.default_config

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

    # ------------------------------------------------------------------ failures

    def _on_dir_offline(self, log_dir: str, message: str) -> None:
        with self._lock:
            affected = sorted(tp for tp, log in self._logs.items() if log.log_dir == log_dir)
            for tp in affected:
                self._logs.pop(tp).mark_offline()
                self._offline[tp] = log_dir
            for tp, move in list(self._moves.items()):
                if log_dir in (move.current.log_dir, move.dest_log_dir):
                    move.future.mark_offline()
                    del self._moves[tp]
            for tp, future in list(self._pending_futures.items()):
                if future.log_dir == log_dir:
                    future.mark_offline()
                    del self._pending_futures[tp]
            halt = not self.online_dirs()
        event = LogDirFailureEvent(log_dir, message, affected, halt)
        if halt:
            _log.critical("Every log dir is offline (%s): the broker must halt", self.log_dirs)
        if self._on_dir_failure is not None:
            self._on_dir_failure(event)

    def online_dirs(self) -> list[str]:
        return [d for d in self.log_dirs if not self.channel.is_offline(d)]

    def offline_dirs(self) -> list[str]:
        return [d for d in self.log_dirs if self.channel.is_offline(d)]

    @property
    def offline_log_dir_count(self) -> int:
        """``kafka.log:type=LogManager,name=OfflineLogDirectoryCount``."""
        return len(self.offline_dirs())

    @property
    def offline_replica_count(self) -> int:
        """``kafka.server:type=ReplicaManager,name=OfflineReplicaCount``."""
        return len(self._offline)

    def offline_partitions(self) -> dict[TopicPartition, str | None]:
        """Offline partition -> its failed dir (None: not found in any good dir at start-up)."""
        with self._lock:
            return dict(self._offline)

    def reset_dir(self, log_dir: str | Path) -> list[TopicPartition]:
        """The operator fixed (and cleared, or restored) ``log_dir``: bring it online again.

        Partitions still on it load again. The partitions that were on it when it failed -- and,
        once no dir is offline any more, those that were missing at start-up -- stop being
        offline and are returned: the broker re-creates them with ``create_log`` (empty, to be
        filled by replication).
        """
        log_dir = os.path.abspath(str(log_dir))
        if log_dir not in self.log_dirs:
            raise KafkaError(ErrorCode.log_dir_not_found, f"Log dir {log_dir} is not one of {self.log_dirs}")
        with self._lock:
            self.channel.clear(log_dir)
            self._load_dir(log_dir)
            self._attach_pending_futures()
            no_dir_offline = not self.offline_dirs()
            released = sorted(
                tp
                for tp, where in self._offline.items()
                if tp not in self._logs and (where == log_dir or (where is None and no_dir_offline))
            )
            for tp in released:
                del self._offline[tp]
                self._recreatable.add(tp)
            return released

    def set_expected(self, partitions: Iterable[TopicPartition]) -> None:
        """Update the partitions the metadata says were created on this broker."""
        with self._lock:
            self._expected = set(partitions)

    # ------------------------------------------------------------------ partitions

    def create_log(
        self,
        topic: str,
        topic_id: object | None,
        partition: int,
        configs: Mapping[str, object] | LogConfig | None = None,
        *,
        is_new: bool = False,
    ) -> PartitionLog:
        """Get the partition's log, creating it on the good dir with the fewest partitions when
        allowed (see the module docstring for ``is_new``)."""
        tp = (topic, partition)
        with self._lock:
            log = self._logs.get(tp)
            if log is not None:
                if topic_id is not None and log.topic_id and log.topic_id != kafka_uuid_str(topic_id):  # type: ignore[arg-type]
                    raise KafkaError(
                        ErrorCode.inconsistent_topic_id,
                        f"Topic id {kafka_uuid_str(topic_id)} of {topic}-{partition} does not match the "  # type: ignore[arg-type]
                        f"stored topic id {log.topic_id}",
                    )
                if configs is not None:
                    log.update_config(self._config(topic, configs))
                return log
            if not is_new and tp not in self._recreatable:
                if tp in self._offline:
                    where = self._offline[tp]
                    raise storage_error(
                        f"Partition {topic}-{partition} is offline: "
                        + (f"its log dir {where} failed" if where else "it is in no online log dir")
                    )
                if self.offline_dirs():
                    self._offline[tp] = None
                    raise storage_error(
                        f"Partition {topic}-{partition} is in no online log dir and log dirs "
                        f"{self.offline_dirs()} are offline: it may be there"
                    )
            online = self.online_dirs()
            if not online:
                raise storage_error("Every log dir is offline")
            counts = {d: 0 for d in online}
            for log in [*self._logs.values(), *(m.future for m in self._moves.values())]:
                if log.log_dir in counts:
                    counts[log.log_dir] += 1
            target = min(online, key=lambda d: counts[d])
            log = PartitionLog.create(
                Path(target) / f"{topic}-{partition}",
                topic,
                partition,
                topic_id,
                self._config(topic, configs),
                log_dir=target,
                channel=self.channel,
                clock=self._clock,
            )
            self._logs[tp] = log
            self._offline.pop(tp, None)
            self._recreatable.discard(tp)
            self._expected.add(tp)
            return log

    def get_log(self, topic: str, partition: int) -> PartitionLog:
        """The partition's log; KAFKA_STORAGE_ERROR when offline, UNKNOWN_TOPIC_OR_PARTITION when absent."""
        tp = (topic, partition)
        log = self._logs.get(tp)
        if log is not None:
            return log
        if tp in self._offline:
            where = self._offline.get(tp)
            raise storage_error(
                f"Partition {topic}-{partition} is offline"
                + (f": its log dir {where} failed" if where else ": it is in no online log dir")
            )
        raise KafkaError(
            ErrorCode.unknown_topic_or_partition, f"This broker has no log for {topic}-{partition}"
        )

    def has_log(self, topic: str, partition: int) -> bool:
        return (topic, partition) in self._logs

    def all_logs(self) -> list[PartitionLog]:
        """Current logs (no future replicas)."""
        with self._lock:
            return list(self._logs.values())

    def future_logs(self) -> list[PartitionLog]:
        with self._lock:
            return [m.future for m in self._moves.values()]

    def future_move(self, topic: str, partition: int) -> FutureReplicaMove | None:
        return self._moves.get((topic, partition))

    def logs_in_dir(self, log_dir: str) -> list[PartitionLog]:
        """Current and future logs living in ``log_dir``."""
        log_dir = os.path.abspath(log_dir)
        with self._lock:
            return [
                log
                for log in [*self._logs.values(), *(m.future for m in self._moves.values())]
                if log.log_dir == log_dir
            ]

    def update_topic_config(self, topic: str, configs: Mapping[str, object] | LogConfig) -> None:
        """New topic configs (AlterConfigs) for every local partition of ``topic``."""
        config = self._config(topic, configs)
        with self._lock:
            for (t, _), log in self._logs.items():
                if t == topic:
                    log.update_config(config)

    def delete_log(self, topic: str, partition: int) -> None:
        """Delete the partition (and a future replica of it): rename to ``-delete``, then remove."""
        tp = (topic, partition)
        with self._lock:
            log = self._logs.pop(tp, None)
            move = self._moves.pop(tp, None)
            self._expected.discard(tp)
            self._offline.pop(tp, None)
            self._recreatable.discard(tp)
        if move is not None:
            move.abort()
        if log is None:
            return
        log.close_handles()
        log.rename_dir(log.directory.with_name(delete_dir_name(topic, partition)))
        log.delete_dir()

    # ------------------------------------------------------------------ moves between dirs

    def alter_log_dir(self, topic: str, partition: int, log_dir: str | Path) -> None:
        """AlterReplicaLogDirs: start moving the partition to ``log_dir`` (LOG_DIR_NOT_FOUND when
        it is not a configured dir). The background thread (or ``complete_moves``) finishes it."""
        dest = os.path.abspath(str(log_dir))
        if dest not in self.log_dirs:
            raise KafkaError(ErrorCode.log_dir_not_found, f"The log dir {log_dir} does not exist")
        if self.channel.is_offline(dest):
            raise storage_error(f"Log dir {dest} is offline")
        tp = (topic, partition)
        with self._lock:
            current = self.get_log(topic, partition)
            existing = self._moves.get(tp)
            if existing is not None:
                if existing.dest_log_dir == dest:
                    return
                del self._moves[tp]
                existing.abort()
            if current.log_dir == dest:
                return
            self._moves[tp] = FutureReplicaMove.start(current, dest, self.channel)

    def complete_moves(self, copy_budget_bytes: int | None = None) -> list[TopicPartition]:
        """Copy for every move (up to the budget each) and swap those caught up; return the done ones."""
        done = []
        for tp, move in list(self._moves.items()):
            try:
                copied = move.catch_up(copy_budget_bytes)
                # Swap once a round no longer fills its budget: the rest fits under the locks.
                finished = (copy_budget_bytes is None or copied < copy_budget_bytes) and move.try_complete()
            except KafkaError as e:
                _log.warning("Moving %s-%d failed: %s", *tp, e)
                continue
            if finished:
                with self._lock:
                    if self._moves.get(tp) is move:
                        del self._moves[tp]
                done.append(tp)
        return done

    # ------------------------------------------------------------------ checkpoints

    def checkpoint_recovery_points(self) -> None:
        self._checkpoint(RECOVERY_POINT_CHECKPOINT, lambda log: log.recovery_point, futures=True)

    def checkpoint_log_start_offsets(self) -> None:
        self._checkpoint(
            LOG_START_OFFSET_CHECKPOINT,
            lambda log: (
                log.log_start_offset if log.log_start_offset > log.first_segment_base_offset else None
            ),
            futures=False,
        )

    def checkpoint_high_watermarks(self) -> None:
        self._checkpoint(REPLICATION_OFFSET_CHECKPOINT, lambda log: log.high_watermark, futures=False)

    def checkpoint(self) -> None:
        """Write all three offset checkpoints of every online dir."""
        self.checkpoint_recovery_points()
        self.checkpoint_log_start_offsets()
        self.checkpoint_high_watermarks()

    def _checkpoint(self, file: str, value: Callable[[PartitionLog], int | None], *, futures: bool) -> None:
        with self._lock:
            logs = list(self._logs.items())
            if futures:
                logs += [(tp, m.future) for tp, m in self._moves.items()]
        for log_dir in self.online_dirs():
            offsets = {}
            for tp, log in logs:
                if log.log_dir == log_dir and not log.is_offline:
                    v = value(log)
                    if v is not None:
                        offsets[tp] = v
            try:
                with self.channel.guard(log_dir, f"writing {file}"):
                    write_offset_checkpoint(Path(log_dir) / file, offsets)
            except KafkaError:
                continue

    # ------------------------------------------------------------------ background work

    def run_periodic_tasks(self, now_ms: int | None = None) -> None:
        """One round of background work; storage errors are already handled by the channel."""
        now = self._clock() if now_ms is None else now_ms
        due = self._intervals.next_due

        def is_due(name: str, interval: int) -> bool:
            if now >= due.get(name, 0):
                due[name] = now + interval
                return True
            return False

        for log in [*self.all_logs(), *self.future_logs()]:
            try:
                log.flush_if_due(now)
            except KafkaError:
                continue
        if is_due("retention", self._intervals.retention_check):
            for log in self.all_logs():
                try:
                    log.delete_old_segments(now)
                except KafkaError:
                    continue
        if is_due("producers", self._intervals.producer_expiration_check):
            for log in self.all_logs():
                log.expire_producers(now)
        if self._moves:
            self.complete_moves(copy_budget_bytes=64 * 1024 * 1024)
        if is_due("recovery-point", self._intervals.recovery_point_checkpoint):
            self.checkpoint_recovery_points()
        if is_due("log-start", self._intervals.log_start_checkpoint):
            self.checkpoint_log_start_offsets()
        if is_due("high-watermark", self._intervals.high_watermark_checkpoint):
            self.checkpoint_high_watermarks()

    def start(self) -> None:
        """Run ``run_periodic_tasks`` on a daemon thread every ``flush_check_interval_ms``."""
        if self._thread is not None:
            return
        # The first round waits a full interval: nothing is due right after start-up.
        now = self._clock()
        for name, interval in (
            ("retention", self._intervals.retention_check),
            ("producers", self._intervals.producer_expiration_check),
            ("recovery-point", self._intervals.recovery_point_checkpoint),
            ("log-start", self._intervals.log_start_checkpoint),
            ("high-watermark", self._intervals.high_watermark_checkpoint),
        ):
            self._intervals.next_due.setdefault(name, now + interval)
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="log-manager", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._intervals.flush_check / 1000):
            try:
                self.run_periodic_tasks()
            except Exception:  # the thread must outlive any one failure
                _log.exception("Log manager background round failed")

    def stop(self) -> None:
        """Stop the background thread (waits for the running round)."""
        thread, self._thread = self._thread, None
        if thread is not None:
            self._stop.set()
            thread.join()

    def shutdown(self) -> None:
        """Clean shutdown: close (fsync) every log, write checkpoints, leave the clean marker."""
        self.stop()
        failed_dirs: set[str] = set()
        for log in [*self.all_logs(), *self.future_logs()]:
            try:
                log.close()
            except KafkaError:
                failed_dirs.add(log.log_dir)
        self.checkpoint()
        for log_dir in self.online_dirs():
            if log_dir in failed_dirs:
                continue
            try:
                with self.channel.guard(log_dir, "writing the clean shutdown marker"):
                    write_clean_shutdown(log_dir, self.broker_epoch)
            except KafkaError:
                continue
