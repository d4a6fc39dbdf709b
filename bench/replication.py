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
import collections
import contextlib
import json
import logging
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from cluster import free_base_port  # bench/cluster.py: scripts in bench/ run with it on sys.path

ROOT = Path(__file__).resolve().parents[1]
MB = 1_000_000

#: The setups: replication factor and topic configs (besides the shared client settings).
SETUPS = ("rf3", "rf1")
#: ``shoal up``'s supervisor logs this line for each broker it starts.
_STARTED = re.compile(r"Started broker-\d+ \(node (\d+), pid (\d+)\)")


def log(msg: str) -> None:
    print(f"[replication {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


class _FirstN(logging.Filter):
    """Let the first ``limit`` client log lines through (a stopped broker makes librdkafka chatty)."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.left = limit

    def filter(self, record: logging.LogRecord) -> bool:
        self.left -= 1
        return self.left >= 0


def _client_logger() -> logging.Logger:
    logger = logging.getLogger("bench.replication.client")
    if not logger.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("  librdkafka: %(message)s"))
        logger.addHandler(handler)
        logger.addFilter(_FirstN(30))
        logger.setLevel(logging.WARNING)
        logger.propagate = False
    return logger


def _admin(bootstrap: str) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient(
        {"bootstrap.servers": bootstrap, "client.id": "bench-replication", "logger": _client_logger()}
    )


def _round(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


# --------------------------------------------------------------------------------------
# The cluster this script starts
# --------------------------------------------------------------------------------------


def _listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def _parent_pid(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[1])  # the field after the state, past "(comm)"


class Cluster:
    """``shoal up --brokers N`` on a fresh data dir: its supervisor, and each broker's pid."""

    def __init__(self, args: argparse.Namespace, up_args: list[str] | None = None) -> None:
        self.args = args
        self.up_args = list(up_args or [])  # more `shoal up` options, e.g. ["--racks", "a,b,c"]
        self.count = args.brokers
        base = free_base_port(self.count)
        self.ports = list(range(base, base + self.count))
        parent = Path(args.data_parent)
        parent.mkdir(parents=True, exist_ok=True)
        self.data_dir = Path(tempfile.mkdtemp(prefix="replication-bench-", dir=parent))
        self.log_path = self.data_dir / "up.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.broker_pids: dict[int, int] = {}
        self.stopped: set[int] = set()

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{p}" for p in self.ports)

    def address(self, node_id: int) -> str:
        return f"127.0.0.1:{self.ports[node_id - 1]}"

    def start(self) -> None:
        cmd = [
            sys.executable,
            "-m",
            "shoal",
            "up",
            "--data-dir",
            str(self.data_dir),
            "--brokers",
            str(self.count),
            "--override",
            f"listeners=PLAINTEXT://127.0.0.1:{self.ports[0]}",
        ]
        for item in self.args.broker_override:
            cmd += ["--override", item]
        cmd += self.up_args
        log(f"starting {' '.join(cmd[1:])}")
        with open(self.log_path, "wb") as out:
            self.proc = subprocess.Popen(cmd, cwd=ROOT, stdout=out, stderr=out, start_new_session=True)
        deadline = time.monotonic() + self.args.startup_timeout
        for port in self.ports:
            while not _listening(port):
                if self.proc.poll() is not None:
                    raise RuntimeError(f"shoal up exited with {self.proc.returncode} while starting")
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"broker on port {port} not listening after {self.args.startup_timeout}s"
                    )
                time.sleep(0.2)
        while len(self.broker_pids) < self.count:
            if self.proc.poll() is not None:
                raise RuntimeError(f"shoal up exited with {self.proc.returncode} while starting")
            for node, pid in _STARTED.findall(self.log_path.read_text(errors="replace")):
                if _parent_pid(int(pid)) == self.proc.pid:
                    self.broker_pids[int(node)] = int(pid)
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"found {len(self.broker_pids)} of {self.count} broker pids in {self.log_path}"
                )
            time.sleep(0.2)
        admin = _admin(self.bootstrap)
        while True:  # every broker registered (and so listed in Metadata)
            with contextlib.suppress(Exception):
                if len(admin.list_topics(timeout=5).brokers) >= self.count:
                    break
            if time.monotonic() > deadline:
                raise RuntimeError(f"not every broker registered after {self.args.startup_timeout}s")
            time.sleep(0.5)
        log(f"cluster up on {self.bootstrap}: broker pids {self.broker_pids}, data dir {self.data_dir}")

    def log_tail(self, lines: int = 40) -> list[str]:
        """The last lines of ``shoal up``'s output (for the JSON when something went wrong)."""
        try:
            return self.log_path.read_text(errors="replace").splitlines()[-lines:]
        except OSError:
            return []

    def _ours(self, node_id: int) -> int:
        """The pid of broker ``node_id``, checked to still be a child of our ``shoal up``."""
        pid = self.broker_pids[node_id]
        if self.proc is None or _parent_pid(pid) != self.proc.pid:
            raise RuntimeError(f"broker {node_id} (pid {pid}) is no longer a child of shoal up")
        return pid

    def pause(self, node_id: int) -> None:
        os.kill(self._ours(node_id), signal.SIGSTOP)
        self.stopped.add(node_id)

    def resume(self, node_id: int) -> None:
        os.kill(self._ours(node_id), signal.SIGCONT)
        self.stopped.discard(node_id)

    def segment_bytes(self, node_id: int, topic: str) -> int:
        """Bytes of the ``.log`` segment files of ``topic`` in broker ``node_id``'s log dir."""
        logs = self.data_dir / f"broker-{node_id}" / "logs"
        return sum(f.stat().st_size for f in logs.glob(f"{_glob_escape(topic)}-*/*.log") if f.is_file())

    def _is_broker(self, node_id: int, pid: int) -> bool:
        """Whether ``pid`` still is broker ``node_id`` of this cluster (it runs in its own directory)."""
        try:
            cwd = os.readlink(f"/proc/{pid}/cwd")
        except OSError:
            return False
        return Path(cwd) == (self.data_dir / f"broker-{node_id}").resolve()

    def stop(self) -> None:
        """Resume any stopped broker, SIGTERM the supervisor (it stops the brokers), then clean up."""
        for node_id in list(self.stopped):
            with contextlib.suppress(Exception):
                self.resume(node_id)
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                log("shoal up still runs 60s after SIGTERM: killing it")
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        # The brokers get SIGTERM when their supervisor dies; kill any of ours still there after 30 s.
        deadline = time.monotonic() + 30
        for node_id, pid in self.broker_pids.items():
            while self._is_broker(node_id, pid) and time.monotonic() < deadline:
                time.sleep(0.2)
            if self._is_broker(node_id, pid):
                log(f"broker {node_id} (pid {pid}) outlived shoal up: killing it")
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        if not self.args.keep_data:
            shutil.rmtree(self.data_dir, ignore_errors=True)


def _glob_escape(text: str) -> str:
    return re.sub(r"([\[\]*?])", r"[\1]", text)


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

    admin = _admin(bootstrap)
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


def _stop_group(proc: subprocess.Popen[str]) -> None:
    """Stop produce_consume.py and its worker processes (its own process group)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)


def _relay(stream: Any, tail: collections.deque[str]) -> None:
    for line in stream:
        line = line.rstrip("\n")
        tail.append(line)
        print(f"  | {line}", file=sys.stderr, flush=True)


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
    tail: collections.deque[str] = collections.deque(maxlen=200)
    with tempfile.TemporaryFile("w+") as out:
        proc = subprocess.Popen(
            cmd, cwd=ROOT, stdout=out, stderr=subprocess.PIPE, text=True, start_new_session=True
        )
        relay = threading.Thread(target=_relay, args=(proc.stderr, tail), daemon=True)
        relay.start()
        timed_out = False
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            log(f"produce_consume.py still runs after {timeout}s: stopping it")
            _stop_group(proc)
        except BaseException:  # Ctrl-C: its own session does not get it, so stop it here
            _stop_group(proc)
            raise
        relay.join(5)
        out.seek(0)
        text = out.read()
    try:
        result: dict[str, Any] = json.loads(text) if text.strip() else {}
    except json.JSONDecodeError:
        result = {}
    run: dict[str, Any] = {
        "setup": name,
        "round": round_no,
        "replication_factor_asked": spec["replication_factor"],
        "topic_config": spec["topic_config"],
        "load_avg_start": load,
        "exit_code": proc.returncode,
    }
    reasons = []
    if timed_out:
        reasons.append(f"timed out after {timeout}s")
    if not result:
        reasons.append("no JSON report")
        run["stderr_tail"] = list(tail)[-40:]
    got = (result.get("topic") or {}).get("replication_factor")
    if result and got != spec["replication_factor"]:
        refusals = [line for line in tail if "create_topics with replication_factor" in line]
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
# Follower catch-up
# --------------------------------------------------------------------------------------


def _partitions(admin: Any, topic: str, timeout: float) -> dict[int, Any] | None:
    """The topic's partition metadata (leader, replicas, isrs), or None if it could not be had."""
    try:
        md = admin.list_topics(topic, timeout=timeout)
    except Exception:
        return None
    t = md.topics.get(topic)
    if t is None or t.error is not None or not t.partitions:
        return None
    return dict(t.partitions)


def _wait_for(
    admin: Any, topic: str, timeout: float, interval: float, done: Any
) -> tuple[bool, float, dict | None]:
    """Poll the topic's partitions until ``done(partitions)`` (True) or ``timeout`` (False); seconds waited."""
    start = time.monotonic()
    parts = None
    while True:
        left = timeout - (time.monotonic() - start)
        parts = _partitions(admin, topic, max(1.0, min(5.0, left)))
        if parts is not None and done(parts):
            return True, time.monotonic() - start, parts
        if time.monotonic() - start >= timeout:
            return False, time.monotonic() - start, parts
        time.sleep(interval)


def _layout(parts: dict[int, Any] | None) -> dict[str, Any] | None:
    if parts is None:
        return None
    return {
        str(p): {"leader": m.leader, "replicas": list(m.replicas), "isr": list(m.isrs)}
        for p, m in sorted(parts.items())
    }


def _watermarks(bootstrap: str, topic: str, partitions: list[int], timeout: float) -> dict[int, int | None]:
    """High watermark of each partition (asked of its leader, retried for ``timeout`` s), else None.

    Right after a topic is created some brokers may not know it yet and answer an error at once.
    """
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-replication-{uuid.uuid4().hex[:6]}",
            "enable.auto.commit": False,
            "logger": _client_logger(),
        }
    )
    out: dict[int, int | None] = {}
    deadline = time.monotonic() + timeout
    try:
        for p in partitions:
            out[p] = None
            while out[p] is None:
                left = deadline - time.monotonic()
                try:
                    out[p] = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=max(1.0, left))[
                        1
                    ]
                except Exception:
                    if left <= 0:
                        break
                    time.sleep(0.2)
    finally:
        consumer.close()
    return out


def fill(bootstrap: str, topic: str, partitions: list[int], args: argparse.Namespace) -> dict[str, Any]:
    """Produce ``--catchup-mb`` MB round robin to ``partitions`` with the setups' producer settings."""
    from confluent_kafka import Producer

    records = max(1, int(args.catchup_mb * MB) // args.record_size)
    state: dict[str, Any] = {"delivered": 0, "errors": collections.Counter(), "last": None}
    per_partition: collections.Counter[int] = collections.Counter()

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            state["errors"][err.name()] += 1
        else:
            state["delivered"] += 1
            state["last"] = time.monotonic()
            per_partition[msg.partition()] += 1

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "client.id": "bench-replication-fill",
            "acks": "all",
            "enable.idempotence": True,
            "max.in.flight.requests.per.connection": 5,
            "linger.ms": 5,
            "batch.size": 1000000,
            "queue.buffering.max.kbytes": 32768,
            "compression.type": "none",
            "message.timeout.ms": int(args.fill_timeout * 1000),
            "logger": _client_logger(),
        }
    )
    pool = os.urandom(1 << 20)
    span = len(pool) - args.record_size
    start = time.monotonic()
    deadline = start + args.fill_timeout
    sent = 0
    while sent < records and time.monotonic() < deadline:
        offset = (sent * 7919) % max(1, span)
        try:
            producer.produce(
                topic,
                pool[offset : offset + args.record_size],
                partition=partitions[sent % len(partitions)],
                on_delivery=on_delivery,
            )
            sent += 1
        except BufferError:
            producer.poll(0.05)
            continue
        if sent % 1000 == 0:
            producer.poll(0)
    undelivered = producer.flush(max(1.0, deadline - time.monotonic()))
    elapsed = (state["last"] - start) if state["last"] else None
    return {
        "records_asked": records,
        "records_sent": sent,
        "records_delivered": state["delivered"],
        "records_delivered_by_partition": {str(p): n for p, n in sorted(per_partition.items())},
        "records_undelivered": undelivered,
        "error_counts": dict(state["errors"]),
        "elapsed_s": _round(elapsed),
        "mb_per_s": _round(state["delivered"] * args.record_size / MB / elapsed, 2) if elapsed else None,
        "timed_out": sent < records or undelivered > 0,
    }


def _pick_broker(
    parts: dict[int, Any], controller: int, nodes: list[int], asked: int | None
) -> tuple[int, str]:
    if asked is not None:
        return asked, "--stop-broker"
    leads = collections.Counter(m.leader for m in parts.values())
    candidates = [n for n in nodes if n != controller] or nodes
    chosen = min(candidates, key=lambda n: (leads[n], -n))
    return chosen, f"not the active controller ({controller}), leads the fewest partitions ({leads[chosen]})"


def catchup_once(cluster: Cluster, index: int, args: argparse.Namespace) -> dict[str, Any]:
    """One follower catch-up measurement on a fresh RF=3 topic."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import NewTopic

    topic = f"bench-catchup-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"
    out: dict[str, Any] = {"run": index, "topic": topic, "load_avg_start": os.getloadavg(), "measured": False}
    admin = _admin(cluster.bootstrap)
    config = {"min.insync.replicas": str(args.min_insync_replicas)}
    new = NewTopic(topic, num_partitions=args.partitions, replication_factor=3, config=config)
    try:
        admin.create_topics([new], operation_timeout=30, request_timeout=30)[topic].result(40)
    except KafkaException as exc:
        out["error"] = f"replication factor 3 topic refused: {exc.args[0]}"
        return out
    out["topic_config"] = config
    try:
        _catchup_on(cluster, admin, topic, index, out, args)
    finally:
        if not args.keep_topics:
            with contextlib.suppress(Exception):
                admin.delete_topics([topic], operation_timeout=30, request_timeout=30)[topic].result(40)
    return out


def _catchup_on(
    cluster: Cluster, admin: Any, topic: str, index: int, out: dict[str, Any], args: argparse.Namespace
) -> None:
    """The measurement on the created ``topic``; fills ``out`` (``error`` says where it stopped)."""

    def full(ps: dict[int, Any]) -> bool:
        return len(ps) >= args.partitions and all(m.leader >= 0 and len(m.isrs) >= 3 for m in ps.values())

    ok, waited, parts = _wait_for(admin, topic, args.isr_timeout, args.poll_interval, full)
    out["full_isr_after_create_s"] = _round(waited)
    if not ok or parts is None:
        out["error"] = f"not every partition had a leader and 3 in-sync replicas after {args.isr_timeout}s"
        out["layout"] = _layout(parts)
        return
    md = admin.list_topics(timeout=10)
    node, why = _pick_broker(parts, md.controller_id, sorted(cluster.broker_pids), args.stop_broker)
    followed = sorted(p for p, m in parts.items() if node in m.replicas and m.leader != node)
    out.update(
        {
            "stopped_broker": node,
            "stopped_broker_pid": cluster.broker_pids[node],
            "chosen_because": why,
            "controller": md.controller_id,
            "layout_before": _layout(parts),
            "filled_partitions": followed,
        }
    )
    if not followed:
        out["error"] = f"broker {node} follows no partition of {topic}"
        return
    others = ",".join(cluster.address(n) for n in sorted(cluster.broker_pids) if n != node)
    all_parts = sorted(parts)
    before = _watermarks(others, topic, all_parts, 10)
    disk_before = cluster.segment_bytes(node, topic)
    log(
        f"catch-up {index}: SIGSTOP broker {node} (pid {cluster.broker_pids[node]}), "
        f"fill {args.catchup_mb} MB into partitions {followed}"
    )
    stopped_at = time.monotonic()
    cluster.pause(node)
    try:
        # Watch the ISR while the fill runs: when did every followed partition drop the stopped broker?
        watch_admin = _admin(others)
        dropped: dict[str, float | None] = {"at": None}
        stop_watch = threading.Event()

        def dropped_everywhere(ps: dict[int, Any]) -> bool:
            return all(p in ps and node not in ps[p].isrs for p in followed)

        def watch() -> None:
            while not stop_watch.is_set():
                ps = _partitions(watch_admin, topic, 5)
                if ps is not None and dropped_everywhere(ps):
                    dropped["at"] = time.monotonic()
                    return
                stop_watch.wait(args.poll_interval)

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        out["fill"] = fill(others, topic, followed, args)
        log(f"catch-up {index}: fill {out['fill']}")
        if dropped["at"] is None:
            left = max(0.0, args.isr_timeout - (time.monotonic() - stopped_at))
            watcher.join(left)
        stop_watch.set()
        watcher.join(10)
        out["isr_dropped_after_stop_s"] = _round(dropped["at"] - stopped_at) if dropped["at"] else None
        after = _watermarks(others, topic, all_parts, 10)
        parts_stopped = _partitions(watch_admin, topic, 10)
        out["layout_while_stopped"] = _layout(parts_stopped)
        out["stopped_s"] = _round(time.monotonic() - stopped_at)
        # A stopped broker writes nothing: a check that the pid stopped really is the follower.
        out["follower_segment_bytes_written_while_stopped"] = cluster.segment_bytes(node, topic) - disk_before
        if dropped["at"] is None:
            out["error"] = (
                f"the ISR of partitions {followed} still held broker {node} "
                f"{args.isr_timeout}s after SIGSTOP: no catch-up to observe"
            )
            return
    finally:
        cluster.resume(node)
        resumed_at = time.monotonic()
    # What the follower lacks: what the leaders appended while it was stopped. The high watermarks
    # say it for any writer; if one could not be had, the fill's own deliveries (the topic is ours).
    missing = [p for p in all_parts if before.get(p) is None or after.get(p) is None]
    out["high_watermarks_before"] = {str(p): before[p] for p in all_parts}
    out["high_watermarks_after"] = {str(p): after[p] for p in all_parts}
    if missing:
        out["watermarks_missing_for"] = missing
        copied = out["fill"]["records_delivered"]
        out["records_to_copy_from"] = "fill deliveries (a high watermark could not be had)"
    else:
        copied = sum(after[p] - before[p] for p in all_parts)  # type: ignore[operator]
        out["records_to_copy_from"] = "high watermarks after the fill minus before the SIGSTOP"
    out["records_to_copy"] = copied
    out["bytes_to_copy"] = copied * args.record_size
    log(f"catch-up {index}: SIGCONT broker {node}; {copied} records to copy, waiting for the ISR")
    # Each poll's answer holds for some moment between its start and its end: the broker was back
    # everywhere at the latest by the end of the first poll that says so (catchup_s), and not yet
    # at the start of the last poll that still lacked a partition (catchup_s_at_least).
    rejoined: dict[int, float] = {}
    lacking_since = 0.0
    polls = 0
    parts = None
    while True:
        began = time.monotonic() - resumed_at
        left = args.catchup_timeout - began
        parts = _partitions(admin, topic, max(1.0, min(5.0, left))) or parts
        ended = time.monotonic() - resumed_at
        polls += 1
        for p, m in (parts or {}).items():
            if node in m.isrs and p not in rejoined:
                rejoined[p] = ended
        if all(p in rejoined for p in all_parts):
            break
        lacking_since = began
        if ended >= args.catchup_timeout:
            break
        time.sleep(args.poll_interval)
    out["partition_back_in_isr_s"] = {str(p): _round(rejoined.get(p)) for p in all_parts}
    out["layout_after"] = _layout(parts)
    out["poll_interval_s"] = args.poll_interval
    out["polls"] = polls
    if not all(p in rejoined for p in all_parts):
        out["error"] = (
            f"broker {node} not back in the ISR of every partition {args.catchup_timeout}s after SIGCONT"
        )
        out["catchup_timed_out"] = True
        return
    seconds = max(rejoined.values())
    out["catchup_s"] = _round(seconds)
    out["catchup_s_at_least"] = _round(lacking_since)
    out["catchup_mb_per_s"] = _round(out["bytes_to_copy"] / MB / seconds, 2) if seconds > 0 else None
    out["catchup_mb_per_s_at_most"] = (
        _round(out["bytes_to_copy"] / MB / lacking_since, 2) if lacking_since > 0 else None
    )
    out["follower_segment_bytes_written"] = cluster.segment_bytes(node, topic) - disk_before
    out["measured"] = not out["fill"]["timed_out"]
    log(
        f"catch-up {index}: {out['bytes_to_copy'] / MB:.1f} MB in {seconds:.2f}s = {out['catchup_mb_per_s']} MB/s"
    )


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
