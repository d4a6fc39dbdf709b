"""An ObjectStorage wrapper that injects failures and latency, for failure-scenario tests.

KIP-1163's test plan asks for runs where object storage is "inaccessible or partially
accessible", with the focus on correctness. This wrapper makes any backend behave so,
per operation (``upload``, ``fetch``, ``delete``, ``list``): a fraction of calls fail
with ``StorageBackendError`` (as a real backend's I/O or HTTP error does), optionally
after the real call ran ("the upload happened but its answer was lost", which is how
orphans appear), and calls can be slowed down.

Faults are set in code (``set_fault``) or, for a broker running as a child process,
through a JSON control file named in the storage URL
(``faulty+file:///dir?control=/path/ctl.json&seed=7``, see ``objects.factory``). The
file is the whole desired state; it is re-read whenever it changes (checked with one
``stat`` per call), so a test rewrites it (``write_control_file`` does so atomically) and
the broker's next storage call obeys. Its format::

    {"seed": 7,
     "all":    {"failure_rate": 0.1},
     "upload": {"failure_rate": 1.0, "latency_ms": 200, "after": true}}

``all`` applies to every operation without an entry of its own. Decisions come from
one ``random.Random`` per operation, seeded from the seed and the operation's name and
re-seeded on each (re)load, so a run is reproducible given the same calls.
"""

from __future__ import annotations

import asyncio
import builtins
import json
import logging
import os
import random
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from shoal.objects.storage import ByteRange, ObjectInfo, ObjectStorage, StorageBackendError

__all__ = ["OPERATIONS", "Fault", "FaultyObjectStorage", "parse_control", "write_control_file"]

log = logging.getLogger(__name__)

OPERATIONS = ("upload", "fetch", "delete", "list")
_ALL = "all"

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Fault:
    """How one operation misbehaves.

    ``failure_rate``: fraction of calls (0..1) that raise StorageBackendError.
    ``latency_ms``: delay added before every call. ``after``: a failing call first
    runs for real and then raises, so its effect (an uploaded object, a deletion)
    happens although the caller sees an error.
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
        unknown = set(data) - {"failure_rate", "latency_ms", "after"}
        if unknown:
            raise ValueError(f"unknown fault fields {sorted(unknown)}")
        return cls(
            failure_rate=float(data.get("failure_rate", 0.0)),
            latency_ms=float(data.get("latency_ms", 0.0)),
            after=bool(data.get("after", False)),
        )

    def to_json(self) -> dict[str, Any]:
        return {"failure_rate": self.failure_rate, "latency_ms": self.latency_ms, "after": self.after}


def _check_operation(operation: str) -> str:
    if operation not in OPERATIONS and operation != _ALL:
        raise ValueError(f"unknown storage operation {operation!r}; known: {', '.join(OPERATIONS)}, all")
    return operation


def parse_control(text: str) -> tuple[int, dict[str, Fault]]:
    """(seed, faults by operation) from a control file's JSON; ValueError if malformed."""
    data = json.loads(text)
    if not isinstance(data, dict):
        raise ValueError("control file must hold a JSON object")
    seed = data.get("seed", 0)
    if not isinstance(seed, int):
        raise ValueError(f"seed must be an integer, got {seed!r}")
    faults: dict[str, Fault] = {}
    for name, value in data.items():
        if name == "seed":
            continue
        if not isinstance(value, dict):
            raise ValueError(f"fault for {name!r} must be a JSON object")
        faults[_check_operation(name)] = Fault.from_json(value)
    return seed, faults


def write_control_file(path: str | Path, faults: Mapping[str, Fault], seed: int = 0) -> None:
    """Atomically replace the control file (write + rename), so a reader never sees half of it."""
    path = Path(path)
    data: dict[str, Any] = {"seed": seed}
    for operation, fault in faults.items():
        data[_check_operation(operation)] = fault.to_json()
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)


class FaultyObjectStorage:
    """Wraps an ObjectStorage; calls pass through unless a configured fault picks them."""

    def __init__(self, inner: ObjectStorage, *, seed: int = 0, control_file: str | Path | None = None) -> None:
        self.inner = inner
        self._faults: dict[str, Fault] = {}
        self._control = Path(control_file) if control_file is not None else None
        self._control_signature: tuple[int, int, int] | None = None
        self._rngs: dict[str, random.Random] = {}
        self._reseed(seed)
        #: Failures injected so far, per operation (tests assert that faults really fired).
        self.injected: dict[str, int] = dict.fromkeys(OPERATIONS, 0)

    # ------------------------------------------------------------------ configuration

    def _reseed(self, seed: int) -> None:
        self._seed = seed
        self._rngs = {op: random.Random(f"{seed}:{op}") for op in OPERATIONS}

    def set_fault(self, operation: str, fault: Fault | None) -> None:
        """Make ``operation`` (or ``"all"``) misbehave as ``fault``; None removes its fault."""
        _check_operation(operation)
        if fault is None:
            self._faults.pop(operation, None)
        else:
            self._faults[operation] = fault

    def clear(self, seed: int | None = None) -> None:
        """Remove every fault (and re-seed, when a seed is given)."""
        self._faults.clear()
        if seed is not None:
            self._reseed(seed)

    def fault_for(self, operation: str) -> Fault | None:
        """The fault in force for ``operation`` (its own, else the ``all`` one), after reading the control file."""
        self._poll_control()
        return self._faults.get(operation) or self._faults.get(_ALL)

    def _poll_control(self) -> None:
        if self._control is None:
            return
        try:
            st = os.stat(self._control)
        except FileNotFoundError:
            if self._control_signature is not None:
                self._control_signature = None
                self._faults.clear()
            return
        except OSError as exc:
            log.warning("cannot stat fault control file %s: %s; keeping the current faults", self._control, exc)
            return
        signature = (st.st_mtime_ns, st.st_size, st.st_ino)
        if signature == self._control_signature:
            return
        self._control_signature = signature
        try:
            seed, faults = parse_control(self._control.read_text())
        except (OSError, ValueError) as exc:
            log.warning("ignoring fault control file %s: %s; keeping the current faults", self._control, exc)
            return
        self._faults = faults
        self._reseed(seed)
        log.info("storage faults now %s (seed %d)", {op: f.to_json() for op, f in faults.items()}, seed)

    # ------------------------------------------------------------------ injection

    async def _call(self, operation: str, what: str, call: Callable[[], Awaitable[T]]) -> T:
        fault = self.fault_for(operation)
        if fault is None:
            return await call()
        # Always draw, so the decisions of a seed do not depend on the rates in force.
        fails = self._rngs[operation].random() < fault.failure_rate
        if fault.latency_ms > 0:
            await asyncio.sleep(fault.latency_ms / 1000)
        if not fails:
            return await call()
        if fault.after:
            await call()
        self.injected[operation] += 1
        raise StorageBackendError(f"injected {operation} failure ({what})")

    async def upload(self, key: str, data: bytes | memoryview) -> None:
        """Upload through the inner storage unless a fault picks this call."""
        await self._call("upload", key, lambda: self.inner.upload(key, data))

    async def fetch(self, key: str, byte_range: ByteRange | None = None) -> bytes:
        """Fetch through the inner storage unless a fault picks this call."""
        return await self._call("fetch", key, lambda: self.inner.fetch(key, byte_range))

    async def delete(self, keys: Iterable[str]) -> None:
        """Delete through the inner storage unless a fault picks this call."""
        key_list = builtins.list(keys)
        await self._call("delete", f"{len(key_list)} keys", lambda: self.inner.delete(key_list))

    async def list(self, prefix: str = "") -> builtins.list[ObjectInfo]:
        """List through the inner storage unless a fault picks this call."""
        return await self._call("list", repr(prefix), lambda: self.inner.list(prefix))

    async def close(self) -> None:
        """Close the inner storage (never faulted: shutdown must release resources)."""
        await self.inner.close()
