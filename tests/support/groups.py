"""What the consumer-group client tests (test_groups_*.py) share, whatever the client library.

Every consumer reports what it did as a list of events: assignments, revocations, each processed
record, each successful commit, errors. Consumers in a subprocess (confluent-kafka, so one can be
SIGKILLed: tests/support/groups_confluent.py) append them to their own log file, flushed after every
batch and before the commit; in-process consumers (kafka-python threads, aiokafka tasks:
tests/support/groups_in_process.py) append to an ``EventRecorder``. One checker then compares what
the whole group processed with what was produced.

Event times are ``time.monotonic()``, which on Linux is CLOCK_MONOTONIC, one clock for every
process on the machine: events of different consumers can be ordered.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tests.support.workload import Sent

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
# Records
# ---------------------------------------------------------------------------------------------


def seq_from_headers(headers: Any) -> int:
    """The record's ``seq`` header (the workload's sequence number), -1 without one."""
    for key, value in headers or ():
        if key == "seq" and value is not None:
            return int(value)
    return -1
