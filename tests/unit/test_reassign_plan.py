"""The pure parts of ``shoal reassign-partitions`` (Kafka's kafka-reassign-partitions.sh).

Checked against the vectors of Kafka's own tests (AdminRackAwareTest, ReassignPartitionsUnitTest,
ReassignPartitionsCommandArgsTest): replica assignment, the JSON files, the move and throttle
maps, and the text the command prints. The command itself: test_reassign_cli.py.
"""

from __future__ import annotations

import pytest

from shoal.cli.kafka_client import (
    Node,
    PartitionReassignment,
    TopicPartition,
)
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
