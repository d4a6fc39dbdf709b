"""Hostile, unauthenticated input (``bench/hostile_load.py``) against a real broker.

The bench tool's attacks run in-process, one class at a time, against a broker from
``broker_factory``: batches Kafka refuses, decompression bombs, pipelining without reading,
slowloris connections and malformed frames. A broker that dies is restarted and the run goes
on from the next attack (or the next frame), so one run reports every finding at once.

Then: the broker is alive, every hostile batch was refused with CORRUPT_MESSAGE (2) or
INVALID_RECORD (87) and left the next offset alone, every bad frame closed the connection or
got its error, the broker's RSS stayed under a bound, and a real confluent-kafka producer and
consumer still round-trip records on a classic and a diskless topic.

Every expectation is checked and the failures are reported together at the end.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from confluent_kafka.admin import NewTopic

from tests.integration.conftest import BrokerFactory
from tests.support.broker import REPO_ROOT, BrokerProcess
from tests.support.kafka_clients import (
    admin_client,
    confluent_consume,
    confluent_produce,
    create_diskless_topic,
    wait_for_topic,
)
from tests.support.workload import check_records, make_workload

SCALE = 0.2  # connection/request counts and hold times; bombs keep their full size
FETCH_REQUESTS = 500  # x SCALE = 100 pipelined 8 MB Fetches, the full-size fetch load
RSS_LIMIT_MIB = 512
ATTACK_ORDER = ("batches", "bombs", "pipelining", "slowloris", "frames")
REFUSED = (2, 87)  # CORRUPT_MESSAGE, INVALID_RECORD


def load_hostile_load() -> ModuleType:
    """bench/ is not a package: load bench/hostile_load.py by path."""
    path = REPO_ROOT / "bench" / "hostile_load.py"
    spec = importlib.util.spec_from_file_location("hostile_load", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


def run_attack_class(
    hl: ModuleType, broker: BrokerProcess, base: dict[str, Any], attack: str, deaths: list[str]
) -> dict[str, Any]:
    """One attack class; a broker it kills is restarted, and `frames` goes on from the next case."""
    merged: dict[str, Any] | None = None
    remaining: list[str] | None = None
    for _ in range(40):  # bounded: each round runs at least one frame case
        cfg = hl.Config(pid=broker.proc.pid if broker.proc else None, attacks=[attack], frame_cases=remaining, **base)
        report = hl.run(cfg)
        entry = report["attacks"].get(attack, {"skipped": report.get("error", "no report"), "alive": False})
        if merged is None:
            merged = entry
        else:  # later frames rounds: add their cases
            merged["cases"] = merged.get("cases", []) + entry.get("cases", [])
            merged["problems"] = merged.get("problems", []) + entry.get("problems", [])
            merged["alive"] = merged["alive"] and entry.get("alive", False)
        if not broker.is_running() or not entry.get("alive", False):
            killer = entry.get("killed_broker_with") or attack
            deaths.append(f"{attack}: {killer} (exit code {broker.returncode})")
            broker.kill()  # reap it (or stop a hung one) and start again on the same data
            broker.start()
        remaining = entry.get("not_run") or None
        if attack != "frames" or not remaining:
            break
    assert merged is not None
    return merged


@pytest.mark.timeout(300)
def test_hostile_input(broker_factory: BrokerFactory, topic_name: str, tmp_path: Path) -> None:
    hl = load_hostile_load()
    broker = broker_factory("hostile")
    base = {
        "bootstrap": broker.bootstrap,
        "scale": SCALE,
        "fetch_requests": FETCH_REQUESTS,
        "topic_classic": f"{topic_name}-c",
        "topic_diskless": f"{topic_name}-d",
        "partitions": 2,
        "attack_timeout": 60.0,
        "max_seconds": 80.0,
        "settle_seconds": 0.5,
        "rss_limit_mib": RSS_LIMIT_MIB,
    }
    started = time.monotonic()
    deaths: list[str] = []
    results = {attack: run_attack_class(hl, broker, base, attack, deaths) for attack in ATTACK_ORDER}
    (tmp_path / "hostile_report.json").write_text(json.dumps(results, indent=2, default=str))
    summary = {
        a: {k: r.get(k) for k in ("alive", "rss_before_mib", "rss_peak_mib", "rss_after_mib", "probe")}
        for a, r in results.items()
    }
    print(f"hostile load took {time.monotonic() - started:.1f}s:\n{json.dumps(summary, indent=1)}")

    problems: list[str] = []

    def expect(ok: bool, message: str) -> None:
        if not ok:
            problems.append(message)

    # -- the broker stays alive --------------------------------------------------------------
    expect(not deaths, f"the broker died during: {deaths}")
    for attack, r in results.items():
        expect(not r.get("skipped"), f"{attack}: skipped ({r.get('skipped')})")
        expect(not r.get("timed_out"), f"{attack}: timed out")

    # -- batches: refused and not appended -----------------------------------------------------
    batches = results["batches"]
    for r in batches.get("control", []):
        expect(r.get("ok", False), f"batches: the valid control batch was not appended on {r['topic']}: {r}")
    cases = batches.get("cases", [])
    expect(len(cases) >= 60, f"batches: only {len(cases)} cases ran")
    not_refused = [f"{r['name']}@{r['topic']}={r.get('error_code', r.get('answer'))}" for r in cases if r.get("error_code") not in REFUSED]
    expect(not not_refused, f"batches not refused with 2/87: {not_refused}")
    moved = [f"{r['name']}@{r['topic']} {r.get('next_offset_before')}->{r.get('next_offset_after')}" for r in cases if r.get("offset_changed") is not False]
    expect(not moved, f"batches that changed (or hid) the partition's next offset: {moved}")

    # -- bombs: refused, memory bounded --------------------------------------------------------
    bombs = results["bombs"]
    bomb_cases = bombs.get("cases", [])
    expect(len(bomb_cases) == 8, f"bombs: {len(bomb_cases)} of 8 cases ran")
    bad_bombs = [f"{r['name']}@{r['topic']}={r.get('error_code', r.get('answer'))}" for r in bomb_cases if not r.get("ok")]
    expect(not bad_bombs, f"bombs not refused (2/87) or that moved the next offset: {bad_bombs}")
    lookups = bombs.get("list_offsets_by_timestamp", [])
    expect(bool(lookups) and all(e.get("ok") for e in lookups), f"ListOffsets by timestamp after the bombs failed: {lookups}")

    # -- frames: closed, or answered with their error ------------------------------------------
    frames = {r["name"]: r for r in results["frames"].get("cases", [])}
    all_frames = [c.name for c in hl.frame_cases(hl.Config())]
    expect(set(all_frames) <= set(frames), f"frames never run: {sorted(set(all_frames) - set(frames))}")

    def frame_failures(pred: Any) -> list[str]:
        return [
            f"{n}: {r.get('answer')} {r.get('error_names', '')}{' (killed the broker)' if r.get('killed_broker') else ''}"
            for n, r in frames.items()
            if pred(r) and not r.get("ok")
        ]

    expect(not frame_failures(lambda r: r["expect"] == "refused"), f"bad frames not refused: {frame_failures(lambda r: r['expect'] == 'refused')}")
    expect(not frame_failures(lambda r: r["expect"] == "answered"), f"unknown tagged fields not answered normally: {frame_failures(lambda r: r['expect'] == 'answered')}")
    expect(not frame_failures(lambda r: r["expect"] == "error_42"), f"ApiVersions v3 with an invalid client software name/version not answered 42: {frame_failures(lambda r: r['expect'] == 'error_42')}")

    # -- slowloris: oversized frame headers close the connection -------------------------------
    slow = results["slowloris"]
    oversized = slow.get("oversized_frames", [])
    expect(len(oversized) == 3 and all(e.get("closed") for e in oversized), f"oversized frame headers not closed: {oversized}")

    # -- memory ---------------------------------------------------------------------------------
    peaks = {a: r.get("rss_peak_mib") for a, r in results.items()}
    expect(all(p is not None for p in peaks.values()), f"RSS not sampled: {peaks}")
    over = {a: p for a, p in peaks.items() if p is not None and p > RSS_LIMIT_MIB}
    expect(not over, f"broker RSS peaked over {RSS_LIMIT_MIB} MiB: {over}")

    # -- a real client still works -------------------------------------------------------------
    if not broker.is_running():
        broker.start()
    for kind in ("classic", "diskless"):
        topic = f"{topic_name}-rt-{kind}"
        try:
            if kind == "diskless":
                create_diskless_topic(broker.bootstrap, topic, partitions=2)
            else:
                admin = admin_client(broker.bootstrap)
                admin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1)])[topic].result(30)
                wait_for_topic(admin, topic, 2)
            sent = make_workload(300, 2, f"hostile-rt-{kind}", seed=7, base_timestamp=int(time.time() * 1000) - 60_000)
            confluent_produce(broker.bootstrap, topic, sent, timeout=60)
            check_records(confluent_consume(broker.bootstrap, topic, range(2), len(sent), timeout=60), sent)
        except Exception as exc:  # noqa: BLE001 - reported with the rest
            problems.append(f"round trip on a {kind} topic after the attacks: {exc.__class__.__name__}: {exc}")

    assert not problems, f"{len(problems)} hostile-input expectations failed:\n- " + "\n- ".join(problems)
