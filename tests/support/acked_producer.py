"""An idempotent producer in its own process that records every acknowledged id, and the checks of
the topic against those ids: for tests that break the broker under load (SIGKILL, failing storage,
a dying disk, a cluster losing a node) and then ask whether anything acknowledged was lost or doubled.

``AckedProducer`` runs this module as a process (its own GIL and librdkafka), so the broker can be
killed under it. It produces numbered records (key and ``seq`` header = the id, ids round-robin over
the given partitions) as fast as the broker takes them, or paced (``rate`` records/s, at most
``window`` unacknowledged), and appends each acknowledged id to a file, fsynced: the file is exactly
what the broker promised to keep, even across crashes of either side. A stop file (or
``max_seconds``, ``max_records``) ends it; it then flushes and prints a JSON summary.

``check_acked_ids`` then compares records read back with the acknowledged ids: every acknowledged id
stored exactly once, in its partition, in production order, at gapless offsets.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support.broker import support_module_env
from tests.support.kafka_clients import confluent_consume, confluent_consumer
from tests.support.workload import Rec, seq_of_rec

POLL_EVERY = 200  # records produced between two polls for delivery reports

IdRecord = tuple[int, int, int | None]  # (partition, offset, id) of a record read back


class AckedProducer:
    """The producer process, writing in ``work_dir``; stopped by ``stop()`` (or ``kill()``).

    ``partitions``: a count (0..n-1) or the partitions to use. ``rate``/``window``: 0 = unlimited.
    ``config``: more librdkafka settings (``batch.size``, ``debug`` ...), over the defaults.
    """

    def __init__(
        self,
        work_dir: Path,
        bootstrap: str,
        topic: str,
        partitions: int | Sequence[int],
        *,
        max_seconds: float = 150,
        max_records: int = 0,
        rate: float = 0,
        window: int = 0,
        value_size: int = 200,
        label: str = "acked",
        compression: str = "none",
        acks: str = "all",
        idempotence: bool = True,
        config: Mapping[str, Any] | None = None,
        flush_seconds: float = 120,
    ) -> None:
        work_dir.mkdir(parents=True, exist_ok=True)
        self.acked_path, self.stop_path = work_dir / "acked.txt", work_dir / "stop"
        self.out_path, self.err_path = work_dir / "producer.out", work_dir / "producer.err"
        self.partitions = list(range(partitions)) if isinstance(partitions, int) else list(partitions)
        settings = {"enable.idempotence": idempotence, "acks": acks, "compression.type": compression, **(config or {})}
        cmd = [
            sys.executable, "-m", __name__,
            "--bootstrap", bootstrap, "--topic", topic,
            "--acked", str(self.acked_path), "--stop", str(self.stop_path),
            "--partitions", ",".join(map(str, self.partitions)),
            "--max-seconds", str(max_seconds), "--max-records", str(max_records),
            "--rate", str(rate), "--window", str(window),
            "--value-size", str(value_size), "--label", label,
            "--flush-seconds", str(flush_seconds), "--config", json.dumps(settings),
        ]  # fmt: skip
        with open(self.out_path, "wb") as out, open(self.err_path, "wb") as err:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                         env=support_module_env())

    def acked(self) -> list[int]:
        """The ids acknowledged so far."""
        return read_acked(self.acked_path)

    def wait_for_acks(self, count: int, timeout: float) -> int:
        """Wait until ``count`` ids are acknowledged (or the producer exits); returns how many are."""
        deadline = time.monotonic() + timeout
        n = len(self.acked())
        while time.monotonic() < deadline and n < count and self.proc.poll() is None:
            time.sleep(0.2)
            n = len(self.acked())
        return n

    def expect_acks(self, count: int, timeout: float, what: str) -> int:
        """``wait_for_acks``, failing (with the producer's stderr) if fewer than ``count`` come."""
        n = self.wait_for_acks(count, timeout)
        assert n >= count, (
            f"{what}: {n} of {count} acks within {timeout:.0f}s (producer rc={self.proc.poll()})\n"
            f"{self.stderr_tail(2000)}"
        )
        return n

    def stop(self, timeout: float = 150, *, check: bool = True) -> dict[str, Any]:
        """Ask it to stop and wait for its final flush; its summary, with its exit code as ``rc``.

        ``check``: fail unless every record was delivered (no fatal error, nothing left unflushed,
        no failed delivery)."""
        self.stop_path.touch()
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        text = self.out_path.read_text().strip()
        try:
            summary: dict[str, Any] = json.loads(text.splitlines()[-1]) if text else {}
        except ValueError:
            summary = {"output": text[-2000:]}
        summary["rc"] = self.proc.returncode
        if check:
            assert summary["rc"] == 0 and not summary.get("failed"), (
                f"producer exited {summary['rc']}: {summary}\nstderr: {self.stderr_tail()}"
            )
        return summary

    def kill(self) -> None:
        """Teardown: never leave the process behind."""
        self.stop_path.touch()
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def stderr_tail(self, chars: int = 3000) -> str:
        return self.err_path.read_text(errors="replace")[-chars:]


def read_acked(path: Path) -> list[int]:
    """The ids in an acked-ids file (a line cut short by a crash is not there yet: ids are fsynced whole)."""
    if not path.exists():
        return []
    return [int(line) for line in path.read_text().splitlines() if line.strip()]


# ------------------------------------------------------------------------------------ reading back


def watermarks(bootstrap: str, topic: str, partitions: Iterable[int], timeout: float = 15) -> dict[int, tuple[int, int]]:
    """(low, high) watermark of each partition, as a consumer sees them (ListOffsets)."""
    from confluent_kafka import TopicPartition

    consumer = confluent_consumer(bootstrap)
    try:
        return {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout, cached=False)
            for p in partitions
        }
    finally:
        consumer.close()


def consume_all(bootstrap: str, topic: str, partitions: Sequence[int], settle: float = 1.0) -> list[Rec]:
    """Everything between each partition's watermarks, read with confluent-kafka."""
    marks = watermarks(bootstrap, topic, partitions)
    total = sum(high - low for low, high in marks.values())
    return confluent_consume(bootstrap, topic, partitions, total, settle=settle)


def id_records(received: Iterable[Rec]) -> list[IdRecord]:
    return [(r.partition, r.offset, seq_of_rec(r)) for r in received]


@dataclass
class AckedCheck:
    """What ``check_acked_ids`` found; ``problems`` is empty when all is well."""

    acked: int
    stored: int
    stored_not_acked: int
    problems: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        return f"{self.acked} acked, {self.stored} stored ({self.stored_not_acked} stored but never acked)"


def check_acked_ids(
    records: Iterable[IdRecord],
    acked: Sequence[int],
    partitions: Sequence[int],
    *,
    log_start: Mapping[int, int] | None = None,
) -> AckedCheck:
    """Lost acknowledged ids, duplicated ids, offset gaps (from each partition's log start, 0 by default),
    ids out of order (an idempotent producer keeps order) or in the wrong partition (id i goes to
    ``partitions[i % len(partitions)]``)."""
    assert len(acked) == len(set(acked)), "the client acknowledged an id twice (test bug)"
    problems: list[str] = []
    by_part: dict[int, list[tuple[int, int | None]]] = {}
    stored = 0
    for p, o, i in records:
        by_part.setdefault(p, []).append((o, i))
        stored += 1
    seen: dict[int, str] = {}
    dups: list[str] = []
    for p, recs in sorted(by_part.items()):
        recs.sort(key=lambda r: r[0])
        start = (log_start or {}).get(p, 0)
        offsets = [o for o, _ in recs]
        if offsets != list(range(start, start + len(recs))):
            problems.append(f"p{p}: offsets not gapless from {start}: first {offsets[:3]}, last {offsets[-1]}, "
                            f"count {len(offsets)}")
        ids = [i for _, i in recs]
        if any(i is None or partitions[i % len(partitions)] != p for i in ids):
            problems.append(f"p{p}: records without an id or with another partition's ids")
        if any(a is not None and b is not None and b <= a for a, b in zip(ids, ids[1:], strict=False)):
            problems.append(f"p{p}: ids out of order (an idempotent producer keeps order)")
        for o, i in recs:
            if i is None:
                continue
            if i in seen:
                dups.append(f"id {i} at {seen[i]} and p{p}@{o}")
            seen[i] = f"p{p}@{o}"
    if dups:
        problems.append(f"{len(dups)} duplicates, e.g. {dups[:5]}")
    missing = sorted(set(acked) - set(seen))
    if missing:
        problems.append(f"{len(missing)} acknowledged ids lost, e.g. {missing[:10]}")
    return AckedCheck(len(acked), stored, len(set(seen) - set(acked)), problems)


def check_acked(
    received: Sequence[Rec],
    acked: Sequence[int],
    partitions: Sequence[int],
    *,
    log_start: Mapping[int, int] | None = None,
) -> str:
    """Assert ``check_acked_ids`` finds nothing wrong; returns a one-line summary for the test output."""
    check = check_acked_ids(id_records(received), acked, partitions, log_start=log_start)
    assert not check.problems, f"{check}\n  " + "\n  ".join(check.problems)
    return str(check)


# ------------------------------------------------------------------------------------ the process


def _producer_main(argv: Sequence[str]) -> int:
    ap = argparse.ArgumentParser(description="idempotent producer recording acknowledged ids")
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--acked", required=True, help="file the acknowledged ids are appended to")
    ap.add_argument("--stop", required=True, help="stop producing once this file exists")
    ap.add_argument("--partitions", required=True, help="comma-separated partitions, used round-robin")
    ap.add_argument("--max-seconds", type=float, default=150)
    ap.add_argument("--max-records", type=int, default=0, help="0: no limit")
    ap.add_argument("--rate", type=float, default=0, help="records/s at most; 0: as fast as possible")
    ap.add_argument("--window", type=int, default=0, help="unacknowledged records at most; 0: no limit")
    ap.add_argument("--value-size", type=int, default=200)
    ap.add_argument("--label", default="acked", help="values are b'<label>|<id>|vvv...'")
    ap.add_argument("--flush-seconds", type=float, default=120)
    ap.add_argument("--config", default="{}", help="librdkafka settings, JSON")
    args = ap.parse_args(argv)

    from confluent_kafka import Producer

    partitions = [int(p) for p in args.partitions.split(",")]
    errors: collections.Counter[str] = collections.Counter()
    pending: list[int] = []
    failed: list[tuple[int, str]] = []
    fatal: list[str] = []
    done = 0

    def on_error(err: Any) -> None:
        errors[f"error_cb {err.name()}"] += 1
        print(f"{time.time():.3f} error_cb: {err}", file=sys.stderr, flush=True)

    def on_delivery(err: Any, msg: Any) -> None:
        nonlocal done
        done += 1
        if err is None:
            pending.append(int(msg.key()))
            return
        failed.append((int(msg.key()), str(err)))
        errors[f"delivery {err.name()}"] += 1
        if err.fatal():
            fatal.append(str(err))

    def save(out: Any) -> None:
        if pending:
            out.write("".join(f"{i}\n" for i in pending))
            out.flush()
            os.fsync(out.fileno())
            pending.clear()

    producer = Producer({
        "bootstrap.servers": args.bootstrap,
        "linger.ms": 5,
        "message.timeout.ms": 180000,
        "retry.backoff.ms": 100,
        "reconnect.backoff.max.ms": 500,
        "queue.buffering.max.messages": 20000,
        "error_cb": on_error,
        **json.loads(args.config),
    })  # fmt: skip
    produced = 0
    start = time.monotonic()

    def held_back() -> bool:
        """Paced: the rate or the window allows no record now."""
        if args.rate and produced >= (time.monotonic() - start) * args.rate:
            return True
        return bool(args.window) and produced >= done + args.window

    # One record a turn, the stop checks included: that sets the unpaced rate the tests were tuned with.
    with open(args.acked, "a") as out:
        while not os.path.exists(args.stop) and time.monotonic() - start < args.max_seconds and not fatal:
            if args.max_records and produced >= args.max_records:
                break
            if held_back():
                producer.poll(0.02)
                save(out)
                continue
            value = f"{args.label}|{produced:08d}|".encode().ljust(args.value_size, b"v")
            try:
                producer.produce(args.topic, key=str(produced).encode(), value=value,
                                 headers=[("seq", str(produced).encode())],
                                 partition=partitions[produced % len(partitions)], on_delivery=on_delivery)
                produced += 1
            except BufferError:  # the local queue is full: let deliveries drain it
                producer.poll(0.05)
            if produced % POLL_EVERY == 0:
                producer.poll(0)
            save(out)
        deadline = time.monotonic() + args.flush_seconds
        while len(producer) and time.monotonic() < deadline:
            producer.flush(0.5)
            save(out)
        save(out)
    left = len(producer)
    print(json.dumps({"produced": produced, "left": left, "failed": len(failed), "failed_sample": failed[:5],
                      "fatal": fatal, "errors": dict(errors)}))
    return 1 if fatal or left else 0


if __name__ == "__main__":
    sys.exit(_producer_main(sys.argv[1:]))
