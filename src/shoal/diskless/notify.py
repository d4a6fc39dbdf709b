"""Wakes long-polling fetches when batches are committed to the partitions they wait on."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from shoal.coordinator.api import TopicIdPartition


class CommitNotifier:
    """A generation counter per broker plus an event that fires on every local commit."""

    def __init__(self) -> None:
        self._event = asyncio.Event()
        self._waiting: dict[TopicIdPartition, int] = {}

    def committed(self, partitions: Iterable[TopicIdPartition]) -> None:
        if any(p in self._waiting for p in partitions):
            event, self._event = self._event, asyncio.Event()
            event.set()

    async def wait(self, partitions: list[TopicIdPartition], timeout: float) -> None:
        """Return when one of the partitions gets a commit, or after ``timeout`` seconds."""
        for p in partitions:
            self._waiting[p] = self._waiting.get(p, 0) + 1
        event = self._event
        try:
            await asyncio.wait_for(event.wait(), timeout)
        except TimeoutError:
            pass
        finally:
            for p in partitions:
                count = self._waiting[p] - 1
                if count:
                    self._waiting[p] = count
                else:
                    del self._waiting[p]
