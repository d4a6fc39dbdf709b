"""Moving replicas between the log dirs of their broker: the ``log_dirs`` of a reassignment file.

--execute starts each move with AlterReplicaLogDirs at the replica's broker, retrying those whose
replica has not reached its new broker yet until --timeout; --verify and --cancel read where each
replica is from DescribeLogDirs (its current dir, and the future dir it is being copied to).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import typer

from shoal.cli.kafka_client import ReassignmentClient, TopicPartition
from shoal.cli.reassign_plan import (
    ReassignCommandError,
    Replica,
    TerseError,
    plural_suffix,
    replica_name,
    replica_sort_key,
)
from shoal.protocol.errors import ErrorCode

_MOVE_RETRY_S = 0.1


@dataclass(frozen=True, slots=True)
class LogDirMoveState:
    """Kafka's LogDirMoveState classes in one: ``missing`` (no live dir has the replica),
    ``active`` (a future replica is being copied), ``cancelled`` (in another dir, no copy going on)
    or ``completed``."""

    kind: str
    target: str
    current: str | None = None
    future: str | None = None

    @property
    def done(self) -> bool:
        return self.kind in ("completed", "cancelled")


def alter_replica_log_dirs(client: ReassignmentClient, dirs: Mapping[Replica, str]) -> set[Replica]:
    """AlterReplicaLogDirs for each broker's replicas: the ones started. REPLICA_NOT_AVAILABLE (the
    replica has not reached its new broker yet) is left for the next round, as Kafka's tool does."""
    by_broker: dict[int, dict[TopicPartition, str]] = {}
    for (tp, broker), log_dir in dirs.items():
        by_broker.setdefault(broker, {})[tp] = log_dir
    started: set[Replica] = set()
    for broker, wanted in sorted(by_broker.items()):
        for tp, code in client.alter_replica_log_dirs(broker, wanted).items():
            if code == ErrorCode.none:
                started.add((tp, broker))
            elif code != ErrorCode.replica_not_available:
                raise ReassignCommandError(f"Failed to alter dir for {replica_name((tp, broker))}")
    return started


def execute_moves(
    client: ReassignmentClient, dirs: Mapping[Replica, str], timeout_ms: int, sleep: Callable[[float], None] = time.sleep
) -> None:
    """Start the log dir moves, retrying until each replica is on its broker or --timeout passes."""
    start = time.monotonic()
    pending = dict(dirs)
    while True:
        started = alter_replica_log_dirs(client, pending)
        for replica in sorted(started, key=replica_sort_key):
            tp, broker = replica
            typer.echo(
                f"Successfully started moving log directory to {pending[replica]} for replica "
                f"{tp.topic}-{tp.partition} with broker {broker} "
            )
        for replica in started:
            del pending[replica]
        if not pending:
            return
        if (time.monotonic() - start) * 1000 >= timeout_ms:
            raise TerseError(
                f"Timed out before log directory move{plural_suffix(len(pending))} could be started for: "
                + ",".join(replica_name(r) for r in sorted(pending, key=replica_sort_key))
            )
        sleep(_MOVE_RETRY_S)


def find_log_dir_move_states(client: ReassignmentClient, targets: Mapping[Replica, str]) -> dict[Replica, LogDirMoveState]:
    """Where each replica with a target log dir is now (DescribeLogDirs at its broker)."""
    by_broker: dict[int, list[TopicPartition]] = {}
    for tp, broker in targets:
        by_broker.setdefault(broker, []).append(tp)
    states: dict[Replica, LogDirMoveState] = {}
    for broker, partitions in sorted(by_broker.items()):
        dirs = client.describe_replica_log_dirs(broker, partitions)
        for tp in partitions:
            target = targets[(tp, broker)]
            info = dirs.get(tp)
            if info is None or info.current is None:
                states[(tp, broker)] = LogDirMoveState("missing", target)
            elif info.future is None:
                kind = "completed" if info.current == target else "cancelled"
                states[(tp, broker)] = LogDirMoveState(kind, target, info.current)
            else:
                states[(tp, broker)] = LogDirMoveState("active", target, info.current, info.future)
    return states


def replica_move_states_to_string(states: Mapping[Replica, LogDirMoveState]) -> str:
    lines = []
    for replica in sorted(states, key=replica_sort_key):
        (tp, broker), state = replica, states[replica]
        name = f"{tp.topic}-{tp.partition}"
        if state.kind == "missing":
            lines.append(
                f"Partition {name} is not found in any live log dir on broker {broker}. "
                "There is likely an offline log directory on the broker."
            )
        elif state.kind == "active":
            if state.target == state.future:
                lines.append(f"Reassignment of replica {replica_name(replica)} is still in progress.")
            else:
                lines.append(
                    f"Partition {name} on broker {broker} is being moved to log dir {state.future} "
                    f"instead of {state.target}."
                )
        elif state.kind == "cancelled":
            lines.append(
                f"Partition {name} on broker {broker} is not being moved from log dir {state.current} "
                f"to {state.target}."
            )
        else:
            lines.append(f"Reassignment of replica {replica_name(replica)} completed successfully.")
    return "\n".join(lines)
