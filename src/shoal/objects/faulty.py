"""An ObjectStorage wrapper that injects failures and latency, for failure-scenario tests.

KIP-1163's test plan asks for runs where object storage is "inaccessible or partially
accessible", with the focus on correctness. This wrapper makes any backend behave so,
per operation (``upload``, ``fetch``, ``delete``, ``list``): a fraction of calls fail
with ``StorageBackendError`` (as a real backend's I/O or HTTP error does), optionally
after the real call ran ("the upload happened but its answer was lost", which is how
orphans appear), and calls can be slowed down. ``upload_file`` is an ``upload`` here:
the same faults pick it, so control files and counters need no new operation name.

The decisions, the JSON control file and its format are ``shoal.faults``' (shared with
the Batch Coordinator wrapper); for a broker running as a child process the control file
is named in the storage URL (``faulty+file:///dir?control=/path/ctl.json&seed=7``, see
``objects.factory``).
"""

from __future__ import annotations

import asyncio
import builtins
import os
from collections.abc import Awaitable, Callable, Iterable, Mapping
from pathlib import Path
from typing import TypeVar

from shoal.faults import Fault, FaultControlled, FaultInjector
from shoal.faults import parse_control as _parse_control
from shoal.faults import write_control_file as _write_control_file
from shoal.objects.storage import ByteRange, ObjectInfo, ObjectStorage, StorageBackendError

__all__ = ["OPERATIONS", "Fault", "FaultyObjectStorage", "parse_control", "write_control_file"]

OPERATIONS = ("upload", "fetch", "delete", "list")

T = TypeVar("T")


def parse_control(text: str) -> tuple[int, dict[str, Fault]]:
    """(seed, faults by storage operation) from a control file's JSON; ValueError if malformed."""
    return _parse_control(text, OPERATIONS)


def write_control_file(path: str | Path, faults: Mapping[str, Fault], seed: int = 0) -> None:
    """Atomically replace a storage control file; ValueError for an operation storage lacks."""
    _write_control_file(path, faults, seed, operations=OPERATIONS)


class FaultyObjectStorage(FaultControlled):
    """Wraps an ObjectStorage; calls pass through unless a configured fault picks them."""

    def __init__(self, inner: ObjectStorage, *, seed: int = 0, control_file: str | Path | None = None) -> None:
        self.inner = inner
        self.faults = FaultInjector(OPERATIONS, seed=seed, control_file=control_file, name="object storage")

    async def _call(self, operation: str, what: str, call: Callable[[], Awaitable[T]]) -> T:
        plan = self.faults.plan(operation)
        if plan.latency_s > 0:
            await asyncio.sleep(plan.latency_s)
        if plan.failure is None:
            return await call()
        if plan.failure.after:
            await call()
        raise StorageBackendError(f"injected {operation} failure ({what})")

    async def upload(self, key: str, data: bytes | memoryview) -> None:
        """Upload through the inner storage unless a fault picks this call."""
        await self._call("upload", key, lambda: self.inner.upload(key, data))

    async def upload_file(self, key: str, path: str | os.PathLike[str]) -> None:
        """Upload the file through the inner storage unless an ``upload`` fault picks this call."""
        await self._call("upload", key, lambda: self.inner.upload_file(key, path))

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
