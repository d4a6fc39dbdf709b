"""A classic follower's catch-up, measured (``replication.py --catchup-runs``): SIGSTOP one broker,
fill the partitions it follows, SIGCONT it and time until every ISR holds it again; and the topic
helpers other bench scripts share (``fill``, ``wait_for``, ``watermarks``).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import os
import threading
import time
import uuid
from typing import Any

from bench_common import MB, client_logger
from local_cluster import Cluster, admin_client, log


def round_or_none(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)

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


def wait_for(
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


def watermarks(bootstrap: str, topic: str, partitions: list[int], timeout: float) -> dict[int, int | None]:
    """High watermark of each partition (asked of its leader, retried for ``timeout`` s), else None.

    Right after a topic is created some brokers may not know it yet and answer an error at once.
    """
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-replication-{uuid.uuid4().hex[:6]}",
            "enable.auto.commit": False,
            "logger": client_logger("replication", 30)[0],
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
            "logger": client_logger("replication", 30)[0],
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
        "elapsed_s": round_or_none(elapsed),
        "mb_per_s": round_or_none(state["delivered"] * args.record_size / MB / elapsed, 2) if elapsed else None,
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
    admin = admin_client(cluster.bootstrap)
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

    ok, waited, parts = wait_for(admin, topic, args.isr_timeout, args.poll_interval, full)
    out["full_isr_after_create_s"] = round_or_none(waited)
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
    before = watermarks(others, topic, all_parts, 10)
    disk_before = cluster.segment_bytes(node, topic)
    log(
        f"catch-up {index}: SIGSTOP broker {node} (pid {cluster.broker_pids[node]}), "
        f"fill {args.catchup_mb} MB into partitions {followed}"
    )
    stopped_at = time.monotonic()
    cluster.pause(node)
    try:
        # Watch the ISR while the fill runs: when did every followed partition drop the stopped broker?
        watch_admin = admin_client(others)
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
        out["isr_dropped_after_stop_s"] = round_or_none(dropped["at"] - stopped_at) if dropped["at"] else None
        after = watermarks(others, topic, all_parts, 10)
        parts_stopped = _partitions(watch_admin, topic, 10)
        out["layout_while_stopped"] = _layout(parts_stopped)
        out["stopped_s"] = round_or_none(time.monotonic() - stopped_at)
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
    out["partition_back_in_isr_s"] = {str(p): round_or_none(rejoined.get(p)) for p in all_parts}
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
    out["catchup_s"] = round_or_none(seconds)
    out["catchup_s_at_least"] = round_or_none(lacking_since)
    out["catchup_mb_per_s"] = round_or_none(out["bytes_to_copy"] / MB / seconds, 2) if seconds > 0 else None
    out["catchup_mb_per_s_at_most"] = (
        round_or_none(out["bytes_to_copy"] / MB / lacking_since, 2) if lacking_since > 0 else None
    )
    out["follower_segment_bytes_written"] = cluster.segment_bytes(node, topic) - disk_before
    out["measured"] = not out["fill"]["timed_out"]
    log(
        f"catch-up {index}: {out['bytes_to_copy'] / MB:.1f} MB in {seconds:.2f}s = {out['catchup_mb_per_s']} MB/s"
    )
