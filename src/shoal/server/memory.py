"""Give memory back to the operating system after a burst (glibc only; elsewhere a no-op).

Without this, RSS stays at its peak after a load goes away: glibc raises its mmap threshold
each time a large buffer is freed (so later request frames and responses come from the heap
instead of their own mappings), every worker thread gets its own heap, and freed heap pages
are only returned from the top. Shoal pins the mmap threshold (buffers of 128 KiB and more
are mapped and unmapped on their own), caps the heaps at two, and trims the heaps on a timer.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import logging

log = logging.getLogger(__name__)

_M_MMAP_THRESHOLD = -3
_M_ARENA_MAX = -8
MMAP_THRESHOLD_BYTES = 128 * 1024
ARENA_MAX = 2
TRIM_INTERVAL_S = 30.0


def _libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        libc = ctypes.CDLL(name)
        libc.mallopt  # noqa: B018  (glibc has both; musl has neither)
        libc.malloc_trim  # noqa: B018
    except (OSError, AttributeError):
        return None
    return libc


_LIBC = _libc()


def tune_allocator() -> None:
    """Pin the mmap threshold and cap the heaps; call once, before worker threads start."""
    if _LIBC is None:
        return
    _LIBC.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)
    _LIBC.mallopt(_M_ARENA_MAX, ARENA_MAX)


def trim() -> None:
    """Return free heap pages to the operating system."""
    if _LIBC is not None:
        _LIBC.malloc_trim(0)


async def trim_periodically() -> None:
    """Trim every ``TRIM_INTERVAL_S`` (a few milliseconds of work, on the loop)."""
    while True:
        await asyncio.sleep(TRIM_INTERVAL_S)
        trim()
