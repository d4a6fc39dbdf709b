"""A background round that runs every interval on the event loop (retention, object cleaning)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

log = logging.getLogger(__name__)


class PeriodicTask:
    """Calls ``round()`` every ``self._interval`` seconds until stopped; a failed round is logged
    and the next one runs as usual. Subclasses set ``_interval`` and ``_name``. In a cluster the
    work runs on one broker: a round runs only while ``runs_here()`` says so (the broker sets it
    to "holds the controller lease")."""

    _interval: float
    _name: str
    _task: asyncio.Task[None] | None = None
    runs_here: Callable[[], bool] = staticmethod(lambda: True)

    async def round(self) -> None:
        raise NotImplementedError

    def start(self) -> None:
        """Start the periodic rounds on the running loop."""
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=self._name)

    async def stop(self) -> None:
        """Stop the rounds; a round in progress is abandoned (each of its steps is safe to redo)."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._interval)
            if not self.runs_here():
                continue
            try:
                await self.round()
            except Exception:
                log.exception("%s round failed", self._name)
