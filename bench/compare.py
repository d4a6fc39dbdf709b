#!/usr/bin/env python3
"""Shoal beside any other Kafka-compatible broker, in one command and one JSON document.

Two running brokers, A and B (``--a HOST:PORT --b HOST:PORT``, named ``--a-name`` /
``--b-name``), measured with the same client and settings through ``bench/produce_consume.py``
(each run its own process, on a fresh topic), alternating A B A B. Each round runs:

1. ``fixed_rate_<N>p``, for each N in ``--producers`` (default ``1``): N idempotent producers
   (acks=all, 5 requests in flight) offer ``--rate`` records/s together (split evenly) for
   ``--fixed-rate-duration`` seconds: latency p50/p99/p999, WAL objects per second for a
   target whose ``--a-objects-dir`` / ``--b-objects-dir`` is given, and the broker's peak
   resident memory for one whose ``--a-pid`` / ``--b-pid`` is (``--rate 48000``: at 50 MB/s);
2. ``saturation``: ``--saturation-producers`` idempotent producers send ``--records`` records as
   fast as the broker acknowledges them: produce MB/s;
3. ``consume``: on the same topic right after (same run), ``--consumers`` consumers read it all
   from the beginning: consume MB/s;
4. ``spark`` (``--spark``; off by default): ``bench/spark_read.py`` on target A only, on the topic
   step 2 filled there (or ``--spark-topic``): one Kafka consumer through the broker, then
   Spark reading the same offsets straight from A's object storage (``--a-metadata-path``,
   ``--a-storage-url``).

``--pin 0:1`` keeps the brokers' threads on CPU 0 and the benchmark clients on CPU 1 (Linux), so
client and broker do not take each other's core: on a 2-core machine an idempotent librdkafka
producer at saturation uses about a core itself, and unpinned runs move by 10-20% with how the
scheduler shares the cores.

Every run is reported per round with the machine's load average before and after, with the
median over rounds; ``ratios`` divides A's median by B's (keys end in ``_a_over_b``). Progress goes
to stderr. See bench/README.md ("Shoal beside another broker").
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import statistics
import sys
import time
from typing import Any

from bench_common import load_avg, parse_kv, utc_now  # bench/ is on sys.path when a bench script runs
from compare_runs import (
    Pinning,
    delete_topic,
    fixed_rate_cmd,
    log,
    ready_timeout,
    run_child,
    spark_cmd,
    throughput_cmd,
)

# Figures taken from each run's report: name -> path of keys in produce_consume.py's JSON.
FIXED_RATE_FIGURES = {
    "p50_ms": ("produce_fixed_rate", "latency_ms", "p50"),
    "p99_ms": ("produce_fixed_rate", "latency_ms", "p99"),
    "p999_ms": ("produce_fixed_rate", "latency_ms", "p999"),
    "max_ms": ("produce_fixed_rate", "latency_ms", "max"),
    "achieved_records_per_s": ("produce_fixed_rate", "achieved_records_per_s"),
    "achieved_mb_per_s": ("produce_fixed_rate", "achieved_mb_per_s"),
    "wal_objects_per_s": ("produce_fixed_rate", "object_puts_per_s"),
    "avg_object_bytes": ("produce_fixed_rate", "avg_object_bytes"),
    "broker_cpu_pct": ("produce_fixed_rate", "broker_cpu_pct"),
    "client_cpu_s": ("produce_fixed_rate", "client_cpu_s"),
    "broker_rss_peak_mib": ("produce_fixed_rate", "broker_rss_peak_mib"),
}
FIXED_RATE_FLAGS = {
    "kept_up": ("produce_fixed_rate", "kept_up"),
    "records_delivered": ("produce_fixed_rate", "records_delivered"),
    "errors": ("produce_fixed_rate", "error_counts"),
}
SATURATION_FIGURES = {
    "produce_mb_per_s": ("produce_saturation", "mb_per_s"),
    "records_per_s": ("produce_saturation", "records_per_s"),
    "p50_ms": ("produce_saturation", "latency_ms", "p50"),
    "p99_ms": ("produce_saturation", "latency_ms", "p99"),
    "elapsed_s": ("produce_saturation", "elapsed_s"),
    "flush_s": ("produce_saturation", "flush_s"),
    "request_rtt_ms": ("produce_saturation", "request_rtt_ms"),
    "mb_in_flight": ("produce_saturation", "mb_in_flight"),
    "wal_objects_per_s": ("produce_saturation", "object_puts_per_s"),
    "broker_cpu_pct": ("produce_saturation", "broker_cpu_pct"),
    "client_cpu_s": ("produce_saturation", "client_cpu_s"),
    "broker_rss_peak_mib": ("produce_saturation", "broker_rss_peak_mib"),
}
SATURATION_FLAGS = {
    "records_delivered": ("produce_saturation", "records_delivered"),
    "records_sent": ("produce_saturation", "records_sent"),
    "errors": ("produce_saturation", "error_counts"),
    "stopped_by": ("produce_saturation", "stopped_by"),
}
CONSUME_FIGURES = {
    "consume_mb_per_s": ("consume", "mb_per_s"),
    "records_per_s": ("consume", "records_per_s"),
    "elapsed_s": ("consume", "elapsed_s"),
    "time_to_first_record_ms": ("consume", "time_to_first_record_ms"),
    "broker_cpu_pct": ("consume", "broker_cpu_pct"),
    "client_cpu_s": ("consume", "client_cpu_s"),
}
CONSUME_FLAGS = {
    "records": ("consume", "records"),
    "verified": ("consume", "verified"),
    "watermarks_match_consumed": ("consume", "watermarks_match_consumed"),
    "stopped_by": ("consume", "stopped_by"),
}
SPARK_FIGURES = {
    "consumer_mb_per_s": ("consumer", "mb_per_s"),
    "spark_storage_mb_per_s": ("spark_storage", "best", "mb_per_s"),
    "spark_storage_over_consumer": ("spark_storage_vs_consumer",),
    "spark_session_start_s": ("spark_session_start_s",),
}
# Ratios of medians, A over B: (measurement, figure in that measurement, key in ``ratios``).
RATIOS = [
    ("saturation", "produce_mb_per_s", "produce_mb_per_s_a_over_b"),
    ("saturation", "p99_ms", "saturation_p99_ms_a_over_b"),
    ("consume", "consume_mb_per_s", "consume_mb_per_s_a_over_b"),
]
FIXED_RATE_RATIOS = [
    ("p50_ms", "p50_ms_a_over_b"),
    ("p99_ms", "p99_ms_a_over_b"),
    ("p999_ms", "p999_ms_a_over_b"),
    ("achieved_mb_per_s", "achieved_mb_per_s_a_over_b"),
    ("wal_objects_per_s", "wal_objects_per_s_a_over_b"),
    ("broker_rss_peak_mib", "broker_rss_peak_mib_a_over_b"),
]


def parse_address(text: str, flag: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise SystemExit(f"{flag} expects HOST:PORT, got {text!r}")
    return host.strip("[]"), int(port)


def reachable(address: str, flag: str, timeout: float = 5.0) -> str | None:
    """None when something listens at ``address``, else why not."""
    host, port = parse_address(address, flag)
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return None
    except OSError as exc:
        return f"{flag} {address}: {exc}"


def dig(doc: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        doc = doc.get(key) if isinstance(doc, dict) else None
    return doc


def number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def median(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return round(statistics.median(present), 3) if present else None


def ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a is not None and b else None


# --------------------------------------------------------------------------------------
# Figures of one run
# --------------------------------------------------------------------------------------


def summarise_run(
    run: dict[str, Any], round_no: int, figures: dict[str, tuple[str, ...]], flags: dict[str, tuple[str, ...]]
) -> dict[str, Any]:
    report = run["report"] or {}
    out: dict[str, Any] = {"round": round_no}
    out.update({name: number(dig(report, path)) for name, path in figures.items()})
    out.update({name: dig(report, path) for name, path in flags.items()})
    out["cpu_busy_pct_before"] = run["cpu_busy_pct_before"]
    out["load_avg_before"] = run["load_avg_before"]
    out["load_avg_after"] = run["load_avg_after"]
    out["topic"] = dig(report, ("topic", "name"))
    out["ok"] = bool(report.get("ok")) and run["exit_code"] == 0
    out["exit_code"] = run["exit_code"]
    for key in ("error", "fatal"):
        if report.get(key):
            out[key] = report[key]
    for key in ("timed_out_after_s", "stderr_tail", "report_file"):
        if key in run:
            out[key] = run[key]
    return out


def invalid_reasons(measurement: str, row: dict[str, Any]) -> list[str]:
    """Why a run's figures should not be trusted (kept, with the reasons, in every median)."""
    reasons = []
    if not row["ok"]:
        reasons.append(f"run not ok (exit {row['exit_code']}): {row.get('error') or row.get('fatal') or ''}")
    if row.get("errors"):
        reasons.append(f"delivery errors {row['errors']}")
    if measurement == "saturation" and (row.get("records_delivered") or 0) < (row.get("records_sent") or 0):
        reasons.append("not every record sent was delivered")
    if measurement == "consume" and row.get("verified") is False:
        reasons.append("consumed count differs from produced")
    return reasons


def add_medians(block: dict[str, Any], figures: list[str]) -> None:
    rows = block["rounds"]
    block["median"] = {name: median([r.get(name) for r in rows]) for name in figures}
    block["each"] = {name: [r.get(name) for r in rows] for name in figures}


# --------------------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--a", required=True, metavar="HOST:PORT", help="target A (e.g. Shoal)")
    p.add_argument("--b", required=True, metavar="HOST:PORT", help="target B (e.g. Tansu, Kafka)")
    p.add_argument("--a-name", default="a", help="A's name in the JSON (e.g. shoal)")
    p.add_argument("--b-name", default="b", help="B's name in the JSON (e.g. tansu)")
    for t in ("a", "b"):
        p.add_argument(
            f"--{t}-topic-config",
            action="append",
            default=[],
            metavar="K=V",
            help=f"topic config of {t.upper()}'s topics, repeatable (Shoal: diskless.enable=true)",
        )
        p.add_argument(
            f"--{t}-objects-dir",
            help=f"{t.upper()}'s local object store (Shoal: <data-dir>/objects): WAL objects per second",
        )
        p.add_argument(
            f"--{t}-pid", type=int, help=f"{t.upper()}'s broker pid: its CPU and peak resident memory per phase"
        )
    p.add_argument("--rounds", type=int, default=2, help="A B rounds; each figure per round and the median")
    p.add_argument(
        "--producers",
        default="1",
        help="comma-separated producer counts of the fixed-rate phase, one run each (e.g. 1,50,100); "
        "empty: no fixed-rate phase",
    )
    p.add_argument("--rate", type=float, default=5000.0, help="records/s offered by all producers together")
    p.add_argument("--fixed-rate-duration", type=float, default=15.0, help="seconds of each fixed-rate run")
    p.add_argument("--records", type=int, default=200_000, help="records of the saturation phase")
    p.add_argument("--saturation-producers", type=int, default=1, help="producer processes when saturating")
    p.add_argument("--consumers", type=int, default=1, help="consumer processes of the consume phase")
    p.add_argument("--record-size", type=int, default=1024, help="value bytes per record")
    p.add_argument("--partitions", type=int, default=6, help="partitions of every topic")
    p.add_argument(
        "--duration", type=float, default=60.0, help="cap (s) of the saturation and consume phases"
    )
    p.add_argument(
        "--pc-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="extra argument for every produce_consume.py run, repeatable (e.g. --pc-arg=--compression=lz4)",
    )
    p.add_argument(
        "--spark",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="also run bench/spark_read.py against A's storage (needs pyspark, --a-metadata-path)",
    )
    p.add_argument("--a-metadata-path", help="Spark: A's shoal.db (shoal up: <data-dir>/logs/shoal.db)")
    p.add_argument("--a-storage-url", help="Spark: A's diskless.storage.url (default: --a-objects-dir)")
    p.add_argument(
        "--spark-topic",
        help="Spark: an existing topic of A to read (default: the topic each round's saturation filled on A)",
    )
    p.add_argument("--spark-master", default="local[2]")
    p.add_argument(
        "--spark-repeat",
        type=int,
        default=6,
        help="Spark reads per round (the best is reported; Spark's JIT warms over the first reads)",
    )
    p.add_argument(
        "--pause", type=float, default=5.0, help="seconds of quiet before each run (after the previous)"
    )
    p.add_argument(
        "--warmup-rounds",
        type=int,
        default=1,
        help="untimed saturation + consume runs on each target (A then B) before round 1, reported apart "
        "under 'warmup', so round 1 does not meet a broker that has served nothing yet (0: from a cold start)",
    )
    p.add_argument(
        "--pin",
        metavar="BROKER_CPUS:CLIENT_CPUS",
        help="Linux: keep both brokers' threads (--a-pid, --b-pid) on BROKER_CPUS and every benchmark "
        "run on CLIENT_CPUS, e.g. 0:1, so client and broker do not share a core",
    )
    p.add_argument("--keep-topics", action="store_true", help="do not delete the topics the runs create")
    p.add_argument("--reports-dir", help="also write every run's full report here, one file per run")
    p.add_argument("--output", help="also write the JSON document to this file")
    return p


def check_args(args: argparse.Namespace) -> list[int]:
    try:
        counts = [int(x) for x in args.producers.split(",") if x.strip()]
    except ValueError:
        raise SystemExit(f"--producers expects comma-separated counts, got {args.producers!r}") from None
    if min(counts, default=1) < 1:
        raise SystemExit("--producers: every count must be >= 1")
    for name in ("rounds", "records", "saturation_producers", "consumers", "record_size", "partitions"):
        if getattr(args, name) < 1:
            raise SystemExit(f"--{name.replace('_', '-')} must be >= 1")
    if args.rate <= 0 or args.fixed_rate_duration <= 0 or args.duration <= 0 or args.pause < 0:
        raise SystemExit("--rate, --fixed-rate-duration and --duration must be > 0, --pause >= 0")
    parse_address(args.a, "--a")
    parse_address(args.b, "--b")
    if args.a_name == args.b_name:
        raise SystemExit("--a-name and --b-name must differ")
    if args.spark:
        args.a_storage_url = args.a_storage_url or args.a_objects_dir
        if not args.a_metadata_path or not args.a_storage_url:
            raise SystemExit("--spark needs --a-metadata-path and --a-storage-url (or --a-objects-dir)")
    return list(dict.fromkeys(counts))


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    producer_counts = check_args(args)
    targets = {
        t: {
            "name": getattr(args, f"{t}_name"),
            "bootstrap": getattr(args, t),
            "topic_config": parse_kv(getattr(args, f"{t}_topic_config"), f"--{t}-topic-config"),
            "objects_dir": getattr(args, f"{t}_objects_dir"),
            "pid": getattr(args, f"{t}_pid"),
        }
        for t in ("a", "b")
    }
    pin = Pinning.parse(args.pin, [t["pid"] for t in targets.values() if t["pid"]]) if args.pin else None
    import confluent_kafka

    doc: dict[str, Any] = {
        "benchmark": "bench/compare.py",
        "started_at": utc_now(),
        "host": {
            "hostname": socket.gethostname(),
            "platform": platform.platform(),
            "python": platform.python_version(),
            "cpu_count": os.cpu_count(),
        },
        "client": {
            "confluent_kafka": confluent_kafka.__version__,
            "librdkafka": confluent_kafka.libversion()[0],
        },
        "parameters": {
            "a": targets["a"],
            "b": targets["b"],
            "rounds": args.rounds,
            "order": "first --warmup-rounds untimed saturation+consume runs (A then B); then per round: "
            "fixed-rate runs (each producer count: A then B), then saturation+consume (A then B), then Spark on A",
            "fixed_rate_producers": producer_counts,
            "rate_records_per_s": args.rate,
            "fixed_rate_duration_s": args.fixed_rate_duration,
            "records": args.records,
            "saturation_producers": args.saturation_producers,
            "consumers": args.consumers,
            "record_size": args.record_size,
            "partitions": args.partitions,
            "duration_cap_s": args.duration,
            "pause_before_each_run_s": args.pause,
            "warmup_rounds": args.warmup_rounds,
            "producer": {
                "acks": "all",
                "enable.idempotence": True,
                "max.in.flight.requests.per.connection": 5,
            },
            "extra_produce_consume_args": args.pc_arg,
            "pin": (
                {"broker_cpus": sorted(pin.brokers), "client_cpus": sorted(pin.clients)} if pin is not None else None
            ),
            "spark": (
                {
                    "metadata_path": args.a_metadata_path,
                    "storage_url": args.a_storage_url,
                    "topic": args.spark_topic or "each round's saturation topic on A",
                    "master": args.spark_master,
                    "repeat": args.spark_repeat,
                }
                if args.spark
                else False
            ),
        },
        "load_avg_start": load_avg(),
    }
    unreachable = [e for e in (reachable(args.a, "--a"), reachable(args.b, "--b")) if e]
    if unreachable:
        doc["error"] = "; ".join(unreachable)
        doc["ok"] = False
        log(doc["error"])
        emit(doc, args.output)
        return 1

    fixed_names = [f"fixed_rate_{n}p" for n in producer_counts]
    measurements = [*fixed_names, "saturation", "consume"] + (["spark"] if args.spark else [])
    results: dict[str, dict[str, Any]] = {
        targets[t]["name"]: {m: {"rounds": []} for m in measurements if t == "a" or m != "spark"}
        for t in ("a", "b")
    }
    if args.reports_dir:
        os.makedirs(args.reports_dir, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")

    def keep_report(run: dict[str, Any], label: str) -> None:
        if args.reports_dir and run["report"] is not None:
            path = os.path.join(args.reports_dir, f"compare-{stamp}-{label}.json")
            with open(path, "w") as f:
                json.dump(run["report"], f, indent=2)
            run["report_file"] = path

    pc_timeout = args.duration * 3 + args.fixed_rate_duration + 240
    warmup: list[dict[str, Any]] = []
    for warmup_no in range(1, args.warmup_rounds + 1):
        for t in ("a", "b"):
            tname = targets[t]["name"]
            log(f"warm-up {warmup_no}/{args.warmup_rounds}: {tname} saturation ({args.records} records) + consume")
            run = run_child(throughput_cmd(args, targets[t], False), f"[{tname} warm-up]", pc_timeout, args.pause, pin)
            row = summarise_run(run, warmup_no, SATURATION_FIGURES, SATURATION_FLAGS)
            warmup.append({"target": tname, **row})
            log(f"  -> produce {row['produce_mb_per_s']} MB/s (not counted)")
    doc["warmup"] = warmup
    for round_no in range(1, args.rounds + 1):
        for n, name in zip(producer_counts, fixed_names, strict=True):
            for t in ("a", "b"):
                tname = targets[t]["name"]
                log(
                    f"round {round_no}/{args.rounds}: {tname} fixed rate {args.rate:g} rec/s, {n} producer(s)"
                )
                run = run_child(
                    fixed_rate_cmd(args, targets[t], n),
                    f"[{tname} {name}]",
                    pc_timeout + ready_timeout(n),
                    args.pause,
                    pin,
                )
                keep_report(run, f"r{round_no}-{tname}-{name}")
                row = summarise_run(run, round_no, FIXED_RATE_FIGURES, FIXED_RATE_FLAGS)
                row["invalid_reasons"] = invalid_reasons(name, row)
                results[tname][name]["rounds"].append(row)
                log(
                    f"  -> p50 {row['p50_ms']} p99 {row['p99_ms']} p999 {row['p999_ms']} ms, "
                    f"objects/s {row['wal_objects_per_s']}, kept up {row['kept_up']}"
                )
        spark_topic: str | None = None
        for t in ("a", "b"):
            tname = targets[t]["name"]
            keep = args.keep_topics or (t == "a" and args.spark and not args.spark_topic)
            log(f"round {round_no}/{args.rounds}: {tname} saturation ({args.records} records) + consume")
            run = run_child(
                throughput_cmd(args, targets[t], keep), f"[{tname} throughput]", pc_timeout, args.pause, pin
            )
            keep_report(run, f"r{round_no}-{tname}-throughput")
            for name, figures, flags in (
                ("saturation", SATURATION_FIGURES, SATURATION_FLAGS),
                ("consume", CONSUME_FIGURES, CONSUME_FLAGS),
            ):
                row = summarise_run(run, round_no, figures, flags)
                row["invalid_reasons"] = invalid_reasons(name, row)
                results[tname][name]["rounds"].append(row)
            sat = results[tname]["saturation"]["rounds"][-1]
            con = results[tname]["consume"]["rounds"][-1]
            log(f"  -> produce {sat['produce_mb_per_s']} MB/s, consume {con['consume_mb_per_s']} MB/s")
            if t == "a":
                spark_topic = sat["topic"]
        if args.spark:
            topic = args.spark_topic or spark_topic
            tname = targets["a"]["name"]
            if topic is None:
                row = {
                    "round": round_no,
                    "ok": False,
                    "error": "no topic on A to read (saturation run failed)",
                    "invalid_reasons": ["no topic on A to read"],
                }
            else:
                log(f"round {round_no}/{args.rounds}: {tname} Spark read of {topic}")
                run = run_child(
                    spark_cmd(args, targets["a"], topic),
                    f"[{tname} spark]",
                    args.duration * 10 + 600,
                    args.pause,
                    pin,
                )
                keep_report(run, f"r{round_no}-{tname}-spark")
                row = summarise_run(run, round_no, SPARK_FIGURES, {"verified": ("verified",)})
                row["topic"] = topic
                row["invalid_reasons"] = (
                    [] if row["ok"] else [f"spark_read.py not ok: {row.get('error', '')}"]
                )
                if not args.spark_topic and not args.keep_topics:
                    row["delete_error"] = delete_topic(targets["a"]["bootstrap"], topic)
                log(
                    f"  -> consumer {row['consumer_mb_per_s']} MB/s, Spark {row['spark_storage_mb_per_s']} MB/s"
                )
            results[tname]["spark"]["rounds"].append(row)

    for per_target in results.values():
        for name, block in per_target.items():
            if name.startswith("fixed_rate"):
                add_medians(block, list(FIXED_RATE_FIGURES))
            elif name == "saturation":
                add_medians(block, list(SATURATION_FIGURES))
            elif name == "consume":
                add_medians(block, list(CONSUME_FIGURES))
            else:
                add_medians(block, list(SPARK_FIGURES))
            block["invalid_rounds"] = [r["round"] for r in block["rounds"] if r.get("invalid_reasons")]
            if name.startswith("fixed_rate"):
                block["rounds_not_kept_up"] = [
                    r["round"] for r in block["rounds"] if r.get("kept_up") is False
                ]
    doc["results"] = results

    a, b = targets["a"]["name"], targets["b"]["name"]
    ratios: dict[str, Any] = {
        "a": a,
        "b": b,
        "meaning": "each value is A's median divided by B's median (a_over_b): above 1 means A is higher; "
        "for *_mb_per_s higher is better, for *_ms lower is better",
    }
    for measurement, figure, key in RATIOS:
        ratios[key] = ratio(
            results[a][measurement]["median"][figure], results[b][measurement]["median"][figure]
        )
    for name in fixed_names:
        ratios[name] = {
            key: ratio(results[a][name]["median"][figure], results[b][name]["median"][figure])
            for figure, key in FIXED_RATE_RATIOS
        }
    if args.spark:
        spark = results[a]["spark"]["median"]
        ratios["spark_storage_a_over_consume_b"] = ratio(
            spark["spark_storage_mb_per_s"], results[b]["consume"]["median"]["consume_mb_per_s"]
        )
        ratios["spark_storage_over_consumer_a"] = spark["spark_storage_over_consumer"]
    doc["ratios"] = ratios
    doc["load_avg_end"] = load_avg()
    doc["finished_at"] = utc_now()
    invalid = {
        f"{tname}.{name}": block["invalid_rounds"]
        for tname, per_target in results.items()
        for name, block in per_target.items()
        if block["invalid_rounds"]
    }
    doc["invalid"] = invalid
    doc["did_not_keep_up"] = {
        f"{tname}.{name}": block["rounds_not_kept_up"]
        for tname, per_target in results.items()
        for name, block in per_target.items()
        if block.get("rounds_not_kept_up")
    }
    doc["ok"] = not invalid
    emit(doc, args.output)
    return 0 if doc["ok"] else 2


def emit(doc: dict[str, Any], output: str | None) -> None:
    text = json.dumps(doc, indent=2)
    print(text, flush=True)
    if output:
        os.makedirs(os.path.dirname(os.path.abspath(output)), exist_ok=True)
        with open(output, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    sys.exit(main())
