"""The broker process: wires the metadata store, controller, coordinator, object storage,
the diskless data plane and the Kafka listener together, and shuts them down in order.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from shoal.config import Config
from shoal.groups.coordinator import GroupConfig, GroupCoordinator
from shoal.metadata.cache import MetadataCache
from shoal.metadata.controller import Controller
from shoal.objects.factory import open_object_storage
from shoal.objects.storage import ObjectStorage
from shoal.observability.metrics import BrokerMetrics, MetricsServer, start_metrics_server
from shoal.partitions.factory import build_partitions
from shoal.partitions.manager import Partitions
from shoal.server.connection import ConnectionSettings, serve_connection
from shoal.server.context import ServerContext
from shoal.server.dispatch import dispatch
from shoal.server.limits import ConnectionQuotas, RequestBudget, connection_overrides
from shoal.server.memory import trim_periodically, tune_allocator
from shoal.store.factory import Stores, object_storage_url, open_stores
from shoal.txn.producer_ids import ProducerIdManager

log = logging.getLogger(__name__)

METADATA_POLL_S = 0.5
LEASE_RENEW_S = 10.0
SHUTDOWN_DRAIN_S = 1.0  # time for answered produce requests to reach their clients


@dataclass(frozen=True, slots=True)
class Endpoint:
    host: str
    port: int


def parse_listener(listener: str) -> Endpoint:
    """``PLAINTEXT://host:port`` (empty host = all interfaces)."""
    parts = urlsplit(listener)
    if parts.scheme.upper() != "PLAINTEXT":
        raise ValueError(f"unsupported listener {listener!r}: only PLAINTEXT listeners are available")
    if parts.port is None:
        raise ValueError(f"listener {listener!r} has no port")
    return Endpoint(parts.hostname or "", parts.port)


class Broker:
    def __init__(self, config: Config) -> None:
        self.config = config
        self.node_id: int = config["node.id"]
        self._tasks: list[asyncio.Task[None]] = []
        self._connections: set[asyncio.Task[None]] = set()
        self._server: asyncio.Server | None = None
        self._executor = ThreadPoolExecutor(max_workers=8, thread_name_prefix="shoal-io")
        self.ctx: ServerContext | None = None
        self._storage: ObjectStorage | None = None
        self._groups: GroupCoordinator | None = None
        self._metrics_server: MetricsServer | None = None
        self._partitions: Partitions | None = None
        self._stores: Stores | None = None
        #: Set when the broker must stop on its own (every log dir failed), as Kafka halts.
        self.fatal = asyncio.Event()

    async def run_blocking(self, fn: Any, *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    async def start(self) -> None:
        config = self.config
        tune_allocator()
        listen = parse_listener(config["listeners"][0])
        advertised = parse_listener((config["advertised.listeners"] or config["listeners"])[0])
        if not advertised.host:
            advertised = Endpoint(socket.gethostname(), advertised.port)

        self._stores = stores = await self.run_blocking(open_stores, config)
        store = stores.metadata
        cluster_id = await self.run_blocking(store.cluster_id)
        metadata = MetadataCache(store)
        await self.run_blocking(metadata.catch_up)
        controller = await self.run_blocking(Controller, store, config, metadata.catch_up)
        registered = metadata.image.brokers.get(self.node_id)
        if registered is None or (registered.host, registered.port, registered.rack) != (
            advertised.host, advertised.port, config["broker.rack"]
        ):
            await self.run_blocking(
                controller.register_broker, self.node_id, advertised.host, advertised.port, config["broker.rack"]
            )
            await self.run_blocking(metadata.catch_up)

        storage_url = object_storage_url(config)
        self._storage = storage = open_object_storage(storage_url)
        self.metrics = metrics = BrokerMetrics()
        self._partitions = partitions = build_partitions(
            config, self.node_id, cluster_id, lambda: metadata.image, stores.coordinator, storage, metrics,
            self.run_blocking, self._halt,
        )
        await partitions.start()
        if config["metrics.http.port"] >= 0:
            self._metrics_server = start_metrics_server(
                metrics.registry, config["metrics.http.host"], config["metrics.http.port"]
            )
            log.info("metrics at http://%s:%d/metrics", self._metrics_server.host, self._metrics_server.port)

        def topic_id_of(name: str) -> uuid.UUID | None:
            topic = metadata.image.topic(name)
            return None if topic is None else topic.topic_id

        groups = await GroupCoordinator.open(
            stores.groups, self.run_blocking, GroupConfig.from_config(config), topic_id_of
        )
        groups.start()
        self._groups = groups
        ctx = ServerContext(
            config=config,
            node_id=self.node_id,
            cluster_id=cluster_id,
            rack=config["broker.rack"],
            metadata=metadata,
            controller=controller,
            partitions=partitions,
            producer_ids=None,  # type: ignore[arg-type]  # set just below: it needs ctx.control
            run_blocking=self.run_blocking,
            controller_lock=asyncio.Lock(),
            groups=groups,
            metrics=metrics,
        )
        ctx.producer_ids = ProducerIdManager(lambda: ctx.control(controller.allocate_producer_ids))
        self.ctx = ctx
        self._tasks.append(asyncio.create_task(self._tail_metadata(), name="metadata-tail"))
        self._tasks.append(asyncio.create_task(self._renew_lease(), name="controller-lease"))
        self._tasks.append(asyncio.create_task(trim_periodically(), name="memory-trim"))

        settings = ConnectionSettings(config["socket.request.max.bytes"], config["connections.max.idle.ms"] / 1000)
        budget = RequestBudget(config["queued.max.requests"], config["queued.max.request.bytes"])
        quotas = ConnectionQuotas(
            config["max.connections"],
            config["max.connections.per.ip"],
            connection_overrides(config["max.connections.per.ip.overrides"]),
        )

        async def on_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            ip = str((writer.get_extra_info("peername") or ("?",))[0])
            refused = quotas.admit(ip)
            if refused is not None:
                log.info("closing connection from %s: %s", ip, refused)
                writer.transport.abort()
                return
            task = asyncio.current_task()
            assert task is not None
            self._connections.add(task)
            try:
                await serve_connection(reader, writer, lambda frame, peer: dispatch(ctx, frame, peer), settings, budget)
            finally:
                self._connections.discard(task)
                quotas.release(ip)

        self._server = await asyncio.start_server(
            on_connection, host=listen.host or None, port=listen.port, reuse_address=True, limit=1 << 20
        )
        log.info(
            "Shoal broker %d started (cluster %s): listening on %s:%d, advertised %s:%d, metadata in %s, "
            "objects in %s",
            self.node_id, cluster_id, listen.host or "*", listen.port, advertised.host, advertised.port,
            stores.location, storage_url,
        )

    def _halt(self, reason: str) -> None:
        log.error("halting the broker: %s", reason)
        self.fatal.set()

    async def _tail_metadata(self) -> None:
        assert self.ctx is not None
        while True:
            await asyncio.sleep(METADATA_POLL_S)
            try:
                await self.run_blocking(self.ctx.metadata.catch_up)
            except Exception:
                log.exception("reading the metadata log failed")

    async def _renew_lease(self) -> None:
        assert self.ctx is not None
        while True:
            await asyncio.sleep(LEASE_RENEW_S)
            try:
                await self.run_blocking(self.ctx.controller.renew)
            except Exception:
                log.exception("renewing the controller lease failed")

    async def stop(self) -> None:
        """Stop accepting, finish or fail every in-flight produce, then close everything."""
        log.info("Shoal broker %d shutting down", self.node_id)
        if self._server is not None:
            self._server.close()
        if self._partitions is not None:
            # Diskless first: the active WAL segment is flushed and its upload and commit awaited,
            # so every request already accepted is answered with its real outcome.
            await self._partitions.stop()
        if self._groups is not None:
            # Parked JoinGroup/SyncGroup requests are answered (NOT_COORDINATOR) and pending
            # offset commits reach the store before connections are closed.
            await self._groups.close()
        if self._connections:
            _, still_open = await asyncio.wait(list(self._connections), timeout=SHUTDOWN_DRAIN_S)
            for task in still_open:
                task.cancel()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._storage is not None:
            await self._storage.close()
        if self._stores is not None:
            self._stores.close()
        self._executor.shutdown(wait=True)
        if self._metrics_server is not None:
            self._metrics_server.close()
        log.info("Shoal broker %d stopped", self.node_id)
