"""``shoal reassign-partitions`` (Kafka's kafka-reassign-partitions.sh) without a broker.

The pure parts are checked against the vectors of Kafka's own tests (AdminRackAwareTest,
ReassignPartitionsUnitTest, ReassignPartitionsCommandArgsTest). The command runs against a fake
cluster that answers the kio request objects the tool sends, after a round trip through the
wire encoding (so every request is one a broker can decode), and records them, so the tests also
pin the wire fields the broker side has to match.
"""

from __future__ import annotations

import datetime
import io
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from kio.serial import entity_reader, entity_writer
from typer.testing import CliRunner

from shoal.cli import reassign, reassign_log_dirs, reassign_throttles
from shoal.cli.kafka_client import (
    CLIENT_VERSIONS,
    BrokerConnection,
    Node,
    PartitionReassignment,
    ReassignmentClient,
    TopicPartition,
    error_message,
)
from shoal.cli.main import app
from shoal.cli.reassign import (
    PartitionReassignmentState,
    current_partition_replica_assignment_to_string,
    current_reassignments_to_string,
    partition_reassignment_states_to_string,
)
from shoal.cli.reassign_log_dirs import LogDirMoveState, replica_move_states_to_string
from shoal.cli.reassign_plan import (
    BrokerMetadata,
    ReassignCommandError,
    assign_replicas_to_brokers,
    broker_metadata,
    calculate_assignment,
    format_as_reassignment_json,
    parse_execute_assignment_args,
    parse_generate_assignment_args,
    parse_partition_reassignment_data,
    rack_alternated_broker_list,
)
from shoal.cli.reassign_throttles import (
    calculate_follower_throttles,
    calculate_leader_throttles,
    calculate_proposed_move_map,
    calculate_reassigning_brokers,
)
from shoal.protocol.apis import encode_request, response_class
from shoal.protocol.build import make, nested
from shoal.protocol.errors import ErrorCode

TP = TopicPartition

# ------------------------------------------------------------------------ AdminUtils assignment


def test_rack_unaware_assignment_matches_kafka() -> None:
    """AdminRackAwareTest.testReplicaAssignment: 5 brokers, 10 partitions, RF 3, start index 0."""
    brokers = [BrokerMetadata(b, None) for b in range(5)]
    assert assign_replicas_to_brokers(brokers, 10, 3, fixed_start_index=0) == {
        0: [0, 1, 2], 1: [1, 2, 3], 2: [2, 3, 4], 3: [3, 4, 0], 4: [4, 0, 1],
        5: [0, 2, 3], 6: [1, 3, 4], 7: [2, 4, 0], 8: [3, 0, 1], 9: [4, 1, 2],
    }


def test_rack_aware_assignment_matches_kafka() -> None:
    """AdminRackAwareTest.testGetRackAlternatedBrokerListAndAssignReplicasToBrokers."""
    racks = {0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"}
    assert rack_alternated_broker_list(racks) == [0, 3, 1, 5, 4, 2]
    assert rack_alternated_broker_list({b: r for b, r in racks.items() if b != 5}) == [0, 3, 1, 4, 2]
    brokers = [BrokerMetadata(b, r) for b, r in racks.items()]
    assert assign_replicas_to_brokers(brokers, 7, 3, fixed_start_index=0) == {
        0: [0, 3, 1], 1: [3, 1, 5], 2: [1, 5, 4], 3: [5, 4, 2], 4: [4, 2, 0], 5: [2, 0, 3], 6: [0, 4, 2],
    }


def test_rack_aware_assignment_puts_each_replica_in_another_rack() -> None:
    racks = {0: "a", 1: "b", 2: "b", 3: "c", 4: "c", 5: "a"}
    brokers = [BrokerMetadata(b, r) for b, r in racks.items()]
    for start in range(6):
        for replicas in assign_replicas_to_brokers(brokers, 12, 3, fixed_start_index=start).values():
            assert len({racks[b] for b in replicas}) == 3
            assert len(set(replicas)) == 3


def test_random_start_stays_on_the_brokers() -> None:
    brokers = [BrokerMetadata(b, None) for b in (5, 7, 9)]
    for replicas in assign_replicas_to_brokers(brokers, 8, 2).values():
        assert set(replicas) <= {5, 7, 9} and len(set(replicas)) == 2


@pytest.mark.parametrize(
    ("partitions", "rf", "message"),
    [
        (10, 6, "Replication factor: 6 larger than available brokers: 5."),
        (10, 0, "Replication factor must be larger than 0."),
        (0, 1, "Number of partitions must be larger than 0."),
    ],
)
def test_assignment_errors(partitions: int, rf: int, message: str) -> None:
    with pytest.raises(ReassignCommandError, match=f"^{message}$"):
        assign_replicas_to_brokers([BrokerMetadata(b, None) for b in range(5)], partitions, rf, 0)


def test_broker_metadata_racks() -> None:
    """ReassignPartitionsUnitTest.testGetBrokerRackInformation."""
    nodes = {0: Node(0, "h", 9092, "rack0"), 1: Node(1, "h", 9093, "rack1"), 2: Node(2, "h", 9094, None)}
    assert broker_metadata(nodes, [0, 1], True) == [BrokerMetadata(0, "rack0"), BrokerMetadata(1, "rack1")]
    assert broker_metadata(nodes, [0, 1], False) == [BrokerMetadata(0, None), BrokerMetadata(1, None)]
    with pytest.raises(ReassignCommandError, match="^Not all brokers have rack information. Add --disable-rack-aware"):
        broker_metadata(nodes, [1, 2], True)
    assert broker_metadata(nodes, [1, 2], False) == [BrokerMetadata(1, None), BrokerMetadata(2, None)]
    assert broker_metadata(nodes, [2, 7], True) == [BrokerMetadata(2, None)]  # unknown brokers are left out


def test_calculate_assignment_keeps_each_topics_replication_factor() -> None:
    current = {TP("foo", 0): [0, 1, 2], TP("foo", 1): [1, 2, 3], TP("bar", 0): [2, 3]}
    brokers = [BrokerMetadata(b, None) for b in (0, 1, 3)]
    assert calculate_assignment(current, brokers, 0) == {
        TP("bar", 0): [0, 1], TP("foo", 0): [0, 1, 3], TP("foo", 1): [1, 3, 0],
    }


# --------------------------------------------------------------------------------- JSON files


def test_parse_generate_assignment_args() -> None:
    """ReassignPartitionsUnitTest.testParseGenerateAssignmentArgs."""
    topics = '{"topics": [{"topic": "foo"}], "version":1}'
    with pytest.raises(ReassignCommandError, match=r"^Broker list contains duplicate entries: \[1\]$"):
        parse_generate_assignment_args(topics, "1,1,2")
    with pytest.raises(ReassignCommandError, match=r"^Broker list contains duplicate entries: \[5\]$"):
        parse_generate_assignment_args(topics, "5,2,3,4,5")
    assert parse_generate_assignment_args(topics, "5,2,3,4") == ([5, 2, 3, 4], ["foo"])
    with pytest.raises(ReassignCommandError, match=r"^List of topics to reassign contains duplicate entries: \[foo\]$"):
        parse_generate_assignment_args('{"topics": [{"topic": "foo"},{"topic": "foo"}], "version":1}', "5,2,3,4")
    assert parse_generate_assignment_args('{"topics": [{"topic": "foo"},{"topic": "bar"}], "version":1}', "5,3,4") == (
        [5, 3, 4], ["foo", "bar"],
    )
    assert parse_generate_assignment_args("{}", "1") == ([1], [])


@pytest.mark.parametrize(
    ("brokers", "topics", "message"),
    [
        ("1,x", '{"topics":[]}', 'For input string: "x"'),
        ("", '{"topics":[]}', 'For input string: ""'),
        ("1", "not json", "The input string is not a valid JSON"),
        ("1", '{"version":2,"topics":[]}', "Not supported version field value 2"),
        ("1", '{"topics":[{"name":"foo"}]}', "No such field exists: `topic`"),
        ("1", '{"topics":[{"topic":7}]}', "Expected `String` value, received 7"),
        ("1", '{"topics":{"topic":"a"}}', 'Expected JSON array, received {"topic":"a"}'),
    ],
)
def test_generate_args_errors(brokers: str, topics: str, message: str) -> None:
    with pytest.raises(ReassignCommandError) as exc:
        parse_generate_assignment_args(topics, brokers)
    assert str(exc.value) == message


def test_parse_execute_assignment_args() -> None:
    """ReassignPartitionsUnitTest.testParseExecuteAssignmentArgs."""
    with pytest.raises(ReassignCommandError, match="^Partition reassignment list cannot be empty$"):
        parse_execute_assignment_args('{"version":1,"partitions":[]}')
    with pytest.raises(ReassignCommandError, match="^Partition reassignment contains duplicate topic partitions: foo-0$"):
        parse_execute_assignment_args(
            '{"version":1,"partitions":[{"topic":"foo","partition":0,"replicas":[0,1],"log_dirs":["any","any"]},'
            '{"topic":"foo","partition":0,"replicas":[2,3,4],"log_dirs":["any","any","any"]}]}'
        )
    with pytest.raises(ReassignCommandError) as exc:
        parse_execute_assignment_args(
            '{"version":1,"partitions":[{"topic":"foo","partition":0,"replicas":[0,0],"log_dirs":["/abc","/def"]},'
            '{"topic":"foo","partition":1,"replicas":[2,3],"log_dirs":["/abc","/def"]}]}'
        )
    assert str(exc.value) == "Partition replica lists may not contain duplicate entries: foo-0 contains multiple entries for 0"
    with pytest.raises(ReassignCommandError, match="^Partition replica list cannot be empty$"):
        parse_execute_assignment_args('{"partitions":[{"topic":"foo","partition":0,"replicas":[]}]}')
    parts, dirs = parse_execute_assignment_args(
        '{"version":1,"partitions":[{"topic":"foo","partition":0,"replicas":[1,2,3],"log_dirs":["any","any","any"]},'
        '{"topic":"foo","partition":1,"replicas":[3,4,5],"log_dirs":["any","any","any"]}]}'
    )
    assert parts == {TP("foo", 0): [1, 2, 3], TP("foo", 1): [3, 4, 5]} and dirs == {}
    parts, dirs = parse_execute_assignment_args(
        '{"version":1,"partitions":[{"topic":"foo","partition":0,"replicas":[1,2,3],'
        '"log_dirs":["/tmp/a","/tmp/b","/tmp/c"]}]}'
    )
    assert parts == {TP("foo", 0): [1, 2, 3]}
    assert dirs == {(TP("foo", 0), 1): "/tmp/a", (TP("foo", 0), 2): "/tmp/b", (TP("foo", 0), 3): "/tmp/c"}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "The input string shouldn't be empty"),
        ("[]", "Expected JSON object, received []"),
        ('{"version":"1"}', 'Expected `Integer` value, received "1"'),
        ('{"version":3}', "Not supported version field value 3"),
        ('{"partitions":[{"topic":"t","replicas":[1]}]}', "No such field exists: `partition`"),
        ('{"partitions":[{"topic":"t","partition":0}]}', "No such field exists: `replicas`"),
        ('{"partitions":[{"topic":"t","partition":1.0,"replicas":[1]}]}', "Expected `Integer` value, received 1.0"),
        ('{"partitions":[{"topic":"t","partition":0,"replicas":[true]}]}', "Expected `Integer` value, received true"),
        ('{"partitions":[{"topic":"t","partition":0,"replicas":"1,2"}]}', 'Expected `JSON array` value, received "1,2"'),
        ('{"partitions":[{"topic":null,"partition":0,"replicas":[1]}]}', "Expected `String` value, received null"),
        (
            '{"partitions":[{"topic":"t","partition":0,"replicas":[1,2],"log_dirs":["any"]}]}',
            "Size of replicas list [1, 2] is different from size of log dirs list [any] for partition t-0",
        ),
    ],
)
def test_reassignment_json_errors(text: str, message: str) -> None:
    with pytest.raises(ReassignCommandError) as exc:
        parse_partition_reassignment_data(text)
    assert str(exc.value) == message


def test_invalid_json_names_the_parse_error() -> None:
    with pytest.raises(ReassignCommandError, match="^The input string is not a valid JSON: Expecting property name"):
        parse_partition_reassignment_data("{invalid_json")


def test_verify_reads_duplicates_and_missing_partitions_list() -> None:
    assert parse_partition_reassignment_data('{"version":1}') == ([], {})
    parts, _ = parse_partition_reassignment_data(
        '{"partitions":[{"topic":"t","partition":0,"replicas":[1]},{"topic":"t","partition":0,"replicas":[2]}]}'
    )
    assert parts == [(TP("t", 0), [1]), (TP("t", 0), [2])]


def test_reassignment_json_format() -> None:
    text = format_as_reassignment_json({TP("foo", 1): [2, 3], TP("bar", 0): [1]}, {(TP("foo", 1), 3): "/d"})
    assert text == (
        '{"version":1,"partitions":[{"topic":"bar","partition":0,"replicas":[1],"log_dirs":["any"]},'
        '{"topic":"foo","partition":1,"replicas":[2,3],"log_dirs":["any","/d"]}]}'
    )
    assert parse_partition_reassignment_data(text) == (
        [(TP("bar", 0), [1]), (TP("foo", 1), [2, 3])], {(TP("foo", 1), 3): "/d"},
    )


# ----------------------------------------------------------------------------- moves and text


def test_move_map_and_throttles_match_kafka() -> None:
    """ReassignPartitionsUnitTest.testMoveMap."""
    current_reassignments = {
        TP("foo", 0): PartitionReassignment((1, 2, 3, 4), (4,), (3,)),
        TP("foo", 1): PartitionReassignment((4, 5, 6, 7, 8), (7, 8), (4, 5)),
        TP("foo", 2): PartitionReassignment((1, 2, 3, 4), (3, 4), (1, 2)),
        TP("foo", 3): PartitionReassignment((1, 2, 3, 4), (3, 4), (1, 2)),
        TP("foo", 4): PartitionReassignment((1, 2, 3, 4), (3, 4), (1, 2)),
        TP("foo", 5): PartitionReassignment((1, 2, 3, 4), (3, 4), (1, 2)),
    }
    proposed = {
        TP("foo", 0): [1, 2, 5], TP("foo", 2): [3, 4], TP("foo", 3): [5, 6], TP("foo", 4): [3],
        TP("foo", 5): [3, 4, 5, 6], TP("bar", 0): [1, 2, 3],
    }
    current = {
        TP("foo", 0): [1, 2, 3, 4], TP("foo", 1): [4, 5, 6, 7, 8], TP("foo", 2): [1, 2, 3, 4],
        TP("foo", 3): [1, 2, 3, 4], TP("foo", 4): [1, 2, 3, 4], TP("foo", 5): [1, 2, 3, 4],
        TP("bar", 0): [2, 3, 4], TP("baz", 0): [1, 2, 3],
    }
    moves = calculate_proposed_move_map(current_reassignments, proposed, current)
    assert {p: (m.sources, m.destinations) for p, m in moves["foo"].items()} == {
        0: ({1, 2, 3}, {5}), 1: ({4, 5, 6}, {7, 8}), 2: ({1, 2}, {3, 4}), 3: ({1, 2}, {5, 6}),
        4: ({1, 2}, {3}), 5: ({1, 2}, {3, 4, 5, 6}),
    }
    assert {p: (m.sources, m.destinations) for p, m in moves["bar"].items()} == {0: ({2, 3, 4}, {1})}
    assert calculate_leader_throttles(moves) == {
        "foo": "0:1,0:2,0:3,1:4,1:5,1:6,2:1,2:2,3:1,3:2,4:1,4:2,5:1,5:2", "bar": "0:2,0:3,0:4",
    }
    assert calculate_follower_throttles(moves) == {"foo": "0:5,1:7,1:8,2:3,2:4,3:5,3:6,4:3,5:3,5:4,5:5,5:6", "bar": "0:1"}
    assert calculate_reassigning_brokers(moves) == [1, 2, 3, 4, 5, 6, 7, 8]


def test_current_partition_replica_assignment_to_string() -> None:
    proposed = {TP("foo", 1): [1, 2, 3], TP("bar", 0): [7, 8, 9]}
    current = {TP("foo", 0): [1, 2, 3], TP("foo", 1): [4, 5, 6], TP("bar", 0): [7, 8], TP("baz", 0): [10, 11, 12]}
    assert current_partition_replica_assignment_to_string(proposed, current) == "\n".join([
        "Current partition replica assignment",
        "",
        '{"version":1,"partitions":[{"topic":"bar","partition":0,"replicas":[7,8],"log_dirs":["any","any"]},'
        '{"topic":"foo","partition":1,"replicas":[4,5,6],"log_dirs":["any","any","any"]}]}',
        "",
        "Save this to use as the --reassignment-json-file option during rollback",
    ])


def test_partition_states_to_string() -> None:
    states = {
        TP("foo", 0): PartitionReassignmentState((1, 2, 3), (1, 2, 3), True),
        TP("foo", 1): PartitionReassignmentState((1, 2, 3), (1, 2, 4), False),
        TP("bar", 0): PartitionReassignmentState((1, 2, 3), (1, 2, 4), False),
        TP("baz", 0): PartitionReassignmentState((3, 2), (2, 3), True),
    }
    assert partition_reassignment_states_to_string(states).splitlines() == [
        "Status of partition reassignment:",
        "Reassignment of partition bar-0 is still in progress.",
        "There is no active reassignment of partition baz-0, but replica set is 3,2 rather than 2,3.",
        "Reassignment of partition foo-0 is completed.",
        "Reassignment of partition foo-1 is still in progress.",
    ]


def test_replica_move_states_to_string() -> None:
    states = {
        (TP("bar", 0), 0): LogDirMoveState("completed", "/tmp/kafka-logs0", "/tmp/kafka-logs0"),
        (TP("foo", 0), 0): LogDirMoveState("active", "/tmp/kafka-logs1", "/tmp/kafka-logs0", "/tmp/kafka-logs1"),
        (TP("foo", 1), 0): LogDirMoveState("cancelled", "/tmp/kafka-logs1", "/tmp/kafka-logs0"),
        (TP("quux", 1), 1): LogDirMoveState("active", "/tmp/kafka-logs1", "/tmp/kafka-logs0", "/tmp/kafka-logs2"),
        (TP("quux", 2), 1): LogDirMoveState("missing", "/tmp/kafka-logs1"),
    }
    assert replica_move_states_to_string(states).splitlines() == [
        "Reassignment of replica bar-0-0 completed successfully.",
        "Reassignment of replica foo-0-0 is still in progress.",
        "Partition foo-1 on broker 0 is not being moved from log dir /tmp/kafka-logs0 to /tmp/kafka-logs1.",
        "Partition quux-1 on broker 1 is being moved to log dir /tmp/kafka-logs2 instead of /tmp/kafka-logs1.",
        "Partition quux-2 is not found in any live log dir on broker 1. There is likely an offline log directory on the broker.",
    ]


def test_current_reassignments_to_string() -> None:
    assert current_reassignments_to_string({}) == "No partition reassignments found."
    assert current_reassignments_to_string({
        TP("foo", 1): PartitionReassignment((1, 2, 3, 4, 5), (4, 5), (1, 2)),
        TP("foo", 0): PartitionReassignment((0, 1, 2, 4), (4,), ()),
        TP("bar", 0): PartitionReassignment((2, 3, 0), (), (0,)),
    }).splitlines() == [
        "Current partition reassignments:",
        "bar-0: replicas: 2,3,0. removing: 0.",
        "foo-0: replicas: 0,1,2,4. adding: 4.",
        "foo-1: replicas: 1,2,3,4,5. adding: 4,5. removing: 1,2.",
    ]


# ------------------------------------------------------------------------------ a fake cluster

STATIC_BROKER_CONFIGS = "Broker configs are static in this Shoal version: set them in server.properties or with --override"
PORT_BASE = 19000


@dataclass
class Sent:
    node: int
    api_key: int
    version: int
    request: Any


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
        broker_cls, topic_cls, part_cls = (
            nested(cls, "MetadataResponseBroker"), nested(cls, "MetadataResponseTopic"),
            nested(cls, "MetadataResponsePartition"),
        )
        names = list(self.topics) if req.topics is None else [t.name for t in req.topics]
        topics = []
        for name in names:
            parts = self.topics.get(name)
            code = ErrorCode.none if parts is not None else ErrorCode.unknown_topic_or_partition
            topics.append(make(
                topic_cls, error_code=code, name=name, topic_id=None, is_internal=False,
                topic_authorized_operations=-2147483648,
                partitions=tuple(
                    make(part_cls, error_code=ErrorCode.none, partition_index=p, leader_id=r[0], leader_epoch=0,
                         replica_nodes=tuple(r), isr_nodes=tuple(r), offline_replicas=())
                    for p, r in sorted((parts or {}).items())
                ),
            ))
        return make(
            cls, throttle_time=datetime.timedelta(0), cluster_id="fake", controller_id=self.controller,
            brokers=tuple(make(broker_cls, node_id=b, host="h", port=PORT_BASE + b, rack=rack)
                          for b, rack in self.brokers.items()),
            topics=tuple(topics), cluster_authorized_operations=-2147483648,
        )

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


def _round_trip_request(request: Any) -> Any:
    """Encode as the tool's connection does and decode as a broker would."""
    frame = encode_request(7, reassign.CLIENT_ID, request)[4:]
    cls = type(request)
    header, offset = entity_reader(cls.__header_schema__)(frame, 0)
    assert header.client_id == reassign.CLIENT_ID
    body, _ = entity_reader(cls)(frame, offset)
    return body


def _round_trip_response(response: Any) -> Any:
    buffer = io.BytesIO()
    entity_writer(type(response))(buffer, response)
    body, _ = entity_reader(type(response))(buffer.getvalue(), 0)
    return body


class FakeConnection:
    def __init__(self, cluster: FakeCluster, node: int) -> None:
        self.cluster = cluster
        self.node = node
        self.address = f"h:{PORT_BASE + node}"
        self.closed = False
        self.api_versions = {k: v for k, v in CLIENT_VERSIONS.items() if k not in cluster.missing_apis}

    def version(self, api_key: int) -> int:
        return BrokerConnection.version(self, api_key)  # type: ignore[arg-type]

    def request(self, api_key: int, version: int, request_obj: Any, *, timeout: float | None = None) -> Any:
        assert int(type(request_obj).__api_key__) == api_key and int(type(request_obj).__version__) == version
        decoded = _round_trip_request(request_obj)
        return _round_trip_response(self.cluster.handle(self.node, api_key, version, decoded))

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def cluster(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeCluster]:
    fake = FakeCluster(topics={"foo": {0: [1, 2, 3], 1: [2, 3, 4]}, "bar": {0: [3, 4, 1]}})

    def connection(self: ReassignmentClient, host: str, port: int) -> FakeConnection:
        node = port - PORT_BASE
        if node not in fake.brokers:
            raise AssertionError(f"no broker at port {port}")
        return FakeConnection(fake, node)

    monkeypatch.setattr(ReassignmentClient, "connection", connection)
    monkeypatch.setattr(reassign, "_START_INDEX", 0)
    monkeypatch.setattr(reassign_log_dirs, "_MOVE_RETRY_S", 0.0)
    yield fake


def run(*args: str, code: int = 0) -> tuple[str, str]:
    result = CliRunner().invoke(app, ["reassign-partitions", "--bootstrap-server", f"h:{PORT_BASE + 1}", *args])
    assert result.exit_code == code, f"exit {result.exit_code}\n--- stdout\n{result.stdout}\n--- stderr\n{result.stderr}"
    return result.stdout, result.stderr


def write(tmp_path: Path, doc: Any, name: str = "plan.json") -> str:
    path = tmp_path / name
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return str(path)


def plan(*parts: tuple[str, int, list[int]], log_dirs: dict[tuple[str, int], list[str]] | None = None) -> dict[str, Any]:
    entries = []
    for topic, partition, replicas in parts:
        entry: dict[str, Any] = {"topic": topic, "partition": partition, "replicas": replicas}
        if log_dirs and (topic, partition) in log_dirs:
            entry["log_dirs"] = log_dirs[(topic, partition)]
        entries.append(entry)
    return {"version": 1, "partitions": entries}


# ---------------------------------------------------------------------------------- the options


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "Command must include exactly one action: --generate, --execute, --verify, --cancel, --list"),
        (["--execute", "--verify", "--reassignment-json-file", "f"], "Command must include exactly one action"),
        (["--execute", "--reassignment-json-file", "f", "--topics-to-move-json-file", "f"],
         'Option "[topics-to-move-json-file]" can\'t be used with action "[execute]"'),
        (["--execute", "--reassignment-json-file", "f", "--broker-list", "101,102"],
         'Option "[broker-list]" can\'t be used with action "[execute]"'),
        (["--execute"], 'Missing required argument "[reassignment-json-file]"'),
        (["--generate"], 'Missing required argument "[topics-to-move-json-file]"'),
        (["--generate", "--topics-to-move-json-file", "f"], 'Missing required argument "[broker-list]"'),
        (["--generate", "--broker-list", "1", "--topics-to-move-json-file", "f", "--throttle", "100"],
         'Option "[throttle]" can\'t be used with action "[generate]"'),
        (["--generate", "--broker-list", "1", "--topics-to-move-json-file", "f", "--reassignment-json-file", "f"],
         'Option "[reassignment-json-file]" can\'t be used with action "[generate]"'),
        (["--verify"], 'Missing required argument "[reassignment-json-file]"'),
        (["--verify", "--broker-list", "100,101", "--reassignment-json-file", "f"],
         'Option "[broker-list]" can\'t be used with action "[verify]"'),
        (["--verify", "--throttle", "-1", "--reassignment-json-file", "f"],
         'Option "[throttle]" can\'t be used with action "[verify]"'),
        (["--cancel", "--preserve-throttles"], 'Missing required argument "[reassignment-json-file]"'),
        (["--list", "--timeout", "5"], 'Option "[timeout]" can\'t be used with action "[list]"'),
        (["--list", "--additional"], 'Option "[additional]" can\'t be used with action "[list]"'),
        (["--cancel", "--reassignment-json-file", "f", "--additional"],
         'Option "[additional]" can\'t be used with action "[cancel]"'),
    ],
)
def test_usage_errors(args: list[str], message: str) -> None:
    result = CliRunner().invoke(app, ["reassign-partitions", *args])
    assert result.exit_code == 2
    assert result.stderr.startswith(f"Error: {message}")
    assert result.stdout == ""


def test_permitted_options_pass_validation() -> None:
    assert reassign.validate_args({"execute", "reassignment-json-file", "throttle", "replica-alter-log-dirs-throttle",
                                   "timeout", "additional", "bootstrap-server"}) == "execute"
    assert reassign.validate_args({"cancel", "reassignment-json-file", "preserve-throttles", "timeout"}) == "cancel"
    assert reassign.validate_args({"generate", "topics-to-move-json-file", "broker-list", "disable-rack-aware"}) == "generate"
    assert reassign.validate_args({"verify", "reassignment-json-file", "preserve-throttles"}) == "verify"
    assert reassign.validate_args({"list", "bootstrap-server"}) == "list"


# ------------------------------------------------------------------------------------- --list


def test_list_without_reassignments(cluster: FakeCluster) -> None:
    out, _ = run("--list")
    assert out == "No partition reassignments found.\n"
    (sent,) = cluster.of(46)
    assert sent.node == 2  # the controller Metadata named
    assert sent.version == 0 and sent.request.topics is None
    assert sent.request.timeout == datetime.timedelta(seconds=reassign.ADMIN_TIMEOUT_S)


def test_list_prints_kafkas_lines_and_retries_not_controller(cluster: FakeCluster) -> None:
    cluster.reassignments = {
        TP("foo", 0): PartitionReassignment((1, 2, 3, 4), (4,), (1,)),
        TP("bar", 0): PartitionReassignment((3, 4, 1, 2), (2,), ()),
    }
    cluster.not_controller_answers = 1
    out, _ = run("--list")
    assert out.splitlines() == [
        "Current partition reassignments:",
        "bar-0: replicas: 3,4,1,2. adding: 2.",
        "foo-0: replicas: 1,2,3,4. adding: 4. removing: 1.",
    ]
    assert len(cluster.of(46)) == 2


def test_list_falls_back_to_any_broker_without_a_controller(cluster: FakeCluster) -> None:
    cluster.controller = -1
    run("--list")
    assert cluster.of(46)[0].node == 1


def test_broker_without_the_api(cluster: FakeCluster) -> None:
    cluster.missing_apis = {46}
    out, _ = run("--list", code=1)
    assert out == f"Error: The broker at h:{PORT_BASE + 2} does not support ListPartitionReassignments (API key 46)\n"


def test_unreachable_bootstrap(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(reassign, "ADMIN_TIMEOUT_S", 0.2)
    result = CliRunner().invoke(app, ["reassign-partitions", "--list", "--bootstrap-server", "127.0.0.1:1"])
    assert result.exit_code == 1
    assert result.stdout.startswith("Error: Metadata timed out after 0.2s: Cannot connect to 127.0.0.1:1")


# --------------------------------------------------------------------------------- --generate


def test_generate(cluster: FakeCluster, tmp_path: Path) -> None:
    topics = write(tmp_path, {"topics": [{"topic": "foo"}, {"topic": "bar"}], "version": 1})
    out, _ = run("--generate", "--topics-to-move-json-file", topics, "--broker-list", "1,2,4")
    assert out.splitlines() == [
        "Current partition replica assignment",
        '{"version":1,"partitions":[{"topic":"bar","partition":0,"replicas":[3,4,1],"log_dirs":["any","any","any"]},'
        '{"topic":"foo","partition":0,"replicas":[1,2,3],"log_dirs":["any","any","any"]},'
        '{"topic":"foo","partition":1,"replicas":[2,3,4],"log_dirs":["any","any","any"]}]}',
        "",
        "Proposed partition reassignment configuration",
        '{"version":1,"partitions":[{"topic":"bar","partition":0,"replicas":[1,2,4],"log_dirs":["any","any","any"]},'
        '{"topic":"foo","partition":0,"replicas":[1,2,4],"log_dirs":["any","any","any"]},'
        '{"topic":"foo","partition":1,"replicas":[2,4,1],"log_dirs":["any","any","any"]}]}',
    ]
    (metadata,) = [s for s in cluster.of(3) if s.request.topics]
    assert [t.name for t in metadata.request.topics] == ["bar", "foo"]
    assert metadata.request.allow_auto_topic_creation is False
    assert not cluster.of(45) and not cluster.of(46)


def test_generate_rack_aware_unless_disabled(cluster: FakeCluster, tmp_path: Path) -> None:
    cluster.brokers = {1: "a", 2: "a", 3: "b", 4: None}
    topics = write(tmp_path, {"topics": [{"topic": "foo"}]})
    out, _ = run("--generate", "--topics-to-move-json-file", topics, "--broker-list", "1,2,3,4", code=1)
    assert out == (
        "Error: Not all brokers have rack information. Add --disable-rack-aware in command line to make "
        "replica assignment without rack information.\n"
    )
    run("--generate", "--topics-to-move-json-file", topics, "--broker-list", "1,2,3,4", "--disable-rack-aware")
    out, _ = run("--generate", "--topics-to-move-json-file", topics, "--broker-list", "1,2,3")
    proposed = json.loads(out.splitlines()[-1])["partitions"]
    racks = {1: "a", 2: "a", 3: "b"}
    assert all({racks[b] for b in p["replicas"][:2]} == {"a", "b"} for p in proposed)


@pytest.mark.parametrize(
    ("topics", "brokers", "message"),
    [
        ({"topics": [{"topic": "foo"}, {"topic": "quux"}]}, "1,2,3",
         "Error: org.apache.kafka.common.errors.UnknownTopicOrPartitionException: Topic quux not found."),
        ({"topics": [{"topic": "foo"}]}, "1,2", "Error: Replication factor: 3 larger than available brokers: 2."),
        ({"topics": [{"topic": "foo"}]}, "1,2,9", "Error: Replication factor: 3 larger than available brokers: 2."),
        ({"topics": [{"topic": "foo"}]}, "1,1", "Error: Broker list contains duplicate entries: [1]"),
    ],
)
def test_generate_failures(cluster: FakeCluster, tmp_path: Path, topics: Any, brokers: str, message: str) -> None:
    out, _ = run("--generate", "--topics-to-move-json-file", write(tmp_path, topics), "--broker-list", brokers, code=1)
    assert out == message + "\n"


def test_missing_file(cluster: FakeCluster, tmp_path: Path) -> None:
    out, _ = run("--verify", "--reassignment-json-file", str(tmp_path / "nope.json"), code=1)
    assert out == f"Error: {tmp_path / 'nope.json'} (No such file or directory)\n"


# ---------------------------------------------------------------------------------- --execute


def test_execute(cluster: FakeCluster, tmp_path: Path) -> None:
    path = write(tmp_path, plan(("foo", 1, [4, 3, 1]), ("bar", 0, [3, 4, 2]), ("foo", 0, [1, 2, 3])))
    out, err = run("--execute", "--reassignment-json-file", path)
    assert out.splitlines() == [
        "Current partition replica assignment",
        "",
        '{"version":1,"partitions":[{"topic":"bar","partition":0,"replicas":[3,4,1],"log_dirs":["any","any","any"]},'
        '{"topic":"foo","partition":0,"replicas":[1,2,3],"log_dirs":["any","any","any"]},'
        '{"topic":"foo","partition":1,"replicas":[2,3,4],"log_dirs":["any","any","any"]}]}',
        "",
        "Save this to use as the --reassignment-json-file option during rollback",
        "Successfully started partition reassignments for bar-0,foo-0,foo-1",
    ]
    assert err == ""
    (listed,) = cluster.of(46)
    assert listed.request.topics is None  # all reassignments: refuses to run beside others without --additional
    (sent,) = cluster.of(45)
    assert sent.node == 2 and sent.version == 1
    request = sent.request
    assert request.allow_replication_factor_change is True
    assert request.timeout == datetime.timedelta(seconds=reassign.ADMIN_TIMEOUT_S)
    assert [(t.name, [(p.partition_index, list(p.replicas)) for p in t.partitions]) for t in request.topics] == [
        ("bar", [(0, [3, 4, 2])]), ("foo", [(0, [1, 2, 3]), (1, [4, 3, 1])]),
    ]
    assert not cluster.of(44) and not cluster.of(34)


def test_execute_refuses_beside_an_ongoing_reassignment_unless_additional(cluster: FakeCluster, tmp_path: Path) -> None:
    cluster.reassignments = {TP("bar", 0): PartitionReassignment((3, 4, 1, 2), (2,), (1,))}
    path = write(tmp_path, plan(("foo", 0, [1, 2, 4])))
    out, _ = run("--execute", "--reassignment-json-file", path, code=1)
    assert out == reassign.CANNOT_EXECUTE_BECAUSE_OF_EXISTING_MESSAGE + "\n"
    assert not cluster.of(45)
    out, _ = run("--execute", "--reassignment-json-file", path, "--additional")
    assert out.endswith("Successfully started partition reassignment for foo-0\n")


@pytest.mark.parametrize(
    ("parts", "message"),
    [
        ([("foo", 0, [1, 2, 9])], "Error: Unknown broker id 9"),
        ([("foo", 5, [1, 2, 3]), ("bar", 3, [1])],
         "Error: org.apache.kafka.common.errors.UnknownTopicOrPartitionException: Unable to find partition: bar-3, foo-5"),
        ([("nope", 0, [1])], "Error: org.apache.kafka.common.errors.UnknownTopicOrPartitionException: Topic nope not found."),
        ([("foo", 0, [1, 1])],
         "Error: Partition replica lists may not contain duplicate entries: foo-0 contains multiple entries for 1"),
    ],
)
def test_execute_failures_before_anything_changes(
    cluster: FakeCluster, tmp_path: Path, parts: list[tuple[str, int, list[int]]], message: str
) -> None:
    out, _ = run("--execute", "--reassignment-json-file", write(tmp_path, plan(*parts)), code=1)
    assert out == message + "\n"
    assert not cluster.of(45) and not cluster.of(44)


def test_execute_reports_refused_partitions(cluster: FakeCluster, tmp_path: Path) -> None:
    cluster.alter_errors = {
        TP("foo", 1): (ErrorCode.invalid_replica_assignment, "Replica 3 appears twice"),
        TP("foo", 0): (ErrorCode.reassignment_in_progress, None),
    }
    path = write(tmp_path, plan(("foo", 0, [4, 2, 3]), ("foo", 1, [1, 3, 4]), ("bar", 0, [1, 2, 3])))
    out, _ = run("--execute", "--reassignment-json-file", path, code=1)
    assert out.splitlines()[-3:] == [
        "Error reassigning partition(s):",
        "foo-0: " + error_message(ErrorCode.reassignment_in_progress),
        "foo-1: Replica 3 appears twice",
    ]


def test_execute_with_throttle(cluster: FakeCluster, tmp_path: Path) -> None:
    cluster.broker_config_error = None
    path = write(tmp_path, plan(("foo", 0, [1, 2, 4]), ("bar", 0, [3, 4, 1])))
    out, err = run("--execute", "--reassignment-json-file", path, "--throttle", "50000000")
    lines = out.splitlines()
    assert lines[-3:] == [
        reassign.YOU_MUST_RUN_VERIFY_PERIODICALLY_MESSAGE,
        "The inter-broker throttle limit was set to 50000000 B/s",
        "Successfully started partition reassignments for bar-0,foo-0",
    ]
    assert err == ""
    topic_sent, *broker_sent = cluster.of(44)
    assert topic_sent.request.validate_only is False
    assert [
        (r.resource_type, r.resource_name, [(c.name, c.config_operation, c.value) for c in r.configs])
        for r in topic_sent.request.resources
    ] == [
        (2, "bar", [("leader.replication.throttled.replicas", 0, "0:1,0:3,0:4"),
                    ("follower.replication.throttled.replicas", 0, "")]),
        (2, "foo", [("leader.replication.throttled.replicas", 0, "0:1,0:2,0:3"),
                    ("follower.replication.throttled.replicas", 0, "0:4")]),
    ]
    # One BROKER resource per broker involved, each sent to that broker.
    assert [(s.node, [(r.resource_type, r.resource_name) for r in s.request.resources]) for s in broker_sent] == [
        (b, [(4, str(b))]) for b in (1, 2, 3, 4)
    ]
    assert [(c.name, c.config_operation, c.value) for c in broker_sent[0].request.resources[0].configs] == [
        ("leader.replication.throttled.rate", 0, "50000000"), ("follower.replication.throttled.rate", 0, "50000000"),
    ]
    assert cluster.sent.index(broker_sent[-1]) < cluster.sent.index(cluster.of(45)[0])  # throttles first


def test_execute_goes_on_when_brokers_refuse_broker_configs(cluster: FakeCluster, tmp_path: Path) -> None:
    path = write(tmp_path, plan(("foo", 0, [1, 2, 4])))
    out, err = run("--execute", "--reassignment-json-file", path, "--throttle", "1024")
    assert "The inter-broker throttle limit was set" not in out
    assert out.splitlines()[-2:] == [
        reassign.YOU_MUST_RUN_VERIFY_PERIODICALLY_MESSAGE, "Successfully started partition reassignment for foo-0",
    ]
    assert err == (
        "WARNING: Setting the inter-broker throttle limit to 1024 B/s on brokers 1,2,3,4 failed: "
        f"INVALID_REQUEST: {STATIC_BROKER_CONFIGS}\n"
    )
    assert len(cluster.of(44)) == 1 + 4  # the topic throttles were set all the same


def test_execute_with_log_dirs(cluster: FakeCluster, tmp_path: Path) -> None:
    cluster.replica_not_available = 1
    path = write(tmp_path, plan(("foo", 0, [1, 2, 4]), log_dirs={("foo", 0): ["any", "/d2", "/d4"]}))
    out, _ = run("--execute", "--reassignment-json-file", path, "--replica-alter-log-dirs-throttle", "100")
    # Broker 2 first answers REPLICA_NOT_AVAILABLE (the replica is not there yet): started next round.
    assert out.splitlines()[-3:] == [
        "Successfully started partition reassignment for foo-0",
        "Successfully started moving log directory to /d4 for replica foo-0 with broker 4 ",
        "Successfully started moving log directory to /d2 for replica foo-0 with broker 2 ",
    ]
    log_dir_throttles = [s for s in cluster.of(44) if s.request.resources[0].configs[0].name == reassign_throttles.LOG_DIRS_THROTTLED_RATE]
    assert [s.node for s in log_dir_throttles] == [2, 4]
    moves = cluster.of(34)
    assert [(s.node, [(d.path, [(t.name, list(t.partitions)) for t in d.topics]) for d in s.request.dirs]) for s in moves] == [
        (2, [("/d2", [("foo", [0])])]), (4, [("/d4", [("foo", [0])])]), (2, [("/d2", [("foo", [0])])]),
    ]


def test_execute_log_dir_moves_time_out(cluster: FakeCluster, tmp_path: Path) -> None:
    cluster.replica_not_available = 10**6
    path = write(tmp_path, plan(("foo", 0, [1, 2, 4]), log_dirs={("foo", 0): ["/d1", "any", "/d4"]}))
    out, _ = run("--execute", "--reassignment-json-file", path, "--timeout", "1", code=1)
    assert out.splitlines()[-1] == "Timed out before log directory moves could be started for: foo-0-1,foo-0-4"


# ----------------------------------------------------------------------------------- --verify


def test_verify_in_progress_keeps_the_throttles(cluster: FakeCluster, tmp_path: Path) -> None:
    cluster.reassignments = {TP("foo", 0): PartitionReassignment((1, 2, 3, 4), (4,), (3,))}
    path = write(tmp_path, plan(("foo", 0, [1, 2, 4]), ("bar", 0, [3, 4, 1]), ("foo", 1, [4, 3, 2])))
    out, _ = run("--verify", "--reassignment-json-file", path)
    assert out.splitlines() == [
        "Status of partition reassignment:",
        "Reassignment of partition bar-0 is completed.",
        "Reassignment of partition foo-0 is still in progress.",
        "There is no active reassignment of partition foo-1, but replica set is 2,3,4 rather than 4,3,2.",
        "",
    ]
    assert not cluster.of(44)


def test_verify_done_clears_the_throttles(cluster: FakeCluster, tmp_path: Path) -> None:
    path = write(tmp_path, plan(("foo", 0, [1, 2, 3]), ("bar", 0, [3, 4, 1])))
    out, err = run("--verify", "--reassignment-json-file", path)
    assert out.splitlines() == [
        "Status of partition reassignment:",
        "Reassignment of partition bar-0 is completed.",
        "Reassignment of partition foo-0 is completed.",
        "",
        "Clearing broker-level throttles on brokers 1,2,3,4",
        "Clearing topic-level throttles on topics bar,foo",
    ]
    assert err == (
        "WARNING: Clearing broker-level throttles on brokers 1,2,3,4 failed: "
        f"INVALID_REQUEST: {STATIC_BROKER_CONFIGS}\n"
    )
    broker_sent = [s for s in cluster.of(44) if s.request.resources[0].resource_type == 4]
    assert [s.node for s in broker_sent] == [1, 2, 3, 4]
    assert [(c.name, c.config_operation, c.value) for c in broker_sent[0].request.resources[0].configs] == [
        ("leader.replication.throttled.rate", 1, None), ("follower.replication.throttled.rate", 1, None),
        ("replica.alter.log.dirs.io.max.bytes.per.second", 1, None),
    ]
    (topic_sent,) = [s for s in cluster.of(44) if s.request.resources[0].resource_type == 2]
    assert [(r.resource_name, [(c.name, c.config_operation, c.value) for c in r.configs])
            for r in topic_sent.request.resources] == [
        (t, [("leader.replication.throttled.replicas", 1, None), ("follower.replication.throttled.replicas", 1, None)])
        for t in ("bar", "foo")
    ]


def test_verify_preserve_throttles(cluster: FakeCluster, tmp_path: Path) -> None:
    path = write(tmp_path, plan(("foo", 0, [1, 2, 3])))
    out, _ = run("--verify", "--reassignment-json-file", path, "--preserve-throttles")
    assert "Clearing" not in out
    assert not cluster.of(44)


def test_verify_log_dir_moves(cluster: FakeCluster, tmp_path: Path) -> None:
    cluster.log_dirs = {(2, TP("foo", 0)): ("/d1", "/d2"), (3, TP("foo", 0)): ("/d3", None)}
    path = write(tmp_path, plan(("foo", 0, [1, 2, 3]), log_dirs={("foo", 0): ["/d1", "/d2", "/d3"]}))
    out, _ = run("--verify", "--reassignment-json-file", path)
    assert out.splitlines() == [
        "Status of partition reassignment:",
        "Reassignment of partition foo-0 is completed.",
        "Partition foo-0 is not found in any live log dir on broker 1. There is likely an offline log directory on the broker.",
        "Reassignment of replica foo-0-2 is still in progress.",
        "Reassignment of replica foo-0-3 completed successfully.",
    ]
    assert [(s.node, [(t.topic, list(t.partitions)) for t in s.request.topics]) for s in cluster.of(35)] == [
        (1, [("foo", [0])]), (2, [("foo", [0])]), (3, [("foo", [0])]),
    ]
    assert not cluster.of(44)  # a move is still going on


# ----------------------------------------------------------------------------------- --cancel


def test_cancel(cluster: FakeCluster, tmp_path: Path) -> None:
    cluster.reassignments = {
        TP("foo", 0): PartitionReassignment((1, 2, 3, 4), (4,), (3,)),
        TP("foo", 1): PartitionReassignment((2, 3, 4, 1), (1,), ()),
        TP("bar", 0): PartitionReassignment((3, 4, 1, 2), (2,), (1,)),  # not in the file
    }
    cluster.broker_config_error = None
    path = write(tmp_path, plan(("foo", 0, [1, 2, 4]), ("foo", 1, [2, 3, 4, 1])))
    out, err = run("--cancel", "--reassignment-json-file", path)
    assert out.splitlines() == [
        "Successfully cancelled partition reassignments for: foo-0,foo-1",
        "None of the specified partition moves are active.",
        "Clearing broker-level throttles on brokers 1,2,3,4",
        "Clearing topic-level throttles on topic foo",
    ]
    assert err == ""
    (listed,) = cluster.of(46)
    assert [(t.name, list(t.partition_indexes)) for t in listed.request.topics] == [("foo", [0, 1])]
    (sent,) = cluster.of(45)
    assert sent.node == 2
    assert [(t.name, [(p.partition_index, p.replicas) for p in t.partitions]) for t in sent.request.topics] == [
        ("foo", [(0, None), (1, None)]),
    ]


def test_cancel_nothing_active(cluster: FakeCluster, tmp_path: Path) -> None:
    path = write(tmp_path, plan(("foo", 0, [1, 2, 4])))
    out, _ = run("--cancel", "--reassignment-json-file", path, "--preserve-throttles")
    assert out.splitlines() == [
        "None of the specified partition reassignments are active.",
        "None of the specified partition moves are active.",
    ]
    assert not cluster.of(45) and not cluster.of(44)


def test_cancel_reports_refusals(cluster: FakeCluster, tmp_path: Path) -> None:
    cluster.reassignments = {TP("foo", 0): PartitionReassignment((1, 2, 3, 4), (4,), (3,))}
    cluster.alter_errors = {TP("foo", 0): (ErrorCode.no_reassignment_in_progress, None)}
    path = write(tmp_path, plan(("foo", 0, [1, 2, 4])))
    out, _ = run("--cancel", "--reassignment-json-file", path, code=1)
    assert out.splitlines() == [
        "Error cancelling partition reassignment for:",
        "foo-0: " + error_message(ErrorCode.no_reassignment_in_progress),
    ]


def test_cancel_reverts_active_log_dir_moves(cluster: FakeCluster, tmp_path: Path) -> None:
    cluster.log_dirs = {(2, TP("foo", 0)): ("/d1", "/d2")}
    path = write(tmp_path, plan(("foo", 0, [1, 2, 3]), log_dirs={("foo", 0): ["any", "/d2", "any"]}))
    out, _ = run("--cancel", "--reassignment-json-file", path, "--preserve-throttles")
    assert out.splitlines() == [
        "None of the specified partition reassignments are active.",
        "Successfully started moving log directory to /d1 for replica foo-0 with broker 2 ",
    ]
    (moved,) = cluster.of(34)
    assert moved.node == 2 and moved.request.dirs[0].path == "/d1"
