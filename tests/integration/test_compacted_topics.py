"""Compacted topics (``cleanup.policy=compact``) end to end: real brokers, real clients.

A producer writes 100,000 updates over 1,000 keys, with tombstones for 100 of them, and one last
record after ``segment.ms`` (the active segment is never cleaned, so it holds only that); the cleaner
runs in the background (small segments, a low dirty ratio, a short backoff) and a consumer from
offset 0 then reads exactly the latest value of the 900 live keys plus the tombstones (before
``delete.retention.ms``), in offset order, from a log far smaller than what was written. A
transactional producer's aborted records disappear from the compacted log. A broker killed in
the middle of a cleaning pass (seen by its ``.cleaned``/``.swap`` files) restarts to a consistent,
compacted log.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import NewTopic

from tests.support.broker import BrokerProcess, free_port
from tests.support.kafka_clients import admin_client, confluent_consumer, wait_for_topic
from tests.support.metrics import metric, scrape

pytestmark = pytest.mark.slow

KEYS = 1000
UPDATES = 100_000
TOMBSTONED = 100
VALUE = b"x" * 80
CLEANER = {
    "log.cleaner.backoff.ms": "200",
    # Diskless: objects the cleaner emptied go soon, so the storage shrinks within the test.
    "diskless.object.delete.grace.ms": "0",
    "diskless.object.cleaner.interval.ms": "500",
}
METRICS_PORT = free_port()
COMPACTED = {
    "cleanup.policy": "compact",
    "internal.segment.bytes": str(256 * 1024),
    "min.cleanable.dirty.ratio": "0.01",
    "segment.ms": "1000",  # the last writes roll out of the active segment, which is never cleaned
}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    overrides = {**CLEANER, "metrics.http.port": METRICS_PORT}
    with BrokerProcess(tmp_path_factory.mktemp("compaction"), overrides=overrides) as b:
        yield b


def create(bootstrap: str, name: str, config: dict[str, str], partitions: int = 1, kind: str = "classic") -> None:
    admin = admin_client(bootstrap)
    if kind == "diskless":
        config = {**config, "diskless.enable": "true"}
    for future in admin.create_topics([NewTopic(name, partitions, 1, config=config)]).values():
        future.result(30)
    wait_for_topic(admin, name, partitions)


def produce_updates(bootstrap: str, topic: str, updates: int = UPDATES, **config: Any) -> dict[bytes, bytes | None]:
    """``updates`` records over KEYS keys (idempotent producer), then tombstones for TOMBSTONED keys;
    returns each key's latest value."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 20, "batch.size": 200_000, **config})
    latest: dict[bytes, bytes | None] = {}
    failures: list[Any] = []

    def report(err: Any, _msg: Any) -> None:
        if err is not None:
            failures.append(err)

    def send(key: bytes, value: bytes | None) -> None:
        while True:
            try:
                producer.produce(topic, value, key, on_delivery=report)
                break
            except BufferError:
                producer.poll(0.05)
        latest[key] = value

    for i in range(updates):
        send(b"key-%04d" % (i % KEYS), b"%d:" % i + VALUE)
        if i % 5000 == 0:
            producer.poll(0)
    for k in range(TOMBSTONED):
        send(b"key-%04d" % (k * 7), None)
    assert producer.flush(60) == 0
    time.sleep(1.2)  # segment.ms: the next record rolls a new active segment of its own
    send(b"end", b"end")
    assert producer.flush(60) == 0
    assert not failures, failures[:3]
    return latest


def read_from_start(bootstrap: str, topic: str, **config: Any) -> list[tuple[int, bytes | None, bytes | None]]:
    """Every record of partition 0 from offset 0 to the high watermark."""
    consumer = confluent_consumer(bootstrap, **{"enable.partition.eof": True, **config})
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        out: list[tuple[int, bytes | None, bytes | None]] = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    return out
                raise AssertionError(msg.error())
            out.append((msg.offset(), msg.key(), msg.value()))
        raise AssertionError(f"no end of partition within 60 s; {len(out)} records read")
    finally:
        consumer.close()


def stored_bytes(broker: BrokerProcess, topic: str, kind: str) -> int:
    """Bytes the partition takes: its segment files, or (diskless) every WAL object left."""
    if kind == "diskless":
        assert broker.objects_dir is not None
        return sum(p.stat().st_size for p in broker.objects_dir.rglob("*") if p.is_file())
    return sum(p.stat().st_size for p in (broker.log_dir / f"{topic}-0").glob("*.log"))


def wait_compacted(broker: BrokerProcess, topic: str, records: int, timeout: float = 120) -> list[Any]:
    """Read from the start until at most ``records`` remain (the cleaner caught up)."""
    deadline = time.monotonic() + timeout
    while True:
        got = read_from_start(broker.bootstrap, topic)
        if len(got) <= records or time.monotonic() > deadline:
            return got
        time.sleep(1)


def check_latest(got: list[tuple[int, bytes | None, bytes | None]], latest: dict[bytes, bytes | None]) -> None:
    offsets = [o for o, _, _ in got]
    assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)
    seen = {k: v for _, k, v in got}
    assert seen == latest
    assert len(got) == len(latest), "a key appears more than once after cleaning"


@pytest.mark.parametrize("kind", ["classic", "diskless"])
def test_compaction_keeps_the_latest_value_of_every_key(broker: BrokerProcess, kind: str) -> None:
    topic = f"compacted-{kind}"
    create(broker.bootstrap, topic, COMPACTED, kind=kind)
    latest = produce_updates(broker.bootstrap, topic)
    assert sum(v is None for v in latest.values()) == TOMBSTONED
    got = wait_compacted(broker, topic, len(latest))
    check_latest(got, latest)
    written = UPDATES * (len(VALUE) + 20)
    deadline = time.monotonic() + 30
    while stored_bytes(broker, topic, kind) >= written / 5 and time.monotonic() < deadline:
        time.sleep(0.5)  # diskless: emptied objects are deleted by the object cleaner's next round
    assert stored_bytes(broker, topic, kind) < written / 5
    samples = scrape(METRICS_PORT)
    assert metric(samples, "kafka_log_logcleaner_bytes_read_total") > written / 2
    assert 0 < metric(samples, "kafka_log_logcleaner_cleaner_recopy_percent") < 100
    assert metric(samples, "kafka_log_logcleaner_max_clean_time_secs") > 0
    assert metric(samples, "kafka_log_logcleanermanager_uncleanable_partitions_count") == 0
    assert any(n == "kafka_log_logcleanermanager_max_dirty_percent" for n, _, _ in samples)


@pytest.mark.parametrize("kind", ["classic", "diskless"])
def test_aborted_transactions_disappear_from_the_compacted_log(broker: BrokerProcess, kind: str) -> None:
    topic = f"compacted-txn-{kind}"
    create(broker.bootstrap, topic, {**COMPACTED, "delete.retention.ms": "0"}, kind=kind)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": f"compaction-txn-{kind}"})
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(200):
        producer.produce(topic, b"aborted-%d" % i, b"k-%d" % (i % 20))
    producer.flush(30)
    producer.abort_transaction(30)
    producer.begin_transaction()
    for i in range(200):
        producer.produce(topic, b"committed-%d" % i, b"k-%d" % (i % 20))
    producer.commit_transaction(30)
    filler = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5, "batch.size": 65536})
    for i in range(6000):  # roll segments past the transactions so they become cleanable
        filler.produce(topic, VALUE, b"filler-%d" % (i % 50))
    assert filler.flush(30) == 0
    deadline = time.monotonic() + 90
    while True:
        got = read_from_start(broker.bootstrap, topic, **{"isolation.level": "read_uncommitted"})
        aborted = [v for _, _, v in got if v is not None and v.startswith(b"aborted")]
        if not aborted or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert not aborted, f"{len(aborted)} aborted records still in the log"
    committed = {k: v for _, k, v in got if v is not None and v.startswith(b"committed")}
    assert committed == {b"k-%d" % k: b"committed-%d" % (180 + k) for k in range(20)}


def cleaner_files(b: BrokerProcess, topic: str, kind: str, before: set[str]) -> list[str]:
    """What a cleaning pass in progress leaves: ``.cleaned``/``.swap`` segment files (classic), or
    the new WAL object it uploads before swapping coordinates (diskless)."""
    if kind == "diskless":
        assert b.objects_dir is not None
        return [str(p) for p in b.objects_dir.rglob("*") if p.is_file() and str(p) not in before]
    return [n for n in os.listdir(b.log_dir / f"{topic}-0") if n.endswith((".cleaned", ".swap"))]


@pytest.mark.parametrize("kind", ["classic", "diskless"])
def test_sigkill_in_the_middle_of_cleaning_recovers_a_consistent_compacted_log(tmp_path: Path, kind: str) -> None:
    overrides = {**CLEANER, "log.cleaner.io.max.bytes.per.second": str(1024 * 1024)}
    with BrokerProcess(tmp_path / "b", overrides={**overrides, "log.cleaner.enable": "false"}) as b:
        topic = f"compacted-crash-{kind}"
        create(b.bootstrap, topic, COMPACTED, kind=kind)
        latest = produce_updates(b.bootstrap, topic, updates=40_000)
        b.stop()
        before = {str(p) for p in b.objects_dir.rglob("*")} if b.objects_dir else set()
        b.overrides["log.cleaner.enable"] = "true"
        b.start()
        deadline = time.monotonic() + 60
        seen: list[str] = []
        while time.monotonic() < deadline and not seen:
            seen = cleaner_files(b, topic, kind, before)
            time.sleep(0.005)
        assert seen, "the cleaner never started a pass"
        b.kill()
        b.overrides.pop("log.cleaner.io.max.bytes.per.second")
        b.start()
        got = wait_compacted(b, topic, len(latest))
        check_latest(got, latest)


def test_altering_the_policy_to_compact_starts_cleaning_and_describe_shows_it(broker: BrokerProcess) -> None:
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

    topic = "altered-to-compact"
    create(broker.bootstrap, topic, {"internal.segment.bytes": str(64 * 1024), "segment.ms": "1000"})
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5, "batch.size": 16384})
    for i in range(20_000):
        producer.produce(topic, b"%d" % i + VALUE, b"k-%d" % (i % 100))
        if i % 5000 == 0:
            producer.poll(0)
    assert producer.flush(30) == 0
    admin = admin_client(broker.bootstrap)
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("min.cleanable.dirty.ratio", "0.01", incremental_operation=AlterConfigOpType.SET),
    ])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(30)
    time.sleep(1.2)  # segment.ms: the next record rolls the updates out of the active segment
    producer.produce(topic, b"end", b"end")
    assert producer.flush(30) == 0
    got = wait_compacted(broker, topic, 101)
    assert {k: v for _, k, v in got} == {**{b"k-%d" % k: b"%d" % (19_900 + k) + VALUE for k in range(100)},
                                         b"end": b"end"}
    assert len(got) == 101
    described = subprocess.run(
        [str(Path(sys.executable).parent / "shoal"), "topics", "describe", "--bootstrap-server", broker.bootstrap,
         "--topic", topic], capture_output=True, text=True, timeout=60, check=True,
    ).stdout
    assert "cleanup.policy=compact" in described, described


def kafka_python_read(bootstrap: str, topic: str) -> list[tuple[int, bytes | None, bytes | None]]:
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KpTopicPartition

    tp = KpTopicPartition(topic, 0)
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                             auto_offset_reset="earliest")
    try:
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        end = consumer.end_offsets([tp])[tp]
        out: list[tuple[int, bytes | None, bytes | None]] = []
        deadline = time.monotonic() + 60
        while consumer.position(tp) < end and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                out += [(r.offset, r.key, r.value) for r in records]
        assert consumer.position(tp) >= end, f"kafka-python stuck at {consumer.position(tp)} of {end}"
        return out
    finally:
        consumer.close()


def aiokafka_read(bootstrap: str, topic: str) -> list[tuple[int, bytes | None, bytes | None]]:
    import asyncio

    from aiokafka import AIOKafkaConsumer
    from aiokafka.structs import TopicPartition as AioTopicPartition

    async def run() -> list[tuple[int, bytes | None, bytes | None]]:
        tp = AioTopicPartition(topic, 0)
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                                    auto_offset_reset="earliest")
        await consumer.start()
        try:
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            end = (await consumer.end_offsets([tp]))[tp]
            out: list[tuple[int, bytes | None, bytes | None]] = []
            deadline = time.monotonic() + 60
            while await consumer.position(tp) < end and time.monotonic() < deadline:
                for records in (await consumer.getmany(timeout_ms=500)).values():
                    out += [(r.offset, r.key, r.value) for r in records]
            assert await consumer.position(tp) >= end, "aiokafka stuck before the end"
            return out
        finally:
            await consumer.stop()

    return asyncio.run(run())


def kcat_read(bootstrap: str, topic: str) -> list[tuple[int, bytes | None, bytes | None]]:
    import json
    import shutil

    kcat = shutil.which("kcat") or "/usr/bin/kcat"
    proc = subprocess.run([kcat, "-C", "-b", bootstrap, "-t", topic, "-p", "0", "-o", "beginning", "-e", "-J", "-q"],
                          capture_output=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = []
    for line in proc.stdout.splitlines():
        if line.strip():
            m = json.loads(line)
            key = None if m.get("key") is None else str(m["key"]).encode()
            value = None if m.get("payload") is None else str(m["payload"]).encode()
            out.append((m["offset"], key, value))
    return out


@pytest.mark.parametrize("kind", ["classic", "diskless"])
def test_every_client_reads_a_compacted_log_with_gaps_and_empty_batches(broker: BrokerProcess, kind: str) -> None:
    """librdkafka, kafka-python, aiokafka and kcat step over the gaps compaction leaves, and over a
    batch it emptied but kept (the last batch of an idempotent producer still known)."""
    topic = f"compacted-clients-{kind}"
    create(broker.bootstrap, topic, COMPACTED, kind=kind)
    first = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True})
    for k in range(10):
        first.produce(topic, b"first", b"k%d" % k)
    assert first.flush(30) == 0
    second = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5, "batch.size": 65536})
    for i in range(5000):
        second.produce(topic, b"%d" % i, b"k%d" % (i % 10))
    assert second.flush(30) == 0
    time.sleep(1.2)  # segment.ms: the last record rolls a new active segment of its own
    second.produce(topic, b"end", b"end")
    assert second.flush(30) == 0
    expected = {**{b"k%d" % k: b"%d" % (4990 + k) for k in range(10)}, b"end": b"end"}
    got = wait_compacted(broker, topic, len(expected))
    assert {k: v for _, k, v in got} == expected and len(got) == len(expected)
    if kind == "classic":  # the first producer's only batch is its last: kept, emptied
        from shoal.records.codec import iter_batches

        counts = [h.records_count for f in sorted((broker.log_dir / f"{topic}-0").glob("*.log"))
                  for _, h in iter_batches(f.read_bytes()) if h.producer_id >= 0 and not h.is_control]
        assert 0 in counts, counts
    for name, read in (("kafka-python", kafka_python_read), ("aiokafka", aiokafka_read), ("kcat", kcat_read)):
        assert read(broker.bootstrap, topic) == got, name


@pytest.mark.parametrize("kind", ["classic", "diskless"])
def test_a_record_without_a_key_is_refused_with_invalid_record(broker: BrokerProcess, kind: str) -> None:
    topic = f"compacted-keyless-{kind}"
    create(broker.bootstrap, topic, COMPACTED, kind=kind)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True})
    errors: list[Any] = []
    producer.produce(topic, b"no key", on_delivery=lambda err, _msg: errors.append(err))
    producer.produce(topic, b"keyed", b"k", on_delivery=lambda err, _msg: errors.append(err))
    producer.flush(30)
    assert [e.code() if e else None for e in errors][0] == KafkaError.INVALID_RECORD, errors
    later = Producer({"bootstrap.servers": broker.bootstrap})
    later.produce(topic, b"keyed", b"k", on_delivery=lambda err, _msg: errors.append(err))
    later.flush(30)
    assert errors[-1] is None
