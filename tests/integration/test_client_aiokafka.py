"""aiokafka 0.14 (non-flexible protocol versions throughout) round trip, one codec per test."""

from __future__ import annotations

import asyncio
import time

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from tests.support.broker import BrokerProcess
from tests.support.kafka_clients import create_diskless_topic
from tests.support.workload import Rec, check_records, make_workload

CODECS = ["gzip", "snappy", "lz4", "zstd"]
RECORDS_PER_CODEC = 25_000
PARTITIONS = 4


@pytest.mark.timeout(240)
@pytest.mark.parametrize("codec", CODECS)
async def test_aiokafka_round_trip(broker: BrokerProcess, topic_name: str, codec: str) -> None:
    """Idempotent aiokafka producer, aiokafka consumer with manual assignment."""
    create_diskless_topic(broker.bootstrap, topic_name, partitions=PARTITIONS)
    base_ts = int(time.time() * 1000) - 600_000
    sent = make_workload(RECORDS_PER_CODEC, PARTITIONS, f"aiokafka-{codec}", seed=33, base_timestamp=base_ts)

    producer = AIOKafkaProducer(
        bootstrap_servers=broker.bootstrap,
        compression_type=codec,
        acks="all",
        enable_idempotence=True,
        linger_ms=20,
        max_batch_size=256 * 1024,
        request_timeout_ms=60_000,
    )
    await producer.start()
    try:
        futures = []
        for s in sent:
            fut = await producer.send(
                topic_name,
                value=s.value,
                key=s.key,
                partition=s.partition,
                timestamp_ms=s.timestamp,
                headers=list(s.headers),
            )
            futures.append(fut)
        results = await asyncio.wait_for(asyncio.gather(*futures, return_exceptions=True), timeout=120)
    finally:
        await producer.stop()
    failed = [r for r in results if isinstance(r, BaseException)]
    assert not failed, f"{len(failed)} sends failed, e.g. {failed[:3]}"

    tps = [TopicPartition(topic_name, p) for p in range(PARTITIONS)]
    consumer = AIOKafkaConsumer(
        bootstrap_servers=broker.bootstrap,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    await consumer.start()
    received: list[Rec] = []
    try:
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        deadline = time.monotonic() + 120
        settle_until: float | None = None
        while time.monotonic() < deadline:
            batch = await consumer.getmany(timeout_ms=500, max_records=5000)
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
        await consumer.stop()
    check_records(received, sent)
