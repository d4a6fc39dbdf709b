"""Give memory back to the operating system after a burst (glibc only; elsewhere a no-op).

glibc keeps freed memory in its heaps for reuse, so without help RSS stays near its peak
after a load goes away (a flood of large requests, a burst of big fetch responses). Shoal
caps the heaps at two (each worker thread would otherwise get its own, up to 8 per core) and
trims them every few seconds: ``malloc_trim`` hands every free page of every heap back,
not only the top of the heap.

Shoal does not pin glibc's mmap threshold. Pinned at its 128 KiB start, every request frame
and response of a megabyte would get its own fresh mapping, page-faulted in and unmapped
again: measured on the 2-core development VM, that tripled the broker's CPU per produced
megabyte (classic topic, librdkafka, 1 MiB batches) and cut throughput by 40%. Left dynamic,
buffers of the sizes the broker keeps seeing are reused from the heap.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import logging

log = logging.getLogger(__name__)

_M_ARENA_MAX = -8
ARENA_MAX = 2
TRIM_INTERVAL_S = 5.0


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
    """Cap the heaps; call once, before worker threads start."""
    if _LIBC is not None:
        _LIBC.mallopt(_M_ARENA_MAX, ARENA_MAX)


def trim() -> None:
    """Return free heap pages to the operating system."""
    if _LIBC is not None:
        _LIBC.malloc_trim(0)


async def trim_periodically() -> None:
    """Trim every ``TRIM_INTERVAL_S`` (a walk of the free lists, on the loop)."""
    while True:
        await asyncio.sleep(TRIM_INTERVAL_S)
        trim()
