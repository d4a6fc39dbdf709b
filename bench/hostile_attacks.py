"""Hostile load, the attacks: one function per attack class, each given a ``Ctx``.

An attack returns a JSON-able dict; names it lists under ``failed`` or ``not_run`` become
problems in the report (``hostile_load.run_attack``). ``ATTACKS`` maps ``--attacks`` names to them.
"""

from __future__ import annotations

import os
import struct
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

try:
    import shoal  # noqa: F401  (installed editable in the project venv)
except ImportError:  # run from a checkout without the package installed
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from hostile_payloads import INT32_MAX, bomb_batches, frame_cases, hostile_batches, judge_frame
from hostile_watch import RssSampler, mib, process_alive, rss_kib
from hostile_wire import (
    CLIENT_ID,
    MIB,
    Closed,
    Wire,
    answer_of,
    api_versions_request,
    error_name,
    fetch_request,
    list_offsets,
    log,
    metadata_request,
    ms_since,
    peer_closed,
    pending_bytes,
    produce,
)

from shoal.protocol.apis import encode_request
from shoal.records.codec import build_batch

if TYPE_CHECKING:
    from hostile_load import Config

REFUSED_BATCH_CODES = (2, 87)  # CORRUPT_MESSAGE, INVALID_RECORD


# ---------------------------------------------------------------------------------------------
# The per-attack context
# ---------------------------------------------------------------------------------------------


class AttackTimeout(Exception):
    pass


class Ctx:
    """What an attack gets: the config, a deadline, and connections that are closed when it ends."""

    def __init__(self, cfg: Config, deadline: float, rss: RssSampler | None) -> None:
        self.cfg = cfg
        self.deadline = deadline
        self.rss = rss
        self._wires: list[Wire] = []
        self._lock = threading.Lock()
        self.cancelled = False

    def wire(self, timeout: float = 15.0) -> Wire:
        self.check()
        w = Wire(self.cfg.host, self.cfg.port, timeout)
        with self._lock:
            self._wires.append(w)
        return w

    def close_all(self) -> None:
        with self._lock:
            wires, self._wires = self._wires, []
        for w in wires:
            w.close()

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def check(self) -> None:
        if self.cancelled or time.monotonic() > self.deadline:
            raise AttackTimeout("attack deadline passed")

    def sleep(self, seconds: float) -> None:
        end = min(time.monotonic() + seconds, self.deadline)
        while not self.cancelled and time.monotonic() < end:
            time.sleep(min(0.1, max(0.0, end - time.monotonic())))

    def alive(self) -> bool:
        return broker_alive(self.cfg)

    def rss_now(self) -> float | None:
        return mib(rss_kib(self.cfg.pid)) if self.cfg.pid else None

    def rss_peak(self, start: float, end: float) -> float | None:
        return mib(self.rss.peak(start, end)) if self.rss else None


def broker_alive(cfg: Config, timeout: float = 5.0) -> bool:
    """The process exists (with a pid) and an ApiVersions round trip works."""
    if cfg.pid is not None and not process_alive(cfg.pid):
        return False
    try:
        w = Wire(cfg.host, cfg.port, timeout)
    except OSError:
        return False
    try:
        w.request(api_versions_request())
        return True
    except Exception:  # noqa: BLE001
        return False
    finally:
        w.close()


# ---------------------------------------------------------------------------------------------
# Attack 1: frames
# ---------------------------------------------------------------------------------------------


def attack_frames(ctx: Ctx) -> dict[str, Any]:
    cfg = ctx.cfg
    cases = frame_cases(cfg)
    if cfg.frame_cases is not None:
        cases = [c for c in cases if c.name in cfg.frame_cases]
    results: list[dict[str, Any]] = []
    not_run: list[str] = []
    for i, case in enumerate(cases):
        if ctx.cancelled or ctx.left() < 3:
            not_run += [c.name for c in cases[i:]]
            break
        started = time.monotonic()
        res: dict[str, Any] = {"name": case.name, "expect": case.expect, "frame_bytes": len(case.payload)}
        try:
            w = ctx.wire(timeout=10)
            (cid,) = struct.unpack_from(">i", case.payload, 8)
            w.send(case.payload)
            res.update(w.outcome(case.api_key, case.version, cid, timeout=min(5.0, ctx.left())))
            w.close()
        except (OSError, Closed) as exc:
            res.update({"answer": "connect_failed" if "connect" in str(exc).lower() else "closed", "detail": str(exc)[:200]})
        res["rss_peak_mib"] = ctx.rss_peak(started, time.monotonic())
        alive = ctx.alive()
        res["alive_after"] = alive
        res["ok"] = judge_frame(case.expect, res) and alive
        results.append(res)
        log(f"frames: {case.name}: {res['answer']} {res.get('error_names', '')} alive={alive}")
        if not alive:
            res["killed_broker"] = True
            not_run += [c.name for c in cases[i + 1 :]]
            break
    return {
        "cases": results,
        "not_run": not_run,
        "failed": [r["name"] for r in results if not r["ok"]],
        "killed_broker_with": next((r["name"] for r in results if r.get("killed_broker")), None),
    }


# ---------------------------------------------------------------------------------------------
# Attack 2: batches
# ---------------------------------------------------------------------------------------------


def send_batches(ctx: Ctx, named: list[tuple[str, bytes]], *, partition: int = 0, timeout: float = 30.0) -> list[dict[str, Any]]:
    """Produce each batch to partition 0 of both topics; error code and next offset before/after."""
    cfg = ctx.cfg
    results: list[dict[str, Any]] = []
    w: Wire | None = None
    for name, batch in named:
        for kind, topic in (("classic", cfg.topic_classic), ("diskless", cfg.topic_diskless)):
            ctx.check()
            res: dict[str, Any] = {"name": name, "topic": kind, "batch_bytes": len(batch)}
            started = time.monotonic()
            try:
                if w is None:
                    w = ctx.wire(timeout=timeout)
                before = list_offsets(w, topic, [partition])[partition]
                res["next_offset_before"] = before["offset"]
                res.update(produce(w, topic, partition, batch))
            except AttackTimeout:
                raise
            except Exception as exc:  # noqa: BLE001 - closed, timed out, or an undecodable reply
                res["answer"] = answer_of(exc)
                res["detail"] = f"{exc.__class__.__name__}: {exc}"[:200]
                if w is not None:
                    w.close()
                    w = None
            res["elapsed_ms"] = ms_since(started)
            res["rss_peak_mib"] = ctx.rss_peak(started, time.monotonic())
            try:
                if w is None:
                    w = ctx.wire(timeout=timeout)
                res["next_offset_after"] = list_offsets(w, topic, [partition])[partition]["offset"]
            except AttackTimeout:
                raise
            except Exception as exc:  # noqa: BLE001
                res["next_offset_after"] = None
                res["detail_after"] = f"{exc.__class__.__name__}: {exc}"[:200]
                if w is not None:
                    w.close()
                    w = None
            before_off, after_off = res.get("next_offset_before"), res.get("next_offset_after")
            res["offset_changed"] = None if before_off is None or after_off is None else after_off != before_off
            res["ok"] = res.get("error_code") in REFUSED_BATCH_CODES and res["offset_changed"] is False
            results.append(res)
            log(f"{name} on {kind}: {res.get('error_name', res.get('answer'))}, offset {before_off} -> {after_off}")
    if w is not None:
        w.close()
    return results


def attack_batches(ctx: Ctx) -> dict[str, Any]:
    control = send_batches(ctx, [("control_valid_batch", build_batch([(b"k", b"control")]))])
    for r in control:
        # The one batch that must go in: proves the harness produces what the broker takes.
        r["ok"] = r.get("error_code") == 0 and r["offset_changed"] is True
    cases = send_batches(ctx, hostile_batches())
    return {
        "control": control,
        "cases": cases,
        "refused": sum(r.get("error_code") in REFUSED_BATCH_CODES for r in cases),
        "accepted": [f"{r['name']}@{r['topic']}" for r in cases if r.get("error_code") == 0],
        "offset_changed": [f"{r['name']}@{r['topic']}" for r in cases if r["offset_changed"]],
        "failed": [f"{r['name']}@{r['topic']}" for r in control + cases if not r["ok"]],
    }


# ---------------------------------------------------------------------------------------------
# Attack 3: bombs
# ---------------------------------------------------------------------------------------------


def attack_bombs(ctx: Ctx) -> dict[str, Any]:
    cfg = ctx.cfg
    started = time.monotonic()
    named = bomb_batches(cfg.bomb_bytes)
    build_s = round(time.monotonic() - started, 2)
    log(f"bombs built in {build_s}s: " + ", ".join(f"{n} {len(b)}B" for n, b in named))
    cases = send_batches(ctx, named, timeout=min(120.0, max(5.0, ctx.left())))
    lookups = []
    w: Wire | None = None
    now_ms = int(time.time() * 1000)
    for topic in (cfg.topic_classic, cfg.topic_diskless):
        for ts in (0, now_ms - 3_600_000):
            ctx.check()
            t0 = time.monotonic()
            entry: dict[str, Any] = {"topic": topic, "timestamp": ts}
            try:
                if w is None:
                    w = ctx.wire(timeout=min(60.0, max(5.0, ctx.left())))
                found = list_offsets(w, topic, range(cfg.partitions), ts)
                entry["partitions"] = {str(p): {**v, "error_name": error_name(v["error_code"])} for p, v in found.items()}
                entry["ok"] = all(v["error_code"] == 0 for v in found.values())
            except AttackTimeout:
                raise
            except Exception as exc:  # noqa: BLE001
                entry["answer"] = answer_of(exc)
                entry["detail"] = f"{exc.__class__.__name__}: {exc}"[:200]
                entry["ok"] = False
                if w is not None:
                    w.close()
                    w = None
            entry["elapsed_ms"] = ms_since(t0)
            lookups.append(entry)
    if w is not None:
        w.close()
    return {
        "build_s": build_s,
        "cases": cases,
        "list_offsets_by_timestamp": lookups,
        "failed": [f"{r['name']}@{r['topic']}" for r in cases if not r["ok"]]
        + [f"list_offsets_by_timestamp@{e['topic']}/{e['timestamp']}" for e in lookups if not e["ok"]],
    }


# ---------------------------------------------------------------------------------------------
# Attack 4: pipelining without reading
# ---------------------------------------------------------------------------------------------


def fill_partition(cfg: Config, topic: str, nbytes: int, value_size: int = 16 * 1024) -> dict[str, Any]:
    """Make partition 0 of ``topic`` hold at least ``nbytes`` of record values (confluent-kafka)."""
    w = Wire(cfg.host, cfg.port, 30)
    try:
        have = list_offsets(w, topic, [0])[0]["offset"] * value_size
    finally:
        w.close()
    if have >= nbytes:
        return {"records": 0, "already_had_bytes": have}
    n = -(-(nbytes - have) // value_size)
    started = time.monotonic()
    try:
        from confluent_kafka import Producer
    except ImportError:  # no confluent-kafka: raw Produce of 32-record batches
        w = Wire(cfg.host, cfg.port, 60)
        try:
            for start in range(0, n, 32):
                batch = build_batch([(None, os.urandom(value_size)) for _ in range(min(32, n - start))])
                result = produce(w, topic, 0, batch, acks=1)
                if result["error_code"]:
                    raise RuntimeError(f"fill produce failed: {result}")
        finally:
            w.close()
        return {"records": n, "value_bytes": value_size, "client": "raw", "s": round(time.monotonic() - started, 2)}
    errors: list[str] = []
    producer = Producer({"bootstrap.servers": cfg.bootstrap, "acks": "1", "linger.ms": 10, "batch.size": 512 * 1024})
    for _ in range(n):
        producer.produce(topic, value=os.urandom(value_size), partition=0, on_delivery=lambda e, _m: e and errors.append(str(e)))
        producer.poll(0)
    left = producer.flush(60)
    if left or errors:
        raise RuntimeError(f"fill: {left} undelivered, errors {errors[:3]}")
    return {"records": n, "value_bytes": value_size, "client": "confluent-kafka", "s": round(time.monotonic() - started, 2)}


def attack_pipelining(ctx: Ctx) -> dict[str, Any]:
    cfg = ctx.cfg
    n_conn, n_req, n_fetch = cfg.scaled(cfg.connections), cfg.scaled(cfg.requests), cfg.scaled(cfg.fetch_requests)
    hold, wait_after = cfg.seconds(5.0, 1.0), cfg.seconds(10.0, 2.0)
    rss_before = ctx.rss_now()
    out: dict[str, Any] = {"connections": n_conn, "requests_each": n_req, "hold_s": hold}

    # Many connections, each pipelining Metadata (all topics) without reading a byte.
    t0 = time.monotonic()
    wires: list[Wire] = []
    sent_all = blocked = failed = 0
    for _ in range(n_conn):
        ctx.check()
        try:
            w = ctx.wire(timeout=2.0)
        except OSError:
            failed += 1
            continue
        wires.append(w)
        payload = b"".join(encode_request(w.next_id(), CLIENT_ID, metadata_request(None)) for _ in range(n_req))
        try:
            w.sock.sendall(payload)
            sent_all += 1
        except TimeoutError:
            blocked += 1
        except OSError:
            failed += 1
    ctx.sleep(hold)
    unread = [pending_bytes(w.sock) for w in wires]
    closed = sum(peer_closed(w.sock) for w in wires)
    for w in wires:
        w.close()
    t1 = time.monotonic()
    out["metadata"] = {
        "connections_sent_all": sent_all,
        "connections_send_blocked": blocked,
        "connections_failed": failed,
        "closed_by_broker": closed,
        "unread_response_bytes": sum(u or 0 for u in unread),
        "rss_peak_mib": ctx.rss_peak(t0, t1),
    }

    # One connection pipelining big Fetches without reading.
    t2 = time.monotonic()
    w = ctx.wire(timeout=2.0)
    max_bytes = 8 * MIB
    sent = 0
    for _ in range(n_fetch):
        ctx.check()
        try:
            w.sock.sendall(encode_request(w.next_id(), CLIENT_ID, fetch_request(cfg.topic_fill, 0, 0, max_bytes)))
            sent += 1
        except OSError:
            break
    ctx.sleep(hold)
    fetch_unread = pending_bytes(w.sock)
    fetch_closed = peer_closed(w.sock)
    w.close()
    t3 = time.monotonic()
    out["fetch"] = {
        "requests": n_fetch,
        "sent": sent,
        "max_bytes": max_bytes,
        "unread_response_bytes": fetch_unread,
        "closed_by_broker": fetch_closed,
        "rss_peak_mib": ctx.rss_peak(t2, t3),
    }
    ctx.sleep(wait_after)
    after = ctx.rss_now()
    out["rss_after_wait_mib"] = after
    out["wait_after_s"] = wait_after
    out["rss_back_near_baseline"] = None if after is None or rss_before is None else after <= rss_before + cfg.rss_return_slack_mib
    out["failed"] = ["rss_not_back_near_baseline"] if out["rss_back_near_baseline"] is False else []
    return out


# ---------------------------------------------------------------------------------------------
# Attack 5: slowloris
# ---------------------------------------------------------------------------------------------


def attack_slowloris(ctx: Ctx) -> dict[str, Any]:
    cfg = ctx.cfg
    n_slow = cfg.scaled(cfg.slow_connections)
    n_body = cfg.scaled(cfg.slow_connections / 4)
    n_big = cfg.scaled(4)
    big_body = max(MIB, int(16 * MIB * cfg.scale))
    hold = cfg.seconds(10.0, 1.5)
    out: dict[str, Any] = {"hold_s": hold}

    def open_and_send(n: int, data: bytes) -> tuple[list[Wire], int]:
        wires, failures = [], 0
        for _ in range(n):
            ctx.check()
            try:
                w = ctx.wire(timeout=5.0)
                w.send(data)
                wires.append(w)
            except (OSError, Closed):
                failures += 1
        return wires, failures

    t0 = time.monotonic()
    header_wires, header_fail = open_and_send(n_slow, b"\x00\x00")  # half a size prefix
    body_wires, body_fail = open_and_send(n_body, struct.pack(">i", 100) + b"\x00" * 10)  # a tenth of a frame
    big_wires: list[Wire] = []
    big_sent = 0
    for _ in range(n_big):  # frames declaring the limit itself, half sent
        ctx.check()
        try:
            w = ctx.wire(timeout=5.0)
            big_wires.append(w)
            w.send(struct.pack(">i", cfg.request_max_bytes))
            chunk = bytes(256 * 1024)
            for _ in range(big_body // len(chunk)):
                w.send(chunk)
                big_sent += len(chunk)
        except (OSError, Closed):
            pass
    log(f"slowloris: {len(header_wires)} + {len(body_wires)} + {len(big_wires)} connections stalled ({big_sent} bytes of near-limit frames)")
    ctx.sleep(hold)
    out["partial_header"] = {
        "connections": n_slow,
        "connect_or_send_failed": header_fail,
        "closed_by_broker": sum(peer_closed(w.sock) for w in header_wires),
    }
    out["partial_frame"] = {
        "connections": n_body,
        "connect_or_send_failed": body_fail,
        "closed_by_broker": sum(peer_closed(w.sock) for w in body_wires),
    }
    out["near_limit_partial"] = {
        "connections": n_big,
        "declared_bytes": cfg.request_max_bytes,
        "body_bytes_sent": big_sent,
        "closed_by_broker": sum(peer_closed(w.sock) for w in big_wires),
    }
    for w in header_wires + body_wires + big_wires:
        w.close()
    t1 = time.monotonic()
    out["rss_peak_mib"] = ctx.rss_peak(t0, t1)

    oversized = []
    for size in (INT32_MAX, cfg.request_max_bytes + 1, -1):
        ctx.check()
        entry: dict[str, Any] = {"declared_size": size}
        try:
            w = ctx.wire(timeout=5.0)
            w.send(struct.pack(">i", size) + b"\x00" * 64)
            entry["closed"] = w.closed_by_peer(min(5.0, max(0.5, ctx.left())))
            w.close()
        except (OSError, Closed) as exc:
            entry["closed"] = True
            entry["detail"] = str(exc)[:200]
        entry["ok"] = entry["closed"]
        oversized.append(entry)
        log(f"slowloris: frame declaring {size} bytes: closed={entry['closed']}")
    out["oversized_frames"] = oversized
    out["failed"] = [f"oversized_frame_{e['declared_size']}" for e in oversized if not e["ok"]]
    return out


ATTACKS: dict[str, Callable[[Ctx], dict[str, Any]]] = {
    "batches": attack_batches,
    "bombs": attack_bombs,
    "pipelining": attack_pipelining,
    "slowloris": attack_slowloris,
    "frames": attack_frames,
}
