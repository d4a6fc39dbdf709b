"""The broker process: wires the metadata store, controller, coordinator, object storage,
the diskless data plane and the Kafka listener together, and shuts them down in order.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import socket
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from shoal.cluster.duties import ControllerDuties
from shoal.cluster.election import unclean_election_enabled
from shoal.cluster.membership import BrokerMembership
from shoal.cluster.partition_control import PartitionControl
from shoal.cluster.placement import group_partition, partition_owner
from shoal.config import Config
from shoal.groups.coordinator import GroupConfig, GroupCoordinator
from shoal.groups.marker_fence import MarkerEpochs
from shoal.memory import trim_periodically, tune_allocator
from shoal.metadata.cache import MetadataCache
from shoal.metadata.controller import Controller
from shoal.metadata.image import MetadataImage
from shoal.objects.factory import open_object_storage, redact_storage_url
from shoal.objects.storage import ObjectStorage
from shoal.observability.metrics import BrokerMetrics, MetricsServer, start_metrics_server
from shoal.partitions.api import TxnMarker
from shoal.partitions.factory import build_partitions
from shoal.partitions.manager import Partitions
from shoal.protocol.errors import ErrorCode
from shoal.server.connection import ConnectionSettings, serve_connection
from shoal.server.context import ServerContext
from shoal.server.dispatch import dispatch
from shoal.server.frames import FrameConnection, start_frame_server
from shoal.server.limits import ConnectionQuotas, RequestBudget, connection_overrides
from shoal.server.txn_marker_channel import TxnMarkerChannel
from shoal.store.factory import Stores, object_storage_url, open_stores
from shoal.txn.config import TxnConfig
from shoal.txn.coordinator import TransactionCoordinator
from shoal.txn.producer_ids import ProducerIdManager
from shoal.txn.verification import TransactionVerifier

log = logging.getLogger(__name__)

METADATA_POLL_S = 0.5
UNFENCE_POLL_S = 0.1
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


_GROUP_MARKER_RETRIABLE = frozenset(
    {ErrorCode.not_coordinator, ErrorCode.coordinator_load_in_progress, ErrorCode.coordinator_not_available}
)


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
        self._marker_epochs = MarkerEpochs()  # fences a deposed transaction coordinator's late group markers
        self._transactions: TransactionCoordinator | None = None
        self._marker_channel: TxnMarkerChannel | None = None
        self._metrics_server: MetricsServer | None = None
        self._partitions: Partitions | None = None
        self._stores: Stores | None = None
        self._metadata: MetadataCache | None = None
        self._membership: BrokerMembership | None = None
        self._duties: ControllerDuties | None = None
        self._control: PartitionControl | None = None
        self._alive: tuple[Any, ...] | None = None
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
        self._metadata = metadata = MetadataCache(store)
        await self.run_blocking(metadata.catch_up)

        # Bind before registering: holding the port proves that an earlier incarnation registered
        # at this endpoint is gone, so a broker restarted after a crash takes its node id back at once.
        self._server = await start_frame_server(
            self._on_connection, listen.host or None, listen.port, reuse_address=True, start_serving=False
        )
        heartbeat_ms, session_ms = config["broker.heartbeat.interval.ms"], config["broker.session.timeout.ms"]
        self._membership = membership = BrokerMembership(
            store, self.run_blocking, self.node_id, advertised.host, advertised.port, config["broker.rack"],
            heartbeat_interval_ms=heartbeat_ms, session_timeout_ms=session_ms, on_lost=self._halt,
        )
        await membership.register()
        membership.start()
        if "controller" in config["process.roles"]:
            self._duties = ControllerDuties(
                store, self.run_blocking, metadata.catch_up, self.node_id,
                heartbeat_interval_ms=heartbeat_ms, session_timeout_ms=session_ms,
                unclean_leader_election=config["unclean.leader.election.enable"],
                leader_rebalance_interval_ms=(
                    config["leader.imbalance.check.interval.seconds"] * 1000
                    if config["auto.leader.rebalance.enable"] else None
                ),
                leader_imbalance_percentage=config["leader.imbalance.per.broker.percentage"],
            )
        await self._wait_until_unfenced()
        if self._duties is not None:
            self._duties.start()
        controller = Controller(store, config, metadata.catch_up)
        self._control = partition_control = PartitionControl(
            store, self.node_id, metadata.catch_up,
            functools.partial(unclean_election_enabled, broker_default=config["unclean.leader.election.enable"]),
        )

        storage_url = object_storage_url(config)
        self._storage = storage = open_object_storage(storage_url)
        self.metrics = metrics = BrokerMetrics(broker_rack=config["broker.rack"])
        metrics.track_cluster(self)
        self._partitions = partitions = build_partitions(
            config, self.node_id, cluster_id, lambda: metadata.image, stores.coordinator, storage, metrics,
            self.run_blocking, self._halt, is_controller=self.is_controller, control=self._control,
            remote_log_metadata=stores.remote_log_metadata,
            finish_tiering_disablement=controller.finish_tiering_disablement,
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

        self._alive, owns = self._group_ownership(metadata.image)
        groups = await GroupCoordinator.open(
            stores.groups, self.run_blocking, GroupConfig.from_config(config), topic_id_of, owns=owns
        )
        self._groups = groups
        groups.start()
        self._marker_channel = channel = TxnMarkerChannel(
            self.node_id, lambda: metadata.image, partitions, config["offsets.topic.num.partitions"]
        )
        self._transactions = transactions = TransactionCoordinator(
            stores.transactions, self.run_blocking, TxnConfig.from_config(config),
            lambda: ctx.producer_ids.next_id(), channel.send,
        )
        await transactions.set_ownership(self._owns_partition(metadata.image), metadata.image.offset)
        transactions.start()
        partitions.serve_transactions(TransactionVerifier(stores.transactions, self.run_blocking).verify, self._group_marker)
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
            partition_control=partition_control,
            transactions=transactions,
        )
        ctx.producer_ids = ProducerIdManager(lambda: ctx.control(controller.allocate_producer_ids))
        self.ctx = ctx
        self._tasks.append(asyncio.create_task(self._tail_metadata(), name="metadata-tail"))
        self._tasks.append(asyncio.create_task(trim_periodically(), name="memory-trim"))

        self._settings = ConnectionSettings(
            config["socket.request.max.bytes"], config["connections.max.idle.ms"] / 1000
        )
        self._budget = RequestBudget(config["queued.max.requests"], config["queued.max.request.bytes"])
        self._quotas = ConnectionQuotas(
            config["max.connections"],
            config["max.connections.per.ip"],
            connection_overrides(config["max.connections.per.ip.overrides"]),
        )
        await self._server.start_serving()
        log.info(
            "Shoal broker %d started (cluster %s, incarnation %s, rack %s): listening on %s:%d, advertised "
            "%s:%d, metadata in %s, objects in %s",
            self.node_id, cluster_id, membership.incarnation_id, config["broker.rack"], listen.host or "*",
            listen.port, advertised.host, advertised.port, stores.location, redact_storage_url(storage_url),
        )

    def is_controller(self) -> bool:
        """Whether this broker runs the once-per-cluster duties now (it holds the controller lease)."""
        return self._duties is not None and self._duties.active

    def broker_counts(self) -> tuple[int, int]:
        """(unfenced, fenced) brokers in this broker's image, for the controller gauges."""
        brokers = self._metadata.image.brokers.values() if self._metadata is not None else ()
        fenced = sum(1 for b in brokers if b.fenced)
        return len(brokers) - fenced, fenced

    def unclean_elections(self) -> int:
        """Unclean leader elections made here, for the controller's UncleanLeaderElectionsPerSec."""
        made = self._duties.unclean_elections if self._duties is not None else 0
        return made + (self._control.unclean_elections if self._control is not None else 0)

    async def _wait_until_unfenced(self) -> None:
        """Serve only once the controller has registered and unfenced this incarnation (KRaft's
        broker waits the same way); a controller-role broker may be that controller."""
        assert self._metadata is not None and self._membership is not None
        waited = 0.0
        while True:
            if self._duties is not None:
                await self._duties.tick()
            image = await self.run_blocking(self._metadata.catch_up)
            me = image.brokers.get(self.node_id)
            if me is not None and me.incarnation_id == self._membership.incarnation_id and not me.fenced:
                return
            if waited and waited % 10 < UNFENCE_POLL_S:
                log.info("waiting for the controller to unfence broker %d (%.0f s so far)", self.node_id, waited)
            await asyncio.sleep(UNFENCE_POLL_S)
            waited += UNFENCE_POLL_S

    def _group_ownership(self, image: MetadataImage) -> tuple[tuple[Any, ...], Callable[[str], bool]]:
        """Who owns which coordinator partition now (registered and alive brokers) and, from that,
        which groups this broker coordinates (``shoal.cluster.placement``)."""
        registered = tuple(sorted(image.brokers))
        alive = tuple(b.node_id for b in image.alive_brokers())
        partitions, me = self.config["offsets.topic.num.partitions"], self.node_id
        return (registered, alive), lambda group_id: (
            partition_owner(group_partition(group_id, partitions), registered, alive) == me
        )

    def _owns_partition(self, image: MetadataImage) -> Callable[[int], bool]:
        """Does this broker own a coordinator partition (of groups or of transactional ids)?"""
        registered = tuple(sorted(image.brokers))
        alive = tuple(b.node_id for b in image.alive_brokers())
        return lambda partition: partition_owner(partition, registered, alive) == self.node_id

    async def _group_marker(self, partition: int, marker: TxnMarker) -> ErrorCode:
        """A transaction marker for ``__consumer_offsets-<partition>``: the group coordinator owning
        that partition makes the producer's transactional offset commits visible, or drops them."""
        assert self._groups is not None and self.ctx is not None
        if not self._owns_partition(self.ctx.image)(partition):
            return ErrorCode.not_leader_or_follower
        if self._marker_epochs.fenced(partition, marker.producer_id, marker.coordinator_epoch):
            return ErrorCode.transaction_coordinator_fenced
        offsets_partitions = self.config["offsets.topic.num.partitions"]
        error = await self._groups.complete_transaction(
            marker.producer_id, marker.commit, lambda group_id: group_partition(group_id, offsets_partitions) == partition
        )
        if error == ErrorCode.none:
            self._marker_epochs.applied(partition, marker.producer_id, marker.coordinator_epoch)
        # A group moving or loading, or the store failing: the coordinator retries (as KafkaApis
        # answers a marker for a partition it cannot complete now).
        return ErrorCode.not_leader_or_follower if error in _GROUP_MARKER_RETRIABLE else error

    async def _place_groups(self, image: MetadataImage) -> None:
        """Move group and transaction coordination when the set of alive brokers changes."""
        alive, owns = self._group_ownership(image)
        if alive != self._alive and self._groups is not None:
            await self._groups.set_ownership(owns)
            if self._transactions is not None:
                await self._transactions.set_ownership(self._owns_partition(image), image.offset)
            self._alive = alive  # only once loaded: a failed load is tried again at the next tail

    async def _on_connection(self, conn: FrameConnection) -> None:
        ctx = self.ctx
        assert ctx is not None  # the listener serves only once the context is built
        ip = str((conn.get_extra_info("peername") or ("?",))[0])
        refused = self._quotas.admit(ip)
        if refused is not None:
            log.info("closing connection from %s: %s", ip, refused)
            if conn.transport is not None:
                conn.transport.abort()
            return
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        try:
            await serve_connection(conn, lambda frame, peer: dispatch(ctx, frame, peer), self._settings, self._budget)
        except asyncio.CancelledError:
            # Shutdown cancels connections still open after the drain: end quietly.
            if conn.transport is not None:
                conn.transport.abort()
        finally:
            self._connections.discard(task)
            self._quotas.release(ip)

    def _halt(self, reason: str) -> None:
        log.error("halting the broker: %s", reason)
        self.fatal.set()

    async def _tail_metadata(self) -> None:
        """Follow the metadata log: publish each newer image to ``partitions`` (other brokers'
        topic changes) and move group coordination when brokers come and go."""
        assert self.ctx is not None and self._partitions is not None
        failing = False
        while True:
            await asyncio.sleep(METADATA_POLL_S)
            try:
                image = await self.run_blocking(self.ctx.metadata.catch_up)
                await self._partitions.publish(image)
                await self._place_groups(image)
            except Exception as exc:
                if not failing:  # once per outage, not every poll
                    log.warning("following the metadata log failed (retrying every %.1f s): %s", METADATA_POLL_S, exc)
                failing = True
            else:
                if failing:
                    log.info("following the metadata log again")
                failing = False

    async def _controlled_shutdown(self) -> None:
        """Move this broker's classic leaderships to other in-sync replicas and leave the ISRs
        (``controlled.shutdown.enable``), so writers switch leader now rather than after the
        session timeout. Best effort: with the store down the controller fences the broker later."""
        if not self.config["controlled.shutdown.enable"] or self._control is None or self.ctx is None:
            return
        try:
            moved = await self.run_blocking(self._control.shut_down, self.node_id)
            if moved:
                log.info("controlled shutdown: %d partition(s) changed leader or ISR", moved)
                assert self._partitions is not None
                await self._partitions.publish(await self.run_blocking(self.ctx.metadata.catch_up))
        except Exception as exc:
            log.warning("controlled shutdown failed (the controller fences this broker instead): %s", exc)

    async def stop(self) -> None:
        """Stop accepting, finish or fail every in-flight produce, then close everything."""
        log.info("Shoal broker %d shutting down", self.node_id)
        if self._server is not None:
            self._server.close()
        await self._controlled_shutdown()
        if self._partitions is not None:
            # Diskless first: the active WAL segment is flushed and its upload and commit awaited,
            # so every request already accepted is answered with its real outcome.
            await self._partitions.stop()
        if self._transactions is not None:
            await self._transactions.close()
        if self._marker_channel is not None:
            await self._marker_channel.close()
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
        # Only now leave the registry, as a KRaft broker is fenced once its shutdown completes: while
        # it drains, its own Metadata answers still list it (a single node must not answer "no
        # brokers"). Other brokers stop sending clients here at the controller's next round.
        if self._membership is not None:
            await self._membership.stop()
        if self._duties is not None:
            with contextlib.suppress(Exception):  # the store may be down: the lease then expires by itself
                await self._duties.tick()  # as controller, fence this broker before resigning
            await self._duties.stop()
        if self._storage is not None:
            await self._storage.close()
        if self._stores is not None:
            self._stores.close()
        self._executor.shutdown(wait=True)
        if self._metrics_server is not None:
            self._metrics_server.close()
        log.info("Shoal broker %d stopped", self.node_id)
