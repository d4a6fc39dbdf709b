"""Durability across a SIGKILL and across a clean restart.

Every acknowledged record must survive a crash (acks mean: uploaded and committed), and an
idempotent producer that retries across the crash must not create a single duplicate.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicCollection, TopicPartition
from confluent_kafka.admin import ConfigResource, ResourceType

from tests.support.broker import (
    BrokerProcess,
    admin_client,
    check_records,
    confluent_consume,
    confluent_consumer,
    confluent_produce,
    create_diskless_topic,
    make_workload,
    seq_of_rec,
)

PRODUCER_SCRIPT = r'''
"""Produce numbered records as fast as possible; append each acknowledged id to a file (fsynced)."""
import json, os, sys, time
from confluent_kafka import Producer

bootstrap, topic, acked_path, stop_path = sys.argv[1:5]
partitions, max_seconds, max_records = int(sys.argv[5]), float(sys.argv[6]), int(sys.argv[7])
producer = Producer({
    "bootstrap.servers": bootstrap,
    "enable.idempotence": True,
    "acks": "all",
    "linger.ms": 5,
    "message.timeout.ms": 180000,
    "retry.backoff.ms": 100,
    "reconnect.backoff.max.ms": 500,
    "queue.buffering.max.messages": 20000,
})
pending_acks, failed, fatal = [], [], []

def on_delivery(err, msg):
    if err is None:
        pending_acks.append(int(msg.key()))
    else:
        failed.append((int(msg.key()), str(err)))
        if err.fatal():
            fatal.append(str(err))

def save(out):
    if pending_acks:
        out.write("".join(f"{i}\n" for i in pending_acks))
        out.flush()
        os.fsync(out.fileno())
        pending_acks.clear()

produced = 0
start = time.monotonic()
with open(acked_path, "a") as out:
    while not os.path.exists(stop_path) and time.monotonic() - start < max_seconds and produced < max_records:
        try:
            producer.produce(topic, key=str(produced).encode(), value=f"crash|{produced:08d}|".encode() + b"v" * 60,
                             headers=[("seq", str(produced).encode())], partition=produced % partitions,
                             on_delivery=on_delivery)
            produced += 1
        except BufferError:
            producer.poll(0.05)
        if produced % 200 == 0:
            producer.poll(0)
        save(out)
        if fatal:
            break
    left = producer.flush(120)
    save(out)
print(json.dumps({"produced": produced, "left": left, "failed": len(failed), "failed_sample": failed[:5],
                  "fatal": fatal}))
sys.exit(1 if fatal or left else 0)
'''


KILL_CYCLES = 3


def _read_ids(path: Path) -> list[int]:
    if not path.exists():
        return []
    return [int(line) for line in path.read_text().splitlines() if line.strip()]


def _wait_for_acks(path: Path, count: int, proc: subprocess.Popen[bytes], timeout: float) -> int:
    deadline = time.monotonic() + timeout
    n = len(_read_ids(path))
    while time.monotonic() < deadline and n < count and proc.poll() is None:
        time.sleep(0.2)
        n = len(_read_ids(path))
    return n


@pytest.mark.timeout(300)
def test_sigkill_loses_no_acknowledged_record_and_creates_no_duplicate(
    broker: BrokerProcess, topic_name: str, tmp_path: Path
) -> None:
    """An idempotent producer in its own process keeps producing while the broker is SIGKILLed
    and restarted three times; afterwards every acknowledged id is there exactly once."""
    partitions = 4
    create_diskless_topic(broker.bootstrap, topic_name, partitions=partitions)
    script = tmp_path / "producer.py"
    script.write_text(PRODUCER_SCRIPT)
    acked_path, stop_path = tmp_path / "acked.txt", tmp_path / "stop"
    out_path, err_path = tmp_path / "producer.out", tmp_path / "producer.err"
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        proc = subprocess.Popen(
            [
                sys.executable,
                str(script),
                broker.bootstrap,
                topic_name,
                str(acked_path),
                str(stop_path),
                str(partitions),
                "150",
                "2000000",
            ],
            stdout=out,
            stderr=err,
            stdin=subprocess.DEVNULL,
        )
    acked_at_kills: list[int] = []
    try:
        before_kill = _wait_for_acks(acked_path, 3000, proc, timeout=60)
        assert before_kill >= 3000, f"only {before_kill} acks before the kill; producer rc={proc.poll()}"
        for _cycle in range(KILL_CYCLES):
            broker.kill()
            acked_at_kills.append(len(_read_ids(acked_path)))
            time.sleep(0.5)
            broker.start()
            after = _wait_for_acks(acked_path, acked_at_kills[-1] + 3000, proc, timeout=90)
            assert after >= acked_at_kills[-1] + 3000, (
                f"producer made no progress after restart #{len(acked_at_kills)}: {after} acks, "
                f"{acked_at_kills[-1]} at the kill; producer stderr: {err_path.read_text()[-2000:]}"
            )
        time.sleep(2.0)
    finally:
        stop_path.touch()
        try:
            proc.wait(150)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
    summary = out_path.read_text().strip()
    assert proc.returncode == 0, (
        f"producer exited {proc.returncode}: {summary}\nstderr: {err_path.read_text()[-3000:]}"
    )
    acked = _read_ids(acked_path)
    assert len(acked) == len(set(acked)), "the client acknowledged an id twice (test bug)"

    admin = admin_client(broker.bootstrap)
    md = admin.list_topics(topic=topic_name, timeout=10)
    assert len(md.topics[topic_name].partitions) == partitions
    consumer = confluent_consumer(broker.bootstrap)
    try:
        highs = [
            consumer.get_watermark_offsets(TopicPartition(topic_name, p), timeout=10, cached=False)[1]
            for p in range(partitions)
        ]
    finally:
        consumer.close()
    total = sum(highs)
    received = confluent_consume(broker.bootstrap, topic_name, range(partitions), total, settle=2.0)

    problems: list[str] = []
    by_part: dict[int, list[Any]] = {}
    for r in received:
        by_part.setdefault(r.partition, []).append(r)
    seen: dict[int, str] = {}
    dups: list[str] = []
    for p, recs in sorted(by_part.items()):
        recs.sort(key=lambda r: r.offset)
        offsets = [r.offset for r in recs]
        if offsets != list(range(len(recs))):
            problems.append(f"p{p}: offsets not gapless from 0: first {offsets[:3]}, count {len(offsets)}")
        ids = [seq_of_rec(r) for r in recs]
        if any(i is None or i % partitions != p for i in ids):
            problems.append(f"p{p}: records with foreign ids")
        if any(b is not None and a is not None and b <= a for a, b in zip(ids, ids[1:], strict=False)):
            problems.append(f"p{p}: ids out of order (idempotent producer keeps order)")
        for r, i in zip(recs, ids, strict=True):
            if i in seen:
                dups.append(f"id {i} at {seen[i]} and p{p}@{r.offset}")
            seen[i] = f"p{p}@{r.offset}"
    missing = sorted(set(acked) - set(seen))
    if dups:
        problems.append(f"{len(dups)} duplicates, e.g. {dups[:5]}")
    if missing:
        problems.append(f"{len(missing)} acknowledged ids lost, e.g. {missing[:10]}")
    print(
        f"{len(acked)} acked (at the kills: {acked_at_kills}), {len(received)} in the topic, "
        f"{len(set(seen) - set(acked))} stored but never acknowledged; producer: {summary}"
    )
    assert not problems, (
        f"{len(acked)} acked (at the kills: {acked_at_kills}), {len(received)} records in the topic "
        f"(high watermarks {highs}); producer: {summary}\n  " + "\n  ".join(problems)
    )


@pytest.mark.timeout(180)
def test_sigkill_after_flush_keeps_every_record(broker: BrokerProcess, topic_name: str) -> None:
    """Records acknowledged before a SIGKILL are all there after the restart, and offsets continue."""
    create_diskless_topic(broker.bootstrap, topic_name, partitions=3)
    first = make_workload(6_000, 3, "kill-1", seed=61, base_timestamp=int(time.time() * 1000) - 100_000)
    confluent_produce(broker.bootstrap, topic_name, first, config={"compression.type": "gzip"})
    broker.kill()
    broker.start()
    second = make_workload(3_000, 3, "kill-2", seed=62, first_seq=len(first))
    confluent_produce(broker.bootstrap, topic_name, second)
    received = confluent_consume(broker.bootstrap, topic_name, range(3), len(first) + len(second))
    check_records(received, first + second)


def _topic_state(bootstrap: str, topic: str) -> tuple[str, int, dict[str, str]]:
    admin = admin_client(bootstrap)
    desc = admin.describe_topics(TopicCollection([topic]), request_timeout=15)[topic].result(15)
    resource = ConfigResource(ResourceType.TOPIC, topic)
    configs = admin.describe_configs([resource], request_timeout=15)[resource].result(15)
    return str(desc.topic_id), len(desc.partitions), {name: entry.value for name, entry in configs.items()}


@pytest.mark.timeout(180)
def test_clean_restart_keeps_records_topic_id_and_configs(broker: BrokerProcess, topic_name: str) -> None:
    """SIGTERM, start again on the same dirs: records, topic id and configs are all unchanged."""
    create_diskless_topic(broker.bootstrap, topic_name, partitions=4, config={"retention.ms": "86400000"})
    first = make_workload(8_000, 4, "restart-1", seed=71, base_timestamp=int(time.time() * 1000) - 100_000)
    confluent_produce(broker.bootstrap, topic_name, first, config={"compression.type": "zstd"})
    topic_id, nparts, configs = _topic_state(broker.bootstrap, topic_name)
    assert configs.get("diskless.enable") == "true", f"diskless.enable not described: {configs}"
    assert configs.get("retention.ms") == "86400000", f"retention.ms not kept: {configs.get('retention.ms')}"

    rc = broker.stop()
    # 0 (or the JVM convention 143) is a handled shutdown; -15 means the default handler killed it.
    assert rc in (0, 143), f"SIGTERM did not shut down cleanly: exit code {rc}\n{broker.log_tail()}"
    broker.start()

    assert _topic_state(broker.bootstrap, topic_name) == (topic_id, nparts, configs)
    second = make_workload(2_000, 4, "restart-2", seed=72, first_seq=len(first))
    confluent_produce(broker.bootstrap, topic_name, second)
    received = confluent_consume(broker.bootstrap, topic_name, range(4), len(first) + len(second))
    check_records(received, first + second)


def test_diskless_enable_cannot_be_changed_after_creation(broker: BrokerProcess, topic_name: str) -> None:
    """`diskless.enable` is fixed at creation: altering it fails with INVALID_CONFIG."""
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry

    create_diskless_topic(broker.bootstrap, topic_name, partitions=1)
    admin = admin_client(broker.bootstrap)
    resource = ConfigResource(
        ResourceType.TOPIC,
        topic_name,
        incremental_configs=[
            ConfigEntry("diskless.enable", "false", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    try:
        admin.incremental_alter_configs([resource], request_timeout=15)[resource].result(15)
    except KafkaException as exc:
        code = exc.args[0].code()
        if code in (KafkaError._UNSUPPORTED_FEATURE, KafkaError.UNSUPPORTED_VERSION):
            pytest.skip(f"IncrementalAlterConfigs not served by the broker yet: {exc}")
        assert code == KafkaError.INVALID_CONFIG, f"unexpected error altering diskless.enable: {exc}"
    else:
        pytest.fail("altering diskless.enable after creation was accepted")
    assert _topic_state(broker.bootstrap, topic_name)[2].get("diskless.enable") == "true"


def test_topic_configs_can_be_altered_and_survive_restart(broker: BrokerProcess, topic_name: str) -> None:
    """IncrementalAlterConfigs SET/DELETE on a topic, seen by DescribeConfigs, kept across a restart."""
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry

    create_diskless_topic(broker.bootstrap, topic_name, partitions=1)
    admin = admin_client(broker.bootstrap)
    resource = ConfigResource(
        ResourceType.TOPIC,
        topic_name,
        incremental_configs=[
            ConfigEntry("retention.ms", "3600000", incremental_operation=AlterConfigOpType.SET),
            ConfigEntry(
                "message.timestamp.type", "LogAppendTime", incremental_operation=AlterConfigOpType.SET
            ),
        ],
    )
    admin.incremental_alter_configs([resource], request_timeout=15)[resource].result(15)
    bad = ConfigResource(
        ResourceType.TOPIC,
        topic_name,
        incremental_configs=[
            ConfigEntry("retention.ms", "soon", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    with pytest.raises(KafkaException) as refused:
        admin.incremental_alter_configs([bad], request_timeout=15)[bad].result(15)
    assert refused.value.args[0].code() == KafkaError.INVALID_CONFIG
    broker.restart()
    configs = _topic_state(broker.bootstrap, topic_name)[2]
    assert configs["retention.ms"] == "3600000"
    assert configs["message.timestamp.type"] == "LogAppendTime"
    # With LogAppendTime the broker's append time replaces the producer's timestamp.
    from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME, Consumer, Producer, TopicPartition

    before = int(time.time() * 1000)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    producer.produce(topic_name, value=b"stamped", timestamp=1_000)
    assert producer.flush(30) == 0
    consumer = Consumer(
        {"bootstrap.servers": broker.bootstrap, "group.id": "lat", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(topic_name, 0, 0)])
    message = None
    deadline = time.time() + 30
    while message is None and time.time() < deadline:
        message = consumer.poll(1)
    consumer.close()
    assert message is not None and message.error() is None
    timestamp_type, timestamp = message.timestamp()
    assert timestamp_type == TIMESTAMP_LOG_APPEND_TIME
    assert timestamp >= before
