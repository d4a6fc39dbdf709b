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

Where each part lives: this module holds the manager's state and its partitions (creating a log
on the good dir with the fewest partitions, looking logs up, deleting them); the rest is one
mixin per concern -- ``log_manager_startup`` (checking and loading the dirs, the isNewReplica
rule), ``log_manager_failures`` (dirs going offline, ``reset_dir``), ``log_manager_moves``
(AlterReplicaLogDirs through ``future_replica``) and ``log_manager_tasks`` (the background
thread, checkpoints, shutdown).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

from shoal.classic.checkpoint import kafka_uuid_str
from shoal.classic.failure import LogDirFailureChannel, storage_error
from shoal.classic.future_replica import FutureReplicaMove, delete_dir_name
from shoal.classic.log import PartitionLog
from shoal.classic.log_cleaner import CleanerSettings, LogCleaner
from shoal.classic.log_config import LogConfig
from shoal.classic.log_manager_failures import DirFailuresMixin, LogDirFailureEvent
from shoal.classic.log_manager_moves import ReplicaMovesMixin
from shoal.classic.log_manager_startup import StartupMixin
from shoal.classic.log_manager_tasks import BackgroundTasksMixin, TaskIntervals
from shoal.protocol.errors import ErrorCode, KafkaError

__all__ = ["LogManager", "TopicPartition"]

TopicPartition = tuple[str, int]


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class LogManager(StartupMixin, DirFailuresMixin, ReplicaMovesMixin, BackgroundTasksMixin):
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
        cleaner: CleanerSettings | None = None,
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
        self._intervals = TaskIntervals(
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
        #: Compacts ``cleanup.policy=compact`` logs; off unless settings are given (the broker's
        #: ``log.cleaner.*``).
        self.cleaner = LogCleaner(
            cleaner or CleanerSettings(enabled=False), self.all_logs, log_dirs=self.log_dirs, clock=self._clock
        )

    # ------------------------------------------------------------------ topic configs

    def _config(self, topic: str, configs: Mapping[str, object] | LogConfig | None = None) -> LogConfig:
        if isinstance(configs, LogConfig):
            return configs
        if configs:
            base = self._config_for(topic) if self._config_for else self.default_config
            merged: dict[str, object] = dict(base.to_properties())
            merged.update(configs)
            return LogConfig.from_properties(merged)
        return self._config_for(topic) if self._config_for else self.default_config

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
