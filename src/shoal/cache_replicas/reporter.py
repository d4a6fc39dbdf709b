"""A replica's side of a diskless partition's ISR: telling each leader where our caches end.

KIP-1163 keeps Kafka's mechanism: replicas send Fetch to the leader (with ``replica_id``) and the
leader answers with no records. One request per leader broker carries every partition it leads
that we cache, at each cache's end; it goes out when caches moved (at most once per fill
interval) and at least every ``replica.fetch.wait.max.ms``.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from shoal.aio import wait_for
from shoal.cache_replicas.replica import CacheReplica
from shoal.metadata.image import MetadataImage
from shoal.protocol.apis import request_class
from shoal.protocol.broker_client import FETCH_VERSION, BrokerClient, BrokerConnectionError
from shoal.protocol.build import make, nested

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ReportSettings:
    node_id: int
    interval_ms: int
    max_wait_ms: int
    socket_timeout_ms: int


class PositionReporter:
    def __init__(
        self,
        settings: ReportSettings,
        image: Callable[[], MetadataImage],
        replicas: Callable[[], Sequence[CacheReplica]],
    ) -> None:
        self._settings = settings
        self._image = image
        self._replicas = replicas
        self._clients: dict[int, BrokerClient] = {}
        self._moved = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._unreachable: set[int] = set()

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="diskless-cache-reporter")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        for client in self._clients.values():
            await client.close()
        self._clients.clear()

    def moved(self) -> None:
        """Caches advanced: report soon."""
        self._moved.set()

    async def _run(self) -> None:
        s = self._settings
        while True:
            with contextlib.suppress(TimeoutError):
                await wait_for(self._moved.wait(), s.max_wait_ms / 1000)
            self._moved.clear()
            try:
                await self.report_once()
            except Exception:
                log.exception("reporting diskless cache positions failed")
            await asyncio.sleep(s.interval_ms / 1000)

    async def report_once(self) -> None:
        image = self._image()
        by_leader: dict[int, list[tuple[CacheReplica, int]]] = {}
        for r in self._replicas():
            topic = image.topics_by_id.get(r.topic.topic_id)
            p = topic.partitions.get(r.partition) if topic is not None else None
            if p is None or r.log is None or p.leader in (self._settings.node_id, -1):
                continue
            by_leader.setdefault(p.leader, []).append((r, p.leader_epoch))
        for gone in set(self._clients) - set(by_leader):
            await self._clients.pop(gone).close()
        await asyncio.gather(*(self._report(image, leader, items) for leader, items in by_leader.items()))

    async def _report(self, image: MetadataImage, leader: int, items: list[tuple[CacheReplica, int]]) -> None:
        broker = image.brokers.get(leader)
        if broker is None or broker.fenced:
            return
        s = self._settings
        client = self._clients.get(leader)
        if client is None or client.address != (broker.host, broker.port):
            if client is not None:
                await client.close()
            client = self._clients[leader] = BrokerClient(
                broker.host, broker.port, f"shoal-diskless-replica-{s.node_id}", s.socket_timeout_ms / 1000
            )
        cls = request_class(1, FETCH_VERSION)
        topic_cls, partition_cls = nested(cls, "FetchTopic"), nested(cls, "FetchPartition")
        by_topic: dict[str, list[Any]] = {}
        for r, epoch in items:
            by_topic.setdefault(r.topic.name, []).append(
                make(
                    partition_cls, partition=r.partition, current_leader_epoch=epoch, fetch_offset=r.cache_end,
                    last_fetched_epoch=-1, log_start_offset=r.log.log_start_offset if r.log else -1,
                    partition_max_bytes=0,
                )
            )
        request = make(
            cls, cluster_id=None, replica_id=s.node_id, max_wait=datetime.timedelta(0), min_bytes=0, max_bytes=0,
            isolation_level=0, session_id=0, session_epoch=-1,
            topics=tuple(make(topic_cls, topic=t, partitions=tuple(ps)) for t, ps in by_topic.items()),
            forgotten_topics_data=(), rack_id="",
        )
        try:
            await client.request(request)
        except BrokerConnectionError as exc:
            if leader not in self._unreachable:
                log.info("reporting diskless cache positions to broker %d failed: %s", leader, exc)
            self._unreachable.add(leader)
            return
        self._unreachable.discard(leader)
