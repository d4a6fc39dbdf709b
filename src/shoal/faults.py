"""Fault injection shared by the failure-testing wrappers (object storage, Batch Coordinator).

KIP-1163's test plan asks for runs where object storage or the coordinator is
"inaccessible or partially accessible", with the focus on correctness. The wrappers
(``shoal.objects.faulty``, ``shoal.coordinator.faulty``) decide per call, through a
``FaultInjector``, whether the call is slowed down and whether it fails; each raises the
error its real backend would raise. This module knows nothing of either (it imports no
other Shoal module), so any layer can use it.

Faults are set in code (``set_fault``) or, for a broker running as a child process,
through a JSON control file. The file is the whole desired state; it is re-read whenever
it changes (one ``stat`` per decision), so a test rewrites it (``write_control_file`` does
so atomically) and the broker's next call obeys. A removed file clears every fault; a
malformed one is ignored (the last good state stays). Its format::

    {"seed": 7,
     "all":    {"failure_rate": 0.1},
     "upload": {"failure_rate": 1.0, "latency_ms": 200, "after": true}}

``all`` applies to every operation without an entry of its own. Decisions come from one
``random.Random`` per operation, seeded from the seed and the operation's name and
re-seeded on each (re)load, so a run is reproducible given the same calls.
"""

from __future__ import annotations

import json
import logging
import os
import random
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["ALL", "Fault", "FaultInjector", "FaultPlan", "check_operation", "parse_control", "write_control_file"]

log = logging.getLogger(__name__)

#: The pseudo-operation whose fault applies to every operation without its own.
ALL = "all"


@dataclass(frozen=True, slots=True)
class Fault:
    """How one operation misbehaves.

    ``failure_rate``: fraction of calls (0..1) that fail. ``latency_ms``: delay added
    before every call. ``after``: a failing call first runs for real and then fails, so
    its effect (an uploaded object, a committed file) happens although the caller sees
    an error: the ambiguous outcome real systems have when an answer is lost.
    """

    failure_rate: float = 0.0
    latency_ms: float = 0.0
    after: bool = False

    def __post_init__(self) -> None:
        if not 0.0 <= self.failure_rate <= 1.0:
            raise ValueError(f"failure_rate must be within 0..1, got {self.failure_rate}")
        if self.latency_ms < 0:
            raise ValueError(f"latency_ms must not be negative, got {self.latency_ms}")

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Fault:
        """A fault from its control-file object; ValueError on unknown fields or bad values."""
        unknown = set(data) - {"failure_rate", "latency_ms", "after"}
        if unknown:
            raise ValueError(f"unknown fault fields {sorted(unknown)}")
        return cls(
            failure_rate=float(data.get("failure_rate", 0.0)),
            latency_ms=float(data.get("latency_ms", 0.0)),
            after=bool(data.get("after", False)),
        )

    def to_json(self) -> dict[str, Any]:
        """The control-file object of this fault."""
        return {"failure_rate": self.failure_rate, "latency_ms": self.latency_ms, "after": self.after}


@dataclass(frozen=True, slots=True)
class FaultPlan:
    """What to do with one call: wait ``latency_s`` first, then fail as ``failure`` says (None: succeed)."""

    latency_s: float = 0.0
    failure: Fault | None = None


_NO_PLAN = FaultPlan()


def check_operation(operation: str, operations: Iterable[str] | None) -> str:
    """``operation`` if it is one of ``operations`` or ``all`` (any name when ``operations`` is None)."""
    if operations is None or operation == ALL:
        return operation
    known = tuple(operations)
    if operation not in known:
        raise ValueError(f"unknown operation {operation!r}; known: {', '.join(known)}, {ALL}")
    return operation


def parse_control(text: str, operations: Iterable[str] | None = None) -> tuple[int, dict[str, Fault]]:
    """(seed, faults by operation) from a control file's JSON; ValueError if malformed.

    With ``operations`` given, entries naming anything else are refused.
    """
    data = json.loads(text)
    if not isinstance(data, dict):
        raise ValueError("control file must hold a JSON object")
    seed = data.get("seed", 0)
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise ValueError(f"seed must be an integer, got {seed!r}")
    known = None if operations is None else tuple(operations)
    faults: dict[str, Fault] = {}
    for name, value in data.items():
        if name == "seed":
            continue
        if not isinstance(value, dict):
            raise ValueError(f"fault for {name!r} must be a JSON object")
        faults[check_operation(name, known)] = Fault.from_json(value)
    return seed, faults


def write_control_file(
    path: str | Path, faults: Mapping[str, Fault], seed: int = 0, *, operations: Iterable[str] | None = None
) -> None:
    """Atomically replace the control file (write + rename), so a reader never sees half of it."""
    path = Path(path)
    known = None if operations is None else tuple(operations)
    data: dict[str, Any] = {"seed": seed}
    for operation, fault in faults.items():
        data[check_operation(operation, known)] = fault.to_json()
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)


class FaultInjector:
    """Per-operation faults and seeded decisions; safe to use from several threads at once.

    ``operations`` are the names a wrapper decides on (its method names); ``name`` only
    labels the log lines of control-file reloads.
    """

    def __init__(
        self,
        operations: tuple[str, ...],
        *,
        seed: int = 0,
        control_file: str | Path | None = None,
        name: str = "faults",
    ) -> None:
        if ALL in operations:
            raise ValueError(f"{ALL!r} is not an operation name")
        self.operations = operations
        self.name = name
        self._lock = threading.Lock()
        self._faults: dict[str, Fault] = {}
        self._control = Path(control_file) if control_file is not None else None
        self._control_signature: tuple[int, int, int] | None = None
        self._rngs: dict[str, random.Random] = {}
        self._seed = seed
        self._reseed(seed)
        #: Failures injected so far, per operation (tests assert that faults really fired).
        self.injected: dict[str, int] = dict.fromkeys(operations, 0)

    @property
    def control_file(self) -> Path | None:
        """The control file polled before each decision, if any."""
        return self._control

    # ------------------------------------------------------------------ configuration

    def _reseed(self, seed: int) -> None:
        self._seed = seed
        self._rngs = {op: random.Random(f"{seed}:{op}") for op in self.operations}

    def set_fault(self, operation: str, fault: Fault | None) -> None:
        """Make ``operation`` (or ``"all"``) misbehave as ``fault``; None removes its fault."""
        check_operation(operation, self.operations)
        with self._lock:
            if fault is None:
                self._faults.pop(operation, None)
            else:
                self._faults[operation] = fault

    def clear(self, seed: int | None = None) -> None:
        """Remove every fault (and re-seed, when a seed is given)."""
        with self._lock:
            self._faults.clear()
            if seed is not None:
                self._reseed(seed)

    def fault_for(self, operation: str) -> Fault | None:
        """The fault in force for ``operation`` (its own, else the ``all`` one), after reading the control file."""
        check_operation(operation, self.operations)
        with self._lock:
            return self._fault_locked(operation)

    def _fault_locked(self, operation: str) -> Fault | None:
        self._poll_control()
        return self._faults.get(operation) or self._faults.get(ALL)

    def plan(self, operation: str) -> FaultPlan:
        """How this call of ``operation`` goes: its delay and, when it must fail, the fault.

        One decision (one draw) per call while a fault is in force, whatever its rate, so a
        seed's decisions do not depend on the rates; a failure is counted in ``injected``.
        """
        check_operation(operation, self.operations)
        with self._lock:
            fault = self._fault_locked(operation)
            if fault is None:
                return _NO_PLAN
            fails = self._rngs[operation].random() < fault.failure_rate
            if fails:
                self.injected[operation] += 1
            return FaultPlan(fault.latency_ms / 1000, fault if fails else None)

    def decide(self, operation: str) -> Fault | None:
        """The fault when this call of ``operation`` must fail, else None (latency is the caller's: see ``plan``)."""
        return self.plan(operation).failure

    # ------------------------------------------------------------------ control file

    def _poll_control(self) -> None:
        """Reload the control file if it changed since the last look (caller holds the lock)."""
        if self._control is None:
            return
        try:
            st = os.stat(self._control)
        except FileNotFoundError:
            if self._control_signature is not None:
                self._control_signature = None
                self._faults.clear()
                log.info("%s: control file %s removed; no faults now", self.name, self._control)
            return
        except OSError as exc:
            log.warning("%s: cannot stat fault control file %s: %s; keeping the current faults",
                        self.name, self._control, exc)
            return
        signature = (st.st_mtime_ns, st.st_size, st.st_ino)
        if signature == self._control_signature:
            return
        self._control_signature = signature
        try:
            seed, faults = parse_control(self._control.read_text(), self.operations)
        except (OSError, ValueError) as exc:
            log.warning("%s: ignoring fault control file %s: %s; keeping the current faults",
                        self.name, self._control, exc)
            return
        self._faults = faults
        self._reseed(seed)
        log.info("%s: faults now %s (seed %d)", self.name, {op: f.to_json() for op, f in faults.items()}, seed)


class FaultControlled:
    """The controls a fault-injecting wrapper offers tests; the wrapper sets ``self.faults``."""

    faults: FaultInjector

    @property
    def injected(self) -> dict[str, int]:
        """Failures injected so far, per operation (tests assert that faults really fired)."""
        return self.faults.injected

    def set_fault(self, operation: str, fault: Fault | None) -> None:
        """Make ``operation`` (or ``"all"``) misbehave as ``fault``; None removes its fault."""
        self.faults.set_fault(operation, fault)

    def clear(self, seed: int | None = None) -> None:
        """Remove every fault (and re-seed, when a seed is given)."""
        self.faults.clear(seed)

    def fault_for(self, operation: str) -> Fault | None:
        """The fault in force for ``operation`` (its own, else the ``all`` one)."""
        return self.faults.fault_for(operation)
