"""The ObjectStorage backends (KIP-1163): one set of behaviours run against memory,
local directory, S3 (a real moto server process) and the fault-injecting wrapper (with no
fault set, over a local directory), plus backend-specific checks. ``upload_file`` has its
own module, test_objects_upload_file.py."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from shoal.objects import _durable
from shoal.objects import local as local_module
from shoal.objects.factory import open_object_storage
from shoal.objects.faulty import FaultyObjectStorage
from shoal.objects.local import TEMP_PREFIX, LocalObjectStorage
from shoal.objects.memory import MemoryObjectStorage
from shoal.objects.s3 import S3ObjectStorage
from shoal.objects.storage import (
    ByteRange,
    ObjectInfo,
    ObjectNotFoundError,
    ObjectStorage,
    StorageBackendError,
)

# `tests` is not a package and pytest only puts this file's directory on sys.path.
_PROJECT_ROOT = str(Path(__file__).resolve().parents[2])
if _PROJECT_ROOT not in sys.path:
    sys.path.insert(0, _PROJECT_ROOT)

from tests.support.moto_server import FAKE_AWS_ENV, MotoS3Server, moto_s3_server  # noqa: E402

BUCKET = "shoal-test"


def s3_storage(
    server: MotoS3Server, prefix: str, *, bucket: str = BUCKET, fast_fail: bool = False
) -> S3ObjectStorage:
    """An S3 backend on the moto server; ``fast_fail`` shrinks timeouts for failure tests."""
    return S3ObjectStorage(
        bucket,
        prefix=prefix,
        endpoint=server.url,
        access_key_id=FAKE_AWS_ENV["AWS_ACCESS_KEY_ID"],
        secret_access_key=FAKE_AWS_ENV["AWS_SECRET_ACCESS_KEY"],
        connect_timeout=1.0 if fast_fail else 3.0,
        request_timeout=1.0 if fast_fail else 15.0,
        max_retries=1 if fast_fail else 3,
        retry_timeout=2.0 if fast_fail else 10.0,
    )


@pytest.fixture(scope="module")
def moto() -> Iterator[MotoS3Server]:
    with moto_s3_server() as server:
        server.create_bucket(BUCKET)
        yield server


@pytest.fixture(params=["memory", "local", "s3", "faulty"])
async def storage(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[ObjectStorage]:
    """Each backend, empty; S3 tests get a fresh prefix in the shared bucket."""
    backend: ObjectStorage
    if request.param == "memory":
        backend = MemoryObjectStorage()
    elif request.param == "local":
        backend = LocalObjectStorage(tmp_path / "objects")
    elif request.param == "faulty":
        backend = FaultyObjectStorage(LocalObjectStorage(tmp_path / "objects"))
    else:
        server: MotoS3Server = request.getfixturevalue("moto")
        backend = s3_storage(server, f"test-{uuid.uuid4().hex}")
    yield backend
    await backend.close()


# -- shared behaviour -----------------------------------------------------------


async def test_is_an_object_storage(storage: ObjectStorage) -> None:
    assert isinstance(storage, ObjectStorage)


async def test_upload_then_fetch_whole(storage: ObjectStorage) -> None:
    await storage.upload("obj", b"hello world")
    await storage.upload("view", memoryview(b"0123456789")[2:6])
    await storage.upload("empty", b"")
    assert await storage.fetch("obj") == b"hello world"
    assert await storage.fetch("view") == b"2345"
    assert await storage.fetch("empty") == b""
    assert isinstance(await storage.fetch("obj"), bytes)


async def test_upload_replaces_existing_object(storage: ObjectStorage) -> None:
    await storage.upload("k", b"first version")
    await storage.upload("k", b"second")
    assert await storage.fetch("k") == b"second"
    assert [(i.key, i.size) for i in await storage.list()] == [("k", 6)]


@pytest.mark.parametrize(
    ("offset", "size", "expected"),
    [
        (0, 11, b"hello world"),
        (0, 5, b"hello"),
        (6, 5, b"world"),
        (4, 3, b"o w"),
        (10, 1, b"d"),
        (6, 100, b"world"),  # end past the object: clipped like S3
        (11, 5, b""),  # starts exactly at the end
        (50, 5, b""),  # starts past the end
        (3, 0, b""),  # empty range
    ],
)
async def test_fetch_range(storage: ObjectStorage, offset: int, size: int, expected: bytes) -> None:
    await storage.upload("obj", b"hello world")
    assert await storage.fetch("obj", ByteRange(offset, size)) == expected


async def test_fetch_range_of_empty_object(storage: ObjectStorage) -> None:
    await storage.upload("empty", b"")
    assert await storage.fetch("empty", ByteRange(0, 10)) == b""


async def test_fetch_missing_raises_not_found(storage: ObjectStorage) -> None:
    await storage.upload("present", b"x")
    for byte_range in (None, ByteRange(0, 4), ByteRange(0, 0), ByteRange(100, 4)):
        with pytest.raises(ObjectNotFoundError):
            await storage.fetch("absent", byte_range)
    with pytest.raises(StorageBackendError):  # the base class catches it too
        await storage.fetch("dir/absent")


async def test_delete_is_idempotent(storage: ObjectStorage) -> None:
    await storage.upload("a", b"1")
    await storage.upload("b", b"2")
    await storage.upload("c/d", b"3")
    await storage.delete(["a", "missing", "c/d", "c/missing/deeper"])
    await storage.delete(["a", "c/d"])  # again: nothing left, still fine
    await storage.delete([])
    await storage.delete(iter(["never-existed"]))
    with pytest.raises(ObjectNotFoundError):
        await storage.fetch("a")
    with pytest.raises(ObjectNotFoundError):
        await storage.fetch("c/d")
    assert [i.key for i in await storage.list()] == ["b"]


async def test_list_with_prefix_and_sizes(storage: ObjectStorage) -> None:
    before = datetime.now(UTC) - timedelta(minutes=5)
    objects = {
        "wal/0001": b"a" * 10,
        "wal/0002": b"b" * 20,
        "walrus": b"c",
        "tiered/t1/0/seg": b"d" * 3,
        "tiered/t1/1/seg": b"e" * 4,
    }
    for key, data in objects.items():
        await storage.upload(key, data)

    everything = await storage.list()
    assert [(i.key, i.size) for i in everything] == sorted((k, len(v)) for k, v in objects.items())
    assert await storage.list("") == everything
    for info in everything:
        assert isinstance(info, ObjectInfo)
        assert info.last_modified.tzinfo is not None
        assert info.last_modified.utcoffset() == timedelta(0)
        assert before <= info.last_modified <= datetime.now(UTC) + timedelta(minutes=5)

    # A plain string prefix, as in S3: "wal" also matches "walrus".
    assert [i.key for i in await storage.list("wal")] == ["wal/0001", "wal/0002", "walrus"]
    assert [i.key for i in await storage.list("wal/")] == ["wal/0001", "wal/0002"]
    assert [i.key for i in await storage.list("wal/0001")] == ["wal/0001"]
    assert [i.key for i in await storage.list("tiered/t1/")] == ["tiered/t1/0/seg", "tiered/t1/1/seg"]
    assert [i.key for i in await storage.list("tiered/t1/1")] == ["tiered/t1/1/seg"]
    assert await storage.list("nothing/") == []
    assert await storage.list("zzz") == []


async def test_keys_with_slashes(storage: ObjectStorage) -> None:
    await storage.upload("a/b/c/object-1", b"deep")
    await storage.upload("a/object-2", b"shallow")
    assert await storage.fetch("a/b/c/object-1") == b"deep"
    assert await storage.fetch("a/object-2", ByteRange(1, 3)) == b"hal"
    assert [i.key for i in await storage.list("a/")] == ["a/b/c/object-1", "a/object-2"]
    with pytest.raises(ObjectNotFoundError):
        await storage.fetch("a/b")  # a "directory" is not an object


@pytest.mark.parametrize(
    "bad_key", ["", "/abs", "../escape", "a/../../b", "a//b", "a/", "./a", "a\\b", "a\nb"]
)
async def test_invalid_keys_are_rejected(storage: ObjectStorage, bad_key: str, tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        await storage.upload(bad_key, b"x")
    source = tmp_path / "source"
    source.write_bytes(b"x")
    with pytest.raises(ValueError):
        await storage.upload_file(bad_key, source)
    with pytest.raises(ValueError):
        await storage.fetch(bad_key)
    with pytest.raises(ValueError):
        await storage.delete([bad_key])


async def test_concurrent_uploads(storage: ObjectStorage) -> None:
    payloads = {f"wal/{uuid.uuid4()}": os.urandom(1000 + i) for i in range(8)}
    await asyncio.gather(*(storage.upload(k, v) for k, v in payloads.items()))
    assert {i.key: i.size for i in await storage.list("wal/")} == {k: len(v) for k, v in payloads.items()}
    fetched = await asyncio.gather(*(storage.fetch(k, ByteRange(100, 50)) for k in payloads))
    assert fetched == [v[100:150] for v in payloads.values()]


async def test_calls_after_close_fail(storage: ObjectStorage, tmp_path: Path) -> None:
    await storage.upload("k", b"v")
    source = tmp_path / "source"
    source.write_bytes(b"v")
    await storage.close()
    with pytest.raises(StorageBackendError):
        await storage.fetch("k")
    with pytest.raises(StorageBackendError):
        await storage.upload("k2", b"v")
    with pytest.raises(StorageBackendError):
        await storage.upload_file("k3", source)
    with pytest.raises(StorageBackendError):
        await storage.list()
    with pytest.raises(StorageBackendError):
        await storage.delete(["k"])


def test_byte_range() -> None:
    assert ByteRange(10, 5).end == 15
    with pytest.raises(ValueError):
        ByteRange(-1, 5)
    with pytest.raises(ValueError):
        ByteRange(0, -5)
    with pytest.raises(AttributeError):
        ByteRange(0, 1).offset = 3  # type: ignore[misc]


# -- local backend ----------------------------------------------------------------


async def test_local_uses_subdirectories_and_hides_temp_files(tmp_path: Path) -> None:
    storage = LocalObjectStorage(tmp_path)
    await storage.upload("wal/abc", b"data")
    assert (tmp_path / "wal" / "abc").read_bytes() == b"data"
    # A crashed upload leaves a partially written temp file behind: never listed.
    (tmp_path / "wal" / f"{TEMP_PREFIX}crashed").write_bytes(b"partial")
    (tmp_path / f"{TEMP_PREFIX}top").write_bytes(b"partial")
    assert [i.key for i in await storage.list()] == ["wal/abc"]
    assert [i.key for i in await storage.list("wal/")] == ["wal/abc"]
    with pytest.raises(ValueError):
        await storage.fetch(f"wal/{TEMP_PREFIX}crashed")
    # The successful upload left no temp file of its own.
    assert sorted(p.name for p in (tmp_path / "wal").iterdir()) == [f"{TEMP_PREFIX}crashed", "abc"]


async def test_a_local_store_removes_temp_files_of_dead_writers_at_its_first_upload(tmp_path: Path) -> None:
    """A process killed mid-upload leaves its temp file; the next process's first upload deletes
    it, and only it: uploads of live processes (this one) and of other hosts stay. Opening the
    store alone (a reader) walks nothing."""
    import subprocess

    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(done.stdout)
    live_prefix = local_module._temp_prefix()
    host = local_module._HOST
    (tmp_path / "wal").mkdir()
    dead = tmp_path / "wal" / f"{TEMP_PREFIX}{host}-{dead_pid}-abc123"
    live = tmp_path / "wal" / f"{live_prefix}def456"
    elsewhere = tmp_path / f"{TEMP_PREFIX}otherhost-{dead_pid}-ghi789"
    unnamed = tmp_path / f"{TEMP_PREFIX}crashed"
    for f in (dead, live, elsewhere, unnamed):
        f.write_bytes(b"partial")
    storage = LocalObjectStorage(tmp_path)
    await asyncio.sleep(0.2)
    assert dead.exists()  # not at open
    await storage.upload("wal/first", b"x")
    deadline = time.monotonic() + 10
    while dead.exists() and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    assert not dead.exists()
    assert live.exists() and elsewhere.exists() and unnamed.exists()


async def test_local_upload_never_shows_a_partial_object(tmp_path: Path) -> None:
    """The object appears only whole: a reader polling its path while it is written never sees
    it shorter than the payload, and no temp file stays behind."""
    storage = LocalObjectStorage(tmp_path)
    payload = os.urandom(16 * 1024 * 1024)
    target = tmp_path / "x" / "y" / "obj"
    sizes: list[int] = []
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            with contextlib.suppress(FileNotFoundError):
                sizes.append(target.stat().st_size)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        await storage.upload("x/y/obj", payload)
    finally:
        done.set()
        watcher.join()
    assert all(size == len(payload) for size in sizes)
    assert await storage.fetch("x/y/obj") == payload
    assert [p.name for p in target.parent.iterdir()] == ["obj"]
    assert target.stat().st_mode & 0o777 == 0o600  # as mkstemp made it


def test_durable_write_new_fails_cleanly(tmp_path: Path) -> None:
    """Each failing step raises OSError naming its path and leaves no temp file."""
    temp = tmp_path / f"{TEMP_PREFIX}t"
    with pytest.raises(FileNotFoundError) as missing:
        _durable.write_new(tmp_path / "nope" / "t", tmp_path / "nope" / "o", tmp_path / "nope", b"x", 1 << 20)
    assert missing.value.filename == str(tmp_path / "nope" / "t")
    (tmp_path / "dir" / "child").mkdir(parents=True)
    with pytest.raises(OSError) as onto_dir:  # rename onto a non-empty directory
        _durable.write_new(temp, tmp_path / "dir", tmp_path, b"x" * 3_000_000, 1 << 20)
    assert onto_dir.value.filename == str(temp)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dir"]
    _durable.write_new(temp, tmp_path / "obj", tmp_path, memoryview(b"abc"), 0)
    assert (tmp_path / "obj").read_bytes() == b"abc"
    assert not temp.exists()


async def test_local_failed_upload_leaves_nothing(tmp_path: Path) -> None:
    storage = LocalObjectStorage(tmp_path)
    await storage.upload("wal/obj/inner", b"x")  # "wal/obj" is a directory: the rename fails
    with pytest.raises(StorageBackendError, match="upload of wal/obj"):
        await storage.upload("wal/obj", b"data")
    assert [i.key for i in await storage.list()] == ["wal/obj/inner"]
    assert sorted(p.name for p in (tmp_path / "wal").iterdir()) == ["obj"]  # temp file cleaned up


async def test_local_upload_remakes_a_removed_directory(tmp_path: Path) -> None:
    storage = LocalObjectStorage(tmp_path)
    await storage.upload("wal/a", b"1")
    shutil.rmtree(tmp_path / "wal")  # e.g. an operator cleaned up
    await storage.upload("wal/b", b"2")
    assert await storage.fetch("wal/b") == b"2"


async def test_local_delete_removes_the_directories_it_empties(tmp_path: Path) -> None:
    storage = LocalObjectStorage(tmp_path)
    await storage.upload("tiered/t-1/0/a.log", b"1")
    await storage.upload("tiered/t-1/0/a.index", b"2")
    await storage.upload("tiered/t-1/1/b.log", b"3")
    await storage.upload("wal/x", b"4")
    await storage.delete(["tiered/t-1/0/a.log"])
    assert (tmp_path / "tiered/t-1/0").is_dir()  # a.index is still there
    await storage.delete(["tiered/t-1/0/a.index", "wal/x"])
    assert sorted(p.name for p in (tmp_path / "tiered/t-1").iterdir()) == ["1"]
    await storage.delete(["tiered/t-1/1/b.log"])
    # The root's children stay (uploads go on into them); nothing below them is left.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tiered", "wal"]
    assert list((tmp_path / "tiered").iterdir()) == [] and list((tmp_path / "wal").iterdir()) == []
    await storage.upload("tiered/t-1/0/c.log", b"5")  # a pruned directory is made again
    assert await storage.fetch("tiered/t-1/0/c.log") == b"5"


async def test_local_upload_file_remakes_a_directory_pruned_under_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A delete may empty and prune the directory between upload_file making it and creating its
    temp file there: the upload makes it again instead of failing."""
    storage = LocalObjectStorage(tmp_path / "root")
    source = tmp_path / "segment"
    source.write_bytes(b"segment bytes")
    real_mkstemp = tempfile.mkstemp
    pruned: list[str] = []

    def mkstemp_after_a_prune(*args: Any, **kwargs: Any) -> tuple[int, str]:
        if not pruned:
            pruned.append(kwargs["dir"])
            os.rmdir(kwargs["dir"])
        return real_mkstemp(*args, **kwargs)

    monkeypatch.setattr(tempfile, "mkstemp", mkstemp_after_a_prune)
    await storage.upload_file("tiered/t-1/0/a.log", source)
    assert pruned and await storage.fetch("tiered/t-1/0/a.log") == b"segment bytes"


async def test_local_fsyncs_file_and_directories(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    storage = LocalObjectStorage(tmp_path / "root")
    synced_dirs: list[Path] = []
    real_fsync_dir = local_module._fsync_dir

    def spy(directory: Path) -> None:
        synced_dirs.append(Path(directory))
        real_fsync_dir(directory)

    monkeypatch.setattr(local_module, "_fsync_dir", spy)
    await storage.upload("a/b/obj", b"data")
    root = tmp_path / "root"
    # The object's directory is synced inside _durable; then the parents of each new directory.
    assert set(synced_dirs) == {tmp_path, root, root / "a"}
    synced_dirs.clear()
    await storage.upload_file("c/obj", root / "a" / "b" / "obj")
    assert synced_dirs[0] == root / "c"
    assert set(synced_dirs[1:]) == {root}


async def test_local_key_cannot_be_object_and_directory(tmp_path: Path) -> None:
    storage = LocalObjectStorage(tmp_path)
    await storage.upload("a", b"file")
    with pytest.raises(StorageBackendError):
        await storage.upload("a/b", b"under a file")
    await storage.upload("d/e", b"x")
    with pytest.raises(StorageBackendError):
        await storage.upload("d", b"onto a directory")
    await storage.delete(["d"])  # a directory is not an object: nothing to delete
    assert await storage.fetch("d/e") == b"x"


async def test_local_never_escapes_root(tmp_path: Path) -> None:
    root = tmp_path / "root"
    outside = tmp_path / "outside"
    outside.write_bytes(b"secret")
    storage = LocalObjectStorage(root)
    for key in ("../outside", "/" + str(outside).lstrip("/"), "a/../../outside"):
        with pytest.raises(ValueError):
            await storage.fetch(key)
        with pytest.raises(ValueError):
            await storage.delete([key])
    with pytest.raises(ValueError):
        await storage.list("../")
    assert outside.read_bytes() == b"secret"


async def test_local_list_missing_root_is_empty(tmp_path: Path) -> None:
    assert await LocalObjectStorage(tmp_path / "not-yet").list() == []


# -- memory backend ---------------------------------------------------------------


async def test_memory_copies_data_and_shares_handles() -> None:
    storage = MemoryObjectStorage()
    buffer = bytearray(b"original")
    await storage.upload("k", memoryview(buffer))
    buffer[:] = b"mutated!"
    assert await storage.fetch("k") == b"original"
    other = storage.share()
    await storage.close()
    assert await other.fetch("k") == b"original"


# -- factory ------------------------------------------------------------------------


async def test_factory_local_and_memory(tmp_path: Path) -> None:
    plain = open_object_storage(str(tmp_path / "plain"))
    assert isinstance(plain, LocalObjectStorage) and plain.root == tmp_path / "plain"
    from_url = open_object_storage(f"file://{tmp_path}/url%20dir")
    assert isinstance(from_url, LocalObjectStorage) and from_url.root == tmp_path / "url dir"
    await from_url.upload("k", b"v")
    assert (tmp_path / "url dir" / "k").read_bytes() == b"v"
    assert isinstance(open_object_storage("memory://"), MemoryObjectStorage)


@pytest.mark.parametrize(
    "url",
    [
        "",
        "ftp://host/x",
        "gs://bucket",
        "file://otherhost/x",
        "s3:///no-bucket",
        "s3://b?nonsense=1",
        "s3://b?allow_http=maybe",
        "s3://b?request_timeout=soon",
        "s3://b?region=a&region=b",
    ],
)
def test_factory_rejects_bad_urls(url: str) -> None:
    with pytest.raises(ValueError):
        open_object_storage(url)


async def test_factory_s3_url_against_moto(moto: MotoS3Server) -> None:
    prefix = f"factory-{uuid.uuid4().hex}/nested"
    storage = open_object_storage(moto.storage_url(BUCKET, prefix))
    assert isinstance(storage, S3ObjectStorage)
    await storage.upload("k", b"via url")
    assert await storage.fetch("k") == b"via url"
    # The prefix is really applied in the bucket: a store at the bucket root sees the full key.
    root_view = s3_storage(moto, "")
    assert await root_view.fetch(f"{prefix}/k") == b"via url"
    assert [i.key for i in await root_view.list(f"{prefix}/")] == [f"{prefix}/k"]
    await storage.close()
    await root_view.close()


async def test_factory_s3_credentials_from_env(moto: MotoS3Server, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in FAKE_AWS_ENV.items():
        monkeypatch.setenv(name, value)
    storage = open_object_storage(f"s3://{BUCKET}/env-{uuid.uuid4().hex}?endpoint={moto.url}")
    await storage.upload("k", b"env creds")
    assert await storage.fetch("k", ByteRange(4, 100)) == b"creds"
    await storage.close()


# -- S3 backend specifics ---------------------------------------------------------


async def test_s3_large_object_uses_multipart_and_stays_whole(moto: MotoS3Server) -> None:
    storage = s3_storage(moto, f"big-{uuid.uuid4().hex}")
    payload = os.urandom(6 * 1024 * 1024)  # above obstore's 5 MiB multipart threshold
    await storage.upload("big", payload)
    assert [(i.key, i.size) for i in await storage.list()] == [("big", len(payload))]
    assert (
        await storage.fetch("big", ByteRange(5 * 1024 * 1024 - 10, 20))
        == payload[5 * 1024 * 1024 - 10 :][:20]
    )
    assert await storage.fetch("big") == payload
    await storage.close()


async def test_s3_missing_bucket_is_a_backend_error_not_a_missing_object(
    moto: MotoS3Server, tmp_path: Path
) -> None:
    storage = s3_storage(moto, "", bucket=f"no-such-bucket-{uuid.uuid4().hex[:8]}")
    source = tmp_path / "source"
    source.write_bytes(os.urandom(6 * 1024 * 1024))  # a multipart upload: fails at its first request
    calls = (storage.fetch("k"), storage.upload("k", b"v"), storage.upload_file("k", source), storage.list())
    for call in calls:
        with pytest.raises(StorageBackendError) as info:
            await call
        assert not isinstance(info.value, ObjectNotFoundError)
        assert "does not exist" in str(info.value) or "NoSuchBucket" in str(info.value)
    await storage.close()


async def _expect_backend_error(call: Awaitable[object], within: float) -> float:
    """Await ``call``, require a StorageBackendError within ``within`` seconds, return the time taken."""
    start = time.monotonic()
    with pytest.raises(StorageBackendError):
        await asyncio.wait_for(call, timeout=within)
    return time.monotonic() - start


async def test_s3_unreachable_server_surfaces_errors_quickly() -> None:
    """A hung store times out, a recovered one works again, a stopped one is refused: never a hang."""
    with moto_s3_server() as server:
        server.create_bucket(BUCKET)
        storage = s3_storage(server, "failures", fast_fail=True)
        await storage.upload("k", b"before")

        server.pause()
        try:
            await _expect_backend_error(storage.fetch("k"), within=15)
            await _expect_backend_error(storage.upload("k2", b"x"), within=15)
            await _expect_backend_error(storage.upload_file("k2", __file__), within=15)
        finally:
            server.resume()
        assert await storage.fetch("k") == b"before"

        server.stop()
        for call in (
            storage.fetch("k"),
            storage.fetch("k", ByteRange(0, 3)),
            storage.upload("k3", b"x"),
            storage.list(),
            storage.delete(["k"]),
        ):
            elapsed = await _expect_backend_error(call, within=15)
            assert elapsed < 10
        await storage.close()


def test_storage_url_secrets_are_redacted_for_logs() -> None:
    from shoal.objects.factory import redact_storage_url

    url = "s3://bucket/prefix?region=eu-west-1&access_key_id=AKIA&secret_access_key=s3cr3t&session_token=t0ken-value"
    redacted = redact_storage_url(url)
    assert "s3cr3t" not in redacted and "t0ken-value" not in redacted
    assert "region=eu-west-1" in redacted and "access_key_id=AKIA" in redacted
    for plain in ("file:///tmp/objects", "s3://bucket/prefix?region=us-east-1", "memory://"):
        assert redact_storage_url(plain) == plain
