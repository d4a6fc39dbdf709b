"""Jepsen-style exactly-once: a consume-transform-produce loop (read topic A, write topic B in
transactions together with the consumer's offsets) runs as its own process on a three-broker
cluster while the test SIGKILLs, in turn, the loop's process, the broker coordinating its
transactional id, and the leader of a partition it reads (and, with a classic B, writes). B is
classic (replicated, RF 3) or diskless: one transaction then spans a classic partition of A's
offsets and diskless partitions. Afterwards B holds each record of A
exactly once: no torn transaction (a record of A missing from B although its offset was
committed) and no aborted read (a record of B that a read_committed consumer sees twice or that
no record of A explains). Bounded in time: the loop is stopped within the test's timeout.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import NewTopic

from shoal.cluster.placement import partition_owner
from shoal.protocol.key_partitions import transaction_partition
from tests.integration.conftest import _test_failed
from tests.support.broker import support_module_env
from tests.support.cluster import Cluster
from tests.support.kafka_clients import admin_client, create_diskless_topic, wait_for_topic

SOURCE, SINK, GROUP, TXN_ID = "eos-in", "eos-out", "eos-group", "eos-loop"
PARTITIONS = 3
RECORDS = 3000


@pytest.fixture
def cluster(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Cluster]:
    c = Cluster(
        tmp_path / "cluster", 3,
        overrides={"transaction.abort.timed.out.transaction.cleanup.interval.ms": 1000},
    ).start()
    yield c
    if _test_failed(request):
        print(c.log_tails())
    c.close()


class Supervisor(threading.Thread):
    """Keeps one loop process running (a new one after each exit or kill) until stopped."""

    def __init__(self, bootstrap: str, log_dir: Path) -> None:
        super().__init__(daemon=True)
        self.bootstrap = bootstrap
        self.log_dir = log_dir
        self.stop = threading.Event()
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self.lock = threading.Lock()

    def run(self) -> None:
        while not self.stop.is_set():
            with self.lock:
                if self.stop.is_set():
                    return
                self.starts += 1
                log = open(self.log_dir / f"loop-{self.starts}.log", "wb")  # noqa: SIM115 - closed below
                self.proc = subprocess.Popen(
                    [sys.executable, "-m", "tests.support.eos_loop", self.bootstrap, SOURCE, SINK, GROUP, TXN_ID],
                    stdout=log, stderr=subprocess.STDOUT, env=support_module_env(),
                )
            self.proc.wait()
            log.close()
            time.sleep(0.5)

    def kill(self) -> None:
        with self.lock:
            if self.proc is not None and self.proc.poll() is None:
                self.proc.kill()

    def shutdown(self) -> None:
        self.stop.set()
        self.kill()
        self.join(30)


def committed_offsets(bootstrap: str) -> list[int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP, "enable.auto.commit": False})
    try:
        offsets = consumer.committed([TopicPartition(SOURCE, p) for p in range(PARTITIONS)], timeout=10)
        return [max(tp.offset, 0) for tp in offsets]
    finally:
        consumer.close()


def committed_total(bootstrap: str) -> int:
    return sum(committed_offsets(bootstrap))


def sink_layout(bootstrap: str) -> str:
    """Each sink partition read uncommitted, as runs of source records by offset
    (``p2 @201: r-00602..r-00998 x200``): where a record went missing, for a failed check."""
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"layout-{time.monotonic_ns()}",
        "isolation.level": "read_uncommitted", "enable.auto.commit": False,
    })
    consumer.assign([TopicPartition(SINK, p, 0) for p in range(PARTITIONS)])
    runs: dict[int, list[list]] = {p: [] for p in range(PARTITIONS)}
    quiet_until, deadline = time.monotonic() + 3, time.monotonic() + 30
    while time.monotonic() < min(quiet_until, deadline):
        m = consumer.poll(0.2)
        if m is None or m.error():
            continue
        quiet_until = time.monotonic() + 3
        value = (m.value() or b"").decode(errors="replace")
        last = runs[m.partition()][-1] if runs[m.partition()] else None
        if last is not None and last[3] == m.offset() - 1 and _number(value) == _number(last[2]) + PARTITIONS:
            last[2], last[3], last[4] = value, m.offset(), last[4] + 1
        else:
            runs[m.partition()].append([m.offset(), value, value, m.offset(), 1])
    consumer.close()
    return "\n".join(
        f"p{p} @{first}: {a}..{b} x{n}" for p, rs in runs.items() for first, a, b, _, n in rs
    )


def _number(value: str) -> int:
    return int(value[-5:]) if value[-5:].isdigit() else -10


def loop_logs(log_dir: Path) -> str:
    """The loop processes' transactions and errors (their librdkafka debug lines left out)."""
    out = []
    for path in sorted(log_dir.glob("loop-*.log")):
        lines = path.read_text(errors="replace").splitlines()
        kept = [ln for ln in lines if not ln.startswith("%7|")]
        out.append(f"--- {path.name}: {len(lines)} lines, last transactions and errors:")
        out.extend(kept[-40:])
    return "\n".join(out)


def read_sink(bootstrap: str) -> list[bytes]:
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"checker-{time.monotonic_ns()}", "isolation.level": "read_committed",
        "enable.auto.commit": False, "auto.offset.reset": "earliest",
    })
    consumer.assign([TopicPartition(SINK, p, 0) for p in range(PARTITIONS)])
    got: list[bytes] = []
    quiet_until, deadline = time.monotonic() + 5, time.monotonic() + 90
    while time.monotonic() < min(quiet_until, deadline):
        m = consumer.poll(0.2)
        if m is None or m.error():
            continue
        got.append(m.value())
        quiet_until = time.monotonic() + 5
    consumer.close()
    return got


@pytest.mark.timeout(420)
@pytest.mark.parametrize("sink_kind", ["classic", "diskless"])
def test_consume_transform_produce_is_exactly_once_through_sigkills(
    cluster: Cluster, tmp_path: Path, sink_kind: str
) -> None:
    admin = admin_client(cluster.bootstrap)
    admin.create_topics([NewTopic(SOURCE, PARTITIONS, 3)], operation_timeout=30)[SOURCE].result(30)
    wait_for_topic(admin, SOURCE, PARTITIONS)
    if sink_kind == "diskless":
        create_diskless_topic(cluster.bootstrap, SINK, partitions=PARTITIONS)
    else:
        admin.create_topics([NewTopic(SINK, PARTITIONS, 3)], operation_timeout=30)[SINK].result(30)
        wait_for_topic(admin, SINK, PARTITIONS)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "enable.idempotence": True, "linger.ms": 5})
    for i in range(RECORDS):
        producer.produce(SOURCE, value=f"r-{i:05d}".encode(), partition=i % PARTITIONS)
    assert producer.flush(60) == 0

    coordinator = partition_owner(transaction_partition(TXN_ID, 50), [1, 2, 3], [1, 2, 3])
    assert coordinator is not None
    sink_leader = next(n for n in (1, 2, 3) if n != coordinator)  # a leader that is not also the coordinator
    loop = Supervisor(cluster.bootstrap, tmp_path)
    loop.start()
    try:
        def progress_past(n: int, timeout: float = 90) -> None:
            deadline = time.monotonic() + timeout
            while committed_total(cluster.bootstrap) < n:
                assert time.monotonic() < deadline, f"the loop did not commit {n} offsets in {timeout}s"
                time.sleep(0.5)

        progress_past(300)
        loop.kill()  # the loop itself, mid-transaction most likely
        progress_past(900)
        cluster.broker(coordinator).kill()  # its transaction coordinator
        time.sleep(3)
        cluster.broker(coordinator).start()
        progress_past(1800)
        cluster.broker(sink_leader).kill()  # a partition leader (of the sink and the source)
        time.sleep(3)
        cluster.broker(sink_leader).start()
        progress_past(RECORDS, timeout=150)
    finally:
        loop.shutdown()
    produced = [f"out:r-{i:05d}".encode() for i in range(RECORDS)]
    seen = Counter(read_sink(cluster.bootstrap))
    torn = [v for v in produced if seen[v] == 0]
    duplicated = {v: n for v, n in seen.items() if n > 1}
    unexplained = [v for v in seen if v not in set(produced)]
    print(f"{sink_kind} sink: loop processes: {loop.starts}; torn: {len(torn)}; duplicated: {len(duplicated)}; unexplained: {len(unexplained)}")
    if torn or duplicated or unexplained:
        committed = committed_offsets(cluster.bootstrap)
        print(f"committed offsets: {committed}\nsink read uncommitted:\n{sink_layout(cluster.bootstrap)}")
        print(loop_logs(tmp_path))
    assert loop.starts >= 2
    assert not torn, f"{len(torn)} committed records of the source never reached the sink: {torn[:5]}"
    assert not duplicated, f"{len(duplicated)} records read twice (aborted reads): {list(duplicated.items())[:5]}"
    assert not unexplained, unexplained[:5]
