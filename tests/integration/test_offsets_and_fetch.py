"""ListOffsets (earliest, latest, by timestamp) and Fetch long-polling, seen by real clients."""

from __future__ import annotations

import datetime
import threading
import time
from typing import Any

import pytest
from confluent_kafka import OFFSET_END, Producer, TopicPartition
from confluent_kafka.admin import OffsetSpec
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.fetch.v12.response import FetchResponse
from kio.static.primitive import i8, i32, i64

from tests.support.broker import BrokerProcess
from tests.support.kafka_clients import admin_client, confluent_consumer, create_diskless_topic
from tests.support.wire import WireClient


def _produce_with_timestamps(
    bootstrap: str, topic: str, partition: int, timestamps: list[int], *, one_batch_each: bool
) -> list[int]:
    """Produce one record per timestamp; return their offsets."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "linger.ms": 0 if one_batch_each else 50,
            "enable.idempotence": True,
        }
    )
    offsets: list[int] = []

    def on_delivery(err: Any, msg: Any) -> None:
        assert err is None, err
        offsets.append(msg.offset())

    for i, ts in enumerate(timestamps):
        producer.produce(
            topic, value=f"ts-{i}".encode(), partition=partition, timestamp=ts, on_delivery=on_delivery
        )
        if one_batch_each:
            assert producer.flush(30) == 0
    assert producer.flush(30) == 0
    return offsets


@pytest.mark.parametrize("one_batch_each", [True, False], ids=["batch-per-record", "one-batch"])
def test_list_offsets(broker: BrokerProcess, topic_name: str, one_batch_each: bool) -> None:
    """Watermarks and offsets_for_times follow Kafka: first offset with timestamp >= target."""
    create_diskless_topic(broker.bootstrap, topic_name, partitions=2)
    base = int(time.time() * 1000) - 1_000_000
    n = 20 if one_batch_each else 100
    timestamps = [base + 10 * i for i in range(n)]
    offsets = _produce_with_timestamps(
        broker.bootstrap, topic_name, 0, timestamps, one_batch_each=one_batch_each
    )
    assert sorted(offsets) == list(range(n))

    consumer = confluent_consumer(broker.bootstrap)
    try:
        assert consumer.get_watermark_offsets(TopicPartition(topic_name, 0), timeout=10, cached=False) == (
            0,
            n,
        )
        assert consumer.get_watermark_offsets(TopicPartition(topic_name, 1), timeout=10, cached=False) == (
            0,
            0,
        )
        queries = {
            base - 5_000: 0,  # before everything: the first record
            base: 0,
            base + 10 * 7: 7,  # exact match
            base + 10 * 7 + 3: 8,  # between two records: the next one
            base + 10 * (n - 1): n - 1,
            base + 10 * n + 1_000: -1,  # after everything: no offset (-1, Kafka's "none")
        }
        for ts, expected in queries.items():
            (tp,) = consumer.offsets_for_times([TopicPartition(topic_name, 0, ts)], timeout=10)
            assert tp.error is None, tp.error
            assert tp.offset == expected, (
                f"offsets_for_times({ts - base:+d} ms from the first record) = {tp.offset}"
            )
        (empty,) = consumer.offsets_for_times([TopicPartition(topic_name, 1, base)], timeout=10)
        assert empty.offset == -1, f"timestamp lookup in an empty partition gave {empty.offset}"
    finally:
        consumer.close()

    admin = admin_client(broker.bootstrap)
    tp = TopicPartition(topic_name, 0)
    for spec, expected in ((OffsetSpec.earliest(), 0), (OffsetSpec.latest(), n)):
        result = admin.list_offsets({tp: spec}, request_timeout=15)[tp].result(15)
        assert result.offset == expected, f"{spec}: {result.offset}"


def test_list_offsets_max_timestamp(broker: BrokerProcess, topic_name: str) -> None:
    """ListOffsets v7+ timestamp -3: the record with the largest timestamp (not the last one)."""
    create_diskless_topic(broker.bootstrap, topic_name, partitions=1)
    base = int(time.time() * 1000) - 1_000_000
    timestamps = [base + 10, base + 50, base + 20, base + 30]
    _produce_with_timestamps(broker.bootstrap, topic_name, 0, timestamps, one_batch_each=True)
    admin = admin_client(broker.bootstrap)
    tp = TopicPartition(topic_name, 0)
    result = admin.list_offsets({tp: OffsetSpec.max_timestamp()}, request_timeout=15)[tp].result(15)
    assert (result.offset, result.timestamp) == (1, base + 50)


def test_consumer_waiting_at_the_end_receives_later_record(broker: BrokerProcess, topic_name: str) -> None:
    """A consumer parked at the log end gets a record produced after it started waiting."""
    create_diskless_topic(broker.bootstrap, topic_name, partitions=1)
    consumer = confluent_consumer(broker.bootstrap, **{"fetch.wait.max.ms": 5000})
    got: list[bytes] = []
    try:
        consumer.assign([TopicPartition(topic_name, 0, OFFSET_END)])
        # Let the consumer resolve the end offset and issue its first (waiting) fetch.
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            assert msg is None or msg.error(), f"unexpected record before producing: {msg.value()!r}"
        producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
        producer.produce(topic_name, value=b"late-record", partition=0)
        assert producer.flush(30) == 0
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not got:
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                got.append(msg.value())
    finally:
        consumer.close()
    assert got == [b"late-record"]


def test_fetch_long_poll_wakes_when_data_arrives(broker: BrokerProcess, topic_name: str) -> None:
    """A raw Fetch at the high watermark with max_wait 20 s answers with the record produced
    ~1 s later, long before max_wait (it was woken, not timed out)."""
    create_diskless_topic(broker.bootstrap, topic_name, partitions=1)

    def produce_later() -> None:
        time.sleep(1.0)
        producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
        producer.produce(topic_name, value=b"wake-up", partition=0)
        producer.flush(30)

    fetch = FetchRequest(
        max_wait=datetime.timedelta(seconds=20),
        min_bytes=i32(1),
        isolation_level=i8(0),
        topics=(
            FetchTopic(
                topic=topic_name,
                partitions=(
                    FetchPartition(partition=i32(0), fetch_offset=i64(0), partition_max_bytes=i32(1 << 20)),
                ),
            ),
        ),
        forgotten_topics_data=(),
    )
    thread = threading.Thread(target=produce_later)
    with WireClient(broker.port, timeout=60) as client:
        start = time.monotonic()
        thread.start()
        response = client.request(fetch, FetchResponse)
        elapsed = time.monotonic() - start
    thread.join(30)
    (part,) = [p for t in response.responses for p in t.partitions]
    assert int(part.error_code) == 0, part
    assert part.records and b"wake-up" in bytes(part.records), f"fetch returned no record: {part}"
    assert int(part.high_watermark) == 1
    assert elapsed < 15, f"fetch answered after {elapsed:.1f}s: it waited out max_wait instead of waking up"
