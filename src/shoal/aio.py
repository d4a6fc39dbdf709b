"""asyncio helpers every layer may use.

``wait_for``: Python 3.11's ``asyncio.wait_for`` loses a cancellation that arrives in the same
loop tick as its awaitable's result (it returns the result instead; CPython gh-86296, fixed by
3.12's rewrite). A background loop that waits with it (``wait_for(event.wait(), interval)``) and
is woken and cancelled at once, as happens at shutdown, then goes on forever, and whoever awaits
its task hangs: a broker stopped after a saturation run hung once in ten so. This is 3.12's
``wait_for``, built on ``asyncio.timeout``, which delivers the cancellation.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")


async def wait_for(awaitable: Awaitable[T], timeout: float | None) -> T:
    """``await awaitable``, raising ``TimeoutError`` (and cancelling it) after ``timeout`` seconds;
    a cancellation of the caller is never lost."""
    if timeout is None:
        return await awaitable
    async with asyncio.timeout(timeout):
        return await awaitable
