"""kafka-python 3.0 (pure Python, idempotent by default) round trip, one codec per test."""

from __future__ import annotations

import time

import kafka.codec
import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from tests.support.broker import BrokerProcess
from tests.support.kafka_clients import create_diskless_topic
from tests.support.workload import Rec, check_records, make_workload

CODECS = ["gzip", "snappy", "lz4", "zstd"]
RECORDS_PER_CODEC = 25_000
PARTITIONS = 4


@pytest.mark.timeout(240)
@pytest.mark.parametrize("codec", CODECS)
def test_kafka_python_round_trip(broker: BrokerProcess, topic_name: str, codec: str) -> None:
    """Produce with kafka-python's defaults (idempotence on, acks=all) and read back with its consumer."""
    if codec == "snappy" and not kafka.codec.has_snappy():
        pytest.fail(
            "kafka-python needs the python-snappy package for snappy (add python-snappy==0.7.3 to the test extra)"
        )
    create_diskless_topic(broker.bootstrap, topic_name, partitions=PARTITIONS)
    base_ts = int(time.time() * 1000) - 600_000
    # kafka-python accepts only bytes header values: no null headers for it.
    sent = make_workload(
        RECORDS_PER_CODEC,
        PARTITIONS,
        f"kafka-python-{codec}",
        seed=22,
        base_timestamp=base_ts,
        null_headers=False,
    )

    producer = KafkaProducer(
        bootstrap_servers=broker.bootstrap,
        compression_type=codec,
        linger_ms=20,
        batch_size=256 * 1024,
        request_timeout_ms=60_000,
    )
    try:
        assert producer.config["enable_idempotence"], "kafka-python 3 should default to idempotence"
        futures = [
            producer.send(
                topic_name,
                value=s.value,
                key=s.key,
                headers=list(s.headers),  # type: ignore[arg-type]
                partition=s.partition,
                timestamp_ms=s.timestamp,
            )
            for s in sent
        ]
        producer.flush(timeout=120)
    finally:
        producer.close(timeout=10)
    failed = [f.exception for f in futures if f.is_done and f.failed()]
    pending = sum(1 for f in futures if not f.is_done)
    assert not failed and not pending, f"{len(failed)} failed ({failed[:3]}), {pending} not done"

    tps = [TopicPartition(topic_name, p) for p in range(PARTITIONS)]
    consumer = KafkaConsumer(
        bootstrap_servers=broker.bootstrap,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    received: list[Rec] = []
    try:
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        deadline = time.monotonic() + 120
        settle_until: float | None = None
        while time.monotonic() < deadline:
            batch = consumer.poll(timeout_ms=500, max_records=5000)
            for records in batch.values():
                for r in records:
                    received.append(
                        Rec(
                            r.partition,
                            r.offset,
                            r.key,
                            r.value,
                            tuple(r.headers),
                            r.timestamp_type,
                            r.timestamp,
                        )
                    )
            if len(received) >= len(sent):
                if settle_until is None:
                    settle_until = time.monotonic() + 1.0
                elif time.monotonic() >= settle_until:
                    break
    finally:
        consumer.close()
    check_records(received, sent)
