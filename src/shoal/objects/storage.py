"""The ObjectStorage plugin interface (KIP-1163 "Storage Backend").

Diskless WAL segments and tiered segments are immutable objects: written once
under a fresh key, read by byte range, deleted by garbage collection. The
interface is kept exactly that small so any S3-like store can implement it.
"""

from __future__ import annotations

import builtins
import os
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol, runtime_checkable

__all__ = [
    "BlockingUploads",
    "ByteRange",
    "ObjectInfo",
    "ObjectNotFoundError",
    "ObjectStorage",
    "StorageBackendError",
    "clip_range",
    "validate_key",
]


class StorageBackendError(Exception):
    """Any failure of the storage backend (I/O, network, HTTP 5xx, closed store...).

    Backends translate their library's exceptions into this so callers (the
    appender, the fetch planner, GC) handle one type and can fail requests as
    retriable instead of crashing.
    """


class ObjectNotFoundError(StorageBackendError):
    """The object does not exist; a subclass so generic handlers still catch it."""


@dataclass(frozen=True, slots=True)
class ByteRange:
    """A byte range ``[offset, offset + size)`` inside an object, as in KIP-1163."""

    offset: int
    size: int

    def __post_init__(self) -> None:
        if self.offset < 0 or self.size < 0:
            raise ValueError(f"invalid byte range offset={self.offset} size={self.size}")

    @property
    def end(self) -> int:
        """Exclusive end offset."""
        return self.offset + self.size


@dataclass(frozen=True, slots=True)
class ObjectInfo:
    """One listed object, for garbage collection (size and age decide what to delete)."""

    key: str
    size: int
    last_modified: datetime  # timezone-aware, UTC


@runtime_checkable
class ObjectStorage(Protocol):
    """Async access to immutable objects; every failure is a ``StorageBackendError``.

    Semantics shared by all backends:

    - keys are ``/``-separated relative paths (see ``validate_key``); an invalid
      key is a caller bug and raises ``ValueError``;
    - ``upload`` makes the object visible atomically and only when complete, and
      it is durable when the call returns; uploading an existing key replaces it;
    - ``upload_file`` is ``upload`` with the content read from a local file in
      bounded chunks (a few MiB, never the whole file), for objects as large as
      a 1 GiB log segment; the file is opened before anything is stored, and an
      ``OSError`` opening it (``FileNotFoundError`` when it is missing) propagates
      unchanged: it is the caller's error, not a store failure to retry. Once it
      is open, every failure (reading it included) is a ``StorageBackendError``;
    - ``fetch`` returns the whole object or the range clipped to the object's
      end (a range starting at or past the end yields ``b""``); a missing object
      raises ``ObjectNotFoundError``;
    - ``delete`` is idempotent: missing keys are not an error;
    - ``list`` matches ``prefix`` as a plain string prefix of the key (like S3)
      and returns objects sorted by key;
    - after ``close`` every call raises ``StorageBackendError``.
    """

    async def upload(self, key: str, data: bytes | memoryview) -> None:
        """Store ``data`` under ``key``, atomically and durably."""
        ...

    async def upload_file(self, key: str, path: str | os.PathLike[str]) -> None:
        """Store the content of the local file ``path`` under ``key`` like ``upload``, in bounded memory.

        The file must not change meanwhile (a rolled segment does not): what is stored is
        whatever the chunked reads saw.
        """
        ...

    async def fetch(self, key: str, byte_range: ByteRange | None = None) -> bytes:
        """Read the whole object or ``byte_range`` of it (clipped at the end)."""
        ...

    async def delete(self, keys: Iterable[str]) -> None:
        """Delete ``keys``; keys that do not exist are ignored."""
        ...

    async def list(self, prefix: str = "") -> builtins.list[ObjectInfo]:
        """All objects whose key starts with ``prefix``, sorted by key."""
        ...

    async def close(self) -> None:
        """Release resources; further calls fail."""
        ...


@runtime_checkable
class BlockingUploads(Protocol):
    """A store that can also upload in the caller's own worker thread (the local directory).

    The diskless appender then lays out, uploads and commits a WAL segment in one hop to a
    worker thread instead of three: on a busy machine each hop waits for a core, and the
    segment's producers wait for all of them. Same semantics as ``ObjectStorage.upload``.
    """

    def upload_blocking(self, key: str, data: bytes | memoryview) -> None:
        """``upload``, blocking the calling thread until the object is durable."""
        ...


def validate_key(key: str) -> str:
    """Reject keys that are not portable across backends, and return ``key``.

    The rules are the intersection of what S3 (via object_store paths) and a
    filesystem accept, so a key valid on one backend is valid on all: non-empty
    ``/``-separated segments, none of them ``.`` or ``..``, no leading or
    trailing ``/``, no backslash or control characters.
    """
    if not isinstance(key, str) or not key:
        raise ValueError(f"object key must be a non-empty string, got {key!r}")
    if any(ord(c) < 0x20 or c in "\\\x7f" for c in key):
        raise ValueError(f"object key contains a backslash or control character: {key!r}")
    for segment in key.split("/"):
        if segment in ("", ".", ".."):
            raise ValueError(f"object key has an empty, '.' or '..' segment: {key!r}")
    return key


def clip_range(byte_range: ByteRange | None, size: int) -> tuple[int, int]:
    """``(start, end)`` of ``byte_range`` clipped to an object of ``size`` bytes."""
    if byte_range is None:
        return 0, size
    start = min(byte_range.offset, size)
    return start, min(byte_range.end, size)
