"""In-memory ObjectStorage, so other components' unit tests need no disk or server."""

from __future__ import annotations

import builtins
import os
from collections.abc import Iterable
from datetime import UTC, datetime

from shoal.objects.storage import (
    ByteRange,
    ObjectInfo,
    ObjectNotFoundError,
    StorageBackendError,
    clip_range,
    validate_key,
)

__all__ = ["MemoryObjectStorage"]


class MemoryObjectStorage:
    """A dict of immutable byte strings with the same semantics as the real backends.

    Data is copied on upload, so a caller reusing its buffer cannot change a
    stored object, just as with a real store. ``share()`` gives another handle
    on the same objects, like a second broker's client on the same bucket:
    closing one handle leaves the others working.
    """

    def __init__(self) -> None:
        self._objects: dict[str, tuple[bytes, datetime]] = {}
        self._closed = False

    def share(self) -> MemoryObjectStorage:
        """A new, independently closable handle on the same objects."""
        other = MemoryObjectStorage()
        other._objects = self._objects
        return other

    def _check_open(self) -> None:
        if self._closed:
            raise StorageBackendError("memory object storage is closed")

    async def upload(self, key: str, data: bytes | memoryview) -> None:
        """Store a private copy of ``data``."""
        validate_key(key)
        self._check_open()
        self._objects[key] = (bytes(data), datetime.now(UTC))

    async def upload_file(self, key: str, path: str | os.PathLike[str]) -> None:
        """Read the whole file: this backend holds every object in memory anyway.

        The read blocks the event loop, like everything here: this backend is for tests.
        """
        validate_key(key)
        self._check_open()
        with open(path, "rb") as f:  # an OSError opening it is the caller's: propagates
            try:
                data = f.read()
            except OSError as e:
                raise StorageBackendError(f"upload of {key} from {path} failed: {e}") from e
        self._objects[key] = (data, datetime.now(UTC))

    async def fetch(self, key: str, byte_range: ByteRange | None = None) -> bytes:
        """Return the object or the clipped range."""
        validate_key(key)
        self._check_open()
        try:
            data, _ = self._objects[key]
        except KeyError:
            raise ObjectNotFoundError(f"object not found: {key}") from None
        start, end = clip_range(byte_range, len(data))
        return data if (start, end) == (0, len(data)) else data[start:end]

    async def delete(self, keys: Iterable[str]) -> None:
        """Remove keys; missing ones are ignored."""
        key_list = [validate_key(k) for k in keys]
        self._check_open()
        for key in key_list:
            self._objects.pop(key, None)

    async def list(self, prefix: str = "") -> builtins.list[ObjectInfo]:
        """Objects whose key starts with ``prefix``, sorted by key."""
        self._check_open()
        return [
            ObjectInfo(key=key, size=len(data), last_modified=modified)
            for key, (data, modified) in sorted(self._objects.items())
            if key.startswith(prefix)
        ]

    async def close(self) -> None:
        """Mark this handle closed; objects stay visible through shared handles."""
        self._closed = True
