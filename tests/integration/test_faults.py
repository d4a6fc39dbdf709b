"""Object storage and Batch Coordinator failures under load: nothing acknowledged is lost or duplicated.

KIP-1163's test plan: with object storage or the coordinator "inaccessible or partially
accessible", correctness comes first. An idempotent confluent-kafka producer (acks=all, in
its own process, writing every acknowledged id to a file) and a consumer run throughout
while a fault is switched on for a few seconds and off again: storage down, flaky or slow,
an upload whose answer is lost (an orphan), the coordinator down, a commit whose answer is
lost (the ambiguous commit), and a real S3 server (moto) frozen. Faults are driven through
the control files of the broker's fault-injecting wrappers (a ``faulty+`` storage URL and
``diskless.coordinator.fault.control.file``), so the broker process is the real one.

Afterwards: every acknowledged id is in the topic exactly once, offsets are gapless, the
producer hit no fatal error, the broker is alive and answers Metadata, and the broker's
metrics show that the fault really fired. A last test makes object reads fail under a
consumer (the range cache off, so every Fetch reads storage).
"""

from __future__ import annotations

import shutil
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, TopicPartition

from shoal.coordinator import faulty as coordinator_faults
from shoal.objects import faulty as storage_faults
from shoal.objects.faulty import Fault
from tests.integration.conftest import BrokerFactory
from tests.support.acked_producer import AckedProducer, check_acked_ids, id_records, watermarks
from tests.support.broker import BrokerProcess, free_port
from tests.support.kafka_clients import (
    admin_client,
    confluent_consume,
    confluent_consumer,
    confluent_produce,
    create_diskless_topic,
)
from tests.support.metrics import Samples, metric, scrape
from tests.support.workload import check_records, make_workload

PARTITIONS = 4
RATE = 2000  # records/s the producer offers at most
WINDOW = 1000  # unacknowledged records at most: a backlog keeps several requests in flight, yet drains in seconds
WARMUP_ACKS = 1000  # acknowledged before the fault
RECOVERY_ACKS = 1000  # acknowledged after the fault is cleared, to prove the producer recovered
FAULT_S = 4.0  # how long a fault stays on
WAIT_S = 60.0  # bound of every wait for progress
COMMIT_INTERVAL_MS = 20  # short segments: a partition's pipelined requests spread over several segments

# --------------------------------------------------------------------------------------------- helpers

@dataclass
class Consumed:
    """What the consumer running throughout the test saw."""

    records: list[tuple[int, int, int | None]] = field(default_factory=list)  # (partition, offset, id)
    errors: list[str] = field(default_factory=list)


class Load:
    """The producer process and a consumer thread, both running for the whole test."""

    def __init__(self, broker: BrokerProcess, topic: str, work: Path) -> None:
        self.broker, self.topic = broker, topic
        self.producer = AckedProducer(
            work, broker.bootstrap, topic, PARTITIONS, rate=RATE, window=WINDOW, max_seconds=150,
            max_records=500_000, label="fault", value_size=95, flush_seconds=90,
            # Small batches: a partition has several requests in flight, so they spread over several WAL
            # segments and a failed segment is often followed by one that succeeds (the sequence-gap
            # recovery path); "eos" debug: idempotence state changes (sequence recovery, epoch bumps)
            # to stderr, for the report.
            config={"batch.num.messages": 4, "message.timeout.ms": 60000, "retry.backoff.max.ms": 1000,
                    "debug": "eos"},
        )
        self.consumed = Consumed()
        self._stop_consumer = threading.Event()
        self._consumer = threading.Thread(target=self._consume, name="consumer", daemon=True)
        self._consumer.start()

    def _consume(self) -> None:
        consumer = confluent_consumer(self.broker.bootstrap, **{"fetch.wait.max.ms": 200})
        try:
            consumer.assign([TopicPartition(self.topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
            while not self._stop_consumer.is_set():
                for msg in consumer.consume(num_messages=2000, timeout=0.3):
                    if msg.error():
                        self.consumed.errors.append(str(msg.error()))
                    else:
                        self.consumed.records.append((msg.partition(), msg.offset(), seq_of_rec_id(msg)))
        finally:
            consumer.close()

    def acks(self) -> int:
        return len(self.producer.acked())

    def producer_log(self, chars: int = 3000) -> str:
        """The producer's stderr without librdkafka's routine debug lines (sequence recovery kept)."""
        lines = self.producer.err_path.read_text(errors="replace").splitlines()
        kept = [line for line in lines if not line.startswith("%7|") or "|ERRSEQ|" in line]
        return "\n".join(kept)[-chars:]

    def wait_acks(self, count: int, what: str) -> int:
        """Wait until ``count`` ids are acknowledged; fail with the producer's stderr if not."""
        n = self.producer.wait_for_acks(count, WAIT_S)
        assert n >= count, (
            f"{what}: {n} of {count} acks within {WAIT_S}s (producer rc={self.producer.proc.poll()})\n"
            f"producer stderr: {self.producer_log()}\n{self.broker.log_tail(40)}"
        )
        return n

    def stop_producer(self) -> dict[str, Any]:
        """Stop producing, let the producer flush; its summary."""
        return self.producer.stop(120, check=False)

    def stop_consumer(self, highs: list[int]) -> None:
        """Let the consumer reach the high watermarks ``highs``, then stop it."""
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            got = [0] * PARTITIONS
            for p, o, _ in list(self.consumed.records):
                got[p] = max(got[p], o + 1)
            if all(g >= h for g, h in zip(got, highs, strict=True)):
                break
            time.sleep(0.2)
        self._stop_consumer.set()
        self._consumer.join(30)

    def close(self) -> None:
        self.producer.kill()
        self._stop_consumer.set()
        self._consumer.join(30)


def seq_of_rec_id(msg: Any) -> int | None:
    for name, value in msg.headers() or ():
        if name == "seq" and value is not None and value.isdigit():
            return int(value)
    return None


@dataclass
class FaultCase:
    """One failure: ``on``/``off`` switch it, ``fired`` says from two scrapes that it really happened."""

    on: Callable[[], None]
    off: Callable[[], None]
    fired: Callable[[Samples, Samples], bool]
    describe: str


def run_fault_case(broker: BrokerProcess, metrics_port: int, case: FaultCase, work: Path) -> None:
    """Load before, during and after the fault; then compare everything acknowledged with the topic."""
    topic = f"faults-{uuid.uuid4().hex[:8]}"
    create_diskless_topic(broker.bootstrap, topic, partitions=PARTITIONS)
    load = Load(broker, topic, work)
    try:
        load.wait_acks(WARMUP_ACKS, "before the fault")
        before = scrape(metrics_port)
        acks_at_fault = load.acks()
        case.on()
        fault_deadline = time.monotonic() + FAULT_S
        fired_deadline = time.monotonic() + WAIT_S
        during = scrape(metrics_port)
        while time.monotonic() < fault_deadline or (
            not case.fired(before, during) and time.monotonic() < fired_deadline
        ):
            time.sleep(0.25)
            during = scrape(metrics_port)
        acks_in_fault = load.acks() - acks_at_fault
        case.off()
        assert case.fired(before, during), f"{case.describe}: the fault never fired (metrics unchanged)"
        cleared_at = load.acks()
        load.wait_acks(cleared_at + RECOVERY_ACKS, f"after clearing {case.describe}")
        summary = load.stop_producer()
        assert summary["rc"] == 0 and not summary.get("fatal") and summary.get("failed") == 0, (
            f"{case.describe}: producer {summary}\nstderr: {load.producer_log()}\n{broker.log_tail(40)}"
        )
        highs = [high for _, high in watermarks(broker.bootstrap, topic, range(PARTITIONS)).values()]
        load.stop_consumer(highs)
    finally:
        load.close()
    assert broker.is_running(), f"broker died: {broker.log_tail(60)}"
    assert topic in admin_client(broker.bootstrap).list_topics(timeout=10).topics  # Metadata still served
    acked = load.producer.acked()
    total = sum(highs)
    throughout = check_acked_ids(load.consumed.records, acked, range(PARTITIONS))
    fresh = confluent_consume(broker.bootstrap, topic, range(PARTITIONS), total, timeout=WAIT_S, settle=0.5)
    fresh_check = check_acked_ids(id_records(fresh), acked, range(PARTITIONS))
    problems = [f"consumer running throughout: {p}" for p in throughout.problems]
    problems += [f"fresh read: {p}" for p in fresh_check.problems]
    stored_not_acked = throughout.stored_not_acked
    after = scrape(metrics_port)
    debug = load.producer.err_path.read_text(errors="replace")
    report = (
        f"{case.describe}: {len(acked)} acked ({acks_in_fault} while the fault was on), {total} in the topic, "
        f"{stored_not_acked} stored but never acknowledged; producer errors {summary.get('errors')}, "
        f"{debug.count('|ERRSEQ|')} OUT_OF_ORDER_SEQUENCE answers recovered from, "
        f"{debug.count('-> DrainBump')} epoch bumps; broker: "
        f"upload errors {metric(after, 'kafka_diskless_object_upload_errors_total'):.0f}, "
        f"commit errors {metric(after, 'kafka_diskless_commit_errors_total'):.0f}; "
        f"consumer errors {load.consumed.errors[:3]}"
    )
    print(report)
    assert not problems, report + "\n  " + "\n  ".join(problems)
    assert stored_not_acked == 0, report  # the producer flushed: everything stored was acknowledged


def grew(name: str) -> Callable[[Samples, Samples], bool]:
    return lambda before, during: metric(during, name) > metric(before, name)


# ----------------------------------------------------------------------------------------------- tests


@pytest.fixture
def faulty_broker(broker_factory: BrokerFactory, tmp_path: Path) -> Iterator[tuple[BrokerProcess, int, Path, Path]]:
    """A broker on local storage behind both fault wrappers: (broker, metrics port, storage and coordinator
    control files)."""
    storage_control, coordinator_control = tmp_path / "storage-faults.json", tmp_path / "coordinator-faults.json"
    objects = tmp_path / "objects"
    objects.mkdir()
    port = free_port()
    broker = broker_factory(
        storage_url=f"faulty+file://{objects}?control={storage_control}",
        overrides={
            "metrics.http.port": port,
            "diskless.coordinator.fault.control.file": coordinator_control,
            # Short segments: a producer's pipelined requests spread over several segments in flight, so a
            # failed segment is often followed by one that succeeds (the idempotence ordering case).
            "diskless.append.commit.interval.ms": COMMIT_INTERVAL_MS,
        },
    )
    yield broker, port, storage_control, coordinator_control


def storage_fault(control: Path, **faults: Fault) -> Callable[[], None]:
    return lambda: storage_faults.write_control_file(control, faults, seed=7)


def coordinator_fault(control: Path, **faults: Fault) -> Callable[[], None]:
    return lambda: coordinator_faults.write_control_file(control, faults, seed=7)


def removed(path: Path) -> Callable[[], None]:
    return lambda: path.unlink(missing_ok=True)


def slow_uploads_seen(before: Samples, during: Samples) -> bool:
    """Uploads slower than a second appeared (the injected 2 s latency is in force)."""
    name = "kafka_diskless_object_upload_time_seconds"

    def slow(samples: Samples) -> float:
        return metric(samples, f"{name}_count") - metric(samples, f"{name}_bucket", le="1.0")

    return slow(during) > slow(before)


CASES = {
    "storage-down": lambda s, c: FaultCase(
        storage_fault(s, upload=Fault(failure_rate=1.0)), removed(s),
        grew("kafka_diskless_object_upload_errors_total"), "object storage down (every upload fails)",
    ),
    "storage-flaky": lambda s, c: FaultCase(
        storage_fault(s, all=Fault(failure_rate=0.3)), removed(s),
        grew("kafka_diskless_object_upload_errors_total"), "object storage flaky (30% of all calls fail)",
    ),
    "storage-slow": lambda s, c: FaultCase(
        storage_fault(s, upload=Fault(latency_ms=2000)), removed(s),
        slow_uploads_seen, "object storage slow (2 s per upload)",
    ),
    "upload-answer-lost": lambda s, c: FaultCase(
        storage_fault(s, upload=Fault(failure_rate=1.0, after=True)), removed(s),
        grew("kafka_diskless_object_upload_errors_total"), "uploads stored but answered with an error",
    ),
    "coordinator-down": lambda s, c: FaultCase(
        coordinator_fault(c, commit_file=Fault(failure_rate=1.0)), removed(c),
        grew("kafka_diskless_commit_errors_total"), "batch coordinator down (every commit fails)",
    ),
    "commit-answer-lost": lambda s, c: FaultCase(
        coordinator_fault(c, commit_file=Fault(failure_rate=1.0, after=True)), removed(c),
        grew("kafka_diskless_commit_errors_total"), "commits done but answered with an error (ambiguous)",
    ),
}


@pytest.mark.timeout(240)
@pytest.mark.parametrize("case", list(CASES))
def test_no_acknowledged_record_lost_or_duplicated(
    case: str, faulty_broker: tuple[BrokerProcess, int, Path, Path], tmp_path: Path
) -> None:
    broker, port, storage_control, coordinator_control = faulty_broker
    run_fault_case(broker, port, CASES[case](storage_control, coordinator_control), tmp_path)
    if case == "upload-answer-lost":
        # Each failed upload left an object nobody committed (an orphan for the GC); nothing else is extra.
        samples = scrape(port)
        files = [p for p in (tmp_path / "objects" / "wal").iterdir() if p.is_file()]
        orphans = metric(samples, "kafka_diskless_object_upload_errors_total")
        assert len(files) == metric(samples, "kafka_diskless_commits_total") + orphans
        assert orphans > 0


@pytest.mark.timeout(240)
def test_s3_server_frozen_and_back(broker_factory: BrokerFactory, moto_s3: Any, s3_bucket: str,
                                   tmp_path: Path) -> None:
    """The real moto S3 server stops answering (SIGSTOP: connections hang) for a few seconds."""
    port = free_port()
    url = moto_s3.storage_url(s3_bucket, "diskless", connect_timeout="1", request_timeout="2", retry_timeout="3",
                              max_retries="1")
    broker = broker_factory("s3-broker", storage_url=url, env=moto_s3.client_env(),
                            overrides={"metrics.http.port": port,
                                       "diskless.append.commit.interval.ms": COMMIT_INTERVAL_MS})
    case = FaultCase(moto_s3.pause, moto_s3.resume, grew("kafka_diskless_object_upload_errors_total"),
                     "moto S3 server frozen")
    try:
        run_fault_case(broker, port, case, tmp_path)
    finally:
        moto_s3.resume()


@pytest.mark.timeout(120)
def test_consumer_reads_everything_through_failing_object_reads(broker_factory: BrokerFactory,
                                                                tmp_path: Path) -> None:
    """Object GETs fail for a few seconds while a consumer reads directly from object storage (no
    range cache, so every read is a GET; the broker's cache replica was dropped and restarts at the
    log end, so the records are older than it): it still gets every record exactly once, in
    order, and the broker stays up."""
    control = tmp_path / "storage-faults.json"
    objects = tmp_path / "objects"
    objects.mkdir()
    broker = broker_factory(storage_url=f"faulty+file://{objects}?control={control}",
                            overrides={"diskless.fetch.cache.max.bytes": 0, "diskless.replica.cache.start.bytes": 0})
    topic = f"reads-{uuid.uuid4().hex[:8]}"
    create_diskless_topic(broker.bootstrap, topic, partitions=2)
    sent = make_workload(3000, 2, "reads", seed=5)
    confluent_produce(broker.bootstrap, topic, sent)
    broker.stop()
    shutil.rmtree(broker.log_dir / "diskless-cache")
    broker.start()
    storage_faults.write_control_file(control, {"fetch": Fault(failure_rate=1.0)})
    healer = threading.Timer(FAULT_S, control.unlink)
    healer.start()
    try:
        received = confluent_consume(broker.bootstrap, topic, [0, 1], len(sent), timeout=WAIT_S,
                                     config={"max.partition.fetch.bytes": 16 * 1024})
    finally:
        healer.cancel()
        control.unlink(missing_ok=True)
    check_records(received, sent)
    assert broker.is_running()
    assert "injected fetch failure" in broker.log_path.read_text(), "no object read failed: the test proved nothing"
