"""Classic topics (Kafka's on-disk log format) end to end, with real clients and real brokers.

Most tests share one broker (module scope: starting one per test would eat the time budget) with
``log.retention.check.interval.ms=500`` so retention shows within seconds; the crash tests
(test_classic_recovery.py) get brokers of their own. Besides what clients see, the tests read the
partition directories the broker wrote: segment files named by base offset, RecordBatch v2
back to back, the codec the producer chose kept as it is.

Topic creation and segment parsing are in tests/support/classic_logs.py, raw requests in
tests/support/wire_requests.py; the acknowledging producer process is tests/support/acked_producer.py.
"""

from __future__ import annotations

import datetime
import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, TopicPartition
from kio.static.primitive import i16, i32

from tests.support.acked_producer import watermarks
from tests.support.broker import BrokerProcess, wait_until
from tests.support.classic_logs import (
    create_classic_topic,
    disk_batches,
    partition_dirs,
    read_segment,
    segment_files,
)
from tests.support.kafka_clients import (
    admin_client,
    confluent_consume,
    confluent_consumer,
    confluent_produce,
    create_diskless_topic,
)
from tests.support.record_batches import build_record_batch
from tests.support.wire import WireClient
from tests.support.wire_requests import wire_fetch
from tests.support.workload import Rec, Sent, check_records, make_workload

KCAT = shutil.which("kcat") or "/usr/bin/kcat"
CODEC_IDS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
OFFSET_OUT_OF_RANGE = 1
SEGMENT_BYTES = 64 * 1024


# ============================================================================ shared broker


@pytest.fixture(scope="module")
def classic_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One broker for the round trips, rolls, retention and DeleteRecords (retention checked every 500 ms)."""
    broker = BrokerProcess(
        tmp_path_factory.mktemp("classic") / "broker",
        overrides={"log.retention.check.interval.ms": 500},
    )
    broker.start()
    try:
        yield broker
    finally:
        died = broker.returncode is not None and not broker.stopped_on_purpose
        broker.close()
        if died:
            print(f"\nshared broker died (exit {broker.returncode})\n{broker.log_tail(120)}", file=sys.stderr)


@pytest.fixture
def shared(classic_broker: BrokerProcess, request: pytest.FixtureRequest) -> Iterator[BrokerProcess]:
    """The shared broker, checked alive before and after each test (its log tail shown on failure)."""
    assert classic_broker.is_running(), f"shared broker is down\n{classic_broker.log_tail()}"
    yield classic_broker
    failed = getattr(getattr(request.node, "rep_call", None), "failed", False)
    if failed or not classic_broker.is_running():
        print(f"\n{classic_broker!r}\n{classic_broker.log_tail(120)}", file=sys.stderr)
    assert classic_broker.is_running(), f"the broker died during the test (exit {classic_broker.returncode})"


@pytest.fixture
def topic(request: pytest.FixtureRequest) -> str:
    base = "".join(c if c.isalnum() else "-" for c in request.node.name)[:50].strip("-")
    return f"{base}-{uuid.uuid4().hex[:6]}"


def assert_on_disk(broker: BrokerProcess, topic: str, sent_count: int, codec: str, partitions: int) -> None:
    """The records are in classic segments of the broker's log dir, compressed with the client's codec."""
    dirs = partition_dirs([broker.log_dir], topic)
    assert sorted(dirs) == list(range(partitions)), f"partition dirs of {topic}: {sorted(dirs)}"
    batches = [b for d in dirs.values() for b in disk_batches(d)]
    assert sum(b.records for b in batches) == sent_count, "records on disk differ from what was acknowledged"
    codecs = {b.codec for b in batches}
    assert codecs == {CODEC_IDS[codec]}, f"batches on disk have codecs {codecs}, the client used {codec}"
    assert not (broker.objects_dir and any(broker.objects_dir.rglob("wal/*"))), (
        "a classic topic wrote WAL objects"
    )


# ============================================================================ round trips

RECORDS = 3_000
PARTS = 3


@pytest.mark.timeout(180)
@pytest.mark.parametrize("codec", ["none", "zstd"])
def test_confluent_round_trip(shared: BrokerProcess, topic: str, codec: str) -> None:
    """confluent-kafka (librdkafka 2.16): idempotent producer, then a consumer from the beginning."""
    create_classic_topic(shared.bootstrap, topic, PARTS)
    sent = make_workload(
        RECORDS, PARTS, f"confluent-{codec}", seed=11, base_timestamp=int(time.time() * 1000) - 60_000
    )
    confluent_produce(shared.bootstrap, topic, sent, config={"compression.type": codec})
    check_records(confluent_consume(shared.bootstrap, topic, range(PARTS), len(sent)), sent)
    assert_on_disk(shared, topic, len(sent), codec, PARTS)


@pytest.mark.timeout(180)
def test_kafka_python_round_trip(shared: BrokerProcess, topic: str) -> None:
    """kafka-python 3 (pure Python, idempotent by default), gzip."""
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KTopicPartition

    create_classic_topic(shared.bootstrap, topic, PARTS)
    sent = make_workload(
        RECORDS,
        PARTS,
        "kafka-python",
        seed=22,
        base_timestamp=int(time.time() * 1000) - 60_000,
        null_headers=False,
    )
    producer = KafkaProducer(
        bootstrap_servers=shared.bootstrap,
        compression_type="gzip",
        linger_ms=20,
        batch_size=128 * 1024,
        request_timeout_ms=60_000,
    )
    try:
        futures = [
            producer.send(
                topic,
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
    assert not failed and all(f.is_done for f in futures), f"sends failed: {failed[:3]}"

    tps = [KTopicPartition(topic, p) for p in range(PARTS)]
    consumer = KafkaConsumer(
        bootstrap_servers=shared.bootstrap,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    received: list[Rec] = []
    try:
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(received) < len(sent):
            for records in consumer.poll(timeout_ms=500, max_records=5000).values():
                received += [
                    Rec(
                        r.partition, r.offset, r.key, r.value, tuple(r.headers), r.timestamp_type, r.timestamp
                    )
                    for r in records
                ]
    finally:
        consumer.close()
    check_records(received, sent)
    assert_on_disk(shared, topic, len(sent), "gzip", PARTS)


@pytest.mark.timeout(180)
async def test_aiokafka_round_trip(shared: BrokerProcess, topic: str) -> None:
    """aiokafka 0.14 (older, non-flexible versions), lz4."""
    import asyncio

    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka import TopicPartition as ATopicPartition

    create_classic_topic(shared.bootstrap, topic, PARTS)
    sent = make_workload(RECORDS, PARTS, "aiokafka", seed=33, base_timestamp=int(time.time() * 1000) - 60_000)
    producer = AIOKafkaProducer(
        bootstrap_servers=shared.bootstrap,
        compression_type="lz4",
        acks="all",
        enable_idempotence=True,
        linger_ms=20,
        max_batch_size=128 * 1024,
    )
    await producer.start()
    try:
        futures = [
            await producer.send(
                topic,
                value=s.value,
                key=s.key,
                partition=s.partition,
                timestamp_ms=s.timestamp,
                headers=list(s.headers),
            )
            for s in sent
        ]
        results = await asyncio.wait_for(asyncio.gather(*futures, return_exceptions=True), timeout=120)
    finally:
        await producer.stop()
    failed = [r for r in results if isinstance(r, BaseException)]
    assert not failed, f"{len(failed)} sends failed, e.g. {failed[:3]}"

    tps = [ATopicPartition(topic, p) for p in range(PARTS)]
    consumer = AIOKafkaConsumer(
        bootstrap_servers=shared.bootstrap,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    await consumer.start()
    received: list[Rec] = []
    try:
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(received) < len(sent):
            for records in (await consumer.getmany(timeout_ms=500, max_records=5000)).values():
                received += [
                    Rec(
                        r.partition, r.offset, r.key, r.value, tuple(r.headers), r.timestamp_type, r.timestamp
                    )
                    for r in records
                ]
    finally:
        await consumer.stop()
    check_records(received, sent)
    assert_on_disk(shared, topic, len(sent), "lz4", PARTS)


@pytest.mark.timeout(180)
@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat not installed (apt-get install kcat)")
def test_kcat_round_trip(shared: BrokerProcess, topic: str) -> None:
    """kcat 1.7 (librdkafka 2.0): snappy, keys placed by its partitioner, read back per partition."""
    create_classic_topic(shared.bootstrap, topic, PARTS)
    lines, sent = [], []
    headers = (("tag", b"kcat"),)
    for i in range(RECORDS):
        key, value = f"key-{i % 997}".encode(), f"kcat|{i:08d}|".encode() + os.urandom(20).hex().encode()
        lines.append(key + b":" + value)
        sent.append(Sent(i, -1, key, value, headers, None))
    t0 = int(time.time() * 1000)
    produce = subprocess.run(
        [
            KCAT,
            "-P",
            "-b",
            shared.bootstrap,
            "-t",
            topic,
            "-K:",
            "-H",
            "tag=kcat",
            "-z",
            "snappy",
            "-X",
            "enable.idempotence=true",
            "-X",
            "acks=all",
            "-X",
            "linger.ms=20",
        ],
        input=b"\n".join(lines) + b"\n",
        capture_output=True,
        timeout=120,
    )
    assert produce.returncode == 0, f"kcat -P exited {produce.returncode}: {produce.stderr[-2000:]!r}"
    t1 = int(time.time() * 1000)
    received: list[Rec] = []
    for p in range(PARTS):
        out = subprocess.run(
            [
                KCAT,
                "-C",
                "-b",
                shared.bootstrap,
                "-t",
                topic,
                "-p",
                str(p),
                "-o",
                "beginning",
                "-e",
                "-J",
                "-q",
            ],
            capture_output=True,
            timeout=120,
        )
        assert out.returncode == 0, f"kcat -C p{p} exited {out.returncode}: {out.stderr[-2000:]!r}"
        for line in out.stdout.splitlines():
            if not line.strip():
                continue
            m = json.loads(line)
            raw = m.get("headers") or []
            pairs = (
                list(raw.items()) if isinstance(raw, dict) else list(zip(raw[::2], raw[1::2], strict=True))
            )
            hdrs = tuple((k, None if v is None else str(v).encode()) for k, v in pairs)
            received.append(
                Rec(
                    m["partition"],
                    m["offset"],
                    str(m["key"]).encode(),
                    str(m["payload"]).encode(),
                    hdrs,
                    {"create": 0, "logappend": 1}.get(m.get("tstype"), -1),
                    m["ts"],
                )
            )
    # kcat's records carry no seq header: number them by value.
    by_value = {s.value: s.seq for s in sent}
    renumbered = [
        Rec(
            r.partition,
            r.offset,
            r.key,
            r.value,
            (("seq", str(by_value.get(r.value, -1)).encode()), *r.headers),
            r.timestamp_type,
            r.timestamp,
        )
        for r in received
    ]
    expected = [
        Sent(s.seq, s.partition, s.key, s.value, (("seq", str(s.seq).encode()), *s.headers), None)
        for s in sent
    ]
    check_records(renumbered, expected, timestamp_range=(t0 - 1000, t1 + 1000))
    assert_on_disk(shared, topic, len(sent), "snappy", PARTS)


# ============================================================================ segments and retention


@pytest.mark.timeout(180)
def test_consumer_reads_across_many_segment_rolls(shared: BrokerProcess, topic: str) -> None:
    """64 KiB segments (``internal.segment.bytes``: Kafka 4.x keeps ``segment.bytes`` at 1 MiB or
    more): the log rolls dozens of times; a consumer reads every record across the boundaries, and
    each segment file starts at its base offset with the batches that follow."""
    create_classic_topic(shared.bootstrap, topic, 2, {"internal.segment.bytes": str(SEGMENT_BYTES)})
    sent = make_workload(8_000, 2, "rolls", seed=5, base_timestamp=int(time.time() * 1000) - 60_000)
    sent = [
        Sent(s.seq, s.partition, s.key, (s.value or b"") + b"x" * 300, s.headers, s.timestamp) for s in sent
    ]
    # Batches above segment.bytes are refused (RECORD_LIST_TOO_LARGE), as Kafka does: keep them small.
    confluent_produce(shared.bootstrap, topic, sent, config={"batch.size": 16384, "compression.type": "none"})
    # A small fetch size too, so reads stop at and resume from segment ends.
    received = confluent_consume(
        shared.bootstrap, topic, range(2), len(sent), config={"max.partition.fetch.bytes": 20_000}
    )
    check_records(received, sent)
    for p, d in partition_dirs([shared.log_dir], topic).items():
        segments = segment_files(d)
        assert len(segments) >= 15, f"p{p}: only {len(segments)} segments for ~1.4 MB at 64 KiB each"
        expected_next = 0
        for seg in segments:
            batches = read_segment(seg)
            assert batches, f"{seg} is empty"
            assert int(seg.stem) == batches[0].base_offset == expected_next, (
                f"{seg}: does not continue the log"
            )
            assert seg.stat().st_size <= SEGMENT_BYTES, f"{seg}: {seg.stat().st_size} bytes > segment.bytes"
            expected_next = batches[-1].next_offset
            assert (d / f"{seg.stem}.index").exists() and (d / f"{seg.stem}.timeindex").exists()


@pytest.mark.timeout(180)
def test_retention_deletes_old_segments(shared: BrokerProcess, topic: str) -> None:
    """retention.bytes and retention.ms (checked every 500 ms): old segment files go, the log start
    offset moves up, and what is left is read from the new log start to the end."""
    by_bytes, by_time = f"{topic}-bytes", f"{topic}-ms"
    create_classic_topic(
        shared.bootstrap,
        by_bytes,
        1,
        {"internal.segment.bytes": str(SEGMENT_BYTES), "retention.bytes": "200000"},
    )
    create_classic_topic(
        shared.bootstrap, by_time, 1, {"internal.segment.bytes": str(SEGMENT_BYTES), "retention.ms": "60000"}
    )
    now = int(time.time() * 1000)
    recent = make_workload(4_000, 1, "ret-bytes", seed=7, base_timestamp=now - 10_000)
    recent = [Sent(s.seq, 0, s.key, (s.value or b"") + b"r" * 200, s.headers, s.timestamp) for s in recent]
    old = make_workload(2_000, 1, "ret-ms", seed=8, base_timestamp=now - 3_600_000)  # an hour old
    old = [Sent(s.seq, 0, s.key, (s.value or b"") + b"o" * 200, s.headers, s.timestamp) for s in old]
    producer_config = {"batch.size": 16384, "compression.type": "none"}
    confluent_produce(shared.bootstrap, by_bytes, recent, config=producer_config)
    confluent_produce(shared.bootstrap, by_time, old, config=producer_config)

    for name, sent in ((by_bytes, recent), (by_time, old)):
        (d,) = partition_dirs([shared.log_dir], name).values()
        first_segment = d / f"{0:020d}.log"

        def moved(
            name: str = name, first_segment: Path = first_segment, d: Path = d
        ) -> tuple[int, int] | None:
            low, high = watermarks(shared.bootstrap, name, [0])[0]
            if low == 0 or first_segment.exists():
                return None
            # Retention may have run while the produce was still rolling segments: wait for the
            # check that follows it (every 500 ms) to bring the rolled size under the limit.
            if (
                name == by_bytes
                and sum(f.stat().st_size for f in segment_files(d)[:-1] if f.exists()) > 200_000
            ):
                return None
            return low, high

        low, high = wait_until(f"{name}: log start offset moving and segment 0 deleted", moved, timeout=30)
        assert high == len(sent)
        remaining = segment_files(d)
        assert remaining and int(remaining[0].stem) == low, f"{name}: log start {low}, files {remaining}"
        if name == by_bytes:
            rolled = sum(s.stat().st_size for s in remaining[:-1])
            assert rolled <= 200_000, f"{name}: {rolled} bytes in rolled segments > retention.bytes"
        else:
            assert len(remaining) == 1, f"{name}: expired rolled segments kept: {remaining}"
        received = confluent_consume(shared.bootstrap, name, [0], high - low)
        check_records_from(received, sent, low)


def check_records_from(received: Sequence[Rec], sent: Sequence[Sent], start: int) -> None:
    """``check_records`` for a partition whose log starts at ``start``: the tail of ``sent``."""
    shifted = [
        Rec(r.partition, r.offset - start, r.key, r.value, r.headers, r.timestamp_type, r.timestamp)
        for r in received
    ]
    check_records(shifted, sent[start:])


@pytest.mark.timeout(120)
def test_delete_records_moves_log_start(shared: BrokerProcess, topic: str) -> None:
    """AdminClient.delete_records: the low watermark moves, segments wholly below go, reads below the
    new start are out of range, and a consumer from the beginning starts there."""
    from confluent_kafka.admin import AdminClient

    create_classic_topic(shared.bootstrap, topic, 2, {"internal.segment.bytes": str(SEGMENT_BYTES)})
    sent = make_workload(3_000, 2, "delrec", seed=9, base_timestamp=int(time.time() * 1000) - 60_000)
    sent = [
        Sent(s.seq, s.partition, s.key, (s.value or b"") + b"d" * 200, s.headers, s.timestamp) for s in sent
    ]
    confluent_produce(shared.bootstrap, topic, sent, config={"batch.size": 16384})
    admin: AdminClient = admin_client(shared.bootstrap)
    futures = admin.delete_records([TopicPartition(topic, 0, 1000)], request_timeout=30, operation_timeout=30)
    (future,) = futures.values()
    deleted = future.result(30)
    assert deleted.low_watermark == 1000, deleted

    assert watermarks(shared.bootstrap, topic, [0, 1]) == {0: (1000, 1500), 1: (0, 1500)}
    error, _, log_start = wire_fetch(shared.port, topic, 0, 10)
    assert error == OFFSET_OUT_OF_RANGE, f"fetch below the log start answered {error}"
    error, _, log_start = wire_fetch(shared.port, topic, 0, 1000)
    assert (error, log_start) == (0, 1000)
    segments = segment_files(partition_dirs([shared.log_dir], topic)[0])
    assert int(segments[0].stem) <= 1000, segments
    assert int(segments[0].stem) > 0, f"no segment below offset 1000 was deleted: {segments[:3]}"

    consumer = confluent_consumer(shared.bootstrap)
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        first = None
        deadline = time.monotonic() + 30
        while first is None and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                first = msg.offset()
    finally:
        consumer.close()
    assert first == 1000


@pytest.mark.timeout(120)
def test_one_producer_mixes_classic_and_diskless(shared: BrokerProcess, topic: str) -> None:
    """One Produce request naming a classic and a diskless partition is answered for both, and one
    client producing to both kinds at once gets everything back from each."""
    from kio.schema.produce.v9 import request as req
    from kio.schema.produce.v9 import response as resp

    classic, diskless = f"{topic}-classic", f"{topic}-diskless"
    create_classic_topic(shared.bootstrap, classic, 2)
    create_diskless_topic(shared.bootstrap, diskless, partitions=2)
    now = int(time.time() * 1000) - 60_000
    sent_c = make_workload(2_000, 2, "mix-c", seed=12, base_timestamp=now)
    sent_d = make_workload(2_000, 2, "mix-d", seed=13, base_timestamp=now, first_seq=10_000)
    from confluent_kafka import Producer

    producer = Producer(
        {
            "bootstrap.servers": shared.bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 50,
            "compression.type": "lz4",
        }
    )
    errors: list[str] = []
    for c, d in zip(sent_c, sent_d, strict=True):
        for name, s in ((classic, c), (diskless, d)):
            producer.produce(
                name,
                key=s.key,
                value=s.value,
                headers=list(s.headers),
                partition=s.partition,
                timestamp=s.timestamp or 0,
                on_delivery=lambda err, msg: errors.append(str(err)) if err else None,
            )
        producer.poll(0)
    assert producer.flush(60) == 0 and not errors, errors[:5]
    check_records(confluent_consume(shared.bootstrap, classic, range(2), len(sent_c)), sent_c)
    check_records(confluent_consume(shared.bootstrap, diskless, range(2), len(sent_d)), sent_d)

    batch = build_record_batch([(b"k", b"mixed")])
    with WireClient(shared.port) as client:
        answer = client.request(
            req.ProduceRequest(
                transactional_id=None,
                acks=i16(-1),
                timeout=datetime.timedelta(seconds=30),
                topic_data=tuple(
                    req.TopicProduceData(
                        name=name, partition_data=(req.PartitionProduceData(index=i32(1), records=batch),)
                    )
                    for name in (classic, diskless)
                ),
            ),
            resp.ProduceResponse,
        )
    answered = {
        t.name: (int(p.error_code), int(p.base_offset))
        for t in answer.responses
        for p in t.partition_responses
    }
    assert answered == {classic: (0, 1000), diskless: (0, 1000)}, answered
    assert partition_dirs([shared.log_dir], classic).keys() == {0, 1}
    assert not partition_dirs([shared.log_dir], diskless), "a diskless topic got a classic log"
