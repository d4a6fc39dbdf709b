"""What request handlers may use: the broker's services, read through one object.

Handlers get this context and the decoded request; they translate between the wire
and ``partitions`` (or groups, the controller) and hold no storage logic of their own.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from shoal.config import Config
from shoal.groups.coordinator import GroupCoordinator
from shoal.metadata.cache import MetadataCache
from shoal.metadata.controller import Controller
from shoal.metadata.image import MetadataImage
from shoal.observability.metrics import BrokerMetrics
from shoal.partitions.manager import Partitions
from shoal.txn.producer_ids import ProducerIdManager

T = TypeVar("T")


@dataclass
class ServerContext:
    config: Config
    node_id: int
    cluster_id: str
    rack: str | None
    metadata: MetadataCache
    controller: Controller
    partitions: Partitions
    producer_ids: ProducerIdManager
    run_blocking: Callable[..., Awaitable[Any]]
    controller_lock: asyncio.Lock
    groups: GroupCoordinator
    metrics: BrokerMetrics

    @property
    def image(self) -> MetadataImage:
        return self.metadata.image

    async def control(self, operation: Callable[..., T], *args: Any) -> T:
        """Run a controller operation (serially, off the loop) and catch the image up with it."""
        async with self.controller_lock:
            try:
                return await self.run_blocking(operation, *args)
            finally:
                await self.run_blocking(self.metadata.catch_up)
