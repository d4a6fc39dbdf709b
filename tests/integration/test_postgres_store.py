"""A broker whose every store is a real PostgreSQL server (``metadata.store.url``): clients work
as on the embedded store, state survives a broker restart, and a database that restarts or
crashes under an idempotent producer loses and duplicates no acknowledged record."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from tests.integration.conftest import BrokerFactory
from tests.support.acked_producer import AckedProducer, check_acked_ids, consume_all, id_records
from tests.support.kafka_clients import create_diskless_topic
from tests.support.postgres import PostgresServer


def _consume(bootstrap: str, topic: str, group: str, expected: int) -> list[tuple[int, int, bytes]]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    got: list[tuple[int, int, bytes]] = []
    deadline = time.monotonic() + 60
    while len(got) < expected and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            got.append((m.partition(), m.offset(), m.value()))
    c.commit(asynchronous=False)
    c.close()
    return got


@pytest.mark.timeout(180)
def test_broker_on_postgres_serves_clients_and_keeps_state(broker_factory: BrokerFactory, postgres_url: str) -> None:
    # Each group's first join would wait out the default initial rebalance delay (3 s).
    broker = broker_factory("pg-broker", overrides={"metadata.store.url": postgres_url,
                                                    "group.initial.rebalance.delay.ms": 0})
    create_diskless_topic(broker.bootstrap, "on-pg", partitions=3)
    p = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True})
    for i in range(300):
        p.produce("on-pg", value=f"d{i}".encode(), partition=i % 3)
        p.produce("classic-on-pg", value=f"c{i}".encode())  # auto-created classic topic
    assert p.flush(60) == 0
    assert len(_consume(broker.bootstrap, "on-pg", "pg-group", 300)) == 300
    assert len(_consume(broker.bootstrap, "classic-on-pg", "pg-group-2", 300)) == 300
    assert not list(broker.log_dir.glob("shoal.db*")), "the embedded store was created beside PostgreSQL"

    broker.stop()
    broker.start()
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "pg-group"})
    committed = c.committed([TopicPartition("on-pg", i) for i in range(3)], timeout=30)
    c.close()
    assert sorted(tp.offset for tp in committed) == [100, 100, 100]
    again = _consume(broker.bootstrap, "on-pg", "another-group", 300)
    assert sorted(v for _, _, v in again) == sorted(f"d{i}".encode() for i in range(300))


@pytest.mark.timeout(300)
@pytest.mark.parametrize("outage", ["restart", "crash"])
def test_database_outage_loses_no_acknowledged_record(
    broker_factory: BrokerFactory, postgres_server: PostgresServer, postgres_url: str, tmp_path: Path, outage: str
) -> None:
    """PostgreSQL goes away under an idempotent producer (a clean restart, or a crash: immediate
    shutdown, WAL recovery at start) and comes back; the broker reconnects by itself and every
    acknowledged record is stored exactly once at gapless offsets."""
    broker = broker_factory("pg-outage", overrides={"metadata.store.url": postgres_url,
                                                    "diskless.append.commit.interval.ms": 50})
    partitions = 3
    create_diskless_topic(broker.bootstrap, "pg-outage", partitions=partitions)
    producer = AckedProducer(tmp_path / "producer", broker.bootstrap, "pg-outage", partitions, max_seconds=150,
                             label=outage, value_size=50)
    try:
        producer.expect_acks(2000, 60, "before the outage")
        try:
            if outage == "crash":
                postgres_server.kill()
            else:
                postgres_server.stop()
            at_outage = len(producer.acked())
            time.sleep(3)
        finally:
            postgres_server.start()
        producer.expect_acks(at_outage + 2000, 90, f"no progress after the database came back ({at_outage} acked)")
        summary = producer.stop(check=False)
    finally:
        producer.kill()
    assert summary["rc"] == 0, f"producer: {summary}\n{producer.stderr_tail()}"
    received = consume_all(broker.bootstrap, "pg-outage", range(partitions), settle=2.0)
    check = check_acked_ids(id_records(received), producer.acked(), range(partitions))
    assert not check.problems, f"{check}\n  " + "\n  ".join(check.problems)
