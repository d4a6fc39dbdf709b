"""The diskless data lifecycle against a real broker: retention, DeleteRecords, DeleteTopics, object GC.

KIP-1163 "Batch deletion": deleting batches (retention, DeleteRecords, topic deletion) only
moves log start offsets and marks objects with no live batch left; a broker deletes those
objects from storage after a grace period. Objects uploaded but never committed (orphans)
are collected once old enough, and a committed object never is, even while the Batch
Coordinator cannot be asked. Every check goes through what operators and clients see:
Kafka clients (ListOffsets, DeleteRecords, Fetch), the object directory, `/metrics` and the
`shoal diskless-metadata` / `shoal dump-log` tools as separate processes.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

from shoal.coordinator.faulty import Fault, write_control_file
from tests.integration.conftest import BrokerFactory
from tests.support.broker import SRC_DIR, BrokerProcess, free_port
from tests.support.kafka_clients import (
    admin_client,
    confluent_consume,
    confluent_consumer,
    create_diskless_topic,
)
from tests.support.metrics import Samples, metric
from tests.support.metrics import scrape as scrape_port
from tests.support.record_batches import build_record_batch
from tests.support.workload import Sent, check_records, make_workload, seq_of_rec

CLI_TIMEOUT = 120.0
WAIT_S = 30.0  # bound of every wait for a background task (retention, cleaner) to act

#: Fast lifecycle tasks, so a test sees in seconds what production does in minutes.
FAST_LIFECYCLE = {
    "log.retention.check.interval.ms": 500,
    "diskless.object.cleaner.interval.ms": 500,
    "diskless.object.delete.grace.ms": 1000,
    "diskless.object.orphan.min.age.ms": 60000,  # its minimum
}


# --------------------------------------------------------------------------------------------- helpers


def lifecycle_broker(factory: BrokerFactory, name: str = "broker", **extra: Any) -> BrokerProcess:
    """A broker with fast lifecycle tasks and a /metrics port (``metrics_port`` attribute)."""
    port = free_port()
    broker = factory(name, overrides={**FAST_LIFECYCLE, "metrics.http.port": port, **extra})
    broker.metrics_port = port  # type: ignore[attr-defined]
    return broker


def metadata_dir(broker: BrokerProcess) -> Path:
    """Where the broker keeps shoal.db: metadata.log.dir is unset, so the first log dir."""
    return broker.log_dir


def shoal_cli(*args: str) -> str:
    """`python -m shoal ARGS` as an operator runs it; its stdout (fails the test on a non-zero exit)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(SRC_DIR), env.get("PYTHONPATH", "")) if p)
    proc = subprocess.run(
        [sys.executable, "-m", "shoal", *args], env=env, capture_output=True, text=True, timeout=CLI_TIMEOUT,
        check=False,
    )
    assert proc.returncode == 0, f"shoal {' '.join(args)}: rc={proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def topic_overview(broker: BrokerProcess, topic: str) -> dict[str, int]:
    """`shoal diskless-metadata topic`: live bytes of the topic and the objects holding it."""
    out = shoal_cli("diskless-metadata", "topic", topic, "--metadata-dir", str(metadata_dir(broker)))
    size = re.search(r"^Size on object storage: (\d+) bytes", out, re.M)
    objects = re.search(r"^Objects holding batches of the topic: (\d+), (\d+) bytes", out, re.M)
    assert size and objects, out
    return {"size": int(size[1]), "objects": int(objects[1]), "object_bytes": int(objects[2])}


def object_overview(broker: BrokerProcess, path: Path) -> dict[str, Any]:
    """`shoal diskless-metadata object`: an object's used size, state and the topics of its live batches."""
    out = shoal_cli("diskless-metadata", "object", str(path), "--metadata-dir", str(metadata_dir(broker)))
    head = dict(cell.split(": ", 1) for cell in out.splitlines()[0].split("\t"))
    topics = {m[1] for m in re.finditer(r"^\tTopic: (\S+)\t", out, re.M)}
    return {"used": int(head["UsedSize"]), "size": int(head["Size"]), "state": head["State"], "topics": topics}


def scrape(broker: BrokerProcess) -> Samples:
    """Every sample of the broker's /metrics page."""
    return scrape_port(broker.metrics_port)  # type: ignore[attr-defined]


def watermarks(bootstrap: str, topic: str, partition: int = 0) -> tuple[int, int]:
    """(log start offset, high watermark) as a client sees them: ListOffsets EARLIEST and LATEST."""
    consumer = confluent_consumer(bootstrap)
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=15, cached=False)
    finally:
        consumer.close()
    return int(low), int(high)


def wait_until(what: str, check: Callable[[], bool], timeout: float = WAIT_S, *, info: Callable[[], Any] = str,
               interval: float = 0.25) -> None:
    """Poll ``check`` until true; fail with ``what`` and ``info()`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(interval)
    raise AssertionError(f"{what}: not within {timeout}s ({info()})")


def produce(bootstrap: str, records: list[tuple[str, Sent]], *, timeout: float = 60.0) -> None:
    """Produce (topic, record) pairs in order with one idempotent producer and flush once, so records of
    several topics travel in the same Produce requests and land in the same WAL objects."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                         "linger.ms": 20})
    errors: list[str] = []

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(f"{msg.topic()}-{msg.partition()}: {err}")

    for topic, s in records:
        producer.produce(topic, key=s.key, value=s.value, headers=list(s.headers), partition=max(s.partition, 0),
                         on_delivery=on_delivery)
    assert producer.flush(timeout) == 0, f"records not delivered within {timeout}s"
    assert not errors, errors[:5]


def delete_records(bootstrap: str, topic: str, offsets: dict[int, int]) -> dict[int, int]:
    """DeleteRecords through confluent's AdminClient; the low watermark each partition answered."""
    admin = admin_client(bootstrap)
    futures = admin.delete_records([TopicPartition(topic, p, o) for p, o in offsets.items()], request_timeout=15)
    return {tp.partition: int(f.result(15).low_watermark) for tp, f in futures.items()}


def wal_files(broker: BrokerProcess) -> set[Path]:
    return set(broker.wal_objects())


def valid_wal_bytes(records: int = 3) -> bytes:
    """A WAL segment as the broker writes it (version byte 0 + a RecordBatch v2) that nobody committed."""
    return b"\x00" + build_record_batch([(b"k", f"orphan-{i}".encode()) for i in range(records)])


# ----------------------------------------------------------------------------------------------- tests


@pytest.mark.timeout(180)
def test_retention_frees_objects_shared_with_a_topic_without_retention(broker_factory: BrokerFactory) -> None:
    """Retention deletes the expired topic's batches at once, but the WAL objects it shares with a
    topic without retention stay (that topic stays readable) until that topic's batches go too."""
    broker = lifecycle_broker(broker_factory)
    short, keep = f"short-{uuid.uuid4().hex[:6]}", f"keep-{uuid.uuid4().hex[:6]}"
    create_diskless_topic(broker.bootstrap, short, partitions=1)
    create_diskless_topic(broker.bootstrap, keep, partitions=1)
    n = 300
    short_sent = make_workload(n, 1, "short", seed=1)
    keep_sent = make_workload(n, 1, "keep", seed=2)
    produce(broker.bootstrap, [pair for a, b in zip(short_sent, keep_sent, strict=True)
                               for pair in ((short, a), (keep, b))])

    objects = wal_files(broker)
    assert objects, "no WAL object written"
    described = {path: object_overview(broker, path) for path in objects}
    shared = {path for path, d in described.items() if d["topics"] == {short, keep}}
    assert shared, f"no object holds batches of both topics: {described}"
    before_short, before_keep = topic_overview(broker, short), topic_overview(broker, keep)
    assert before_short["size"] > 0 and before_short["objects"] >= len(shared), before_short
    assert watermarks(broker.bootstrap, short) == (0, n)

    # Expire the records written above: retention.ms of a few seconds, applied by the retention task.
    admin = admin_client(broker.bootstrap)
    resource = ConfigResource(ResourceType.TOPIC, short, incremental_configs=[
        ConfigEntry("retention.ms", "2000", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([resource], request_timeout=15)[resource].result(15)
    wait_until(f"log start offset of {short} moved to its end", lambda: watermarks(broker.bootstrap, short) == (n, n),
               info=lambda: watermarks(broker.bootstrap, short))

    after_short = topic_overview(broker, short)
    assert after_short["size"] == 0 and after_short["objects"] == 0, after_short
    assert topic_overview(broker, keep) == before_keep
    for path in shared:
        now = object_overview(broker, path)
        assert now["state"] == "uploaded" and now["topics"] == {keep}, now
        assert 0 < now["used"] < described[path]["used"], (described[path], now)

    # Well past the grace period the shared objects are still there, and the other topic reads in full.
    time.sleep(FAST_LIFECYCLE["diskless.object.delete.grace.ms"] / 1000 + 4 * 0.5)
    assert shared <= wal_files(broker), "an object still holding live batches was deleted"
    check_records(confluent_consume(broker.bootstrap, keep, [0], n, timeout=60), keep_sent)
    samples = scrape(broker)
    assert metric(samples, "kafka_diskless_retention_deleted_batches_total") >= 1
    assert metric(samples, "kafka_diskless_retention_deleted_bytes_total") >= before_short["size"]

    # Emptying the other topic too frees the objects: marked, then deleted after the grace period.
    assert delete_records(broker.bootstrap, keep, {0: n}) == {0: n}
    assert watermarks(broker.bootstrap, keep) == (n, n)
    wait_until("the emptied shared objects deleted from storage", lambda: not (shared & wal_files(broker)),
               info=lambda: sorted(p.name for p in shared & wal_files(broker)))
    assert topic_overview(broker, keep)["size"] == 0
    assert metric(scrape(broker), "kafka_diskless_objects_deleted_total") >= len(shared)


@pytest.mark.timeout(180)
def test_delete_records_and_delete_topics_free_objects(broker_factory: BrokerFactory) -> None:
    """DeleteRecords moves the log start offset clients see and frees the objects wholly below it;
    DeleteTopics frees the rest; another topic's objects are untouched."""
    broker = lifecycle_broker(broker_factory)
    topic, other = f"dr-{uuid.uuid4().hex[:6]}", f"other-{uuid.uuid4().hex[:6]}"
    create_diskless_topic(broker.bootstrap, topic, partitions=2)
    create_diskless_topic(broker.bootstrap, other, partitions=1)
    per_round = 100
    rounds = [make_workload(per_round, 2, f"r{i}", seed=i, first_seq=i * per_round) for i in range(3)]
    produce(broker.bootstrap, [(other, s) for s in make_workload(50, 1, "other", seed=9)])
    other_objects = wal_files(broker)
    produce(broker.bootstrap, [(topic, s) for s in rounds[0]])
    produce(broker.bootstrap, [(topic, s) for s in rounds[1]])
    early = wal_files(broker) - other_objects
    produce(broker.bootstrap, [(topic, s) for s in rounds[2]])
    late = wal_files(broker) - other_objects - early
    assert early and late
    half = per_round // 2  # records per partition per round
    assert [watermarks(broker.bootstrap, topic, p) for p in (0, 1)] == [(0, 3 * half)] * 2

    # kafka-dump-log on a WAL object: its batches under the topic-partition and the assigned offsets.
    dumped = shoal_cli("dump-log", str(min(early)), "--metadata-dir", str(metadata_dir(broker)))
    assert "WAL segment version: 0" in dumped and "state: uploaded" in dumped, dumped
    batch_lines = re.findall(rf"^topic: {topic} partition: [01] baseOffset: (\d+) lastOffset: (\d+) count: (\d+) .*"
                             r"isvalid: true$", dumped, re.M)
    assert batch_lines and all(int(c) == int(b2) - int(b1) + 1 for b1, b2, c in batch_lines), dumped

    # Up to the end of round 1 in both partitions: the objects of rounds 0 and 1 hold nothing live any more.
    cut = 2 * half
    assert delete_records(broker.bootstrap, topic, {0: cut, 1: cut}) == {0: cut, 1: cut}
    assert [watermarks(broker.bootstrap, topic, p) for p in (0, 1)] == [(cut, 3 * half)] * 2
    wait_until("objects below the new log start deleted", lambda: wal_files(broker) == other_objects | late,
               info=lambda: (len(wal_files(broker)), len(other_objects | late)))
    # A consumer from the beginning starts at the log start offset: round 2 only, offsets from `cut`.
    received = confluent_consume(broker.bootstrap, topic, [0, 1], per_round, timeout=60)
    assert sorted(seq_of_rec(r) or -1 for r in received) == [s.seq for s in rounds[2]]
    assert {p: min(r.offset for r in received if r.partition == p) for p in (0, 1)} == {0: cut, 1: cut}
    assert topic_overview(broker, topic)["objects"] == len(late)

    admin = admin_client(broker.bootstrap)
    admin.delete_topics([topic], operation_timeout=15, request_timeout=15)[topic].result(15)
    wait_until("objects of the deleted topic deleted", lambda: wal_files(broker) == other_objects,
               info=lambda: (len(wal_files(broker)), len(other_objects)))
    assert topic not in admin.list_topics(timeout=10).topics
    assert watermarks(broker.bootstrap, other) == (0, 50)
    assert metric(scrape(broker), "kafka_diskless_objects_deleted_total") >= len(early) + len(late)


@pytest.mark.timeout(180)
def test_orphans_are_collected_and_committed_objects_never(broker_factory: BrokerFactory, tmp_path: Path) -> None:
    """Old objects nobody committed are deleted; committed ones (also one whose commit answer was lost)
    and young orphans are not, and nothing is deleted while the coordinator cannot be asked."""
    control = tmp_path / "coordinator-faults.json"
    broker = lifecycle_broker(broker_factory, **{"diskless.coordinator.fault.control.file": control})
    topic = f"gc-{uuid.uuid4().hex[:6]}"
    create_diskless_topic(broker.bootstrap, topic, partitions=1)
    first = make_workload(20, 1, "first", seed=1)
    produce(broker.bootstrap, [(topic, s) for s in first])

    # A commit whose answer is lost: the object is committed although the broker saw an error; the
    # idempotent producer's retries are answered as duplicates once the coordinator answers again.
    second = make_workload(20, 1, "second", seed=2, first_seq=20)
    write_control_file(control, {"commit_file": Fault(failure_rate=1.0, after=True)})
    failures: list[BaseException] = []

    def produce_second() -> None:
        try:
            produce(broker.bootstrap, [(topic, s) for s in second])
        except BaseException as exc:  # reported by the test thread
            failures.append(exc)

    producing = threading.Thread(target=produce_second, daemon=True)
    producing.start()
    wait_until("commits answered with an error",
               lambda: metric(scrape(broker), "kafka_diskless_commit_errors_total") >= 2)
    control.unlink()
    producing.join(60)
    assert not producing.is_alive() and not failures, failures
    assert watermarks(broker.bootstrap, topic) == (0, 40)
    broker.stop()
    committed = wal_files(broker)
    # Committed objects with live batches; the others hold only duplicates (marked for deletion at commit).
    live = {p for p in committed if object_overview(broker, p)["state"] == "uploaded"}
    assert len(live) >= 2, "the first object and the one whose commit answer was lost hold live batches"

    # Age every object past the orphan age, and plant orphans: three old ones and a young one.
    old = time.time() - 7200
    wal_dir = broker.objects_dir / "wal"  # type: ignore[operator]
    orphans = {wal_dir / str(uuid.uuid4()) for _ in range(3)}
    young = wal_dir / str(uuid.uuid4())
    for path in orphans | {young}:
        path.write_bytes(valid_wal_bytes())
    for path in committed | orphans:
        os.utime(path, (old, old))

    # The coordinator cannot be asked, in each way the cleaner asks it: no round may delete anything.
    def failed_rounds(phase: str) -> float:
        return metric(scrape(broker), "kafka_diskless_object_cleaner_errors_total", phase=phase)

    write_control_file(control, {"get_files_to_delete": Fault(failure_rate=1.0)})
    broker.start()
    for phase, faults in (
        ("delete", {}),  # already in force since the start
        ("orphans", {"is_safe_to_delete_file": Fault(failure_rate=1.0)}),
        ("orphans", {"is_safe_to_delete_file": Fault(failure_rate=1.0, after=True)}),
    ):
        if faults:
            write_control_file(control, faults)
        failed = failed_rounds(phase)
        wait_until(f"cleaner rounds failing with {faults or 'get_files_to_delete down'}",
                   lambda phase=phase, failed=failed: failed_rounds(phase) >= failed + 2)
        # (Objects holding only duplicates may go: they were marked for deletion at commit.)
        assert wal_files(broker) >= live | orphans | {young}, f"deleted while the coordinator failed ({faults})"

    control.unlink()
    wait_until("old orphans collected", lambda: not (orphans & wal_files(broker)),
               info=lambda: sorted(p.name for p in orphans & wal_files(broker)))
    remaining = wal_files(broker)
    assert young in remaining, "an orphan younger than diskless.object.orphan.min.age.ms was deleted"
    assert live <= remaining, "a committed object was garbage collected"
    assert metric(scrape(broker), "kafka_diskless_orphan_objects_deleted_total") == len(orphans)
    check_records(confluent_consume(broker.bootstrap, topic, [0], 40, timeout=60), first + second)


@pytest.mark.timeout(120)
def test_metrics_move_under_load(broker_factory: BrokerFactory) -> None:
    """/metrics while a producer and a consumer run: uploads, commits, requests per API, bytes per topic."""
    broker = lifecycle_broker(broker_factory)
    topic = f"metrics-{uuid.uuid4().hex[:6]}"
    create_diskless_topic(broker.bootstrap, topic, partitions=2)
    stop = threading.Event()
    produced: list[int] = []

    def load() -> None:
        producer = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True, "linger.ms": 5})
        deadline = time.monotonic() + 60
        while not stop.is_set() and time.monotonic() < deadline and len(produced) < 200_000:
            for _ in range(200):
                try:
                    producer.produce(topic, value=b"m" * 100)
                    produced.append(1)
                except BufferError:
                    break
            producer.poll(0.05)
        producer.flush(30)

    thread = threading.Thread(target=load, daemon=True)
    thread.start()
    consumer = confluent_consumer(broker.bootstrap)
    consumer.assign([TopicPartition(topic, p, 0) for p in (0, 1)])
    scrapes = []
    try:
        for _ in range(3):
            deadline = time.monotonic() + 1.5
            while time.monotonic() < deadline:
                consumer.consume(num_messages=1000, timeout=0.2)
            scrapes.append(scrape(broker))
    finally:
        stop.set()
        thread.join(60)
        consumer.close()
    first, last = scrapes[0], scrapes[-1]
    for name in ("kafka_diskless_object_uploads_total", "kafka_diskless_commits_total",
                 "kafka_diskless_committed_batches_total", "kafka_diskless_object_upload_bytes_total"):
        assert metric(first, name) > 0 and metric(last, name) > metric(first, name), name
    for api in ("Produce", "Fetch"):
        name = "kafka_network_requestmetrics_requests_total"
        assert metric(last, name, request=api) > metric(first, name, request=api) > 0, api
    assert metric(last, "kafka_network_requestmetrics_requests_total", request="Metadata") > 0
    assert metric(last, "kafka_network_requestmetrics_totaltime_seconds_count", request="Produce") > 0
    for name in ("kafka_server_brokertopicmetrics_bytesin_total", "kafka_server_brokertopicmetrics_bytesout_total"):
        assert metric(last, name, topic=topic) > metric(first, name, topic=topic) > 0, name
    assert metric(last, "kafka_server_brokertopicmetrics_messagesin_total", topic=topic) > 0
    assert metric(last, "kafka_diskless_object_upload_errors_total") == 0
    assert metric(last, "kafka_diskless_commit_errors_total") == 0
