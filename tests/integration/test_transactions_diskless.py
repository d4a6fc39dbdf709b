"""Transactions on diskless topics (KIP-1163: "Transactions will be able to span both Diskless and
classic topics"), against broker processes: one transaction writes classic and diskless
partitions and commits or aborts as a whole for read_committed consumers of both; an open
transaction holds the diskless partition's last stable offset; kafka-python and aiokafka
producers work too; and a two-broker cluster serves a diskless transaction through any broker."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition

from tests.integration.test_transactions_clients import create_topic, expect, flat, read_all
from tests.support.broker import BrokerProcess
from tests.support.cluster import Cluster
from tests.support.kafka_clients import create_diskless_topic


def test_one_transaction_spans_classic_and_diskless(broker: BrokerProcess, topic_name: str) -> None:
    classic, diskless = f"{topic_name}-c", f"{topic_name}-d"
    create_topic(broker.bootstrap, classic)
    create_diskless_topic(broker.bootstrap, diskless, partitions=2)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": f"{topic_name}-tx", "linger.ms": 5})
    producer.init_transactions(30)
    for round_, commit in enumerate([True, False, True]):
        producer.begin_transaction()
        for i in range(20):
            producer.produce(classic, value=f"c{round_}-{i:03d}".encode(), partition=i % 2)
            producer.produce(diskless, value=f"d{round_}-{i:03d}".encode(), partition=i % 2)
        if commit:
            producer.commit_transaction(30)
        else:
            producer.flush(30)
            producer.abort_transaction(30)
    for topic, prefix in ((classic, "c"), (diskless, "d")):
        committed = read_all(broker.bootstrap, topic, 2, "read_committed")
        assert flat(committed) == sorted(f"{prefix}{r}-{i:03d}" for r in (0, 2) for i in range(20)), topic
        for values in committed.values():
            assert values == sorted(values)
        assert flat(read_all(broker.bootstrap, topic, 2, "read_uncommitted", settle=1.0)) == sorted(
            f"{prefix}{r}-{i:03d}" for r in range(3) for i in range(20)
        ), topic


def test_an_open_transaction_holds_the_diskless_last_stable_offset(broker: BrokerProcess, topic_name: str) -> None:
    create_diskless_topic(broker.bootstrap, topic_name, partitions=1)
    plain = Producer({"bootstrap.servers": broker.bootstrap})
    plain.produce(topic_name, value=b"before", partition=0)
    plain.flush(30)
    txn = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": f"{topic_name}-open"})
    txn.init_transactions(30)
    txn.begin_transaction()
    txn.produce(topic_name, value=b"inside", partition=0)
    txn.flush(30)
    plain.produce(topic_name, value=b"after", partition=0)  # past the open transaction's start
    plain.flush(30)
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"{topic_name}-g",
                         "isolation.level": "read_committed", "enable.auto.commit": False})
    tp = TopicPartition(topic_name, 0)
    low, high = consumer.get_watermark_offsets(tp, timeout=10)
    assert (low, high) == (0, 1)  # read_committed: latest is the LSO, the open transaction's first offset
    assert flat(read_all(broker.bootstrap, topic_name, 1, "read_committed", settle=1.5)) == ["before"]
    txn.commit_transaction(30)
    assert flat(read_all(broker.bootstrap, topic_name, 1, "read_committed")) == ["after", "before", "inside"]
    assert consumer.get_watermark_offsets(tp, timeout=10)[1] == 4  # 3 records and the marker
    consumer.close()


def test_kafka_python_and_aiokafka_on_diskless(broker: BrokerProcess, topic_name: str) -> None:
    from aiokafka import AIOKafkaProducer
    from kafka import KafkaProducer

    create_diskless_topic(broker.bootstrap, topic_name, partitions=2)
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id=f"{topic_name}-kp")
    producer.init_transactions()
    producer.begin_transaction()
    for i in range(20):
        producer.send(topic_name, value=f"k-{i:03d}".encode(), partition=i % 2)
    producer.commit_transaction()
    producer.begin_transaction()
    for i in range(20):
        producer.send(topic_name, value=f"x-{i:03d}".encode(), partition=i % 2)
    producer.flush()
    producer.abort_transaction()
    producer.close()

    async def aio() -> None:
        p = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id=f"{topic_name}-aio")
        await p.start()
        try:
            async with p.transaction():
                for i in range(20):
                    await p.send(topic_name, value=f"a-{i:03d}".encode(), partition=i % 2)
            await p.begin_transaction()
            for i in range(20):
                await p.send(topic_name, value=f"y-{i:03d}".encode(), partition=i % 2)
            await p.abort_transaction()
        finally:
            await p.stop()

    asyncio.run(aio())
    assert flat(read_all(broker.bootstrap, topic_name, 2, "read_committed")) == sorted(expect("a", 20) + expect("k", 20))


def cache_bytes(cluster: Cluster) -> float:
    return sum(
        v for node in (1, 2) for name, labels, v in cluster.scrape(node)
        if name == "kafka_diskless_fetch_bytes_total" and labels["source"] == "cache"
    )


def test_a_diskless_transaction_through_any_broker_of_a_cluster(tmp_path: Path, topic_name: str) -> None:
    """Two producers bootstrapped on different brokers; the partitions have a cache replica on
    each broker, which serves read_committed consumers once it has the coordinator's transaction
    state (the aborted records are dropped by the consumer from the list it answers)."""
    cluster = Cluster(tmp_path / "cluster", 2).start()
    try:
        create_diskless_topic(cluster.broker(1).bootstrap, topic_name, partitions=2, replication_factor=2)
        producers: list[Any] = []
        for node in (1, 2):  # each producer bootstraps on one broker: produce goes there (any broker takes it)
            p = Producer({"bootstrap.servers": cluster.broker(node).bootstrap, "transactional.id": f"{topic_name}-{node}"})
            p.init_transactions(30)
            producers.append(p)
        for n, p in enumerate(producers):
            p.begin_transaction()
            for i in range(15):
                p.produce(topic_name, value=f"p{n}-{i:03d}".encode(), partition=i % 2)
            p.commit_transaction(30)
            p.begin_transaction()
            p.produce(topic_name, value=f"gone{n}".encode(), partition=0)
            p.flush(30)
            p.abort_transaction(30)
        before = cache_bytes(cluster)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            got = flat(read_all(cluster.bootstrap, topic_name, 2, "read_committed", settle=1.0))
            assert got == sorted(expect("p0", 15) + expect("p1", 15))
            if cache_bytes(cluster) > before:
                break  # read from a cache replica at least once
            time.sleep(0.5)
        assert cache_bytes(cluster) > before, "read_committed reads never came from a cache replica"
    finally:
        cluster.close()
