"""RangeCache: LRU by bytes, covering-range hits, one shared fetch per range, errors not cached."""

from __future__ import annotations

import asyncio

from shoal.diskless.cache import RangeCache
from shoal.objects.storage import StorageBackendError


def blob(n: int, seed: int = 0) -> bytes:
    return bytes((seed + i) % 251 for i in range(n))


class GatedFetch:
    """A fetch that counts its calls and completes (or fails) only when released."""

    def __init__(self, data: bytes, error: Exception | None = None) -> None:
        self.data = data
        self.error = error
        self.calls = 0
        self.release = asyncio.Event()

    async def __call__(self) -> bytes:
        self.calls += 1
        await self.release.wait()
        if self.error is not None:
            raise self.error
        return self.data


def test_hit_when_a_cached_range_covers_the_request() -> None:
    cache = RangeCache(10_000)
    data = blob(100)
    cache.put("k", 0, data)
    cache.put("k", 500, blob(100, 7))
    assert bytes(cache.get("k", 0, 100)) == data
    assert bytes(cache.get("k", 10, 50)) == data[10:50]
    assert bytes(cache.get("k", 550, 600)) == blob(100, 7)[50:]
    assert cache.get("k", 50, 101) is None  # runs past the cached bytes
    assert cache.get("k", 150, 160) is None  # between the two ranges
    assert cache.get("k", 450, 520) is None  # starts before the second range
    assert cache.get("other", 0, 10) is None


def test_lru_eviction_by_bytes() -> None:
    cache = RangeCache(100)
    cache.put("a", 0, blob(40))
    cache.put("b", 0, blob(40))
    assert cache.get("a", 0, 1) is not None  # a is now the most recently used
    cache.put("c", 0, blob(40))  # 120 bytes > 100: the least recently used (b) goes
    assert cache.get("b", 0, 1) is None
    assert cache.get("a", 0, 40) is not None and cache.get("c", 0, 40) is not None
    cache.put("d", 0, blob(100))  # takes all the room
    assert [cache.get(k, 0, 1) is None for k in "acd"] == [True, True, False]


def test_replacing_a_range_frees_its_old_bytes() -> None:
    cache = RangeCache(100)
    cache.put("a", 0, blob(60))
    cache.put("a", 0, blob(30, 1))  # same (key, start): the 60 bytes are no longer counted
    cache.put("b", 0, blob(70))
    assert bytes(cache.get("a", 0, 30)) == blob(30, 1)
    assert cache.get("b", 0, 70) is not None


def test_ranges_larger_than_the_cache_are_not_kept() -> None:
    cache = RangeCache(50)
    cache.put("small", 0, blob(10))
    cache.put("big", 0, blob(51))
    assert cache.get("big", 0, 1) is None
    assert cache.get("small", 0, 10) is not None  # nothing was evicted for it
    disabled = RangeCache(0)
    disabled.put("k", 0, b"x")
    assert disabled.get("k", 0, 1) is None


async def test_concurrent_get_or_fetch_shares_one_fetch() -> None:
    cache = RangeCache(1000)
    data = blob(100)
    fetch = GatedFetch(data)
    tasks = [asyncio.create_task(cache.get_or_fetch("k", 0, 100, fetch)) for _ in range(5)]
    await asyncio.sleep(0)
    fetch.release.set()
    results = await asyncio.gather(*tasks)
    assert fetch.calls == 1
    assert all(bytes(r) == data for r in results)
    assert (cache.hits, cache.misses) == (0, 5)
    # Now cached: a covered sub-range is a hit and never calls fetch.
    assert bytes(await cache.get_or_fetch("k", 20, 30, fetch)) == data[20:30]
    assert fetch.calls == 1 and cache.hits == 1


async def test_different_ranges_fetch_separately() -> None:
    cache = RangeCache(1000)
    first, second = GatedFetch(blob(10)), GatedFetch(blob(10, 3))
    first.release.set()
    second.release.set()
    a, b = await asyncio.gather(cache.get_or_fetch("k", 0, 10, first), cache.get_or_fetch("k", 10, 20, second))
    assert (bytes(a), bytes(b)) == (blob(10), blob(10, 3))
    assert (first.calls, second.calls) == (1, 1)


async def test_fetch_error_reaches_every_waiter_and_is_not_cached() -> None:
    cache = RangeCache(1000)
    failing = GatedFetch(b"", StorageBackendError("GET failed"))
    tasks = [asyncio.create_task(cache.get_or_fetch("k", 0, 10, failing)) for _ in range(3)]
    await asyncio.sleep(0)
    failing.release.set()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert failing.calls == 1
    assert all(isinstance(r, StorageBackendError) and str(r) == "GET failed" for r in results)
    assert cache.get("k", 0, 10) is None
    # The next reader tries again.
    working = GatedFetch(blob(10))
    working.release.set()
    assert bytes(await cache.get_or_fetch("k", 0, 10, working)) == blob(10)
    assert working.calls == 1


async def test_fetched_range_larger_than_the_cache_is_returned_but_not_kept() -> None:
    cache = RangeCache(5)
    fetch = GatedFetch(blob(10))
    fetch.release.set()
    assert bytes(await cache.get_or_fetch("k", 0, 10, fetch)) == blob(10)
    assert bytes(await cache.get_or_fetch("k", 0, 10, fetch)) == blob(10)
    assert fetch.calls == 2


async def test_cancelling_the_first_reader_does_not_cancel_the_others() -> None:
    cache = RangeCache(1000)
    fetch = GatedFetch(blob(10))
    first = asyncio.create_task(cache.get_or_fetch("k", 0, 10, fetch))
    await asyncio.sleep(0)
    second = asyncio.create_task(cache.get_or_fetch("k", 0, 10, fetch))
    await asyncio.sleep(0)
    first.cancel()
    await asyncio.sleep(0)
    fetch.release.set()
    await asyncio.wait([second], timeout=2)
    assert second.done() and not second.cancelled(), "the second reader was cancelled with the first"
    assert bytes(second.result()) == blob(10)
