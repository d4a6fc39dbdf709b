"""``shoal.aio.wait_for``: Python 3.11's ``asyncio.wait_for`` loses a cancellation that arrives
with its awaitable's result; background loops stopped by ``cancel`` then never end."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from shoal.aio import wait_for


async def _loop_until_cancelled(wake: asyncio.Event, rounds: list[int]) -> None:
    """A background loop as the broker's: wait for a wake-up or the interval, do a round."""
    while True:
        wake.clear()
        with contextlib.suppress(TimeoutError):
            await wait_for(wake.wait(), 10)
        rounds.append(1)


async def test_a_cancel_that_comes_with_the_wake_up_ends_the_loop() -> None:
    wake, rounds = asyncio.Event(), []
    task = asyncio.create_task(_loop_until_cancelled(wake, rounds))
    await asyncio.sleep(0.01)
    wake.set()
    task.cancel()  # same tick as the wake-up: asyncio.wait_for (3.11) returns instead
    await asyncio.wait([task], timeout=5)
    assert task.cancelled()
    assert rounds == []


async def test_results_timeouts_and_no_timeout() -> None:
    assert await wait_for(asyncio.sleep(0, "done"), 1) == "done"
    assert await wait_for(asyncio.sleep(0, "done"), None) == "done"
    done: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    done.set_result(7)
    assert await wait_for(done, 0) == 7  # already done: its result, even with no time left
    pending: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    with pytest.raises(TimeoutError):
        await wait_for(pending, 0.01)
    assert pending.cancelled()  # as asyncio.wait_for: what timed out is cancelled
