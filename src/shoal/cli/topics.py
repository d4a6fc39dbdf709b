"""``shoal topics``: create, list, describe, alter and delete topics, shaped like kafka-topics.sh.

Same options, messages and layout as Kafka's TopicCommand, so operators and their scripts can
move between the two: ``Created topic T.``, ``Error while executing topic command : ...`` (on
stdout with exit code 1, as Kafka prints it), ``--topic`` as Kafka's include-list regex for
describe/alter/delete, the tab-separated describe lines. KIP-1163 additions: ``create
--diskless`` (``diskless.enable=true``), ``list --diskless`` (Metadata v14's IsDiskless, or
DescribeConfigs on older brokers), and ``describe`` also prints each topic's kind and each
partition's log start and end offsets. ``alter --config/--delete-config`` uses
IncrementalAlterConfigs (what kafka-configs.sh does); ``alter --partitions`` needs CreatePartitions,
which a broker may not serve: that is reported the way Kafka's admin client reports it.

Requests go through ``KafkaClient``'s connections with versions negotiated here, so the shared
client stays as the groups tool uses it.
"""

from __future__ import annotations

import datetime
import re
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Annotated, Any

import typer

from shoal.cli.diskless_metadata import kafka_uuid
from shoal.cli.kafka_client import (
    DEFAULT_BOOTSTRAP,
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    BrokerConnection,
    BrokerConnectionError,
    KafkaClient,
    KafkaClientError,
    TopicPartition,
    UnsupportedApiError,
    error_message,
    error_name,
    negotiate_version,
)
from shoal.protocol.apis import request_class
from shoal.protocol.build import make, nested
from shoal.protocol.errors import ErrorCode

topics_app = typer.Typer(
    help="Create, list, describe, alter and delete topics (like kafka-topics.sh).", no_args_is_help=True
)

CLIENT_ID = "shoal-topics"
ERROR_PREFIX = "Error while executing topic command : "
DEFAULT_TIMEOUT_MS = 30_000  # Kafka's admin request.timeout.ms
DISKLESS_CONFIG = "diskless.enable"
_RETRY_BACKOFF_S = 0.1
_INT16_MAX = 2**15 - 1

TOPIC_RESOURCE = 2  # ConfigResource.Type.TOPIC
OP_SET, OP_DELETE = 0, 1  # IncrementalAlterConfigs operations
SOURCE_DEFAULT = 5  # DescribeConfigs ConfigSource.DEFAULT_CONFIG


class Api:
    """API keys this tool sends, with the versions it can build and Kafka's ApiKeys names."""

    METADATA = 3
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    DESCRIBE_CONFIGS = 32
    CREATE_PARTITIONS = 37
    INCREMENTAL_ALTER_CONFIGS = 44


VERSIONS: dict[int, tuple[int, int]] = {
    Api.METADATA: (1, 14),  # v14: KIP-1163's IsDiskless
    Api.CREATE_TOPICS: (2, 7),
    Api.DELETE_TOPICS: (1, 6),
    Api.DESCRIBE_CONFIGS: (1, 4),
    Api.CREATE_PARTITIONS: (0, 3),
    Api.INCREMENTAL_ALTER_CONFIGS: (0, 1),
}
KAFKA_API_NAMES = {
    Api.METADATA: "METADATA",
    Api.CREATE_TOPICS: "CREATE_TOPICS",
    Api.DELETE_TOPICS: "DELETE_TOPICS",
    Api.DESCRIBE_CONFIGS: "DESCRIBE_CONFIGS",
    Api.CREATE_PARTITIONS: "CREATE_PARTITIONS",
    Api.INCREMENTAL_ALTER_CONFIGS: "INCREMENTAL_ALTER_CONFIGS",
}

BootstrapOpt = Annotated[
    str, typer.Option("--bootstrap-server", help="The broker(s) to connect to: HOST:PORT[,HOST:PORT].")
]
TimeoutOpt = Annotated[
    int, typer.Option("--timeout", help="Milliseconds each broker operation may take, retries included.", min=1)
]
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


class TopicCommandError(Exception):
    """What Kafka's TopicCommand prints after ``Error while executing topic command : ``."""


class UnsupportedApi(TopicCommandError):
    """The broker does not serve an API (or no version this tool speaks): Kafka's UnsupportedVersionException."""


# ------------------------------------------------------------------------------------ results


@dataclass(frozen=True, slots=True)
class PartitionMeta:
    partition: int
    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline: tuple[int, ...]
    error: ErrorCode


@dataclass(frozen=True, slots=True)
class TopicMeta:
    name: str
    topic_id: uuid.UUID | None
    error: ErrorCode
    is_internal: bool
    partitions: tuple[PartitionMeta, ...]
    is_diskless: bool | None  # None: the broker answered Metadata below v14, which has no IsDiskless


@dataclass(frozen=True, slots=True)
class ClusterTopics:
    brokers: frozenset[int]
    topics: dict[str, TopicMeta]


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    name: str
    value: str | None
    is_default: bool


# ------------------------------------------------------------------------------------- admin


def negotiate(conn: BrokerConnection, api_key: int) -> int:
    """The version to use for ``api_key`` with this broker (see kafka_client.negotiate_version)."""
    try:
        return negotiate_version(conn, api_key, VERSIONS[api_key], KAFKA_API_NAMES[api_key])
    except UnsupportedApiError as exc:
        raise UnsupportedApi(str(exc)) from None


def _failure(code: ErrorCode, message: str | None) -> TopicCommandError:
    """A broker error as Kafka's admin client surfaces it: the broker's message, else the code's."""
    return TopicCommandError(message or error_message(code))


class TopicAdmin:
    """Topic operations over a KafkaClient's connections (any broker: Kafka's brokers forward to the
    controller). Reads are retried on broken connections until the deadline; changes are sent once,
    as Kafka's tool does (retryOnQuotaViolation=false, no retry that could double-apply)."""

    def __init__(self, client: KafkaClient, timeout_ms: int) -> None:
        self.client = client
        self.timeout_ms = timeout_ms

    def _call(self, api_key: int, build: Callable[[int, type], Any], *, retry: bool) -> Any:
        deadline = time.monotonic() + self.timeout_ms / 1000
        while True:
            try:
                conn = self.client.any_connection()
                version = negotiate(conn, api_key)
                cls = request_class(api_key, version)
                return conn.request(api_key, version, build(version, cls))
            except BrokerConnectionError:
                if not retry or time.monotonic() + _RETRY_BACKOFF_S >= deadline:
                    raise
                time.sleep(_RETRY_BACKOFF_S)

    def supports(self, api_key: int) -> None:
        """Raise UnsupportedApi unless the broker serves ``api_key`` at a version this tool speaks."""
        negotiate(self.client.any_connection(), api_key)

    @property
    def _timeout(self) -> datetime.timedelta:
        return datetime.timedelta(milliseconds=self.timeout_ms)

    # -- reads ---------------------------------------------------------------------------------
    def topics(self) -> ClusterTopics:
        """Every topic with its partitions (Metadata for all topics, never auto-creating)."""

        def build(version: int, cls: type) -> Any:
            return make(cls, topics=None, allow_auto_topic_creation=False,
                        include_cluster_authorized_operations=False, include_topic_authorized_operations=False,
                        rack_id="")

        response = self._call(Api.METADATA, build, retry=True)
        zero = uuid.UUID(int=0)
        topics: dict[str, TopicMeta] = {}
        for t in response.topics:
            if t.name is None:
                continue
            topic_id = getattr(t, "topic_id", None)
            partitions = tuple(
                PartitionMeta(
                    partition=int(p.partition_index),
                    leader=int(p.leader_id),
                    replicas=tuple(int(b) for b in p.replica_nodes),
                    isr=tuple(int(b) for b in p.isr_nodes),
                    offline=tuple(int(b) for b in getattr(p, "offline_replicas", ())),
                    error=p.error_code,
                )
                for p in sorted(t.partitions, key=lambda p: p.partition_index)
            )
            topics[t.name] = TopicMeta(
                name=t.name,
                topic_id=None if topic_id is None or topic_id == zero else topic_id,
                error=t.error_code,
                is_internal=bool(t.is_internal),
                partitions=partitions,
                is_diskless=bool(t.is_diskless) if hasattr(t, "is_diskless") else None,
            )
        return ClusterTopics(frozenset(int(b.node_id) for b in response.brokers), topics)

    def describe_configs(self, names: Sequence[str], keys: Sequence[str] | None = None) -> dict[str, list[ConfigEntry]]:
        """Each topic's configs (all of them, or ``keys``) with whether each is the default."""

        def build(version: int, cls: type) -> Any:
            resource_cls = nested(cls, "DescribeConfigsResource")
            resources = tuple(
                make(resource_cls, resource_type=TOPIC_RESOURCE, resource_name=name,
                     configuration_keys=None if keys is None else tuple(keys))
                for name in names
            )
            return make(cls, resources=resources, include_synonyms=False, include_documentation=False)

        response = self._call(Api.DESCRIBE_CONFIGS, build, retry=True)
        out: dict[str, list[ConfigEntry]] = {}
        for result in response.results:
            if result.error_code != ErrorCode.none:
                raise _failure(result.error_code, result.error_message)
            out[result.resource_name] = [
                ConfigEntry(c.name, c.value, int(c.config_source) == SOURCE_DEFAULT) for c in result.configs
            ]
        missing = [n for n in names if n not in out]
        if missing:
            raise TopicCommandError(f"DescribeConfigs did not answer for topic '{missing[0]}'")
        return out

    def diskless_flags(self, cluster: ClusterTopics, names: Sequence[str]) -> dict[str, bool]:
        """Whether each topic is diskless: Metadata v14 says so, older brokers are asked for diskless.enable."""
        flags = {n: cluster.topics[n].is_diskless for n in names}
        unknown = [n for n, flag in flags.items() if flag is None]
        if unknown:
            for name, entries in self.describe_configs(unknown, [DISKLESS_CONFIG]).items():
                flags[name] = any(e.name == DISKLESS_CONFIG and e.value == "true" for e in entries)
        return {n: bool(flag) for n, flag in flags.items()}

    def log_offsets(self, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, tuple[int | None, int | None]]:
        """(log start, log end) of each partition from ListOffsets earliest/latest; None where unknown."""
        if not partitions:
            return {}
        earliest = self.client.list_offsets(dict.fromkeys(partitions, EARLIEST_TIMESTAMP))
        latest = self.client.list_offsets(dict.fromkeys(partitions, LATEST_TIMESTAMP))
        out: dict[TopicPartition, tuple[int | None, int | None]] = {}
        for tp in partitions:
            start, end = earliest.get(tp), latest.get(tp)
            for answer in (start, end):
                if answer is not None and answer.error != ErrorCode.none:
                    typer.echo(f"WARNING: ListOffsets for {tp} failed: {error_name(answer.error)}", err=True)
            out[tp] = (
                start.offset if start is not None and start.error == ErrorCode.none else None,
                end.offset if end is not None and end.error == ErrorCode.none else None,
            )
        return out

    # -- changes -------------------------------------------------------------------------------
    def create_topic(
        self,
        name: str,
        partitions: int,
        replication_factor: int,
        assignment: Mapping[int, Sequence[int]],
        configs: Mapping[str, str],
    ) -> tuple[ErrorCode, str | None]:
        """CreateTopics for one topic; returns NONE or TOPIC_ALREADY_EXISTS with the broker's message,
        raises on other errors."""

        def build(version: int, cls: type) -> Any:
            topic = make(
                nested(cls, "CreatableTopic"),
                name=name,
                num_partitions=partitions,
                replication_factor=replication_factor,
                assignments=tuple(
                    make(nested(cls, "CreatableReplicaAssignment"), partition_index=p, broker_ids=tuple(brokers))
                    for p, brokers in sorted(assignment.items())
                ),
                configs=tuple(
                    make(nested(cls, "CreatableTopicConfig"), name=k, value=v) for k, v in configs.items()
                ),
            )
            return make(cls, topics=(topic,), timeout=self._timeout, validate_only=False)

        response = self._call(Api.CREATE_TOPICS, build, retry=False)
        results = [r for r in response.topics if r.name == name]
        if not results:
            raise TopicCommandError(f"CreateTopics did not answer for topic '{name}'")
        code, message = results[0].error_code, getattr(results[0], "error_message", None)
        if code not in (ErrorCode.none, ErrorCode.topic_already_exists):
            raise _failure(code, message)
        return code, message

    def delete_topics(self, names: Sequence[str]) -> None:
        """DeleteTopics by name; the first failing topic's error is raised after all were tried."""

        def build(version: int, cls: type) -> Any:
            if version >= 6:
                state_cls = nested(cls, "DeleteTopicState")
                return make(cls, topics=tuple(make(state_cls, name=n, topic_id=None) for n in names),
                            timeout=self._timeout)
            return make(cls, topic_names=tuple(names), timeout=self._timeout)

        response = self._call(Api.DELETE_TOPICS, build, retry=False)
        answered = {r.name: r for r in response.responses}
        for name in names:
            result = answered.get(name)
            if result is None:
                raise TopicCommandError(f"DeleteTopics did not answer for topic '{name}'")
            if result.error_code != ErrorCode.none:
                raise _failure(result.error_code, getattr(result, "error_message", None))

    def alter_configs(
        self, names: Sequence[str], sets: Mapping[str, str], deletes: Sequence[str]
    ) -> tuple[list[str], TopicCommandError | None]:
        """IncrementalAlterConfigs (SET / DELETE) on each topic (each its own resource, so some may
        fail while others change); returns the altered topics and the first failure."""

        def build(version: int, cls: type) -> Any:
            resource_cls, config_cls = nested(cls, "AlterConfigsResource"), nested(cls, "AlterableConfig")
            changes = [make(config_cls, name=k, config_operation=OP_SET, value=v) for k, v in sets.items()]
            changes += [make(config_cls, name=k, config_operation=OP_DELETE, value=None) for k in deletes]
            resources = tuple(
                make(resource_cls, resource_type=TOPIC_RESOURCE, resource_name=n, configs=tuple(changes))
                for n in names
            )
            return make(cls, resources=resources, validate_only=False)

        response = self._call(Api.INCREMENTAL_ALTER_CONFIGS, build, retry=False)
        failure: TopicCommandError | None = None
        done = []
        answered = {r.resource_name: r for r in response.responses}
        for name in names:
            result = answered.get(name)
            if result is None:
                failure = failure or TopicCommandError(f"IncrementalAlterConfigs did not answer for topic '{name}'")
            elif result.error_code != ErrorCode.none:
                failure = failure or _failure(result.error_code, result.error_message)
            else:
                done.append(name)
        return done, failure

    def create_partitions(self, counts: Mapping[str, int], assignments: Mapping[str, Sequence[Sequence[int]]]) -> None:
        """CreatePartitions: raise each topic's partition count (with new replicas when given)."""

        def build(version: int, cls: type) -> Any:
            topic_cls, assignment_cls = nested(cls, "CreatePartitionsTopic"), nested(cls, "CreatePartitionsAssignment")
            topics = tuple(
                make(
                    topic_cls,
                    name=name,
                    count=count,
                    assignments=tuple(make(assignment_cls, broker_ids=tuple(b)) for b in assignments[name])
                    if assignments.get(name)
                    else None,
                )
                for name, count in counts.items()
            )
            return make(cls, topics=topics, timeout=self._timeout, validate_only=False)

        response = self._call(Api.CREATE_PARTITIONS, build, retry=False)
        for result in response.results:
            if result.error_code != ErrorCode.none:
                raise _failure(result.error_code, result.error_message)


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


def include_list(pattern: str) -> re.Pattern[str]:
    """Kafka's IncludeList: ',' means '|', blanks and surrounding quotes dropped, whole-name match."""
    raw = pattern.strip().replace(",", "|").replace(" ", "")
    raw = re.sub(r"[\"']+$", "", re.sub(r"^[\"']+", "", raw))
    try:
        return re.compile(raw)
    except re.error as exc:
        raise TopicCommandError(f"Invalid topic regular expression '{pattern}': {exc}") from None


def select_topics(cluster: ClusterTopics, pattern: str | None, exclude_internal: bool = False) -> list[str]:
    """Kafka's getTopics: all topic names, sorted, filtered by the include list."""
    regex = include_list(pattern) if pattern is not None else None
    return [
        name
        for name in sorted(cluster.topics)
        if not (exclude_internal and cluster.topics[name].is_internal)
        and (regex is None or regex.fullmatch(name) is not None)
    ]


def ensure_topic_exists(found: Sequence[str], requested: str | None, required: bool) -> None:
    if requested is not None and required and not found:
        raise TopicCommandError(f"Topic '{requested}' does not exist as expected")


def parse_configs(values: Sequence[str]) -> dict[str, str]:
    """Kafka's parseTopicConfigsToBeAdded: each value is exactly ``key=val`` (blanks around '=' allowed)."""
    configs: dict[str, str] = {}
    for value in values:
        parts = re.split(r"\s*=\s*", value)
        if len(parts) != 2:
            raise TopicCommandError(
                'requirement failed: Invalid topic config: all configs to be added must be in the format "key=val".'
            )
        configs[parts[0].strip()] = parts[1].strip()
    return configs


def parse_replica_assignment(text: str) -> dict[int, list[int]]:
    """Kafka's parseReplicaAssignment: ``1:2,2:3`` is partition 0 on brokers 1,2 and partition 1 on 2,3."""
    assignment: dict[int, list[int]] = {}
    for index, part in enumerate(text.split(",")):
        try:
            brokers = [int(b.strip()) for b in part.split(":")]
        except ValueError:
            raise TopicCommandError(f'For input string: "{part}"') from None
        duplicates = sorted({b for b in brokers if brokers.count(b) > 1})
        if duplicates:
            raise TopicCommandError(
                f"Partition replica lists may not contain duplicate entries: {','.join(map(str, duplicates))}"
            )
        assignment[index] = brokers
        if len(brokers) != len(assignment[0]):
            raise TopicCommandError(f"Partition {index} has different replication factor: {brokers}")
    return assignment


def _ids(values: Sequence[int]) -> str:
    return ",".join(map(str, values))


def _offset(value: int | None) -> str:
    return "-" if value is None else str(value)


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


def topic_line(meta: TopicMeta, configs: Sequence[ConfigEntry], is_diskless: bool) -> str:
    """Kafka's TopicDescription line, plus the kind."""
    overrides = ",".join(f"{c.name}={c.value}" for c in configs if not c.is_default)
    replication = len(meta.partitions[0].replicas) if meta.partitions else 0
    line = f"Topic: {meta.name}"
    if meta.topic_id is not None:
        line += f"\tTopicId: {kafka_uuid(meta.topic_id)}"
    line += f"\tPartitionCount: {len(meta.partitions)}\tReplicationFactor: {replication}\tConfigs: {overrides}"
    return line + f"\tKind: {'diskless' if is_diskless else 'classic'}"


def partition_line(topic: str, p: PartitionMeta, offsets: tuple[int | None, int | None]) -> str:
    """Kafka's PartitionDescription line (``Offline:`` when replicas are offline), plus log start/end."""
    line = (
        f"\tTopic: {topic}\tPartition: {p.partition}\tLeader: {p.leader if p.leader >= 0 else 'none'}"
        f"\tReplicas: {_ids(p.replicas)}\tIsr: {_ids(p.isr)}"
    )
    if p.offline:
        line += f"\tOffline: {_ids(p.offline)}"
    return line + f"\tLogStartOffset: {_offset(offsets[0])}\tLogEndOffset: {_offset(offsets[1])}"


@topics_app.command("describe")
def describe(
    topic: TopicRegexOpt = None,
    if_exists: IfExistsOpt = False,
    under_replicated_partitions: Annotated[
        bool, typer.Option("--under-replicated-partitions", help="Only partitions whose ISR is smaller than the replicas.")
    ] = False,
    unavailable_partitions: Annotated[
        bool, typer.Option("--unavailable-partitions", help="Only partitions whose leader is not available.")
    ] = False,
    exclude_internal: Annotated[bool, typer.Option("--exclude-internal", help="Leave internal topics out.")] = False,
    bootstrap_server: BootstrapOpt = DEFAULT_BOOTSTRAP,
    timeout: TimeoutOpt = DEFAULT_TIMEOUT_MS,
) -> None:
    """Describe topics (--describe): configs, kind, and per partition replicas, log start and end offsets."""
    report_only = under_replicated_partitions or unavailable_partitions
    with _admin(bootstrap_server, timeout) as admin:
        cluster = admin.topics()
        names = select_topics(cluster, topic, exclude_internal)
        ensure_topic_exists(names, topic, not if_exists)
        if not names:
            return
        for name in names:
            meta = cluster.topics[name]
            if meta.error != ErrorCode.none:
                raise _failure(meta.error, None)
        configs = admin.describe_configs(names)
        flags = {n: cluster.topics[n].is_diskless for n in names}
        for name, flag in flags.items():
            if flag is None:
                flags[name] = any(c.name == DISKLESS_CONFIG and c.value == "true" for c in configs[name])
        wanted = [
            TopicPartition(n, p.partition) for n in names for p in cluster.topics[n].partitions if p.leader >= 0
        ]
        offsets = admin.log_offsets(wanted)
        for name in names:
            meta = cluster.topics[name]
            if not report_only:
                typer.echo(topic_line(meta, configs[name], bool(flags[name])))
            for p in meta.partitions:
                unavailable = p.leader < 0 or p.leader not in cluster.brokers
                if report_only and not (
                    (under_replicated_partitions and len(p.isr) < len(p.replicas))
                    or (unavailable_partitions and unavailable)
                ):
                    continue
                typer.echo(partition_line(name, p, offsets.get(TopicPartition(name, p.partition), (None, None))))


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
