"""The leader's side of a diskless ISR: replicas' empty Fetches tell it where their caches end; it
shrinks the ISR when one stops catching up with the coordinator (the leader itself included) and
expands it when one catches up, through AlterPartition's epoch checks."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from shoal.cache_replicas.leader import LeaderIsr
from shoal.cache_replicas.replica import CacheReplica
from shoal.metadata.image import BrokerImage, MetadataImage, PartitionImage, TopicImage
from shoal.protocol.errors import ErrorCode

TOPIC_ID = uuid.uuid4()
KEY = (TOPIC_ID, 0)


def image(isr: tuple[int, ...], leader_epoch: int = 0, partition_epoch: int = 0) -> MetadataImage:
    p = PartitionImage(0, (1, 2, 3), isr, 1, leader_epoch, partition_epoch)
    topic = TopicImage("d", TOPIC_ID, {0: p}, {"diskless.enable": "true"})
    brokers = {n: BrokerImage(n, "127.0.0.1", 9090 + n, None) for n in (1, 2, 3)}
    return MetadataImage(topics_by_name={"d": topic}, topics_by_id={TOPIC_ID: topic}, brokers=brokers)


class Control:
    """AlterPartition as the controller answers it: the new ISR becomes the image's."""

    def __init__(self, holder: list[MetadataImage]) -> None:
        self.holder = holder
        self.calls: list[tuple[int, ...]] = []

    def alter_isr(self, topic_id: Any, partition: int, leader_epoch: int, partition_epoch: int, isr: Any) -> Any:
        self.calls.append(tuple(isr))
        self.holder[0] = image(tuple(isr), leader_epoch, partition_epoch + 1)
        return self.holder[0].topics_by_id[topic_id].partitions[partition]


async def run_blocking(fn: Any, *args: Any) -> Any:
    return fn(*args)


async def test_replicas_leave_and_join_the_isr_by_their_fetches() -> None:
    holder = [image((1, 2, 3))]
    control = Control(holder)
    isr = LeaderIsr(1, 300, control, run_blocking, lambda: holder[0])  # type: ignore[arg-type]
    own = CacheReplica(holder[0].topics_by_id[TOPIC_ID], 0)
    own.high_watermark = 10
    isr.apply(holder[0])
    assert isr.follower_fetch(KEY, 4, 10, 10) == ErrorCode.not_leader_or_follower  # not a replica
    assert isr.follower_fetch((uuid.uuid4(), 0), 2, 10, 10) == ErrorCode.not_leader_or_follower
    isr.start(lambda: {KEY: own})
    try:
        own.progress.update(10, 10, now_ms=_now())
        for _ in range(8):  # replica 2 keeps up, 3 never reports, the leader's cache stops
            assert isr.follower_fetch(KEY, 2, 10, 10) == ErrorCode.none
            await asyncio.sleep(0.1)
        assert holder[0].topics_by_id[TOPIC_ID].partitions[0].isr == (2,)
        assert isr.isr_shrinks >= 1
        own.progress.update(10, 10, now_ms=_now())  # the leader's cache caught up again
        assert isr.follower_fetch(KEY, 3, 10, 10) == ErrorCode.none  # and 3 reports, caught up
        await asyncio.sleep(0.2)
        assert holder[0].topics_by_id[TOPIC_ID].partitions[0].isr == (1, 2, 3)
        assert isr.isr_expands >= 1
    finally:
        await isr.stop()


def _now() -> int:
    import time

    return time.time_ns() // 1_000_000


def test_a_cache_serves_read_committed_only_below_the_coordinators_stable_offset() -> None:
    """READ_COMMITTED from a cache replica: not before the coordinator's transaction state was
    read after the last transactional batch; then up to its LSO (or the whole cache when nothing
    was open), with the aborted transactions overlapping what is read."""
    from types import SimpleNamespace

    topic = MetadataImage().topics_by_id.get(TOPIC_ID)  # an image is not needed for these rules
    r = CacheReplica(topic, 0)  # type: ignore[arg-type]
    r.log = SimpleNamespace(log_end_offset=50)  # type: ignore[assignment]
    assert r.committed_bound() is None  # never read
    r.txn_lso, r.txn_aborted, r.stable_to_end, r.txn_dirty = 30, ((7, 5, 12), (8, 20, 25)), False, False
    assert r.committed_bound() == 30
    assert r.aborted_between(0, 10) == ((7, 5),)
    assert r.aborted_between(13, 20) == ()
    assert r.aborted_between(13, 21) == ((8, 20),)
    r.stable_to_end = True
    assert r.committed_bound() == 50
    r.txn_dirty = True  # a transactional batch came in: wait for the next read of the state
    assert r.committed_bound() is None
