"""Shoal as one broker beside Shoal as a cluster of N, in the same run: produce and consume MB/s.

Starts ``shoal up`` (1 broker) and ``shoal up --brokers N`` on a fresh data dir each time,
alternating A B A B for ``--rounds`` rounds, and runs ``bench/produce_consume.py`` against each
with the same settings (idempotent producers, 5 requests in flight per connection: the clients'
defaults), on a diskless topic: saturation, a fixed-rate phase (latency at ``--rate``), consume.
Prints one JSON document: every run's full report (with the brokers' CPU and objects written),
the machine's load before each, and the medians per setup.

    .venv/bin/python bench/cluster.py --brokers 3 --rounds 2 --records 100000

On one 2-core machine every broker competes for the same cores: the figure says what a cluster
costs or gains on that machine, not what N machines give.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def free_base_port(count: int) -> int:
    """A port p such that p..p+count-1 are free on loopback (checked, not reserved)."""
    for _ in range(200):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            base = s.getsockname()[1]
        if base + count > 65000:
            continue
        ok = True
        for port in range(base, base + count):
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    ok = False
                    break
        if ok:
            return base
    raise RuntimeError("no run of free ports found")


def _wait_listening(ports: list[int], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    for port in ports:
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"broker on port {port} not listening after {timeout}s") from None
                time.sleep(0.2)


def run_setup(brokers: int, args: argparse.Namespace) -> dict[str, Any]:
    """One run: start Shoal with ``brokers`` brokers, benchmark it, stop it."""
    base = free_base_port(brokers)
    ports = list(range(base, base + brokers))
    with tempfile.TemporaryDirectory(prefix="shoal-bench-") as data_dir:
        cmd = [sys.executable, "-m", "shoal", "up", "--data-dir", data_dir,
               "--override", f"listeners=PLAINTEXT://127.0.0.1:{base}"]
        if brokers > 1:
            cmd += ["--brokers", str(brokers)]
        log = open(Path(data_dir) / "up.log", "wb")  # noqa: SIM115 - closed below, after the process
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=log, start_new_session=True)
        try:
            _wait_listening(ports, 60)
            time.sleep(3 if brokers > 1 else 0.5)  # every broker registered and unfenced
            bootstrap = ",".join(f"127.0.0.1:{p}" for p in ports)
            bench = [
                sys.executable, str(ROOT / "bench" / "produce_consume.py"), "--bootstrap", bootstrap,
                "--topic-config", "diskless.enable=true", "--idempotence",
                "--producer-config", "max.in.flight.requests.per.connection=5",
                "--records", str(args.records), "--record-size", str(args.record_size),
                "--partitions", str(args.partitions), "--producers", str(args.producers),
                "--consumers", str(args.consumers), "--phases", "saturation,fixed-rate,consume",
                "--rate", str(args.rate), "--fixed-rate-duration", str(args.fixed_rate_duration),
                "--duration", str(args.duration), "--broker-pid", str(proc.pid),
                "--objects-dir", str(Path(data_dir) / "objects"),
            ]
            load = os.getloadavg()
            done = subprocess.run(bench, capture_output=True, text=True, timeout=args.duration * 4 + 120)
            result = json.loads(done.stdout) if done.stdout.strip() else {"ok": False, "stderr": done.stderr[-2000:]}
        finally:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
            log.close()
    return {"brokers": brokers, "load_avg_start": load, "result": result}


def _figure(run: dict[str, Any], *path: str) -> float | None:
    """A figure of a run's report by its keys, e.g. ``("consume", "mb_per_s")``."""
    value: Any = run["result"]
    for key in path:
        value = value.get(key) if isinstance(value, dict) else None
    return float(value) if isinstance(value, (int, float)) else None


def _median(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return round(statistics.median(present), 2) if present else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--brokers", type=int, default=3, help="brokers of the cluster setup (beside 1)")
    parser.add_argument("--rounds", type=int, default=2, help="A B rounds (alternating)")
    parser.add_argument("--records", type=int, default=100000)
    parser.add_argument("--record-size", type=int, default=1024)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--producers", type=int, default=2)
    parser.add_argument("--consumers", type=int, default=2)
    parser.add_argument("--duration", type=float, default=60.0)
    parser.add_argument("--rate", type=float, default=5000.0, help="records/s of the fixed-rate (latency) phase")
    parser.add_argument("--fixed-rate-duration", type=float, default=15.0)
    args = parser.parse_args()
    runs = []
    for i in range(args.rounds):
        for brokers in (1, args.brokers):
            print(f"round {i + 1}: {brokers} broker(s)", file=sys.stderr)
            runs.append(run_setup(brokers, args))
    summary = {}
    for brokers in (1, args.brokers):
        mine = [r for r in runs if r["brokers"] == brokers]
        figures = {
            "produce_saturation_mb_per_s": ("produce_saturation", "mb_per_s"),
            "consume_mb_per_s": ("consume", "mb_per_s"),
            "fixed_rate_p50_ms": ("produce_fixed_rate", "latency_ms", "p50"),
            "fixed_rate_p99_ms": ("produce_fixed_rate", "latency_ms", "p99"),
        }
        summary[f"{brokers}_brokers"] = {
            name: _median([_figure(r, *path) for r in mine]) for name, path in figures.items()
        }
    print(json.dumps({"machine": {"cpus": os.cpu_count()}, "summary": summary, "runs": runs}, indent=2))


if __name__ == "__main__":
    main()
