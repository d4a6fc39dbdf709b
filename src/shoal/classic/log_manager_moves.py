"""``LogManager``'s moves of partitions between its log dirs (AlterReplicaLogDirs, KIP-113); the
copy itself is a future replica (``future_replica``).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING

from shoal.classic.failure import storage_error
from shoal.classic.future_replica import FutureReplicaMove
from shoal.protocol.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from shoal.classic.log_manager import TopicPartition

__all__ = ["ReplicaMovesMixin"]

# One logger for all of LogManager, whichever of its modules logs.
_log = logging.getLogger("shoal.classic.log_manager")


class ReplicaMovesMixin:
    """``LogManager``'s moves between log dirs (the state is set up in ``LogManager.__init__``)."""

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
