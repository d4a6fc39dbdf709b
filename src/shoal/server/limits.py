"""Broker-wide bounds on connections and queued requests, with Kafka's names and defaults.

- ``RequestBudget``: requests read from any connection but not yet answered, bounded by count
  (``queued.max.requests``) and by bytes (``queued.max.request.bytes``, -1 = no byte bound,
  as Kafka's memory pool). A connection that finds the budget spent stops reading until
  answers free some, so a flood stalls the flooders, not the memory of the broker.
- ``ConnectionQuotas``: ``max.connections`` across the listener and ``max.connections.per.ip``
  (with ``max.connections.per.ip.overrides``); a connection over either is closed as soon as it
  is accepted.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter, deque

log = logging.getLogger(__name__)


class RequestBudget:
    """Counts and bytes of queued requests; ``acquire`` waits while either is spent.

    Like Kafka's memory pool, a request larger than what is left is let in once the pool
    has anything left at all, so one large request never waits forever. Waiters are let in
    first come, first served, one at a time as room frees up: with hundreds of connections
    waiting, an answer wakes one of them, not all.
    """

    def __init__(self, max_requests: int, max_bytes: int) -> None:
        self.max_requests = max_requests
        self.max_bytes = max_bytes
        self.requests = 0
        self.bytes = 0
        #: Waiting acquirers, oldest first; the head stays until it has taken its share.
        self._waiters: deque[asyncio.Future[None]] = deque()

    def _has_room(self) -> bool:
        if self.requests >= self.max_requests:
            return False
        return self.max_bytes < 0 or self.bytes < self.max_bytes

    async def acquire(self, size: int) -> None:
        if self._waiters or not self._has_room():
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            except asyncio.CancelledError:
                self._waiters.remove(waiter)
                self._wake_next()  # it may have been woken: the room passes to the next
                raise
            self._waiters.popleft()  # only the head is ever woken
        self.requests += 1
        self.bytes += size
        self._wake_next()

    def release(self, size: int) -> None:
        self.requests -= 1
        self.bytes -= size
        self._wake_next()

    def _wake_next(self) -> None:
        if self._waiters and self._has_room() and not self._waiters[0].done():
            self._waiters[0].set_result(None)


def connection_overrides(value: str) -> dict[str, int]:
    """``max.connections.per.ip.overrides`` (``address:count,...``, validated by its ConfigDef)
    as {address: count}."""
    pairs = (item.rpartition(":") for item in filter(None, (part.strip() for part in value.split(","))))
    return {address.strip(): int(count) for address, _, count in pairs}


class ConnectionQuotas:
    """Open connections, in all and per client address."""

    def __init__(self, max_connections: int, max_per_ip: int, overrides: dict[str, int] | None = None) -> None:
        self.max_connections = max_connections
        self.max_per_ip = max_per_ip
        self.overrides = overrides or {}
        self.total = 0
        self.per_ip: Counter[str] = Counter()

    def admit(self, ip: str) -> str | None:
        """Count a new connection in, or say why it is refused (then nothing is counted)."""
        if self.total >= self.max_connections:
            return f"{self.total} connections are open, max.connections is {self.max_connections}"
        limit = self.overrides.get(ip, self.max_per_ip)
        if self.per_ip[ip] >= limit:
            return f"{self.per_ip[ip]} connections from {ip} are open, its max.connections.per.ip is {limit}"
        self.total += 1
        self.per_ip[ip] += 1
        return None

    def release(self, ip: str) -> None:
        self.total -= 1
        self.per_ip[ip] -= 1
        if self.per_ip[ip] <= 0:
            del self.per_ip[ip]
