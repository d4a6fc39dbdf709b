"""The controller role: one broker at a time holds the lease in the metadata store and runs the
cluster's periodic duties.

Each round (every ``broker.heartbeat.interval.ms``, at most 500 ms apart) a controller-role
broker that does not hold the lease tries to take it (it is free once its holder has not renewed it for ``broker.session.timeout.ms``); the
holder renews it and writes the fencing the broker registry calls for (``fencing``) and the
leader elections that fencing calls for (``election``), and, with ``auto.leader.rebalance.enable``,
moves leaderships back to preferred replicas every ``leader.imbalance.check.interval.seconds``. Work that
must run once per cluster (diskless retention, the object cleaner, group offset expiry) asks
``active`` before each round. Topic and config changes do not need the lease: every broker
decides them by compare-and-append (``shoal.metadata.controller``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from shoal.cluster.election import (
    failover_changes,
    imbalanced_partitions,
    preferred_changes,
    reassignment_changes,
    unclean_election_enabled,
    unclean_elections,
)
from shoal.cluster.fencing import fencing_changes
from shoal.metadata.image import MetadataImage, TopicImage
from shoal.metadata.log import MetadataConflictError, MetadataStore
from shoal.metadata.records import ControllerChangeRecord, MetadataRecord

log = logging.getLogger(__name__)

#: The longest time between two controller rounds, whatever ``broker.heartbeat.interval.ms`` is.
MAX_ROUND_MS = 500


class ControllerDuties:
    """Takes, keeps and uses the controller lease for one controller-role broker."""

    def __init__(
        self,
        store: MetadataStore,
        run_blocking: Callable[..., Awaitable[Any]],
        catch_up: Callable[[], MetadataImage],
        node_id: int,
        *,
        heartbeat_interval_ms: int,
        session_timeout_ms: int,
        unclean_leader_election: bool = False,
        leader_rebalance_interval_ms: int | None = None,
        leader_imbalance_percentage: int = 10,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._store = store
        self._run_blocking = run_blocking
        self._catch_up = catch_up
        self._node_id = node_id
        # A joining broker waits for the controller's next round to be unfenced: keep rounds short.
        self._interval = min(heartbeat_interval_ms, MAX_ROUND_MS) / 1000
        self._session_timeout_ms = session_timeout_ms
        self._unclean = unclean_leader_election
        #: ``auto.leader.rebalance.enable``: preferred leaders come back every this often (None: off).
        self._rebalance_s = None if leader_rebalance_interval_ms is None else leader_rebalance_interval_ms / 1000
        self._imbalance_percentage = leader_imbalance_percentage
        #: Kafka's UncleanLeaderElectionsPerSec, counted by the controller that made them.
        self.unclean_elections = 0
        self._clock = clock
        self._next_rebalance = clock() + (self._rebalance_s or 0)
        self._epoch: int | None = None
        self._task: asyncio.Task[None] | None = None

    @property
    def active(self) -> bool:
        """Whether this broker holds the controller lease (as of its last renewal)."""
        return self._epoch is not None

    async def tick(self) -> None:
        """One round: take or renew the lease, then (as holder) write the fencing changes."""
        await self._run_blocking(self._tick_blocking)

    def _tick_blocking(self) -> None:
        if self._epoch is not None and not self._store.renew_lease(
            self._node_id, self._epoch, self._session_timeout_ms
        ):
            log.warning("node %d lost the controller lease (epoch %d)", self._node_id, self._epoch)
            self._epoch = None
        if self._epoch is None:
            self._epoch = self._store.acquire_lease(self._node_id, self._session_timeout_ms)
            if self._epoch is None:
                return
            log.info("node %d is the active controller (lease epoch %d)", self._node_id, self._epoch)
        image = self._catch_up()
        changes: list[MetadataRecord] = []
        if image.controller != (self._node_id, self._epoch):
            changes.append(ControllerChangeRecord(self._node_id, self._epoch))
        changes += fencing_changes(image, self._store.broker_registrations(), self._session_timeout_ms)
        # Elections on the image as the fencing leaves it: fenced brokers leave ISRs, their
        # partitions get new leaders, leaderless ones get one when an ISR replica is back.
        fenced = image.apply((image.offset + 1 + i, c) for i, c in enumerate(changes)) if changes else image
        changes += failover_changes(fenced, self.unclean_for)
        if not changes:
            changes += reassignment_changes(image)
        if not changes and self._rebalance_s is not None and self._clock() >= self._next_rebalance:
            # The automatic preferred leader election: on brokers past the imbalance percentage,
            # partitions whose preferred replica is in sync and alive get it back as leader.
            self._next_rebalance = self._clock() + self._rebalance_s
            imbalanced = imbalanced_partitions(image, self._imbalance_percentage)
            if imbalanced:
                changes += preferred_changes(image, set(imbalanced))[0]
        if not changes:
            return
        try:
            self._store.append(changes, image.offset, self._node_id, lease_epoch=self._epoch)
        except MetadataConflictError:
            # Another broker appended meanwhile (the next round decides on the newer image), or
            # our lease epoch went stale (the next round's renewal finds out).
            return
        for change in changes:
            log.info("controller: %s", change)
        self._report_unclean(fenced, changes)

    def _report_unclean(self, before: MetadataImage, changes: list[MetadataRecord]) -> None:
        for topic, partition, leader in unclean_elections(before, changes):
            self.unclean_elections += 1
            log.warning(
                "unclean leader election of %s-%d: broker %d was not in the ISR and leads now; records "
                "only the old ISR had are lost (unclean.leader.election.enable)", topic, partition, leader,
            )

    def unclean_for(self, topic: TopicImage) -> bool:
        return unclean_election_enabled(topic, self._unclean)

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name="controller-duties")

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self._interval)
            try:
                await self.tick()
            except Exception as exc:  # the store is down: the lease expires unless renewed in time
                log.warning("controller round failed: %s", exc)

    async def stop(self) -> None:
        """Stop the rounds and resign: the lease is renewed to expire now, so a standby takes
        over at its next round rather than after ``broker.session.timeout.ms``."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        epoch, self._epoch = self._epoch, None
        if epoch is not None:
            try:
                await self._run_blocking(self._store.renew_lease, self._node_id, epoch, 0)
            except Exception as exc:
                log.warning("resigning the controller lease failed (it expires by itself): %s", exc)
