"""Hostile load: attack a running Kafka-compatible broker as an unauthenticated client would.

While the attacks run, a well-behaved probe client does small round trips on its own
connection (Metadata, then Produce + Fetch of one record, every ``--probe-interval``), and a
thread samples the broker's RSS (``/proc/<pid>/status`` VmRSS, every 50 ms, with ``--pid``).
One JSON document goes to stdout; progress goes to stderr.

Attack classes (``--attacks``, default all, ``frames`` last because it may abort the broker):

- ``batches``: Produce v9 record batches Kafka refuses, each with a valid CRC, on a classic and
  a diskless topic; for each: the partition error code and the next offset before and after.
- ``bombs``: decompression bombs (gzip of ~1 GiB of zeros, a snappy block claiming 1 GiB, a zstd
  record claiming 2^31-1 headers), then ListOffsets by timestamp on every partition.
- ``pipelining``: many connections pipelining Metadata requests without reading, and one
  connection pipelining 8 MB Fetches without reading; RSS some seconds after the load.
- ``slowloris``: connections that stall mid frame header / mid frame, near-limit frames sent
  in part, and frames declaring more than ``socket.request.max.bytes``.
- ``frames``: requests whose arrays claim 2^32-2 entries, null non-nullable arrays, unknown
  tagged fields, ApiVersions v3 with an invalid client software name.

Every attack is bounded (``--attack-timeout``) and so is the whole run (``--max-seconds``).
A broker that dies is reported (``alive: false``); the attacks after it are skipped.
``run(Config(...))`` does the same in-process (the integration test uses it).

The code is split by concern, in sibling modules imported by plain name: ``hostile_wire`` (wire
encoding, the raw client, requests), ``hostile_payloads`` (hostile batches, bombs, frame cases),
``hostile_watch`` (RSS sampler, probe client) and ``hostile_attacks`` (``Ctx`` and the attacks);
this module holds ``Config``, the run and the CLI.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

try:
    import shoal  # noqa: F401  (installed editable in the project venv)
except ImportError:  # run from a checkout without the package installed
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
if str(Path(__file__).resolve().parent) not in sys.path:  # bench/ is not a package: find the siblings
    sys.path.append(str(Path(__file__).resolve().parent))

from hostile_attacks import ATTACKS, AttackTimeout, Ctx, broker_alive, fill_partition
from hostile_payloads import frame_cases
from hostile_watch import Probe, RssSampler, mib, process_alive, rss_kib
from hostile_wire import GIB, MIB, Wire, error_name, log, metadata_request
from kio.static.primitive import i16, i32

from shoal.protocol.apis import request_class
from shoal.protocol.build import nested

ALL_ATTACKS = ("batches", "bombs", "pipelining", "slowloris", "frames")


# ---------------------------------------------------------------------------------------------
# Configuration
# ---------------------------------------------------------------------------------------------


@dataclass
class Config:
    bootstrap: str = "127.0.0.1:9092"
    pid: int | None = None
    attacks: list[str] = field(default_factory=lambda: list(ALL_ATTACKS))
    scale: float = 1.0
    topic_classic: str = "hostile-classic"
    topic_diskless: str = "hostile-diskless"
    partitions: int = 2
    connections: int = 100
    requests: int = 100
    fetch_requests: int = 100
    slow_connections: int = 500
    fetch_fill_bytes: int = 8 * MIB
    bomb_bytes: int = GIB
    request_max_bytes: int = 104857600
    rss_limit_mib: float | None = None  # flag an attack whose broker RSS peak goes over this
    rss_return_slack_mib: float = 64.0  # pipelining: RSS after the wait must be within this of before
    attack_timeout: float = 180.0
    max_seconds: float = 900.0
    probe_interval: float = 0.05
    settle_seconds: float = 1.0
    frame_cases: list[str] | None = None  # only these `frames` cases (None: all)

    @property
    def host(self) -> str:
        return self.bootstrap.rsplit(":", 1)[0]

    @property
    def port(self) -> int:
        return int(self.bootstrap.rsplit(":", 1)[1])

    def scaled(self, n: float, minimum: int = 1) -> int:
        return max(minimum, int(round(n * self.scale)))

    def seconds(self, s: float, minimum: float) -> float:
        return max(minimum, s * self.scale)

    @property
    def topic_fill(self) -> str:
        return f"{self.topic_classic}-fill"

    @property
    def topic_probe(self) -> str:
        return f"{self.topic_classic}-probe"


# ---------------------------------------------------------------------------------------------
# Setup and the run
# ---------------------------------------------------------------------------------------------


def ensure_topics(cfg: Config) -> dict[str, Any]:
    """CreateTopics (v5) for the topics the attacks need; existing ones are kept as they are."""
    wanted = [
        (cfg.topic_classic, cfg.partitions, {}),
        (cfg.topic_diskless, cfg.partitions, {"diskless.enable": "true"}),
        (cfg.topic_probe, 1, {}),
        (cfg.topic_fill, 1, {}),
    ]
    cls = request_class(19, 5)
    topic_cls, config_cls = nested(cls, "CreatableTopic"), nested(cls, "CreatableTopicConfig")
    request = cls(
        topics=tuple(
            topic_cls(
                name=name,
                num_partitions=i32(parts),
                replication_factor=i16(1),
                assignments=(),
                configs=tuple(config_cls(name=k, value=v) for k, v in conf.items()),
            )
            for name, parts, conf in wanted
        ),
        timeout=dt.timedelta(seconds=30),
        validate_only=False,
    )
    w = Wire(cfg.host, cfg.port, 40)
    try:
        response = w.request(request)
        out = {}
        for t in response.topics:
            code = int(t.error_code)
            if code not in (0, 36):  # TOPIC_ALREADY_EXISTS
                raise RuntimeError(f"CreateTopics {t.name}: {error_name(code)} {t.error_message}")
            out[t.name] = "created" if code == 0 else "existed"
        deadline = time.monotonic() + 30
        while True:
            md = w.request(metadata_request([name for name, _, _ in wanted]))
            ready = all(
                int(t.error_code) == 0 and t.partitions and all(int(p.leader_id) >= 0 for p in t.partitions)
                for t in md.topics
            )
            if ready or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        if not ready:
            raise RuntimeError("topics not led in metadata after 30 s")
        return out
    finally:
        w.close()


def run(cfg: Config) -> dict[str, Any]:
    """Run the configured attacks and return the report (also what ``main`` prints)."""
    started_at = dt.datetime.now(dt.UTC)
    t_start = time.monotonic()
    deadline = t_start + cfg.max_seconds
    unknown = [a for a in cfg.attacks if a not in ATTACKS]
    if unknown:
        raise ValueError(f"unknown attacks {unknown}; known: {', '.join(ALL_ATTACKS)}")
    report: dict[str, Any] = {
        "tool": "bench/hostile_load.py",
        "started_at": started_at.isoformat(timespec="seconds"),
        "broker": {"bootstrap": cfg.bootstrap, "pid": cfg.pid},
        "config": {k: v for k, v in cfg.__dict__.items()},
        "attacks": {},
    }
    with contextlib.suppress(ValueError, OSError):
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    rss = RssSampler(cfg.pid) if cfg.pid else None
    if rss:
        rss.start()
    probe: Probe | None = None
    alive = broker_alive(cfg)
    report["alive_at_start"] = alive
    try:
        if alive:
            report["topics"] = ensure_topics(cfg)
            if "pipelining" in cfg.attacks:
                report["fetch_fill"] = fill_partition(cfg, cfg.topic_fill, cfg.fetch_fill_bytes)
            probe = Probe(cfg.host, cfg.port, cfg.topic_probe, cfg.probe_interval)
            probe.start()
            b0 = time.monotonic()
            time.sleep(min(2.0, cfg.seconds(2.0, 0.5)))
            report["baseline"] = {"rss_mib": mib(rss_kib(cfg.pid)) if cfg.pid else None, "probe": probe.window(b0, time.monotonic())}
        for name in cfg.attacks:
            report["attacks"][name] = run_attack(cfg, name, deadline, rss, probe)
            alive = report["attacks"][name]["alive"]
    except Exception as exc:  # noqa: BLE001 - report what we have
        report["error"] = f"{exc.__class__.__name__}: {exc}"
    finally:
        if probe:
            probe.stop()
        if rss:
            rss.stop()
    report["alive_at_end"] = broker_alive(cfg)
    report["finished_at"] = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    report["elapsed_s"] = round(time.monotonic() - t_start, 2)
    problems = [f"{name}: {p}" for name, a in report["attacks"].items() for p in a.get("problems", [])]
    if "error" in report:
        problems.insert(0, f"run: {report['error']}")
    if not report["alive_at_end"]:
        problems.append("broker not alive at the end")
    report["problems"] = problems
    report["ok"] = not problems and len(report["attacks"]) == len(cfg.attacks)
    return report


def run_attack(cfg: Config, name: str, deadline: float, rss: RssSampler | None, probe: Probe | None) -> dict[str, Any]:
    entry: dict[str, Any] = {}
    if time.monotonic() > deadline - 5:
        return {"skipped": "--max-seconds reached", "alive": broker_alive(cfg), "problems": ["skipped: --max-seconds"]}
    if not broker_alive(cfg):
        return {"skipped": "broker not alive", "alive": False, "problems": ["skipped: broker not alive"]}
    log(f"attack {name}")
    attack_deadline = min(deadline, time.monotonic() + cfg.attack_timeout)
    ctx = Ctx(cfg, attack_deadline, rss)
    entry["rss_before_mib"] = ctx.rss_now()
    result: dict[str, Any] = {}
    failure: list[str] = []

    def body() -> None:
        try:
            result.update(ATTACKS[name](ctx))
        except AttackTimeout:
            failure.append("timed out")
        except Exception as exc:  # noqa: BLE001
            failure.append(f"{exc.__class__.__name__}: {exc}")

    t0 = time.monotonic()
    worker = threading.Thread(target=body, name=f"attack-{name}", daemon=True)
    worker.start()
    worker.join(max(1.0, attack_deadline - time.monotonic()) + 5)
    if worker.is_alive():
        ctx.cancelled = True
        ctx.close_all()  # unblocks its sockets
        worker.join(10)
        failure.append("timed out")
    ctx.close_all()
    t1 = time.monotonic()
    time.sleep(cfg.settle_seconds)
    entry["elapsed_s"] = round(t1 - t0, 2)
    entry["timed_out"] = "timed out" in failure
    if failure:
        entry["error"] = failure[0]
    entry["rss_peak_mib"] = ctx.rss_peak(t0, time.monotonic())  # the broker may still be busy after we stop
    entry["rss_after_mib"] = ctx.rss_now()
    entry["process_alive"] = process_alive(cfg.pid) if cfg.pid else None
    entry["alive"] = broker_alive(cfg)
    if probe:
        entry["probe"] = probe.window(t0, t1)
    entry.update(result)
    problems = []
    for key, label in (("failed", "cases failed"), ("not_run", "cases not run")):
        names = result.get(key) or []
        if names:
            problems.append(f"{len(names)} {label}: {', '.join(names[:6])}{', ...' if len(names) > 6 else ''}")
    if failure:
        problems.append(failure[0])
    if not entry["alive"]:
        problems.append("broker not alive after the attack")
    peak = entry["rss_peak_mib"]
    if cfg.rss_limit_mib is not None and peak is not None and peak > cfg.rss_limit_mib:
        problems.append(f"broker RSS peaked at {peak} MiB, over {cfg.rss_limit_mib} MiB")
    entry["problems"] = problems
    log(f"attack {name} done in {entry['elapsed_s']}s: alive={entry['alive']} rss peak {entry['rss_peak_mib']} MiB, {len(problems)} problems")
    return entry


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    d = Config()
    p.add_argument("--bootstrap", default=d.bootstrap, help="the broker, HOST:PORT (its own address is used, not the advertised one)")
    p.add_argument("--pid", type=int, help="broker process id: RSS from /proc/<pid>/status, and liveness")
    p.add_argument("--attacks", default=",".join(ALL_ATTACKS), help=f"comma-separated, in order (default {','.join(ALL_ATTACKS)})")
    p.add_argument("--scale", type=float, default=d.scale, help="multiplier of connection and request counts and of hold times (bombs and the 8 MB partition keep their size)")
    p.add_argument("--topic-classic", default=d.topic_classic)
    p.add_argument("--topic-diskless", default=d.topic_diskless)
    p.add_argument("--partitions", type=int, default=d.partitions, help="partitions of created topics")
    p.add_argument("--connections", type=int, default=d.connections, help="pipelining: connections")
    p.add_argument("--requests", type=int, default=d.requests, help="pipelining: Metadata requests per connection")
    p.add_argument("--fetch-requests", type=int, default=d.fetch_requests, help="pipelining: 8 MB Fetches on one connection")
    p.add_argument("--slow-connections", type=int, default=d.slow_connections, help="slowloris: stalled connections")
    p.add_argument("--fetch-fill-bytes", type=int, default=d.fetch_fill_bytes, help="pipelining: bytes the fetched partition holds")
    p.add_argument("--bomb-bytes", type=int, default=d.bomb_bytes, help="bombs: zeros in the gzip bomb")
    p.add_argument("--request-max-bytes", type=int, default=d.request_max_bytes, help="the broker's socket.request.max.bytes")
    p.add_argument("--rss-limit-mib", type=float, help="report an attack whose broker RSS peak exceeds this")
    p.add_argument("--rss-return-slack-mib", type=float, default=d.rss_return_slack_mib, help="pipelining: RSS after the wait may exceed the RSS before by this much")
    p.add_argument("--attack-timeout", type=float, default=d.attack_timeout, help="seconds per attack")
    p.add_argument("--max-seconds", type=float, default=d.max_seconds, help="seconds for the whole run")
    p.add_argument("--probe-interval", type=float, default=d.probe_interval)
    p.add_argument("--frame-cases", help="frames: only these cases (comma-separated names)")
    p.add_argument("--list-frame-cases", action="store_true", help="print the frames cases and exit")
    p.add_argument("--output", help="also write the JSON here")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    cfg = Config(
        bootstrap=args.bootstrap,
        pid=args.pid,
        attacks=[a.strip() for a in args.attacks.split(",") if a.strip()],
        scale=args.scale,
        topic_classic=args.topic_classic,
        topic_diskless=args.topic_diskless,
        partitions=args.partitions,
        connections=args.connections,
        requests=args.requests,
        fetch_requests=args.fetch_requests,
        slow_connections=args.slow_connections,
        fetch_fill_bytes=args.fetch_fill_bytes,
        bomb_bytes=args.bomb_bytes,
        request_max_bytes=args.request_max_bytes,
        rss_limit_mib=args.rss_limit_mib,
        rss_return_slack_mib=args.rss_return_slack_mib,
        attack_timeout=args.attack_timeout,
        max_seconds=args.max_seconds,
        probe_interval=args.probe_interval,
        frame_cases=[c.strip() for c in args.frame_cases.split(",")] if args.frame_cases else None,
    )
    if args.list_frame_cases:
        for case in frame_cases(cfg):
            print(f"{case.name}\t{case.expect}")
        return 0
    report = run(cfg)
    text = json.dumps(report, indent=2, default=str)
    print(text)
    if args.output:
        Path(args.output).write_text(text + "\n")
    return 0 if report["ok"] else 2


if __name__ == "__main__":
    sys.exit(main())
