"""Classic-topic replication: replication factor 3 beside 1 on one cluster, and a follower's catch-up.

Starts ``shoal up --brokers 3`` (``--brokers``) on a fresh data dir under ``--data-parent``, or
uses a running cluster given with ``--bootstrap HOST:PORT`` (then it starts and stops nothing),
and runs ``bench/produce_consume.py`` against it, alternating the setups A B A B for ``--rounds``:

- ``rf3`` (A): a classic topic with replication factor 3 and ``min.insync.replicas=2``;
- ``rf1`` (B): a classic topic with replication factor 1;

both with the same clients: acks=all, idempotent producers, 5 requests in flight per connection;
phases saturation (produce MB/s), fixed-rate (latency at ``--rate``) and consume (MB/s). Each run
uses a fresh topic, deleted afterwards (``--keep-topics`` keeps them). A run whose topic did not
get the asked replication factor (produce_consume.py falls back to 1 when the broker refuses it)
is reported but left out of the medians; an ``rf3`` setup the broker refuses outright (a probe
topic is created first) is not run at all and its refusal is in the JSON.

Then (``--catchup-runs``, only on brokers this script started) the follower catch-up: on a fresh
topic with replication factor 3, it SIGSTOPs one broker (``--stop-broker``, by default one that is
not the active controller and leads the fewest partitions), produces ``--catchup-mb`` MB (one
producer in this process, the setups' settings) to the partitions that broker follows, waits until
the ISR of every one of them has dropped it, SIGCONTs it and polls the topic's metadata (``isrs``) every
``--poll-interval`` until the ISR of every partition holds it again. The figure,
``catchup_mb_per_s``, is the record bytes the leaders appended while it was stopped (high
watermarks after minus before) over the seconds from SIGCONT to the end of the first poll that
showed it back everywhere (``catchup_s``; ``catchup_s_at_least`` is the start of the last poll
that did not): the broker's wake-up, rejoining the cluster and any truncation are in those
seconds, so use a fill that takes several seconds to copy. Every wait is bounded
(``--isr-timeout``, ``--fill-timeout``, ``--catchup-timeout``); a wait that runs out is
reported, not retried.

Prints one JSON document on stdout (progress on stderr): every run's full report with the
machine's load before it, the medians per setup and the catch-up measurements. Exit status 0 when
every setup ran, every run was valid and every catch-up was measured (or skipped on purpose); 2
otherwise (the JSON is printed either way, with ``"ok": false``).

    .venv/bin/python bench/replication.py --rounds 2 --records 100000
    .venv/bin/python bench/replication.py --setups rf1 --rounds 1 --records 5000 --catchup-runs 0
    .venv/bin/python bench/replication.py --bootstrap 127.0.0.1:19092   # a running cluster

On one 2-core machine the three brokers and the clients share the cores: the figures say what
replication costs on that machine, not on three.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from compare_runs import run_json_script  # bench/ is on sys.path when a bench script runs
from local_cluster import ROOT, Cluster, admin_client
from replication_catchup import catchup_once

#: The setups: replication factor and topic configs (besides the shared client settings).
SETUPS = ("rf3", "rf1")


def log(msg: str) -> None:
    print(f"[replication {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------------------
# Setups A and B through produce_consume.py
# --------------------------------------------------------------------------------------


def setup_spec(name: str, args: argparse.Namespace) -> dict[str, Any]:
    if name == "rf3":
        return {
            "replication_factor": 3,
            "topic_config": {"min.insync.replicas": str(args.min_insync_replicas)},
        }
    return {"replication_factor": 1, "topic_config": {}}


def client_flags() -> list[str]:
    """produce_consume.py's client flags, the same for every setup (``fill`` uses the same settings)."""
    return ["--acks", "all", "--idempotence", "--producer-config", "max.in.flight.requests.per.connection=5"]


def probe_replication(bootstrap: str, spec: dict[str, Any], timeout: float) -> str | None:
    """Create (and delete) a topic with the setup's replication factor: None, or why it was refused."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import NewTopic

    admin = admin_client(bootstrap)
    name = f"bench-rf-probe-{uuid.uuid4().hex[:8]}"
    new = NewTopic(
        name, num_partitions=1, replication_factor=spec["replication_factor"], config=spec["topic_config"]
    )
    try:
        admin.create_topics([new], operation_timeout=timeout, request_timeout=timeout)[name].result(
            timeout + 10
        )
    except KafkaException as exc:
        return str(exc.args[0])
    except Exception as exc:  # a timeout of the future, say
        return f"{type(exc).__name__}: {exc}"
    with contextlib.suppress(Exception):
        admin.delete_topics([name], operation_timeout=timeout, request_timeout=timeout)[name].result(
            timeout + 10
        )
    return None


def run_setup(
    name: str, round_no: int, bootstrap: str, broker_pid: int | None, args: argparse.Namespace
) -> dict[str, Any]:
    """One run of produce_consume.py for setup ``name``; its report, checked for the replication factor."""
    spec = setup_spec(name, args)
    cmd = [
        sys.executable,
        str(ROOT / "bench" / "produce_consume.py"),
        "--bootstrap",
        bootstrap,
        "--replication-factor",
        str(spec["replication_factor"]),
        *client_flags(),
        "--records",
        str(args.records),
        "--record-size",
        str(args.record_size),
        "--partitions",
        str(args.partitions),
        "--producers",
        str(args.producers),
        "--consumers",
        str(args.consumers),
        "--phases",
        "saturation,fixed-rate,consume",
        "--rate",
        str(args.rate),
        "--fixed-rate-duration",
        str(args.fixed_rate_duration),
        "--duration",
        str(args.duration),
    ]
    for key, value in spec["topic_config"].items():
        cmd += ["--topic-config", f"{key}={value}"]
    if broker_pid is not None:
        cmd += ["--broker-pid", str(broker_pid)]
    if not args.keep_topics:
        cmd += ["--delete-topic"]
    load = os.getloadavg()
    timeout = args.duration * 4 + args.fixed_rate_duration + 180
    child = run_json_script(cmd, "|", timeout)
    result: dict[str, Any] = child.report or {}
    run: dict[str, Any] = {
        "setup": name,
        "round": round_no,
        "replication_factor_asked": spec["replication_factor"],
        "topic_config": spec["topic_config"],
        "load_avg_start": load,
        "exit_code": child.exit_code,
    }
    reasons = []
    if child.timed_out:
        reasons.append(f"timed out after {timeout}s")
    if not result:
        reasons.append("no JSON report")
        run["stderr_tail"] = child.tail[-40:]
    got = (result.get("topic") or {}).get("replication_factor")
    if result and got != spec["replication_factor"]:
        refusals = [line for line in child.tail if "create_topics with replication_factor" in line]
        reasons.append(f"topic got replication factor {got}, not {spec['replication_factor']}: {refusals}")
    if result and not result.get("ok"):
        reasons.append(f"produce_consume.py reported ok=false: {result.get('error', 'see the report')}")
    reasons += _shortfalls(result)
    run["valid"] = not reasons
    run["invalid_reasons"] = reasons
    run["result"] = result
    return run


def _shortfalls(result: dict[str, Any]) -> list[str]:
    """What produce_consume.py's ``ok`` lets through: a phase that delivered nothing or not all."""
    if not result or "error" in result:
        return []
    out = []
    saturation = result.get("produce_saturation") or {}
    delivered = saturation.get("records_delivered") or 0
    sent = saturation.get("records_sent") or 0
    if not delivered or delivered < sent:  # fewer sent than --records is the --duration cap: fine
        out.append(
            f"saturation delivered {delivered} of {sent} records sent, errors {saturation.get('error_counts')}"
        )
    fixed = result.get("produce_fixed_rate") or {}
    if not fixed.get("records_delivered") or fixed.get("errors"):
        out.append(
            f"fixed-rate delivered {fixed.get('records_delivered')} records, errors {fixed.get('error_counts')}"
        )
    consume = result.get("consume") or {}
    if not consume.get("records"):
        out.append("consume read no record")
    return out


def _figure(run: dict[str, Any], *path: str) -> float | None:
    """A figure of a run's report by its keys, e.g. ``("consume", "mb_per_s")``."""
    value: Any = run["result"]
    for key in path:
        value = value.get(key) if isinstance(value, dict) else None
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _median(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return round(statistics.median(present), 2) if present else None


FIGURES = {
    "produce_saturation_mb_per_s": ("produce_saturation", "mb_per_s"),
    "produce_saturation_p99_ms": ("produce_saturation", "latency_ms", "p99"),
    "fixed_rate_p50_ms": ("produce_fixed_rate", "latency_ms", "p50"),
    "fixed_rate_p99_ms": ("produce_fixed_rate", "latency_ms", "p99"),
    "fixed_rate_achieved_mb_per_s": ("produce_fixed_rate", "achieved_mb_per_s"),
    "consume_mb_per_s": ("consume", "mb_per_s"),
    "broker_cpu_pct_saturation": ("produce_saturation", "broker_cpu_pct"),
}


def summarise(runs: list[dict[str, Any]], setups: list[str], refused: dict[str, str]) -> dict[str, Any]:
    summary: dict[str, Any] = {}
    for name in setups:
        mine = [r for r in runs if r["setup"] == name]
        valid = [r for r in mine if r["valid"]]
        entry: dict[str, Any] = {"runs": len(mine), "valid_runs": len(valid)}
        if name in refused:
            entry["refused"] = refused[name]
        for figure, path in FIGURES.items():
            values = [_figure(r, *path) for r in valid]
            entry[figure] = _median(values)
            entry[f"{figure}_each"] = values
        entry["fixed_rate_kept_up_each"] = [
            (r["result"].get("produce_fixed_rate") or {}).get("kept_up") for r in valid
        ]
        summary[name] = entry
    if all(name in summary for name in SETUPS):
        a, b = summary["rf3"], summary["rf1"]

        def ratio(key: str) -> float | None:
            return round(a[key] / b[key], 3) if a[key] is not None and b[key] else None

        summary["rf3_over_rf1"] = {
            "produce_saturation_mb_per_s": ratio("produce_saturation_mb_per_s"),
            "fixed_rate_p99_ms": ratio("fixed_rate_p99_ms"),
            "consume_mb_per_s": ratio("consume_mb_per_s"),
        }
    return summary


# --------------------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--bootstrap",
        metavar="HOST:PORT",
        help="a running cluster to measure (nothing is started or stopped; no catch-up part). "
        "Default: start `shoal up --brokers N` on a fresh data dir",
    )
    p.add_argument(
        "--brokers",
        type=int,
        default=3,
        help="brokers of the cluster started (default 3; at least 3 for rf3)",
    )
    p.add_argument(
        "--setups",
        default="rf3,rf1",
        help="comma-separated subset of rf3 (A: RF 3, min.insync.replicas) and rf1 (B: RF 1), "
        "run in this order each round (default rf3,rf1)",
    )
    p.add_argument("--rounds", type=int, default=2, help="rounds of the setups, alternating (default 2)")
    p.add_argument(
        "--records", type=int, default=100000, help="records of the saturation phase (default 100000)"
    )
    p.add_argument(
        "--record-size", type=int, default=1024, help="value bytes per record, incompressible (default 1024)"
    )
    p.add_argument("--partitions", type=int, default=6, help="partitions of each topic (default 6)")
    p.add_argument("--producers", type=int, default=2, help="producer processes (default 2)")
    p.add_argument("--consumers", type=int, default=2, help="consumer processes (default 2)")
    p.add_argument(
        "--duration",
        type=float,
        default=60.0,
        help="cap (s) of the saturation and consume phases (default 60)",
    )
    p.add_argument(
        "--rate",
        type=float,
        default=5000.0,
        help="records/s of the fixed-rate (latency) phase (default 5000)",
    )
    p.add_argument(
        "--fixed-rate-duration", type=float, default=15.0, help="seconds of the fixed-rate phase (default 15)"
    )
    p.add_argument(
        "--min-insync-replicas",
        type=int,
        default=2,
        help="min.insync.replicas of the rf3 and catch-up topics (default 2)",
    )
    p.add_argument(
        "--catchup-runs",
        type=int,
        default=1,
        help="follower catch-up measurements after the rounds, each on a fresh topic; 0: none (default 1)",
    )
    p.add_argument(
        "--catchup-mb",
        type=float,
        default=200.0,
        help="MB (10^6 bytes of record values) produced while the follower is stopped (default 200)",
    )
    p.add_argument(
        "--stop-broker",
        type=int,
        metavar="NODE_ID",
        help="node id of the broker to stop (default: not the active controller, fewest leaderships)",
    )
    p.add_argument(
        "--isr-timeout",
        type=float,
        default=90.0,
        help="seconds to wait for a new topic's full ISR, and for the ISR to drop the stopped broker "
        "(counted from SIGSTOP; Kafka's replica.lag.time.max.ms is 30 s) (default 90)",
    )
    p.add_argument(
        "--fill-timeout",
        type=float,
        default=180.0,
        help="seconds the catch-up fill may take, flush included (default 180)",
    )
    p.add_argument(
        "--catchup-timeout",
        type=float,
        default=300.0,
        help="seconds after SIGCONT to wait for the broker to be back in every ISR (default 300)",
    )
    p.add_argument("--poll-interval", type=float, default=0.2, help="seconds between ISR polls (default 0.2)")
    p.add_argument(
        "--startup-timeout",
        type=float,
        default=90.0,
        help="seconds for the started brokers to listen and register (default 90)",
    )
    p.add_argument(
        "--broker-override",
        action="append",
        default=[],
        metavar="K=V",
        help="broker config passed to `shoal up --override`, repeatable (e.g. replica.lag.time.max.ms=10000)",
    )
    p.add_argument(
        "--data-parent",
        default=str(ROOT / "bench" / "results"),
        help="where the started cluster's fresh data dir is made: the disk measured "
        "(default bench/results/, git-ignored)",
    )
    p.add_argument("--keep-data", action="store_true", help="keep the started cluster's data dir")
    p.add_argument("--keep-topics", action="store_true", help="do not delete the topics after each run")
    p.add_argument("--output", help="also write the JSON document to this file")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    setups = [s.strip() for s in args.setups.split(",") if s.strip()]
    if not setups or any(s not in SETUPS for s in setups) or len(set(setups)) != len(setups):
        raise SystemExit(f"--setups: a comma-separated subset of {','.join(SETUPS)}, got {args.setups!r}")
    for name in (
        "rounds",
        "records",
        "record_size",
        "partitions",
        "producers",
        "consumers",
        "min_insync_replicas",
    ):
        if getattr(args, name) < 1:
            raise SystemExit(f"--{name.replace('_', '-')} must be >= 1")
    if args.catchup_runs < 0 or args.catchup_mb <= 0 or args.poll_interval <= 0:
        raise SystemExit("--catchup-runs must be >= 0, --catchup-mb and --poll-interval > 0")
    if args.bootstrap is None and args.brokers < 3 and ("rf3" in setups or args.catchup_runs):
        raise SystemExit("--brokers must be at least 3 for the rf3 setup and the catch-up")
    if args.stop_broker is not None and args.bootstrap is None and not 1 <= args.stop_broker <= args.brokers:
        raise SystemExit(f"--stop-broker: node ids are 1..{args.brokers}")

    report: dict[str, Any] = {
        "benchmark": "bench/replication.py",
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {"cpus": os.cpu_count(), "hostname": socket.gethostname()},
        "config": {k: v for k, v in vars(args).items() if k != "output"},
        "clients": {"acks": "all", "enable.idempotence": True, "max.in.flight.requests.per.connection": 5},
        "setups": {name: setup_spec(name, args) for name in setups},
    }
    cluster: Cluster | None = None
    runs: list[dict[str, Any]] = []
    refused: dict[str, str] = {}
    catchups: list[dict[str, Any]] = []
    try:
        if args.bootstrap:
            bootstrap, broker_pid = args.bootstrap, None
            report["cluster"] = {"started_by_bench": False, "bootstrap": bootstrap}
        else:
            cluster = Cluster(args)
            report["cluster"] = {
                "started_by_bench": True,
                "brokers": args.brokers,
                "bootstrap": cluster.bootstrap,
                "data_dir": str(cluster.data_dir),
            }
            cluster.start()
            bootstrap = cluster.bootstrap
            broker_pid = cluster.proc.pid if cluster.proc else None  # shoal up: CPU of it and its brokers
            report["cluster"].update(
                {
                    "supervisor_pid": broker_pid,
                    "broker_pids": {str(n): p for n, p in cluster.broker_pids.items()},
                }
            )
        for name in setups:
            spec = setup_spec(name, args)
            if spec["replication_factor"] > 1:
                why = probe_replication(bootstrap, spec, 30)
                report["setups"][name]["probe"] = why or "accepted"
                if why:
                    refused[name] = why
                    log(
                        f"setup {name}: the broker refuses replication factor {spec['replication_factor']}: {why}"
                    )
        for i in range(args.rounds):
            for name in setups:
                if name in refused:
                    continue
                log(f"round {i + 1}: setup {name}")
                run = run_setup(name, i + 1, bootstrap, broker_pid, args)
                runs.append(run)
                log(f"round {i + 1}: setup {name}: valid {run['valid']} {run['invalid_reasons'] or ''}")
        if args.catchup_runs == 0:
            report["catchup"] = {"skipped": True, "reason": "--catchup-runs 0"}
        elif cluster is None:
            report["catchup"] = {
                "skipped": True,
                "reason": "--bootstrap given: the brokers were not started by this "
                "bench, so it does not stop one; run without --bootstrap for the catch-up",
            }
        else:
            for i in range(args.catchup_runs):
                try:
                    catchups.append(catchup_once(cluster, i + 1, args))
                except Exception as exc:  # report it with the rest rather than lose the rounds
                    log(f"catch-up {i + 1} failed: {type(exc).__name__}: {exc}")
                    catchups.append(
                        {"run": i + 1, "measured": False, "error": f"{type(exc).__name__}: {exc}"}
                    )
            measured = [c for c in catchups if c.get("measured")]
            report["catchup"] = {
                "skipped": False,
                "runs": len(catchups),
                "measured_runs": len(measured),
                "catchup_mb_per_s": _median([c.get("catchup_mb_per_s") for c in measured]),
                "catchup_s": _median([c.get("catchup_s") for c in measured]),
                "isr_dropped_after_stop_s": _median([c.get("isr_dropped_after_stop_s") for c in measured]),
                "measurements": catchups,
            }
    except Exception as exc:
        log(f"stopped: {type(exc).__name__}: {exc}")
        report["error"] = f"{type(exc).__name__}: {exc}"
        if cluster is not None:
            report["cluster"]["up_log_tail"] = cluster.log_tail()
        report.setdefault("catchup", {"skipped": True, "reason": f"not reached: {report['error']}"})
    finally:
        if cluster is not None:
            log("stopping the cluster")
            cluster.stop()
    report["summary"] = summarise(runs, setups, refused)
    report["runs"] = runs
    report["finished_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    catchup = report.get("catchup") or {}
    report["ok"] = bool(
        "error" not in report
        and not refused
        and all(r["valid"] for r in runs)
        and (catchup.get("skipped") or catchup.get("measured_runs") == catchup.get("runs"))
    )
    text = json.dumps(report, indent=2)
    print(text, flush=True)
    if args.output:
        Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        Path(args.output).write_text(text + "\n")
    return 0 if report["ok"] else 2


if __name__ == "__main__":
    sys.exit(main())
