"""Helpers for the consumer-group client tests (test_groups_*.py).

Every consumer, whatever its client library, reports what it did as a list of events:
assignments, revocations, each processed record, each successful commit, errors. Consumers in
a subprocess (confluent-kafka, so one can be SIGKILLed) append them to their own log file,
flushed after every batch and before the commit; in-process consumers append to an
`EventRecorder`. One checker then compares what the whole group processed with what was
produced.

Event times are `time.monotonic()`, which on Linux is CLOCK_MONOTONIC, one clock for every
process on the machine: events of different consumers can be ordered.

Run as a script, this module is the confluent-kafka consumer process:
    python group_helpers.py --bootstrap ... --topic ... --group ... --log ... --stop-file ...
(stdlib and confluent_kafka only, so it needs no PYTHONPATH).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tests.support.broker import BrokerProcess, Sent

BrokerFactory = Callable[..., "BrokerProcess"]  # the broker_factory fixture

# The broker default (3000 ms) delays only the first rebalance of an empty group; tests that
# don't exercise that delay set it to 0 to stay short.
FAST_GROUP_OVERRIDES = {"group.initial.rebalance.delay.ms": 0}

Expected = dict[int, dict[int, int]]  # partition -> {offset: seq}


# ---------------------------------------------------------------------------------------------
# Events
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Event:
    """One thing a consumer did. kind: S started, A assigned, R revoked, L lost, M processed a
    record, C committed (offset = the next offset to consume), E error, X exited."""

    t: float
    kind: str
    partitions: tuple[int, ...] = ()
    partition: int = -1
    offset: int = -1
    seq: int = -1
    text: str = ""


def _parts(parts: Iterable[int]) -> str:
    return ",".join(str(p) for p in sorted(parts)) or "-"


def format_event(ev: Event) -> str:
    if ev.kind in "ARL":
        return f"{ev.t:.6f} {ev.kind} {_parts(ev.partitions)}\n"
    if ev.kind == "M":
        return f"{ev.t:.6f} M {ev.partition} {ev.offset} {ev.seq}\n"
    if ev.kind == "C":
        return f"{ev.t:.6f} C {ev.partition} {ev.offset}\n"
    return f"{ev.t:.6f} {ev.kind} {' '.join(ev.text.split())}\n"


def parse_events(text: str) -> list[Event]:
    """Parse a log file; a line cut short by SIGKILL (the last one) is skipped."""
    events: list[Event] = []
    for line in text.splitlines():
        fields = line.split(" ", 2)
        try:
            t, kind = float(fields[0]), fields[1]
            rest = fields[2] if len(fields) > 2 else ""
            if kind in ("A", "R", "L"):
                parts = () if rest == "-" else tuple(int(p) for p in rest.split(","))
                events.append(Event(t, kind, partitions=parts))
            elif kind == "M":
                p, o, s = (int(x) for x in rest.split(" "))
                events.append(Event(t, kind, partition=p, offset=o, seq=s))
            elif kind == "C":
                p, o = (int(x) for x in rest.split(" "))
                events.append(Event(t, kind, partition=p, offset=o))
            elif kind in ("S", "E", "X"):
                events.append(Event(t, kind, text=rest))
        except (ValueError, IndexError):
            continue
    return events


class EventRecorder:
    """Thread-safe event list for consumers that run in the test process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._events: list[Event] = []

    def add(self, kind: str, **fields: Any) -> None:
        with self._lock:
            self._events.append(Event(time.monotonic(), kind, **fields))

    def assigned(self, partitions: Iterable[int]) -> None:
        self.add("A", partitions=tuple(sorted(partitions)))

    def revoked(self, partitions: Iterable[int]) -> None:
        self.add("R", partitions=tuple(sorted(partitions)))

    def lost(self, partitions: Iterable[int]) -> None:
        self.add("L", partitions=tuple(sorted(partitions)))

    def processed(self, partition: int, offset: int, seq: int) -> None:
        self.add("M", partition=partition, offset=offset, seq=seq)

    def committed(self, partition: int, next_offset: int) -> None:
        self.add("C", partition=partition, offset=next_offset)

    def error(self, text: str) -> None:
        self.add("E", text=" ".join(str(text).split()))

    def events(self) -> list[Event]:
        with self._lock:
            return list(self._events)


class ConsumerLog:
    """What one consumer did, replayed from its events."""

    def __init__(self, name: str, events: Sequence[Event]) -> None:
        self.name = name
        self.events = list(events)

    def assignment_at(self, until: float = float("inf")) -> frozenset[int]:
        current: set[int] = set()
        for ev in self.events:
            if ev.t > until:
                break
            if ev.kind == "A":
                current |= set(ev.partitions)  # eager: the full assignment after a full revoke
            elif ev.kind in ("R", "L"):
                current -= set(ev.partitions)
        return frozenset(current)

    @property
    def assignment(self) -> frozenset[int]:
        return self.assignment_at()

    def changes(self, since: float = float("-inf")) -> list[Event]:
        """Assign/revoke/lost callbacks after `since`."""
        return [ev for ev in self.events if ev.kind in "ARL" and ev.t > since]

    @property
    def processed(self) -> list[Event]:
        return [ev for ev in self.events if ev.kind == "M"]

    @property
    def commits(self) -> list[Event]:
        return [ev for ev in self.events if ev.kind == "C"]

    @property
    def errors(self) -> list[Event]:
        return [ev for ev in self.events if ev.kind == "E"]

    def exited(self) -> bool:
        return any(ev.kind == "X" for ev in self.events)

    def summary(self) -> str:
        hist = " ".join(
            f"{ev.kind}[{_parts(ev.partitions)}]@{ev.t:.1f}" for ev in self.events if ev.kind in "ARL"
        )
        last: dict[int, int] = {}
        for ev in self.commits:
            last[ev.partition] = max(last.get(ev.partition, -1), ev.offset)
        errs = self.errors
        err_text = "; ".join(ev.text[:160] for ev in errs[-4:])
        return (
            f"{self.name}: assignment now [{_parts(self.assignment)}], callbacks: {hist or 'none'}; "
            f"{len(self.processed)} processed, {len(self.commits)} commits, last commits {dict(sorted(last.items()))}; "
            f"{len(errs)} errors{': ' + err_text if errs else ''}"
        )


def last_commits(logs: Iterable[ConsumerLog], before: float = float("inf")) -> dict[int, int]:
    """Highest offset each partition was committed at (successful commits only), group-wide."""
    out: dict[int, int] = {}
    for log in logs:
        for ev in log.commits:
            if ev.t <= before:
                out[ev.partition] = max(out.get(ev.partition, -1), ev.offset)
    return out


def balanced(logs: Sequence[ConsumerLog], partitions: int, each: int) -> bool:
    """Every consumer holds `each` partitions, none shared, all `partitions` covered."""
    assignments = [log.assignment for log in logs]
    union: set[int] = set().union(*assignments)
    return (
        all(len(a) == each for a in assignments)
        and sum(len(a) for a in assignments) == len(union)
        and union == set(range(partitions))
    )


def describe_logs(logs: Iterable[ConsumerLog]) -> str:
    return "\n".join("  " + log.summary() for log in logs)


# ---------------------------------------------------------------------------------------------
# Expected records and the checker
# ---------------------------------------------------------------------------------------------


def expected_from_sent(sent: Sequence[Sent], start: Mapping[int, int] | None = None) -> Expected:
    """Offsets the records of one idempotent producer got: per partition, in produce order,
    from `start` (the partition's end offset before this producer ran; 0 on a fresh topic)."""
    nxt = dict(start or {})
    out: Expected = {}
    for s in sent:
        assert s.partition >= 0, "expected_from_sent needs explicit partitions"
        o = nxt.get(s.partition, 0)
        out.setdefault(s.partition, {})[o] = s.seq
        nxt[s.partition] = o + 1
    return out


def merge_expected(*parts: Expected) -> Expected:
    out: Expected = {}
    for part in parts:
        for p, offsets in part.items():
            out.setdefault(p, {}).update(offsets)
    return out


def end_offsets(expected: Expected, partitions: int) -> dict[int, int]:
    return {p: (max(expected[p]) + 1 if expected.get(p) else 0) for p in range(partitions)}


def check_group_consumption(
    logs: Sequence[ConsumerLog],
    expected: Expected,
    *,
    allow_duplicates: bool = True,
    duplicates_only_after: Collection[str] | None = None,
    max_problems: int = 25,
) -> dict[str, int]:
    """Assert the group processed every expected record at least once, nothing else, with the
    right content (seq), and re-processed a record only when it was at or above the group's
    last successful commit for its partition at that moment (never below a commit).

    `duplicates_only_after`: names of consumers whose uncommitted tail may be re-processed by
    others (the SIGKILLed one); a record processed twice must have been processed first by one
    of them. `allow_duplicates=False`: no record may be processed twice at all.
    Returns counts for the report.
    """
    problems: list[str] = []
    processed = sorted(((ev, log.name) for log in logs for ev in log.processed), key=lambda pair: pair[0].t)
    commits = sorted((ev for log in logs for ev in log.commits), key=lambda ev: ev.t)
    commit_idx = 0
    committed_so_far: dict[int, int] = {}
    first_by: dict[tuple[int, int], str] = {}
    duplicates = 0
    for ev, name in processed:
        while commit_idx < len(commits) and commits[commit_idx].t <= ev.t:
            c = commits[commit_idx]
            committed_so_far[c.partition] = max(committed_so_far.get(c.partition, -1), c.offset)
            commit_idx += 1
        key = (ev.partition, ev.offset)
        exp_seq = expected.get(ev.partition, {}).get(ev.offset)
        if exp_seq is None:
            problems.append(f"{name} processed p{ev.partition}@{ev.offset} (seq {ev.seq}): never produced")
        elif exp_seq != ev.seq:
            problems.append(f"{name} got seq {ev.seq} at p{ev.partition}@{ev.offset}, produced seq {exp_seq}")
        if key not in first_by:
            first_by[key] = name
            continue
        duplicates += 1
        floor = committed_so_far.get(ev.partition, -1)
        if not allow_duplicates:
            problems.append(
                f"p{ev.partition}@{ev.offset} processed again by {name} (first by {first_by[key]})"
            )
        elif ev.offset < floor:
            problems.append(
                f"p{ev.partition}@{ev.offset} re-consumed by {name} below the group's last commit {floor} "
                f"(first processed by {first_by[key]})"
            )
        elif duplicates_only_after is not None and first_by[key] not in duplicates_only_after:
            problems.append(
                f"p{ev.partition}@{ev.offset} processed by {first_by[key]} then again by {name}: "
                f"only {sorted(duplicates_only_after)}'s uncommitted records may be re-processed"
            )
    missing: dict[int, list[int]] = {}
    for p, offsets in expected.items():
        for o in offsets:
            if (p, o) not in first_by:
                missing.setdefault(p, []).append(o)
    for p, offs in sorted(missing.items()):
        offs.sort()
        problems.append(f"p{p}: {len(offs)} produced records never processed, offsets {offs[:8]}...")
    if problems:
        shown = "\n  ".join(problems[:max_problems])
        raise AssertionError(
            f"group consumption wrong ({len(problems)} problems, {len(processed)} processed, "
            f"{sum(len(v) for v in expected.values())} produced, {duplicates} re-processed):\n  {shown}\n"
            f"consumers:\n{describe_logs(logs)}"
        )
    return {
        "processed": len(processed),
        "produced": sum(len(v) for v in expected.values()),
        "duplicates": duplicates,
    }


def wait_until(
    predicate: Callable[[], bool],
    timeout: float,
    what: str,
    describe: Callable[[], str] = lambda: "",
    interval: float = 0.2,
) -> float:
    """Poll until `predicate()`; return the seconds it took. `timeout` is only an upper bound
    for "it never happened": the assertion says what was awaited and what the consumers did."""
    start = time.monotonic()
    deadline = start + timeout
    while True:
        if predicate():
            return time.monotonic() - start
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what}: not reached within {timeout:.0f}s\n{describe()}")
        time.sleep(interval)


# ---------------------------------------------------------------------------------------------
# confluent-kafka: a consumer in its own process, and a producer thread
# ---------------------------------------------------------------------------------------------


class ConfluentConsumerProcess:
    """This file run as a script: one confluent-kafka group member with its own log file.

    stop(): a stop file makes it close() (a dynamic member leaves the group, a static one
    doesn't) and exit 0; kill(): SIGKILL, no chance to commit or leave.
    process_sleep: time spent "processing" a batch, after its records are logged and before
    they are committed (a SIGKILL then leaves an uncommitted tail).
    """

    def __init__(
        self,
        name: str,
        workdir: Path,
        bootstrap: str,
        topic: str,
        group: str,
        *,
        session_timeout_ms: int = 6000,
        instance_id: str | None = None,
        max_batch: int = 100,
        batch_sleep: float = 0.0,
        process_sleep: float = 0.0,
        max_seconds: float = 280.0,
        debug: str | None = None,
    ) -> None:
        self.name = name
        self.log_path = workdir / f"{name}.events"
        self.stop_path = workdir / f"{name}.stop"
        self.stderr_path = workdir / f"{name}.stderr"
        self.cmd = [
            sys.executable,
            str(Path(__file__).resolve()),
            "--name", name,
            "--bootstrap", bootstrap,
            "--topic", topic,
            "--group", group,
            "--log", str(self.log_path),
            "--stop-file", str(self.stop_path),
            "--session-timeout-ms", str(session_timeout_ms),
            "--max-batch", str(max_batch),
            "--batch-sleep", str(batch_sleep),
            "--process-sleep", str(process_sleep),
            "--max-seconds", str(max_seconds),
        ]  # fmt: skip
        if instance_id:
            self.cmd += ["--instance-id", instance_id]
        if debug:
            self.cmd += ["--debug", debug]
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> ConfluentConsumerProcess:
        with open(self.stderr_path, "ab") as err:
            self.proc = subprocess.Popen(self.cmd, stdin=subprocess.DEVNULL, stdout=err, stderr=err)
        return self

    def log(self) -> ConsumerLog:
        try:
            text = self.log_path.read_text()
        except FileNotFoundError:
            text = ""
        return ConsumerLog(self.name, parse_events(text))

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = 60.0) -> int:
        """Ask for a clean close; return the exit code (0 = closed cleanly)."""
        assert self.proc is not None
        self.stop_path.touch()
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(
                f"consumer {self.name} did not close within {timeout}s\n{self.stderr_tail()}"
            ) from None

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(30)

    def close(self) -> None:
        """Teardown: never leave the process behind."""
        self.kill()

    def stderr_tail(self, lines: int = 15) -> str:
        try:
            text = self.stderr_path.read_text(errors="replace").splitlines()
        except FileNotFoundError:
            return f"({self.name}: no stderr)"
        rc = None if self.proc is None else self.proc.poll()
        return f"--- {self.name} stderr tail (exit code {rc}) ---\n" + "\n".join(text[-lines:])


def describe_processes(consumers: Sequence[ConfluentConsumerProcess]) -> str:
    return describe_logs(c.log() for c in consumers) + "\n" + "\n".join(c.stderr_tail(8) for c in consumers)


def confluent_committed(bootstrap: str, group: str, topic: str, partitions: Iterable[int]) -> dict[int, int]:
    """The group's committed offsets as the broker returns them (OffsetFetch from a consumer that
    never joins), -1001 where none."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        result = consumer.committed([TopicPartition(topic, p) for p in partitions], timeout=30)
    finally:
        consumer.close()
    errors = [f"p{tp.partition}: {tp.error}" for tp in result if tp.error is not None]
    assert not errors, f"OffsetFetch for group {group} returned partition errors: {errors}"
    return {tp.partition: tp.offset for tp in result}


class BackgroundProducer:
    """A confluent-kafka idempotent producer in a thread, producing numbered records round-robin
    over the partitions at about `rate` records/s until stop(); keeps the offset of every
    acknowledged record."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, *, rate: float = 200.0) -> None:
        self.bootstrap, self.topic, self.partitions, self.rate = bootstrap, topic, partitions, rate
        self.delivered: Expected = {}
        self.errors: list[str] = []
        self.produced = 0
        self.unflushed = 0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="group-test-producer", daemon=True)

    def start(self) -> BackgroundProducer:
        self._thread.start()
        return self

    def acked(self) -> int:
        with self._lock:
            return sum(len(v) for v in self.delivered.values())

    def _on_delivery(self, err: Any, msg: Any) -> None:
        with self._lock:
            if err is not None:
                self.errors.append(f"p{msg.partition()}: {err}")
            else:
                seq = int(msg.key()[1:])  # b"k<seq>" (delivery reports carry no headers)
                self.delivered.setdefault(msg.partition(), {})[msg.offset()] = seq

    def _run(self) -> None:
        from confluent_kafka import Producer

        producer = Producer(
            {
                "bootstrap.servers": self.bootstrap,
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 10,
                "message.timeout.ms": 120000,
            }
        )
        try:
            start = time.monotonic()
            while not self._stop.is_set():
                target = int((time.monotonic() - start) * self.rate)
                while self.produced < target:
                    seq = self.produced
                    try:
                        producer.produce(
                            self.topic,
                            key=f"k{seq}".encode(),
                            value=f"group|{seq:08d}|".encode() + b"v" * 40,
                            headers=[("seq", str(seq).encode())],
                            partition=seq % self.partitions,
                            on_delivery=self._on_delivery,
                        )
                    except BufferError:
                        break
                    self.produced += 1
                producer.poll(0.02)
            self.unflushed = producer.flush(120)
        except Exception as exc:  # reported by stop()
            self.errors.append(f"producer thread: {exc!r}")

    def halt(self) -> None:
        """Teardown: stop producing (the daemon thread flushes and ends on its own)."""
        self._stop.set()

    def stop(self, timeout: float = 150.0) -> Expected:
        """Stop producing, wait for every delivery report; return partition -> {offset: seq}."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout)
        assert not self._thread.is_alive(), f"producer thread still flushing after {timeout}s"
        assert not self.errors, f"{len(self.errors)} produce errors, e.g. {self.errors[:5]}"
        assert self.unflushed == 0, f"{self.unflushed} records not delivered"
        assert self.acked() == self.produced, f"{self.acked()} acknowledged of {self.produced} produced"
        for p, offsets in self.delivered.items():
            n = len(offsets)
            assert sorted(offsets) == list(range(n)), (
                f"p{p}: the broker gave acknowledged records offsets that are not 0..{n - 1}: "
                f"{sorted(offsets)[:10]}..."
            )
        return {p: dict(v) for p, v in self.delivered.items()}


# ---------------------------------------------------------------------------------------------
# The consumer process itself
# ---------------------------------------------------------------------------------------------


def _seq_from_headers(headers: Any) -> int:
    for key, value in headers or ():
        if key == "seq" and value is not None:
            return int(value)
    return -1


def _consumer_main(argv: Sequence[str]) -> int:
    ap = argparse.ArgumentParser(description="confluent-kafka group member for the group tests")
    ap.add_argument("--name", required=True)
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--group", required=True)
    ap.add_argument("--log", required=True)
    ap.add_argument("--stop-file", required=True)
    ap.add_argument("--session-timeout-ms", type=int, default=6000)
    ap.add_argument("--instance-id")
    ap.add_argument("--max-batch", type=int, default=100)
    ap.add_argument("--batch-sleep", type=float, default=0.0, help="pause after each batch's commit")
    ap.add_argument(
        "--process-sleep", type=float, default=0.0, help="'processing' time between a batch and its commit"
    )
    ap.add_argument("--max-seconds", type=float, default=280.0)
    ap.add_argument("--debug")
    args = ap.parse_args(argv)

    from confluent_kafka import Consumer, KafkaException, TopicPartition

    out = open(args.log, "a")  # noqa: SIM115 - kept open for the life of the process

    def emit(events: Iterable[Event]) -> None:
        text = "".join(format_event(ev) for ev in events)
        if text:
            out.write(text)
            out.flush()  # in the kernel before the commit: survives SIGKILL

    def now() -> float:
        return time.monotonic()

    conf: dict[str, Any] = {
        "bootstrap.servers": args.bootstrap,
        "group.id": args.group,
        "client.id": args.name,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "enable.partition.eof": False,
        "session.timeout.ms": args.session_timeout_ms,
        "heartbeat.interval.ms": min(1000, args.session_timeout_ms // 3),
        "partition.assignment.strategy": "range",
        "reconnect.backoff.max.ms": 1000,
    }
    if args.instance_id:
        conf["group.instance.id"] = args.instance_id
    if args.debug:
        conf["debug"] = args.debug
    consumer = Consumer(conf)
    assigned: set[int] = set()
    pending: dict[int, int] = {}  # partition -> next offset, processed but not yet committed

    def commit(parts: Iterable[int]) -> None:
        offsets = [TopicPartition(args.topic, p, pending[p]) for p in sorted(parts) if p in pending]
        if not offsets:
            return
        what = " ".join(f"p{tp.partition}:{tp.offset}" for tp in offsets)
        try:
            result = consumer.commit(offsets=offsets, asynchronous=False)
        except KafkaException as exc:
            emit([Event(now(), "E", text=f"commit {what} failed: {exc.args[0]}")])
            return
        events = []
        for tp in result or ():
            if tp.error is not None:
                events.append(
                    Event(now(), "E", text=f"commit p{tp.partition}:{tp.offset} failed: {tp.error}")
                )
            else:
                events.append(Event(now(), "C", partition=tp.partition, offset=tp.offset))
                if pending.get(tp.partition) == tp.offset:
                    del pending[tp.partition]
        emit(events)

    def on_assign(_consumer: Any, partitions: list[Any]) -> None:
        parts = {tp.partition for tp in partitions}
        assigned.update(parts)
        emit([Event(now(), "A", partitions=tuple(sorted(parts)))])

    def on_revoke(_consumer: Any, partitions: list[Any]) -> None:
        parts = {tp.partition for tp in partitions}
        commit(parts & set(pending))  # the usual place to commit what was processed
        for p in parts:
            pending.pop(p, None)
        assigned.difference_update(parts)
        emit([Event(now(), "R", partitions=tuple(sorted(parts)))])

    def on_lost(_consumer: Any, partitions: list[Any]) -> None:
        parts = {tp.partition for tp in partitions}
        for p in parts:
            pending.pop(p, None)  # someone else owns them now: don't commit
        assigned.difference_update(parts)
        emit([Event(now(), "L", partitions=tuple(sorted(parts)))])

    consumer.subscribe([args.topic], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_lost)
    emit([Event(now(), "S", text=f"pid {os.getpid()} instance {args.instance_id}")])
    deadline = now() + args.max_seconds
    code = 0
    while not os.path.exists(args.stop_file):
        if now() > deadline:
            emit([Event(now(), "E", text=f"gave up after {args.max_seconds}s without a stop file")])
            code = 3
            break
        msgs = consumer.consume(num_messages=args.max_batch, timeout=0.5)
        events = []
        for m in msgs:
            err = m.error()
            if err is not None:
                events.append(Event(now(), "E", text=f"consume: {err.name()} {err.str()}"))
                continue
            p = m.partition()
            if p not in assigned:
                events.append(Event(now(), "E", text=f"dropped p{p}@{m.offset()}: not assigned"))
                continue
            events.append(
                Event(now(), "M", partition=p, offset=m.offset(), seq=_seq_from_headers(m.headers()))
            )
            pending[p] = m.offset() + 1
        emit(events)  # processed (and flushed) before it's committed
        if msgs and args.process_sleep > 0:
            time.sleep(args.process_sleep)
        commit(list(pending))
        if msgs and args.batch_sleep > 0:
            time.sleep(args.batch_sleep)
    consumer.close()
    emit([Event(now(), "X", text=f"closed, code {code}")])
    out.close()
    return code


if __name__ == "__main__":
    sys.exit(_consumer_main(sys.argv[1:]))
