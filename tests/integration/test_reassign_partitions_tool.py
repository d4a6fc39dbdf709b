"""``shoal reassign-partitions`` as an operator runs it, against four broker processes.

The tool runs as a process (like Kafka's kafka-reassign-partitions.sh) on a classic topic whose
partitions live on brokers 1-3: --generate proposes a spread over 2,3,4, --execute starts a
throttled move to broker 4, --verify follows it to the end and then clears the throttles, and
afterwards --list, Metadata and a consumer see the new replicas with every record still there.
A reassignment throttled too far to finish soon is shown by --list and reverted by --cancel.
The unit tests (tests/unit/test_reassign_cli.py) pin the wire requests and Kafka's messages;
this file checks that real brokers answer them as the tool expects.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import _test_failed
from tests.support.broker import run_shoal
from tests.support.chaos_clients import wait_until
from tests.support.cluster import Cluster
from tests.support.kafka_clients import admin_client, confluent_consume

TOPIC = "orders"
ORIGINAL = {0: [1, 2, 3], 1: [2, 3, 1]}
RECORDS = 300
THROTTLE = 50_000_000


@pytest.fixture
def cluster(tmp_path: Path, request: pytest.FixtureRequest) -> Cluster:
    c = Cluster(tmp_path / "c", 4, overrides={"replica.lag.time.max.ms": 3000})

    def close() -> None:
        if _test_failed(request):
            print(c.log_tails())
        c.close()

    request.addfinalizer(close)  # also when start() fails half way: no broker is left behind
    return c.start()


def reassign(cluster: Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    """One ``shoal reassign-partitions`` run against the cluster; it must succeed."""
    done = run_shoal("reassign-partitions", "--bootstrap-server", cluster.bootstrap, *args, timeout=90)
    assert done.returncode == 0, f"{args}: exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done


def write_plan(path: Path, moves: Mapping[int, Sequence[int]]) -> Path:
    path.write_text(json.dumps({
        "version": 1,
        "partitions": [{"topic": TOPIC, "partition": p, "replicas": list(r)} for p, r in moves.items()],
    }))
    return path


def replicas_and_isrs(cluster: Cluster) -> dict[int, tuple[list[int], list[int]]]:
    md = cluster.wait_for(lambda md: TOPIC in md.topics, "the topic in Metadata")
    return {p: (list(m.replicas), sorted(m.isrs)) for p, m in md.topics[TOPIC].partitions.items()}


def in_sync(assignment: Mapping[int, Sequence[int]]) -> dict[int, tuple[list[int], list[int]]]:
    return {p: (list(r), sorted(r)) for p, r in assignment.items()}


def create_topic(cluster: Cluster) -> None:
    """A classic topic on ORIGINAL (kafka-python: confluent's NewTopic refuses replica_assignment)."""
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap.split(","), request_timeout_ms=30000)
    try:
        admin.create_topics([NewTopic(TOPIC, num_partitions=-1, replication_factor=-1, replica_assignments=ORIGINAL)])
    finally:
        admin.close()
    wait_until(lambda: replicas_and_isrs(cluster) == in_sync(ORIGINAL), "every replica in sync", 30)


def produce(cluster: Cluster, count: int = RECORDS, size: int = 0) -> list[bytes]:
    """``count`` distinct records (padded to ``size`` bytes), alternating between the partitions,
    each acknowledged by every replica."""
    from confluent_kafka import Producer

    failed: list[str] = []
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 5})
    values = [f"record-{i:04d}".encode().ljust(size, b".") for i in range(count)]
    for i, value in enumerate(values):
        producer.produce(TOPIC, value=value, partition=i % 2,
                         on_delivery=lambda err, _msg: failed.append(str(err)) if err else None)
    assert producer.flush(60) == 0
    assert not failed, failed[:5]
    return values


def config_values(cluster: Cluster, resource_type: Any, name: str, keys: Sequence[str]) -> dict[str, tuple[str, Any]]:
    """DescribeConfigs of one resource: (value, source) of each key."""
    from confluent_kafka.admin import ConfigResource, ConfigSource

    admin = admin_client(cluster.bootstrap)
    (future,) = admin.describe_configs([ConfigResource(resource_type, name)]).values()
    entries = future.result(30)
    return {k: (entries[k].value, ConfigSource(entries[k].source)) for k in keys}


def sections(stdout: str) -> dict[str, Any]:
    """The JSON documents --generate prints, each under its heading line."""
    lines = stdout.splitlines()
    return {
        heading: json.loads(lines[lines.index(heading) + 1])
        for heading in ("Current partition replica assignment", "Proposed partition reassignment configuration")
    }


@pytest.mark.timeout(240)
def test_generate_execute_verify_moves_the_replicas_and_clears_the_throttles(cluster: Cluster, tmp_path: Path) -> None:
    from confluent_kafka.admin import ConfigSource, ResourceType

    create_topic(cluster)
    values = produce(cluster)

    # --generate: the current assignment, and a proposal over 2,3,4 keeping the replication factor.
    topics = tmp_path / "topics.json"
    topics.write_text(json.dumps({"version": 1, "topics": [{"topic": TOPIC}]}))
    generated = reassign(cluster, "--generate", "--topics-to-move-json-file", str(topics), "--broker-list", "2,3,4")
    docs = sections(generated.stdout)
    current = docs["Current partition replica assignment"]
    assert current["version"] == 1
    assert [(p["topic"], p["partition"], p["replicas"], p["log_dirs"]) for p in current["partitions"]] == [
        (TOPIC, 0, [1, 2, 3], ["any"] * 3), (TOPIC, 1, [2, 3, 1], ["any"] * 3),
    ]
    proposed = docs["Proposed partition reassignment configuration"]
    assert [(p["topic"], p["partition"]) for p in proposed["partitions"]] == [(TOPIC, 0), (TOPIC, 1)]
    for p in proposed["partitions"]:
        assert sorted(p["replicas"]) == [2, 3, 4] and p["log_dirs"] == ["any"] * 3, p
    assert replicas_and_isrs(cluster) == in_sync(ORIGINAL), "--generate changed nothing"

    # --execute, throttled: the rollback JSON, the throttles set, both reassignments started.
    target = {0: [2, 3, 4], 1: [4, 3, 2]}
    plan = write_plan(tmp_path / "plan.json", target)
    executed = reassign(cluster, "--execute", "--reassignment-json-file", str(plan), "--throttle", str(THROTTLE))
    out = executed.stdout
    rollback = json.loads(out.split("Current partition replica assignment\n\n", 1)[1].split("\n", 1)[0])
    assert {p["partition"]: p["replicas"] for p in rollback["partitions"]} == ORIGINAL
    assert f"The inter-broker throttle limit was set to {THROTTLE} B/s" in out, out
    assert f"Successfully started partition reassignments for {TOPIC}-0,{TOPIC}-1" in out, out
    assert "WARNING" not in executed.stderr, executed.stderr  # the rates are dynamic broker configs
    throttled = config_values(cluster, ResourceType.TOPIC, TOPIC, [
        "leader.replication.throttled.replicas", "follower.replication.throttled.replicas",
    ])
    assert throttled["leader.replication.throttled.replicas"][0] == "0:1,0:2,0:3,1:1,1:2,1:3", throttled
    assert throttled["follower.replication.throttled.replicas"][0] == "0:4,1:4", throttled
    for broker in (1, 2, 3, 4):
        rates = config_values(cluster, ResourceType.BROKER, str(broker), [
            "leader.replication.throttled.rate", "follower.replication.throttled.rate",
        ])
        assert rates == dict.fromkeys(rates, (str(THROTTLE), ConfigSource.DYNAMIC_BROKER_CONFIG)), (broker, rates)

    # --verify until both are completed; the last run clears the throttles.
    deadline = time.monotonic() + 90
    while True:
        verified = reassign(cluster, "--verify", "--reassignment-json-file", str(plan))
        if all(f"Reassignment of partition {TOPIC}-{p} is completed." in verified.stdout for p in target):
            break
        assert "is still in progress." in verified.stdout, verified.stdout
        assert time.monotonic() < deadline, f"not completed within 90 s:\n{verified.stdout}"
        time.sleep(1)
    assert "Clearing broker-level throttles on brokers 1,2,3,4" in verified.stdout, verified.stdout
    assert f"Clearing topic-level throttles on topic {TOPIC}" in verified.stdout, verified.stdout
    assert "WARNING" not in verified.stderr, verified.stderr
    cleared = config_values(cluster, ResourceType.TOPIC, TOPIC, [
        "leader.replication.throttled.replicas", "follower.replication.throttled.replicas",
    ])
    assert all(source != ConfigSource.DYNAMIC_TOPIC_CONFIG for _, source in cleared.values()), cleared
    for broker in (1, 2, 3, 4):
        rates = config_values(cluster, ResourceType.BROKER, str(broker), [
            "leader.replication.throttled.rate", "follower.replication.throttled.rate",
        ])
        assert all(source != ConfigSource.DYNAMIC_BROKER_CONFIG for _, source in rates.values()), (broker, rates)

    assert reassign(cluster, "--list").stdout.strip() == "No partition reassignments found."
    wait_until(lambda: replicas_and_isrs(cluster) == in_sync(target), "the new replicas, all in sync, in Metadata", 30)

    received = confluent_consume(cluster.bootstrap, TOPIC, [0, 1], RECORDS, timeout=60)
    counts = Counter(r.value for r in received)
    assert set(counts) == set(values) and set(counts.values()) == {1}, (len(counts), len(received))
    for p in (0, 1):
        offsets = [r.offset for r in received if r.partition == p]
        assert offsets == list(range(RECORDS // 2)), (p, offsets[:10])


@pytest.mark.timeout(240)
def test_cancel_reverts_a_reassignment_in_progress(cluster: Cluster, tmp_path: Path) -> None:
    """A reassignment throttled to 10 kB/s over 2 MB partitions: the new replica gets at most one
    fetch (1 MB) per 11 s quota window, so it stays in progress while the operator lists and
    cancels it. (Stopping broker 4 instead would race its fencing: --execute, like Kafka's tool,
    refuses a broker that Metadata does not list any more, and the test cluster fences in 2 s.)"""
    create_topic(cluster)
    produce(cluster, 4000, size=1000)
    plan = write_plan(tmp_path / "plan.json", {0: [1, 2, 4], 1: [2, 3, 1, 4]})
    executed = reassign(cluster, "--execute", "--reassignment-json-file", str(plan), "--throttle", "10000")
    assert f"Successfully started partition reassignments for {TOPIC}-0,{TOPIC}-1" in executed.stdout
    listed = reassign(cluster, "--list").stdout
    assert listed.splitlines() == [
        "Current partition reassignments:",
        f"{TOPIC}-0: replicas: 1,2,4,3. adding: 4. removing: 3.",
        f"{TOPIC}-1: replicas: 2,3,1,4. adding: 4.",
    ], listed
    verified = reassign(cluster, "--verify", "--reassignment-json-file", str(plan)).stdout
    assert f"Reassignment of partition {TOPIC}-0 is still in progress." in verified, verified
    assert "Clearing" not in verified, verified  # the throttles stay while anything moves
    cancelled = reassign(cluster, "--cancel", "--reassignment-json-file", str(plan))
    assert cancelled.stdout.splitlines() == [
        f"Successfully cancelled partition reassignments for: {TOPIC}-0,{TOPIC}-1",
        "None of the specified partition moves are active.",
        "Clearing broker-level throttles on brokers 1,2,3,4",
        f"Clearing topic-level throttles on topic {TOPIC}",
    ], cancelled.stdout
    assert "WARNING" not in cancelled.stderr, cancelled.stderr
    assert reassign(cluster, "--list").stdout.strip() == "No partition reassignments found."
    wait_until(lambda: replicas_and_isrs(cluster) == in_sync(ORIGINAL), "the original replicas, all in sync", 30)
    for p in (0, 1):
        replica_dir = cluster.broker(4).log_dir / f"{TOPIC}-{p}"
        wait_until(lambda d=replica_dir: not d.exists(), f"broker 4 deleting its replica of {TOPIC}-{p}", 30)
    reverted = reassign(cluster, "--verify", "--reassignment-json-file", str(plan)).stdout
    assert f"There is no active reassignment of partition {TOPIC}-0, but replica set is 1,2,3 rather than 1,2,4." \
        in reverted, reverted
