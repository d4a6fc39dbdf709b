"""The coordinator's durable writes: applied in submission order, many per transaction.

Each write the coordinator makes (offset commits, a group's new generation, deletions)
is submitted here from the event loop; one drain task applies everything queued so far
in a single transaction off the loop, then runs each write's in-memory update and
answers its waiter. Submission order is the order on disk and in memory, so two commits
of one partition can never land reversed, and a busy broker pays one fsync for many
consumers' commits.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from shoal.store.groups import Mutation

log = logging.getLogger(__name__)

RunBlocking = Callable[..., Awaitable[Any]]


class StoreWriteError(Exception):
    """The metadata store did not take a write (nothing of its transaction was applied)."""


@dataclass(slots=True)
class _Pending:
    mutations: Sequence[Mutation]
    on_commit: Callable[[], None] | None
    done: asyncio.Future[None]


class StoreWriter:
    def __init__(self, apply: Callable[[list[Mutation]], None], run_blocking: RunBlocking) -> None:
        self._apply = apply
        self._run_blocking = run_blocking
        self._queue: list[_Pending] = []
        self._drainer: asyncio.Task[None] | None = None

    def submit(self, mutations: Sequence[Mutation], on_commit: Callable[[], None] | None = None) -> asyncio.Future[None]:
        """Queue a write; the future resolves once it is durable (after ``on_commit`` ran), or fails
        with StoreWriteError. The write happens even if nobody awaits the future."""
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._queue.append(_Pending(mutations, on_commit, done))
        if self._drainer is None or self._drainer.done():
            self._drainer = asyncio.create_task(self._drain(), name="group-store-writer")
        return done

    async def flush(self) -> None:
        """Wait until everything submitted so far is applied (or failed)."""
        while self._drainer is not None and not self._drainer.done():
            await asyncio.shield(self._drainer)

    async def _drain(self) -> None:
        while self._queue:
            batch, self._queue = self._queue, []
            mutations = [m for pending in batch for m in pending.mutations]
            try:
                await self._run_blocking(self._apply, mutations)
            except Exception as exc:
                log.error("writing %d group coordinator changes to the metadata store failed: %s", len(mutations), exc)
                for pending in batch:
                    if not pending.done.done():
                        pending.done.set_exception(StoreWriteError(str(exc)))
                        pending.done.exception()  # mark retrieved: fire-and-forget writes are logged above
                continue
            for pending in batch:
                if pending.on_commit is not None:
                    try:
                        pending.on_commit()
                    except Exception:
                        log.exception("applying a committed group coordinator change failed")
                if not pending.done.done():
                    pending.done.set_result(None)
