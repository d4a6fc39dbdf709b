"""Diskless cache replicas (KIP-1163): consume MB/s from rack-local caches beside direct reads.

Starts ``shoal up --brokers 3 --racks rack-a,rack-b,rack-c`` (``--brokers``, ``--racks``) on a
fresh data dir under ``--data-parent``, with each broker's ``/metrics`` endpoint
(``metrics.http.port``, shifted per broker by ``shoal up``), or measures a running cluster given
with ``--bootstrap`` (Shoal's metrics then only with ``--metrics URL[,URL...]``). Every broker
must have a rack. Topics are diskless (``diskless.enable=true``) with ``--partitions``
partitions, each filled with ``--mb`` MB by one idempotent producer (acks=all, 5 in flight,
round robin over the partitions, ``--record-size`` incompressible values).

Setups, alternating A B A B for ``--rounds``, one consumer process per rack (the partitions
split between them, read from the start to the high watermark, all released together):

- ``cache`` (A): a replication-factor-3 topic whose caches have caught up (every replica in the
  ISR and, with metrics, lag 0 on every broker); the consumers set ``client.rack`` and read the
  partitions whose leader is in another rack, served by the follower in their rack from its cache
  log. Their client id also carries ``diskless_rack_id=<rack>``, so Metadata already names that
  follower, as in B: without it the leader's PreferredReadReplica answer sends them there, and
  a consumer whose partitions have leaders on two brokers can stall ``fetch.wait.max.ms``
  (500 ms) on the second redirect (librdkafka has one fetch in flight per broker), which would
  dominate short runs. ``fanout`` takes that path.
- ``direct`` (B): a replication-factor-1 topic (a fresh one per round, filled before the rounds)
  read by consumers without ``client.rack`` whose client id carries ``diskless_rack_id=<rack>``
  for a rack that holds no replica of their partitions: Metadata gives them a broker in that rack
  as leader, which has no cache of the partition and reads object storage. A fresh topic per
  round keeps the readers' range cache (``diskless.fetch.cache.max.bytes``) cold, as it is for a
  consumer that is not at the tail; the same cluster and brokers serve both setups.

Then ``fanout``: three consumers at once, ``client.rack`` (only) one rack each, each reading
the whole RF-3 topic: PreferredReadReplica sends them to their rack's replica for the two thirds
of the partitions whose leader is elsewhere. With metrics the JSON has, per run and per broker, the deltas of the consumer bytes
out (``kafka_server_brokertopicmetrics_bytesout_total{topic}``), bytes by source (cache hit
ratio), cross-rack bytes (zero is the goal for rack-aware clients), object GETs of fetches and
of cache fills, per MB served; and the GETs the fill of the RF-3 topic cost; ``summary.not_as_intended`` lists the runs whose hit
ratio or cross-rack bytes were not what the setup should give.

Prints one JSON document on stdout (progress on stderr); exit status 0 when every run read what it
should, 2 otherwise. The brokers it started are stopped at the end, also on errors or SIGTERM;
topics it made on a running cluster are deleted.

    .venv/bin/python bench/cache_replicas.py --mb 200 --rounds 3
    .venv/bin/python bench/cache_replicas.py --mb 5 --rounds 1              # quick check
    .venv/bin/python bench/cache_replicas.py --bootstrap 127.0.0.1:9092 \\
        --metrics http://127.0.0.1:9100/metrics,http://127.0.0.1:9101/metrics,http://127.0.0.1:9102/metrics

Object storage is a local directory here (a GET is a file read), so ``direct`` is not slowed by
S3's latency; all brokers and clients share the machine's cores.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import sys
import time
import urllib.request
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from bench_clients import (  # bench/ is on sys.path when a bench script runs
    ConsumerJob,
    consumer_main,
    run_workers,
)
from cluster import free_base_port
from local_cluster import ROOT, Cluster, admin_client
from replication_catchup import fill, wait_for

MB = 1_000_000
SETUPS = ("cache", "direct")
Snapshot = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def log(msg: str) -> None:
    print(f"[cache_replicas {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def _ratio(num: float, den: float, digits: int = 4) -> float | None:
    return round(num / den, digits) if den else None


def _median(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return round(statistics.median(present), 3) if present else None


# --------------------------------------------------------------------------------------
# Metrics
# --------------------------------------------------------------------------------------


class Scraper:
    """The brokers' ``/metrics`` endpoints, by a name (``broker-<id>`` or the URL)."""

    def __init__(self, urls: dict[str, str]) -> None:
        self.urls = urls

    def scrape(self) -> dict[str, Snapshot]:
        from prometheus_client.parser import text_string_to_metric_families

        out: dict[str, Snapshot] = {}
        for name, url in self.urls.items():
            with urllib.request.urlopen(url, timeout=10) as answer:  # noqa: S310 - a URL we were given
                text = answer.read().decode()
            out[name] = {
                (s.name, tuple(sorted(s.labels.items()))): float(s.value)
                for family in text_string_to_metric_families(text)
                for s in family.samples
            }
        return out


def total(snap: Snapshot, name: str, **labels: str) -> float:
    """Sum of the samples ``name`` whose labels include ``labels``."""
    return sum(v for (n, ls), v in snap.items() if n == name and labels.items() <= dict(ls).items())


def window(before: dict[str, Snapshot], after: dict[str, Snapshot], topic: str) -> dict[str, Any]:
    """What happened between two scrapes: per broker and summed, with the ratios."""
    fields = {
        "consumer_bytes_out": ("kafka_server_brokertopicmetrics_bytesout_total", {"topic": topic}),
        "fetch_bytes_cache": ("kafka_diskless_fetch_bytes_total", {"source": "cache"}),
        "fetch_bytes_direct": ("kafka_diskless_fetch_bytes_total", {"source": "direct"}),
        "cross_rack_bytes": ("kafka_diskless_cross_rack_fetch_bytes_total", {}),
        "object_gets": ("kafka_diskless_object_gets_total", {}),
        "cache_fill_object_gets": ("kafka_diskless_cache_fill_object_gets_total", {}),
        "cache_download_bytes": ("kafka_diskless_cache_download_bytes_total", {}),
        "range_cache_hits": ("kafka_diskless_cache_hits_total", {}),
        "range_cache_misses": ("kafka_diskless_cache_misses_total", {}),
    }
    per_broker: dict[str, dict[str, float]] = {}
    for broker, snap in after.items():
        old = before.get(broker, {})
        per_broker[broker] = {
            key: round(total(snap, name, **labels) - total(old, name, **labels))
            for key, (name, labels) in fields.items()
        }
    summed = {key: sum(b[key] for b in per_broker.values()) for key in fields}
    served = summed["fetch_bytes_cache"] + summed["fetch_bytes_direct"]
    fetch_gets = summed["object_gets"] - summed["cache_fill_object_gets"]  # object_gets counts fills too
    summed.update(
        {
            "fetch_object_gets": fetch_gets,
            "cache_hit_ratio": _ratio(summed["fetch_bytes_cache"], served),
            "fetch_object_gets_per_mb": _ratio(fetch_gets * MB, served, 3),
            "fill_object_gets_per_mb": _ratio(summed["cache_fill_object_gets"] * MB, served, 3),
        }
    )
    return {"total": summed, "per_broker": per_broker}


# --------------------------------------------------------------------------------------
# Topics and consumers
# --------------------------------------------------------------------------------------


def broker_racks(bootstrap: str) -> dict[int, str | None]:
    """Node id -> rack, from DescribeCluster."""
    admin = admin_client(bootstrap)  # kept alive until the answer: a destroyed client fails its futures
    described = admin.describe_cluster(request_timeout=15).result(30)
    return {node.id: node.rack for node in described.nodes}


def create_topic(bootstrap: str, name: str, rf: int, args: argparse.Namespace) -> dict[str, Any]:
    """A diskless topic with ``rf`` replicas; waits until every partition has them and a leader."""
    from confluent_kafka.admin import NewTopic

    admin = admin_client(bootstrap)
    new = NewTopic(
        name, num_partitions=args.partitions, replication_factor=rf, config={"diskless.enable": "true"}
    )
    admin.create_topics([new], operation_timeout=30, request_timeout=30)[name].result(40)

    def placed(ps: dict[int, Any]) -> bool:
        return len(ps) >= args.partitions and all(
            m.leader >= 0 and len(m.replicas) == rf for m in ps.values()
        )

    ok, _, parts = wait_for(admin, name, 60, 0.2, placed)
    if not ok or parts is None:
        raise RuntimeError(f"topic {name}: not every partition had {rf} replicas and a leader after 60s")
    return {
        "name": name,
        "replication_factor": rf,
        "replicas": {str(p): list(m.replicas) for p, m in parts.items()},
        "leaders": {str(p): m.leader for p, m in parts.items()},
    }


def fill_topic(bootstrap: str, topic: str, args: argparse.Namespace) -> dict[str, Any]:
    """``--mb`` MB into every partition round robin (replication.py's fill: idempotent, acks=all)."""
    spec = SimpleNamespace(catchup_mb=args.mb, record_size=args.record_size, fill_timeout=args.fill_timeout)
    result = fill(bootstrap, topic, list(range(args.partitions)), spec)  # type: ignore[arg-type]
    if result["timed_out"] or result["error_counts"]:
        raise RuntimeError(f"filling {topic} failed: {result}")
    return result


def wait_caches(
    bootstrap: str, topic: str, scraper: Scraper | None, brokers: int, args: argparse.Namespace
) -> dict[str, Any]:
    """Every replica of ``topic`` in the ISR, and (with metrics) every cache at lag 0 and in sync
    in two scrapes 0.5 s apart (a cache's lag is measured against the high watermark it last saw,
    so one scrape can show 0 before the round that sees the last commit)."""
    admin = admin_client(bootstrap)
    start = time.monotonic()

    def full(ps: dict[int, Any]) -> bool:
        return len(ps) >= args.partitions and all(set(m.replicas) <= set(m.isrs) for m in ps.values())

    ok, waited, parts = wait_for(admin, topic, args.cache_timeout, 0.2, full)
    out: dict[str, Any] = {"full_isr": ok, "full_isr_s": round(waited, 3)}
    if not ok:
        out["isr"] = {str(p): list(m.isrs) for p, m in (parts or {}).items()}
        raise RuntimeError(f"caches of {topic} not all in the ISR after {args.cache_timeout}s: {out}")
    if scraper is None:
        return out
    replicas = sum(len(m.replicas) for m in (parts or {}).values())
    expected = replicas if len(scraper.urls) >= brokers else 1
    before = False
    while True:
        lags: dict[str, float] = {}
        synced: list[float] = []
        for broker, snap in scraper.scrape().items():
            for (name, labels), value in snap.items():
                if dict(labels).get("topic") != topic:
                    continue
                if name == "kafka_diskless_cache_replica_lag_offsets":
                    lags[f"{broker}/{dict(labels)['partition']}"] = value
                elif name == "kafka_diskless_cache_replica_in_sync":
                    synced.append(value)
        caught_up = len(lags) >= expected and not any(lags.values()) and all(synced)
        if caught_up and before:
            out["caches_caught_up_s"] = round(time.monotonic() - start, 3)
            return out
        before = caught_up
        if time.monotonic() - start > args.cache_timeout:
            raise RuntimeError(f"caches of {topic} not caught up after {args.cache_timeout}s: lags {lags}")
        time.sleep(0.5)


def delete_topics(bootstrap: str, names: list[str]) -> list[str]:
    """Delete the topics this bench made on a running cluster (best effort); the ones that failed."""
    admin = admin_client(bootstrap)
    failed = []
    for name, future in admin.delete_topics(names, operation_timeout=30, request_timeout=30).items():
        try:
            future.result(40)
        except Exception:
            failed.append(name)
    return failed


def assign_away(holders: dict[str, list[int]], racks: dict[int, str | None]) -> dict[str, list[int]]:
    """Rack -> partitions to read there: each partition to a rack none of its ``holders`` is in,
    spread evenly."""
    names = sorted({r for r in racks.values() if r})
    out: dict[str, list[int]] = {r: [] for r in names}
    for p, nodes in sorted(holders.items(), key=lambda kv: int(kv[0])):
        holding = {racks.get(n) for n in nodes}
        candidates = [r for r in names if r not in holding]
        if not candidates:
            raise RuntimeError(f"partition {p}: brokers {nodes} are in every rack")
        out[min(candidates, key=lambda r: (len(out[r]), r))].append(int(p))
    return {r: ps for r, ps in out.items() if ps}


def consume(
    bootstrap: str, topic: str, plan: list[tuple[dict[str, Any], list[int]]], args: argparse.Namespace
) -> dict[str, Any]:
    """One consumer process per (config, partitions), started together; their figures merged."""
    jobs = [
        ConsumerJob(
            index=i,
            bootstrap=bootstrap,
            topic=topic,
            partitions=parts,
            duration_s=args.duration,
            idle_timeout_s=10.0,
            ready_timeout_s=60.0,
            conf=conf,
            poll_timeout_s=args.poll_timeout,
        )
        for i, (conf, parts) in enumerate(plan)
    ]
    reports = {r["index"]: r for r in run_workers(consumer_main, jobs, 60.0, args.duration + 120)}
    results = [reports.get(i, {"fatal": "no report from the worker"}) for i in range(len(jobs))]
    ok = [r for r in results if "fatal" not in r]
    start = min((r["start_ts"] for r in ok), default=None)
    last = max((r["last_record_ts"] for r in ok if r["last_record_ts"]), default=None)
    elapsed = last - start if start is not None and last is not None else None
    nbytes = sum(r["bytes"] for r in ok)
    complete = len(ok) == len(jobs) and all(
        r["expected"] is not None and r["records"] == r["expected"] and r["stopped_by"] == "complete"
        for r in ok
    )
    return {
        "records": sum(r["records"] for r in ok),
        "expected": sum(r["expected"] or 0 for r in ok),
        "bytes": nbytes,
        "elapsed_s": round(elapsed, 3) if elapsed else None,
        "mb_per_s": round(nbytes / MB / elapsed, 2) if elapsed else None,
        "complete": complete,
        "consumers": [_consumer(conf, parts, r) for (conf, parts), r in zip(plan, results, strict=True)],
    }


def _consumer(conf: dict[str, Any], parts: list[int], r: dict[str, Any]) -> dict[str, Any]:
    """One consumer's figures; times in seconds from the common start."""
    out: dict[str, Any] = {"client": {k: v for k, v in conf.items() if k in ("client.rack", "client.id")}}
    out["partitions"] = parts
    if "fatal" in r:
        return {**out, "fatal": r["fatal"]}
    out.update({k: r[k] for k in ("records", "expected", "bytes", "stopped_by", "errors", "offset_gaps")})
    for k in ("first_record", "last_record"):
        out[f"{k}_s"] = round(r[f"{k}_ts"] - r["start_ts"], 3) if r[f"{k}_ts"] else None
    out["mb_per_s"] = round(r["bytes"] / MB / out["last_record_s"], 2) if out["last_record_s"] else None
    return out


def measured(
    name: str,
    bootstrap: str,
    topic: str,
    plan: list[tuple[dict[str, Any], list[int]]],
    scraper: Scraper | None,
    args: argparse.Namespace,
) -> dict[str, Any]:
    """A consume run with the load before it and the metric deltas around it."""
    run: dict[str, Any] = {"setup": name, "topic": topic, "load_avg_start": os.getloadavg()}
    before = scraper.scrape() if scraper else None
    run["consume"] = consume(bootstrap, topic, plan, args)
    if scraper and before is not None:
        run["metrics"] = window(before, scraper.scrape(), topic)
    run["completed"] = run["consume"]["complete"]
    c = run["consume"]
    log(f"{name}: {c['records']}/{c['expected']} records, {c['mb_per_s']} MB/s, complete {c['complete']}")
    return run


# --------------------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bootstrap", metavar="HOST:PORT", help="a running cluster (nothing started or stopped)")
    p.add_argument("--metrics", help="with --bootstrap: the brokers' /metrics URLs, comma-separated")
    p.add_argument("--brokers", type=int, default=3, help="brokers of the started cluster (default 3)")
    p.add_argument(
        "--racks", default="rack-a,rack-b,rack-c", help="racks of the started brokers, round robin"
    )
    p.add_argument(
        "--mb", type=float, default=100.0, help="MB (10^6 bytes of values) per topic (default 100)"
    )
    p.add_argument("--rounds", type=int, default=2, help="A B rounds (default 2)")
    p.add_argument("--partitions", type=int, default=6, help="partitions per topic (default 6)")
    p.add_argument("--record-size", type=int, default=1024, help="value bytes per record (default 1024)")
    p.add_argument("--duration", type=float, default=120.0, help="cap (s) of each consume run (default 120)")
    p.add_argument(
        "--fill-timeout", type=float, default=300.0, help="cap (s) of each topic's fill (default 300)"
    )
    p.add_argument(
        "--poll-timeout",
        type=float,
        default=0.05,
        help="longest wait of one consume() call: the last records are timed up to this late (default 0.05)",
    )
    p.add_argument("--cache-timeout", type=float, default=120.0, help="cap (s) on the caches catching up")
    p.add_argument(
        "--startup-timeout", type=float, default=90.0, help="cap (s) on the started brokers registering"
    )
    p.add_argument(
        "--broker-override", action="append", default=[], metavar="K=V", help="`shoal up --override`"
    )
    p.add_argument(
        "--data-parent", default=str(ROOT / "bench" / "results"), help="where the data dir is made"
    )
    p.add_argument("--keep-data", action="store_true", help="keep the started cluster's data dir")
    p.add_argument("--output", help="also write the JSON document to this file")
    return p


def start_cluster(args: argparse.Namespace) -> tuple[Cluster, Scraper]:
    """``shoal up --brokers N --racks ...`` with a metrics port per broker (listeners' ports apart)."""
    cluster_args = argparse.Namespace(**vars(args))
    cluster = Cluster(cluster_args, ["--racks", args.racks])
    for _ in range(20):
        metrics = free_base_port(args.brokers)
        if not set(range(metrics, metrics + args.brokers)) & set(cluster.ports):
            break
    else:
        raise RuntimeError("no free metrics ports apart from the listeners'")
    cluster_args.broker_override = [*args.broker_override, f"metrics.http.port={metrics}"]
    urls = {f"broker-{i}": f"http://127.0.0.1:{metrics + i - 1}/metrics" for i in range(1, args.brokers + 1)}
    return cluster, Scraper(urls)


def run(
    args: argparse.Namespace,
    cluster: Cluster | None,
    scraper: Scraper | None,
    report: dict[str, Any],
    runs: list[dict[str, Any]],
) -> None:
    """Everything between starting the cluster and stopping it; fills ``report`` and ``runs``."""
    if cluster is None:
        bootstrap = args.bootstrap
    else:
        cluster.start()
        bootstrap = cluster.bootstrap
        report["cluster"].update(
            {
                "bootstrap": bootstrap,
                "supervisor_pid": cluster.proc.pid if cluster.proc else None,
                "broker_pids": {str(n): p for n, p in cluster.broker_pids.items()},
            }
        )
    report["cluster"]["metrics"] = scraper.urls if scraper else None
    racks = broker_racks(bootstrap)
    report["cluster"]["racks"] = {str(n): r for n, r in sorted(racks.items())}
    if not all(racks.values()) or len(set(racks.values())) < 2:
        raise RuntimeError(f"every broker needs a rack, and two racks at least: {racks}")
    rack_names = sorted({r for r in racks.values() if r})
    stamp = f"{time.strftime('%H%M%S')}-{uuid.uuid4().hex[:6]}"
    cache_topic = create_topic(bootstrap, f"bench-cache-{stamp}", min(3, len(racks)), args)
    direct_topics: list[dict[str, Any]] = []
    report["topics"] = {"cache": cache_topic, "direct": direct_topics}
    for i in range(args.rounds):
        direct_topics.append(create_topic(bootstrap, f"bench-direct-{stamp}-{i + 1}", 1, args))

    log(f"filling {cache_topic['name']} with {args.mb} MB")
    before = scraper.scrape() if scraper else None
    fills: dict[str, Any] = {"cache": fill_topic(bootstrap, cache_topic["name"], args)}
    fills["cache_ready"] = wait_caches(bootstrap, cache_topic["name"], scraper, len(racks), args)
    if scraper and before is not None:
        # The fill's GETs: the replicas that did not upload an object read it once each.
        fill_window = window(before, scraper.scrape(), cache_topic["name"])["total"]
        fills["cache_fill_metrics"] = {
            k: fill_window[k] for k in ("cache_fill_object_gets", "object_gets", "cache_download_bytes")
        }
        fills["cache_fill_metrics"]["fill_object_gets_per_mb_produced"] = round(
            fill_window["cache_fill_object_gets"] / args.mb, 3
        )
    for topic in direct_topics:
        log(f"filling {topic['name']} with {args.mb} MB")
        fills[topic["name"]] = fill_topic(bootstrap, topic["name"], args)
    report["fills"] = fills

    # Each partition to a rack its leader is not in: a follower's cache serves it.
    leaders = {p: [leader] for p, leader in cache_topic["leaders"].items()}
    cache_plan = [
        ({"client.rack": rack, "client.id": f"bench-cache,diskless_rack_id={rack}"}, parts)
        for rack, parts in assign_away(leaders, racks).items()
    ]
    for i in range(args.rounds):
        log(f"round {i + 1}: cache")
        runs.append(
            {"round": i + 1, **measured("cache", bootstrap, cache_topic["name"], cache_plan, scraper, args)}
        )
        topic = direct_topics[i]
        plan = [
            ({"client.id": f"bench-direct,diskless_rack_id={rack}"}, parts)
            for rack, parts in assign_away(topic["replicas"], racks).items()
        ]
        log(f"round {i + 1}: direct")
        runs.append({"round": i + 1, **measured("direct", bootstrap, topic["name"], plan, scraper, args)})
    log("fanout: one consumer per rack, each reading the whole RF-3 topic")
    everything = list(range(args.partitions))
    fan_plan = [({"client.rack": r, "client.id": f"bench-fanout-{r}"}, everything) for r in rack_names]
    report["fanout"] = measured("fanout", bootstrap, cache_topic["name"], fan_plan, scraper, args)


def summarise(runs: list[dict[str, Any]], fanout: dict[str, Any] | None) -> dict[str, Any]:
    """Medians per setup (cross-rack bytes: the sum), the fan-out, and what was not as intended."""
    summary: dict[str, Any] = {}
    keys = ("cache_hit_ratio", "fetch_object_gets_per_mb")
    checks = []
    for r in [*runs, *([fanout] if fanout else [])]:
        m = r.get("metrics", {}).get("total")
        if m is None:
            continue
        want = 0.0 if r["setup"] == "direct" else 1.0
        if m["cache_hit_ratio"] != want or m["cross_rack_bytes"]:
            checks.append(
                f"{r['setup']} round {r.get('round', '-')}: cache hit ratio {m['cache_hit_ratio']} "
                f"(wanted {want}), cross-rack bytes {m['cross_rack_bytes']}"
            )
    for name in SETUPS:
        mine = [r for r in runs if r["setup"] == name]
        mbs = [r["consume"]["mb_per_s"] for r in mine if r["completed"]]
        entry: dict[str, Any] = {
            "runs": len(mine),
            "completed": sum(r["completed"] for r in mine),
            "consume_mb_per_s": _median(mbs),
            "consume_mb_per_s_each": mbs,
            "load_avg_1m_each": [round(r["load_avg_start"][0], 2) for r in mine],
        }
        for key in keys:
            entry[key] = _median([r["metrics"]["total"][key] for r in mine if "metrics" in r])
        entry["cross_rack_bytes"] = sum(
            r["metrics"]["total"]["cross_rack_bytes"] for r in mine if "metrics" in r
        )
        summary[name] = entry
    a, b = summary["cache"]["consume_mb_per_s"], summary["direct"]["consume_mb_per_s"]
    summary["cache_over_direct"] = round(a / b, 3) if a and b else None
    if fanout is not None:
        entry = {
            "consume_mb_per_s": fanout["consume"]["mb_per_s"],
            "completed": fanout["completed"],
            "load_avg_1m": round(fanout["load_avg_start"][0], 2),
        }
        if "metrics" in fanout:
            entry.update({k: fanout["metrics"]["total"][k] for k in (*keys, "cross_rack_bytes")})
            entry["consumer_bytes_out_per_broker"] = {
                b: m["consumer_bytes_out"] for b, m in fanout["metrics"]["per_broker"].items()
            }
        summary["fanout"] = entry
    summary["not_as_intended"] = checks
    return summary


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.rounds < 1 or args.partitions < 1 or args.mb <= 0 or args.record_size < 1:
        raise SystemExit("--rounds, --partitions, --record-size must be >= 1 and --mb > 0")
    if args.metrics and not args.bootstrap:
        raise SystemExit("--metrics goes with --bootstrap (a started cluster is scraped anyway)")
    # A SIGTERM stops the brokers too: it ends the run through the ``finally`` below.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    report: dict[str, Any] = {
        "benchmark": "bench/cache_replicas.py",
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {"cpus": os.cpu_count(), "hostname": socket.gethostname()},
        "config": {k: v for k, v in vars(args).items() if k != "output"},
        "clients": {
            "producer": {
                "acks": "all",
                "enable.idempotence": True,
                "max.in.flight.requests.per.connection": 5,
            }
        },
        "cluster": {"started_by_bench": not args.bootstrap},
    }
    cluster: Cluster | None = None
    scraper: Scraper | None = None
    runs: list[dict[str, Any]] = []
    try:
        if not args.bootstrap:
            cluster, scraper = start_cluster(args)
            report["cluster"]["data_dir"] = str(cluster.data_dir)
        elif args.metrics:
            scraper = Scraper({u.strip(): u.strip() for u in args.metrics.split(",") if u.strip()})
        run(args, cluster, scraper, report, runs)
    except (Exception, KeyboardInterrupt, SystemExit) as exc:
        log(f"stopped: {type(exc).__name__}: {exc}")
        report["error"] = f"{type(exc).__name__}: {exc}"
        if cluster is not None:
            report["cluster"]["up_log_tail"] = cluster.log_tail()
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):  # the bounded clean-up runs to its end
            signal.signal(sig, signal.SIG_IGN)
        made = report.get("topics")
        if args.bootstrap and made:
            names = [made["cache"]["name"], *(t["name"] for t in made["direct"])]
            try:
                report["topics_not_deleted"] = delete_topics(args.bootstrap, names)
            except Exception as exc:
                report["topics_not_deleted"] = f"{names}: {type(exc).__name__}: {exc}"
        if cluster is not None:
            log("stopping the cluster")
            try:
                cluster.stop()
            except Exception as exc:  # reported; the brokers die with their supervisor anyway
                report.setdefault("error", f"stopping the cluster: {type(exc).__name__}: {exc}")
    report["summary"] = summarise(runs, report.get("fanout"))
    report["summary"]["cache_fill"] = (report.get("fills") or {}).get("cache_fill_metrics")
    report["runs"] = runs
    report["finished_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    fanout_ok = bool(report.get("fanout", {}).get("completed"))
    report["ok"] = (
        "error" not in report
        and len(runs) == 2 * args.rounds
        and all(r["completed"] for r in runs)
        and fanout_ok
    )
    text = json.dumps(report, indent=2)
    print(text, flush=True)
    if args.output:
        Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        Path(args.output).write_text(text + "\n")
    return 0 if report["ok"] else 2


if __name__ == "__main__":
    sys.exit(main())
