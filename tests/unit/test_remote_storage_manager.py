"""ObjectRemoteStorageManager (KIP-405's RSM on ObjectStorage): one suite run unchanged against the
memory, local-directory and S3 (a real moto server process) backends, plus copies cut short by
injected upload failures."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Iterable, Iterator
from pathlib import Path

import pytest

from shoal.objects.factory import open_object_storage
from shoal.objects.faulty import Fault, FaultyObjectStorage
from shoal.objects.local import LocalObjectStorage
from shoal.objects.memory import MemoryObjectStorage
from shoal.objects.storage import ObjectStorage
from shoal.tiered.api import (
    IndexType,
    LogSegmentData,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteResourceNotFoundError,
    RemoteStorageError,
    RemoteStorageManager,
    TopicIdPartition,
)
from shoal.tiered.storage_manager import ObjectRemoteStorageManager, kafka_uuid
from tests.support.moto_server import MotoS3Server, moto_s3_server

BUCKET = "shoal-tiered-test"
TP = TopicIdPartition(uuid.UUID("0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"), 3, "orders")
LOG = bytes(range(256)) * 40  # 10240 bytes, every offset's value is recognisable
INDEXES = {
    IndexType.OFFSET: b"offset-index",
    IndexType.TIMESTAMP: b"time-index",
    IndexType.TRANSACTION: b"txn-index",
    IndexType.PRODUCER_SNAPSHOT: b"producer-snapshot",
    IndexType.LEADER_EPOCH: b"0\n2\n0 0\n4 57\n",
}


@pytest.fixture(scope="module")
def moto() -> Iterator[MotoS3Server]:
    with moto_s3_server() as server:
        server.create_bucket(BUCKET)
        yield server


@pytest.fixture(params=["memory", "local", "s3"])
async def storage(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[ObjectStorage]:
    """Each backend, empty; S3 tests get a fresh prefix in the shared bucket."""
    backend: ObjectStorage
    if request.param == "memory":
        backend = MemoryObjectStorage()
    elif request.param == "local":
        backend = LocalObjectStorage(tmp_path / "objects")
    else:
        server: MotoS3Server = request.getfixturevalue("moto")
        backend = open_object_storage(server.storage_url(BUCKET, f"rsm-{uuid.uuid4().hex}"))
    yield backend
    await backend.close()


@pytest.fixture
def rsm(storage: ObjectStorage) -> ObjectRemoteStorageManager:
    return ObjectRemoteStorageManager(storage)


def metadata(start: int = 0, end: int = 99, segment_id: uuid.UUID | None = None) -> RemoteLogSegmentMetadata:
    seg = RemoteLogSegmentId(TP, segment_id) if segment_id else RemoteLogSegmentId.generate(TP)
    return RemoteLogSegmentMetadata(
        seg, start, end, max_timestamp_ms=1000, broker_id=1, event_timestamp_ms=2000,
        segment_size_in_bytes=len(LOG), segment_leader_epochs={0: start},
    )


def segment_files(directory: Path, *, optional: bool = True, log: bytes = LOG) -> LogSegmentData:
    """A segment's files on disk; ``optional=False`` leaves out the txn index and producer snapshot."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = {}
    files = [("log", log), *((t.value, c) for t, c in INDEXES.items() if t != IndexType.LEADER_EPOCH)]
    for name, content in files:
        path = directory / f"segment.{name}"
        path.write_bytes(content)
        paths[name] = path
    return LogSegmentData(
        log_segment=paths["log"],
        offset_index=paths[IndexType.OFFSET.value],
        time_index=paths[IndexType.TIMESTAMP.value],
        transaction_index=paths[IndexType.TRANSACTION.value] if optional else None,
        producer_snapshot_index=paths[IndexType.PRODUCER_SNAPSHOT.value] if optional else None,
        leader_epoch_index=INDEXES[IndexType.LEADER_EPOCH],
    )


async def keys(storage: ObjectStorage) -> list[str]:
    return [info.key for info in await storage.list()]


# -- shared behaviour -----------------------------------------------------------


def test_satisfies_the_protocol() -> None:
    manager: RemoteStorageManager = ObjectRemoteStorageManager(MemoryObjectStorage())
    assert manager is not None


async def test_copy_with_every_index(
    rsm: ObjectRemoteStorageManager, storage: ObjectStorage, tmp_path: Path
) -> None:
    md = metadata(start=42, end=141)
    assert await rsm.copy_log_segment_data(md, segment_files(tmp_path)) is None
    stem = f"tiered/orders-{kafka_uuid(TP.topic_id)}/3/00000000000000000042-{kafka_uuid(md.segment_id.id)}"
    suffixes = ["index", "leader-epoch-checkpoint", "log", "snapshot", "timeindex", "txnindex"]
    assert await keys(storage) == [f"{stem}.{s}" for s in suffixes]
    assert sorted(rsm.segment_keys(md)) == await keys(storage)
    assert await rsm.fetch_log_segment(md, 0) == LOG
    for index_type, content in INDEXES.items():
        assert await rsm.fetch_index(md, index_type) == content


async def test_copy_without_optional_indexes(
    rsm: ObjectRemoteStorageManager, storage: ObjectStorage, tmp_path: Path
) -> None:
    md = metadata()
    files = segment_files(tmp_path, optional=False)
    data = LogSegmentData(files.log_segment, files.offset_index, files.time_index, None, None, b"")
    await rsm.copy_log_segment_data(md, data)
    suffixes = [k.rsplit(".", 1)[1] for k in await keys(storage)]
    assert suffixes == ["index", "leader-epoch-checkpoint", "log", "timeindex"]
    assert await rsm.fetch_index(md, IndexType.OFFSET) == INDEXES[IndexType.OFFSET]
    assert await rsm.fetch_index(md, IndexType.LEADER_EPOCH) == b""
    for absent in (IndexType.TRANSACTION, IndexType.PRODUCER_SNAPSHOT):
        with pytest.raises(RemoteResourceNotFoundError):
            await rsm.fetch_index(md, absent)


@pytest.mark.parametrize(
    ("start", "end", "expected"),
    [
        (0, None, LOG),
        (100, None, LOG[100:]),
        (0, 0, LOG[:1]),  # end is inclusive: one byte
        (5, 9, LOG[5:10]),
        (len(LOG) - 1, None, LOG[-1:]),
        (len(LOG) - 1, len(LOG) - 1, LOG[-1:]),
        (len(LOG) - 10, len(LOG) + 100, LOG[-10:]),  # clipped at the end
        (len(LOG), None, b""),
        (len(LOG) + 5, len(LOG) + 10, b""),
    ],
)
async def test_ranged_fetch(
    rsm: ObjectRemoteStorageManager, tmp_path: Path, start: int, end: int | None, expected: bytes
) -> None:
    md = metadata()
    await rsm.copy_log_segment_data(md, segment_files(tmp_path))
    assert await rsm.fetch_log_segment(md, start, end) == expected


async def test_invalid_ranges_are_refused(rsm: ObjectRemoteStorageManager, tmp_path: Path) -> None:
    md = metadata()
    await rsm.copy_log_segment_data(md, segment_files(tmp_path))
    for start, end in ((-1, None), (-1, 5), (10, 9)):
        with pytest.raises(ValueError):
            await rsm.fetch_log_segment(md, start, end)


async def test_large_segment_round_trips(rsm: ObjectRemoteStorageManager, tmp_path: Path) -> None:
    """Above 5 MiB S3 uploads go multipart; ranges across a part boundary still read right."""
    big = os.urandom(6 * 1024 * 1024 + 123)
    md = metadata()
    await rsm.copy_log_segment_data(md, segment_files(tmp_path, log=big))
    boundary = 5 * 1024 * 1024
    assert await rsm.fetch_log_segment(md, boundary - 10, boundary + 9) == big[boundary - 10 : boundary + 10]
    assert await rsm.fetch_log_segment(md, boundary) == big[boundary:]
    assert await rsm.fetch_log_segment(md, 0) == big


async def test_unknown_segment_is_not_found(rsm: ObjectRemoteStorageManager, tmp_path: Path) -> None:
    await rsm.copy_log_segment_data(metadata(), segment_files(tmp_path))
    unknown = metadata()  # same offsets, another segment id: another copy attempt
    with pytest.raises(RemoteResourceNotFoundError):
        await rsm.fetch_log_segment(unknown, 0)
    with pytest.raises(RemoteResourceNotFoundError):
        await rsm.fetch_log_segment(unknown, 5, 10)
    for index_type in IndexType:
        with pytest.raises(RemoteResourceNotFoundError):
            await rsm.fetch_index(unknown, index_type)


async def test_delete_is_complete_and_idempotent(
    rsm: ObjectRemoteStorageManager, storage: ObjectStorage, tmp_path: Path
) -> None:
    kept, gone = metadata(start=0), metadata(start=0)  # two copy attempts of the same offsets
    await rsm.copy_log_segment_data(kept, segment_files(tmp_path))
    await rsm.copy_log_segment_data(gone, segment_files(tmp_path, optional=False))
    before = await keys(storage)
    await rsm.delete_log_segment_data(gone)
    kept_keys = sorted(rsm.segment_keys(kept))
    assert await keys(storage) == kept_keys == [k for k in before if k in kept_keys]
    await rsm.delete_log_segment_data(gone)  # again: nothing there is fine
    await rsm.delete_log_segment_data(metadata())  # never copied at all
    with pytest.raises(RemoteResourceNotFoundError):
        await rsm.fetch_log_segment(gone, 0)
    assert await rsm.fetch_log_segment(kept, 0) == LOG
    await rsm.delete_log_segment_data(kept)
    assert await storage.list() == []


async def test_prefix_is_configurable(storage: ObjectStorage, tmp_path: Path) -> None:
    md = metadata()
    for prefix, expected in (("/cluster-a/tiered/", "cluster-a/tiered/orders-"), ("", "orders-")):
        manager = ObjectRemoteStorageManager(storage, prefix)
        await manager.copy_log_segment_data(md, segment_files(tmp_path))
        assert all(k.startswith(expected) for k in await keys(storage))
        assert await manager.fetch_log_segment(md, 3, 4) == LOG[3:5]
        await manager.delete_log_segment_data(md)
        assert await storage.list() == []


async def test_unreadable_local_file_fails_the_copy(
    rsm: ObjectRemoteStorageManager, storage: ObjectStorage, tmp_path: Path
) -> None:
    md = metadata()
    data = segment_files(tmp_path)
    data.log_segment.unlink()  # e.g. deleted by retention meanwhile
    with pytest.raises(RemoteStorageError, match="cannot read"):
        await rsm.copy_log_segment_data(md, data)
    assert len(await keys(storage)) == 5  # the indexes went first, the log never
    await rsm.delete_log_segment_data(md)
    assert await storage.list() == []


def test_illegal_topic_names_are_refused() -> None:
    manager = ObjectRemoteStorageManager(MemoryObjectStorage())
    for topic in ("a/b", "..", "sp ace", "new\nline"):
        tp = TopicIdPartition(TP.topic_id, 0, topic)
        md = RemoteLogSegmentMetadata(RemoteLogSegmentId.generate(tp), 0, 1, 0, 1, 0, 10, {0: 0})
        with pytest.raises(ValueError):
            manager.log_key(md)


class RecordingStorage(MemoryObjectStorage):
    """Records which upload call each key went through, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, str]] = []

    async def upload(self, key: str, data: bytes | memoryview) -> None:
        self.calls.append(("upload", key.rsplit(".", 1)[1]))
        await super().upload(key, data)

    async def upload_file(self, key: str, path: str | os.PathLike[str]) -> None:
        self.calls.append(("upload_file", key.rsplit(".", 1)[1]))
        await super().upload_file(key, path)


@pytest.mark.parametrize("optional", [True, False])
async def test_copy_streams_files_and_uploads_the_log_last(tmp_path: Path, optional: bool) -> None:
    """Files given by path go through upload_file (bounded memory); only the leader-epoch
    checkpoint, which arrives as bytes, through upload; the log is last either way."""
    storage = RecordingStorage()
    await ObjectRemoteStorageManager(storage).copy_log_segment_data(
        metadata(), segment_files(tmp_path, optional=optional)
    )
    expected = [("upload_file", "index"), ("upload_file", "timeindex")]
    if optional:
        expected += [("upload_file", "txnindex"), ("upload_file", "snapshot")]
    expected += [("upload", "leader-epoch-checkpoint"), ("upload_file", "log")]
    assert storage.calls == expected


# -- failures ---------------------------------------------------------------------


class FailNthUpload(FaultyObjectStorage):
    """Fails the ``n``th upload (1-based; ``upload`` or ``upload_file``) and no other; ``after``:
    the object lands anyway."""

    def __init__(self, inner: ObjectStorage, n: int, *, after: bool = False) -> None:
        super().__init__(inner)
        self.n, self.after, self.uploads = n, after, 0

    def _count(self) -> None:
        self.uploads += 1
        fault = Fault(failure_rate=1.0, after=self.after) if self.uploads == self.n else None
        self.set_fault("upload", fault)

    async def upload(self, key: str, data: bytes | memoryview) -> None:
        self._count()
        await super().upload(key, data)

    async def upload_file(self, key: str, path: str | os.PathLike[str]) -> None:
        self._count()
        await super().upload_file(key, path)


@pytest.mark.parametrize("after", [False, True], ids=["lost", "landed"])
@pytest.mark.parametrize("n", [1, 3, 6])
async def test_interrupted_copy_leaves_parts_that_delete_removes(
    storage: ObjectStorage, tmp_path: Path, n: int, after: bool
) -> None:
    faulty = FailNthUpload(storage, n, after=after)
    rsm = ObjectRemoteStorageManager(faulty)
    md = metadata()
    with pytest.raises(RemoteStorageError, match="injected upload failure"):
        await rsm.copy_log_segment_data(md, segment_files(tmp_path))
    assert faulty.injected["upload"] == 1 and faulty.uploads == n  # it stopped at the failure
    left = await keys(storage)
    assert len(left) == (n if after else n - 1)
    assert (rsm.log_key(md) in left) == (n == 6 and after)  # the log goes last
    if left:
        assert (await rsm.fetch_index(md, IndexType.OFFSET)) == INDEXES[IndexType.OFFSET]
    await rsm.delete_log_segment_data(md)
    assert await storage.list() == []


async def test_backend_errors_become_remote_storage_errors(storage: ObjectStorage, tmp_path: Path) -> None:
    faulty = FaultyObjectStorage(storage)
    rsm = ObjectRemoteStorageManager(faulty)
    md = metadata()
    await rsm.copy_log_segment_data(md, segment_files(tmp_path))
    faulty.set_fault("fetch", Fault(failure_rate=1.0))
    for call in (rsm.fetch_log_segment(md, 0, 10), rsm.fetch_index(md, IndexType.OFFSET)):
        with pytest.raises(RemoteStorageError) as caught:
            await call
        assert not isinstance(caught.value, RemoteResourceNotFoundError)  # retriable, not "gone"
    faulty.set_fault("delete", Fault(failure_rate=1.0))
    with pytest.raises(RemoteStorageError):
        await rsm.delete_log_segment_data(md)
    faulty.clear()
    await rsm.delete_log_segment_data(md)  # the retry finishes the job
    assert await storage.list() == []


async def test_failed_delete_removes_the_log_first(storage: ObjectStorage, tmp_path: Path) -> None:
    """A delete cut after its first request leaves indexes only: no log without its indexes."""

    class FailSecondDelete(FaultyObjectStorage):
        deletes = 0

        async def delete(self, keys: Iterable[str]) -> None:
            self.deletes += 1
            self.set_fault("delete", Fault(failure_rate=1.0) if self.deletes == 2 else None)
            await super().delete(keys)

    faulty = FailSecondDelete(storage)
    rsm = ObjectRemoteStorageManager(faulty)
    md = metadata()
    await rsm.copy_log_segment_data(md, segment_files(tmp_path))
    with pytest.raises(RemoteStorageError):
        await rsm.delete_log_segment_data(md)
    left = await keys(storage)
    assert len(left) == 5 and rsm.log_key(md) not in left
    await rsm.delete_log_segment_data(md)
    assert await storage.list() == []
