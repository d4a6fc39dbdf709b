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
import datetime as dt
import json
import logging
import math
import multiprocessing as mp
import os
import platform
import random
import resource
import socket
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from multiprocessing.synchronize import Event as EventType
from typing import Any

PHASES = ("saturation", "fixed-rate", "consume")
MB = 1_000_000
MIB = 1 << 20
# Names a local object store may use for files that are not (yet) objects.
_TEMP_SUFFIXES = (".tmp", ".part", ".partial", ".temp", "~")


class BenchError(Exception):
    """The run cannot go on (no broker, no topic): reported in the JSON, exit status 1."""


def log(msg: str) -> None:
    """Progress goes to stderr so stdout stays one clean JSON document."""
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def utc_now() -> str:
    """ISO-8601 UTC timestamps, so runs on different machines line up."""
    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds")


def iso(ts: float | None) -> str | None:
    """Wall-clock seconds (as measured in a worker) to ISO-8601 UTC."""
    if ts is None:
        return None
    return dt.datetime.fromtimestamp(ts, dt.UTC).isoformat(timespec="milliseconds")


def load_avg() -> dict[str, float]:
    """The machine is shared: a high load average means the figures are suspect."""
    one, five, fifteen = os.getloadavg()
    return {"1m": round(one, 2), "5m": round(five, 2), "15m": round(fifteen, 2)}


def cpu_seconds_self() -> float:
    """User+system CPU of this process, librdkafka's threads included."""
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def parse_kv(items: list[str], what: str) -> dict[str, str]:
    """``k=v`` options (topic configs, client overrides) into a dict."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SystemExit(f"{what} expects key=value, got {item!r}")
        out[key.strip()] = value.strip()
    return out


class _FirstN(logging.Filter):
    """Lets the first ``limit`` records through, then counts: a dead broker makes librdkafka
    log every reconnect attempt, which would bury the progress lines."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit = limit
        self.suppressed = 0
        self._passed = 0

    def filter(self, record: logging.LogRecord) -> bool:
        if self._passed < self.limit:
            self._passed += 1
            return True
        self.suppressed += 1
        return False


def client_logger(name: str, limit: int = 10) -> tuple[logging.Logger, _FirstN]:
    """A logger for librdkafka's ``logger`` setting that prints at most ``limit`` lines."""
    logger = logging.getLogger(f"bench.{name}")
    logger.propagate = False
    if not logger.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter(f"[{name}] %(message)s"))
        logger.addHandler(handler)
    limiter = _FirstN(limit)
    for old in list(logger.filters):
        logger.removeFilter(old)
    logger.addFilter(limiter)
    return logger, limiter


# --------------------------------------------------------------------------------------
# Payloads
# --------------------------------------------------------------------------------------


def payload_buffer(record_size: int, kind: str, seed: int) -> bytes:
    """A buffer that record values are sliced from.

    Slicing consecutive windows of one big buffer costs far less than generating each
    value, and the buffer is larger than any batch so a compressor cannot find whole
    repeated records inside a batch (unlike a single fixed payload, which would make
    ``--compression`` look unrealistically good).
    """
    span = max(8 * MIB, record_size * 64)
    if kind == "random":
        return os.urandom(span + record_size)
    rnd = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyz"
    vocab = ["".join(rnd.choices(letters, k=rnd.randint(2, 10))) for _ in range(4000)]
    parts: list[str] = []
    size = 0
    while size < span + record_size:
        word = rnd.choice(vocab)
        parts.append(word)
        size += len(word) + 1
    return " ".join(parts).encode()[: span + record_size]


# --------------------------------------------------------------------------------------
# Producer process
# --------------------------------------------------------------------------------------


@dataclass
class ProducerJob:
    """Everything one producer process needs; picklable for ``spawn``."""

    index: int
    mode: str  # "saturation" or "fixed-rate"
    bootstrap: str
    topic: str
    records: int
    record_size: int
    duration_s: float
    rate: float  # records/s offered by this process (fixed-rate only)
    payload: str
    flush_timeout_s: float
    ready_timeout_s: float
    conf: dict[str, Any] = field(default_factory=dict)
    client: str = "confluent-kafka"  # or "kafka-python" (``kafka_python_producer.py``)


class _DeliveryState:
    """Counters the delivery callback updates; one object so the callback stays cheap."""

    __slots__ = ("delivered", "errors", "latencies", "delivered_at", "last_ts")

    def __init__(self) -> None:
        self.delivered = 0
        self.errors: dict[str, int] = {}
        self.latencies = array.array("d")
        self.delivered_at = array.array("d")  # wall clock, aligned with latencies
        self.last_ts: float | None = None


def producer_main(job: ProducerJob, ready_q: Any, go: EventType, result_q: Any) -> None:
    """Process entry point: never let an exception leave without a report to the parent."""
    try:
        if job.client == "kafka-python":
            import kafka_python_producer

            payload = payload_buffer(job.record_size, job.payload, seed=job.index)
            result = kafka_python_producer.run_producer(job, ready_q, go, payload)
        else:
            result = run_producer(job, ready_q, go)
    except BaseException as exc:  # report anything, the parent decides
        ready_q.put(job.index)
        result = {"index": job.index, "fatal": f"{type(exc).__name__}: {exc}"}
    result_q.put(result)


@dataclass
class RequestWindow:
    """Sums over librdkafka statistics windows while the clock runs, for every broker the
    producer talks to: request round trips (``rtt``: send to answer, including the broker's
    time) and the requests and records waiting for an answer when each window closed.

    A producer keeps about ``records in flight`` / ``round trip`` going (Little's law): with the
    idempotent librdkafka producer holding one request per partition, its MB/s follows the
    broker's answer time, which these show next to each throughput figure.
    """

    timing: bool = False
    rtt_sum_us: int = 0
    rtt_count: int = 0
    samples: int = 0
    requests_waiting: int = 0
    records_waiting: int = 0

    def add(self, stats: dict[str, Any]) -> None:
        brokers = [b for b in stats.get("brokers", {}).values() if b.get("nodeid", -1) >= 0]
        if not brokers:
            return
        self.samples += 1
        for b in brokers:
            rtt = b.get("rtt", {})
            self.rtt_sum_us += int(rtt.get("sum", 0))
            self.rtt_count += int(rtt.get("cnt", 0))
            self.requests_waiting += int(b.get("waitresp_cnt", 0))
            self.records_waiting += int(b.get("waitresp_msg_cnt", 0))

    def totals(self) -> dict[str, int]:
        return {k: getattr(self, k) for k in ("rtt_sum_us", "rtt_count", "samples", "requests_waiting", "records_waiting")}


def request_window_figures(windows: list[dict[str, int]], record_size: int) -> dict[str, float | None]:
    """Mean request round trip (ms) and mean requests and MB waiting for an answer, over all
    producers' statistics windows (None without statistics)."""
    rtt_count = sum(w["rtt_count"] for w in windows)
    sampled = [w for w in windows if w["samples"]]
    # Each producer's mean, summed over producers: what all of them had waiting at once.
    requests = sum(w["requests_waiting"] / w["samples"] for w in sampled)
    records = sum(w["records_waiting"] / w["samples"] for w in sampled)
    return {
        "request_rtt_ms": round(sum(w["rtt_sum_us"] for w in windows) / rtt_count / 1000, 2) if rtt_count else None,
        "requests_in_flight": round(requests, 2) if sampled else None,
        "mb_in_flight": round(records * record_size / MB, 2) if sampled else None,
    }


def run_producer(job: ProducerJob, ready_q: Any, go: EventType) -> dict[str, Any]:
    """Connect, wait for the common start signal, send, flush, report raw measurements."""
    from confluent_kafka import Producer

    st = _DeliveryState()
    lat_append = st.latencies.append
    at_append = st.delivered_at.append
    now = time.time

    def on_delivery(err: Any, msg: Any) -> None:
        # Message.latency() is librdkafka's time from produce() to this delivery report.
        if err is not None:
            name = err.name()
            st.errors[name] = st.errors.get(name, 0) + 1
            return
        st.delivered += 1
        lat = msg.latency()
        t = now()
        st.last_ts = t
        if lat is not None:
            lat_append(lat)
            at_append(t)

    conf = dict(job.conf)
    conf["bootstrap.servers"] = job.bootstrap
    conf.setdefault("client.id", f"bench-producer-{job.index}")
    conf["on_delivery"] = on_delivery
    logger, limiter = client_logger(f"producer-{job.index}")
    conf["logger"] = logger
    # librdkafka's statistics (unless the caller took the callback for itself) tell when an
    # idempotent producer has its id (awaited below) and, while the clock runs, the brokers'
    # Produce round trips and how many requests and records wait for an answer (``RequestWindow``).
    use_stats = "stats_cb" not in conf
    await_pid = use_stats and str(conf.get("enable.idempotence", "false")).lower() in ("true", "1")
    pid_assigned = False
    window = RequestWindow()

    def on_stats(stats_json: str) -> None:
        nonlocal pid_assigned
        stats = json.loads(stats_json)
        if not pid_assigned:
            pid_assigned = stats.get("eos", {}).get("idemp_state") == "Assigned"
        if window.timing:
            window.add(stats)

    if use_stats:
        conf.setdefault("statistics.interval.ms", 100)
        conf["stats_cb"] = on_stats
    producer = Producer(conf)
    # Warm up: metadata and the broker connection exist before the clock starts.
    md = producer.list_topics(job.topic, timeout=15)
    tmd = md.topics.get(job.topic)
    if tmd is None or tmd.error is not None:
        raise RuntimeError(f"topic {job.topic!r} not usable: {tmd.error if tmd else 'missing'}")
    # ...and so does the producer id: librdkafka may wait out its 500 ms PID timer after the
    # bootstrap connection is replaced, which would otherwise land in one round and not another.
    until = time.monotonic() + 15
    while await_pid and not pid_assigned and time.monotonic() < until:
        producer.poll(0.05)
    buf = payload_buffer(job.record_size, job.payload, seed=job.index)
    span = len(buf) - job.record_size
    size = job.record_size

    ready_q.put(job.index)
    if not go.wait(timeout=job.ready_timeout_s):
        raise RuntimeError("no start signal from the coordinator")

    producer.poll(0)  # statistics of the idle wait are not the run's
    window.timing = True
    cpu0 = cpu_seconds_self()
    start_ts = time.time()
    start = time.monotonic()
    deadline = start + job.duration_s
    produce = producer.produce
    poll = producer.poll
    topic = job.topic
    sent = 0
    stopped_by = "records"
    queue_full = 0

    if job.mode == "saturation":
        n = job.records
        while sent < n:
            if (sent & 255) == 0 and time.monotonic() >= deadline:
                stopped_by = "duration"
                break
            off = (sent * size) % span
            try:
                produce(topic, buf[off : off + size])
            except BufferError:
                # Local queue full: serve delivery reports until there is room.
                queue_full += 1
                poll(0.005)
                if time.monotonic() >= deadline:
                    stopped_by = "duration"
                    break
                continue
            sent += 1
            if (sent & 63) == 0:
                poll(0)
    else:
        rate = job.rate
        n = min(job.records, int(rate * job.duration_s))
        stopped_by = "duration"
        while sent < n:
            t = time.monotonic()
            if t >= deadline:
                break
            due = min(n, int((t - start) * rate) + 1)
            while sent < due:
                off = (sent * size) % span
                try:
                    produce(topic, buf[off : off + size])
                except BufferError:
                    queue_full += 1
                    poll(0.001)
                    break
                sent += 1
            poll(0)
            # Sleep in poll() until the next record is due: delivery reports wake us early.
            wait = start + sent / rate - time.monotonic()
            if wait > 0:
                poll(min(max(wait, 0.001), max(deadline - time.monotonic(), 0.0)))
    send_end_ts = time.time()

    remaining = producer.flush(job.flush_timeout_s)
    end_ts = time.time()
    cpu1 = cpu_seconds_self()
    window.timing = False
    if limiter.suppressed:
        log(f"producer-{job.index}: {limiter.suppressed} more client log lines suppressed")
    return {
        "index": job.index,
        "sent": sent,
        "delivered": st.delivered,
        "undelivered": remaining,
        "errors": st.errors,
        "queue_full_events": queue_full,
        "stopped_by": stopped_by,
        "start_ts": start_ts,
        "send_end_ts": send_end_ts,
        "last_delivery_ts": st.last_ts,
        "end_ts": end_ts,
        "cpu_s": cpu1 - cpu0,
        "latencies": st.latencies.tobytes(),
        "delivered_at": st.delivered_at.tobytes(),
        "request_window": window.totals(),
    }


# --------------------------------------------------------------------------------------
# Consumer process
# --------------------------------------------------------------------------------------


@dataclass
class ConsumerJob:
    """One consumer process: a fixed set of partitions, read from the beginning."""

    index: int
    bootstrap: str
    topic: str
    partitions: list[int]
    duration_s: float
    idle_timeout_s: float
    ready_timeout_s: float
    conf: dict[str, Any] = field(default_factory=dict)
    #: Longest wait of one ``consume()`` call. librdkafka fills the batch until this runs out, so
    #: the last records are only seen (and timed) up to this long after they arrived.
    poll_timeout_s: float = 1.0


def consumer_main(job: ConsumerJob, ready_q: Any, go: EventType, result_q: Any) -> None:
    """Process entry point: never let an exception leave without a report to the parent."""
    try:
        result = run_consumer(job, ready_q, go)
    except BaseException as exc:
        ready_q.put(job.index)
        result = {"index": job.index, "fatal": f"{type(exc).__name__}: {exc}"}
    result_q.put(result)


def run_consumer(job: ConsumerJob, ready_q: Any, go: EventType) -> dict[str, Any]:
    """Read the partitions to their high watermark (taken before reading) and count."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition

    conf = dict(job.conf)
    conf["bootstrap.servers"] = job.bootstrap
    conf.setdefault("client.id", f"bench-consumer-{job.index}")
    # Manual assign: group.id is required by librdkafka but no group is joined and
    # nothing is committed, so the benchmark needs no group coordinator.
    conf.setdefault("group.id", f"bench-{uuid.uuid4().hex[:12]}")
    conf["enable.auto.commit"] = False
    conf["enable.auto.offset.store"] = False
    conf.setdefault("auto.offset.reset", "earliest")
    conf["enable.partition.eof"] = True
    logger, limiter = client_logger(f"consumer-{job.index}")
    conf["logger"] = logger
    consumer = Consumer(conf)
    try:
        consumer.list_topics(job.topic, timeout=15)
        low: dict[int, int] = {}
        high: dict[int, int] = {}
        watermark_error = None
        for p in job.partitions:
            try:
                wm = consumer.get_watermark_offsets(TopicPartition(job.topic, p), timeout=10)
            except KafkaException as exc:
                watermark_error = str(exc)
                break
            if wm is None:
                watermark_error = f"watermark request for partition {p} timed out"
                break
            low[p], high[p] = wm
        have_wm = watermark_error is None

        ready_q.put(job.index)
        if not go.wait(timeout=job.ready_timeout_s):
            raise RuntimeError("no start signal from the coordinator")

        cpu0 = cpu_seconds_self()
        start_ts = time.time()
        start = time.monotonic()
        deadline = start + job.duration_s
        consumer.assign([TopicPartition(job.topic, p, OFFSET_BEGINNING) for p in job.partitions])

        next_off: dict[int, int | None] = {p: (low[p] if have_wm else None) for p in job.partitions}
        counts = dict.fromkeys(job.partitions, 0)
        pending = set(job.partitions)
        eof: set[int] = set()
        records = 0
        nbytes = 0
        gaps = 0
        rewinds = 0
        errors: dict[str, int] = {}
        first_ts: float | None = None
        last_ts: float | None = None
        last_progress = time.monotonic()
        stopped_by = "complete"
        eof_code = KafkaError._PARTITION_EOF

        while pending:
            t = time.monotonic()
            if t >= deadline:
                stopped_by = "duration"
                break
            # Every pending partition said EOF and nothing arrived for a while: the
            # broker has no more to give (e.g. its watermark overstated the log).
            if eof >= pending and t - last_progress >= job.idle_timeout_s:
                stopped_by = "idle"
                break
            wait = min(job.poll_timeout_s, max(deadline - t, 0.01))
            msgs = consumer.consume(num_messages=5000, timeout=wait)
            if not msgs:
                continue
            records_before = records
            for m in msgs:
                err = m.error()
                p = m.partition()
                if err is not None:
                    if err.code() == eof_code:
                        eof.add(p)
                        # Done at the end the broker reports in Fetch, once past the
                        # watermark taken before reading (ListOffsets can lag or lead).
                        nxt = next_off[p]
                        if not have_wm or (nxt is not None and nxt >= high[p]):
                            pending.discard(p)
                    else:
                        name = err.name()
                        errors[name] = errors.get(name, 0) + 1
                    continue
                records += 1
                value = m.value()
                key = m.key()
                nbytes += (len(value) if value else 0) + (len(key) if key else 0)
                off = m.offset()
                expected = next_off[p]
                if expected is not None:
                    if off > expected:
                        gaps += off - expected
                    elif off < expected:
                        rewinds += 1
                next_off[p] = off + 1
                counts[p] += 1
                eof.discard(p)
            if records > records_before:  # a batch of only end-of-partition events times no record
                last_ts = time.time()
                if first_ts is None:
                    first_ts = last_ts
            last_progress = time.monotonic()
        end_ts = time.time()
        cpu1 = cpu_seconds_self()
    finally:
        consumer.close()
        if limiter.suppressed:
            log(f"consumer-{job.index}: {limiter.suppressed} more client log lines suppressed")
    return {
        "index": job.index,
        "records": records,
        "bytes": nbytes,
        "per_partition": {str(p): counts[p] for p in job.partitions},
        "watermarks": (
            {str(p): {"low": low[p], "high": high[p]} for p in job.partitions} if have_wm else None
        ),
        "watermark_error": watermark_error,
        "expected": sum(high[p] - low[p] for p in job.partitions) if have_wm else None,
        "offset_gaps": gaps,
        "offset_rewinds": rewinds,
        "errors": errors,
        "stopped_by": stopped_by,
        "start_ts": start_ts,
        "first_record_ts": first_ts,
        "last_record_ts": last_ts,
        "end_ts": end_ts,
        "cpu_s": cpu1 - cpu0,
    }


# --------------------------------------------------------------------------------------
# Coordinator-side helpers
# --------------------------------------------------------------------------------------


def run_workers(
    target: Any, jobs: list[Any], ready_timeout_s: float, run_timeout_s: float
) -> list[dict[str, Any]]:
    """Start one process per job, release them together, collect their reports.

    ``spawn`` (not fork) because librdkafka threads do not survive a fork and the
    coordinator already holds an AdminClient.
    """
    ctx = mp.get_context("spawn")
    ready_q = ctx.Queue()
    result_q = ctx.Queue()
    go = ctx.Event()
    procs = [ctx.Process(target=target, args=(job, ready_q, go, result_q), daemon=True) for job in jobs]
    for proc in procs:
        proc.start()
    ready = 0
    deadline = time.monotonic() + ready_timeout_s
    while ready < len(jobs) and time.monotonic() < deadline:
        try:
            ready_q.get(timeout=0.5)
            ready += 1
        except Exception:  # queue.Empty
            if not any(proc.is_alive() for proc in procs):
                break
    if ready < len(jobs):
        log(f"only {ready}/{len(jobs)} workers ready after {ready_timeout_s:.0f}s; starting anyway")
    go.set()
    results: list[dict[str, Any]] = []
    deadline = time.monotonic() + run_timeout_s
    while len(results) < len(jobs) and time.monotonic() < deadline:
        try:
            results.append(result_q.get(timeout=1.0))
        except Exception:  # queue.Empty
            if not any(proc.is_alive() for proc in procs) and result_q.empty():
                break
    for proc in procs:
        proc.join(timeout=5)
        if proc.is_alive():
            log(f"worker pid {proc.pid} did not exit; terminating it")
            proc.terminate()
            proc.join(timeout=5)
    missing = len(jobs) - len(results)
    for i in range(missing):
        results.append({"index": -1 - i, "fatal": "worker died or timed out without a report"})
    return results


def percentiles_ms(latencies_s: array.array) -> dict[str, float | int | None]:
    """Nearest-rank percentiles over every delivered record of every producer."""
    n = len(latencies_s)
    if n == 0:
        return {"count": 0, "p50": None, "p90": None, "p99": None, "p999": None, "max": None, "mean": None}
    data = sorted(latencies_s)

    def pct(q: float) -> float:
        return round(data[max(0, math.ceil(q * n) - 1)] * 1000, 3)

    return {
        "count": n,
        "p50": pct(0.50),
        "p90": pct(0.90),
        "p99": pct(0.99),
        "p999": pct(0.999),
        "max": round(data[-1] * 1000, 3),
        "mean": round(sum(data) / n * 1000, 3),
    }


def latency_timeline(
    latencies_s: array.array, delivered_at: array.array, start_ts: float
) -> list[dict[str, float | int | None]]:
    """Latency by second of sending: shows whether a backlog builds up during the phase."""
    buckets: dict[int, array.array] = {}
    for lat, at in zip(latencies_s, delivered_at, strict=True):
        sec = max(0, int(at - lat - start_ts))
        buckets.setdefault(sec, array.array("d")).append(lat)
    out: list[dict[str, float | int | None]] = []
    for sec in sorted(buckets):
        pct = percentiles_ms(buckets[sec])
        out.append({"second": sec, "records": pct["count"], "p50": pct["p50"], "p99": pct["p99"]})
    return out


def delivered_mb_by_tenth(delivered_at: array.array, start_ts: float, record_size: int) -> list[float]:
    """MB acknowledged in each 100 ms from the start: a stall or a slow tail (the last queued
    records draining at a few MB per 100 ms) shows here and hides in a 2-second average."""
    counts: list[int] = []
    for at in delivered_at:
        tenth = max(0, int((at - start_ts) * 10))
        if tenth >= len(counts):
            counts.extend([0] * (tenth + 1 - len(counts)))
        counts[tenth] += 1
    return [round(n * record_size / MB, 1) for n in counts]


def proc_tree(pid: int) -> dict[int, list[str]] | None:
    """A process and all its descendants (Linux /proc), each with its ``stat`` fields after the
    command name; None when it does not exist."""
    try:
        children: dict[int, list[int]] = {}
        stats: dict[int, list[str]] = {}
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            try:
                with open(f"/proc/{name}/stat") as f:
                    stat = f.read()
            except OSError:
                continue
            # The command name may contain spaces; fields after ')' are fixed.
            fields = stat[stat.rfind(")") + 2 :].split()
            stats[int(name)] = fields
            children.setdefault(int(fields[1]), []).append(int(name))
    except (OSError, ValueError):
        return None
    if pid not in stats:
        return None
    tree, todo = {}, [pid]
    while todo:
        p = todo.pop()
        tree[p] = stats[p]
        todo.extend(children.get(p, []))
    return tree


def proc_tree_cpu_s(pid: int) -> float | None:
    """CPU seconds used so far by a process and all its descendants (Linux /proc)."""
    tree = proc_tree(pid)
    if tree is None:
        return None
    return sum(int(fields[11]) + int(fields[12]) for fields in tree.values()) / os.sysconf("SC_CLK_TCK")


def proc_tree_rss_bytes(pid: int) -> int | None:
    """Resident memory of a process and all its descendants now (``VmRSS``, Linux /proc)."""
    tree = proc_tree(pid)
    if tree is None:
        return None
    total = 0
    for p in tree:
        try:
            with open(f"/proc/{p}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1]) * 1024
                        break
        except (OSError, ValueError):
            continue
    return total


class RssSampler:
    """Samples a broker's resident memory (process tree) every ``interval_s`` during a phase:
    the peak is what a memory limit must allow."""

    def __init__(self, pid: int, interval_s: float = 0.25) -> None:
        self._pid = pid
        self._interval = interval_s
        self._samples: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            rss = proc_tree_rss_bytes(self._pid)
            if rss is not None:
                self._samples.append(rss)
            self._stop.wait(self._interval)

    def start(self) -> RssSampler:
        self._thread.start()
        return self

    def stop(self) -> dict[str, Any]:
        """``broker_rss_peak_mib`` and ``broker_rss_mean_mib`` of the samples (MiB)."""
        self._stop.set()
        self._thread.join(5)
        if not self._samples:
            return {}
        return {
            "broker_rss_peak_mib": round(max(self._samples) / MIB, 1),
            "broker_rss_mean_mib": round(sum(self._samples) / len(self._samples) / MIB, 1),
        }


class ObjectWatcher:
    """Counts files created under a local object-store directory during a phase.

    A background thread rescans every second so objects that a garbage collector or
    compaction deletes within the phase are still counted.
    """

    def __init__(self, root: str, interval_s: float = 1.0) -> None:
        self.root = root
        self.interval_s = interval_s
        self._before: set[str] = set()
        self._seen: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _scan(self) -> dict[str, int]:
        found: dict[str, int] = {}
        for dirpath, dirnames, filenames in os.walk(self.root):
            dirnames[:] = [d for d in dirnames if not d.startswith(".")]
            for name in filenames:
                if name.startswith(".") or name.endswith(_TEMP_SUFFIXES):
                    continue
                path = os.path.join(dirpath, name)
                try:
                    found[path] = os.stat(path).st_size
                except OSError:
                    continue
        return found

    def start(self) -> None:
        self._before = set(self._scan())
        self._seen = {}
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="object-watcher", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._collect()

    def _collect(self) -> None:
        for path, size in self._scan().items():
            if path not in self._before:
                self._seen[path] = size

    def stop(self) -> dict[str, int]:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        self._collect()
        return {"objects_created": len(self._seen), "object_bytes": sum(self._seen.values())}


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
        **request_window_figures([r["request_window"] for r in ok], args.record_size),
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
