"""Keyed timers for the group coordinator: session, join, sync and initial-delay deadlines.

Kafka's coordinator schedules each deadline under a key ("heartbeat of member M of group
G", "join phase of G"); scheduling a key again replaces its deadline, and cancelling a
key that has none is harmless. The coordinator only sees this interface, so tests drive
it with a manual timer instead of waiting for real time.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Hashable
from typing import Protocol

log = logging.getLogger(__name__)


class Timer(Protocol):
    def schedule(self, key: Hashable, delay_ms: int, callback: Callable[[], None]) -> None:
        """Run ``callback`` after ``delay_ms`` unless the key is cancelled or rescheduled first."""

    def cancel(self, key: Hashable) -> None: ...

    def is_scheduled(self, key: Hashable) -> bool: ...

    def cancel_all(self) -> None: ...


class LoopTimer:
    """Timers on the running asyncio event loop (callbacks run on the loop, like request handlers)."""

    def __init__(self) -> None:
        self._handles: dict[Hashable, asyncio.TimerHandle] = {}

    def schedule(self, key: Hashable, delay_ms: int, callback: Callable[[], None]) -> None:
        self.cancel(key)
        loop = asyncio.get_running_loop()
        self._handles[key] = loop.call_later(max(0, delay_ms) / 1000.0, self._fire, key, callback)

    def _fire(self, key: Hashable, callback: Callable[[], None]) -> None:
        self._handles.pop(key, None)
        try:
            callback()
        except Exception:
            log.exception("group coordinator timer %r failed", key)

    def cancel(self, key: Hashable) -> None:
        handle = self._handles.pop(key, None)
        if handle is not None:
            handle.cancel()

    def is_scheduled(self, key: Hashable) -> bool:
        return key in self._handles

    def cancel_all(self) -> None:
        for handle in self._handles.values():
            handle.cancel()
        self._handles.clear()
