"""FaultyObjectStorage: injected failures and latency, per operation, set in code or by control file."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from shoal.faults import FaultInjector, FaultPlan
from shoal.objects.factory import open_object_storage
from shoal.objects.faulty import Fault, FaultyObjectStorage, parse_control, write_control_file
from shoal.objects.local import LocalObjectStorage
from shoal.objects.memory import MemoryObjectStorage
from shoal.objects.storage import ByteRange, ObjectStorage, StorageBackendError


async def outcomes(storage: FaultyObjectStorage, calls: int) -> list[bool]:
    """True for each fetch that succeeded."""
    result = []
    for _ in range(calls):
        try:
            await storage.fetch("k")
            result.append(True)
        except StorageBackendError:
            result.append(False)
    return result


async def test_passes_through_without_faults() -> None:
    inner = MemoryObjectStorage()
    storage = FaultyObjectStorage(inner)
    assert isinstance(storage, ObjectStorage)
    await storage.upload("wal/a", b"hello")
    assert await storage.fetch("wal/a", ByteRange(1, 3)) == b"ell"
    assert [o.key for o in await storage.list("wal/")] == ["wal/a"]
    await storage.delete(iter(["wal/a"]))
    assert await inner.list() == []
    assert storage.injected == {"upload": 0, "fetch": 0, "delete": 0, "list": 0}


async def test_failing_upload_stores_nothing_unless_after() -> None:
    inner = MemoryObjectStorage()
    storage = FaultyObjectStorage(inner)
    storage.set_fault("upload", Fault(failure_rate=1.0))
    with pytest.raises(StorageBackendError, match="injected upload failure"):
        await storage.upload("wal/a", b"x")
    assert await inner.list() == []
    # "after": the object lands, the caller still sees an error (how orphans are born).
    storage.set_fault("upload", Fault(failure_rate=1.0, after=True))
    with pytest.raises(StorageBackendError):
        await storage.upload("wal/b", b"x")
    assert [o.key for o in await inner.list()] == ["wal/b"]
    assert storage.injected["upload"] == 2
    # Other operations are untouched; removing the fault heals uploads.
    assert await storage.fetch("wal/b") == b"x"
    storage.set_fault("upload", None)
    await storage.upload("wal/c", b"y")


async def test_upload_faults_apply_to_upload_file(tmp_path: Path) -> None:
    """upload_file is an upload for the injector: same faults, same counter, same "after"."""
    source = tmp_path / "segment.log"
    source.write_bytes(b"segment bytes")
    inner = MemoryObjectStorage()
    storage = FaultyObjectStorage(inner)
    await storage.upload_file("tiered/a", source)  # no fault: passes through
    assert await inner.fetch("tiered/a") == b"segment bytes"

    storage.set_fault("upload", Fault(failure_rate=1.0))
    with pytest.raises(StorageBackendError, match="injected upload failure"):
        await storage.upload_file("tiered/b", source)
    assert [o.key for o in await inner.list()] == ["tiered/a"]
    storage.set_fault("upload", Fault(failure_rate=1.0, after=True))
    with pytest.raises(StorageBackendError):
        await storage.upload_file("tiered/c", source)
    assert [o.key for o in await inner.list()] == ["tiered/a", "tiered/c"]  # landed, answer lost
    assert storage.injected["upload"] == 2

    storage.set_fault("upload", Fault(latency_ms=60))
    started = time.monotonic()
    await storage.upload_file("tiered/d", source)
    assert time.monotonic() - started >= 0.055
    storage.clear()
    with pytest.raises(FileNotFoundError):  # the inner backend's answer comes through unchanged
        await storage.upload_file("tiered/e", tmp_path / "missing")


async def test_upload_file_fault_by_control_file(tmp_path: Path) -> None:
    control = tmp_path / "ctl.json"
    source = tmp_path / "segment.log"
    source.write_bytes(b"x")
    storage = open_object_storage(f"faulty+file://{tmp_path / 'objects'}?control={control}")
    write_control_file(control, {"upload": Fault(failure_rate=1.0)})
    with pytest.raises(StorageBackendError):
        await storage.upload_file("tiered/a", source)
    assert not (tmp_path / "objects" / "tiered" / "a").exists()
    control.unlink()
    await storage.upload_file("tiered/a", source)
    assert (tmp_path / "objects" / "tiered" / "a").read_bytes() == b"x"
    await storage.close()


async def test_fraction_is_deterministic_per_seed() -> None:
    inner = MemoryObjectStorage()
    await inner.upload("k", b"v")
    runs = []
    for _ in range(2):
        storage = FaultyObjectStorage(inner.share(), seed=42)
        storage.set_fault("fetch", Fault(failure_rate=0.3))
        runs.append(await outcomes(storage, 200))
    assert runs[0] == runs[1]
    assert 30 < runs[0].count(False) < 90
    other = FaultyObjectStorage(inner.share(), seed=43)
    other.set_fault("fetch", Fault(failure_rate=0.3))
    assert await outcomes(other, 200) != runs[0]


async def test_all_applies_where_no_operation_fault_is_set() -> None:
    inner = MemoryObjectStorage()
    await inner.upload("k", b"v")
    storage = FaultyObjectStorage(inner)
    storage.set_fault("all", Fault(failure_rate=1.0))
    storage.set_fault("fetch", Fault(failure_rate=0.0))
    assert await storage.fetch("k") == b"v"
    with pytest.raises(StorageBackendError):
        await storage.list()
    with pytest.raises(StorageBackendError):
        await storage.delete(["k"])
    storage.clear()
    await storage.delete(["k"])
    with pytest.raises(ValueError):
        storage.set_fault("rename", Fault())
    with pytest.raises(ValueError):
        Fault(failure_rate=1.5)


async def test_latency_is_added() -> None:
    storage = FaultyObjectStorage(MemoryObjectStorage())
    storage.set_fault("list", Fault(latency_ms=60))
    started = time.monotonic()
    assert await storage.list() == []
    assert time.monotonic() - started >= 0.055


async def test_control_file_drives_faults(tmp_path: Path) -> None:
    control = tmp_path / "ctl.json"
    inner = MemoryObjectStorage()
    storage = FaultyObjectStorage(inner, control_file=control)
    await storage.upload("k", b"v")  # no file yet: no faults

    write_control_file(control, {"fetch": Fault(failure_rate=1.0)}, seed=1)
    with pytest.raises(StorageBackendError):
        await storage.fetch("k")
    await storage.upload("k2", b"v")

    write_control_file(control, {"upload": Fault(failure_rate=1.0)})
    assert await storage.fetch("k") == b"v"
    with pytest.raises(StorageBackendError):
        await storage.upload("k3", b"v")

    # A malformed file is ignored (the last good state stays), a removed one clears everything.
    control.write_text("{not json")
    with pytest.raises(StorageBackendError):
        await storage.upload("k3", b"v")
    control.unlink()
    await storage.upload("k3", b"v")
    assert storage.injected == {"upload": 2, "fetch": 1, "delete": 0, "list": 0}


async def test_control_file_seed_makes_runs_reproducible(tmp_path: Path) -> None:
    control = tmp_path / "ctl.json"
    inner = MemoryObjectStorage()
    await inner.upload("k", b"v")
    storage = FaultyObjectStorage(inner, control_file=control)
    write_control_file(control, {"fetch": Fault(failure_rate=0.5)}, seed=9)
    first = await outcomes(storage, 50)
    write_control_file(control, {"fetch": Fault(failure_rate=0.5)}, seed=9)  # a reload re-seeds
    assert await outcomes(storage, 50) == first


async def test_factory_scheme(tmp_path: Path) -> None:
    control = tmp_path / "ctl.json"
    write_control_file(control, {"upload": Fault(failure_rate=1.0)})
    storage = open_object_storage(f"faulty+file://{tmp_path / 'objects'}?control={control}&seed=5")
    assert isinstance(storage, FaultyObjectStorage)
    assert isinstance(storage.inner, LocalObjectStorage)
    with pytest.raises(StorageBackendError):
        await storage.upload("wal/a", b"x")
    assert not (tmp_path / "objects" / "wal" / "a").exists()
    await storage.close()

    memory = open_object_storage("faulty+memory://")
    assert isinstance(memory, FaultyObjectStorage) and isinstance(memory.inner, MemoryObjectStorage)
    await memory.upload("a", b"x")
    with pytest.raises(ValueError):
        open_object_storage("faulty+://x")
    with pytest.raises(ValueError):
        open_object_storage("faulty+memory://?seed=-1")
    with pytest.raises(ValueError):
        open_object_storage("faulty+memory://?seed=1&seed=2")


def test_injector_is_generic() -> None:
    """shoal.faults knows no operation names of its own: each wrapper brings its own."""
    injector = FaultInjector(("read", "write"), seed=1)
    assert injector.decide("read") is None and injector.plan("write") == FaultPlan()
    injector.set_fault("all", Fault(failure_rate=1.0, latency_ms=5))
    assert injector.plan("write") == FaultPlan(0.005, Fault(failure_rate=1.0, latency_ms=5))
    injector.set_fault("read", Fault(latency_ms=20))
    assert injector.plan("read") == FaultPlan(0.02, None)
    assert injector.injected == {"read": 0, "write": 1}
    with pytest.raises(ValueError):
        injector.decide("upload")
    with pytest.raises(ValueError):
        FaultInjector(("all",))


def test_parse_control_checks_operations() -> None:
    assert parse_control('{"seed": 3, "upload": {"after": true}}') == (3, {"upload": Fault(after=True)})
    for bad in ('{"rename": {}}', '{"seed": "x"}', '{"upload": {"rate": 1}}', "[]", '{"fetch": 1}'):
        with pytest.raises(ValueError):
            parse_control(bad)
