"""The calls of ``shoal reassign-partitions``, routed as Kafka's admin client routes them.

AlterPartitionReassignments (45) and ListPartitionReassignments (46) go to the controller named
by Metadata (any broker when Metadata names none), and are retried there on NOT_CONTROLLER and
broken connections until the deadline. IncrementalAlterConfigs (44) of a BROKER resource goes to
that broker, of TOPIC resources to any broker. DescribeLogDirs (35) and AlterReplicaLogDirs (34)
go to the broker holding the replicas. Replica sets come from Metadata (replica_nodes), which
lists unfenced brokers only, as Kafka's describeCluster does.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from shoal.cli.kafka_client.cluster import Node, TopicPartition
from shoal.cli.kafka_client.connection import Api, BrokerConnection
from shoal.cli.kafka_client.errors import KafkaApiError, KafkaClientError, RetriableAnswer
from shoal.cli.kafka_client.router import BrokerRouter
from shoal.protocol.apis import request_class
from shoal.protocol.build import make, nested
from shoal.protocol.errors import ErrorCode

BROKER_RESOURCE = 4  # ConfigResource.Type.BROKER
TOPIC_RESOURCE = 2  # ConfigResource.Type.TOPIC
OP_SET, OP_DELETE = 0, 1  # AlterConfigOp.OpType


@dataclass(frozen=True, slots=True)
class PartitionReassignment:
    """An ongoing reassignment as ListPartitionReassignments reports it (Kafka's PartitionReassignment)."""

    replicas: tuple[int, ...]
    adding: tuple[int, ...]
    removing: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class ConfigChange:
    """One IncrementalAlterConfigs operation: SET with a value, or DELETE (value None)."""

    name: str
    value: str | None

    @property
    def operation(self) -> int:
        return OP_DELETE if self.value is None else OP_SET


@dataclass(frozen=True, slots=True)
class ReplicaLogDir:
    """Where a broker keeps a replica: its current dir and the dir of a future replica being copied."""

    current: str | None
    future: str | None


Answer = tuple[ErrorCode, str | None]


class ReassignmentClient(BrokerRouter):
    """The requests of the reassign-partitions tool, over BrokerRouter's connections and retries."""

    # -- brokers and replicas ----------------------------------------------------------------------
    def brokers(self) -> dict[int, Node]:
        """The cluster's (unfenced) brokers, from Metadata."""
        return self.metadata([]).brokers

    def topic_replicas(self, topics: Iterable[str]) -> dict[str, dict[int, tuple[int, ...]] | None]:
        """Each topic's replica list per partition; None for a topic the cluster does not have."""
        names = sorted(set(topics))
        if not names:
            return {}
        return self._retrying("Metadata", lambda: self._topic_replicas_once(names))

    def _topic_replicas_once(self, names: Sequence[str]) -> dict[str, dict[int, tuple[int, ...]] | None]:
        conn = self.any_connection()
        version = conn.version(Api.METADATA)
        cls = request_class(Api.METADATA, version)
        request = make(
            cls,
            topics=tuple(make(nested(cls, "MetadataRequestTopic"), name=n, topic_id=None) for n in names),
            allow_auto_topic_creation=False,
            include_cluster_authorized_operations=False,
            include_topic_authorized_operations=False,
        )
        response = conn.request(Api.METADATA, version, request)
        out: dict[str, dict[int, tuple[int, ...]] | None] = dict.fromkeys(names)
        for t in response.topics:
            if t.name not in out:
                continue
            if t.error_code == ErrorCode.unknown_topic_or_partition:
                continue
            if t.error_code == ErrorCode.leader_not_available:  # still being created
                raise RetriableAnswer(t.error_code)
            if t.error_code != ErrorCode.none:
                raise KafkaApiError(t.error_code, context=f"Metadata for topic '{t.name}'")
            out[t.name] = {int(p.partition_index): tuple(int(b) for b in p.replica_nodes) for p in t.partitions}
        return out

    # -- the controller ----------------------------------------------------------------------------
    def _controller(self) -> BrokerConnection:
        """The controller Metadata names, as Kafka's ControllerNodeProvider; any broker if none."""
        cluster = self.metadata([])
        if cluster.controller_id in cluster.brokers:
            return self.node_connection(cluster.controller_id)
        return self.any_connection()

    def list_reassignments(self, partitions: Iterable[TopicPartition] | None = None) -> dict[TopicPartition, PartitionReassignment]:
        """ListPartitionReassignments: every ongoing reassignment (None), or those of some partitions."""
        asked = None if partitions is None else sorted(set(partitions))
        return self._retrying("ListPartitionReassignments", lambda: self._list_once(asked))

    def _list_once(self, asked: Sequence[TopicPartition] | None) -> dict[TopicPartition, PartitionReassignment]:
        conn = self._controller()
        version = conn.version(Api.LIST_PARTITION_REASSIGNMENTS)
        cls = request_class(Api.LIST_PARTITION_REASSIGNMENTS, version)
        topics = None
        if asked is not None:
            by_topic: dict[str, list[int]] = {}
            for tp in asked:
                by_topic.setdefault(tp.topic, []).append(tp.partition)
            topic_cls = nested(cls, "ListPartitionReassignmentsTopics")
            topics = tuple(make(topic_cls, name=t, partition_indexes=tuple(ps)) for t, ps in by_topic.items())
        request = make(cls, timeout=self._request_timeout(), topics=topics)
        response = conn.request(Api.LIST_PARTITION_REASSIGNMENTS, version, request)
        if response.error_code == ErrorCode.not_controller:
            raise RetriableAnswer(response.error_code, response.error_message)
        if response.error_code != ErrorCode.none:
            raise KafkaApiError(response.error_code, response.error_message, context="ListPartitionReassignments")
        return {
            TopicPartition(t.name, int(p.partition_index)): PartitionReassignment(
                tuple(int(b) for b in p.replicas),
                tuple(int(b) for b in p.adding_replicas),
                tuple(int(b) for b in p.removing_replicas),
            )
            for t in response.topics
            for p in t.partitions
        }

    def alter_reassignments(self, targets: Mapping[TopicPartition, Sequence[int] | None]) -> dict[TopicPartition, Answer]:
        """AlterPartitionReassignments: new replicas per partition, None to cancel one in progress.

        Returns each partition's answer (NONE or the error with its message; a top-level error
        is every partition's). Resending the same targets is harmless, so broken connections
        and NOT_CONTROLLER are retried until the deadline, as Kafka's admin client does.
        """
        if not targets:
            return {}
        return self._retrying("AlterPartitionReassignments", lambda: self._alter_once(targets))

    def _alter_once(self, targets: Mapping[TopicPartition, Sequence[int] | None]) -> dict[TopicPartition, Answer]:
        conn = self._controller()
        version = conn.version(Api.ALTER_PARTITION_REASSIGNMENTS)
        cls = request_class(Api.ALTER_PARTITION_REASSIGNMENTS, version)
        topic_cls, partition_cls = nested(cls, "ReassignableTopic"), nested(cls, "ReassignablePartition")
        by_topic: dict[str, list[Any]] = {}
        for tp in sorted(targets):  # Kafka's admin client orders topics and partitions (TreeMaps)
            replicas = targets[tp]
            by_topic.setdefault(tp.topic, []).append(
                make(
                    partition_cls,
                    partition_index=tp.partition,
                    replicas=None if replicas is None else tuple(int(b) for b in replicas),
                )
            )
        request = make(
            cls,
            timeout=self._request_timeout(),
            allow_replication_factor_change=True,
            topics=tuple(make(topic_cls, name=t, partitions=tuple(ps)) for t, ps in by_topic.items()),
        )
        response = conn.request(Api.ALTER_PARTITION_REASSIGNMENTS, version, request)
        top = response.error_code
        if top == ErrorCode.not_controller:
            raise RetriableAnswer(top, response.error_message)
        answers: dict[TopicPartition, Answer] = {}
        for t in response.responses:
            for p in t.partitions:
                tp = TopicPartition(t.name, int(p.partition_index))
                if top != ErrorCode.none:
                    answers[tp] = (top, response.error_message)
                else:
                    answers[tp] = (p.error_code, p.error_message)
        for tp in targets:
            if tp not in answers:
                if top != ErrorCode.none:
                    answers[tp] = (top, response.error_message)
                else:
                    answers[tp] = (
                        ErrorCode.unknown_server_error,
                        f"The server returned no result for partition {tp}",
                    )
        return {tp: answers[tp] for tp in targets}

    # -- configs -----------------------------------------------------------------------------------
    def alter_broker_configs(self, broker_id: int, changes: Sequence[ConfigChange]) -> Answer:
        """IncrementalAlterConfigs of one BROKER resource, sent to that broker (as Kafka's admin)."""
        answers = self._retrying(
            "IncrementalAlterConfigs",
            lambda: self._alter_configs_once({(BROKER_RESOURCE, str(broker_id)): changes}, broker_id),
        )
        return answers[(BROKER_RESOURCE, str(broker_id))]

    def alter_topic_configs(self, changes: Mapping[str, Sequence[ConfigChange]]) -> dict[str, Answer]:
        """IncrementalAlterConfigs of TOPIC resources, all in one request to any broker."""
        if not changes:
            return {}
        resources = {(TOPIC_RESOURCE, name): ops for name, ops in sorted(changes.items())}
        answers = self._retrying("IncrementalAlterConfigs", lambda: self._alter_configs_once(resources, None))
        return {name: answers[(TOPIC_RESOURCE, name)] for name in changes}

    def _alter_configs_once(
        self, resources: Mapping[tuple[int, str], Sequence[ConfigChange]], node_id: int | None
    ) -> dict[tuple[int, str], Answer]:
        conn = self.any_connection() if node_id is None else self.node_connection(node_id)
        version = conn.version(Api.INCREMENTAL_ALTER_CONFIGS)
        cls = request_class(Api.INCREMENTAL_ALTER_CONFIGS, version)
        resource_cls, config_cls = nested(cls, "AlterConfigsResource"), nested(cls, "AlterableConfig")
        request = make(
            cls,
            resources=tuple(
                make(
                    resource_cls,
                    resource_type=rtype,
                    resource_name=name,
                    configs=tuple(
                        make(config_cls, name=c.name, config_operation=c.operation, value=c.value) for c in ops
                    ),
                )
                for (rtype, name), ops in resources.items()
            ),
            validate_only=False,
        )
        response = conn.request(Api.INCREMENTAL_ALTER_CONFIGS, version, request)
        answers: dict[tuple[int, str], Answer] = {
            (int(r.resource_type), r.resource_name): (r.error_code, r.error_message) for r in response.responses
        }
        for key in resources:
            answers.setdefault(
                key, (ErrorCode.unknown_server_error, f"The server returned no result for resource {key[1]}")
            )
        return answers

    # -- log dirs ----------------------------------------------------------------------------------
    def describe_replica_log_dirs(self, broker_id: int, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, ReplicaLogDir]:
        """DescribeLogDirs at one broker for some partitions: each one's current and future dir."""
        asked = sorted(set(partitions))
        if not asked:
            return {}
        return self._retrying("DescribeLogDirs", lambda: self._describe_dirs_once(broker_id, asked))

    def _describe_dirs_once(self, broker_id: int, asked: Sequence[TopicPartition]) -> dict[TopicPartition, ReplicaLogDir]:
        conn = self.node_connection(broker_id)
        version = conn.version(Api.DESCRIBE_LOG_DIRS)
        cls = request_class(Api.DESCRIBE_LOG_DIRS, version)
        by_topic: dict[str, list[int]] = {}
        for tp in asked:
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        topic_cls = nested(cls, "DescribableLogDirTopic")
        request = make(cls, topics=tuple(make(topic_cls, topic=t, partitions=tuple(ps)) for t, ps in by_topic.items()))
        response = conn.request(Api.DESCRIBE_LOG_DIRS, version, request)
        top = getattr(response, "error_code", ErrorCode.none)
        if top != ErrorCode.none:
            raise KafkaApiError(top, context=f"DescribeLogDirs on broker {broker_id}")
        current: dict[TopicPartition, str] = {}
        future: dict[TopicPartition, str] = {}
        for result in response.results:
            if result.error_code == ErrorCode.kafka_storage_error:  # an offline dir lists no replicas
                continue
            if result.error_code != ErrorCode.none:
                raise KafkaClientError(
                    f"The error {result.error_code.name.upper()} for log directory {result.log_dir} in the "
                    f"response from broker {broker_id} is illegal"
                )
            for t in result.topics:
                for p in t.partitions:
                    tp = TopicPartition(t.name, int(p.partition_index))
                    (future if p.is_future_key else current)[tp] = result.log_dir
        return {tp: ReplicaLogDir(current.get(tp), future.get(tp)) for tp in asked}

    def alter_replica_log_dirs(self, broker_id: int, dirs: Mapping[TopicPartition, str]) -> dict[TopicPartition, ErrorCode]:
        """AlterReplicaLogDirs at one broker: move each replica to its dir. Sent once per call (the
        tool calls again while the answer is REPLICA_NOT_AVAILABLE, as Kafka's does)."""
        if not dirs:
            return {}
        return self._retrying("AlterReplicaLogDirs", lambda: self._alter_dirs_once(broker_id, dirs))

    def _alter_dirs_once(self, broker_id: int, dirs: Mapping[TopicPartition, str]) -> dict[TopicPartition, ErrorCode]:
        conn = self.node_connection(broker_id)
        version = conn.version(Api.ALTER_REPLICA_LOG_DIRS)
        cls = request_class(Api.ALTER_REPLICA_LOG_DIRS, version)
        dir_cls, topic_cls = nested(cls, "AlterReplicaLogDir"), nested(cls, "AlterReplicaLogDirTopic")
        grouped: dict[str, dict[str, list[int]]] = {}
        for tp in sorted(dirs):
            grouped.setdefault(dirs[tp], {}).setdefault(tp.topic, []).append(tp.partition)
        request = make(
            cls,
            dirs=tuple(
                make(
                    dir_cls,
                    path=path,
                    topics=tuple(make(topic_cls, name=t, partitions=tuple(ps)) for t, ps in topics.items()),
                )
                for path, topics in grouped.items()
            ),
        )
        response = conn.request(Api.ALTER_REPLICA_LOG_DIRS, version, request)
        answers = {
            TopicPartition(t.topic_name, int(p.partition_index)): p.error_code
            for t in response.results
            for p in t.partitions
        }
        return {tp: answers.get(tp, ErrorCode.unknown_server_error) for tp in dirs}

    # ----------------------------------------------------------------------------------------------
    def _request_timeout(self) -> datetime.timedelta:
        """The TimeoutMs field of the requests: the operation's timeout (Kafka sends its deadline's)."""
        return datetime.timedelta(seconds=self.timeout)
