"""``LogManager``'s side of log-dir failures (KIP-112): a dir going offline drops its logs and
tells the broker (``LogDirFailureEvent``); which dirs and partitions are offline; and
``reset_dir`` once the operator fixed a dir. The failure channel itself is ``failure``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from shoal.protocol.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from shoal.classic.log_manager import TopicPartition

__all__ = ["DirFailuresMixin", "LogDirFailureEvent"]

# One logger for all of LogManager, whichever of its modules logs.
_log = logging.getLogger("shoal.classic.log_manager")


@dataclass(frozen=True, slots=True)
class LogDirFailureEvent:
    """What the broker hears when a log dir goes offline."""

    log_dir: str
    message: str
    offline_partitions: list[TopicPartition]
    #: Every log dir is offline: Kafka halts the broker.
    halt: bool


class DirFailuresMixin:
    """``LogManager``'s log-dir failure handling (the state is set up in ``LogManager.__init__``)."""

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
