"""CreatePartitions (37) against a real broker: admin clients grow classic and diskless topics
while a producer and a consumer group run, and the group reads every record of the new
partitions; refusals carry Kafka's codes and messages."""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import NewPartitions, NewTopic

from tests.integration.conftest import BrokerFactory
from tests.support.kafka_clients import admin_client, wait_for_topic

RECORDS_PER_PHASE = 300


def create_topic(bootstrap: str, name: str, kind: str, partitions: int) -> None:
    admin = admin_client(bootstrap)
    config = {"diskless.enable": "true"} if kind == "diskless" else {}
    admin.create_topics([NewTopic(name, partitions, 1, config=config)])[name].result(30)
    wait_for_topic(admin, name, partitions)


class GroupReader(threading.Thread):
    """A subscribed consumer-group member polling until told to stop; keeps every value it read."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.consumer = Consumer({
            "bootstrap.servers": bootstrap,
            "group.id": f"grow-{uuid.uuid4().hex[:8]}",
            "auto.offset.reset": "earliest",
            "topic.metadata.refresh.interval.ms": 500,  # librdkafka's default is 5 minutes
        })
        self.consumer.subscribe([topic])
        self.values: list[bytes] = []
        self.partitions: set[int] = set()
        self.errors: list[str] = []
        self.stopping = threading.Event()

    def run(self) -> None:
        try:
            while not self.stopping.is_set():
                for msg in self.consumer.consume(500, 0.2):
                    if msg.error():
                        self.errors.append(str(msg.error()))
                    else:
                        self.values.append(msg.value())
                        self.partitions.add(msg.partition())
        finally:
            self.consumer.close()


def produce_phase(producer: Producer, topic: str, phase: str, partitions: int, failures: list[str]) -> list[bytes]:
    values = [f"{phase}-{i}".encode() for i in range(RECORDS_PER_PHASE)]

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            failures.append(f"{msg.value()!r}: {err}")

    for i, value in enumerate(values):
        producer.produce(topic, value=value, partition=i % partitions, on_delivery=on_delivery)
        producer.poll(0)
    assert producer.flush(60) == 0
    return values


@pytest.mark.timeout(180)
@pytest.mark.parametrize("kind", ["classic", "diskless"])
def test_confluent_admin_grows_a_topic_under_a_running_group(
    broker_factory: BrokerFactory, topic_name: str, kind: str
) -> None:
    broker = broker_factory()
    create_topic(broker.bootstrap, topic_name, kind, 2)
    reader = GroupReader(broker.bootstrap, topic_name)
    reader.start()
    producer = Producer({
        "bootstrap.servers": broker.bootstrap, "enable.idempotence": True, "linger.ms": 5,
        "topic.metadata.refresh.interval.ms": 500,
    })
    failures: list[str] = []
    try:
        sent = produce_phase(producer, topic_name, "before", 2, failures)
        admin = admin_client(broker.bootstrap)
        admin.create_partitions([NewPartitions(topic_name, 5)])[topic_name].result(30)
        wait_for_topic(admin, topic_name, 5)
        deadline = time.monotonic() + 30
        while len(producer.list_topics(topic_name, timeout=5).topics[topic_name].partitions) < 5:
            assert time.monotonic() < deadline, "the producer never saw the new partitions"
            time.sleep(0.2)
        sent += produce_phase(producer, topic_name, "after", 5, failures)
        deadline = time.monotonic() + 60
        while len(reader.values) < len(sent) and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(1.0)  # duplicates, if any, show up
    finally:
        reader.stopping.set()
        reader.join(30)
    assert not failures, failures[:5]
    assert not reader.errors, reader.errors[:5]
    assert sorted(reader.values) == sorted(sent), (
        f"{len(reader.values)} read of {len(sent)}; missing {sorted(set(sent) - set(reader.values))[:5]}"
    )
    assert reader.partitions == {0, 1, 2, 3, 4}


@pytest.mark.parametrize("kind", ["classic", "diskless"])
def test_kafka_python_admin_and_kafkas_refusals(broker_factory: BrokerFactory, topic_name: str, kind: str) -> None:
    from kafka.admin import KafkaAdminClient
    from kafka.admin import NewPartitions as KpNewPartitions
    from kafka.errors import (
        InvalidPartitionsError,
        InvalidReplicationAssignmentError,
        UnknownTopicOrPartitionError,
    )

    broker = broker_factory()
    create_topic(broker.bootstrap, topic_name, kind, 2)
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, client_id="grow-test")
    try:
        admin.create_partitions({topic_name: KpNewPartitions(total_count=4)}, validate_only=True)
        assert len(admin_client(broker.bootstrap).list_topics(topic_name, timeout=10).topics[topic_name].partitions) == 2
        admin.create_partitions({topic_name: KpNewPartitions(total_count=3)})
        wait_for_topic(admin_client(broker.bootstrap), topic_name, 3)

        with pytest.raises(InvalidPartitionsError, match=f"The topic {topic_name} currently has 3 partition"
                                                         r"\(s\); 2 would not be an increase."):
            admin.create_partitions({topic_name: KpNewPartitions(total_count=2)})
        with pytest.raises(InvalidPartitionsError, match=r"Topic already has 3 partition\(s\)."):
            admin.create_partitions({topic_name: KpNewPartitions(total_count=3)})
        with pytest.raises(InvalidReplicationAssignmentError, match="includes broker 7, but no such broker is registered"):
            admin.create_partitions({topic_name: KpNewPartitions(total_count=4, new_assignments=[[7]])})
        with pytest.raises(InvalidReplicationAssignmentError, match=r"Attempted to add 2 additional partition\(s\)"):
            admin.create_partitions({topic_name: KpNewPartitions(total_count=5, new_assignments=[[1]])})
        with pytest.raises(UnknownTopicOrPartitionError):
            admin.create_partitions({f"{topic_name}-missing": KpNewPartitions(total_count=5)})
        admin.create_partitions({topic_name: KpNewPartitions(total_count=4, new_assignments=[[1]])})
    finally:
        admin.close()
    wait_for_topic(admin_client(broker.bootstrap), topic_name, 4)
    # The grown topic survives a restart with its four partitions, each taking records.
    broker.stop()
    broker.start()
    topic = wait_for_topic(admin_client(broker.bootstrap), topic_name, 4)
    assert sorted(topic.partitions) == [0, 1, 2, 3]
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for p in range(4):
        producer.produce(topic_name, value=b"x", partition=p)
    assert producer.flush(30) == 0
