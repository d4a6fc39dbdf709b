"""Transactional produce beside idempotent produce (KIP-98): MB/s, and the commit latency of
transactions of ``--txn-records`` records (p50/p99), per topic kind, alternating A B A B.

Starts one broker (``shoal up`` on a fresh data dir under ``--data-parent``), or uses any running
Kafka-compatible broker given with ``--bootstrap``. For each kind in ``--kinds`` (``classic``;
``diskless`` adds ``diskless.enable=true``, Shoal only) a topic of ``--partitions`` partitions is
created; then each of ``--rounds`` rounds runs, one after the other:

- ``idempotent``: one librdkafka producer (idempotence on, acks=all, 5 in flight, linger 5 ms)
  sends ``--records`` records of ``--record-size`` incompressible bytes round robin and flushes;
  MB/s is value bytes over the seconds from the first send to the last delivery. Its latency
  figures are the per-record delivery latencies.
- ``transactional``: the same producer with a ``transactional.id``, the same records in
  transactions of ``--txn-records`` records: begin, send, commit_transaction. MB/s the same way;
  ``commit_ms`` is the time commit_transaction takes (flush of the transaction's records, EndTxn,
  and the markers written before the coordinator answers the next transaction's AddPartitions).

Prints one JSON document (progress on stderr): every run with the load average before it, and
the medians per kind and mode; exit status 0 when every run completed, 2 otherwise.

    .venv/bin/python bench/transactions.py --records 20000 --rounds 2
    .venv/bin/python bench/transactions.py --bootstrap 127.0.0.1:9092 --kinds classic
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from typing import Any

from bench_common import load_avg  # bench/ is on sys.path when a bench script runs
from shoal_broker import ShoalBroker

MB = 1_000_000


def log(msg: str) -> None:
    print(f"[transactions {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def percentiles(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"p50": None, "p99": None, "max": None}
    ordered = sorted(values)
    at = lambda q: ordered[min(len(ordered) - 1, int(q * len(ordered)))]  # noqa: E731
    return {"p50": round(at(0.5), 2), "p99": round(at(0.99), 2), "max": round(ordered[-1], 2)}


def create_topic(bootstrap: str, name: str, kind: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    config = {"diskless.enable": "true"} if kind == "diskless" else {}
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1, config=config)], operation_timeout=30)[name].result(60)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        topic = admin.list_topics(name, timeout=10).topics.get(name)
        if topic is not None and topic.error is None and len(topic.partitions) == partitions:
            return
        time.sleep(0.2)
    raise RuntimeError(f"topic {name} not in metadata")


def run(bootstrap: str, topic: str, mode: str, args: argparse.Namespace) -> dict[str, Any]:
    from confluent_kafka import Producer

    config: dict[str, Any] = {
        "bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
        "max.in.flight.requests.per.connection": 5, "linger.ms": 5, "compression.type": "none",
        "message.timeout.ms": 60_000,  # at most transaction.timeout.ms (60 s by default)
    }
    if mode == "transactional":
        config["transactional.id"] = f"bench-{uuid.uuid4()}"
    producer = Producer(config)
    payload = os.urandom(args.record_size)
    latencies: list[float] = []
    failed = 0

    def delivered(err: Any, msg: Any, sent: float) -> None:
        nonlocal failed
        if err is not None:
            failed += 1
        else:
            latencies.append((time.monotonic() - sent) * 1000)

    commits: list[float] = []
    load = load_avg()
    if mode == "transactional":
        producer.init_transactions(60)
    started = time.monotonic()
    sent = 0
    while sent < args.records:
        chunk = min(args.txn_records, args.records - sent)
        if mode == "transactional":
            producer.begin_transaction()
        for i in range(chunk):
            now = time.monotonic()
            while True:
                try:
                    producer.produce(topic, value=payload, partition=(sent + i) % args.partitions,
                                     on_delivery=lambda err, msg, now=now: delivered(err, msg, now))
                    break
                except BufferError:
                    producer.poll(0.01)
        sent += chunk
        producer.poll(0)
        if mode == "transactional":
            t0 = time.monotonic()
            producer.commit_transaction(60)
            commits.append((time.monotonic() - t0) * 1000)
    producer.flush(120)
    elapsed = time.monotonic() - started
    result: dict[str, Any] = {
        "mode": mode, "load_avg_before": load, "records": args.records, "failed": failed,
        "seconds": round(elapsed, 3), "mb_per_s": round(args.records * args.record_size / MB / elapsed, 2),
        "delivery_latency_ms": percentiles(latencies),
    }
    if commits:
        result["transactions"] = len(commits)
        result["commit_ms"] = percentiles(commits)
    log(f"{topic} {mode}: {result['mb_per_s']} MB/s" + (f", commit p50 {result['commit_ms']['p50']} ms" if commits else ""))
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bootstrap", help="a running broker (default: start `shoal up`)")
    parser.add_argument("--kinds", default="classic,diskless")
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--record-size", type=int, default=1024)
    parser.add_argument("--txn-records", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--data-parent", default=tempfile.gettempdir())
    parser.add_argument("--broker-override", action="append", default=[])
    parser.add_argument("--startup-timeout", type=float, default=60)
    parser.add_argument("--keep-data", action="store_true")
    args = parser.parse_args(argv)
    broker = None
    if args.bootstrap is None:
        broker = ShoalBroker(args.data_parent, "txn-bench-", args.broker_override,
                             startup_timeout=args.startup_timeout, keep_data=args.keep_data, log=log)
        broker.start()
    bootstrap = args.bootstrap or broker.bootstrap  # type: ignore[union-attr]
    report: dict[str, Any] = {"bootstrap": bootstrap, "settings": vars(args), "runs": {}, "medians": {}}
    ok = True
    try:
        for kind in args.kinds.split(","):
            topic = f"txn-bench-{kind}-{uuid.uuid4().hex[:6]}"
            create_topic(bootstrap, topic, kind, args.partitions)
            runs: list[dict[str, Any]] = []
            for _ in range(args.rounds):
                for mode in ("idempotent", "transactional"):
                    try:
                        runs.append(run(bootstrap, topic, mode, args))
                    except Exception as exc:  # a refused mode (a broker without transactions) is reported
                        ok = False
                        log(f"{kind} {mode} failed: {exc}")
                        runs.append({"mode": mode, "error": str(exc)})
            report["runs"][kind] = runs
            medians: dict[str, Any] = {}
            for mode in ("idempotent", "transactional"):
                done = [r for r in runs if r["mode"] == mode and "error" not in r]
                medians[mode] = {
                    "mb_per_s": round(statistics.median(r["mb_per_s"] for r in done), 2) if done else None,
                    "commit_p50_ms": round(statistics.median(r["commit_ms"]["p50"] for r in done), 2)
                    if done and mode == "transactional" else None,
                    "commit_p99_ms": round(statistics.median(r["commit_ms"]["p99"] for r in done), 2)
                    if done and mode == "transactional" else None,
                }
            report["medians"][kind] = medians
    finally:
        if broker is not None:
            broker.stop()
    print(json.dumps(report, indent=2))
    return 0 if ok else 2


if __name__ == "__main__":
    sys.exit(main())
