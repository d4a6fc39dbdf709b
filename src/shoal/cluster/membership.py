"""This broker's place in the cluster: it registers an incarnation in the metadata store's broker
registry, heartbeats every ``broker.heartbeat.interval.ms``, and leaves the registry when it
shuts down cleanly (so the controller fences it at once instead of after the session timeout).

Kafka's BrokerLifecycleManager, with the registry table in place of the controller RPCs: the
controller reads the registry and writes the fencing into the metadata log (``fencing``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from shoal.metadata.log import DuplicateBrokerError, MetadataStore

log = logging.getLogger(__name__)


class BrokerMembership:
    """Registration and heartbeats of one broker incarnation."""

    def __init__(
        self,
        store: MetadataStore,
        run_blocking: Callable[..., Awaitable[Any]],
        node_id: int,
        host: str,
        port: int,
        rack: str | None,
        *,
        heartbeat_interval_ms: int,
        session_timeout_ms: int,
        on_lost: Callable[[str], None],
    ) -> None:
        self._store = store
        self._run_blocking = run_blocking
        self.node_id = node_id
        self.incarnation_id = uuid.uuid4()
        self._endpoint = (host, port, rack)
        self._interval = heartbeat_interval_ms / 1000
        self._session_timeout_ms = session_timeout_ms
        self._on_lost = on_lost
        self._task: asyncio.Task[None] | None = None

    async def register(self) -> None:
        """Register, waiting while another live incarnation holds the node id (it may be a
        crashed process whose session has not expired yet). Raises DuplicateBrokerError when it
        is still heartbeating after a whole session timeout: two brokers share a node.id."""
        host, port, rack = self._endpoint
        deadline = time.monotonic() + (self._session_timeout_ms + 2 * self._interval * 1000) / 1000
        while True:
            try:
                await self._run_blocking(
                    self._store.register_broker, self.node_id, self.incarnation_id, host, port, rack,
                    self._session_timeout_ms,
                )
                return
            except DuplicateBrokerError as exc:
                if time.monotonic() > deadline:
                    raise
                log.warning("waiting to register: %s", exc)
                await asyncio.sleep(self._interval)

    def start(self) -> None:
        self._task = asyncio.create_task(self._heartbeat_loop(), name="broker-heartbeat")

    async def _heartbeat_loop(self) -> None:
        while True:
            await asyncio.sleep(self._interval)
            try:
                still_ours = await self._run_blocking(self._store.heartbeat_broker, self.node_id, self.incarnation_id)
            except Exception as exc:  # the store is down: keep trying; the controller fences us meanwhile
                log.warning("broker heartbeat failed: %s", exc)
                continue
            if not still_ours:
                self._on_lost(
                    f"node id {self.node_id} was taken over by another broker incarnation "
                    f"(this one is {self.incarnation_id})"
                )
                return

    async def stop(self) -> None:
        """Stop heartbeating and leave the registry (the controller fences this broker)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        try:
            await self._run_blocking(self._store.unregister_broker, self.node_id, self.incarnation_id)
        except Exception as exc:
            log.warning("leaving the broker registry failed (the controller fences this broker later): %s", exc)
