"""What request handlers may use: the broker's services, read through one object.

Handlers get this context and the decoded request; they translate between the
wire and the topic kinds and hold no storage logic of their own.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from shoal.classic.replica_manager import ReplicaManager
from shoal.config import Config
from shoal.coordinator.api import BatchCoordinator, TopicIdPartition
from shoal.diskless.append import Appender
from shoal.diskless.notify import CommitNotifier
from shoal.diskless.read import DisklessReader
from shoal.groups.coordinator import GroupCoordinator
from shoal.metadata.cache import MetadataCache
from shoal.metadata.controller import Controller
from shoal.metadata.image import MetadataImage, TopicImage
from shoal.observability.metrics import BrokerMetrics
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
    coordinator: BatchCoordinator
    appender: Appender
    reader: DisklessReader
    notifier: CommitNotifier
    producer_ids: ProducerIdManager
    run_blocking: Callable[..., Awaitable[Any]]
    controller_lock: asyncio.Lock
    groups: GroupCoordinator
    metrics: BrokerMetrics
    replicas: ReplicaManager

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

    @staticmethod
    def partition_key(topic: TopicImage, partition: int) -> TopicIdPartition:
        return TopicIdPartition(topic.topic_id, partition, topic.name)
