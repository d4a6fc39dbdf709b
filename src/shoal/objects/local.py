"""ObjectStorage on a local directory: the development / single-machine backend.

Keys map to files under ``root`` (``/`` in a key becomes a subdirectory). An
upload is written to a temp file in the target directory, fsynced, renamed into
place and the directory fsynced, so an object is never seen half-written and
survives a crash once ``upload`` returns (for ``upload``, all in one GIL-free call
into the ``_durable`` extension). Its pages then leave the page
cache (``_drop_cached_pages``). Temp files carry a
reserved name prefix and are never listed or fetched. ``upload_file`` does the
same, copying the source into the temp file ``COPY_CHUNK`` bytes at a time.

A temp file names its writer (``.shoal-tmp-<host>-<pid>-...``): a process killed mid-upload
leaves one behind, and the first upload of a store instance starts a background sweep that
removes those whose writer ran on this host and is gone (S3 keeps nothing of an interrupted PUT
either). Other brokers' uploads in progress are left alone, and read-only users (Spark tasks,
tools) never walk the tree.

All blocking I/O runs in worker threads (``asyncio.to_thread``) so the event
loop keeps serving other requests. A cancelled upload may still complete in
its thread; callers already treat an unacknowledged upload as possible garbage.

Limitation compared with S3: a key cannot be both an object and a "directory"
of other keys (``a`` and ``a/b``); such an upload fails with
``StorageBackendError``.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import io
import logging
import os
import re
import secrets
import socket
import tempfile
import threading
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import BinaryIO

from shoal.objects import _durable
from shoal.objects.storage import (
    ByteRange,
    ObjectInfo,
    ObjectNotFoundError,
    StorageBackendError,
    clip_range,
    validate_key,
)

__all__ = ["COPY_CHUNK", "TEMP_PREFIX", "LocalObjectStorage"]

TEMP_PREFIX = ".shoal-tmp-"
"""File names starting with this are in-progress uploads, never objects."""

log = logging.getLogger(__name__)

_HOST = re.sub(r"[^A-Za-z0-9.]", "_", socket.gethostname()) or "host"
#: ``<TEMP_PREFIX><host>-<pid>-<mkstemp's random part, no dashes>``
_TEMP_NAME = re.compile(re.escape(TEMP_PREFIX) + r"(?P<host>.+)-(?P<pid>\d+)-[^-]+$")


def _temp_prefix() -> str:
    """This process's temp file prefix (the pid is read per call: a forked child has its own)."""
    return f"{TEMP_PREFIX}{_HOST}-{os.getpid()}-"


def _writer_gone(name: str) -> bool:
    """Whether ``name`` is a temp file whose writer ran on this host and no longer exists."""
    match = _TEMP_NAME.match(name)
    if match is None or match["host"] != _HOST:
        return False
    try:
        os.kill(int(match["pid"]), 0)
    except ProcessLookupError:
        return True
    except (PermissionError, OverflowError, ValueError):
        return False  # alive under another user, or not a pid
    return False

COPY_CHUNK = 1 << 20
"""Bytes written at a time: ``upload_file``'s whole memory footprint per call, and the size of
each ``write`` of an ``upload`` (measured on ext4: one 4 MiB ``write`` took 9-15 ms under load
where four 1 MiB writes took 1-2 ms)."""


def _fsync_dir(directory: Path) -> None:
    """Persist directory entries (a rename or a new child) across a crash."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _copy_chunks(src: io.BufferedReader, dst: BinaryIO) -> None:
    """Copy ``src`` to ``dst`` through one reused ``COPY_CHUNK`` buffer."""
    buffer = bytearray(COPY_CHUNK)
    view = memoryview(buffer)
    while n := src.readinto(view):
        dst.write(view[:n])


def _drop_cached_pages(fd: int) -> None:
    """Let the kernel drop a just-synced file's pages from the page cache.

    A new object is read back, if at all, from the broker's range cache, or much later by a
    catch-up reader (which reads it into the page cache again): its page-cache copy is a second,
    idle copy of data already on disk. Dropping it returns those pages to the free lists, so the
    next upload writes into recently used memory instead of growing the page cache, which keeps
    the broker's memory (and a container's, which counts its page cache) flat. Measured on this
    project's VM: a 2.2 MB write took 4.5-5 ms into fresh page-cache memory and 0.4 ms into
    pages freed this way. Advice only: the kernel may keep pages, and nothing depends on it.
    """
    if hasattr(os, "posix_fadvise"):  # not on macOS
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)


class LocalObjectStorage:
    """Objects as files under ``root``; see the module docstring for guarantees."""

    def __init__(self, root: Path | str) -> None:
        self._root = Path(root).absolute()
        self._closed = False
        self._swept = False
        #: Directories an upload already wrote into: the next one there skips the ``is_dir`` check.
        self._known_dirs: set[Path] = set()

    def _sweep_once(self) -> None:
        """Start the sweep of abandoned temp files at this instance's first upload."""
        if not self._swept:
            self._swept = True
            threading.Thread(target=self._remove_abandoned_uploads, name="local-store-sweep", daemon=True).start()

    def _remove_abandoned_uploads(self) -> None:
        """Delete the temp files of uploads whose process died (module docstring)."""
        removed = 0
        for dirpath, _dirs, filenames in os.walk(self._root):
            for name in filenames:
                if name.startswith(TEMP_PREFIX) and _writer_gone(name):
                    with contextlib.suppress(OSError):
                        os.unlink(os.path.join(dirpath, name))
                        removed += 1
        if removed:
            log.info("removed %d temp files of uploads interrupted by a crash under %s", removed, self._root)

    @property
    def root(self) -> Path:
        """The directory holding the objects."""
        return self._root

    def __repr__(self) -> str:
        return f"LocalObjectStorage({str(self._root)!r})"

    def _check_open(self) -> None:
        if self._closed:
            raise StorageBackendError(f"local object storage {self._root} is closed")

    def _path(self, key: str) -> Path:
        """The file for ``key``; rejects keys that could escape ``root`` or clash with temp files."""
        validate_key(key)
        segments = key.split("/")
        if any(s.startswith(TEMP_PREFIX) for s in segments):
            raise ValueError(f"object key uses the reserved temp-file prefix {TEMP_PREFIX!r}: {key!r}")
        return self._root.joinpath(*segments)

    # -- upload ---------------------------------------------------------------

    async def upload(self, key: str, data: bytes | memoryview) -> None:
        """Write atomically and durably (temp file, fsync, rename, fsync dir)."""
        self._path(key)  # a bad key fails here, before a thread is involved
        await asyncio.to_thread(self.upload_blocking, key, data)

    def upload_blocking(self, key: str, data: bytes | memoryview) -> None:
        """``upload`` in the calling (worker) thread (``BlockingUploads``).

        The temp file's whole life (create, write, fsync, rename, directory fsync) is one call
        into ``_durable``, which holds no GIL meanwhile (the header of ``_durable.c`` says why).
        """
        path = self._path(key)
        self._check_open()
        self._sweep_once()
        directory = path.parent
        try:
            created = [] if directory in self._known_dirs else self._make_dirs(directory)
            temp = directory / f"{_temp_prefix()}{secrets.token_hex(8)}"
            try:
                _durable.write_new(temp, path, directory, data, COPY_CHUNK)
            except FileNotFoundError:
                # The directory went away since it was last seen: make it again, once.
                self._known_dirs.discard(directory)
                created = self._make_dirs(directory)
                _durable.write_new(temp, path, directory, data, COPY_CHUNK)
            self._known_dirs.add(directory)
            self._sync_created(created)
        except OSError as e:
            raise StorageBackendError(f"upload of {key} to {self._root} failed: {e}") from e

    async def upload_file(self, key: str, path: str | os.PathLike[str]) -> None:
        """Copy ``path`` in ``COPY_CHUNK`` pieces into a temp file, then as ``upload`` does.

        Opening, copying and closing the source all happen in one worker thread, so a
        cancelled call never closes a file that its thread is still reading.
        """
        target = self._path(key)
        self._check_open()
        self._sweep_once()
        await asyncio.to_thread(self._upload_file_sync, key, target, path)

    def _upload_file_sync(self, key: str, target: Path, source: str | os.PathLike[str]) -> None:
        """Open ``source`` (an OSError here is the caller's and propagates), then copy it."""
        with open(source, "rb") as src:
            try:
                self._write_atomically(target, lambda dst: _copy_chunks(src, dst))
            except OSError as e:
                raise StorageBackendError(f"upload of {key} from {source} to {self._root} failed: {e}") from e

    def _make_dirs(self, directory: Path) -> builtins.list[Path]:
        """Create ``directory`` and missing parents; return the ones created, outermost first."""
        missing: list[Path] = []
        current = directory
        while not current.is_dir():
            missing.append(current)
            if current.parent == current:
                break
            current = current.parent
        created: list[Path] = []
        for d in reversed(missing):
            try:
                d.mkdir()
                created.append(d)
            except FileExistsError:
                if not d.is_dir():
                    raise
        return created

    def _write_atomically(self, path: Path, write: Callable[[BinaryIO], object]) -> None:
        """Make ``path`` hold what ``write`` writes to a file object, or stay as it was."""
        directory = path.parent
        created = self._make_dirs(directory)
        try:
            fd, tmp_name = tempfile.mkstemp(prefix=_temp_prefix(), dir=directory)
        except FileNotFoundError:  # a delete emptied and pruned it meanwhile (``_prune_empty``)
            created += self._make_dirs(directory)
            fd, tmp_name = tempfile.mkstemp(prefix=_temp_prefix(), dir=directory)
        try:
            with os.fdopen(fd, "wb") as f:
                write(f)
                f.flush()
                os.fsync(f.fileno())
                _drop_cached_pages(f.fileno())
            os.replace(tmp_name, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp_name)
            raise
        _fsync_dir(directory)
        self._sync_created(created)

    @staticmethod
    def _sync_created(created: builtins.list[Path]) -> None:
        """New directories are only durable once their own parent entry is synced."""
        for d in created:
            _fsync_dir(d.parent)

    # -- fetch ----------------------------------------------------------------

    async def fetch(self, key: str, byte_range: ByteRange | None = None) -> bytes:
        """Read the object or the clipped range with one seek and read."""
        path = self._path(key)
        self._check_open()
        try:
            return await asyncio.to_thread(self._fetch_sync, path, byte_range)
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            raise ObjectNotFoundError(f"object not found: {key} (in {self._root})") from None
        except OSError as e:
            raise StorageBackendError(f"fetch of {key} from {self._root} failed: {e}") from e

    @staticmethod
    def _fetch_sync(path: Path, byte_range: ByteRange | None) -> bytes:
        with open(path, "rb") as f:
            start, end = clip_range(byte_range, os.fstat(f.fileno()).st_size)
            if start:
                f.seek(start)
            data = f.read(end - start)
        if len(data) != end - start:
            # Objects are immutable, so a short read means something outside shoal changed the file.
            raise OSError(f"short read: wanted {end - start} bytes at {start}, got {len(data)}")
        return data

    # -- delete ---------------------------------------------------------------

    async def delete(self, keys: Iterable[str]) -> None:
        """Unlink each file; missing ones are fine. Directories a deletion empties go too
        (``_prune_empty``), as S3 keeps no "directory" once its last key is deleted.

        Directories are not fsynced: a deletion lost in a crash only brings
        back garbage that the next GC pass deletes again.
        """
        paths = [self._path(k) for k in keys]
        self._check_open()
        if not paths:
            return
        try:
            await asyncio.to_thread(self._delete_sync, paths)
        except OSError as e:
            raise StorageBackendError(f"delete in {self._root} failed: {e}") from e

    def _delete_sync(self, paths: builtins.list[Path]) -> None:
        emptied: set[Path] = set()
        for path in paths:
            # A directory at the key's place means no object there, same as missing.
            with contextlib.suppress(FileNotFoundError, NotADirectoryError, IsADirectoryError):
                os.unlink(path)
                emptied.add(path.parent)
        for directory in sorted(emptied, key=lambda d: len(d.parts), reverse=True):
            self._prune_empty(directory)

    def _prune_empty(self, directory: Path) -> None:
        """Remove ``directory`` and then its parents while they are empty, keeping the root's own
        children (``wal/``, ``tiered/``: busy, and an upload would only make them again). A deleted
        topic's tiered segments so leave no ``<topic>-<id>/<partition>`` directories behind.

        An upload racing with this into a directory it saw before finds it gone and makes it
        again (``upload_blocking``, ``_write_atomically``)."""
        while len(directory.relative_to(self._root).parts) >= 2:
            self._known_dirs.discard(directory)
            try:
                os.rmdir(directory)
            except OSError:  # not empty, or already gone: nothing above it to prune here
                return
            directory = directory.parent

    # -- list -----------------------------------------------------------------

    async def list(self, prefix: str = "") -> builtins.list[ObjectInfo]:
        """Walk only the directory the prefix points into, then match the string prefix."""
        self._check_open()
        directory, _, _ = prefix.rpartition("/")
        base = self._path(directory) if directory else self._root
        try:
            return await asyncio.to_thread(self._list_sync, base, prefix)
        except OSError as e:
            raise StorageBackendError(f"list of {prefix!r} in {self._root} failed: {e}") from e

    def _list_sync(self, base: Path, prefix: str) -> builtins.list[ObjectInfo]:
        def on_error(e: OSError) -> None:
            if not isinstance(e, FileNotFoundError | NotADirectoryError):
                raise e

        found: list[ObjectInfo] = []
        for dirpath, _dirnames, filenames in os.walk(base, onerror=on_error):
            rel_dir = Path(dirpath).relative_to(self._root).as_posix()
            for name in filenames:
                if name.startswith(TEMP_PREFIX):
                    continue
                key = name if rel_dir == "." else f"{rel_dir}/{name}"
                if not key.startswith(prefix):
                    continue
                try:
                    st = os.stat(os.path.join(dirpath, name), follow_symlinks=False)
                except FileNotFoundError:
                    continue  # deleted while we walked
                found.append(
                    ObjectInfo(
                        key=key,
                        size=st.st_size,
                        last_modified=datetime.fromtimestamp(st.st_mtime, UTC),
                    )
                )
        found.sort(key=lambda info: info.key)
        return found

    async def close(self) -> None:
        """Mark closed; there is nothing to release."""
        self._closed = True
