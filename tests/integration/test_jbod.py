"""JBOD log dirs (KIP-112/KIP-113): a broker with two log dirs loses one and keeps serving the other.

What an operator sees is checked the way an operator sees it: ``shoal log-dirs describe``
(DescribeLogDirs), ``shoal topics describe`` (Metadata's offline replicas), the Prometheus
``/metrics`` page (Kafka's OfflineLogDirectoryCount / OfflineReplicaCount), and clients getting
KAFKA_STORAGE_ERROR for the partitions of the failed dir. A dir failing at run time is a FUSE
pass-through (tests/support/failfs.py, the ``failing_disk`` fixture) that answers EIO once told to.

The metadata (shoal.db) lives in its own ``metadata.log.dir``: by default it would sit in the
first log dir, and these tests are about losing log dirs, not the metadata.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.support.acked_producer import AckedProducer, check_acked, consume_all
from tests.support.broker import BrokerProcess, free_port, run_shoal, wait_until
from tests.support.classic_logs import create_classic_topic, partition_dirs
from tests.support.failfs import FailingDisk
from tests.support.kafka_clients import confluent_consume, confluent_produce
from tests.support.metrics import metric, scrape
from tests.support.wire_requests import (
    KAFKA_STORAGE_ERROR,
    wire_fetch,
    wire_list_offset,
    wire_offline_replicas,
    wire_produce,
)
from tests.support.workload import check_records, make_workload

STORAGE_EXCEPTION = "org.apache.kafka.common.errors.KafkaStorageException"  # what kafka-log-dirs.sh prints


# ------------------------------------------------------------------------------------ helpers


def jbod_broker(
    make: Callable[..., BrokerProcess], root: Path, log_dirs: Sequence[Path], metrics_port: int
) -> BrokerProcess:
    """A broker on several log dirs, its metadata apart, serving /metrics."""
    return make(
        "jbod",
        overrides={
            "log.dirs": ",".join(str(d) for d in log_dirs),
            "metadata.log.dir": str(root / "metadata"),
            "metrics.http.port": metrics_port,
            "metrics.http.host": "127.0.0.1",
        },
    )


def effective_properties(broker: BrokerProcess) -> Path:
    """server.properties with the test's overrides folded in: what ``reset --config`` reads."""
    path = broker.data_dir / "effective.properties"
    props = {**broker.properties(), **broker.overrides}
    path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    return path


def offline_gauges(port: int) -> tuple[float, float]:
    """Kafka's two KIP-112 gauges: (offline log dirs, offline replicas)."""
    m = scrape(port)
    return metric(m, "kafka_log_logmanager_offlinelogdirectorycount"), metric(
        m, "kafka_server_replicamanager_offlinereplicacount"
    )


def describe_log_dirs(bootstrap: str, topic: str | None = None) -> dict[str, dict[str, Any]]:
    """``shoal log-dirs describe`` (Kafka's JSON on its last line) as log dir -> entry."""
    args = ["log-dirs", "describe", "--bootstrap-server", bootstrap]
    if topic is not None:
        args += ["--topic-list", topic]
    out = run_shoal(*args)
    assert out.returncode == 0, f"log-dirs describe exited {out.returncode}: {out.stdout}{out.stderr}"
    lines = out.stdout.strip().splitlines()
    assert lines[0] == "Querying brokers for log directories information", lines
    assert lines[1] == "Received log directory information from brokers 1", lines
    doc = json.loads(lines[-1])
    assert doc["version"] == 1 and [b["broker"] for b in doc["brokers"]] == [1], doc
    return {d["logDir"]: d for d in doc["brokers"][0]["logDirs"]}


def placement(bootstrap: str, topic: str) -> dict[int, str]:
    """Partition -> the log dir DescribeLogDirs says holds its current replica."""
    where: dict[int, str] = {}
    for log_dir, entry in describe_log_dirs(bootstrap, topic).items():
        for p in entry["partitions"]:
            if not p["isFuture"]:
                where[int(p["partition"].rsplit("-", 1)[1])] = log_dir
    return where


def offline_in_topics_describe(bootstrap: str, topic: str) -> dict[int, str]:
    """Partition -> its ``Offline:`` replicas in ``shoal topics describe`` (Metadata OfflineReplicas).

    ``--timeout 1000``: the tool also asks ListOffsets, which retries KAFKA_STORAGE_ERROR of the
    offline partitions until its timeout (twice) before printing ``-`` for their offsets."""
    out = run_shoal(
        "topics", "describe", "--bootstrap-server", bootstrap, "--topic", topic, "--timeout", "1000"
    )
    assert out.returncode == 0, f"topics describe exited {out.returncode}: {out.stdout}{out.stderr}"
    offline: dict[int, str] = {}
    for line in out.stdout.splitlines():
        fields = dict(f.split(": ", 1) for f in line.strip().split("\t") if ": " in f)
        if "Partition" in fields and "Offline" in fields:
            offline[int(fields["Partition"])] = fields["Offline"]
    return offline


def storage_errors(port: int, topic: str, partitions: Sequence[int]) -> dict[int, tuple[int, int, int]]:
    """Produce, Fetch and ListOffsets error codes of each partition."""
    return {
        p: (
            wire_produce(port, topic, p, [(b"k", b"probe")])[0],
            wire_fetch(port, topic, p, 0)[0],
            wire_list_offset(port, topic, p, -1)[0],
        )
        for p in partitions
    }


def split_by_dir(where: dict[int, str], log_dir: Path) -> tuple[list[int], list[int]]:
    """(partitions in ``log_dir``, the others)."""
    inside = sorted(p for p, d in where.items() if d == str(log_dir))
    return inside, sorted(p for p in where if p not in inside)


# ------------------------------------------------------------------------------------ tests


@pytest.mark.timeout(180)
def test_log_dir_that_is_a_file_at_startup(broker_factory: Any, topic_name: str, tmp_path: Path) -> None:
    """One of two log dirs is a regular file when the broker starts: the broker starts, the other
    dir's partitions work, the lost ones answer KAFKA_STORAGE_ERROR and show as offline in
    Metadata, DescribeLogDirs and the gauges; with the disk back, everything is served again."""
    disk_a, disk_b = tmp_path / "disk-a", tmp_path / "disk-b"
    metrics_port = free_port()
    broker = jbod_broker(broker_factory, tmp_path, [disk_a, disk_b], metrics_port)
    create_classic_topic(broker.bootstrap, topic_name, 4)
    ts = int(time.time() * 1000) - 60_000
    sent = make_workload(2_000, 4, "jbod-file", seed=81, base_timestamp=ts)
    confluent_produce(broker.bootstrap, topic_name, sent)
    on_b, on_a = split_by_dir(placement(broker.bootstrap, topic_name), disk_b)
    assert on_a and on_b, f"partitions not spread over both dirs: a {on_a}, b {on_b}"
    assert offline_gauges(metrics_port) == (0, 0)

    broker.stop()
    saved = tmp_path / "disk-b.saved"
    disk_b.rename(saved)
    disk_b.write_text("a regular file where a log dir should be\n")
    refused = run_shoal(
        "log-dirs", "reset", "--dir", str(disk_b), "--config", str(effective_properties(broker))
    )
    assert refused.returncode == 1 and "is not a directory" in refused.stderr, refused
    broker.start()

    assert broker.is_running()
    extra = make_workload(1_000, 4, "jbod-file-2", seed=82, base_timestamp=ts + 10_000, first_seq=10_000)
    extra = [s for s in extra if s.partition in on_a]
    confluent_produce(broker.bootstrap, topic_name, extra)
    on_a_sent = [s for s in sent if s.partition in on_a] + extra
    check_records(confluent_consume(broker.bootstrap, topic_name, on_a, len(on_a_sent)), on_a_sent)

    assert storage_errors(broker.port, topic_name, on_b) == dict.fromkeys(on_b, (KAFKA_STORAGE_ERROR,) * 3)
    assert offline_in_topics_describe(broker.bootstrap, topic_name) == dict.fromkeys(on_b, "1")
    assert wire_offline_replicas(broker.port, topic_name) == dict.fromkeys(on_b, (1,))
    dirs = describe_log_dirs(broker.bootstrap)
    assert dirs[str(disk_b)]["error"] == STORAGE_EXCEPTION and dirs[str(disk_b)]["partitions"] == []
    assert dirs[str(disk_b)]["totalBytes"] is None and dirs[str(disk_b)]["usableBytes"] is None
    assert dirs[str(disk_a)]["error"] is None and dirs[str(disk_a)]["totalBytes"] > 0
    assert {p["partition"] for p in dirs[str(disk_a)]["partitions"]} == {f"{topic_name}-{p}" for p in on_a}
    assert offline_gauges(metrics_port) == (1, len(on_b))

    # The disk comes back with its data (it was only unplugged): no reset needed, nothing lost.
    broker.stop()
    disk_b.unlink()
    saved.rename(disk_b)
    broker.start()
    assert offline_gauges(metrics_port) == (0, 0)
    assert wire_offline_replicas(broker.port, topic_name) == {}
    check_records(
        confluent_consume(broker.bootstrap, topic_name, range(4), len(sent) + len(extra)), sent + extra
    )


@pytest.mark.timeout(300)
def test_log_dir_failing_at_run_time_then_replaced_and_reset(
    failing_disk: FailingDisk, broker_factory: Any, topic_name: str, tmp_path: Path
) -> None:
    """A log dir on a disk that starts answering EIO under load. The broker stays up; the other
    dir's partitions keep taking an idempotent producer's records and serving them, with nothing
    lost; the failed dir's partitions answer KAFKA_STORAGE_ERROR and show as offline everywhere.
    The disk is then replaced by an empty one: at restart its partitions stay offline (never
    re-created empty behind the operator's back) until ``shoal log-dirs reset``, after which
    they are served again, empty."""
    disk_a, disk_b = tmp_path / "disk-a", failing_disk.mount_point
    metrics_port = free_port()
    broker = jbod_broker(broker_factory, tmp_path, [disk_a, disk_b], metrics_port)
    failing_disk.before_unmount.append(broker.close)
    create_classic_topic(broker.bootstrap, topic_name, 4)
    on_b, on_a = split_by_dir(placement(broker.bootstrap, topic_name), disk_b)
    assert on_a and on_b, f"partitions not spread over both dirs: a {on_a}, b {on_b}"
    doomed = [s for s in make_workload(1_000, 4, "doomed", seed=91) if s.partition in on_b]
    confluent_produce(broker.bootstrap, topic_name, doomed)

    producer = AckedProducer(tmp_path / "producer", broker.bootstrap, topic_name, on_a, max_seconds=200)
    try:
        producer.expect_acks(3_000, 60, "before the failure")
        failing_disk.fail()
        # The broker learns of the failure at its next I/O there: a produce to one of its partitions.
        wait_until(
            "the failed dir's partitions answering KAFKA_STORAGE_ERROR",
            lambda: all(
                wire_produce(broker.port, topic_name, p, [(b"k", b"x")])[0] == KAFKA_STORAGE_ERROR
                for p in on_b
            ),
            timeout=30,
        )
        at_failure = len(producer.acked())
        producer.expect_acks(
            at_failure + 3_000, 60, f"the healthy dir stopped taking records ({at_failure} at the failure)"
        )
        assert broker.is_running(), "the broker stopped when one of its two log dirs failed"
        assert storage_errors(broker.port, topic_name, on_b) == dict.fromkeys(
            on_b, (KAFKA_STORAGE_ERROR,) * 3
        )
        assert wire_offline_replicas(broker.port, topic_name) == dict.fromkeys(on_b, (1,))
        dirs = describe_log_dirs(broker.bootstrap)
        assert dirs[str(disk_b)]["error"] == STORAGE_EXCEPTION and dirs[str(disk_b)]["partitions"] == []
        assert dirs[str(disk_a)]["error"] is None
        assert offline_gauges(metrics_port) == (1, len(on_b))
        summary = producer.stop()
    finally:
        producer.kill()
    received = consume_all(broker.bootstrap, topic_name, on_a)
    print(
        check_acked(received, producer.acked(), on_a), f"(at the failure: {at_failure}); producer: {summary}"
    )

    # The disk is replaced: the broker is stopped, the dead disk unmounted, an empty one in its place.
    rc = broker.stop()
    assert rc == 0, f"the broker did not stop cleanly with a failed log dir: exit {rc}\n{broker.log_tail()}"
    failing_disk.unmount()
    assert disk_b.is_dir() and not any(disk_b.iterdir()), "the replacement disk is not empty"
    broker.start()
    assert storage_errors(broker.port, topic_name, on_b) == dict.fromkeys(on_b, (KAFKA_STORAGE_ERROR,) * 3)
    assert sorted(partition_dirs([disk_a, disk_b], topic_name)) == on_a, (
        "lost partitions were re-created empty"
    )
    assert offline_in_topics_describe(broker.bootstrap, topic_name) == dict.fromkeys(on_b, "1")
    assert wire_offline_replicas(broker.port, topic_name) == dict.fromkeys(on_b, (1,))
    dirs = describe_log_dirs(broker.bootstrap)
    assert dirs[str(disk_b)]["error"] is None and dirs[str(disk_b)]["partitions"] == []
    assert offline_gauges(metrics_port) == (0, len(on_b))

    props = effective_properties(broker)
    running = run_shoal("log-dirs", "reset", "--dir", str(disk_b), "--config", str(props))
    assert running.returncode == 1 and "still running" in running.stderr, running
    wrong = run_shoal(
        "log-dirs", "reset", "--dir", str(tmp_path / "elsewhere"), "--log-dirs", f"{disk_a},{disk_b}"
    )
    assert wrong.returncode == 1 and "is not one of the broker's log.dirs" in wrong.stderr, wrong
    broker.stop()
    reset = run_shoal("log-dirs", "reset", "--dir", str(disk_b), "--config", str(props))
    assert reset.returncode == 0, reset
    assert "Start the broker" in reset.stdout
    marker = disk_b / ".shoal-log-dir-reset"
    assert marker.exists()
    broker.start()

    assert not marker.exists(), "the broker did not consume the reset marker"
    assert offline_gauges(metrics_port) == (0, 0)
    assert wire_offline_replicas(broker.port, topic_name) == {}
    for p in on_b:
        assert wire_list_offset(broker.port, topic_name, p, -2) == (0, 0), "a reset partition is not empty"
        assert wire_produce(broker.port, topic_name, p, [(b"k", b"reborn")]) == (0, 0)
    where = placement(broker.bootstrap, topic_name)
    assert sorted(where) == [0, 1, 2, 3], where
    assert all(error is None for error in (d["error"] for d in describe_log_dirs(broker.bootstrap).values()))
    check_acked(consume_all(broker.bootstrap, topic_name, on_a), producer.acked(), on_a)


@pytest.mark.timeout(180)
def test_move_partition_between_log_dirs_while_producing(
    broker_factory: Any, topic_name: str, tmp_path: Path
) -> None:
    """AlterReplicaLogDirs (``shoal log-dirs move``) while an idempotent producer writes to the
    partition: the move completes, no acknowledged record is lost or doubled, DescribeLogDirs and
    the file system show the partition in the new dir only, and it stays there after a restart."""
    disk_a, disk_b = tmp_path / "disk-a", tmp_path / "disk-b"
    broker = jbod_broker(broker_factory, tmp_path, [disk_a, disk_b], free_port())
    create_classic_topic(broker.bootstrap, topic_name, 1, {"internal.segment.bytes": str(256 * 1024)})
    source = Path(placement(broker.bootstrap, topic_name)[0])
    dest = disk_b if source == disk_a else disk_a
    nowhere = run_shoal(
        "log-dirs",
        "move",
        "--bootstrap-server",
        broker.bootstrap,
        "--topic",
        topic_name,
        "--partition",
        "0",
        "--dir",
        str(tmp_path / "not-a-log-dir"),
    )
    assert nowhere.returncode == 1 and "LOG_DIR_NOT_FOUND" in nowhere.stderr, nowhere
    unknown = run_shoal(
        "log-dirs", "describe", "--bootstrap-server", broker.bootstrap, "--broker-list", "1,7"
    )
    assert unknown.returncode == 1 and "do not exist from --broker-list: 7" in unknown.stderr, unknown
    producer = AckedProducer(
        tmp_path / "producer",
        broker.bootstrap,
        topic_name,
        [0],
        max_seconds=150,
        config={"batch.size": 64 * 1024},
    )  # batches must fit in a 256 KiB segment
    try:
        producer.expect_acks(5_000, 60, "before the move")
        moved = run_shoal(
            "log-dirs",
            "move",
            "--bootstrap-server",
            broker.bootstrap,
            "--topic",
            topic_name,
            "--partition",
            "0",
            "--dir",
            str(dest),
            "--wait",
            "--timeout",
            "60000",
            timeout=90,
        )
        assert moved.returncode == 0, f"move exited {moved.returncode}: {moved.stdout}{moved.stderr}"
        assert f"Moved {topic_name}-0 to {dest} on broker 1." in moved.stdout
        n = len(producer.acked())
        producer.expect_acks(n + 3_000, 60, "after the move")
        summary = producer.stop()
    finally:
        producer.kill()
    received = consume_all(broker.bootstrap, topic_name, [0])
    print(check_acked(received, producer.acked(), [0]), f"; producer: {summary}")
    dirs = describe_log_dirs(broker.bootstrap, topic_name)
    assert dirs[str(dest)]["partitions"] == [
        {
            "partition": f"{topic_name}-0",
            "size": dirs[str(dest)]["partitions"][0]["size"],
            "offsetLag": 0,
            "isFuture": False,
        }
    ], dirs
    assert dirs[str(source)]["partitions"] == [], dirs
    assert dirs[str(dest)]["partitions"][0]["size"] > 0
    assert list(partition_dirs([dest], topic_name)) == [0] and not partition_dirs([source], topic_name)

    broker.restart()
    assert placement(broker.bootstrap, topic_name) == {0: str(dest)}
    check_acked(consume_all(broker.bootstrap, topic_name, [0]), producer.acked(), [0])
