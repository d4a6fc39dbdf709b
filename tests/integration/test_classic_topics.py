"""Classic topics (Kafka's on-disk log format) end to end, with real clients and real brokers.

Most tests share one broker (module scope: starting one per test would eat the time budget) with
``log.retention.check.interval.ms=500`` so retention shows within seconds; the crash tests get
brokers of their own because they SIGKILL them. Besides what clients see, the tests read the
partition directories the broker wrote: segment files named by base offset, RecordBatch v2
back to back, the codec the producer chose kept as it is.

The helpers at the top (topic creation, segment parsing, raw requests) are also used by
``test_jbod.py``; the acknowledging producer process is tests/support/acked_producer.py.
"""

from __future__ import annotations

import datetime
import json
import os
import shutil
import struct
import subprocess
import sys
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, TopicPartition
from kio.static.primitive import i8, i16, i32, i64

from tests.support.acked_producer import AckedProducer, check_acked, consume_all, watermarks
from tests.support.broker import BrokerProcess
from tests.support.kafka_clients import (
    admin_client,
    confluent_consume,
    confluent_consumer,
    confluent_produce,
    create_diskless_topic,
    wait_for_topic,
)
from tests.support.record_batches import build_record_batch
from tests.support.wire import WireClient, metadata_v12, produce_request_v9
from tests.support.workload import Rec, Sent, check_records, make_workload

KCAT = shutil.which("kcat") or "/usr/bin/kcat"
CODEC_IDS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
KAFKA_STORAGE_ERROR = 56
OFFSET_OUT_OF_RANGE = 1
SEGMENT_BYTES = 64 * 1024
RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
BATCH_HEADER_SIZE = 61  # RecordBatch v2: baseOffset .. recordCount


# ============================================================================ shared helpers


def create_classic_topic(
    bootstrap: str, name: str, partitions: int, config: Mapping[str, str] | None = None
) -> None:
    """CreateTopics without diskless.enable (a classic topic, the default kind), then wait for metadata."""
    from confluent_kafka.admin import NewTopic

    admin = admin_client(bootstrap)
    futures = admin.create_topics(
        [NewTopic(name, num_partitions=partitions, replication_factor=1, config=dict(config or {}))],
        operation_timeout=30,
        request_timeout=30,
    )
    futures[name].result(30)
    wait_for_topic(admin, name, partitions)


def partition_dirs(log_dirs: Iterable[Path], topic: str) -> dict[int, Path]:
    """Where each partition of ``topic`` lives: ``<log dir>/<topic>-<partition>`` (Kafka's layout)."""
    found: dict[int, Path] = {}
    prefix = f"{topic}-"
    for log_dir in log_dirs:
        if not log_dir.is_dir():
            continue
        for child in log_dir.iterdir():
            suffix = child.name[len(prefix) :]
            if child.is_dir() and child.name.startswith(prefix) and suffix.isdigit():
                found[int(suffix)] = child
    return found


def segment_files(partition_dir: Path) -> list[Path]:
    """The partition's ``.log`` files, oldest first (names are 20-digit base offsets)."""
    return sorted(partition_dir.glob("*.log"))


@dataclass(frozen=True, slots=True)
class DiskBatch:
    """One RecordBatch as stored in a segment file."""

    position: int
    base_offset: int
    size: int
    codec: int
    records: int

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.records


def read_segment(path: Path) -> list[DiskBatch]:
    """Parse a segment as Kafka stores it: batches back to back, each with its absolute base offset.

    Fails on anything that is not a well-formed RecordBatch v2, so a test learns the format is Kafka's.
    """
    data = path.read_bytes()
    batches: list[DiskBatch] = []
    pos = 0
    while pos < len(data):
        assert pos + BATCH_HEADER_SIZE <= len(data), f"{path}: truncated batch header at {pos} of {len(data)}"
        base_offset, batch_length = struct.unpack_from(">qi", data, pos)
        magic = data[pos + 16]
        size = 12 + batch_length
        assert magic == 2 and pos + size <= len(data), (
            f"{path}: not a RecordBatch v2 at {pos} (magic {magic})"
        )
        (attributes,) = struct.unpack_from(">h", data, pos + 21)
        (count,) = struct.unpack_from(">i", data, pos + 57)
        batches.append(DiskBatch(pos, base_offset, size, attributes & 0x7, count))
        pos += size
    name_offset = int(path.stem)
    assert not batches or batches[0].base_offset >= name_offset, f"{path}: first batch below the file's base"
    return batches


def disk_batches(partition_dir: Path) -> list[DiskBatch]:
    return [b for seg in segment_files(partition_dir) for b in read_segment(seg)]


def read_offset_checkpoint(path: Path) -> dict[tuple[str, int], int]:
    """Kafka's offset checkpoint file: version, count, then ``topic partition offset`` lines."""
    if not path.exists():
        return {}
    lines = path.read_text().splitlines()
    out = {}
    for line in lines[2:]:
        topic, partition, offset = line.rsplit(" ", 2)
        out[(topic, int(partition))] = int(offset)
    return out


# ---------------------------------------------------------------------------------- raw wire


def wire_produce(
    port: int, topic: str, partition: int, records: Sequence[tuple[bytes | None, bytes | None]], acks: int = -1
) -> tuple[int, int]:
    """One uncompressed batch in one Produce v9 (acks=all unless said); returns (error code, base offset)."""
    from kio.schema.produce.v9 import response as resp

    with WireClient(port) as client:
        answer = client.request(
            produce_request_v9(topic, partition, build_record_batch(records), acks), resp.ProduceResponse
        )
    (part,) = answer.responses[0].partition_responses
    return int(part.error_code), int(part.base_offset)


def wire_fetch(port: int, topic: str, partition: int, offset: int) -> tuple[int, int, int]:
    """Fetch v12 at ``offset``; returns (error code, high watermark, log start offset)."""
    from kio.schema.fetch.v12 import request as req
    from kio.schema.fetch.v12 import response as resp

    with WireClient(port) as client:
        answer = client.request(
            req.FetchRequest(
                max_wait=datetime.timedelta(milliseconds=100),
                min_bytes=i32(1),
                isolation_level=i8(0),
                topics=(
                    req.FetchTopic(
                        topic=topic,
                        partitions=(
                            req.FetchPartition(
                                partition=i32(partition),
                                fetch_offset=i64(offset),
                                partition_max_bytes=i32(1 << 20),
                            ),
                        ),
                    ),
                ),
                forgotten_topics_data=(),
                rack_id="",
            ),
            resp.FetchResponse,
        )
    (part,) = answer.responses[0].partitions
    return int(part.error_code), int(part.high_watermark), int(part.log_start_offset)


def wire_list_offset(port: int, topic: str, partition: int, timestamp: int) -> tuple[int, int]:
    """ListOffsets v7 (-1 latest, -2 earliest); returns (error code, offset)."""
    from kio.schema.list_offsets.v7 import request as req
    from kio.schema.list_offsets.v7 import response as resp

    with WireClient(port) as client:
        answer = client.request(
            req.ListOffsetsRequest(
                replica_id=i32(-1),
                isolation_level=i8(0),
                topics=(
                    req.ListOffsetsTopic(
                        name=topic,
                        partitions=(
                            req.ListOffsetsPartition(
                                partition_index=i32(partition), timestamp=i64(timestamp)
                            ),
                        ),
                    ),
                ),
            ),
            resp.ListOffsetsResponse,
        )
    (part,) = answer.topics[0].partitions
    return int(part.error_code), int(part.offset)


def wire_metadata_topic(port: int, topic: str) -> Any:
    """Metadata v12 for ``topic`` as the broker on ``port`` itself answers it."""
    (found,) = metadata_v12(port, [topic]).topics
    return found


def wire_offline_replicas(port: int, topic: str) -> dict[int, tuple[int, ...]]:
    """Metadata v12: each partition's OfflineReplicas (KIP-112), for partitions that have any."""
    found = wire_metadata_topic(port, topic)
    assert int(found.error_code) == 0, found
    return {
        int(p.partition_index): tuple(int(b) for b in p.offline_replicas)
        for p in found.partitions
        if p.offline_replicas
    }


def wait_until(what: str, check: Any, timeout: float, interval: float = 0.2) -> Any:
    """Poll ``check()`` until it returns something truthy, bounded by ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"{what}: not reached within {timeout}s (last: {last!r})")


def run_shoal(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """The ``shoal`` command as an operator runs it (a process, like the broker)."""
    env = dict(os.environ)
    src = str(Path(__file__).resolve().parents[2] / "src")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH", "")) if p)
    return subprocess.run(
        [sys.executable, "-m", "shoal", *args], capture_output=True, text=True, timeout=timeout, env=env
    )


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


# ============================================================================ crashes


@pytest.mark.timeout(300)
def test_sigkill_during_heavy_produce_keeps_every_acked_record_once(
    broker_factory: Any, topic: str, tmp_path: Path
) -> None:
    """An idempotent acks=all producer in its own process writes as fast as it can while the broker is
    SIGKILLed twice; each restart recovers the log (no clean-shutdown marker), and afterwards every
    acknowledged record is there exactly once at gapless offsets."""
    broker = broker_factory("crash", overrides={"log.retention.check.interval.ms": 500})
    partitions = [0, 1, 2]
    create_classic_topic(broker.bootstrap, topic, len(partitions), {"segment.bytes": str(1024 * 1024)})
    producer = AckedProducer(tmp_path / "producer", broker.bootstrap, topic, partitions, max_seconds=150)
    acked_at_kills: list[int] = []
    try:
        producer.expect_acks(5_000, 60, "before the first kill")
        for _ in range(2):
            broker.kill()
            acked_at_kills.append(len(producer.acked()))
            assert not (broker.log_dir / ".kafka_cleanshutdown").exists(), (
                "a SIGKILLed broker left the clean marker"
            )
            time.sleep(0.3)
            broker.start()
            producer.expect_acks(
                acked_at_kills[-1] + 5_000,
                90,
                f"no progress after restart ({acked_at_kills[-1]} at the kill)",
            )
        summary = producer.stop()
    finally:
        producer.kill()
    received = consume_all(broker.bootstrap, topic, partitions)
    print(
        check_acked(received, producer.acked(), partitions),
        f"(kills at {acked_at_kills}); producer: {summary}",
    )


@pytest.mark.timeout(180)
def test_corrupt_segment_is_truncated_at_recovery(broker_factory: Any, topic: str) -> None:
    """Bytes flipped in the middle of a batch (not the last one) of a log whose broker was SIGKILLed:
    recovery finds the bad CRC, truncates the log there, and serves everything before it; new
    records continue at the truncation offset."""
    broker = broker_factory("corrupt")
    create_classic_topic(broker.bootstrap, topic, 1)
    batches, per_batch = 40, 25
    values = [
        f"corrupt|{i:08d}|".encode() + os.urandom(30).hex().encode() for i in range(batches * per_batch)
    ]
    for b in range(batches):
        chunk = values[b * per_batch : (b + 1) * per_batch]
        error, base = wire_produce(broker.port, topic, 0, [(f"k{b}".encode(), v) for v in chunk])
        assert (error, base) == (0, b * per_batch)
    broker.kill()  # no clean-shutdown marker: recovery runs at the next start

    (d,) = partition_dirs([broker.log_dir], topic).values()
    (segment,) = segment_files(d)
    on_disk = read_segment(segment)
    assert [b.base_offset for b in on_disk] == [b * per_batch for b in range(batches)]
    # Recovery re-checks from the recovery point on (below it data was fsynced and is trusted, as in
    # Kafka): corrupt a batch above the checkpointed recovery point.
    recovery_point = read_offset_checkpoint(broker.log_dir / RECOVERY_POINT_CHECKPOINT).get((topic, 0), 0)
    candidates = [
        i for i, b in enumerate(on_disk[:-1]) if b.base_offset >= recovery_point and i >= batches // 2
    ]
    assert candidates, f"recovery point {recovery_point} is past every batch; cannot place the corruption"
    victim = on_disk[candidates[0]]
    with open(segment, "r+b") as f:
        middle = victim.position + BATCH_HEADER_SIZE + (victim.size - BATCH_HEADER_SIZE) // 2
        f.seek(middle)
        chunk = f.read(8)
        f.seek(middle)
        f.write(bytes(c ^ 0xFF for c in chunk))

    broker.start()
    cut = victim.base_offset
    assert wire_list_offset(broker.port, topic, 0, -1) == (0, cut), "log end offset after recovery"
    assert segment.stat().st_size == victim.position, "the segment was not truncated at the corrupt batch"
    assert f"at position {victim.position}; truncated" in broker.log_path.read_text(), (
        "recovery did not log the cut"
    )
    received = confluent_consume(broker.bootstrap, topic, [0], cut, settle=1.0)
    assert [r.offset for r in received] == list(range(cut))
    assert [r.value for r in received] == values[:cut]
    error, base = wire_produce(broker.port, topic, 0, [(b"after", b"recovery")])
    assert (error, base) == (0, cut), "the log does not continue at the truncation point"
