#!/usr/bin/env python3
"""Produce/consume benchmark for any Kafka-compatible broker (Shoal, Apache Kafka, Tansu, ...).

Runs up to three phases against one topic and prints one JSON document on stdout
(progress goes to stderr):

1. ``saturation``: producers send ``--records`` as fast as the broker takes them.
2. ``fixed-rate``: producers offer ``--rate`` records/s for ``--duration`` seconds,
   which is the fair way to compare latency (at saturation latency is mostly client queueing).
3. ``consume``: consumers read the topic from the beginning with manual ``assign``
   and check that every record is there.

Clients are librdkafka (confluent-kafka) in separate processes (``spawn``), so neither the
client's CPU nor its GIL competes with the process that coordinates and measures.
See bench/README.md for how to run it and what each figure means.
"""

from __future__ import annotations

import argparse
import array
import json
import os
import platform
import socket
import sys
import time
import uuid
from typing import Any

from bench_clients import (
    ConsumerJob,
    ProducerJob,
    consumer_main,
    producer_main,
    request_window_figures,
    run_workers,
)
from bench_common import MB, MIB, BenchError, client_logger, iso, load_avg, log, parse_kv, utc_now
from bench_measure import (
    ObjectWatcher,
    RssSampler,
    delivered_mb_by_tenth,
    latency_timeline,
    percentiles_ms,
    proc_tree_cpu_s,
)

PHASES = ("saturation", "fixed-rate", "consume")


# --------------------------------------------------------------------------------------
# Phases
# --------------------------------------------------------------------------------------


def split_evenly(total: int, parts: int) -> list[int]:
    """Share ``total`` records between ``parts`` processes."""
    base, extra = divmod(total, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


def producer_conf(args: argparse.Namespace) -> dict[str, Any]:
    """librdkafka producer settings; ``--producer-config`` overrides any of them."""
    conf: dict[str, Any] = {
        "acks": args.acks,
        "compression.type": args.compression,
        "linger.ms": args.linger_ms,
        "batch.size": args.batch_size,
        # Like the Java producer's buffer.memory (32 MiB): bounds client-side queueing,
        # which otherwise dominates saturation latency with librdkafka's 1 GiB default.
        "queue.buffering.max.kbytes": args.max_queue_kb,
        "enable.idempotence": args.idempotence,
        "message.timeout.ms": args.message_timeout_ms,
    }
    conf.update(parse_kv(args.producer_config, "--producer-config"))
    return conf


def produce_phase(
    args: argparse.Namespace,
    mode: str,
    topic: str,
    watcher: ObjectWatcher | None,
) -> dict[str, Any]:
    """Run one produce phase in ``--producers`` processes and merge their reports."""
    duration = args.fixed_rate_duration if mode == "fixed-rate" else args.duration
    counts = split_evenly(args.records, args.producers)
    conf = producer_conf(args)
    jobs = [
        ProducerJob(
            index=i,
            mode=mode,
            bootstrap=args.bootstrap,
            topic=topic,
            records=counts[i] if mode == "saturation" else 1 << 62,
            record_size=args.record_size,
            duration_s=duration,
            rate=args.rate / args.producers,
            payload=args.payload,
            flush_timeout_s=args.flush_timeout,
            ready_timeout_s=args.ready_timeout,
            conf=conf,
            client=args.producer_client,
        )
        for i in range(args.producers)
    ]
    started_at = utc_now()
    broker_cpu0 = proc_tree_cpu_s(args.broker_pid) if args.broker_pid else None
    rss = RssSampler(args.broker_pid).start() if args.broker_pid else None
    if watcher is not None:
        watcher.start()
    results = run_workers(
        producer_main, jobs, args.ready_timeout, duration + args.flush_timeout + args.ready_timeout + 30
    )
    objects = watcher.stop() if watcher is not None else None
    broker_cpu1 = proc_tree_cpu_s(args.broker_pid) if args.broker_pid else None
    broker_rss = rss.stop() if rss is not None else {}

    ok = [r for r in results if "fatal" not in r]
    fatal = [r["fatal"] for r in results if "fatal" in r]
    lat = array.array("d")
    delivered_at = array.array("d")
    error_counts: dict[str, int] = {}
    for r in ok:
        lat.frombytes(r["latencies"])
        delivered_at.frombytes(r["delivered_at"])
        for name, n in r["errors"].items():
            error_counts[name] = error_counts.get(name, 0) + n
    sent = sum(r["sent"] for r in ok)
    delivered = sum(r["delivered"] for r in ok)
    start_ts = min((r["start_ts"] for r in ok), default=None)
    send_end_ts = max((r["send_end_ts"] for r in ok), default=None)
    last_ts = max((r["last_delivery_ts"] for r in ok if r["last_delivery_ts"]), default=None)
    end_ts = max((r["end_ts"] for r in ok), default=None)
    # Throughput window: the common start to the last delivery report.
    elapsed = (last_ts - start_ts) if (start_ts is not None and last_ts is not None) else None
    send_window = (send_end_ts - start_ts) if (start_ts is not None and send_end_ts is not None) else None

    def per_s(x: float) -> float | None:
        return round(x / elapsed, 2) if elapsed else None

    out: dict[str, Any] = {
        "started_at": started_at,
        "finished_at": utc_now(),
        "first_send_at": iso(start_ts),
        "last_delivery_at": iso(last_ts),
        "producers": args.producers,
        "records_sent": sent,
        "records_delivered": delivered,
        "records_undelivered": sum(r["undelivered"] for r in ok),
        "errors": sum(error_counts.values()),
        "error_counts": error_counts,
        "elapsed_s": round(elapsed, 3) if elapsed else None,
        "records_per_s": per_s(delivered),
        "mb_per_s": per_s(delivered * args.record_size / MB),
        "mib_per_s": per_s(delivered * args.record_size / MIB),
        "latency_ms": percentiles_ms(lat),
        "latency_ms_by_second": latency_timeline(lat, delivered_at, start_ts) if start_ts else [],
        "local_queue_full_events": sum(r["queue_full_events"] for r in ok),
        "stopped_by": sorted({r["stopped_by"] for r in ok}),
        "flush_s": round(end_ts - send_end_ts, 3) if end_ts and send_end_ts else None,
        "client_cpu_s": round(sum(r["cpu_s"] for r in ok), 3),
        # librdkafka's statistics only: kafka-python producers report no request window.
        **request_window_figures([r["request_window"] for r in ok if "request_window" in r], args.record_size),
    }
    if mode == "saturation" and start_ts:
        out["delivered_mb_by_100ms"] = delivered_mb_by_tenth(delivered_at, start_ts, args.record_size)
    if mode == "fixed-rate":
        out["offered_records_per_s"] = args.rate
        out["duration_s"] = duration
        out["sent_records_per_s"] = round(sent / send_window, 2) if send_window else None
        out["achieved_records_per_s"] = out.pop("records_per_s")
        out["achieved_mb_per_s"] = out.pop("mb_per_s")
        out["achieved_mib_per_s"] = out.pop("mib_per_s")
        # Kept up: the client offered (nearly) the whole rate, the broker acked it all, and
        # no backlog was left to drain after the last send (a broker that falls behind
        # acknowledges the tail long after it was offered).
        drain = out["flush_s"]
        out["kept_up"] = bool(
            send_window
            and sent >= 0.98 * args.rate * min(duration, send_window)
            and delivered == sent
            and drain is not None
            and drain <= max(1.0, 0.1 * duration)
        )
    out.update(broker_rss)
    if broker_cpu0 is not None and broker_cpu1 is not None:
        out["broker_cpu_s"] = round(broker_cpu1 - broker_cpu0, 3)
        if elapsed:
            out["broker_cpu_pct"] = round((broker_cpu1 - broker_cpu0) / elapsed * 100, 1)
    if objects is not None:
        out.update(objects)
        out["object_puts_per_s"] = round(objects["objects_created"] / elapsed, 3) if elapsed else None
        out["avg_object_bytes"] = (
            round(objects["object_bytes"] / objects["objects_created"])
            if objects["objects_created"]
            else None
        )
    if fatal:
        out["fatal"] = fatal
    return out


def consume_phase(
    args: argparse.Namespace, topic: str, partitions: int, produced: int | None
) -> dict[str, Any]:
    """Read the whole topic from the beginning in ``--consumers`` processes and verify the count."""
    n_cons = max(1, min(args.consumers, partitions))
    conf = parse_kv(args.consumer_config, "--consumer-config")
    jobs = [
        ConsumerJob(
            index=i,
            bootstrap=args.bootstrap,
            topic=topic,
            partitions=[p for p in range(partitions) if p % n_cons == i],
            duration_s=args.duration,
            idle_timeout_s=args.idle_timeout,
            ready_timeout_s=args.ready_timeout,
            conf=conf,
        )
        for i in range(n_cons)
    ]
    started_at = utc_now()
    broker_cpu0 = proc_tree_cpu_s(args.broker_pid) if args.broker_pid else None
    results = run_workers(consumer_main, jobs, args.ready_timeout, args.duration + args.ready_timeout + 60)
    broker_cpu1 = proc_tree_cpu_s(args.broker_pid) if args.broker_pid else None

    ok = [r for r in results if "fatal" not in r]
    fatal = [r["fatal"] for r in results if "fatal" in r]
    records = sum(r["records"] for r in ok)
    nbytes = sum(r["bytes"] for r in ok)
    start_ts = min((r["start_ts"] for r in ok), default=None)
    first_ts = min((r["first_record_ts"] for r in ok if r["first_record_ts"]), default=None)
    last_ts = max((r["last_record_ts"] for r in ok if r["last_record_ts"]), default=None)
    elapsed = (last_ts - start_ts) if (start_ts is not None and last_ts is not None) else None
    expected_wm = None if any(r["expected"] is None for r in ok) or not ok else sum(r["expected"] for r in ok)
    errors: dict[str, int] = {}
    per_partition: dict[str, int] = {}
    watermarks: dict[str, Any] = {}
    for r in ok:
        for name, n in r["errors"].items():
            errors[name] = errors.get(name, 0) + n
        per_partition.update(r["per_partition"])
        if r["watermarks"]:
            watermarks.update(r["watermarks"])
    # What this run delivered is the truth to check against; the watermarks (ListOffsets)
    # are only the reference for a topic that already existed, and a mismatch with them
    # is reported on its own since it is a broker bug of its own kind.
    reference = produced if produced is not None else expected_wm
    verified = not fatal and len(ok) == len(jobs) and reference is not None and records == reference
    watermarks_match = None if expected_wm is None else records == expected_wm
    out: dict[str, Any] = {
        "started_at": started_at,
        "finished_at": utc_now(),
        "consumers": n_cons,
        "records": records,
        "bytes": nbytes,
        "elapsed_s": round(elapsed, 3) if elapsed else None,
        "records_per_s": round(records / elapsed, 2) if elapsed else None,
        "mb_per_s": round(nbytes / MB / elapsed, 2) if elapsed else None,
        "mib_per_s": round(nbytes / MIB / elapsed, 2) if elapsed else None,
        "time_to_first_record_ms": round((first_ts - start_ts) * 1000, 1) if first_ts and start_ts else None,
        "expected_from_watermarks": expected_wm,
        "expected_from_produced": produced,
        "verified": verified,
        "watermarks_match_consumed": watermarks_match,
        "offset_gaps": sum(r["offset_gaps"] for r in ok),
        "offset_rewinds": sum(r["offset_rewinds"] for r in ok),
        "errors": sum(errors.values()),
        "error_counts": errors,
        "stopped_by": sorted({r["stopped_by"] for r in ok}),
        "per_partition": per_partition,
        "watermarks": watermarks or None,
        "watermark_errors": sorted({r["watermark_error"] for r in ok if r["watermark_error"]}) or None,
        "client_cpu_s": round(sum(r["cpu_s"] for r in ok), 3),
    }
    if broker_cpu0 is not None and broker_cpu1 is not None:
        out["broker_cpu_s"] = round(broker_cpu1 - broker_cpu0, 3)
        if elapsed:
            out["broker_cpu_pct"] = round((broker_cpu1 - broker_cpu0) / elapsed * 100, 1)
    if fatal:
        out["fatal"] = fatal
    return out


# --------------------------------------------------------------------------------------
# Topic
# --------------------------------------------------------------------------------------


def ensure_topic(args: argparse.Namespace, topic: str) -> dict[str, Any]:
    """Create the topic (or reuse an existing one) and wait until every partition has a leader."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient(
        {"bootstrap.servers": args.bootstrap, "client.id": "bench-admin", "logger": client_logger("admin")[0]}
    )
    topic_conf = parse_kv(args.topic_config, "--topic-config")
    try:
        md = admin.list_topics(timeout=15)
    except KafkaException as exc:
        raise BenchError(f"cannot reach {args.bootstrap}: {exc}") from None
    info: dict[str, Any] = {"name": topic, "created": False, "config": topic_conf}
    existing = md.topics.get(topic)
    if existing is not None and existing.error is None:
        log(f"using existing topic {topic} ({len(existing.partitions)} partitions)")
        info["partitions"] = len(existing.partitions)
        info["replication_factor"] = None
        return info

    created = False
    last_error: str | None = None
    for rf in dict.fromkeys([args.replication_factor, 1]):
        new = NewTopic(topic, num_partitions=args.partitions, replication_factor=rf, config=topic_conf)
        fut = admin.create_topics([new], operation_timeout=30, request_timeout=30)[topic]
        try:
            fut.result(timeout=40)
            created = True
            info["replication_factor"] = rf
            break
        except KafkaException as exc:
            err = exc.args[0]
            if isinstance(err, KafkaError) and err.code() == KafkaError.TOPIC_ALREADY_EXISTS:
                created = True
                info["replication_factor"] = None
                break
            last_error = str(err)
            log(f"create_topics with replication_factor={rf} failed: {err}")
    if not created:
        raise BenchError(f"could not create topic {topic}: {last_error}")
    info["created"] = True

    deadline = time.monotonic() + 30
    while True:
        tmd = admin.list_topics(topic, timeout=10).topics.get(topic)
        if (
            tmd is not None
            and tmd.error is None
            and len(tmd.partitions) >= args.partitions
            and all(p.leader >= 0 and p.error is None for p in tmd.partitions.values())
        ):
            info["partitions"] = len(tmd.partitions)
            break
        if time.monotonic() >= deadline:
            raise BenchError(f"topic {topic} has no leader for every partition after 30s: {tmd}")
        time.sleep(0.5)
    log(f"created topic {topic} ({info['partitions']} partitions, config {topic_conf})")
    return info


def delete_topic(args: argparse.Namespace, topic: str) -> str | None:
    """Best effort: some brokers under test do not implement DeleteTopics yet."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient(
        {"bootstrap.servers": args.bootstrap, "client.id": "bench-admin", "logger": client_logger("admin")[0]}
    )
    try:
        admin.delete_topics([topic], operation_timeout=30, request_timeout=30)[topic].result(timeout=40)
        return None
    except Exception as exc:
        return str(exc)


# --------------------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        description="Produce/consume benchmark for any Kafka-compatible broker; prints one JSON document.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--bootstrap", required=True, help="HOST:PORT of the broker")
    p.add_argument("--topic", help="topic to use (default: a fresh unique name)")
    p.add_argument("--partitions", type=int, default=6, help="partitions of a created topic")
    p.add_argument("--replication-factor", type=int, default=-1, help="-1 = broker default; falls back to 1")
    p.add_argument(
        "--topic-config",
        action="append",
        default=[],
        metavar="K=V",
        help="topic config for a created topic, repeatable (Shoal: diskless.enable=true)",
    )
    p.add_argument("--record-size", type=int, default=1024, help="value bytes per record (no key)")
    p.add_argument(
        "--payload",
        choices=("random", "text"),
        default="random",
        help="random = incompressible bytes; text = random words (compressible ~2-3x)",
    )
    p.add_argument("--records", type=int, default=200_000, help="records in the saturation phase")
    p.add_argument(
        "--duration", type=float, default=60.0, help="cap in seconds for the saturation and consume phases"
    )
    p.add_argument(
        "--fixed-rate-duration",
        type=float,
        default=None,
        help="seconds the fixed-rate phase runs (default: --duration, at most 30)",
    )
    p.add_argument("--rate", type=float, default=5000.0, help="records/s offered in the fixed-rate phase")
    p.add_argument("--acks", default="all", choices=("all", "-1", "0", "1"))
    p.add_argument("--compression", default="none", choices=("none", "gzip", "snappy", "lz4", "zstd"))
    p.add_argument("--linger-ms", type=float, default=5.0)
    p.add_argument("--batch-size", type=int, default=1_000_000, help="librdkafka batch.size (bytes)")
    p.add_argument(
        "--max-queue-kb",
        type=int,
        default=32768,
        help="queue.buffering.max.kbytes: client-side buffer per producer",
    )
    p.add_argument("--idempotence", action="store_true", help="enable.idempotence=true")
    p.add_argument(
        "--producer-client",
        default="confluent-kafka",
        choices=("confluent-kafka", "kafka-python"),
        help="client of the produce phases (kafka_python_producer.py says why the choice matters)",
    )
    p.add_argument("--message-timeout-ms", type=int, default=120_000)
    p.add_argument("--producers", type=int, default=1, help="producer processes")
    p.add_argument(
        "--consumers", type=int, default=1, help="consumer processes (partitions split between them)"
    )
    p.add_argument(
        "--producer-config",
        action="append",
        default=[],
        metavar="K=V",
        help="extra librdkafka producer setting, repeatable",
    )
    p.add_argument(
        "--consumer-config",
        action="append",
        default=[],
        metavar="K=V",
        help="extra librdkafka consumer setting, repeatable",
    )
    p.add_argument("--phases", default=",".join(PHASES), help="comma-separated subset of " + ",".join(PHASES))
    p.add_argument(
        "--objects-dir", help="local object-store directory: count objects created while producing"
    )
    p.add_argument(
        "--broker-pid",
        type=int,
        help="broker process id: report its (and its children's) CPU use, and their resident memory "
        "during produce phases (peak and mean of samples every 250 ms)",
    )
    p.add_argument(
        "--flush-timeout", type=float, default=60.0, help="seconds to wait for outstanding deliveries"
    )
    p.add_argument(
        "--idle-timeout",
        type=float,
        default=10.0,
        help="consume: stop after this long with no records once every partition reported EOF",
    )
    p.add_argument(
        "--ready-timeout", type=float, default=30.0, help="seconds for worker processes to connect"
    )
    p.add_argument("--delete-topic", action="store_true", help="delete the topic at the end (best effort)")
    p.add_argument("--output", help="also write the JSON document to this file")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    phases = [ph.strip() for ph in args.phases.split(",") if ph.strip()]
    unknown = [ph for ph in phases if ph not in PHASES]
    if unknown or not phases:
        raise SystemExit(f"--phases: unknown {unknown}; choose from {','.join(PHASES)}")
    for name in ("partitions", "record_size", "records", "producers", "consumers"):
        if getattr(args, name) < 1:
            raise SystemExit(f"--{name.replace('_', '-')} must be >= 1")
    if args.rate <= 0 or args.duration <= 0:
        raise SystemExit("--rate and --duration must be > 0")
    if args.fixed_rate_duration is None:
        args.fixed_rate_duration = min(args.duration, 30.0)
    if args.objects_dir:
        # A local store may create its directory on the first upload: a missing one is fine.
        if os.path.exists(args.objects_dir) and not os.path.isdir(args.objects_dir):
            raise SystemExit(f"--objects-dir {args.objects_dir} is not a directory")
        if not os.path.exists(args.objects_dir):
            log(f"--objects-dir {args.objects_dir} does not exist yet; counting files that appear there")
    if args.broker_pid and proc_tree_cpu_s(args.broker_pid) is None:
        raise SystemExit(f"--broker-pid {args.broker_pid}: no such process")

    import confluent_kafka

    topic = args.topic or f"bench-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"
    report: dict[str, Any] = {
        "benchmark": "bench/produce_consume.py",
        "started_at": utc_now(),
        "broker": {"bootstrap": args.bootstrap, "pid": args.broker_pid},
        "host": {
            "hostname": socket.gethostname(),
            "platform": platform.platform(),
            "python": platform.python_version(),
            "cpu_count": os.cpu_count(),
        },
        "client": {
            "confluent_kafka": confluent_kafka.__version__,
            "librdkafka": confluent_kafka.libversion()[0],
            "producer": args.producer_client,
            **({"kafka_python": _kafka_python_version()} if args.producer_client == "kafka-python" else {}),
        },
        "cpu_count": os.cpu_count(),
        "load_avg": {"start": load_avg()},
    }
    prod_conf = producer_conf(args)
    report["config"] = {
        "phases": phases,
        "partitions": args.partitions,
        "record_size": args.record_size,
        "payload": args.payload,
        "records": args.records,
        "duration_s": args.duration,
        "fixed_rate_duration_s": args.fixed_rate_duration,
        "rate": args.rate,
        "acks": args.acks,
        "compression": args.compression,
        "linger_ms": args.linger_ms,
        "producers": args.producers,
        "consumers": args.consumers,
        "producer_config": {k: v for k, v in prod_conf.items() if k != "on_delivery"},
        "consumer_config": parse_kv(args.consumer_config, "--consumer-config"),
        "objects_dir": args.objects_dir,
    }
    log(f"broker {args.bootstrap}, topic {topic}, phases {','.join(phases)}")
    try:
        report["topic"] = ensure_topic(args, topic)
    except BenchError as exc:
        log(str(exc))
        report["error"] = str(exc)
        report["load_avg"]["end"] = load_avg()
        report["finished_at"] = utc_now()
        report["ok"] = False
        emit(report, args.output)
        return 1
    partitions = report["topic"]["partitions"]

    watcher = ObjectWatcher(args.objects_dir) if args.objects_dir else None
    delivered_total = 0
    failed = False
    if "saturation" in phases:
        log(f"saturation: {args.records} records x {args.record_size} B, {args.producers} producer(s)")
        res = produce_phase(args, "saturation", topic, watcher)
        report["produce_saturation"] = res
        delivered_total += res["records_delivered"]
        failed |= "fatal" in res
        log(
            f"saturation: {res['records_per_s']} rec/s, {res['mb_per_s']} MB/s, "
            f"p50 {res['latency_ms']['p50']} ms, p99 {res['latency_ms']['p99']} ms, errors {res['errors']}"
        )
    if "fixed-rate" in phases:
        log(f"fixed-rate: {args.rate} rec/s for {args.fixed_rate_duration}s")
        res = produce_phase(args, "fixed-rate", topic, watcher)
        report["produce_fixed_rate"] = res
        delivered_total += res["records_delivered"]
        failed |= "fatal" in res
        log(
            f"fixed-rate: achieved {res['achieved_records_per_s']} rec/s, "
            f"p50 {res['latency_ms']['p50']} ms, p99 {res['latency_ms']['p99']} ms, errors {res['errors']}"
        )
    if watcher is not None:
        produced = [report[k] for k in ("produce_saturation", "produce_fixed_rate") if k in report]
        created = sum(r["objects_created"] for r in produced)
        seconds = sum(r["elapsed_s"] or 0 for r in produced)
        report["objects"] = {
            "dir": args.objects_dir,
            "objects_created": created,
            "object_bytes": sum(r["object_bytes"] for r in produced),
            "produce_seconds": round(seconds, 3),
        }
        report["object_puts_per_s"] = round(created / seconds, 3) if seconds else None
    if "consume" in phases:
        # A topic this run created holds exactly what it delivered; an existing one may hold more.
        expected = delivered_total if report["topic"]["created"] else None
        log(f"consume: from the beginning of {partitions} partitions")
        res = consume_phase(args, topic, partitions, expected)
        report["consume"] = res
        failed |= not res["verified"]
        log(
            f"consume: {res['records']} records, {res['records_per_s']} rec/s, {res['mb_per_s']} MB/s, "
            f"verified {res['verified']}"
        )
    if args.delete_topic:
        report["topic"]["delete_error"] = delete_topic(args, topic)
    report["load_avg"]["end"] = load_avg()
    report["finished_at"] = utc_now()
    report["ok"] = not failed

    emit(report, args.output)
    return 0 if not failed else 2


def _kafka_python_version() -> str:
    import kafka

    return kafka.__version__


def emit(report: dict[str, Any], output: str | None) -> None:
    """The one JSON document on stdout, and in ``--output`` when given."""
    text = json.dumps(report, indent=2)
    print(text, flush=True)
    if output:
        os.makedirs(os.path.dirname(os.path.abspath(output)), exist_ok=True)
        with open(output, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    sys.exit(main())
