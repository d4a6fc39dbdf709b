"""``shoal topics``: create, list, describe, alter and delete topics, shaped like kafka-topics.sh.

Same options, messages and layout as Kafka's TopicCommand, so operators and their scripts can
move between the two: ``Created topic T.``, ``Error while executing topic command : ...`` (on
stdout with exit code 1, as Kafka prints it), ``--topic`` as Kafka's include-list regex for
describe/alter/delete, the tab-separated describe lines and describe's reports
(``--under-replicated-partitions``, ``--unavailable-partitions``, ``--under-min-isr-partitions``,
``--at-min-isr-partitions``: only matching partition lines, no topic lines). KIP-1163 additions: ``create
--diskless`` (``diskless.enable=true``), ``list --diskless`` (Metadata v14's IsDiskless, or
DescribeConfigs on older brokers), and ``describe`` also prints each topic's kind and each
partition's log start and end offsets. ``alter --config/--delete-config`` uses
IncrementalAlterConfigs (what kafka-configs.sh does); ``alter --partitions`` needs CreatePartitions,
which a broker may not serve: that is reported the way Kafka's admin client reports it.

The admin calls are in topic_admin, argument parsing in topic_parsing and the describe lines in
topic_format; this module holds the commands and how they end (messages and exit codes).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated

import typer

from shoal.cli.kafka_client import DEFAULT_BOOTSTRAP, KafkaClient, KafkaClientError, TopicPartition
from shoal.cli.options import BootstrapOpt, TimeoutOpt
from shoal.cli.topic_admin import (
    DISKLESS_CONFIG,
    Api,
    ConfigEntry,
    TopicAdmin,
    TopicCommandError,
    broker_failure,
)
from shoal.cli.topic_format import (
    MIN_ISR_CONFIG,
    TIERED_STATE_KEYS,
    PartitionReports,
    describe_lines,
    min_insync_replicas,
    reported_partitions,
)
from shoal.cli.topic_parsing import (
    ensure_topic_exists,
    parse_configs,
    parse_replica_assignment,
    select_topics,
)
from shoal.protocol.errors import ErrorCode

topics_app = typer.Typer(
    help="Create, list, describe, alter and delete topics (like kafka-topics.sh).", no_args_is_help=True
)

CLIENT_ID = "shoal-topics"
ERROR_PREFIX = "Error while executing topic command : "
DEFAULT_TIMEOUT_MS = 30_000  # Kafka's admin request.timeout.ms
_INT16_MAX = 2**15 - 1

TopicRegexOpt = Annotated[
    str | None,
    typer.Option(
        "--topic",
        help="The topic(s): a regular expression as Kafka's include list (',' separates alternatives; "
        "escape '.' as '\\.' to match it literally).",
    ),
]
IfExistsOpt = Annotated[bool, typer.Option("--if-exists", help="Do nothing when no topic matches --topic.")]
ConfigOpt = Annotated[
    list[str] | None, typer.Option("--config", help="A topic config override, key=value (repeatable).")
]
ReplicaAssignmentOpt = Annotated[
    str | None,
    typer.Option(
        "--replica-assignment",
        help="Replicas per partition: broker ids joined by ':', partitions by ',' (e.g. 1:2,2:3).",
    ),
]


# ---------------------------------------------------------------------------------- plumbing


@contextmanager
def _admin(bootstrap: str, timeout_ms: int) -> Iterator[TopicAdmin]:
    """One admin for a command; failures end it as Kafka's TopicCommand does (stdout, exit code 1)."""
    try:
        with KafkaClient(bootstrap, client_id=CLIENT_ID, timeout=timeout_ms / 1000) as client:
            yield TopicAdmin(client, timeout_ms)
    except (TopicCommandError, KafkaClientError) as exc:
        sys.stdout.flush()
        typer.echo(f"{ERROR_PREFIX}{exc}")
        raise typer.Exit(1) from None


def _usage(message: str) -> typer.Exit:
    typer.echo(f"Error: {message}", err=True)
    return typer.Exit(2)


# ------------------------------------------------------------------------------------ create


@topics_app.command("create")
def create(
    topic: Annotated[str, typer.Option("--topic", help="The topic to create.")],
    partitions: Annotated[
        int | None, typer.Option("--partitions", help="Number of partitions (default: the broker's num.partitions).")
    ] = None,
    replication_factor: Annotated[
        int | None,
        typer.Option("--replication-factor", help="Replicas per partition (default: the broker's default)."),
    ] = None,
    config: ConfigOpt = None,
    diskless: Annotated[
        bool, typer.Option("--diskless", help="Create a diskless topic (KIP-1163): diskless.enable=true.")
    ] = False,
    replica_assignment: ReplicaAssignmentOpt = None,
    if_not_exists: Annotated[
        bool, typer.Option("--if-not-exists", help="Do nothing if the topic already exists.")
    ] = False,
    bootstrap_server: BootstrapOpt = DEFAULT_BOOTSTRAP,
    timeout: TimeoutOpt = DEFAULT_TIMEOUT_MS,
) -> None:
    """Create a topic (--create)."""
    if replica_assignment is not None and (partitions is not None or replication_factor is not None):
        raise _usage('Option "[replica-assignment]" can\'t be used with option "[partitions]" or "[replication-factor]"')
    if "." in topic or "_" in topic:  # Kafka's Topic.hasCollisionChars
        typer.echo(
            "WARNING: Due to limitations in metric names, topics with a period ('.') or underscore ('_') could "
            "collide. To avoid issues it is best to use either, but not both."
        )
    with _admin(bootstrap_server, timeout) as admin:
        if replication_factor is not None and not 1 <= replication_factor <= _INT16_MAX:
            raise TopicCommandError(f"The replication factor must be between 1 and {_INT16_MAX} inclusive")
        if partitions is not None and partitions < 1:
            raise TopicCommandError("The partitions must be greater than 0")
        configs = parse_configs(config or [])
        if diskless:
            if configs.get(DISKLESS_CONFIG, "true") != "true":
                raise TopicCommandError(f"--diskless conflicts with --config {DISKLESS_CONFIG}={configs[DISKLESS_CONFIG]}")
            configs[DISKLESS_CONFIG] = "true"
        assignment = parse_replica_assignment(replica_assignment) if replica_assignment is not None else {}
        code, message = admin.create_topic(
            topic,
            -1 if partitions is None else partitions,
            -1 if replication_factor is None else replication_factor,
            assignment,
            configs,
        )
        if code == ErrorCode.topic_already_exists:
            if if_not_exists:
                return
            raise TopicCommandError(message or f"Topic '{topic}' already exists.")
        typer.echo(f"Created topic {topic}.")


# -------------------------------------------------------------------------------------- list


@topics_app.command("list")
def list_topics(
    topic: TopicRegexOpt = None,
    diskless: Annotated[bool, typer.Option("--diskless", help="Only diskless topics (KIP-1163).")] = False,
    exclude_internal: Annotated[bool, typer.Option("--exclude-internal", help="Leave internal topics out.")] = False,
    bootstrap_server: BootstrapOpt = DEFAULT_BOOTSTRAP,
    timeout: TimeoutOpt = DEFAULT_TIMEOUT_MS,
) -> None:
    """List topic names (--list), sorted; --diskless keeps diskless topics only."""
    with _admin(bootstrap_server, timeout) as admin:
        cluster = admin.topics()
        names = select_topics(cluster, topic, exclude_internal)
        if diskless and names:
            flags = admin.diskless_flags(cluster, names)
            names = [n for n in names if flags[n]]
    for name in names:
        typer.echo(name)


# ---------------------------------------------------------------------------------- describe


@topics_app.command("describe")
def describe(
    topic: TopicRegexOpt = None,
    if_exists: IfExistsOpt = False,
    under_replicated_partitions: Annotated[
        bool,
        typer.Option("--under-replicated-partitions", help="Only partitions whose ISR is smaller than their replicas."),
    ] = False,
    unavailable_partitions: Annotated[
        bool,
        typer.Option(
            "--unavailable-partitions",
            help="Only partitions without a leader, or whose leader is not a live broker.",
        ),
    ] = False,
    under_min_isr_partitions: Annotated[
        bool,
        typer.Option(
            "--under-min-isr-partitions",
            help="Only partitions whose ISR count is less than the topic's min.insync.replicas (or without a leader).",
        ),
    ] = False,
    at_min_isr_partitions: Annotated[
        bool,
        typer.Option(
            "--at-min-isr-partitions", help="Only partitions whose ISR count equals the topic's min.insync.replicas."
        ),
    ] = False,
    exclude_internal: Annotated[bool, typer.Option("--exclude-internal", help="Leave internal topics out.")] = False,
    bootstrap_server: BootstrapOpt = DEFAULT_BOOTSTRAP,
    timeout: TimeoutOpt = DEFAULT_TIMEOUT_MS,
) -> None:
    """Describe topics (--describe): configs, kind, and per partition replicas, log start and end offsets.

    The report options print only the partitions they name (those of any, when several are given) and
    no topic lines, as kafka-topics.sh does."""
    reports = PartitionReports(
        under_replicated=under_replicated_partitions,
        unavailable=unavailable_partitions,
        under_min_isr=under_min_isr_partitions,
        at_min_isr=at_min_isr_partitions,
    )
    with _admin(bootstrap_server, timeout) as admin:
        cluster = admin.topics()
        names = select_topics(cluster, topic, exclude_internal)
        ensure_topic_exists(names, topic, not if_exists)
        if not names:
            return
        for name in names:
            meta = cluster.topics[name]
            if meta.error != ErrorCode.none:
                raise broker_failure(meta.error, None)
        headers: dict[str, tuple[list[ConfigEntry], bool]] | None = None
        min_isr: dict[str, int] | None = None
        tiered: list[str] = []
        if not reports.any:
            configs = admin.describe_configs(names)
            tiered = [n for n in names if any(
                c.name in ("remote.storage.enable", "remote.log.delete.on.disable") and c.value == "true"
                for c in configs[n]
            )]
            if tiered:  # the KIP-950 state of tiered topics
                for n, entries in admin.describe_configs(tiered, list(TIERED_STATE_KEYS)).items():
                    configs[n] = [*configs[n], *entries]
            flags = {n: cluster.topics[n].is_diskless for n in names}
            headers = {
                n: (
                    configs[n],
                    bool(flag)
                    if flag is not None
                    else any(c.name == DISKLESS_CONFIG and c.value == "true" for c in configs[n]),
                )
                for n, flag in flags.items()
            }
        elif reports.needs_min_isr:
            configs = admin.describe_configs(names, [MIN_ISR_CONFIG])
            min_isr = {n: min_insync_replicas(n, configs[n]) for n in names}
        selected = reported_partitions(cluster, names, reports, min_isr)
        offsets = admin.log_offsets(
            [TopicPartition(n, p.partition) for n, parts in selected.items() for p in parts if p.leader >= 0]
        )
        local_starts = admin.local_log_starts([
            TopicPartition(n, p.partition) for n, parts in selected.items() if n in tiered
            for p in parts if p.leader >= 0
        ]) if tiered else {}
    for line in describe_lines(cluster, selected, offsets, headers, local_starts):
        typer.echo(line)


# ------------------------------------------------------------------------------------- alter


@topics_app.command("alter")
def alter(
    topic: TopicRegexOpt = None,
    partitions: Annotated[
        int | None, typer.Option("--partitions", help="The new (larger) number of partitions (CreatePartitions).")
    ] = None,
    replica_assignment: ReplicaAssignmentOpt = None,
    config: ConfigOpt = None,
    delete_config: Annotated[
        list[str] | None, typer.Option("--delete-config", help="A topic config override to remove (repeatable).")
    ] = None,
    if_exists: IfExistsOpt = False,
    bootstrap_server: BootstrapOpt = DEFAULT_BOOTSTRAP,
    timeout: TimeoutOpt = DEFAULT_TIMEOUT_MS,
) -> None:
    """Alter topics (--alter): --config/--delete-config, or --partitions (needs CreatePartitions)."""
    if topic is None:
        raise _usage('Missing required argument "[topic]"')
    deletes = [k.strip() for value in (delete_config or []) for k in value.split(",") if k.strip()]
    if partitions is None and not config and not deletes:
        raise _usage("alter needs --partitions, --config or --delete-config")
    if replica_assignment is not None and partitions is None:
        raise _usage('Option "[replica-assignment]" needs option "[partitions]"')
    if partitions is not None:
        typer.echo(
            "WARNING: If partitions are increased for a topic that has a key, the partition logic or ordering "
            "of the messages will be affected"
        )
    with _admin(bootstrap_server, timeout) as admin:
        sets = parse_configs(config or [])
        cluster = admin.topics()
        names = select_topics(cluster, topic)
        ensure_topic_exists(names, topic, not if_exists)
        if not names:
            return
        if partitions is not None:
            admin.supports(Api.CREATE_PARTITIONS)  # before any change: all or nothing of what was asked
        if set(sets) & set(deletes):
            raise TopicCommandError("Error due to duplicate config keys")  # what Kafka's broker answers
        if deletes:  # kafka-configs' check: only configs set on the topic can be removed
            current = admin.describe_configs(names)
            for name in names:
                overridden = {c.name for c in current[name] if not c.is_default}
                invalid = [k for k in deletes if k not in overridden]
                if invalid:
                    raise TopicCommandError(f"Invalid config(s): {','.join(invalid)}")
        if sets or deletes:
            altered, failure = admin.alter_configs(names, sets, deletes)
            for name in altered:
                typer.echo(f"Updated config for topic {name}.")
            if failure is not None:
                raise failure
        if partitions is not None:
            assignment = parse_replica_assignment(replica_assignment) if replica_assignment is not None else {}
            new_replicas = {
                n: [assignment[i] for i in sorted(assignment) if i >= len(cluster.topics[n].partitions)] for n in names
            }
            admin.create_partitions(dict.fromkeys(names, partitions), new_replicas)
            typer.echo("Adding partitions succeeded!")


# ------------------------------------------------------------------------------------ delete


@topics_app.command("delete")
def delete(
    topic: TopicRegexOpt = None,
    if_exists: IfExistsOpt = False,
    bootstrap_server: BootstrapOpt = DEFAULT_BOOTSTRAP,
    timeout: TimeoutOpt = DEFAULT_TIMEOUT_MS,
) -> None:
    """Delete topics (--delete); prints nothing on success, as Kafka's tool."""
    if topic is None:
        raise _usage('Missing required argument "[topic]"')
    with _admin(bootstrap_server, timeout) as admin:
        names = select_topics(admin.topics(), topic)
        ensure_topic_exists(names, topic, not if_exists)
        if names:
            admin.delete_topics(names)
