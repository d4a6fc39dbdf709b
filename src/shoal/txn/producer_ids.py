"""Producer ids for InitProducerId, handed out in blocks by the controller (as KRaft does)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable


class ProducerIdManager:
    """Serves ids from the current block and asks the controller for the next block when it runs out."""

    def __init__(self, allocate_block: Callable[[], Awaitable[tuple[int, int]]]) -> None:
        self._allocate_block = allocate_block
        self._next = 0
        self._end = 0
        self._lock = asyncio.Lock()

    async def next_id(self) -> int:
        async with self._lock:
            if self._next >= self._end:
                first, size = await self._allocate_block()
                self._next, self._end = first, first + size
            producer_id = self._next
            self._next += 1
            return producer_id
