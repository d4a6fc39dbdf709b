"""ObjectStorage.upload_file, the streaming upload of a local file (tiered segment copies): the
same behaviours against memory, local directory, S3 (a real moto server process) and the
fault-injecting wrapper, plus the local backend's atomicity and memory bound and S3's multipart."""

from __future__ import annotations

import asyncio
import os
import tracemalloc
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import obstore
import pytest

from shoal.objects import local as local_module
from shoal.objects.factory import open_object_storage
from shoal.objects.faulty import FaultyObjectStorage
from shoal.objects.local import COPY_CHUNK, TEMP_PREFIX, LocalObjectStorage
from shoal.objects.memory import MemoryObjectStorage
from shoal.objects.s3 import S3ObjectStorage
from shoal.objects.storage import ByteRange, ObjectStorage, StorageBackendError
from tests.support.moto_server import MotoS3Server, moto_s3_server

BUCKET = "shoal-upload-file-test"
BIG = 12 * 1024 * 1024 + 123  # above the local copy chunk and S3's 5 MiB multipart threshold


@pytest.fixture(scope="module")
def moto() -> Iterator[MotoS3Server]:
    with moto_s3_server() as server:
        server.create_bucket(BUCKET)
        yield server


def s3_storage(server: MotoS3Server) -> ObjectStorage:
    """An S3 backend on a fresh prefix of the shared bucket."""
    return open_object_storage(server.storage_url(BUCKET, f"test-{uuid.uuid4().hex}"))


@pytest.fixture(params=["memory", "local", "s3", "faulty"])
async def storage(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[ObjectStorage]:
    """Each backend, empty (the faulty wrapper with no fault set, over a local directory)."""
    backend: ObjectStorage
    if request.param == "memory":
        backend = MemoryObjectStorage()
    elif request.param == "local":
        backend = LocalObjectStorage(tmp_path / "objects")
    elif request.param == "faulty":
        backend = FaultyObjectStorage(LocalObjectStorage(tmp_path / "objects"))
    else:
        backend = s3_storage(request.getfixturevalue("moto"))
    yield backend
    await backend.close()


# -- shared behaviour -----------------------------------------------------------


@pytest.mark.parametrize("size", [0, 11, BIG], ids=["empty", "small", "12MiB"])
async def test_upload_file_round_trips(storage: ObjectStorage, tmp_path: Path, size: int) -> None:
    payload = os.urandom(size)
    source = tmp_path / "segment.log"
    source.write_bytes(payload)
    await storage.upload_file("tiered/seg.log", source)
    await storage.upload_file("as-str", str(source))  # any str or PathLike
    assert [(i.key, i.size) for i in await storage.list()] == [("as-str", size), ("tiered/seg.log", size)]
    assert await storage.fetch("tiered/seg.log") == payload
    assert await storage.fetch("as-str") == payload
    assert await storage.fetch("tiered/seg.log", ByteRange(5, 3)) == payload[5:8]
    assert source.read_bytes() == payload  # the source is left alone


async def test_upload_file_replaces_existing_object(storage: ObjectStorage, tmp_path: Path) -> None:
    source = tmp_path / "source"
    source.write_bytes(b"from a file, longer")
    await storage.upload("k", b"from bytes")
    await storage.upload_file("k", source)
    assert await storage.fetch("k") == b"from a file, longer"
    source.write_bytes(b"shorter")
    await storage.upload_file("k", source)
    assert await storage.fetch("k") == b"shorter"
    assert [(i.key, i.size) for i in await storage.list()] == [("k", 7)]


async def test_upload_file_of_unopenable_source_raises_its_os_error(
    storage: ObjectStorage, tmp_path: Path
) -> None:
    """The caller's error, not the store's: the OSError of opening it, nothing stored or replaced."""
    await storage.upload("kept", b"old")
    for key in ("new", "kept", "dir/new"):
        with pytest.raises(FileNotFoundError):
            await storage.upload_file(key, tmp_path / "no-such-file")
        with pytest.raises(IsADirectoryError):  # any OSError opening the source comes through
            await storage.upload_file(key, tmp_path)
    assert [(i.key, i.size) for i in await storage.list()] == [("kept", 3)]
    assert await storage.fetch("kept") == b"old"


async def test_concurrent_file_uploads(storage: ObjectStorage, tmp_path: Path) -> None:
    payloads = {f"tiered/{i}": os.urandom(1000 * i) for i in range(6)}
    for key, payload in payloads.items():
        (tmp_path / key.replace("/", "-")).write_bytes(payload)
    await asyncio.gather(*(storage.upload_file(k, tmp_path / k.replace("/", "-")) for k in payloads))
    assert [await storage.fetch(k) for k in payloads] == list(payloads.values())


# -- local backend ----------------------------------------------------------------


async def test_local_upload_file_copies_in_chunks_then_renames(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Chunk boundaries lose nothing; the target appears only by renaming the complete temp file."""
    storage = LocalObjectStorage(tmp_path / "root")
    payload = os.urandom(1000)
    source = tmp_path / "source"
    source.write_bytes(payload)
    seen: list[tuple[str, bool, bytes]] = []
    real_replace = os.replace

    def spying_replace(src: str, dst: str | Path) -> None:
        seen.append((Path(src).name, Path(dst).exists(), Path(src).read_bytes()))
        real_replace(src, dst)

    monkeypatch.setattr(local_module, "COPY_CHUNK", 7)  # 1000 bytes: 142 full chunks and a short one
    monkeypatch.setattr(local_module.os, "replace", spying_replace)
    await storage.upload_file("x/obj", source)
    [(tmp_name, target_existed, tmp_content)] = seen
    assert tmp_name.startswith(TEMP_PREFIX) and not target_existed and tmp_content == payload
    assert await storage.fetch("x/obj") == payload


async def test_local_failed_upload_file_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failed rename or a read error mid-copy: StorageBackendError, no object, no temp file."""
    storage = LocalObjectStorage(tmp_path / "root")
    source = tmp_path / "source"
    source.write_bytes(os.urandom(3 * COPY_CHUNK + 5))
    await storage.upload("wal/obj", b"previous")

    def failing_replace(src: str, dst: str | Path) -> None:
        raise OSError(28, "No space left on device")

    with monkeypatch.context() as patch:
        patch.setattr(local_module.os, "replace", failing_replace)
        with pytest.raises(StorageBackendError, match="No space left"):
            await storage.upload_file("wal/obj", source)

    real_copy = local_module._copy_chunks

    def copy_then_fail(src: object, dst: object) -> None:
        real_copy(src, dst)  # type: ignore[arg-type]
        raise OSError(5, "Input/output error")

    with monkeypatch.context() as patch:
        patch.setattr(local_module, "_copy_chunks", copy_then_fail)
        with pytest.raises(StorageBackendError, match="Input/output error"):
            await storage.upload_file("wal/obj", source)
        with pytest.raises(StorageBackendError):
            await storage.upload_file("wal/new", source)

    assert sorted(p.name for p in (tmp_path / "root" / "wal").iterdir()) == ["obj"]  # no temp files
    assert await storage.fetch("wal/obj") == b"previous"


async def test_local_upload_file_of_missing_source_touches_nothing(tmp_path: Path) -> None:
    storage = LocalObjectStorage(tmp_path / "root")
    with pytest.raises(FileNotFoundError):
        await storage.upload_file("a/b/obj", tmp_path / "missing")
    with pytest.raises(IsADirectoryError):
        await storage.upload_file("a/b/obj", tmp_path)
    assert not (tmp_path / "root").exists()  # not even the key's directories


async def test_local_upload_file_memory_is_bounded(tmp_path: Path) -> None:
    """Python memory of a file upload stays near one chunk, however large the file."""
    storage = LocalObjectStorage(tmp_path / "root")
    source = tmp_path / "big"
    with open(source, "wb") as f:
        f.truncate(32 * COPY_CHUNK)  # sparse: cheap to create, still read in full
    tracemalloc.start()
    try:
        await storage.upload_file("big", source)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 3 * COPY_CHUNK
    assert [(i.key, i.size) for i in await storage.list()] == [("big", 32 * COPY_CHUNK)]


# -- S3 backend -------------------------------------------------------------------


async def test_s3_large_file_upload_is_multipart(moto: MotoS3Server, tmp_path: Path) -> None:
    """A file above 5 MiB goes up in 5 MiB parts (S3 shows a multipart ETag, ``"<md5>-<parts>"``)."""
    storage = s3_storage(moto)
    assert isinstance(storage, S3ObjectStorage)
    source = tmp_path / "segment.log"
    payload = os.urandom(BIG)
    source.write_bytes(payload)
    await storage.upload_file("seg.log", source)
    (tmp_path / "small").write_bytes(b"small")
    await storage.upload_file("small", tmp_path / "small")
    store = storage._open_store()
    assert (await obstore.head_async(store, "seg.log"))["e_tag"].strip('"').endswith("-3")
    assert "-" not in (await obstore.head_async(store, "small"))["e_tag"]  # one plain PUT
    assert await storage.fetch("seg.log") == payload
    await storage.close()
