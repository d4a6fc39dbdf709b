"""``shoal reassign-partitions``: move classic replicas between brokers, shaped like Kafka's
``kafka-reassign-partitions.sh`` (ReassignPartitionsCommand).

Same actions, options, JSON files and messages, so operators and their scripts can move between
the two: ``--generate`` proposes an assignment of some topics over a broker list (Kafka's
AdminUtils round-robin, rack-aware when the brokers have racks), ``--execute`` starts one from a
``--reassignment-json-file`` (AlterPartitionReassignments, optionally throttled through
IncrementalAlterConfigs and with ``log_dirs`` moves through AlterReplicaLogDirs), ``--verify``
reports progress and clears the throttles once everything is done, ``--cancel`` stops the
reassignments in progress and ``--list`` shows them (ListPartitionReassignments).

Errors are printed on stdout as Kafka's tool prints them (``Error: ...``, or the bare message of
its TerseExceptions) with exit code 1. Usage errors carry Kafka's messages (``Command must include
exactly one action: ...``, ``Option "[throttle]" can't be used with action "[verify]"``) on
stderr with exit code 2, as Shoal's other tools exit on usage errors. The broker-level throttle
rates (``leader.replication.throttled.rate``, ``follower.replication.throttled.rate``) are dynamic
broker configs, set and cleared with IncrementalAlterConfigs on BROKER resources as Kafka's tool
does; a broker config Shoal cannot change at run time (``--replica-alter-log-dirs-throttle``'s
``replica.alter.log.dirs.io.max.bytes.per.second``) is refused, which is a warning on stderr and
the command goes on. ``--bootstrap-server`` defaults to 127.0.0.1:9092 as in Shoal's other tools;
``--command-config`` and ``--bootstrap-controller`` are not offered (Shoal has no separate
controller quorum).

This module holds the command, its option checks and the actions; the JSON files and the
assignment --generate proposes are in ``reassign_plan``, the throttles in ``reassign_throttles``
and the log dir moves in ``reassign_log_dirs``.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Annotated, Any

import typer

from shoal.cli.kafka_client import (
    DEFAULT_BOOTSTRAP,
    KafkaClientError,
    PartitionReassignment,
    ReassignmentClient,
    TopicPartition,
    error_message,
)
from shoal.cli.options import BootstrapOpt
from shoal.cli.reassign_log_dirs import execute_moves, find_log_dir_move_states, replica_move_states_to_string
from shoal.cli.reassign_plan import (
    Assignment,
    ReassignCommandError,
    Replica,
    TerseError,
    broker_metadata,
    calculate_assignment,
    format_as_reassignment_json,
    parse_execute_assignment_args,
    parse_generate_assignment_args,
    parse_partition_reassignment_data,
    plural_suffix,
)
from shoal.cli.reassign_throttles import (
    calculate_follower_throttles,
    calculate_leader_throttles,
    calculate_proposed_move_map,
    calculate_reassigning_brokers,
    clear_all_throttles,
    modify_inter_broker_throttle,
    modify_log_dir_throttle,
    modify_topic_throttles,
)
from shoal.protocol.errors import ErrorCode

CLIENT_ID = "reassign-partitions-tool"  # what Kafka's tool sets
HELP_TEXT = "This tool helps to move topic partitions between replicas."
DEFAULT_TIMEOUT_MS = 10_000  # Kafka's --timeout default (log dir moves)
ADMIN_TIMEOUT_S = 30.0  # each broker operation, retries included (Kafka's request.timeout.ms)

CANNOT_EXECUTE_BECAUSE_OF_EXISTING_MESSAGE = (
    "Cannot execute because there is an existing partition assignment.  Use --additional to override this "
    "and create a new partition assignment in addition to the existing one. The --additional flag can also "
    "be used to change the throttle by resubmitting the current reassignment."
)
YOU_MUST_RUN_VERIFY_PERIODICALLY_MESSAGE = (
    "Warning: You must run --verify periodically, until the reassignment completes, to ensure the throttle "
    "is removed."
)
UNKNOWN_TOPIC_EXCEPTION = "org.apache.kafka.common.errors.UnknownTopicOrPartitionException"

# Tests fix the start of the round-robin; Kafka's --generate (and this tool) pick it at random.
_START_INDEX = -1


# ------------------------------------------------------------------------------- --generate


def replica_assignment_for_topics(client: ReassignmentClient, topics: Sequence[str]) -> Assignment:
    """Every partition of the topics with its replicas; a missing topic fails as Kafka's does."""
    found = client.topic_replicas(topics)
    for name in sorted(found):
        if found[name] is None:
            raise ReassignCommandError(f"{UNKNOWN_TOPIC_EXCEPTION}: Topic {name} not found.")
    return {
        TopicPartition(name, p): list(replicas)
        for name, parts in found.items()
        for p, replicas in (parts or {}).items()
    }


def generate_assignment(
    client: ReassignmentClient, topics_json: str, broker_list: str, rack_aware: bool
) -> tuple[Assignment, Assignment]:
    """--generate: print the current assignment of the topics and a proposal over the brokers."""
    brokers, topics = parse_generate_assignment_args(topics_json, broker_list)
    current = replica_assignment_for_topics(client, topics)
    metadata = broker_metadata(client.brokers(), brokers, rack_aware)
    proposed = calculate_assignment(current, metadata, _START_INDEX)
    typer.echo(f"Current partition replica assignment\n{format_as_reassignment_json(current)}\n")
    typer.echo(f"Proposed partition reassignment configuration\n{format_as_reassignment_json(proposed)}")
    return proposed, current


# -------------------------------------------------------------------------------- --execute


def replica_assignment_for_partitions(client: ReassignmentClient, partitions: Iterable[TopicPartition]) -> Assignment:
    """The current replicas of some partitions; a missing topic or partition fails as Kafka's does."""
    wanted = set(partitions)
    current = replica_assignment_for_topics(client, sorted({tp.topic for tp in wanted}))
    found = {tp: replicas for tp, replicas in current.items() if tp in wanted}
    missing = sorted(wanted - set(found))
    if missing:
        raise ReassignCommandError(
            f"{UNKNOWN_TOPIC_EXCEPTION}: Unable to find partition: {', '.join(map(str, missing))}"
        )
    return found


def current_partition_replica_assignment_to_string(proposed: Mapping[TopicPartition, Any], current: Assignment) -> str:
    moving = {tp: replicas for tp, replicas in current.items() if tp in proposed}
    return (
        f"Current partition replica assignment\n\n{format_as_reassignment_json(moving)}\n\n"
        "Save this to use as the --reassignment-json-file option during rollback"
    )


def _failures(answers: Mapping[TopicPartition, tuple[ErrorCode, str | None]]) -> dict[TopicPartition, str]:
    return {tp: message or error_message(code) for tp, (code, message) in answers.items() if code != ErrorCode.none}


def execute_assignment(
    client: ReassignmentClient,
    additional: bool,
    reassignment_json: str,
    throttle: int,
    log_dir_throttle: int,
    timeout_ms: int,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """--execute: print the current assignment (for rollback), set the throttles, start the moves."""
    proposed, proposed_dirs = parse_execute_assignment_args(reassignment_json)
    current_reassignments = client.list_reassignments()
    if not additional and current_reassignments:
        raise TerseError(CANNOT_EXECUTE_BECAUSE_OF_EXISTING_MESSAGE)
    brokers = {b for replicas in proposed.values() for b in replicas}
    live = client.brokers()
    unknown = sorted(brokers - set(live))
    if unknown:
        raise ReassignCommandError(f"Unknown broker id {unknown[0]}")
    current = replica_assignment_for_partitions(client, proposed)
    typer.echo(current_partition_replica_assignment_to_string(proposed, current))
    if throttle >= 0 or log_dir_throttle >= 0:
        typer.echo(YOU_MUST_RUN_VERIFY_PERIODICALLY_MESSAGE)
        if throttle >= 0:
            moves = calculate_proposed_move_map(current_reassignments, proposed, current)
            modify_topic_throttles(client, calculate_leader_throttles(moves), calculate_follower_throttles(moves))
            modify_inter_broker_throttle(client, calculate_reassigning_brokers(moves), throttle)
        if log_dir_throttle >= 0:
            modify_log_dir_throttle(client, {broker for _, broker in proposed_dirs}, log_dir_throttle)
    errors = _failures(client.alter_reassignments(proposed))
    if errors:
        raise TerseError(
            "Error reassigning partition(s):\n" + "\n".join(f"{tp}: {errors[tp]}" for tp in sorted(errors))
        )
    typer.echo(
        f"Successfully started partition reassignment{plural_suffix(len(proposed))} for "
        + ",".join(map(str, sorted(proposed)))
    )
    if proposed_dirs:
        execute_moves(client, proposed_dirs, timeout_ms, sleep)


# --------------------------------------------------------------------------------- --verify


@dataclass(frozen=True, slots=True)
class PartitionReassignmentState:
    """Kafka's PartitionReassignmentState: the replicas now, the target's, and whether it is done."""

    current: tuple[int, ...]
    target: tuple[int, ...]
    done: bool


def find_partition_reassignment_states(
    client: ReassignmentClient, targets: Sequence[tuple[TopicPartition, Sequence[int]]]
) -> tuple[dict[TopicPartition, PartitionReassignmentState], bool]:
    """Each target's state, and whether any reassignment at all is in progress in the cluster."""
    ongoing = client.list_reassignments()
    states: dict[TopicPartition, PartitionReassignmentState] = {}
    not_found = [(tp, target) for tp, target in targets if tp not in ongoing]
    described = client.topic_replicas({tp.topic for tp, _ in not_found}) if not_found else {}
    for tp, target in targets:
        if tp in ongoing:
            states[tp] = PartitionReassignmentState(ongoing[tp].replicas, tuple(target), False)
        else:
            parts = described.get(tp.topic)
            current = () if parts is None else parts.get(tp.partition, ())
            states[tp] = PartitionReassignmentState(tuple(current), tuple(target), True)
    return states, bool(ongoing)


def partition_reassignment_states_to_string(states: Mapping[TopicPartition, PartitionReassignmentState]) -> str:
    lines = ["Status of partition reassignment:"]
    for tp in sorted(states):
        state = states[tp]
        if not state.done:
            lines.append(f"Reassignment of partition {tp} is still in progress.")
        elif state.current == state.target:
            lines.append(f"Reassignment of partition {tp} is completed.")
        else:
            lines.append(
                f"There is no active reassignment of partition {tp}, but replica set is "
                f"{','.join(map(str, state.current))} rather than {','.join(map(str, state.target))}."
            )
    return "\n".join(lines)


def verify_assignment(client: ReassignmentClient, reassignment_json: str, preserve_throttles: bool) -> bool:
    """--verify: print each partition's (and log dir move's) state; once nothing is moving any
    more, clear the throttles unless --preserve-throttles. True when nothing is moving."""
    targets, target_dirs = parse_partition_reassignment_data(reassignment_json)
    states, parts_ongoing = find_partition_reassignment_states(client, targets)
    typer.echo(partition_reassignment_states_to_string(states))
    move_states = find_log_dir_move_states(client, target_dirs)
    typer.echo(replica_move_states_to_string(move_states))
    moves_ongoing = not all(s.done for s in move_states.values())
    if not parts_ongoing and not moves_ongoing and not preserve_throttles:
        clear_all_throttles(client, targets)
    return not parts_ongoing and not moves_ongoing


# --------------------------------------------------------------------------- --cancel, --list


def cancel_assignment(
    client: ReassignmentClient,
    reassignment_json: str,
    preserve_throttles: bool,
    timeout_ms: int,
    sleep: Callable[[float], None] = time.sleep,
) -> tuple[set[TopicPartition], set[Replica]]:
    """--cancel: revert the file's reassignments in progress (null replicas) and its log dir moves."""
    targets, target_dirs = parse_partition_reassignment_data(reassignment_json)
    listed = client.list_reassignments({tp for tp, _ in targets})
    # The reassignments still adding or removing a replica (Kafka 3's rule; the Java port of 3.7+
    # drops a negation and skips those that only add replicas).
    cancelling = {tp for tp, r in listed.items() if r.adding or r.removing}
    if cancelling:
        errors = _failures(client.alter_reassignments(dict.fromkeys(cancelling)))
        if errors:
            raise TerseError(
                f"Error cancelling partition reassignment{plural_suffix(len(errors))} for:\n"
                + "\n".join(f"{tp}: {errors[tp]}" for tp in sorted(errors))
            )
        typer.echo(
            f"Successfully cancelled partition reassignment{plural_suffix(len(cancelling))} for: "
            + ",".join(map(str, sorted(cancelling)))
        )
    else:
        typer.echo("None of the specified partition reassignments are active.")
    moving = {
        replica: state.current
        for replica, state in find_log_dir_move_states(client, target_dirs).items()
        if state.kind == "active" and state.current is not None
    }
    if moving:
        execute_moves(client, moving, timeout_ms, sleep)
    else:
        typer.echo("None of the specified partition moves are active.")
    if not preserve_throttles:
        clear_all_throttles(client, targets)
    return cancelling, set(moving)


def current_reassignments_to_string(current: Mapping[TopicPartition, PartitionReassignment]) -> str:
    lines = []
    for tp in sorted(current):
        r = current[tp]
        line = f"{tp}: replicas: {','.join(map(str, r.replicas))}."
        if r.adding:
            line += f" adding: {','.join(map(str, r.adding))}."
        if r.removing:
            line += f" removing: {','.join(map(str, r.removing))}."
        lines.append(line)
    if not lines:
        return "No partition reassignments found."
    return "Current partition reassignments:\n" + "\n".join(lines)


def list_reassignments(client: ReassignmentClient) -> None:
    typer.echo(current_reassignments_to_string(client.list_reassignments()))


# ---------------------------------------------------------------------------------- the command

# Kafka's option names in its declaration order: its checks name the first offending one.
ACTIONS = ("generate", "execute", "verify", "cancel", "list")
_OPTIONS = (
    "verify", "generate", "execute", "cancel", "list", "bootstrap-server", "reassignment-json-file",
    "topics-to-move-json-file", "broker-list", "disable-rack-aware", "throttle",
    "replica-alter-log-dirs-throttle", "timeout", "additional", "preserve-throttles",
)
REQUIRED_ARGS = {
    "verify": ("reassignment-json-file",),
    "generate": ("topics-to-move-json-file", "broker-list"),
    "execute": ("reassignment-json-file",),
    "cancel": ("reassignment-json-file",),
    "list": (),
}
PERMITTED_ARGS = {
    "verify": ("bootstrap-server", "preserve-throttles"),
    "generate": ("bootstrap-server", "broker-list", "disable-rack-aware"),
    "execute": ("additional", "bootstrap-server", "throttle", "replica-alter-log-dirs-throttle", "timeout"),
    "cancel": ("bootstrap-server", "preserve-throttles", "timeout"),
    "list": ("bootstrap-server",),
}


def validate_args(given: set[str]) -> str:
    """Kafka's validateAndParseArgs over the options given: the action, or a usage error."""
    actions = [a for a in ACTIONS if a in given]
    if len(actions) != 1:
        raise _usage(f"Command must include exactly one action: {', '.join('--' + a for a in ACTIONS)}")
    action = actions[0]
    for required in REQUIRED_ARGS[action]:
        if required not in given:
            raise _usage(f'Missing required argument "[{required}]"')
    for option in _OPTIONS:
        if option in given and option != action and option not in REQUIRED_ARGS[action] + PERMITTED_ARGS[action]:
            raise _usage(f'Option "[{option}]" can\'t be used with action "[{action}]"')
    return action


def _usage(message: str) -> typer.Exit:
    typer.echo(f"Error: {message}", err=True)
    return typer.Exit(2)


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError as exc:
        raise ReassignCommandError(f"{path} ({exc.strerror or exc})") from None


@contextmanager
def _client(bootstrap: str) -> Iterator[ReassignmentClient]:
    """One client for the command; failures end it as Kafka's tool does (stdout, exit code 1)."""
    try:
        with ReassignmentClient(bootstrap, client_id=CLIENT_ID, timeout=ADMIN_TIMEOUT_S) as client:
            yield client
    except TerseError as exc:
        sys.stdout.flush()
        typer.echo(str(exc))
        raise typer.Exit(1) from None
    except (ReassignCommandError, KafkaClientError) as exc:
        sys.stdout.flush()
        typer.echo(f"Error: {exc}")
        raise typer.Exit(1) from None


def _given(ctx: typer.Context) -> set[str]:
    """The options on the command line (Kafka's checks are about presence, not values)."""
    given = set()
    for param in ctx.command.params:
        source = ctx.get_parameter_source(param.name) if param.name else None
        if source is not None and source.name == "COMMANDLINE":  # click's ParameterSource (typer vendors click)
            given.add(str(param.name).replace("_", "-").rstrip("-"))
    return given


def reassign_partitions(
    ctx: typer.Context,
    generate: Annotated[
        bool,
        typer.Option(
            "--generate",
            help="Generate a candidate partition reassignment configuration. Note that this only generates a "
            "candidate assignment, it does not execute it.",
        ),
    ] = False,
    execute: Annotated[
        bool, typer.Option("--execute", help="Kick off the reassignment as specified by the --reassignment-json-file option.")
    ] = False,
    verify: Annotated[
        bool,
        typer.Option(
            "--verify",
            help="Verify if the reassignment completed as specified by the --reassignment-json-file option. If "
            "there is a throttle engaged for the replicas specified, and the rebalance has completed, the "
            "throttle will be removed.",
        ),
    ] = False,
    cancel: Annotated[bool, typer.Option("--cancel", help="Cancel an active reassignment.")] = False,
    list_: Annotated[bool, typer.Option("--list", help="List all active partition reassignments.")] = False,
    bootstrap_server: BootstrapOpt = DEFAULT_BOOTSTRAP,
    reassignment_json_file: Annotated[
        str | None,
        typer.Option(
            "--reassignment-json-file",
            help='The JSON file with the partition reassignment configuration: {"version":1,"partitions":'
            '[{"topic":"foo","partition":1,"replicas":[1,2,3],"log_dirs":["any","any","any"]}]}. "log_dirs" is '
            'optional; each entry is "any" or an absolute log dir of that broker to move the replica to.',
        ),
    ] = None,
    topics_to_move_json_file: Annotated[
        str | None,
        typer.Option(
            "--topics-to-move-json-file",
            help="Generate a reassignment configuration to move the partitions of the specified topics to the "
            'brokers of --broker-list: {"topics":[{"topic":"foo"},{"topic":"foo1"}],"version":1}.',
        ),
    ] = None,
    broker_list: Annotated[
        str | None,
        typer.Option(
            "--broker-list",
            help='The brokers to which the partitions need to be reassigned, "0,1,2" (with --generate).',
        ),
    ] = None,
    disable_rack_aware: Annotated[
        bool, typer.Option("--disable-rack-aware", help="Disable rack aware replica assignment.")
    ] = False,
    throttle: Annotated[
        int,
        typer.Option(
            "--throttle",
            help="The movement of partitions between brokers will be throttled to this value (bytes/sec) "
            "(with --execute; resubmit with --additional to change it).",
        ),
    ] = -1,
    replica_alter_log_dirs_throttle: Annotated[
        int,
        typer.Option(
            "--replica-alter-log-dirs-throttle",
            help="The movement of replicas between log directories on the same broker will be throttled to this "
            "value (bytes/sec).",
        ),
    ] = -1,
    timeout: Annotated[
        int,
        typer.Option("--timeout", help="The maximum time in ms to wait for log directory replica assignment to begin."),
    ] = DEFAULT_TIMEOUT_MS,
    additional: Annotated[
        bool,
        typer.Option(
            "--additional",
            help="Execute this reassignment in addition to any other ongoing ones. This option can also be used "
            "to change the throttle of an ongoing reassignment.",
        ),
    ] = False,
    preserve_throttles: Annotated[
        bool, typer.Option("--preserve-throttles", help="Do not modify broker or topic throttles.")
    ] = False,
) -> None:
    """This tool helps to move topic partitions between replicas (like kafka-reassign-partitions.sh)."""
    action = validate_args(_given(ctx))
    with _client(bootstrap_server) as client:
        if action == "generate":
            assert topics_to_move_json_file is not None and broker_list is not None
            generate_assignment(client, _read(topics_to_move_json_file), broker_list, not disable_rack_aware)
        elif action == "execute":
            assert reassignment_json_file is not None
            execute_assignment(
                client, additional, _read(reassignment_json_file), throttle, replica_alter_log_dirs_throttle, timeout
            )
        elif action == "verify":
            assert reassignment_json_file is not None
            verify_assignment(client, _read(reassignment_json_file), preserve_throttles)
        elif action == "cancel":
            assert reassignment_json_file is not None
            cancel_assignment(client, _read(reassignment_json_file), preserve_throttles, timeout)
        else:
            list_reassignments(client)
