"""What request handlers may use: the broker's services, read through one object.

Handlers get this context and the decoded request; they translate between the wire
and ``partitions`` (or groups, the controller) and hold no storage logic of their own.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from shoal.cluster.partition_control import PartitionControl
from shoal.config import Config
from shoal.groups.coordinator import GroupCoordinator
from shoal.metadata.cache import MetadataCache
from shoal.metadata.controller import Controller
from shoal.metadata.image import MetadataImage
from shoal.metadata.log import MetadataConflictError
from shoal.observability.metrics import BrokerMetrics
from shoal.partitions.manager import Partitions
from shoal.protocol.errors import ErrorCode, KafkaError
from shoal.txn.coordinator import TransactionCoordinator
from shoal.txn.producer_ids import ProducerIdManager

T = TypeVar("T")
log = logging.getLogger(__name__)

#: How many times a change is decided again when other brokers' appends overtake it.
CONFLICT_RETRIES = 20


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
    #: Classic leadership and ISR changes (ElectLeaders).
    partition_control: PartitionControl
    transactions: TransactionCoordinator

    @property
    def image(self) -> MetadataImage:
        return self.metadata.image

    async def control(self, operation: Callable[..., T], *args: Any) -> T:
        """Run a cluster change (serially, off the loop), then catch the image up with it and
        publish it to ``partitions`` so its storage exists before the caller answers. A change
        another broker's append overtook is decided again on the newer image. A store that
        cannot be reached is REQUEST_TIMED_OUT (retriable), not a broken connection."""
        async with self.controller_lock:
            try:
                for _ in range(CONFLICT_RETRIES):
                    try:
                        return await self.run_blocking(operation, *args)
                    except MetadataConflictError:
                        continue
                raise KafkaError(
                    ErrorCode.not_controller,
                    f"the metadata log kept moving under this change ({CONFLICT_RETRIES} attempts); retry",
                )
            except KafkaError:
                raise
            except Exception as exc:
                log.warning("a cluster change failed: %s", exc)
                raise KafkaError(ErrorCode.request_timed_out, f"the metadata store is unavailable: {exc}") from exc
            finally:
                try:
                    image = await self.run_blocking(self.metadata.catch_up)
                except Exception as exc:  # the metadata tail catches up later
                    log.warning("catching up with the metadata log failed: %s", exc)
                else:
                    await self.partitions.publish(image)
