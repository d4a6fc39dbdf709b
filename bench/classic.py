#!/usr/bin/env python3
"""Classic-topic throughput next to what the same disk takes raw, in one run, as one JSON document.

1. Starts a single-node Shoal (``python -m shoal up``) whose log dir is in ``--data-dir`` (a fresh
   directory under ``--data-parent``: put it on the disk you want to measure).
2. Runs ``bench/produce_consume.py`` against it with a classic topic (no ``diskless.enable``),
   1 KiB records, acks=all (by default the saturation and consume phases).
3. Stops the broker, then runs ``bench/disk_write.py`` in the broker's log dir: one sequential
   write + fsync of a file as large as the topic's segments (what the broker wrote).

Nothing runs at the same time as something else, so neither measurement competes with the other.
Prints one JSON document on stdout (progress on stderr); ``--output`` also writes it, and
``--details`` adds both scripts' full reports.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
MB = 1_000_000
MIB = 1 << 20


def log(msg: str) -> None:
    print(f"[classic {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def environment() -> dict[str, str]:
    """Run ``-m shoal`` from this checkout even when the package is not installed."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO / "src"), env.get("PYTHONPATH", "")) if p)
    return env


def start_broker(data_dir: Path, port: int, overrides: list[str]) -> subprocess.Popen[bytes]:
    """``shoal up`` on a loopback port; returns once it accepts connections (bounded wait)."""
    cmd = [sys.executable, "-m", "shoal", "up", "--data-dir", str(data_dir),
           "--override", f"listeners=PLAINTEXT://127.0.0.1:{port}",
           "--override", f"advertised.listeners=PLAINTEXT://127.0.0.1:{port}"]
    for item in overrides:
        cmd += ["--override", item]
    with open(data_dir / "broker.log", "ab") as log_file:  # the child keeps its own descriptor
        proc = subprocess.Popen(cmd, stdout=log_file, stderr=log_file, stdin=subprocess.DEVNULL,
                                env=environment(), start_new_session=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"broker exited with {proc.returncode}; see {data_dir / 'broker.log'}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return proc
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit(f"broker not listening on {port} after 60 s; see {data_dir / 'broker.log'}")


def stop_broker(proc: subprocess.Popen[bytes]) -> int | None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
    return proc.returncode


def run_json(cmd: list[str], timeout: float) -> tuple[int, dict[str, Any]]:
    """Run a bench script (stderr passed through) and parse the JSON document it prints."""
    done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=None, timeout=timeout, env=environment())
    try:
        return done.returncode, json.loads(done.stdout)
    except json.JSONDecodeError:
        raise SystemExit(f"{cmd[1]} exited {done.returncode} without a JSON report: {done.stdout[-2000:]!r}") from None


def topic_log_bytes(log_dir: Path, topic: str) -> int:
    """Bytes of the topic's segment files (``.log``) across its partition dirs."""
    total = 0
    for child in log_dir.iterdir():
        if child.is_dir() and child.name.startswith(f"{topic}-") and child.name[len(topic) + 1 :].isdigit():
            total += sum(f.stat().st_size for f in child.glob("*.log"))
    return total


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data-parent", default=str(BENCH / "results"),
                   help="where the broker's data dir is created (its file system is the one measured)")
    p.add_argument("--records", type=int, default=1_000_000,
                   help="records to produce (default ~1 GB of 1 KiB records: smaller runs fit in the page cache)")
    p.add_argument("--record-size", type=int, default=1024)
    p.add_argument("--partitions", type=int, default=6)
    p.add_argument("--producers", type=int, default=1)
    p.add_argument("--phases", default="saturation,consume", help="phases of produce_consume.py")
    p.add_argument("--duration", type=float, default=60.0, help="cap (s) of each produce_consume.py phase")
    p.add_argument("--broker-override", action="append", default=[], help="broker config key=value (repeatable)")
    p.add_argument("--keep-data", action="store_true", help="keep the broker's data dir afterwards")
    p.add_argument("--details", action="store_true", help="include both scripts' full reports")
    p.add_argument("--output", help="also write the JSON document to this file")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    parent = Path(args.data_parent)
    parent.mkdir(parents=True, exist_ok=True)
    data_dir = Path(tempfile.mkdtemp(prefix="classic-bench-", dir=parent))
    log_dir = data_dir / "logs"  # where `shoal up` puts log.dirs
    port = free_port()
    topic = f"bench-classic-{time.strftime('%Y%m%d-%H%M%S')}"
    report: dict[str, Any] = {
        "benchmark": "bench/classic.py",
        "started_at": dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds"),
        "cpu_count": os.cpu_count(),
        "load_avg_start": [round(x, 2) for x in os.getloadavg()],
        "config": {
            "records": args.records, "record_size": args.record_size, "partitions": args.partitions,
            "producers": args.producers, "acks": "all", "phases": args.phases, "topic": topic,
            "broker_overrides": args.broker_override, "data_dir": str(data_dir),
        },
    }
    try:
        log(f"broker in {data_dir} on 127.0.0.1:{port}")
        broker = start_broker(data_dir, port, args.broker_override)
        try:
            rc, produced = run_json(
                [sys.executable, str(BENCH / "produce_consume.py"), "--bootstrap", f"127.0.0.1:{port}",
                 "--topic", topic, "--partitions", str(args.partitions), "--record-size", str(args.record_size),
                 "--records", str(args.records), "--acks", "all", "--producers", str(args.producers),
                 "--phases", args.phases, "--duration", str(args.duration), "--broker-pid", str(broker.pid)],
                timeout=args.duration * 4 + 120,
            )
        finally:
            report["broker_exit_code"] = stop_broker(broker)
        on_disk = topic_log_bytes(log_dir, topic)
        saturation = produced.get("produce_saturation") or {}
        delivered = saturation.get("records_delivered", 0)
        value_bytes = delivered * args.record_size
        size = on_disk or value_bytes
        log(f"produce done ({delivered} records, {on_disk} bytes of segments); raw write of {size} bytes in {log_dir}")
        _, raw = run_json([sys.executable, str(BENCH / "disk_write.py"), "--dir", str(log_dir), "--bytes", str(size)],
                          timeout=600)
    finally:
        if not args.keep_data:
            shutil.rmtree(data_dir, ignore_errors=True)

    consume = produced.get("consume") or {}
    latency = saturation.get("latency_ms") or {}
    elapsed = saturation.get("elapsed_s")
    report["filesystem"] = raw.get("filesystem")
    report["shoal_classic_produce"] = {
        "records_delivered": delivered,
        "errors": saturation.get("errors"),
        "elapsed_s": elapsed,
        "records_per_s": saturation.get("records_per_s"),
        "mb_per_s": saturation.get("mb_per_s"),
        "mib_per_s": saturation.get("mib_per_s"),
        "segment_bytes_written": on_disk,
        "segment_mb_per_s": round(on_disk / MB / elapsed, 2) if elapsed and on_disk else None,
        "latency_ms_p50": latency.get("p50"),
        "latency_ms_p99": latency.get("p99"),
        "broker_cpu_pct": saturation.get("broker_cpu_pct"),
        "client_cpu_s": saturation.get("client_cpu_s"),
    }
    report["shoal_classic_consume"] = {
        k: consume.get(k) for k in ("records", "records_per_s", "mb_per_s", "verified", "broker_cpu_pct")
    }
    report["raw_disk_write"] = {
        k: raw.get(k) for k in ("bytes", "block_size", "fsyncs", "write_s", "fsync_s", "elapsed_s", "mb_per_s", "mib_per_s")
    }
    produce_mb = report["shoal_classic_produce"]["segment_mb_per_s"]
    raw_mb = raw.get("mb_per_s")
    report["produce_vs_raw_write"] = round(produce_mb / raw_mb, 4) if produce_mb and raw_mb else None
    report["ok"] = bool(produced.get("ok")) and rc == 0 and report["broker_exit_code"] == 0
    report["load_avg_end"] = [round(x, 2) for x in os.getloadavg()]
    report["finished_at"] = dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds")
    if args.details:
        report["details"] = {"produce_consume": produced, "disk_write": raw}
    text = json.dumps(report, indent=2)
    print(text, flush=True)
    if args.output:
        Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        Path(args.output).write_text(text + "\n")
    return 0 if report["ok"] else 2


if __name__ == "__main__":
    sys.exit(main())
