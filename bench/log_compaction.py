"""Log compaction (``cleanup.policy=compact``) of classic and diskless topics: how fast the log
cleaner catches up (MB/s), what it keeps, and what it costs producers (MB/s with the cleaner on
beside off, alternating A B A B).

Without ``--bootstrap`` every run gets its own broker (``shoal up`` on a fresh data dir under
``--data-parent``, with ``log.cleaner.backoff.ms`` = ``--backoff-ms``, a ``/metrics`` endpoint, and
emptied diskless objects deleted ``--object-grace-ms`` after the cleaner replaced them). Each
topic has 1 partition, ``min.cleanable.dirty.ratio`` = ``--dirty-ratio``, and for ``classic``
``internal.segment.bytes`` = ``--segment-bytes`` (``diskless`` adds ``diskless.enable=true``).
Records: ``--records`` values of ``--record-size`` incompressible bytes (an 8-byte sequence number
first), keys drawn at random (seeded) from ``--keys`` keys; one idempotent librdkafka producer
(acks=all, 5 in flight, linger 5 ms) sends them as fast as the broker acknowledges them.

Phases (``--phases``), for each kind in ``--kinds``:

1. ``clean``: the topic is created with ``cleanup.policy=delete`` (the cleaner leaves it alone),
   filled, then altered to ``compact``: from then on everything below the active segment (classic)
   or the last stable offset (diskless) is dirty, as after a restart with the cleaner turned on,
   but the clock starts at the change instead of at a broker's start-up. The broker's metrics are
   polled every ``--poll-interval`` s until ``kafka_log_logcleaner_bytes_read_total`` and
   ``..._bytes_written_total`` held still for ``--settle`` s and ``max_dirty_percent`` is below the
   dirty ratio. ``mb_per_s`` = bytes the cleaner read / seconds from the change to the last
   counter change (includes waiting up to one backoff for the cleaner to look);
   ``pass_mb_per_s`` = the same bytes / ``max_clean_time_secs`` (the longest pass; the same when
   one pass did it all). Stored bytes before and after: the partition dir's ``*.log`` files
   (classic), the local object store's files once emptied objects are gone (diskless). Then one
   consumer reads the partition from the start: records left, keys, and whether every key's
   last record is the last one produced for it (``verified``).
2. ``produce``: ``--rounds`` rounds of ``cleaner_on`` then ``cleaner_off`` (a broker with
   ``log.cleaner.enable`` true / false), each a fresh compacted topic filled at saturation for
   ``--produce-seconds`` (or ``--produce-records``, if fewer); MB/s of values, the cleaner's
   bytes read and written while the producer ran (classic counters move when a pass ends), the
   broker's CPU seconds; ``produce_on_over_off`` is the ratio of the medians.

With ``--bootstrap HOST:PORT`` (any Kafka-compatible broker; nothing is started, the topics made
are deleted at the end) there are no metrics or files to read: ``clean`` polls by reading the
topic from the start until the record count dropped and then held still for ``--settle`` s
(``clean_s`` is the end of the first read that saw the final count: an upper bound), with
``segment.bytes`` = ``--segment-bytes`` (at least 1 MiB on Kafka); ``produce`` alternates a
``compact`` topic with a ``delete`` one (the broker's cleaner stays as it is).

Prints one JSON document (progress on stderr) with every run's figures, the load average
before and after each run, the settings, and a summary per kind; exit status 0 when every run
completed (and every clean verified), 2 otherwise.

    .venv/bin/python bench/log_compaction.py                                     # 200,000 x 200 B, 2,000 keys
    .venv/bin/python bench/log_compaction.py --records 20000 --keys 200 --rounds 1 --produce-seconds 3  # quick
    .venv/bin/python bench/log_compaction.py --bootstrap 127.0.0.1:9092 --kinds classic --segment-bytes 1048576
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import signal
import socket
import statistics
import struct
import sys
import tempfile
import time
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from bench_common import load_avg  # bench/ is on sys.path when a bench script runs
from bench_measure import proc_tree_cpu_s
from cache_replicas import Scraper, delete_topics, total
from shoal_broker import ShoalBroker

MB = 1_000_000
MIB = 1 << 20
KINDS = ("classic", "diskless")
PHASES = ("clean", "produce")
CLEANER = {
    "bytes_read": "kafka_log_logcleaner_bytes_read_total",
    "bytes_written": "kafka_log_logcleaner_bytes_written_total",
    "max_clean_time_secs": "kafka_log_logcleaner_max_clean_time_secs",
    "recopy_percent": "kafka_log_logcleaner_cleaner_recopy_percent",
    "max_dirty_percent": "kafka_log_logcleanermanager_max_dirty_percent",
}


def log(msg: str) -> None:
    print(f"[log-compaction {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def _median(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return round(statistics.median(present), 2) if present else None


# ------------------------------------------------------------------------------ the broker


class Broker(ShoalBroker):
    """``shoal up`` on a fresh data dir with the cleaner on or off and a metrics port."""

    def __init__(self, args: argparse.Namespace, cleaner: bool) -> None:
        super().__init__(args.data_parent, "log-compaction-bench-", ports=2, startup_timeout=args.startup_timeout,
                         keep_data=args.keep_data, log=log)
        self.metrics_port = self.port + 1
        self.overrides += [
            f"log.cleaner.enable={'true' if cleaner else 'false'}", f"log.cleaner.backoff.ms={args.backoff_ms}",
            f"metrics.http.port={self.metrics_port}", "diskless.object.cleaner.interval.ms=500",
            f"diskless.object.delete.grace.ms={args.object_grace_ms}", *args.broker_override,
        ]
        self.scraper = Scraper({"broker": f"http://127.0.0.1:{self.metrics_port}/metrics"})

    def cleaner(self) -> dict[str, float]:
        snap = self.scraper.scrape()["broker"]
        return {key: total(snap, name) for key, name in CLEANER.items()}

    def cpu_s(self) -> float | None:
        return proc_tree_cpu_s(self.proc.pid) if self.proc is not None else None

    def stored_bytes(self, kind: str, topic: str) -> int:
        """Classic: the partition's ``*.log`` files; diskless: every file of the object store."""
        if kind == "classic":
            files = (self.data_dir / "logs" / f"{topic}-0").glob("*.log")
        else:
            files = (f for f in (self.data_dir / "objects").rglob("*") if f.is_file())
        size = 0
        for f in files:
            with contextlib.suppress(OSError):  # deleted meanwhile
                size += f.stat().st_size
        return size


# ------------------------------------------------------------------------ topics and clients


def _admin(bootstrap: str) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap, "client.id": "bench-log-compaction"})


def topic_config(kind: str, policy: str, args: argparse.Namespace, started: bool) -> dict[str, str]:
    config = {"cleanup.policy": policy, "min.cleanable.dirty.ratio": str(args.dirty_ratio)}
    if kind == "diskless":
        config["diskless.enable"] = "true"
    else:  # Shoal's internal.segment.bytes goes below segment.bytes' 1 MiB minimum; elsewhere segment.bytes
        config["internal.segment.bytes" if started else "segment.bytes"] = str(args.segment_bytes)
    return config


def create_topic(bootstrap: str, name: str, config: dict[str, str]) -> None:
    from confluent_kafka.admin import NewTopic

    admin = _admin(bootstrap)
    admin.create_topics([NewTopic(name, 1, 1, config=config)], request_timeout=30)[name].result(40)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        topic = admin.list_topics(name, timeout=10).topics.get(name)
        if topic is not None and topic.error is None and 0 in topic.partitions and topic.partitions[0].leader >= 0:
            return
        time.sleep(0.2)
    raise RuntimeError(f"topic {name}: no leader after 60 s")


def alter_topic(bootstrap: str, name: str, changes: dict[str, str]) -> None:
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

    entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in changes.items()]
    resource = ConfigResource("TOPIC", name, incremental_configs=entries)
    admin = _admin(bootstrap)  # held until the result is in: a collected client cancels the request
    admin.incremental_alter_configs([resource], request_timeout=30)[resource].result(40)


def produce(bootstrap: str, topic: str, records: int | None, seconds: float | None,
            args: argparse.Namespace) -> dict[str, Any]:
    """Keyed records at saturation until ``records`` are sent or ``seconds`` passed (whichever comes
    first); MB/s of values from the first send to the last delivery, and the last sequence number
    produced for each key."""
    from confluent_kafka import Producer

    producer = Producer({
        "bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
        "max.in.flight.requests.per.connection": 5, "linger.ms": 5, "compression.type": "none",
        "message.timeout.ms": 120_000, "client.id": "bench-log-compaction",
    })
    rng = random.Random(args.seed)
    keys = [b"key-%08d" % i for i in range(args.keys)]
    tail = args.record_size - 8
    pool = os.urandom(4 * MIB + tail)
    span = 4 * MIB
    failed = 0

    def delivered(err: Any, msg: Any) -> None:
        nonlocal failed
        if err is not None:
            failed += 1

    last: dict[bytes, int] = {}
    cap = records if records is not None else sys.maxsize
    seq = key_bytes = 0
    started = time.monotonic()
    deadline = started + seconds if seconds is not None else float("inf")
    while seq < cap and (seq % 256 or time.monotonic() < deadline):
        key = keys[rng.randrange(args.keys)]
        off = (seq * 7919) % span
        value = struct.pack(">Q", seq) + pool[off:off + tail]
        while True:
            try:
                producer.produce(topic, value=value, key=key, partition=0, on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.01)
        last[key] = seq
        key_bytes += len(key)
        seq += 1
        if seq % 1000 == 0:
            producer.poll(0)
    left = producer.flush(args.flush_timeout)
    elapsed = time.monotonic() - started
    return {
        "records": seq, "failed": failed, "undelivered": left, "seconds": round(elapsed, 3),
        "mb_per_s": round(seq * args.record_size / MB / elapsed, 2),
        "records_per_s": round(seq / elapsed), "value_bytes": seq * args.record_size,
        "key_bytes": key_bytes, "keys_used": len(last), "_last": last,
    }


def read_all(bootstrap: str, topic: str, timeout: float) -> dict[str, Any]:
    """One consumer reads partition 0 from the start to the end: records, bytes, and each key's
    last sequence number."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"bench-log-compaction-{uuid.uuid4().hex[:6]}",
        "enable.auto.commit": False, "enable.partition.eof": True, "client.id": "bench-log-compaction",
        "fetch.max.bytes": 52_428_800, "max.partition.fetch.bytes": 10_485_760,
    })
    last: dict[bytes, int] = {}
    records = nbytes = errors = 0
    done = False
    start = time.monotonic()
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        while not done and time.monotonic() - start < timeout:
            for m in consumer.consume(10_000, 0.2):
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        done = True
                    else:
                        errors += 1
                    continue
                value = m.value() or b""
                records += 1
                nbytes += len(value) + len(m.key() or b"")
                if len(value) >= 8:
                    last[m.key() or b""] = struct.unpack_from(">Q", value)[0]
    finally:
        consumer.close()
    return {"records": records, "bytes": nbytes, "keys": len(last), "errors": errors, "complete": done,
            "seconds": round(time.monotonic() - start, 3), "_last": last}


def check(read: dict[str, Any], fill: dict[str, Any]) -> dict[str, Any]:
    """Every key produced is there with its last value, and nothing else."""
    want, got = fill["_last"], read["_last"]
    wrong = sum(1 for k, seq in want.items() if got.get(k) != seq)
    return {"keys_expected": len(want), "keys_wrong_or_missing": wrong, "keys_unexpected": len(got.keys() - want.keys()),
            "verified": read["complete"] and not wrong and not fill["failed"] and not fill["undelivered"]}


def public(d: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if not k.startswith("_")}


# ------------------------------------------------------------------------------ phase 1: clean


def wait_cleaned_metrics(broker: Broker, before: dict[str, float], started: float,
                         args: argparse.Namespace) -> dict[str, Any]:
    """Poll the cleaner's metrics until its byte counters moved and then held still for ``--settle`` s
    with nothing dirty enough left; the seconds (from ``started``) of the first and last change."""
    seen = (before["bytes_read"], before["bytes_written"])
    first = last = None
    m = before
    while True:
        time.sleep(args.poll_interval)
        now = time.monotonic()
        m = broker.cleaner()
        current = (m["bytes_read"], m["bytes_written"])
        if current != seen:
            seen, last = current, now
            first = first or now
        if last is not None and now - last >= args.settle and m["max_dirty_percent"] < 100 * args.dirty_ratio:
            timed_out = False
            break
        if now - started > args.clean_timeout:
            timed_out = True
            break
    return {"timed_out": timed_out, "metrics_after": m,
            "first_change_s": round(first - started, 3) if first else None,
            "clean_s": round(last - started, 3) if last else None}


def wait_cleaned_reading(bootstrap: str, topic: str, records_before: int, started: float,
                         args: argparse.Namespace) -> dict[str, Any]:
    """Read the topic from the start again and again until its record count dropped and then held
    still for ``--settle`` s; the counts over time."""
    series: list[tuple[float, int]] = []
    count, changed_at, final_at = records_before, None, None
    while True:
        got = read_all(bootstrap, topic, args.read_timeout)
        now = time.monotonic()
        series.append((round(now - started, 3), got["records"]))
        if got["records"] != count:
            count, changed_at, final_at = got["records"], now, now
        if changed_at is not None and now - changed_at >= args.settle:
            timed_out = False
            break
        if now - started > args.clean_timeout:
            timed_out = True
            break
        time.sleep(args.poll_interval)
    return {"timed_out": timed_out, "records_over_time": series,
            "clean_s": round(final_at - started, 3) if final_at else None}


def settle_stored(broker: Broker, kind: str, topic: str, args: argparse.Namespace) -> int:
    """Stored bytes once they held still (diskless: the object cleaner deletes emptied objects
    after the grace period)."""
    hold = args.settle + (0 if kind == "classic" else (args.object_grace_ms + 500) / 1000)
    size, since, start = broker.stored_bytes(kind, topic), time.monotonic(), time.monotonic()
    while time.monotonic() - since < hold and time.monotonic() - start < 120:
        time.sleep(0.25)
        now_size = broker.stored_bytes(kind, topic)
        if now_size != size:
            size, since = now_size, time.monotonic()
    return size


def clean_run(kind: str, ctx: SimpleNamespace) -> dict[str, Any]:
    args = ctx.args
    broker = None
    try:
        if ctx.bootstrap is None:
            broker = Broker(args, cleaner=True)
            broker.start()
            bootstrap = broker.bootstrap
        else:
            bootstrap = ctx.bootstrap
        topic = f"bench-compact-{kind}-clean-{ctx.stamp}"
        ctx.made.append(topic)
        config = topic_config(kind, "delete", args, broker is not None)
        create_topic(bootstrap, topic, config)
        out: dict[str, Any] = {"topic": topic, "topic_config": config, "load_avg_before_fill": load_avg()}
        log(f"{kind} clean: filling {topic} with {args.records} records over {args.keys} keys")
        fill = produce(bootstrap, topic, args.records, None, args)
        out["fill"] = public(fill)
        log(f"{kind} clean: filled at {fill['mb_per_s']} MB/s; cleanup.policy -> compact")
        if broker is not None:
            out["broker_overrides"] = broker.overrides
            out["stored_bytes_before"] = broker.stored_bytes(kind, topic)
            before = broker.cleaner()
            cpu = broker.cpu_s()
        else:
            out["records_before"] = read_all(bootstrap, topic, args.read_timeout)["records"]
        out["load_avg_before"] = load_avg()
        started = time.monotonic()
        alter_topic(bootstrap, topic, {"cleanup.policy": "compact"})
        if broker is not None:
            waited = wait_cleaned_metrics(broker, before, started, args)
            out["load_avg_after"] = load_avg()
            after = waited.pop("metrics_after")
            cpu_after = broker.cpu_s()
            out.update(waited)
            read_b = after["bytes_read"] - before["bytes_read"]
            out.update({
                "cleaner_bytes_read": round(read_b), "cleaner_bytes_written": round(after["bytes_written"] - before["bytes_written"]),
                "recopy_percent": round(after["recopy_percent"], 2),
                "max_clean_time_secs": round(after["max_clean_time_secs"], 3),
                "max_dirty_percent_after": round(after["max_dirty_percent"], 2),
                "broker_cpu_s": round(cpu_after - cpu, 2) if cpu is not None and cpu_after is not None else None,
            })
            clean_s = out["clean_s"]
            out["mb_per_s"] = round(read_b / MB / clean_s, 2) if clean_s else None
            out["pass_mb_per_s"] = round(read_b / MB / after["max_clean_time_secs"], 2) if after["max_clean_time_secs"] else None
            out["stored_bytes_after"] = settle_stored(broker, kind, topic, args)
            out["stored_what"] = "partition dir *.log" if kind == "classic" else "object store files"
        else:
            out.update(wait_cleaned_reading(bootstrap, topic, out["records_before"], started, args))
            out["load_avg_after"] = load_avg()
        if out["clean_s"]:
            out["input_mb_per_s"] = round((fill["value_bytes"] + fill["key_bytes"]) / MB / out["clean_s"], 2)
        after_read = read_all(bootstrap, topic, args.read_timeout)
        out["after"] = {**public(after_read), **check(after_read, fill)}
        out["ok"] = not out["timed_out"] and out["after"]["verified"]
        log(f"{kind} clean: {out.get('mb_per_s') or out.get('input_mb_per_s')} MB/s in {out['clean_s']} s; "
            f"{after_read['records']} records left, verified {out['after']['verified']}")
        return out
    finally:
        if broker is not None:
            broker.stop()


# ---------------------------------------------------------------------------- phase 2: produce


def produce_run(kind: str, mode: str, i: int, ctx: SimpleNamespace) -> dict[str, Any]:
    """One saturation run to a fresh compacted topic, cleaner on or off (``--bootstrap``: a
    ``compact`` or ``delete`` topic)."""
    args = ctx.args
    broker = None
    run: dict[str, Any] = {"mode": mode, "round": i}
    try:
        if ctx.bootstrap is None:
            broker = Broker(args, cleaner=mode == "cleaner_on")
            broker.start()
            bootstrap = broker.bootstrap
        else:
            bootstrap = ctx.bootstrap
        topic = f"bench-compact-{kind}-{mode}-{i}-{ctx.stamp}"
        ctx.made.append(topic)
        run["topic_config"] = topic_config(kind, "delete" if mode == "delete" else "compact", args, broker is not None)
        create_topic(bootstrap, topic, run["topic_config"])
        before = broker.cleaner() if broker is not None else None
        cpu = broker.cpu_s() if broker is not None else None
        run["load_avg_before"] = load_avg()
        run.update(public(produce(bootstrap, topic, args.produce_records, args.produce_seconds, args)))
        run["load_avg_after"] = load_avg()
        if broker is not None and before is not None:
            after = broker.cleaner()
            cpu_after = broker.cpu_s()
            run["broker_cpu_s"] = round(cpu_after - cpu, 2) if cpu is not None and cpu_after is not None else None
            run["cleaner_bytes_read"] = round(after["bytes_read"] - before["bytes_read"])
            run["cleaner_bytes_written"] = round(after["bytes_written"] - before["bytes_written"])
        run["ok"] = not run["failed"] and not run["undelivered"]
        log(f"{kind} produce {mode} #{i}: {run['mb_per_s']} MB/s"
            + (f", cleaner read {run['cleaner_bytes_read'] / MB:.1f} MB meanwhile" if "cleaner_bytes_read" in run else ""))
        return run
    finally:
        if broker is not None:
            broker.stop()


# ------------------------------------------------------------------------------------- main


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bootstrap", metavar="HOST:PORT", help="a running broker (nothing started; no metrics or files)")
    p.add_argument("--kinds", default="classic,diskless", help="comma-separated: classic, diskless (default both)")
    p.add_argument("--phases", default="clean,produce", help="comma-separated: clean, produce (default both)")
    p.add_argument("--records", type=int, default=200_000, help="records of the clean phase (default 200,000)")
    p.add_argument("--produce-seconds", type=float, default=10.0,
                   help="length of each produce run at saturation (default 10 s)")
    p.add_argument("--produce-records", type=int, help="stop a produce run after this many records (default: no cap)")
    p.add_argument("--keys", type=int, default=2_000, help="distinct keys (default 2,000)")
    p.add_argument("--record-size", type=int, default=200, help="value bytes per record, at least 8 (default 200)")
    p.add_argument("--seed", type=int, default=1, help="seed of the key sequence")
    p.add_argument("--rounds", type=int, default=2, help="produce rounds of cleaner on, cleaner off (default 2)")
    p.add_argument("--segment-bytes", type=int, default=MIB,
                   help="classic segment size (internal.segment.bytes; segment.bytes with --bootstrap)")
    p.add_argument("--dirty-ratio", type=float, default=0.01, help="min.cleanable.dirty.ratio (default 0.01)")
    p.add_argument("--backoff-ms", type=int, default=100, help="started brokers' log.cleaner.backoff.ms (default 100)")
    p.add_argument("--object-grace-ms", type=int, default=1000,
                   help="started brokers' diskless.object.delete.grace.ms (default 1000)")
    p.add_argument("--poll-interval", type=float, default=0.1, help="seconds between metric polls / reads")
    p.add_argument("--settle", type=float, default=3.0, help="seconds the counters must hold still (default 3)")
    p.add_argument("--clean-timeout", type=float, default=600.0)
    p.add_argument("--read-timeout", type=float, default=300.0, help="cap (s) of each read from the start")
    p.add_argument("--flush-timeout", type=float, default=300.0)
    p.add_argument("--startup-timeout", type=float, default=90.0)
    p.add_argument("--broker-override", action="append", default=[], metavar="K=V", help="`shoal up --override`")
    p.add_argument("--data-parent", default=tempfile.gettempdir(), help="where each broker's data dir is made")
    p.add_argument("--keep-data", action="store_true")
    p.add_argument("--output", help="also write the JSON document to this file")
    return p


def summarise(kinds: dict[str, Any]) -> dict[str, Any]:
    summary: dict[str, Any] = {}
    for kind, res in kinds.items():
        s: dict[str, Any] = {}
        clean = res.get("clean")
        if clean and "error" not in clean:
            for key in ("mb_per_s", "pass_mb_per_s", "input_mb_per_s", "clean_s", "cleaner_bytes_read",
                        "cleaner_bytes_written", "recopy_percent", "stored_bytes_before", "stored_bytes_after"):
                if key in clean:
                    s[key if key.startswith(("clean", "stored")) else f"clean_{key}"] = clean[key]
            s["records_left"] = clean["after"]["records"]
            s["verified"] = clean["after"]["verified"]
        runs = res.get("produce") or []
        modes = [m for m in ("cleaner_on", "cleaner_off", "compact", "delete") if any(r["mode"] == m for r in runs)]
        for mode in modes:
            mine = [r for r in runs if r["mode"] == mode]
            s[f"produce_{mode}_mb_per_s"] = _median([r.get("mb_per_s") for r in mine if r.get("ok")])
            s[f"produce_{mode}_mb_per_s_each"] = [r.get("mb_per_s") for r in mine]
        if len(modes) == 2:
            a, b = s[f"produce_{modes[0]}_mb_per_s"], s[f"produce_{modes[1]}_mb_per_s"]
            name = "produce_on_over_off" if modes[0] == "cleaner_on" else "produce_compact_over_delete"
            s[name] = round(a / b, 3) if a and b else None
        summary[kind] = s
    return summary


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
    phases = [p.strip() for p in args.phases.split(",") if p.strip()]
    if set(kinds) - set(KINDS) or set(phases) - set(PHASES) or not kinds or not phases:
        raise SystemExit(f"--kinds among {KINDS}, --phases among {PHASES}")
    if args.records < 1 or args.keys < 1 or args.record_size < 8 or args.rounds < 1:
        raise SystemExit("--records, --keys, --rounds must be >= 1 and --record-size >= 8")
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    report: dict[str, Any] = {
        "benchmark": "bench/log_compaction.py", "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {"cpus": os.cpu_count(), "hostname": socket.gethostname(), "load_avg_start": load_avg()},
        "config": {k: v for k, v in vars(args).items() if k != "output"},
        "broker": args.bootstrap or "shoal up, one fresh broker per run",
        "kinds": {},
    }
    ctx = SimpleNamespace(args=args, bootstrap=args.bootstrap, made=[], stamp=f"{time.strftime('%H%M%S')}-{uuid.uuid4().hex[:4]}")
    ok = True
    try:
        for kind in kinds:
            res: dict[str, Any] = report["kinds"].setdefault(kind, {})
            if "clean" in phases:
                try:
                    res["clean"] = clean_run(kind, ctx)
                    ok = ok and res["clean"]["ok"]
                except Exception as exc:
                    ok = False
                    log(f"{kind} clean failed: {type(exc).__name__}: {exc}")
                    res["clean"] = {"error": f"{type(exc).__name__}: {exc}"}
            if "produce" in phases:
                res["produce"] = []
                modes = ("cleaner_on", "cleaner_off") if args.bootstrap is None else ("compact", "delete")
                for i in range(1, args.rounds + 1):
                    for mode in modes:
                        try:
                            res["produce"].append(produce_run(kind, mode, i, ctx))
                            ok = ok and res["produce"][-1]["ok"]
                        except Exception as exc:
                            ok = False
                            log(f"{kind} produce {mode} #{i} failed: {type(exc).__name__}: {exc}")
                            res["produce"].append({"mode": mode, "round": i, "error": f"{type(exc).__name__}: {exc}"})
    except (KeyboardInterrupt, SystemExit) as exc:
        ok = False
        report["error"] = f"stopped: {type(exc).__name__}: {exc}"
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, signal.SIG_IGN)
        if args.bootstrap and ctx.made:
            try:
                report["topics_not_deleted"] = delete_topics(args.bootstrap, ctx.made)
            except Exception as exc:
                report["topics_not_deleted"] = f"{ctx.made}: {type(exc).__name__}: {exc}"
    report["summary"] = summarise(report["kinds"])
    report["machine"]["load_avg_end"] = load_avg()
    report["finished_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    report["ok"] = ok
    text = json.dumps(report, indent=2)
    print(text, flush=True)
    if args.output:
        Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        Path(args.output).write_text(text + "\n")
    return 0 if ok else 2


if __name__ == "__main__":
    sys.exit(main())
