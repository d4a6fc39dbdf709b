"""A fake cluster for ``shoal reassign-partitions`` unit tests (tests/unit/test_reassign_cli.py).

It answers the kio request objects the tool sends, after a round trip through the wire encoding
(so every request is one a broker can decode), and records them, so the tests also pin the wire
fields the broker side has to match (the connection, the round trip and Metadata: fake_cli_wire.py).
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from typing import Any

from shoal.cli.kafka_client import (
    PartitionReassignment,
    TopicPartition,
)
from shoal.protocol.apis import response_class
from shoal.protocol.build import make, nested
from shoal.protocol.errors import ErrorCode
from tests.support.fake_cli_wire import (
    Sent,
    metadata_response,
)

TP = TopicPartition

STATIC_BROKER_CONFIGS = "Broker configs are static in this Shoal version: set them in server.properties or with --override"


@dataclass
class FakeCluster:
    """Brokers 1..N answering what the tool asks; state is set by each test."""

    topics: dict[str, dict[int, list[int]]]
    brokers: dict[int, str | None] = field(default_factory=lambda: {1: None, 2: None, 3: None, 4: None})
    controller: int = 2
    reassignments: dict[TopicPartition, PartitionReassignment] = field(default_factory=dict)
    alter_errors: dict[TopicPartition, tuple[ErrorCode, str | None]] = field(default_factory=dict)
    broker_config_error: tuple[ErrorCode, str] | None = (ErrorCode.invalid_request, STATIC_BROKER_CONFIGS)
    not_controller_answers: int = 0
    log_dirs: dict[tuple[int, TopicPartition], tuple[str | None, str | None]] = field(default_factory=dict)
    replica_not_available: int = 0  # AlterReplicaLogDirs answers REPLICA_NOT_AVAILABLE this many times
    missing_apis: set[int] = field(default_factory=set)
    sent: list[Sent] = field(default_factory=list)

    def of(self, api_key: int) -> list[Sent]:
        return [s for s in self.sent if s.api_key == api_key]

    def handle(self, node: int, api_key: int, version: int, req: Any) -> Any:
        self.sent.append(Sent(node, api_key, version, req))
        cls = response_class(api_key, version)
        handler = getattr(self, f"_api_{api_key}")
        return handler(cls, req)

    def _api_3(self, cls: type, req: Any) -> Any:  # Metadata
        return metadata_response(cls, req, self.topics, self.brokers, self.controller)

    def _api_46(self, cls: type, req: Any) -> Any:  # ListPartitionReassignments
        topic_cls, part_cls = nested(cls, "OngoingTopicReassignment"), nested(cls, "OngoingPartitionReassignment")
        if self.not_controller_answers:
            self.not_controller_answers -= 1
            return make(cls, throttle_time=datetime.timedelta(0), error_code=ErrorCode.not_controller,
                        error_message=None, topics=())
        asked = None if req.topics is None else {TP(t.name, int(p)) for t in req.topics for p in t.partition_indexes}
        by_topic: dict[str, list[Any]] = {}
        for tp, r in sorted(self.reassignments.items()):
            if asked is None or tp in asked:
                by_topic.setdefault(tp.topic, []).append(
                    make(part_cls, partition_index=tp.partition, replicas=r.replicas, adding_replicas=r.adding,
                         removing_replicas=r.removing)
                )
        return make(cls, throttle_time=datetime.timedelta(0), error_code=ErrorCode.none, error_message=None,
                    topics=tuple(make(topic_cls, name=t, partitions=tuple(ps)) for t, ps in by_topic.items()))

    def _api_45(self, cls: type, req: Any) -> Any:  # AlterPartitionReassignments
        topic_cls, part_cls = nested(cls, "ReassignableTopicResponse"), nested(cls, "ReassignablePartitionResponse")
        if self.not_controller_answers:
            self.not_controller_answers -= 1
            return make(cls, throttle_time=datetime.timedelta(0), error_code=ErrorCode.not_controller,
                        error_message=None, responses=(), allow_replication_factor_change=True)
        responses = []
        for t in req.topics:
            parts = []
            for p in t.partitions:
                tp = TP(t.name, int(p.partition_index))
                code, message = self.alter_errors.get(tp, (ErrorCode.none, None))
                parts.append(make(part_cls, partition_index=p.partition_index, error_code=code, error_message=message))
            responses.append(make(topic_cls, name=t.name, partitions=tuple(parts)))
        return make(cls, throttle_time=datetime.timedelta(0), error_code=ErrorCode.none, error_message=None,
                    responses=tuple(responses), allow_replication_factor_change=True)

    def _api_44(self, cls: type, req: Any) -> Any:  # IncrementalAlterConfigs
        result_cls = nested(cls, "AlterConfigsResourceResponse")
        results = []
        for r in req.resources:
            code, message = ErrorCode.none, None
            if r.resource_type == 4 and self.broker_config_error is not None:
                code, message = self.broker_config_error
            results.append(make(result_cls, error_code=code, error_message=message, resource_type=r.resource_type,
                                resource_name=r.resource_name))
        return make(cls, throttle_time=datetime.timedelta(0), responses=tuple(results))

    def _api_34(self, cls: type, req: Any) -> Any:  # AlterReplicaLogDirs
        topic_cls, part_cls = nested(cls, "AlterReplicaLogDirTopicResult"), nested(cls, "AlterReplicaLogDirPartitionResult")
        code = ErrorCode.none
        if self.replica_not_available:
            self.replica_not_available -= 1
            code = ErrorCode.replica_not_available
        return make(cls, throttle_time=datetime.timedelta(0), results=tuple(
            make(topic_cls, topic_name=t.name, partitions=tuple(make(part_cls, partition_index=p, error_code=code)
                                                                for p in t.partitions))
            for d in req.dirs for t in d.topics
        ))

    def _api_35(self, cls: type, req: Any) -> Any:  # DescribeLogDirs
        node = self.sent[-1].node
        result_cls, topic_cls, part_cls = (
            nested(cls, "DescribeLogDirsResult"), nested(cls, "DescribeLogDirsTopic"), nested(cls, "DescribeLogDirsPartition"),
        )
        by_dir: dict[str, list[tuple[TopicPartition, bool]]] = {}
        for (broker, tp), (current, future) in self.log_dirs.items():
            if broker == node:
                if current is not None:
                    by_dir.setdefault(current, []).append((tp, False))
                if future is not None:
                    by_dir.setdefault(future, []).append((tp, True))
        results = []
        for path, replicas in sorted(by_dir.items()):
            results.append(make(result_cls, error_code=ErrorCode.none, log_dir=path, total_bytes=-1, usable_bytes=-1,
                                topics=tuple(
                                    make(topic_cls, name=tp.topic, partitions=(
                                        make(part_cls, partition_index=tp.partition, partition_size=0, offset_lag=0,
                                             is_future_key=fut),
                                    ))
                                    for tp, fut in replicas
                                )))
        return make(cls, throttle_time=datetime.timedelta(0), error_code=ErrorCode.none, results=tuple(results))
