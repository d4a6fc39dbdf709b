#!/usr/bin/env python3
"""Object compaction throughput: MB/s of batches rewritten by ``shoal pipeline compact``.

Prints one JSON document on stdout (progress goes to stderr), in the style of
``bench/spark_read.py``. Phases:

1. ``broker``: without ``--bootstrap`` a throwaway broker is started (``python -m shoal broker``)
   with a short ``diskless.append.commit.interval.ms``, in a temporary data dir.
2. ``produce``: a fresh diskless topic gets ``--records`` records of ``--record-size`` bytes;
   the producer flushes every ``--records-per-flush`` records, so every flush is its own small
   WAL object (what a busy cluster with a short commit interval leaves behind).
3. ``before``: live objects in the coordinator, and a digest of every record read back by a
   librdkafka consumer through the broker.
4. ``compaction``: the job (``shoal.pipeline.compact.compact``) in a local Spark session started
   beforehand (its start-up is reported apart). ``mb_per_s`` = 10^6 bytes of batches rewritten
   (moved to new objects) per second of the whole run (planning, Spark tasks, coordinate swaps).
5. ``after``: live objects again and the consumer's digest, which must match.

Example::

    .venv/bin/python bench/compaction.py --records 100000 --record-size 512 --master 'local[2]'
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import os
import platform
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

MB = 1_000_000
MIB = 1 << 20
REPO = Path(__file__).resolve().parents[1]


def log(msg: str) -> None:
    print(f"[compaction-bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def utc_now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds")


def load_avg() -> dict[str, float]:
    one, five, fifteen = os.getloadavg()
    return {"1m": round(one, 2), "5m": round(five, 2), "15m": round(fifteen, 2)}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Broker:
    """A throwaway single broker with local object storage (stopped with SIGTERM at the end)."""

    def __init__(self, data_dir: Path, commit_interval_ms: int) -> None:
        self.port = free_port()
        self.log_dir = data_dir / "logs"
        self.objects = data_dir / "objects"
        props = data_dir / "server.properties"
        props.write_text(
            f"node.id=1\nlisteners=PLAINTEXT://127.0.0.1:{self.port}\n"
            f"advertised.listeners=PLAINTEXT://127.0.0.1:{self.port}\nlog.dirs={self.log_dir}\n"
            f"diskless.system.enable=true\ndiskless.storage.url=file://{self.objects}\n"
            f"diskless.append.commit.interval.ms={commit_interval_ms}\n"
        )
        env = dict(os.environ, PYTHONPATH=str(REPO / "src"))
        self.log_file = open(data_dir / "broker.log", "wb")  # noqa: SIM115 - lives as long as the broker
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "shoal", "broker", str(props)],
            stdout=self.log_file,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
        deadline = time.monotonic() + 30
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"broker exited with {self.proc.returncode}; see {data_dir / 'broker.log'}"
                )
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError("broker did not start within 30 s") from None
                time.sleep(0.1)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        self.log_file.close()


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    new = NewTopic(topic, num_partitions=partitions, replication_factor=1, config={"diskless.enable": "true"})
    admin.create_topics([new])[topic].result(30)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        md = admin.list_topics(topic=topic, timeout=10).topics.get(topic)
        if md is not None and md.error is None and len(md.partitions) == partitions:
            return
        time.sleep(0.2)
    raise RuntimeError(f"topic {topic} not ready")


def produce(args: argparse.Namespace, bootstrap: str, topic: str) -> dict[str, Any]:
    """Random (incompressible) values, one flush every ``--records-per-flush`` records."""
    from confluent_kafka import Producer

    producer = Producer(
        {"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all", "linger.ms": 0}
    )
    buf = os.urandom(4 * MIB + args.record_size)
    span = len(buf) - args.record_size
    start = time.monotonic()
    for i in range(args.records):
        off = (i * 7919) % span
        producer.produce(
            topic, buf[off : off + args.record_size], key=b"k%d" % i, partition=i % args.partitions
        )
        if i % args.records_per_flush == args.records_per_flush - 1 and producer.flush(60):
            raise RuntimeError("produce: records not delivered")
    if producer.flush(60):
        raise RuntimeError("produce: records not delivered")
    elapsed = time.monotonic() - start
    return {"records": args.records, "bytes": args.records * args.record_size, "elapsed_s": round(elapsed, 3)}


def live_objects(db: str) -> dict[str, int]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        count, size, used = conn.execute(
            "SELECT COUNT(*), COALESCE(SUM(size), 0), COALESCE(SUM(used_size), 0) FROM diskless_files "
            "WHERE state = 'uploaded'"
        ).fetchone()
    finally:
        conn.close()
    return {"live_objects": count, "live_object_bytes": size, "live_used_bytes": used}


def digest(bootstrap: str, topic: str, partitions: int, expected: int, timeout: float) -> dict[str, Any]:
    """SHA-256 over (partition, offset, key, value) of every record, in (partition, offset) order."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "fetch.max.bytes": 52_428_800,
            "max.partition.fetch.bytes": 10_485_760,
        }
    )
    seen: dict[tuple[int, int], bytes] = {}
    start = time.monotonic()
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        while len(seen) < expected and time.monotonic() - start < timeout:
            for msg in consumer.consume(num_messages=10_000, timeout=0.5):
                if msg.error() is None:
                    seen[(msg.partition(), msg.offset())] = hashlib.sha256(
                        (msg.key() or b"") + b"\0" + (msg.value() or b"")
                    ).digest()
    finally:
        consumer.close()
    h = hashlib.sha256()
    for (p, o), d in sorted(seen.items()):
        h.update(b"%d:%d:" % (p, o) + d)
    return {"records": len(seen), "sha256": h.hexdigest(), "elapsed_s": round(time.monotonic() - start, 3)}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bootstrap", help="HOST:PORT of a running broker (default: start a throwaway one)")
    p.add_argument("--metadata-path", help="that broker's shoal.db (with --bootstrap)")
    p.add_argument("--storage-url", help="that broker's diskless.storage.url (with --bootstrap)")
    p.add_argument("--commit-interval-ms", type=int, default=10, help="commit interval of a started broker")
    p.add_argument("--partitions", type=int, default=6)
    p.add_argument("--records", type=int, default=100_000)
    p.add_argument("--record-size", type=int, default=512, help="value bytes per record")
    p.add_argument("--records-per-flush", type=int, default=100, help="records per small object")
    p.add_argument("--target-bytes", type=int, default=16 * MIB, help="the job's output object size")
    p.add_argument("--master", default="local[2]", help="Spark master")
    p.add_argument("--timeout", type=float, default=300.0, help="cap (s) of each consumer read")
    p.add_argument("--output", help="also write the JSON document to this file")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    report: dict[str, Any] = {
        "started_at": utc_now(),
        "host": {
            "hostname": socket.gethostname(),
            "platform": platform.platform(),
            "python": sys.version.split()[0],
        },
        "cpu_count": os.cpu_count(),
        "load_avg": {"start": load_avg()},
        "config": {k: v for k, v in vars(args).items() if k != "output"},
        "ok": False,
    }
    scratch = None
    broker = None
    try:
        if args.bootstrap:
            if not (args.metadata_path and args.storage_url):
                raise ValueError("--bootstrap needs --metadata-path and --storage-url")
            bootstrap, db, storage_url = args.bootstrap, args.metadata_path, args.storage_url
        else:
            scratch = tempfile.TemporaryDirectory(prefix="shoal-compaction-bench-")
            log(f"starting a broker in {scratch.name} (commit interval {args.commit_interval_ms} ms)")
            broker = Broker(Path(scratch.name), args.commit_interval_ms)
            bootstrap, db, storage_url = (
                broker.bootstrap,
                str(broker.log_dir / "shoal.db"),
                str(broker.objects),
            )
        topic = f"compaction-bench-{uuid.uuid4().hex[:8]}"
        create_topic(bootstrap, topic, args.partitions)
        log(
            f"producing {args.records} x {args.record_size} B, a flush every {args.records_per_flush} records"
        )
        report["produce"] = produce(args, bootstrap, topic)
        time.sleep(0.5)
        before = live_objects(db)
        before["digest"] = digest(bootstrap, topic, args.partitions, args.records, args.timeout)
        report["before"] = before
        log(f"  {before['live_objects']} live objects, {before['live_object_bytes'] / MB:.1f} MB")

        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        from shoal.pipeline.compact import CompactionOptions, compact
        from shoal.pipeline.session import build_session
        from shoal.pipeline.stores import find_store_config

        started = time.monotonic()
        spark = build_session(args.master, "shoal-compaction-bench")
        spark.sparkContext.setLogLevel("ERROR")
        report["spark_session_start_s"] = round(time.monotonic() - started, 3)
        try:
            log("compaction")
            options = CompactionOptions(target_bytes=args.target_bytes, min_age_ms=0)
            result = compact(spark, find_store_config(metadata_path=db), storage_url, options).to_json()
        finally:
            spark.stop()
        tasks = result.pop("outputs")
        result["tasks"] = {
            "count": len(tasks),
            "task_s_sum": round(sum(t["elapsed_s"] for t in tasks), 3),
            "task_s_max": max((t["elapsed_s"] for t in tasks), default=0.0),
        }
        report["compaction"] = result
        log(f"  {result['bytes_moved'] / MB:.1f} MB in {result['elapsed_s']} s: {result['mb_per_s']} MB/s")
        after = live_objects(db)
        after["digest"] = digest(bootstrap, topic, args.partitions, args.records, args.timeout)
        report["after"] = after
        report["objects_ratio"] = round(after["live_objects"] / max(before["live_objects"], 1), 4)
        report["verified"] = (
            after["digest"]["sha256"] == before["digest"]["sha256"]
            and after["digest"]["records"] == args.records
            and result["batches_skipped"] == 0
            and not result["corrupt_batches"]
        )
        report["ok"] = bool(report["verified"])
    except Exception as exc:  # reported in the JSON, exit status 1
        report["error"] = f"{type(exc).__name__}: {exc}"
        log(report["error"])
    finally:
        if broker is not None:
            broker.stop()
        if scratch is not None:
            scratch.cleanup()
    report["load_avg"]["end"] = load_avg()
    report["finished_at"] = utc_now()
    text = json.dumps(report, indent=2)
    print(text)
    if args.output:
        with open(args.output, "w") as f:
            f.write(text + "\n")
    return 0 if report["ok"] else (1 if "error" in report else 2)


if __name__ == "__main__":
    sys.exit(main())
