"""The replication throttles of a reassignment, as Kafka's tool sets and clears them.

--execute --throttle sets the topic-level throttled replicas (``partition:broker`` of the replicas
the data is copied from and to) and the broker-level rates on every broker taking part;
--verify, once nothing is moving any more, and --cancel remove them all again. The rates are
dynamic broker configs (IncrementalAlterConfigs on BROKER resources); a broker that refuses one
(Shoal has no ``replica.alter.log.dirs.io.max.bytes.per.second`` to change at run time) is a
warning on stderr, not a failure, so the reassignment still starts.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import typer

from shoal.cli.kafka_client import (
    ConfigChange,
    PartitionReassignment,
    ReassignmentClient,
    TopicPartition,
    error_message,
)
from shoal.cli.log_dirs import exception_name
from shoal.cli.reassign_plan import ReassignCommandError, plural_suffix
from shoal.protocol.errors import ErrorCode

LEADER_THROTTLED_RATE = "leader.replication.throttled.rate"
FOLLOWER_THROTTLED_RATE = "follower.replication.throttled.rate"
LOG_DIRS_THROTTLED_RATE = "replica.alter.log.dirs.io.max.bytes.per.second"
LEADER_THROTTLED_REPLICAS = "leader.replication.throttled.replicas"
FOLLOWER_THROTTLED_REPLICAS = "follower.replication.throttled.replicas"
BROKER_LEVEL_THROTTLES = (LEADER_THROTTLED_RATE, FOLLOWER_THROTTLED_RATE, LOG_DIRS_THROTTLED_RATE)
TOPIC_LEVEL_THROTTLES = (LEADER_THROTTLED_REPLICAS, FOLLOWER_THROTTLED_REPLICAS)


# ------------------------------------------------------------------- which replicas to throttle


@dataclass(slots=True)
class PartitionMove:
    """Kafka's PartitionMove: the brokers a partition's data is copied from, and those it goes to."""

    sources: set[int] = field(default_factory=set)
    destinations: set[int] = field(default_factory=set)


MoveMap = dict[str, dict[int, PartitionMove]]


def calculate_current_move_map(current: Mapping[TopicPartition, PartitionReassignment]) -> MoveMap:
    """The moves of the reassignments in progress: sources are the replicas not being added."""
    moves: MoveMap = {}
    for tp, reassignment in current.items():
        sources = set(reassignment.replicas) - set(reassignment.adding)
        moves.setdefault(tp.topic, {})[tp.partition] = PartitionMove(sources, set(reassignment.adding))
    return moves


def calculate_proposed_move_map(
    current_reassignments: Mapping[TopicPartition, PartitionReassignment],
    proposed: Mapping[TopicPartition, Sequence[int]],
    current: Mapping[TopicPartition, Sequence[int]],
) -> MoveMap:
    """Every partition moving, in progress or proposed: where its data comes from and goes to."""
    moves = calculate_current_move_map(current_reassignments)
    for tp, replicas in proposed.items():
        part_moves = moves.setdefault(tp.topic, {})
        if tp.partition in part_moves:
            sources = set(part_moves[tp.partition].sources)
        elif tp in current:
            sources = set(current[tp])
        else:
            raise ReassignCommandError(f"Trying to reassign a topic partition {tp} with 0 replicas")
        part_moves[tp.partition] = PartitionMove(sources, set(replicas) - sources)
    return moves


def calculate_leader_throttles(moves: MoveMap) -> dict[str, str]:
    """``partition:broker`` of every source replica per topic (sorted as strings, as Kafka's TreeSet)."""
    return {
        topic: ",".join(sorted({f"{p}:{s}" for p, move in parts.items() for s in move.sources}))
        for topic, parts in moves.items()
    }


def calculate_follower_throttles(moves: MoveMap) -> dict[str, str]:
    """``partition:broker`` of every destination that is not also a source, per topic."""
    return {
        topic: ",".join(
            sorted({f"{p}:{d}" for p, move in parts.items() for d in move.destinations if d not in move.sources})
        )
        for topic, parts in moves.items()
    }


def calculate_reassigning_brokers(moves: MoveMap) -> list[int]:
    return sorted({b for parts in moves.values() for move in parts.values() for b in move.sources | move.destinations})


# ------------------------------------------------------------------ setting and clearing them


def _api_failure(code: ErrorCode, message: str | None) -> str:
    """An admin call's failure as Kafka's tool prints it: the exception class and its message."""
    return f"{exception_name(code)}: {message or error_message(code)}"


def _warn_broker_failures(what: str, failures: Mapping[int, tuple[ErrorCode, str | None]]) -> None:
    """Broker configs a broker refused: one warning per distinct error, naming the brokers."""
    by_error: dict[tuple[str, str], list[int]] = {}
    for broker, (code, message) in sorted(failures.items()):
        by_error.setdefault((code.name.upper(), message or error_message(code)), []).append(broker)
    for (name, message), brokers in by_error.items():
        typer.echo(
            f"WARNING: {what} on broker{'' if len(brokers) == 1 else 's'} {','.join(map(str, brokers))} failed: "
            f"{name}: {message}",
            err=True,
        )


def _alter_brokers(
    client: ReassignmentClient, brokers: Iterable[int], changes: Sequence[ConfigChange]
) -> dict[int, tuple[ErrorCode, str | None]]:
    """IncrementalAlterConfigs on each broker (BROKER resource, sent to that broker); the refusals."""
    live = client.brokers()
    failures: dict[int, tuple[ErrorCode, str | None]] = {}
    for broker in sorted(set(brokers)):
        if broker not in live:
            failures[broker] = (ErrorCode.broker_not_available, f"Broker {broker} is not in the cluster")
            continue
        code, message = client.alter_broker_configs(broker, changes)
        if code != ErrorCode.none:
            failures[broker] = (code, message)
    return failures


def modify_topic_throttles(client: ReassignmentClient, leader: Mapping[str, str], follower: Mapping[str, str]) -> None:
    changes: dict[str, list[ConfigChange]] = {}
    for topic in sorted(set(leader) | set(follower)):
        ops = []
        if topic in leader:
            ops.append(ConfigChange(LEADER_THROTTLED_REPLICAS, leader[topic]))
        if topic in follower:
            ops.append(ConfigChange(FOLLOWER_THROTTLED_REPLICAS, follower[topic]))
        changes[topic] = ops
    _raise_topic_failures(client.alter_topic_configs(changes))


def _raise_topic_failures(answers: Mapping[str, tuple[ErrorCode, str | None]]) -> None:
    for topic in sorted(answers):
        code, message = answers[topic]
        if code != ErrorCode.none:
            raise ReassignCommandError(_api_failure(code, message))


def modify_inter_broker_throttle(client: ReassignmentClient, brokers: Iterable[int], throttle: int) -> None:
    if throttle < 0:
        return
    value = str(throttle)
    failures = _alter_brokers(
        client, brokers, [ConfigChange(LEADER_THROTTLED_RATE, value), ConfigChange(FOLLOWER_THROTTLED_RATE, value)]
    )
    if failures:
        _warn_broker_failures(f"Setting the inter-broker throttle limit to {throttle} B/s", failures)
    else:
        typer.echo(f"The inter-broker throttle limit was set to {throttle} B/s")


def modify_log_dir_throttle(client: ReassignmentClient, brokers: Iterable[int], throttle: int) -> None:
    if throttle < 0:
        return
    failures = _alter_brokers(client, brokers, [ConfigChange(LOG_DIRS_THROTTLED_RATE, str(throttle))])
    if failures:
        _warn_broker_failures(f"Setting the replica-alter-dir throttle limit to {throttle} B/s", failures)
    else:
        typer.echo(f"The replica-alter-dir throttle limit was set to {throttle} B/s")


def clear_all_throttles(client: ReassignmentClient, targets: Sequence[tuple[TopicPartition, Sequence[int]]]) -> None:
    """Remove the throttles of every broker of the cluster and the targets, and of the targets' topics."""
    brokers = set(client.brokers()) | {b for _, replicas in targets for b in replicas}
    typer.echo(f"Clearing broker-level throttles on broker{plural_suffix(len(brokers))} {','.join(map(str, sorted(brokers)))}")
    failures = _alter_brokers(client, brokers, [ConfigChange(name, None) for name in BROKER_LEVEL_THROTTLES])
    if failures:
        _warn_broker_failures("Clearing broker-level throttles", failures)
    topics = sorted({tp.topic for tp, _ in targets})
    typer.echo(f"Clearing topic-level throttles on topic{plural_suffix(len(topics))} {','.join(topics)}")
    _raise_topic_failures(
        client.alter_topic_configs({t: [ConfigChange(name, None) for name in TOPIC_LEVEL_THROTTLES] for t in topics})
    )
