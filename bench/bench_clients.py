"""The client processes of ``produce_consume.py``: one librdkafka producer or consumer per
process (``spawn``), started together and released at once by ``run_workers``, each reporting
its raw measurements back to the process that coordinates and measures.
"""

from __future__ import annotations

import array
import json
import multiprocessing as mp
import time
import uuid
from dataclasses import dataclass, field
from multiprocessing.synchronize import Event as EventType
from typing import Any

from bench_common import MB, client_logger, cpu_seconds_self, log, payload_buffer

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
# Starting them
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
