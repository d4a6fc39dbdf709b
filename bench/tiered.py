"""Tiered storage (KIP-405) of classic topics, or of diskless ones with ``--kind diskless``
(KIP-1163): remote fetch MB/s (cold, cached) beside local reads of the same records, and copy MB/s.

Starts one broker (``shoal up`` on a fresh data dir under ``--data-parent``, with
``remote.log.storage.system.enable=true``, ``remote.log.manager.task.interval.ms`` =
``--task-interval-ms``, a fast local-retention check and a ``/metrics`` endpoint), or uses a
running Kafka-compatible cluster given with ``--bootstrap`` (tiered figures only if it tiers:
the tiering change is tried with validate-only first; Kafka's metric names with ``--metrics URL``).

First a classic topic ``local`` (``--partitions``, ``segment.bytes`` = ``--segment-bytes``) is
filled with ``--mb`` MB (idempotent, acks=all, incompressible ``--record-size`` values). Then
each of ``--rounds`` rounds:

1. a fresh classic topic of the same shape, filled the same way, *then* tiered with
   ``remote.storage.enable=true`` and ``local.retention.bytes`` = one segment. Copies start
   only now, so **copy MB/s** is the bytes copied (RemoteCopyBytes delta; without metrics the
   values' bytes below latest tiered) over the seconds from that change to ``latest tiered``
   (ListOffsets -5, polled every ``--poll-interval``) reaching the end of the last rolled
   segment (the started broker's log dir tells it; elsewhere: when -5 stops moving for
   ``--settle`` s). Those seconds include waiting for the manager's next round (up to one
   interval): ``copy_mb_per_s_from_first_segment`` leaves that out.
2. once local retention deleted the copied segments (earliest local, -4, steady), one consumer
   reads offsets [0, earliest local) of every partition, alternating A B A B:
   ``remote_cold`` (segments never read: the offset-index cache is empty), ``local`` (the same
   offsets of the ``local`` topic), ``remote_cached`` (the same remote offsets again), ``local``.

MB/s is value bytes over the seconds from assign to the last wanted record. Prints one JSON
document (progress on stderr) with every run's figures, the load average before each, the
broker's CPU seconds (started broker) and metric deltas, and the medians; exit status 0 when
every run completed, 2 otherwise.

    .venv/bin/python bench/tiered.py --mb 100 --rounds 3
    .venv/bin/python bench/tiered.py --mb 4 --rounds 1                    # quick check
    .venv/bin/python bench/tiered.py --bootstrap 127.0.0.1:9092 --metrics http://127.0.0.1:9100/metrics

Object storage is the broker's local directory (a GET is a file read, the files just written
sit in the page cache): "cold" means Shoal's caches, not the disk's.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import struct
import sys
import time
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from bench_common import load_avg  # bench/ is on sys.path when a bench script runs
from bench_measure import proc_tree_cpu_s
from cache_replicas import Scraper, delete_topics, total
from local_cluster import ROOT, admin_client
from replication_catchup import fill, wait_for, watermarks
from shoal_broker import ShoalBroker

MB = 1_000_000
EARLIEST_LOCAL, LATEST_TIERED = -4, -5
COPY_BYTES = "kafka_server_brokertopicmetrics_remotecopybytes_total"
FETCH_BYTES = "kafka_server_brokertopicmetrics_remotefetchbytes_total"
SETUPS = ("remote_cold", "local", "remote_cached")


def log(msg: str) -> None:
    print(f"[tiered {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def _median(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return round(statistics.median(present), 2) if present else None


# ------------------------------------------------------------------------------ the broker


class Broker(ShoalBroker):
    """``shoal up`` (one broker) on a fresh data dir, tiering on, with a metrics port."""

    def __init__(self, args: argparse.Namespace) -> None:
        super().__init__(args.data_parent, "tiered-bench-", ports=2, startup_timeout=args.startup_timeout,
                         keep_data=args.keep_data, log=log)
        self.metrics_port = self.port + 1
        self.overrides += [
            "remote.log.storage.system.enable=true",
            f"remote.log.manager.task.interval.ms={args.task_interval_ms}", "log.retention.check.interval.ms=500",
            f"metrics.http.port={self.metrics_port}", *args.broker_override,
        ]

    def active_bases(self, topic: str, partitions: int) -> dict[int, int]:
        """Each partition's active segment base offset, from the log dir's file names."""
        logs = self.data_dir / "logs"
        return {p: max((int(f.stem) for f in (logs / f"{topic}-{p}").glob("*.log")), default=0)
                for p in range(partitions)}


# ---------------------------------------------------------------- ListOffsets v9 (-4, -5)


def _uvarint(data: bytes, pos: int) -> tuple[int, int]:
    shift = value = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7


def _put_uvarint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    return bytes(out + bytes([value]))


def _skip_tags(data: bytes, pos: int) -> int:
    count, pos = _uvarint(data, pos)
    for _ in range(count):
        _, pos = _uvarint(data, pos)
        size, pos = _uvarint(data, pos)
        pos += size
    return pos


def list_offsets(address: str, topic: str, partitions: list[int], timestamp: int) -> dict[int, tuple[int, int]]:
    """ListOffsets v9 (KIP-1005: -4 earliest local, -5 latest tiered) to one broker: partition ->
    (error code, offset). Hand-encoded, so any Kafka-compatible broker can be asked."""
    name = topic.encode()
    body = struct.pack(">ib", -1, 0) + _put_uvarint(2) + _put_uvarint(len(name) + 1) + name
    body += _put_uvarint(len(partitions) + 1)
    body += b"".join(struct.pack(">iiqb", p, -1, timestamp, 0) for p in partitions) + b"\0\0"
    client = b"bench-tiered"
    frame = struct.pack(">hhih", 2, 9, 1, len(client)) + client + b"\0" + body
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(struct.pack(">i", len(frame)) + frame)
        data = b""
        while len(data) < 4 or len(data) < 4 + struct.unpack_from(">i", data)[0]:
            chunk = sock.recv(65536)
            if not chunk:
                raise ConnectionError(f"{address} closed the connection (no ListOffsets v9?)")
            data += chunk
    pos = _skip_tags(data, 8) + 4  # size, correlation id, header tags, throttle time
    out: dict[int, tuple[int, int]] = {}
    topics, pos = _uvarint(data, pos)
    for _ in range(topics - 1):
        length, pos = _uvarint(data, pos)
        count, pos = _uvarint(data, pos + length - 1)
        for _ in range(count - 1):
            p, error, _ts, offset, _epoch = struct.unpack_from(">ihqqi", data, pos)
            pos = _skip_tags(data, pos + 26)
            out[p] = (error, offset)
        pos = _skip_tags(data, pos)
    return out


def offsets(leaders: dict[int, str], topic: str, timestamp: int) -> dict[int, int]:
    """Partition -> offset at ``timestamp``, each asked of its leader; an error raises."""
    out: dict[int, int] = {}
    for address in set(leaders.values()):
        mine = [p for p, a in leaders.items() if a == address]
        for p, (error, offset) in list_offsets(address, topic, mine, timestamp).items():
            if error:
                raise RuntimeError(f"ListOffsets {timestamp} of {topic}-{p}: error {error}")
            out[p] = offset
    return out


# ------------------------------------------------------------------------- topics and reads


def create_topic(bootstrap: str, name: str, args: argparse.Namespace) -> dict[int, str]:
    """A topic of ``--kind``; partition -> its leader's host:port."""
    from confluent_kafka.admin import NewTopic

    admin = admin_client(bootstrap)
    config = {"segment.bytes": str(args.segment_bytes)}
    if args.kind == "diskless":
        config["diskless.enable"] = "true"
    admin.create_topics([NewTopic(name, args.partitions, 1, config=config)], request_timeout=30)[name].result(40)
    ok, _, parts = wait_for(admin, name, 60, 0.2, lambda ps: len(ps) >= args.partitions and
                             all(m.leader >= 0 for m in ps.values()))
    if not ok or parts is None:
        raise RuntimeError(f"topic {name}: no leader for every partition after 60 s")
    brokers = admin.list_topics(timeout=10).brokers
    return {p: f"{brokers[m.leader].host}:{brokers[m.leader].port}" for p, m in parts.items()}


def tier(bootstrap: str, topic: str, args: argparse.Namespace, validate_only: bool = False) -> None:
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

    entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in
               (("remote.storage.enable", "true"), ("local.retention.bytes", str(args.segment_bytes)))]
    resource = ConfigResource("TOPIC", topic, incremental_configs=entries)
    admin = admin_client(bootstrap)
    admin.incremental_alter_configs([resource], validate_only=validate_only, request_timeout=30)[resource].result(40)


def fill_topic(bootstrap: str, topic: str, args: argparse.Namespace) -> dict[str, Any]:
    spec = SimpleNamespace(catchup_mb=args.mb, record_size=args.record_size, fill_timeout=args.fill_timeout)
    result = fill(bootstrap, topic, list(range(args.partitions)), spec)  # type: ignore[arg-type]
    if result["timed_out"] or result["error_counts"]:
        raise RuntimeError(f"filling {topic} failed: {result}")
    return result


def read(bootstrap: str, topic: str, stops: dict[int, int], args: argparse.Namespace) -> dict[str, Any]:
    """One consumer reads offsets [0, stop) of each partition: value bytes and seconds."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-tiered-{uuid.uuid4().hex[:6]}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest", "client.id": "bench-tiered"})
    want = {p: s for p, s in stops.items() if s > 0}
    nbytes = records = errors = 0
    start = time.monotonic()
    last = None
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in want])
        while want and time.monotonic() - start < args.read_timeout:
            for m in consumer.consume(1000, 0.05):
                if m.error():
                    errors += 1
                    continue
                p = m.partition()
                if p in want and m.offset() < want[p]:
                    nbytes += len(m.value() or b"")
                    records += 1
                    last = time.monotonic()
                    if m.offset() == want[p] - 1:
                        del want[p]
    finally:
        consumer.close()
    elapsed = last - start if last is not None else None
    return {"records": records, "expected": sum(stops.values()), "bytes": nbytes, "errors": errors,
            "elapsed_s": round(elapsed, 3) if elapsed else None, "complete": not want,
            "mb_per_s": round(nbytes / MB / elapsed, 2) if elapsed else None}


# ------------------------------------------------------------------------------ one round


def wait_copied(leaders: dict[int, str], topic: str, targets: dict[int, int] | None,
                args: argparse.Namespace) -> dict[str, Any]:
    """Poll latest tiered (-5) from now until every partition reaches its target (or, with no
    targets, stops moving for ``--settle`` s)."""
    start = time.monotonic()
    last = {p: -1 for p in leaders}  # nothing copied yet: the topic was just tiered
    first_at = last_at = None
    at_first: dict[int, int] = {}
    while True:
        now = time.monotonic()
        found = offsets(leaders, topic, LATEST_TIERED)
        if found != last:
            first_at = first_at or now
            at_first = at_first or dict(found)
            last_at = now
        last = found
        if targets is not None and all(found.get(p, -1) >= t for p, t in targets.items()):
            break
        if targets is None and last_at is not None and now - last_at >= args.settle:
            break
        if now - start > args.copy_timeout:
            return {"timed_out": True, "latest_tiered": last}
        time.sleep(args.poll_interval)
    return {"timed_out": False, "latest_tiered": last, "targets": targets,
            "first_copy_s": round(first_at - start, 3) if first_at else None,
            "copy_s": round(last_at - start, 3) if last_at else None,
            "copy_s_from_first_segment": round(last_at - first_at, 3) if last_at and first_at else None,
            "offsets_after_first_segment": sum(last[p] - at_first.get(p, -1) for p in last)}


def wait_local_deleted(leaders: dict[int, str], topic: str, args: argparse.Namespace) -> dict[int, int]:
    """Earliest local (-4) once it moved and then held still for ``--settle`` s (or ``--local-timeout``)."""
    start = time.monotonic()
    seen, since = offsets(leaders, topic, EARLIEST_LOCAL), time.monotonic()
    while time.monotonic() - start < args.local_timeout:
        time.sleep(args.poll_interval * 2)
        now_at = offsets(leaders, topic, EARLIEST_LOCAL)
        if now_at != seen:
            seen, since = now_at, time.monotonic()
        elif any(seen.values()) and time.monotonic() - since >= args.settle:
            break
    return seen


def measured(name: str, bootstrap: str, topic: str, stops: dict[int, int], ctx: SimpleNamespace) -> dict[str, Any]:
    """A read with the load before it, the broker's CPU and the metric deltas around it."""
    run: dict[str, Any] = {"setup": name, "topic": topic, "load_avg_start": load_avg()}
    before = ctx.scraper.scrape() if ctx.scraper else None
    cpu = proc_tree_cpu_s(ctx.broker.proc.pid) if ctx.broker and ctx.broker.proc else None
    run["read"] = read(bootstrap, topic, stops, ctx.args)
    if cpu is not None:
        after = proc_tree_cpu_s(ctx.broker.proc.pid)
        run["broker_cpu_s"] = round(after - cpu, 2) if after is not None else None
    if ctx.scraper and before is not None:
        after_scrape = ctx.scraper.scrape()
        run["remote_fetch_bytes"] = round(sum(total(after_scrape[b], FETCH_BYTES, topic=topic)
                                              - total(before[b], FETCH_BYTES, topic=topic) for b in after_scrape))
    r = run["read"]
    log(f"{name}: {r['records']}/{r['expected']} records, {r['mb_per_s']} MB/s, complete {r['complete']}")
    return run


def one_round(i: int, bootstrap: str, local_topic: str, ctx: SimpleNamespace) -> dict[str, Any]:
    args = ctx.args
    topic = f"bench-tiered-{ctx.stamp}-{i}"
    ctx.made.append(topic)
    out: dict[str, Any] = {"round": i, "topic": topic, "runs": []}
    leaders = create_topic(bootstrap, topic, args)
    log(f"round {i}: filling {topic} with {args.mb} MB")
    out["fill"] = fill_topic(bootstrap, topic, args)
    targets = None
    if ctx.broker is not None and args.kind == "classic":  # a diskless chain is built once tiered
        targets = {p: base - 1 for p, base in ctx.broker.active_bases(topic, args.partitions).items() if base > 0}
    before = ctx.scraper.scrape() if ctx.scraper else None
    tier(bootstrap, topic, args)
    copy = out["copy"] = wait_copied(leaders, topic, targets, args)
    copied_offsets = sum(o + 1 for o in copy["latest_tiered"].values())
    if ctx.scraper and before is not None:
        after = ctx.scraper.scrape()
        copy["bytes"] = round(sum(total(after[b], COPY_BYTES, topic=topic) - total(before[b], COPY_BYTES, topic=topic)
                                  for b in after))
        copy["bytes_source"] = "RemoteCopyBytes"
    else:
        copy["bytes"], copy["bytes_source"] = copied_offsets * args.record_size, "values below latest tiered"
    if copy.get("copy_s"):
        copy["mb_per_s"] = round(copy["bytes"] / MB / copy["copy_s"], 2)
    if copy.get("copy_s_from_first_segment") and copied_offsets:
        share = copy["offsets_after_first_segment"] / copied_offsets
        copy["mb_per_s_from_first_segment"] = round(copy["bytes"] * share / MB / copy["copy_s_from_first_segment"], 2)
    log(f"round {i}: copy {copy.get('mb_per_s')} MB/s ({copy['bytes']} bytes, {copy.get('copy_s')} s)")
    stops = out["earliest_local"] = wait_local_deleted(leaders, topic, args)
    if not any(stops.values()):
        raise RuntimeError(f"{topic}: no segment left the local disk (earliest local {stops})")
    for name, t in (("remote_cold", topic), ("local", local_topic), ("remote_cached", topic), ("local", local_topic)):
        out["runs"].append(measured(name, bootstrap, t, stops, ctx))
    return out


# ------------------------------------------------------------------------------------- main


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bootstrap", metavar="HOST:PORT", help="a running cluster (nothing started or stopped)")
    p.add_argument("--metrics", help="with --bootstrap: the brokers' /metrics URLs, comma-separated")
    p.add_argument("--mb", type=float, default=100.0, help="MB (10^6 bytes of values) per topic (default 100)")
    p.add_argument("--rounds", type=int, default=2, help="rounds of A B A B (default 2)")
    p.add_argument("--kind", choices=("classic", "diskless"), default="classic",
                   help="topic kind (default classic); diskless: the leader builds segments from the Batch "
                        "Coordinator's batches (KIP-1163), and 'local' reads come from the cache replica")
    p.add_argument("--partitions", type=int, default=1, help="partitions per topic (default 1)")
    p.add_argument("--record-size", type=int, default=1024, help="value bytes per record (default 1024)")
    p.add_argument("--segment-bytes", type=int, default=1 << 20, help="segment.bytes, and local.retention.bytes")
    p.add_argument("--task-interval-ms", type=int, default=500,
                   help="the started broker's remote.log.manager.task.interval.ms (default 500)")
    p.add_argument("--poll-interval", type=float, default=0.1, help="seconds between ListOffsets polls")
    p.add_argument("--settle", type=float, default=3.0, help="seconds an offset must hold still to count as settled")
    p.add_argument("--copy-timeout", type=float, default=300.0)
    p.add_argument("--local-timeout", type=float, default=120.0, help="cap on waiting for local deletion")
    p.add_argument("--read-timeout", type=float, default=300.0, help="cap (s) of each read")
    p.add_argument("--fill-timeout", type=float, default=300.0)
    p.add_argument("--startup-timeout", type=float, default=90.0)
    p.add_argument("--broker-override", action="append", default=[], metavar="K=V", help="`shoal up --override`")
    p.add_argument("--data-parent", default=str(ROOT / "bench" / "results"), help="where the data dir is made")
    p.add_argument("--keep-data", action="store_true")
    p.add_argument("--output", help="also write the JSON document to this file")
    return p


def summarise(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    runs = [r for rnd in rounds for r in rnd["runs"]]
    summary: dict[str, Any] = {}
    for name in SETUPS:
        mine = [r for r in runs if r["setup"] == name]
        summary[name] = {"read_mb_per_s": _median([r["read"]["mb_per_s"] for r in mine if r["read"]["complete"]]),
                         "read_mb_per_s_each": [r["read"]["mb_per_s"] for r in mine],
                         "broker_cpu_s_each": [r.get("broker_cpu_s") for r in mine],
                         "load_avg_1m_each": [r["load_avg_start"]["1m"] for r in mine]}
    local = summary["local"]["read_mb_per_s"]
    for name in ("remote_cold", "remote_cached"):
        mbs = summary[name]["read_mb_per_s"]
        summary[f"{name}_over_local"] = round(mbs / local, 3) if mbs and local else None
    copies = [rnd["copy"] for rnd in rounds if "copy" in rnd]
    summary["copy_mb_per_s"] = _median([c.get("mb_per_s") for c in copies])
    summary["copy_mb_per_s_from_first_segment"] = _median([c.get("mb_per_s_from_first_segment") for c in copies])
    summary["produce_mb_per_s"] = _median([rnd["fill"]["mb_per_s"] for rnd in rounds if "fill" in rnd])
    return summary


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.rounds < 1 or args.partitions < 1 or args.mb <= 0 or args.record_size < 1:
        raise SystemExit("--rounds, --partitions, --record-size must be >= 1 and --mb > 0")
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    report: dict[str, Any] = {
        "benchmark": "bench/tiered.py", "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {"cpus": os.cpu_count(), "hostname": socket.gethostname(), "load_avg_start": load_avg()},
        "config": {k: v for k, v in vars(args).items() if k != "output"}, "tiers": None,
    }
    stamp = f"{time.strftime('%H%M%S')}-{uuid.uuid4().hex[:4]}"
    ctx = SimpleNamespace(args=args, broker=None, scraper=None, made=[], stamp=stamp)
    rounds: list[dict[str, Any]] = []
    try:
        if args.bootstrap:
            bootstrap = args.bootstrap
            if args.metrics:
                ctx.scraper = Scraper({u.strip(): u.strip() for u in args.metrics.split(",") if u.strip()})
        else:
            ctx.broker = Broker(args)
            report["broker"] = {"data_dir": str(ctx.broker.data_dir), "overrides": ctx.broker.overrides}
            ctx.broker.start()
            bootstrap = f"127.0.0.1:{ctx.broker.port}"
            ctx.scraper = Scraper({"broker-1": f"http://127.0.0.1:{ctx.broker.metrics_port}/metrics"})
        local_topic = f"bench-tiered-{ctx.stamp}-local"
        ctx.made.append(local_topic)
        create_topic(bootstrap, local_topic, args)
        try:
            tier(bootstrap, local_topic, args, validate_only=True)
            report["tiers"] = True
        except Exception as exc:
            report["tiers"], report["tiering_refused"] = False, str(exc)
            log(f"the cluster does not tier ({exc}): local reads only")
        log(f"filling {local_topic} with {args.mb} MB")
        report["local_fill"] = fill_topic(bootstrap, local_topic, args)
        for i in range(1, args.rounds + 1 if report["tiers"] else 1):
            rounds.append(one_round(i, bootstrap, local_topic, ctx))
        if not report["tiers"]:
            marks = watermarks(bootstrap, local_topic, list(range(args.partitions)), 30)
            stops = {p: m or 0 for p, m in marks.items()}
            rounds.append({"round": 1, "runs": [measured("local", bootstrap, local_topic, stops, ctx)]})
    except (Exception, KeyboardInterrupt, SystemExit) as exc:
        log(f"stopped: {type(exc).__name__}: {exc}")
        report["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, signal.SIG_IGN)
        if args.bootstrap and ctx.made:
            try:
                report["topics_not_deleted"] = delete_topics(args.bootstrap, ctx.made)
            except Exception as exc:
                report["topics_not_deleted"] = f"{ctx.made}: {type(exc).__name__}: {exc}"
        if ctx.broker is not None:
            log("stopping the broker")
            ctx.broker.stop()
    report["summary"] = summarise(rounds)
    report["rounds"] = rounds
    report["finished_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    report["ok"] = "error" not in report and all(r["read"]["complete"] for rnd in rounds for r in rnd["runs"])
    text = json.dumps(report, indent=2)
    print(text, flush=True)
    if args.output:
        Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        Path(args.output).write_text(text + "\n")
    return 0 if report["ok"] else 2


if __name__ == "__main__":
    sys.exit(main())
