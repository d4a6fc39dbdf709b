"""The leader's side of a diskless partition's ISR (KIP-1163 "Replicas").

Replicas are in sync with the Batch Coordinator, not with the leader, but they still send the
leader Fetch requests (answered with no records): the fetch offset is the end of their cache.
The leader applies Kafka's caught-up rule to each against the coordinator's high watermark as
its own cache replica last learnt it, and to itself through its own cache (a leader may be out
of sync too). Every ``replica.lag.time.max.ms / 2``, and at once when a replica catches up, the
ISR becomes the alive replicas caught up within ``replica.lag.time.max.ms``, through
``PartitionControl.alter_isr`` (leader and partition epochs checked), one change per partition
at a time.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from shoal.aio import wait_for
from shoal.cache_replicas.replica import CacheReplica, Key, Progress
from shoal.cluster.partition_control import PartitionControl
from shoal.metadata.image import MetadataImage
from shoal.protocol.errors import ErrorCode, KafkaError

log = logging.getLogger(__name__)



def _now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(slots=True)
class Led:
    """A diskless partition this broker leads: its followers' progress, by broker."""

    leader_epoch: int
    followers: dict[int, Progress] = field(default_factory=dict)
    changing: bool = False


class LeaderIsr:
    def __init__(
        self,
        node_id: int,
        lag_ms: int,
        control: PartitionControl | None,
        run_blocking: Callable[..., Awaitable[Any]],
        image: Callable[[], MetadataImage],
    ) -> None:
        self._node_id = node_id
        self._lag_ms = lag_ms
        self._control = control
        self._run_blocking = run_blocking
        self._image = image
        self.led: dict[Key, Led] = {}
        self._due = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._changes: set[asyncio.Task[None]] = set()
        self.isr_shrinks = 0
        self.isr_expands = 0

    def start(self, own: Callable[[], Mapping[Key, CacheReplica]]) -> None:
        if self._control is not None:
            self._task = asyncio.create_task(self._loop(own), name="diskless-isr")

    async def stop(self) -> None:
        for task in [*self._changes, *([self._task] if self._task else [])]:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._task = None

    def apply(self, image: MetadataImage) -> None:
        """Lead the diskless partitions ``image`` names this broker leader of. A new leadership
        gives the ISR members ``replica.lag.time.max.ms`` to report, as Kafka's does."""
        now = _now_ms()
        seen: set[Key] = set()
        for topic in image.topics_by_name.values():
            if not topic.is_diskless:
                continue
            for p in topic.partitions.values():
                if p.leader != self._node_id:
                    continue
                key = (topic.topic_id, p.partition)
                seen.add(key)
                led = self.led.get(key)
                if led is None or led.leader_epoch != p.leader_epoch:
                    led = self.led[key] = Led(p.leader_epoch)
                    for b in p.isr:
                        led.followers[b] = Progress(caught_up_ms=now)
                for b in p.replicas:
                    led.followers.setdefault(b, Progress())
        for key in set(self.led) - seen:
            del self.led[key]
        self._due.set()

    def follower_fetch(self, key: Key, replica_id: int, position: int, high_watermark: int) -> ErrorCode:
        """A replica's Fetch: where its cache ends. NOT_LEADER_OR_FOLLOWER when this broker does
        not lead the partition or the sender holds no replica of it."""
        led = self.led.get(key)
        if led is None or replica_id not in led.followers:
            return ErrorCode.not_leader_or_follower
        progress = led.followers[replica_id]
        was_in_sync = progress.in_sync(_now_ms(), self._lag_ms)
        progress.update(position, high_watermark, _now_ms())
        if not was_in_sync and progress.in_sync(_now_ms(), self._lag_ms):
            self._due.set()  # may join the ISR now
        return ErrorCode.none

    # ------------------------------------------------------------------------------ ISR changes

    async def _loop(self, own: Callable[[], Mapping[Key, CacheReplica]]) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await wait_for(self._due.wait(), self._lag_ms / 2000)
            self._due.clear()
            try:
                self._check(own())
            except Exception:
                log.exception("checking diskless ISRs failed")

    def _check(self, own: Mapping[Key, CacheReplica]) -> None:
        image = self._image()
        now = _now_ms()
        for key, led in self.led.items():
            if led.changing:
                continue
            topic = image.topics_by_id.get(key[0])
            p = topic.partitions.get(key[1]) if topic is not None else None
            if topic is None or p is None or p.leader != self._node_id or p.leader_epoch != led.leader_epoch:
                continue
            mine = own.get(key)
            if mine is not None:
                led.followers[self._node_id] = mine.progress
            isr = tuple(
                b for b in p.replicas
                if b in led.followers and led.followers[b].in_sync(now, self._lag_ms) and _alive(image, b)
            )
            if isr != p.isr:
                led.changing = True
                task = asyncio.ensure_future(self._alter(key, f"{topic.name}-{p.partition}", led, p.leader_epoch, p.partition_epoch, p.isr, isr))
                self._changes.add(task)
                task.add_done_callback(self._changes.discard)

    async def _alter(
        self, key: Key, name: str, led: Led, leader_epoch: int, partition_epoch: int, old: tuple[int, ...],
        isr: tuple[int, ...],
    ) -> None:
        assert self._control is not None
        try:
            changed = await self._run_blocking(self._control.alter_isr, key[0], key[1], leader_epoch, partition_epoch, isr)
        except KafkaError as exc:
            log.info("diskless ISR change of %s to %s refused: %s", name, list(isr), exc.message)
            return
        except Exception as exc:
            log.warning("diskless ISR change of %s to %s failed: %s", name, list(isr), exc)
            return
        finally:
            led.changing = False
        if set(old) - set(changed.isr):
            self.isr_shrinks += 1
        if set(changed.isr) - set(old):
            self.isr_expands += 1
        log.info("%s: ISR %s -> %s (in sync with the Batch Coordinator)", name, list(old), list(changed.isr))


def _alive(image: MetadataImage, broker: int) -> bool:
    known = image.brokers.get(broker)
    return known is not None and not known.fenced
