"""A bounded in-memory cache of WAL segment byte ranges.

WAL objects are immutable, so a cached range never goes stale. The appender puts
every object it uploads here (consumers at the tail then read without a GET), and
concurrent readers of the same range share one GET.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Awaitable, Callable


class RangeCache:
    """LRU over (object key, start) -> bytes covering [start, start + len)."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._entries: OrderedDict[tuple[str, int], bytes] = OrderedDict()
        self._starts: dict[str, set[int]] = {}
        self._size = 0
        self._inflight: dict[tuple[str, int, int], asyncio.Future[bytes]] = {}
        self.hits = 0
        self.misses = 0

    def put(self, key: str, start: int, data: bytes) -> None:
        if len(data) > self.max_bytes:
            return
        old = self._entries.pop((key, start), None)
        if old is not None:
            self._size -= len(old)
        self._entries[(key, start)] = data
        self._starts.setdefault(key, set()).add(start)
        self._size += len(data)
        while self._size > self.max_bytes:
            (old_key, old_start), old_data = self._entries.popitem(last=False)
            self._size -= len(old_data)
            starts = self._starts[old_key]
            starts.discard(old_start)
            if not starts:
                del self._starts[old_key]

    def get(self, key: str, start: int, end: int) -> memoryview | None:
        """The bytes [start, end) of the object if a cached range covers them."""
        for cached_start in self._starts.get(key, ()):
            if cached_start <= start:
                data = self._entries[(key, cached_start)]
                if cached_start + len(data) >= end:
                    self._entries.move_to_end((key, cached_start))
                    return memoryview(data)[start - cached_start : end - cached_start]
        return None

    async def get_or_fetch(
        self, key: str, start: int, end: int, fetch: Callable[[], Awaitable[bytes]]
    ) -> memoryview:
        """Serve [start, end) from the cache, or run ``fetch`` once for all concurrent askers."""
        cached = self.get(key, start, end)
        if cached is not None:
            self.hits += 1
            return cached
        self.misses += 1
        flight_key = (key, start, end)
        task = self._inflight.get(flight_key)
        if task is None:
            # The GET runs as its own task: a reader that is cancelled (its client went
            # away) must not cancel the GET the other readers of this range wait on.
            task = asyncio.ensure_future(self._fetch_and_put(key, start, flight_key, fetch))
            self._inflight[flight_key] = task
        return memoryview(await asyncio.shield(task))

    async def _fetch_and_put(
        self, key: str, start: int, flight_key: tuple[str, int, int], fetch: Callable[[], Awaitable[bytes]]
    ) -> bytes:
        try:
            data = await fetch()
        finally:
            self._inflight.pop(flight_key, None)
        self.put(key, start, data)
        return data
