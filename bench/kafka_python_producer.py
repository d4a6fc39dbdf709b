"""The producer process of ``produce_consume.py`` on kafka-python instead of librdkafka.

``--producer-client kafka-python`` runs the produce phases with this client, and
``compare.py --pc-arg=--producer-client=kafka-python`` runs a whole comparison with it. Why: at
saturation librdkafka's idempotent producer busy-polls while a partition waits for its answer
(its broker thread calls ``poll`` with a zero timeout), so on a small machine the client's CPU
competes with the broker's; kafka-python's sender thread blocks instead. Its numbers say how much
of a difference between two brokers is the client's.

The librdkafka settings ``produce_consume.py`` builds are mapped to kafka-python's names; the
ones kafka-python has no equivalent for (e.g. ``queue.buffering.max.kbytes``) are left out and
named in the report. The report has the same fields as the librdkafka producer's.
"""

from __future__ import annotations

import array
import time
from typing import Any

#: librdkafka name -> (kafka-python name, conversion)
_SETTINGS: dict[str, tuple[str, Any]] = {
    "linger.ms": ("linger_ms", float),
    "batch.size": ("batch_size", int),
    "message.timeout.ms": ("delivery_timeout_ms", int),
    "max.in.flight.requests.per.connection": ("max_in_flight_requests_per_connection", int),
    "client.id": ("client_id", str),
}


def _truthy(value: Any) -> bool:
    return str(value).lower() in ("true", "1", "yes")


def kafka_python_settings(conf: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """kafka-python producer arguments for librdkafka settings ``conf``, and the names left out."""
    out: dict[str, Any] = {}
    unmapped: list[str] = []
    for name, value in conf.items():
        if name == "acks":
            out["acks"] = "all" if str(value) in ("all", "-1") else int(value)
        elif name == "compression.type":
            out["compression_type"] = None if value == "none" else value
        elif name == "enable.idempotence":
            out["enable_idempotence"] = _truthy(value)
        elif name in _SETTINGS:
            key, convert = _SETTINGS[name]
            out[key] = convert(value)
        else:
            unmapped.append(name)
    # A batch is at most one request: let a full librdkafka-sized batch through.
    out["max_request_size"] = max(out.get("batch_size", 0) + 65536, 1_048_576)
    return out, unmapped


def run_producer(job: Any, ready_q: Any, go: Any, payload: bytes) -> dict[str, Any]:
    """Connect, wait for the common start signal, send, flush, report raw measurements."""
    from kafka import KafkaProducer

    settings, unmapped = kafka_python_settings(dict(job.conf))
    settings.setdefault("client_id", f"bench-producer-{job.index}")
    producer = KafkaProducer(bootstrap_servers=job.bootstrap, **settings)
    # Warm up: metadata (and so a connection) before the clock starts.
    deadline = time.monotonic() + 15
    while not producer.partitions_for(job.topic):
        if time.monotonic() > deadline:
            raise RuntimeError(f"topic {job.topic!r} not usable: no partitions in metadata")
        time.sleep(0.1)

    latencies = array.array("d")
    delivered_at = array.array("d")
    errors: dict[str, int] = {}
    state = {"delivered": 0, "last_ts": None}
    wall = time.time
    mono = time.monotonic

    def sent_ok(started: float, _metadata: Any) -> None:
        t = wall()
        state["delivered"] += 1
        state["last_ts"] = t
        latencies.append(mono() - started)
        delivered_at.append(t)

    def sent_failed(exc: BaseException) -> None:
        name = type(exc).__name__
        errors[name] = errors.get(name, 0) + 1

    size = job.record_size
    span = len(payload) - size
    ready_q.put(job.index)
    if not go.wait(timeout=job.ready_timeout_s):
        raise RuntimeError("no start signal from the coordinator")

    cpu0 = time.process_time()
    start_ts = wall()
    start = mono()
    deadline = start + job.duration_s
    sent = 0
    stopped_by = "records"

    def send_one() -> None:
        off = (sent * size) % span
        future = producer.send(job.topic, payload[off : off + size])
        future.add_callback(sent_ok, mono())
        future.add_errback(sent_failed)

    if job.mode == "saturation":
        while sent < job.records:
            if (sent & 255) == 0 and mono() >= deadline:
                stopped_by = "duration"
                break
            send_one()
            sent += 1
    else:
        n = min(job.records, int(job.rate * job.duration_s))
        stopped_by = "duration"
        while sent < n:
            t = mono()
            if t >= deadline:
                break
            due = min(n, int((t - start) * job.rate) + 1)
            while sent < due:
                send_one()
                sent += 1
            wait = start + sent / job.rate - mono()
            if wait > 0:
                time.sleep(min(wait, max(deadline - mono(), 0.0)))
    send_end_ts = wall()
    producer.flush(timeout=job.flush_timeout_s)
    end_ts = wall()
    cpu1 = time.process_time()
    producer.close(timeout=5)
    return {
        "index": job.index,
        "sent": sent,
        "delivered": state["delivered"],
        "undelivered": sent - state["delivered"] - sum(errors.values()),
        "errors": errors,
        "queue_full_events": 0,
        "stopped_by": stopped_by,
        "start_ts": start_ts,
        "send_end_ts": send_end_ts,
        "last_delivery_ts": state["last_ts"],
        "end_ts": end_ts,
        "cpu_s": cpu1 - cpu0,
        "latencies": latencies.tobytes(),
        "delivered_at": delivered_at.tobytes(),
        "unmapped_settings": unmapped,
    }
