"""``shoal reassign-partitions`` (Kafka's kafka-reassign-partitions.sh) without a broker.

The command runs against a fake cluster (tests/support/fake_reassign_cluster.py) that answers
the requests the tool sends after a round trip through the wire encoding and records them. The
pure parts (assignment, JSON files, text): test_reassign_plan.py.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from shoal.cli import reassign, reassign_log_dirs, reassign_throttles
from shoal.cli.kafka_client import (
    PartitionReassignment,
    ReassignmentClient,
    TopicPartition,
    error_message,
)
from shoal.cli.main import app
from shoal.protocol.errors import ErrorCode
from tests.support.fake_cli_wire import PORT_BASE, FakeConnection
from tests.support.fake_reassign_cluster import STATIC_BROKER_CONFIGS, FakeCluster

TP = TopicPartition


@pytest.fixture
def cluster(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeCluster]:
    fake = FakeCluster(topics={"foo": {0: [1, 2, 3], 1: [2, 3, 4]}, "bar": {0: [3, 4, 1]}})

    def connection(self: ReassignmentClient, host: str, port: int) -> FakeConnection:
        node = port - PORT_BASE
        if node not in fake.brokers:
            raise AssertionError(f"no broker at port {port}")
        return FakeConnection(fake, node, reassign.CLIENT_ID)

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
