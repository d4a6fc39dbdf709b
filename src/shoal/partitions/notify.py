"""Wakes long-polling fetches when records reach the partitions they wait on (a diskless commit,
a classic append), whatever the partition's kind: keys are ``(topic id, partition)``."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Hashable, Iterable, Sequence

from shoal.aio import wait_for

PartitionKey = Hashable


class CommitNotifier:
    """A commit counter per partition plus the futures of the fetches waiting on it.

    A fetch takes ``version(partitions)`` before it reads and passes it to ``wait``, so
    a commit that lands between its read and its wait still wakes it at once.
    """

    def __init__(self) -> None:
        self._versions: dict[PartitionKey, int] = {}
        self._waiters: dict[PartitionKey, set[asyncio.Future[None]]] = {}

    def version(self, partitions: Sequence[PartitionKey]) -> tuple[int, ...]:
        return tuple(self._versions.get(p, 0) for p in partitions)

    def committed(self, partitions: Iterable[PartitionKey]) -> None:
        for p in partitions:
            self._versions[p] = self._versions.get(p, 0) + 1
            for future in self._waiters.get(p, ()):
                if not future.done():
                    future.set_result(None)

    async def wait(self, partitions: Sequence[PartitionKey], timeout: float, since: tuple[int, ...]) -> None:
        """Return when one of the partitions gets a commit after ``since``, or after ``timeout`` seconds."""
        if self.version(partitions) != since:
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        for p in partitions:
            self._waiters.setdefault(p, set()).add(future)
        try:
            with contextlib.suppress(TimeoutError):
                await wait_for(future, timeout)
        finally:
            for p in partitions:
                waiters = self._waiters.get(p)
                if waiters is not None:
                    waiters.discard(future)
                    if not waiters:
                        del self._waiters[p]
