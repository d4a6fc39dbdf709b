"""A Shoal cluster: several broker processes on one shared metadata store (an SQLite file, or a
real PostgreSQL server) and one object storage, driven by real clients.

Any broker serves a diskless partition (KIP-1163) and clients are steered to their rack; topics
made through one broker are served by all; classic partitions are spread and only their leader
serves them; groups are spread over brokers and move when a broker dies; a live node id is not
taken twice. The SIGKILL checks are in test_cluster_chaos.py.
"""

from __future__ import annotations

import datetime
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from shoal.protocol.apis import ApiKey, request_class, response_class
from shoal.protocol.build import make, nested
from shoal.protocol.errors import ErrorCode
from tests.integration.conftest import _test_failed
from tests.support.broker import BrokerProcess
from tests.support.chaos_clients import wait_until
from tests.support.cluster import Cluster
from tests.support.kafka_clients import (
    admin_client,
    confluent_consume,
    confluent_produce,
    create_diskless_topic,
    wait_for_topic,
)
from tests.support.metrics import metric
from tests.support.record_batches import build_record_batch
from tests.support.wire import WireClient
from tests.support.workload import check_records, make_workload, seq_of_rec


@pytest.fixture
def cluster_factory(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Any]:
    made: list[Cluster] = []

    def make_cluster(n: int, **kwargs: Any) -> Cluster:
        c = Cluster(tmp_path / f"cluster-{len(made)}", n, **kwargs)
        made.append(c)
        return c.start()

    yield make_cluster
    for c in made:
        if _test_failed(request):
            print(c.log_tails())
        c.close()


def call(port: int, api_key: int, version: int, **fields: Any) -> Any:
    with WireClient(port) as client:
        return client.request(make(request_class(api_key, version), **fields), response_class(api_key, version))


def leaders(md: Any, topic: str) -> dict[int, int]:
    return {p: m.leader for p, m in md.topics[topic].partitions.items()}


@pytest.mark.timeout(240)
@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_every_broker_serves_diskless_topics_rack_aware(
    cluster_factory: Any, backend: str, request: pytest.FixtureRequest
) -> None:
    store_url = request.getfixturevalue("postgres_url") if backend == "postgresql" else None
    cluster = cluster_factory(3, racks=("r1", "r2", "r3"), store_url=store_url)
    b1, b2, b3 = cluster.brokers
    # Made through broker 1, served by every broker.
    for name in ("in-rack", "spread"):
        create_diskless_topic(b1.bootstrap, name, partitions=6)
    for b in cluster.brokers:
        wait_for_topic(admin_client(b.bootstrap), "spread", 6)
    # KIP-1163: a client in rack r2 is sent to broker 2 for every partition: through its client id
    # (any Metadata version) or Metadata v14's RackId; a client without a rack round-robin over all.
    in_r2 = {"client.id": "app,diskless_rack_id=r2"}
    md = admin_client(b1.bootstrap, **in_r2).list_topics(timeout=10)
    assert set(leaders(md, "in-rack").values()) == {2}
    v14 = metadata_v14(b3.port, "in-rack", rack="r2")
    assert {p.leader_id for p in v14.topics[0].partitions} == {2}
    assert {p.preferred_produce_brokers for p in v14.topics[0].partitions} == {(2,)}
    # The replicas and ISRs shown are the true ones (one replica each, spread over the brokers):
    # only the LeaderId is steered to the client's rack.
    assert {p.replica_nodes for p in v14.topics[0].partitions} == {(1,), (2,), (3,)}
    assert all(p.isr_nodes == p.replica_nodes for p in v14.topics[0].partitions)
    # A client without a rack is given the true leaders, spread over the brokers.
    spread = admin_client(b3.bootstrap).list_topics(timeout=10).topics["spread"].partitions
    assert {p.leader for p in spread.values()} == {1, 2, 3}
    assert all(list(p.replicas) == [p.leader] for p in spread.values())

    # A producer and a consumer in rack r2: all their diskless traffic goes to broker 2 (bytes
    # in/out per broker show it), while two producers without a rack write through every broker
    # to the same partitions at once (commits from three brokers, deduplicated and gapless).
    sent_r2 = make_workload(1500, 6, "rack-r2", seed=1)
    sent_a = make_workload(1500, 6, "spread-a", seed=2, first_seq=1500)
    sent_b = make_workload(1500, 6, "spread-b", seed=3, first_seq=3000)
    jobs = [("in-rack", sent_r2, in_r2), ("spread", sent_a, {}), ("spread", sent_b, {})]
    threads = [
        threading.Thread(target=confluent_produce, args=(cluster.bootstrap, topic, sent), kwargs={"config": config})
        for topic, sent, config in jobs
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(150)
    received = confluent_consume(b1.bootstrap, "in-rack", range(6), 1500, config=in_r2)
    check_records(received, sent_r2)
    traffic = {n: cluster.topic_bytes(n, "in-rack") for n in (1, 2, 3)}
    assert traffic[2][0] > 0 and traffic[2][1] > 0, traffic
    assert traffic[1] == traffic[3] == (0.0, 0.0), traffic
    spread_in = [cluster.topic_bytes(n, "spread")[0] for n in (1, 2, 3)]
    assert all(b > 0 for b in spread_in), spread_in

    received = confluent_consume(b2.bootstrap, "spread", range(6), 3000)
    # Each record exactly once; per partition, offsets gapless and each producer's records in order.
    assert Counter(r.value for r in received) == Counter(s.value for s in sent_a + sent_b)
    for p in range(6):
        in_p = sorted((r for r in received if r.partition == p), key=lambda r: r.offset)
        assert [r.offset for r in in_p] == list(range(len(in_p)))
        for first, last in ((1500, 3000), (3000, 4500)):
            seqs = [seq for r in in_p if (seq := seq_of_rec(r)) is not None and first <= seq < last]
            assert seqs == sorted(seqs), f"partition {p}: producer order broken"
    for b in cluster.brokers:
        assert "deadlock" not in b.log_path.read_text().lower()


def metadata_v14(port: int, topic: str, *, rack: str) -> Any:
    """Metadata v14 (KIP-1163) with the client's RackId."""
    request = request_class(ApiKey.METADATA, 14)
    return call(
        port, ApiKey.METADATA, 14, topics=(make(nested(request, "MetadataRequestTopic"), name=topic, topic_id=None),),
        allow_auto_topic_creation=False, include_topic_authorized_operations=False, rack_id=rack,
    )


@pytest.mark.timeout(240)
def test_topics_configs_and_classic_leaders_across_brokers(cluster_factory: Any) -> None:
    cluster = cluster_factory(3, racks=("a", "b", "c"))
    b1, b2, b3 = cluster.brokers
    admin = admin_client(b1.bootstrap)
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

    futures = admin.create_topics([NewTopic("orders", 6, 1)], operation_timeout=30)
    futures["orders"].result(30)
    for b in cluster.brokers:  # every broker has it in its image
        md = wait_for_topic(admin_client(b.bootstrap), "orders", 6)
    spread = Counter(p.leader for p in md.partitions.values())
    assert spread == {1: 2, 2: 2, 3: 2}, spread  # leaders spread evenly over the brokers
    admin2, admin3 = admin_client(b2.bootstrap), admin_client(b3.bootstrap)
    # More replicas than brokers is refused with Kafka's code.
    refused = admin2.create_topics([NewTopic("replicated", 1, 4)], operation_timeout=30)
    with pytest.raises(Exception, match="INVALID_REPLICATION_FACTOR|replication"):
        refused["replicated"].result(30)
    # Only the leader serves a classic partition; the others answer NOT_LEADER_OR_FOLLOWER.
    leader_of_0 = md.partitions[0].leader
    other = next(b for b in cluster.brokers if b.node_id != leader_of_0)
    produce_request = request_class(ApiKey.PRODUCE, 11)
    partition = make(nested(produce_request, "PartitionProduceData"), index=0, records=build_record_batch([(b"k", b"v")]))
    answer = call(
        other.port, ApiKey.PRODUCE, 11, transactional_id=None, acks=-1, timeout=datetime.timedelta(seconds=5),
        topic_data=(make(nested(produce_request, "TopicProduceData"), name="orders", partition_data=(partition,)),),
    )
    not_leader = answer.responses[0].partition_responses[0]
    assert not_leader.error_code == ErrorCode.not_leader_or_follower
    # KIP-951: the answer names the leader and its endpoint, so the client goes there at once.
    assert not_leader.current_leader.leader_id == leader_of_0
    leader = cluster.broker(leader_of_0)
    assert [(n.node_id, n.host, n.port) for n in answer.node_endpoints] == [(leader_of_0, leader.host, leader.port)]
    sent = make_workload(600, 6, "orders", seed=3)
    confluent_produce(b2.bootstrap, "orders", sent)
    check_records(confluent_consume(b3.bootstrap, "orders", range(6), 600), sent)
    # A config set through broker 3 is seen through broker 1.
    entry = ConfigEntry("retention.ms", "3600000", incremental_operation=AlterConfigOpType.SET)
    altered = admin3.incremental_alter_configs(
        [ConfigResource("topic", "orders", incremental_configs=[entry])]
    )
    next(iter(altered.values())).result(30)
    deadline = time.monotonic() + 15
    while True:
        described = admin.describe_configs([ConfigResource("topic", "orders")])
        value = next(iter(described.values())).result(10)["retention.ms"].value
        if value == "3600000" or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert value == "3600000"
    # Deleted through broker 2: gone everywhere, its local logs removed on every broker.
    admin2.delete_topics(["orders"], operation_timeout=30)["orders"].result(30)
    cluster.wait_for(lambda m: "orders" not in m.topics, "orders deleted", via=1)
    deadline = time.monotonic() + 15
    while any(list(b.log_dir.glob("orders-*")) for b in cluster.brokers) and time.monotonic() < deadline:
        time.sleep(0.2)
    leftovers = [p for b in cluster.brokers for p in b.log_dir.glob("orders-*") if not p.name.endswith("-delete")]
    assert not leftovers, leftovers


def find_coordinator(port: int, groups: list[str]) -> dict[str, tuple[int, int]]:
    answer = call(port, ApiKey.FIND_COORDINATOR, 4, key_type=0, coordinator_keys=tuple(groups))
    return {c.key: (c.node_id, c.error_code) for c in answer.coordinators}


@pytest.mark.timeout(240)
def test_group_coordinators_spread_and_move_off_a_dead_broker(cluster_factory: Any) -> None:
    cluster = cluster_factory(3)
    b1, b2, b3 = cluster.brokers
    groups = [f"group-{i}" for i in range(30)]
    # Every broker gives the same answer once each has seen every registration.
    deadline = time.monotonic() + 15
    while True:
        answers = [find_coordinator(b.port, groups) for b in cluster.brokers]
        if all(a == answers[0] for a in answers) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    placed = answers[0]
    assert all(a == placed for a in answers)
    assert {node for node, _ in placed.values()} == {1, 2, 3}
    create_diskless_topic(b1.bootstrap, "work", partitions=3)
    # A group coordinated by broker 2 commits, broker 2 dies, the group moves and keeps its offsets.
    group = next(g for g, (node, _) in placed.items() if node == 2)
    sent = make_workload(300, 3, "work", seed=4)
    confluent_produce(b1.bootstrap, "work", sent)
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": b1.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    consumer.commit(offsets=[TopicPartition("work", p, 40 + p) for p in range(3)], asynchronous=False)
    consumer.close()
    # Kafka's controller gauges: one active controller in the cluster, three active brokers.
    gauges = [cluster.scrape(n) for n in (1, 2, 3)]
    assert sum(metric(g, "kafka_controller_kafkacontroller_activecontrollercount") for g in gauges) == 1
    assert {metric(g, "kafka_controller_kafkacontroller_activebrokercount") for g in gauges} == {3}
    b2.kill()
    for via in (1, 3):
        cluster.wait_for(lambda m: sorted(m.brokers) == [1, 3], "broker 2 fenced", via=via)
    # librdkafka may have asked broker 3: broker 1's own image follows within its next tail (500 ms).
    wait_until(
        lambda: metric(cluster.scrape(1), "kafka_controller_kafkacontroller_fencedbrokercount") == 1,
        "broker 1 counting broker 2 as fenced", 10,
    )
    moved = find_coordinator(b1.port, [group])[group]
    assert moved[0] in (1, 3) and moved[1] == ErrorCode.none
    # The broker that no longer coordinates a group says NOT_COORDINATOR.
    not_owner = b3 if moved[0] == 1 else b1
    fetched = call(not_owner.port, ApiKey.OFFSET_FETCH, 7, group_id=group, topics=None, require_stable=False)
    assert fetched.error_code == ErrorCode.not_coordinator
    reader = Consumer({"bootstrap.servers": b3.bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        committed = reader.committed([TopicPartition("work", p) for p in range(3)], timeout=30)
    finally:
        reader.close()
    assert [tp.offset for tp in committed] == [40, 41, 42]


@pytest.mark.timeout(120)
def test_a_node_id_already_live_is_refused(cluster_factory: Any, tmp_path: Path) -> None:
    cluster = cluster_factory(1)
    twin = BrokerProcess(
        tmp_path / "twin", storage_url=cluster.brokers[0].storage_url, node_id=1,
        overrides=dict(cluster.brokers[0].overrides),
    )
    twin.properties_path.write_text("".join(f"{k}={v}\n" for k, v in twin.properties().items()))
    done = subprocess.run(twin.command(), env=twin.environment(), capture_output=True, timeout=60, text=True)
    assert done.returncode == 1
    assert "node id 1 is already registered by a live broker" in done.stderr
    assert cluster.brokers[0].is_running()
