"""How ``compare.py`` runs its measurements: each as a child process (``produce_consume.py``,
``spark_read.py``) in its own process group, its output relayed with a prefix, stopped when it
overruns, optionally pinned to CPUs with the brokers (``--pin``); and the command lines it gives
them.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import dataclasses
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench_common import load_avg  # bench/ is on sys.path when a bench script runs

ROOT = Path(__file__).resolve().parents[1]
PRODUCE_CONSUME = ROOT / "bench" / "produce_consume.py"
SPARK_READ = ROOT / "bench" / "spark_read.py"


def log(msg: str) -> None:
    print(f"[compare {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def cpu_busy_pct(sample_s: float = 1.0) -> float | None:
    """Share of all cores busy over the next ``sample_s`` seconds (/proc/stat): unlike the load
    average, which decays over a minute, it says whether something runs right now."""

    def read() -> tuple[int, int] | None:
        try:
            with open("/proc/stat") as f:
                fields = [int(x) for x in f.readline().split()[1:]]
        except (OSError, ValueError):
            return None
        idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
        return idle, sum(fields[:8])

    first = read()
    time.sleep(sample_s)
    second = read()
    if first is None or second is None or second[1] == first[1]:
        return None
    return round(100 * (1 - (second[0] - first[0]) / (second[1] - first[1])), 1)


# --------------------------------------------------------------------------------------
# Running the benchmarks as child processes
# --------------------------------------------------------------------------------------


def stop_group(proc: subprocess.Popen[str]) -> None:
    """Stop a child benchmark and its worker processes (its own process group): SIGTERM, then SIGKILL."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)


def relay_lines(stream: Any, prefix: str, tail: collections.deque[str]) -> None:
    """A child's output to stderr behind ``prefix``, its last lines kept in ``tail``."""
    for line in stream:
        line = line.rstrip("\n")
        if not line.strip() or "[Stage " in line:  # Spark's progress bars
            continue
        tail.append(line)
        print(f"  {prefix} {line}", file=sys.stderr, flush=True)


def parse_cpus(text: str, flag: str) -> set[int]:
    """``0``, ``0,2`` or ``0-3`` as a set of CPU numbers."""
    cpus: set[int] = set()
    try:
        for part in text.split(","):
            first, _, last = part.strip().partition("-")
            cpus.update(range(int(first), int(last or first) + 1))
    except ValueError:
        raise SystemExit(f"{flag}: expected CPU numbers like 0 or 0,1 or 0-3, got {text!r}") from None
    if not cpus:
        raise SystemExit(f"{flag}: no CPU given")
    return cpus


@dataclasses.dataclass(frozen=True)
class Pinning:
    """``--pin BROKER_CPUS:CLIENT_CPUS``: where the brokers' threads and the benchmark runs go."""

    brokers: frozenset[int]
    clients: frozenset[int]
    broker_pids: tuple[int, ...]

    @staticmethod
    def parse(text: str, broker_pids: list[int]) -> Pinning:
        brokers, sep, clients = text.partition(":")
        if not sep:
            raise SystemExit(f"--pin expects BROKER_CPUS:CLIENT_CPUS (e.g. 0:1), got {text!r}")
        if len(broker_pids) < 2:
            raise SystemExit("--pin needs --a-pid and --b-pid (the brokers to pin)")
        return Pinning(frozenset(parse_cpus(brokers, "--pin")), frozenset(parse_cpus(clients, "--pin")), tuple(broker_pids))

    def pin_brokers(self) -> None:
        """Every thread of every broker (threads started later inherit their creator's CPUs)."""
        for pid in self.broker_pids:
            for task in Path(f"/proc/{pid}/task").iterdir():
                with contextlib.suppress(ProcessLookupError):
                    os.sched_setaffinity(int(task.name), self.brokers)

    def pin_client(self) -> None:
        """In the benchmark child, before it starts (its own children inherit it)."""
        os.sched_setaffinity(0, self.clients)


@dataclasses.dataclass(frozen=True)
class ChildRun:
    """What a benchmark script run as a child left: its JSON report (None without one), exit code,
    whether it was stopped for overrunning, and its last stderr lines."""

    report: dict[str, Any] | None
    exit_code: int | None
    timed_out: bool
    tail: list[str]


def run_json_script(
    cmd: list[str], prefix: str, timeout: float, preexec_fn: Callable[[], None] | None = None
) -> ChildRun:
    """Run a bench script that prints one JSON document, in its own process group (stopped with its
    workers when it overruns ``timeout`` or on Ctrl-C), its stderr relayed behind ``prefix``."""
    tail: collections.deque[str] = collections.deque(maxlen=200)
    timed_out = False
    with tempfile.TemporaryFile("w+") as out:
        proc = subprocess.Popen(
            cmd,
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
            preexec_fn=preexec_fn,
        )
        relay = threading.Thread(target=relay_lines, args=(proc.stderr, prefix, tail), daemon=True)
        relay.start()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            log(f"{prefix} still running after {timeout:.0f}s: stopping it")
            stop_group(proc)
        except BaseException:  # Ctrl-C: the child's own session does not get it
            stop_group(proc)
            raise
        relay.join(5)
        out.seek(0)
        text = out.read()
    try:
        report = json.loads(text) if text.strip() else None
    except json.JSONDecodeError:
        report = None
    return ChildRun(report, proc.returncode, timed_out, list(tail))


def run_child(
    cmd: list[str], prefix: str, timeout: float, pause: float, pin: Pinning | None = None
) -> dict[str, Any]:
    """Run one benchmark script after ``pause`` seconds of quiet (the previous run's client
    processes exit, the broker finishes its uploads); its JSON report, exit code, load around it."""
    time.sleep(pause)
    if pin is not None:
        pin.pin_brokers()
    busy = cpu_busy_pct()
    before = load_avg()
    started = time.monotonic()
    child = run_json_script(cmd, prefix, timeout, pin.pin_client if pin is not None else None)
    report = child.report
    run: dict[str, Any] = {
        "cpu_busy_pct_before": busy,
        "load_avg_before": before,
        "load_avg_after": load_avg(),
        "wall_s": round(time.monotonic() - started, 3),
        "exit_code": child.exit_code,
        "report": report,
    }
    if child.timed_out:
        run["timed_out_after_s"] = timeout
    if report is None:
        run["stderr_tail"] = child.tail[-30:]
    return run


def target_flags(target: dict[str, Any]) -> list[str]:
    flags = ["--bootstrap", target["bootstrap"]]
    for key, value in target["topic_config"].items():
        flags += ["--topic-config", f"{key}={value}"]
    if target["objects_dir"]:
        flags += ["--objects-dir", target["objects_dir"]]
    if target["pid"]:
        flags += ["--broker-pid", str(target["pid"])]
    return flags


def common_flags(args: argparse.Namespace) -> list[str]:
    """The client settings every run shares: idempotent, acks=all, 5 in flight."""
    return [
        sys.executable,
        str(PRODUCE_CONSUME),
        "--acks",
        "all",
        "--idempotence",
        "--producer-config",
        "max.in.flight.requests.per.connection=5",
        "--record-size",
        str(args.record_size),
        "--partitions",
        str(args.partitions),
        "--duration",
        str(args.duration),
        *args.pc_arg,
    ]


def ready_timeout(producers: int) -> float:
    """Spawning and connecting many producer processes on 2 cores takes a while."""
    return 30.0 + 0.5 * producers


def fixed_rate_cmd(args: argparse.Namespace, target: dict[str, Any], producers: int) -> list[str]:
    return [
        *common_flags(args),
        *target_flags(target),
        "--phases",
        "fixed-rate",
        "--producers",
        str(producers),
        "--rate",
        str(args.rate),
        "--fixed-rate-duration",
        str(args.fixed_rate_duration),
        "--ready-timeout",
        str(ready_timeout(producers)),
        *([] if args.keep_topics else ["--delete-topic"]),
    ]


def throughput_cmd(args: argparse.Namespace, target: dict[str, Any], keep_topic: bool) -> list[str]:
    return [
        *common_flags(args),
        *target_flags(target),
        "--phases",
        "saturation,consume",
        "--records",
        str(args.records),
        "--producers",
        str(args.saturation_producers),
        "--consumers",
        str(args.consumers),
        "--ready-timeout",
        str(ready_timeout(max(args.saturation_producers, args.consumers))),
        *([] if keep_topic else ["--delete-topic"]),
    ]


def spark_cmd(args: argparse.Namespace, target: dict[str, Any], topic: str) -> list[str]:
    return [
        sys.executable,
        str(SPARK_READ),
        "--bootstrap",
        target["bootstrap"],
        "--metadata-path",
        args.a_metadata_path,
        "--storage-url",
        args.a_storage_url,
        "--topic",
        topic,
        "--master",
        args.spark_master,
        "--repeat",
        str(args.spark_repeat),
        "--timeout",
        str(args.duration * 5),
    ]


def delete_topic(bootstrap: str, topic: str) -> str | None:
    """Best effort (a topic kept for the Spark read); None when deleted."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, "client.id": "bench-compare"})
    try:
        admin.delete_topics([topic], operation_timeout=30, request_timeout=30)[topic].result(timeout=40)
        return None
    except Exception as exc:
        return str(exc)
