"""Transactional producers of confluent-kafka (librdkafka), kafka-python and aiokafka against a
broker process: committed records appear exactly once and in order to read_committed consumers,
aborted ones never, read_uncommitted consumers see both; a zombie producer with the same
transactional.id is fenced; a transaction left open past its timeout is aborted by the
coordinator and its records never become visible."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import NewTopic

from tests.support.broker import BrokerProcess
from tests.support.kafka_clients import admin_client, wait_for_topic

pytestmark = pytest.mark.timeout(180)


def create_topic(bootstrap: str, name: str, partitions: int = 2) -> None:
    admin = admin_client(bootstrap)
    admin.create_topics([NewTopic(name, partitions, 1)], operation_timeout=30)[name].result(30)
    wait_for_topic(admin, name, partitions)


def read_all(bootstrap: str, topic: str, partitions: int, isolation: str, *, settle: float = 3.0) -> dict[int, list[str]]:
    """Every value per partition, in offset order, read from the beginning until ``settle``
    seconds pass without a record."""
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"reader-{isolation}-{time.monotonic_ns()}",
        "isolation.level": isolation, "enable.auto.commit": False, "auto.offset.reset": "earliest",
    })
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got: dict[int, list[str]] = {p: [] for p in range(partitions)}
    quiet_until = time.monotonic() + settle
    deadline = time.monotonic() + 60
    while time.monotonic() < min(quiet_until, deadline):
        message = consumer.poll(0.2)
        if message is None or message.error():
            continue
        got[message.partition()].append(message.value().decode())
        quiet_until = time.monotonic() + settle
    consumer.close()
    return got


def flat(got: dict[int, list[str]]) -> list[str]:
    return sorted(v for values in got.values() for v in values)


def expect(prefix: str, n: int) -> list[str]:
    return [f"{prefix}-{i:03d}" for i in range(n)]


def test_confluent_kafka_commit_and_abort(broker: BrokerProcess, topic_name: str) -> None:
    create_topic(broker.bootstrap, topic_name)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": f"{topic_name}-tx", "linger.ms": 5})
    producer.init_transactions(30)
    for round_, commit in enumerate([True, False, True, False, True]):
        producer.begin_transaction()
        for i in range(20):
            producer.produce(topic_name, value=f"r{round_}-{i:03d}".encode(), partition=i % 2)
        if commit:
            producer.commit_transaction(30)
        else:
            producer.flush(30)
            producer.abort_transaction(30)
    committed = read_all(broker.bootstrap, topic_name, 2, "read_committed")
    assert flat(committed) == sorted(f"r{r}-{i:03d}" for r in (0, 2, 4) for i in range(20))
    for p, values in committed.items():  # in order within each partition
        assert values == sorted(values), p
    uncommitted = read_all(broker.bootstrap, topic_name, 2, "read_uncommitted", settle=1.0)
    assert flat(uncommitted) == sorted(f"r{r}-{i:03d}" for r in range(5) for i in range(20))


def test_kafka_python_commit_and_abort(broker: BrokerProcess, topic_name: str) -> None:
    from kafka import KafkaProducer

    create_topic(broker.bootstrap, topic_name)
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id=f"{topic_name}-kp")
    producer.init_transactions()
    producer.begin_transaction()
    for i in range(30):
        producer.send(topic_name, value=f"c-{i:03d}".encode(), partition=i % 2)
    producer.commit_transaction()
    producer.begin_transaction()
    for i in range(30):
        producer.send(topic_name, value=f"a-{i:03d}".encode(), partition=i % 2)
    producer.flush()
    producer.abort_transaction()
    producer.close()
    assert flat(read_all(broker.bootstrap, topic_name, 2, "read_committed")) == expect("c", 30)
    assert flat(read_all(broker.bootstrap, topic_name, 2, "read_uncommitted", settle=1.0)) == sorted(
        expect("a", 30) + expect("c", 30)
    )


def test_aiokafka_commit_and_abort_and_read_committed(broker: BrokerProcess, topic_name: str) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka import TopicPartition as AioTp

    create_topic(broker.bootstrap, topic_name)

    async def scenario() -> list[str]:
        producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id=f"{topic_name}-aio")
        await producer.start()
        try:
            async with producer.transaction():
                for i in range(25):
                    await producer.send(topic_name, value=f"c-{i:03d}".encode(), partition=i % 2)
            await producer.begin_transaction()
            for i in range(25):
                await producer.send(topic_name, value=f"a-{i:03d}".encode(), partition=i % 2)
            await producer.abort_transaction()
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap, isolation_level="read_committed",
                                    auto_offset_reset="earliest", enable_auto_commit=False)
        await consumer.start()
        try:
            tps = [AioTp(topic_name, p) for p in range(2)]
            consumer.assign(tps)
            await consumer.seek_to_beginning(*tps)
            got: list[str] = []
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                batch = await consumer.getmany(timeout_ms=500)
                for records in batch.values():
                    got.extend(r.value.decode() for r in records)
                if len(got) >= 25:
                    await asyncio.sleep(1)  # nothing else may come
                    for records in (await consumer.getmany(timeout_ms=500)).values():
                        got.extend(r.value.decode() for r in records)
                    break
            return got
        finally:
            await consumer.stop()

    assert sorted(asyncio.run(scenario())) == expect("c", 25)


def test_a_zombie_is_fenced_and_its_open_transaction_aborted(broker: BrokerProcess, topic_name: str) -> None:
    create_topic(broker.bootstrap, topic_name)
    config: dict[str, Any] = {"bootstrap.servers": broker.bootstrap, "transactional.id": f"{topic_name}-z", "linger.ms": 0}
    zombie = Producer(config)
    zombie.init_transactions(30)
    zombie.begin_transaction()
    for i in range(10):
        zombie.produce(topic_name, value=f"z-{i:03d}".encode(), partition=0)
    zombie.flush(30)
    # The same transactional.id starts again (a restarted instance): the zombie's open transaction
    # is aborted and the zombie fenced.
    successor = Producer(config)
    successor.init_transactions(30)
    successor.begin_transaction()
    for i in range(10):
        successor.produce(topic_name, value=f"s-{i:03d}".encode(), partition=1)
    successor.commit_transaction(30)
    with pytest.raises(KafkaException) as fenced:
        zombie.produce(topic_name, value=b"late", partition=0)
        zombie.commit_transaction(30)
    assert fenced.value.args[0].fatal() or "fenced" in str(fenced.value).lower(), fenced.value
    assert flat(read_all(broker.bootstrap, topic_name, 2, "read_committed")) == expect("s", 10)


def test_a_transaction_open_past_its_timeout_is_aborted(broker_factory: Any, topic_name: str) -> None:
    broker = broker_factory(overrides={"transaction.abort.timed.out.transaction.cleanup.interval.ms": 500})
    create_topic(broker.bootstrap, topic_name)
    producer = Producer({
        "bootstrap.servers": broker.bootstrap, "transactional.id": f"{topic_name}-slow",
        "transaction.timeout.ms": 2000, "linger.ms": 0,
    })
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(10):
        producer.produce(topic_name, value=f"late-{i:03d}".encode(), partition=0)
    producer.flush(30)
    time.sleep(4)  # past the timeout: the coordinator aborts and fences the producer
    with pytest.raises(KafkaException):
        producer.commit_transaction(30)
    # The aborted records never become visible, and the partition's LSO moved past them: a
    # later transaction by another producer commits and is read.
    other = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": f"{topic_name}-next"})
    other.init_transactions(30)
    other.begin_transaction()
    for i in range(5):
        other.produce(topic_name, value=f"ok-{i:03d}".encode(), partition=0)
    other.commit_transaction(30)
    assert flat(read_all(broker.bootstrap, topic_name, 2, "read_committed")) == expect("ok", 5)
