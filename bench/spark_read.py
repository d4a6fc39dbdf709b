#!/usr/bin/env python3
"""Spark read throughput of a topic vs a Kafka consumer reading the same topic, in one run.

Prints one JSON document on stdout (progress goes to stderr), in the style of
``bench/produce_consume.py``. Phases, all on the same topic:

1. ``produce`` (only when ``--topic`` is not given): a fresh diskless topic is filled with
   ``--records`` records of ``--record-size`` bytes by an idempotent librdkafka producer.
2. ``consumer``: one confluent-kafka consumer (manual assign, no group) reads every partition
   through the broker from the log start to the high watermark taken before reading.
3. ``spark_storage``: ``spark.read.format("shoal")`` reads the same offsets straight from
   object storage (``--repeat`` times; the first run includes starting Spark's Python workers).
4. ``spark_broker`` (with ``--spark-via-broker``): the same Spark read forced through the
   broker (``shoal.readVia=broker``).

Every Spark run counts records and key+value bytes (an aggregate over all rows forces each
row to be read and decoded) and is verified against the consumer's totals. ``mb_per_s`` is
10^6 bytes/s of keys plus values, ``mib_per_s`` 2^20 bytes/s.

Example (a broker from ``shoal up --data-dir /tmp/benchdata`` on 127.0.0.1:19092)::

    .venv/bin/python bench/spark_read.py --bootstrap 127.0.0.1:19092 \\
        --metadata-path /tmp/benchdata/logs/shoal.db --storage-url /tmp/benchdata/objects \\
        --records 200000 --record-size 1024 --master 'local[2]'
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import socket
import sys
import time
import uuid
from typing import Any

MB = 1_000_000
MIB = 1 << 20


def log(msg: str) -> None:
    print(f"[spark-bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def utc_now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds")


def load_avg() -> dict[str, float]:
    one, five, fifteen = os.getloadavg()
    return {"1m": round(one, 2), "5m": round(five, 2), "15m": round(fifteen, 2)}


def rates(records: int, nbytes: int, elapsed: float) -> dict[str, Any]:
    elapsed = max(elapsed, 1e-9)
    return {
        "records": records,
        "bytes": nbytes,
        "elapsed_s": round(elapsed, 3),
        "records_per_s": round(records / elapsed, 1),
        "mb_per_s": round(nbytes / elapsed / MB, 2),
        "mib_per_s": round(nbytes / elapsed / MIB, 2),
    }


def create_and_fill(args: argparse.Namespace, topic: str) -> dict[str, Any]:
    """A diskless topic with ``--records`` random records (incompressible values, short keys)."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": args.bootstrap})
    futures = admin.create_topics(
        [
            NewTopic(
                topic,
                num_partitions=args.partitions,
                replication_factor=1,
                config={"diskless.enable": "true"},
            )
        ]
    )
    futures[topic].result(30)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        md = admin.list_topics(topic=topic, timeout=10).topics.get(topic)
        if md is not None and md.error is None and len(md.partitions) == args.partitions:
            break
        time.sleep(0.2)
    producer = Producer(
        {
            "bootstrap.servers": args.bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 20,
            "batch.size": 1_000_000,
            "compression.type": args.compression,
        }
    )
    buf = os.urandom(8 * MIB + args.record_size)
    span = len(buf) - args.record_size
    errors = 0

    def on_delivery(err: Any, _msg: Any) -> None:
        nonlocal errors
        if err is not None:
            errors += 1

    start = time.monotonic()
    for i in range(args.records):
        off = (i * args.record_size) % span
        while True:
            try:
                producer.produce(
                    topic, buf[off : off + args.record_size], key=b"k%d" % i, on_delivery=on_delivery
                )
                break
            except BufferError:
                producer.poll(0.05)
        if i % 1000 == 0:
            producer.poll(0)
    left = producer.flush(120)
    elapsed = time.monotonic() - start
    if left or errors:
        raise RuntimeError(f"produce failed: {left} undelivered, {errors} errors")
    return {"records": args.records, "elapsed_s": round(elapsed, 3), "compression": args.compression}


def watermarks(args: argparse.Namespace, topic: str) -> dict[int, tuple[int, int]]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": args.bootstrap, "group.id": f"bench-{uuid.uuid4().hex[:8]}"})
    try:
        md = consumer.list_topics(topic=topic, timeout=15).topics[topic]
        out = {}
        for p in sorted(md.partitions):
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=15, cached=False)
            out[p] = (int(low), int(high))
        return out
    finally:
        consumer.close()


def consume(args: argparse.Namespace, topic: str, marks: dict[int, tuple[int, int]]) -> dict[str, Any]:
    """One confluent consumer through the broker, from each log start to the watermark."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": args.bootstrap,
            "group.id": f"bench-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "fetch.max.bytes": 52_428_800,
            "max.partition.fetch.bytes": 10_485_760,
        }
    )
    pending = {p for p, (low, high) in marks.items() if high > low}
    records = nbytes = 0
    try:
        consumer.assign([TopicPartition(topic, p, low) for p, (low, _) in marks.items()])
        start = time.monotonic()
        deadline = start + args.timeout
        while pending and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=10_000, timeout=0.5):
                err = msg.error()
                if err is not None:
                    if err.code() != KafkaError._PARTITION_EOF:
                        raise RuntimeError(f"consumer error: {err}")
                    if msg.offset() >= marks[msg.partition()][1]:
                        pending.discard(msg.partition())
                    continue
                if msg.offset() >= marks[msg.partition()][1]:
                    continue
                records += 1
                nbytes += len(msg.value() or b"") + len(msg.key() or b"")
                if msg.offset() == marks[msg.partition()][1] - 1:
                    pending.discard(msg.partition())
        elapsed = time.monotonic() - start
    finally:
        consumer.close()
    out = rates(records, nbytes, elapsed)
    out["complete"] = not pending
    return out


def spark_read(spark: Any, options: dict[str, str], repeat: int) -> dict[str, Any]:
    df = spark.read.format("shoal").options(**options).load()
    partitions = df.rdd.getNumPartitions()
    runs = []
    for i in range(repeat):
        start = time.monotonic()
        row = df.selectExpr(
            "count(*) AS n", "coalesce(sum(length(key)), 0) + coalesce(sum(length(value)), 0) AS b"
        ).collect()[0]
        elapsed = time.monotonic() - start
        runs.append(rates(int(row["n"]), int(row["b"]), elapsed))
        log(f"  run {i + 1}: {runs[-1]['mb_per_s']} MB/s ({runs[-1]['elapsed_s']} s)")
    best = max(runs, key=lambda r: r["mb_per_s"])
    return {"input_partitions": partitions, "runs": runs, "best": best}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bootstrap", required=True, help="HOST:PORT of the broker")
    p.add_argument("--metadata-path", required=True, help="the broker's shoal.db (or its folder)")
    p.add_argument("--storage-url", required=True, help="the broker's diskless.storage.url")
    p.add_argument("--topic", help="an existing topic to read (default: create and fill a fresh one)")
    p.add_argument("--partitions", type=int, default=6, help="partitions of a created topic")
    p.add_argument("--records", type=int, default=200_000, help="records produced into a created topic")
    p.add_argument("--record-size", type=int, default=1024, help="value bytes per produced record")
    p.add_argument("--compression", default="none", choices=("none", "gzip", "snappy", "lz4", "zstd"))
    p.add_argument("--master", default="local[2]", help="Spark master")
    p.add_argument(
        "--repeat",
        type=int,
        default=6,
        help="Spark runs per phase (the best one is reported too; the JVM's JIT warms over the first runs)",
    )
    p.add_argument("--min-partitions", type=int, help="the source's minPartitions")
    p.add_argument("--max-bytes-per-partition", type=int, help="the source's shoal.maxBytesPerPartition")
    p.add_argument(
        "--spark-via-broker", action="store_true", help="also time Spark reading through the broker"
    )
    p.add_argument("--timeout", type=float, default=300.0, help="cap (s) of the consumer phase")
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
    try:
        topic = args.topic or f"spark-bench-{time.strftime('%H%M%S')}-{uuid.uuid4().hex[:6]}"
        if not args.topic:
            log(f"creating and filling {topic} ({args.records} x {args.record_size} B)")
            report["produce"] = create_and_fill(args, topic)
        marks = watermarks(args, topic)
        report["topic"] = {
            "name": topic,
            "partitions": len(marks),
            "records": sum(h - lo for lo, h in marks.values()),
        }
        report["topic"]["watermarks"] = {str(p): [lo, h] for p, (lo, h) in marks.items()}

        log("consumer through the broker")
        report["consumer"] = consume(args, topic, marks)
        log(f"  {report['consumer']['mb_per_s']} MB/s")

        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        from shoal.pipeline.options import offsets_to_json
        from shoal.pipeline.session import build_session

        started = time.monotonic()
        spark = build_session(args.master, "shoal-spark-read-bench", {"spark.sql.shuffle.partitions": "2"})
        spark.sparkContext.setLogLevel("ERROR")
        report["spark_session_start_s"] = round(time.monotonic() - started, 3)
        options = {
            "subscribe": topic,
            "shoal.metadata.path": args.metadata_path,
            "shoal.storage.url": args.storage_url,
            "kafka.bootstrap.servers": args.bootstrap,
            "startingOffsets": offsets_to_json({(topic, p): lo for p, (lo, _) in marks.items()}),
            "endingOffsets": offsets_to_json({(topic, p): h for p, (_, h) in marks.items()}),
        }
        if args.min_partitions:
            options["minPartitions"] = str(args.min_partitions)
        if args.max_bytes_per_partition:
            options["shoal.maxBytesPerPartition"] = str(args.max_bytes_per_partition)
        try:
            log("Spark, straight from object storage")
            report["spark_storage"] = spark_read(spark, options, args.repeat)
            if args.spark_via_broker:
                log("Spark, through the broker")
                report["spark_broker"] = spark_read(
                    spark, {**options, "shoal.readVia": "broker"}, args.repeat
                )
        finally:
            spark.stop()
        consumer = report["consumer"]
        checks = [report["spark_storage"]] + ([report["spark_broker"]] if "spark_broker" in report else [])
        report["verified"] = consumer["complete"] and all(
            run["records"] == consumer["records"] and run["bytes"] == consumer["bytes"]
            for phase in checks
            for run in phase["runs"]
        )
        report["spark_storage_vs_consumer"] = round(
            report["spark_storage"]["best"]["mb_per_s"] / max(consumer["mb_per_s"], 1e-9), 3
        )
        report["ok"] = bool(report["verified"])
    except Exception as exc:  # reported in the JSON, exit status 1
        report["error"] = f"{type(exc).__name__}: {exc}"
        log(report["error"])
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
