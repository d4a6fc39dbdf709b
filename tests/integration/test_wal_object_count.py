"""WAL segment objects on local storage: their format, and what decides how many there are.

KIP-1163's point is that the object count follows time (commit interval) and size (buffer
limit), not the number of produce requests or partitions: that is what keeps object-store
PUT costs flat.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from typing import Any

import pytest
from confluent_kafka import Producer

from shoal.diskless.append import EARLY_CLOSE_FRACTION
from tests.support.broker import BrokerProcess
from tests.support.kafka_clients import confluent_consume, confluent_produce, create_diskless_topic
from tests.support.record_batches import build_record_batch, split_wal_object
from tests.support.wire import WireClient, produce_request_v9
from tests.support.workload import check_records, make_workload


def test_wal_objects_start_with_version_zero(broker: BrokerProcess, topic_name: str) -> None:
    """Every object is `wal/<uuid>`, starts with byte 0 and is a sequence of RecordBatch v2."""
    create_diskless_topic(broker.bootstrap, topic_name, partitions=4)
    sent = make_workload(5_000, 4, "wal-format", seed=5)
    confluent_produce(broker.bootstrap, topic_name, sent, config={"compression.type": "lz4"})
    check_records(confluent_consume(broker.bootstrap, topic_name, range(4), len(sent)), sent)

    objects = broker.wal_objects()
    assert objects, (
        f"no WAL objects under {broker.objects_dir}/wal: {list(broker.objects_dir.rglob('*'))[:20]}"
    )
    total_batches = 0
    for path in objects:
        uuid.UUID(path.name)  # key is wal/<uuid>
        assert path.parent == broker.objects_dir / "wal", f"unexpected key layout: {path}"
        data = path.read_bytes()
        assert data[:1] == b"\x00", f"{path.name} starts with {data[:1]!r}, not version 0"
        try:
            total_batches += len(split_wal_object(data))
        except ValueError as exc:
            pytest.fail(f"{path.name} ({len(data)} bytes) is not version byte + RecordBatches: {exc}")
    assert total_batches >= 4, f"only {total_batches} batches for 4 partitions"


def _steady_producer(
    bootstrap: str, topic: str, partitions: int, duration: float, rate: int, out: dict[str, Any]
) -> None:
    """Produce ~`rate` records/s round-robin over partitions for `duration` s; report requests sent."""
    stats: list[dict[str, Any]] = []
    errors: list[str] = []
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": True,  # also caps in-flight requests at 5, as Kafka's Java client does
            "linger.ms": 0,
            "statistics.interval.ms": 500,
            "stats_cb": lambda s: stats.append(json.loads(s)),
        }
    )

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(str(err))

    sent = 0
    start = time.monotonic()
    value = b"x" * 100
    while (elapsed := time.monotonic() - start) < duration and sent < rate * duration * 2:
        target = int(elapsed * rate)
        while sent < target:
            try:
                producer.produce(
                    topic,
                    value=value,
                    key=str(sent).encode(),
                    partition=sent % partitions,
                    on_delivery=on_delivery,
                )
            except BufferError:
                producer.poll(0.01)
                continue
            sent += 1
        producer.poll(0.005)
    left = producer.flush(60)
    # Wait for a statistics callback that covers everything sent.
    deadline = time.monotonic() + 5
    seen = len(stats)
    while time.monotonic() < deadline and len(stats) < seen + 2:
        producer.poll(0.1)
    requests = 0
    if stats:
        for b in stats[-1].get("brokers", {}).values():
            requests += int(b.get("req", {}).get("Produce", 0))
    out.update(sent=sent, left=left, errors=errors, produce_requests=requests)


@pytest.mark.timeout(180)
def test_object_count_tracks_time_not_requests(broker_factory: Any, topic_name: str) -> None:
    """Six idempotent producers, eight partitions, ~6 s of steady produce with linger 0: many
    produce requests, but objects bounded by time: at most EARLY_CLOSE_FRACTION per commit interval
    (250 ms), however the segments close (``diskless.append``'s early close)."""
    interval_ms = 250
    broker = broker_factory(overrides={"diskless.append.commit.interval.ms": interval_ms})
    partitions, producers, duration = 8, 6, 6.0
    create_diskless_topic(broker.bootstrap, topic_name, partitions=partitions)
    before = len(broker.wal_objects())

    results: list[dict[str, Any]] = [{} for _ in range(producers)]
    threads = [
        threading.Thread(
            target=_steady_producer,
            args=(broker.bootstrap, topic_name, partitions, duration, 1500, results[i]),
        )
        for i in range(producers)
    ]
    start = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    elapsed = time.monotonic() - start
    assert not any(t.is_alive() for t in threads), "a producer thread hung"

    for i, r in enumerate(results):
        assert r.get("left") == 0 and not r.get("errors"), (
            f"producer {i}: {r.get('left')} undelivered, {r.get('errors', [])[:3]}"
        )
    total_sent = sum(r["sent"] for r in results)
    requests = sum(r["produce_requests"] for r in results)
    objects = len(broker.wal_objects()) - before
    bound = EARLY_CLOSE_FRACTION * elapsed / (interval_ms / 1000) + 5
    summary = f"{objects} objects, {requests} produce requests, {total_sent} records in {elapsed:.1f}s"
    print(summary)
    assert objects >= 1, summary
    assert objects <= bound, f"too many objects for the elapsed time (bound {bound:.0f}): {summary}"
    assert requests >= 3 * objects, f"object count does not look independent of request count: {summary}"

    got = confluent_consume(broker.bootstrap, topic_name, range(partitions), total_sent, timeout=120)
    assert len(got) == total_sent, (
        f"{len(got)} records back of {total_sent} (idempotent producers: no duplicates)"
    )


def _object_sizes_for_workload(broker: BrokerProcess, topic: str, n: int) -> tuple[list[bytes], float]:
    create_diskless_topic(broker.bootstrap, topic, partitions=8)
    sent = make_workload(n, 8, "wal-size", seed=9)
    start = time.monotonic()
    confluent_produce(
        broker.bootstrap,
        topic,
        sent,
        config={"compression.type": "none", "batch.size": 32768, "linger.ms": 5},
    )
    elapsed = time.monotonic() - start
    check_records(confluent_consume(broker.bootstrap, topic, range(8), len(sent)), sent)
    return [p.read_bytes() for p in broker.wal_objects()], elapsed


@pytest.mark.timeout(240)
def test_buffer_max_bytes_closes_objects_early(broker_factory: Any) -> None:
    """Same records, same 1 s commit interval: a 32 KiB buffer limit makes many more objects,
    each at most the limit plus the one batch that crossed it."""
    limit = 32 * 1024
    n = 16_000  # ~2.5 MB uncompressed
    big = broker_factory("big-buffer", overrides={"diskless.append.commit.interval.ms": 1000})
    big_objects, big_elapsed = _object_sizes_for_workload(big, f"big-{uuid.uuid4().hex[:6]}", n)
    big.stop()

    small = broker_factory(
        "small-buffer",
        overrides={"diskless.append.commit.interval.ms": 1000, "diskless.append.buffer.max.bytes": limit},
    )
    small_objects, small_elapsed = _object_sizes_for_workload(small, f"small-{uuid.uuid4().hex[:6]}", n)

    summary = (
        f"default buffer: {len(big_objects)} objects in {big_elapsed:.1f}s; "
        f"{limit} B buffer: {len(small_objects)} objects ({sum(map(len, small_objects))} B) in {small_elapsed:.1f}s"
    )
    print(summary)
    assert len(small_objects) > len(big_objects), summary
    assert len(small_objects) > small_elapsed / 1.0 + 5, f"object count explained by time alone: {summary}"
    for data in small_objects:
        batches = split_wal_object(data)
        largest = max(len(b) for b in batches)
        assert len(data) <= 1 + limit + largest, (
            f"object of {len(data)} B with {len(batches)} batches (largest {largest}) exceeds "
            f"buffer.max.bytes {limit} + one batch; {summary}"
        )


def test_produce_requests_a_client_sent_ahead_join_the_open_segment(broker: BrokerProcess, topic_name: str) -> None:
    """A producer with more than five requests in flight (librdkafka's default with idempotence
    off allows a million): the broker reads the ones already sent into the open WAL segment,
    rather than five per segment. 30 pipelined requests on one connection took 6 objects then."""
    from kio.schema.produce.v9 import response as resp

    create_diskless_topic(broker.bootstrap, topic_name, partitions=1)
    requests = 30
    with WireClient(broker.port) as client:
        answers = client.requests(
            [produce_request_v9(topic_name, 0, build_record_batch([(None, f"r{i}".encode())])) for i in range(requests)],
            resp.ProduceResponse,
        )
    offsets = []
    for answer in answers:
        (part,) = answer.responses[0].partition_responses
        assert int(part.error_code) == 0, part
        offsets.append(int(part.base_offset))
    assert offsets == list(range(requests))
    objects = broker.wal_objects()
    # All in one segment when they arrive together; a few if the socket splits them.
    assert 1 <= len(objects) <= 3, f"{len(objects)} WAL objects for {requests} pipelined requests"
