"""Topic admin calls for ``shoal topics``: Metadata, CreateTopics, DeleteTopics, DescribeConfigs,
IncrementalAlterConfigs and CreatePartitions, with Kafka's admin client's errors.

Requests go through ``KafkaClient``'s connections with versions negotiated here, so the shared
client stays as the groups tool uses it.
"""

from __future__ import annotations

import datetime
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import typer

from shoal.cli.kafka_client import (
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    BrokerConnection,
    BrokerConnectionError,
    KafkaClient,
    TopicPartition,
    UnsupportedApiError,
    error_message,
    error_name,
    negotiate_version,
)
from shoal.protocol.apis import request_class
from shoal.protocol.build import make, nested
from shoal.protocol.errors import ErrorCode

DISKLESS_CONFIG = "diskless.enable"
_RETRY_BACKOFF_S = 0.1

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


def broker_failure(code: ErrorCode, message: str | None) -> TopicCommandError:
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
                raise broker_failure(result.error_code, result.error_message)
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

    def local_log_starts(self, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, int | None]:
        """The local log start (ListOffsets -4, KIP-405) of tiered partitions; None where unknown."""
        if not partitions:
            return {}
        found = self.client.list_offsets(dict.fromkeys(partitions, EARLIEST_LOCAL_TIMESTAMP))
        return {
            tp: a.offset if (a := found.get(tp)) is not None and a.error == ErrorCode.none else None
            for tp in partitions
        }

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
            raise broker_failure(code, message)
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
                raise broker_failure(result.error_code, getattr(result, "error_message", None))

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
                failure = failure or broker_failure(result.error_code, result.error_message)
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
                raise broker_failure(result.error_code, result.error_message)
