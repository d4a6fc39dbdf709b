# ruff: noqa: F811
"""Cache replicas behind the partitions seam, wired as the broker wires them (SQLite coordinator,
local object storage, cache logs on the log dir): reads come from the cache once it holds the
offset, older offsets and a lagging cache go to object storage, DeleteRecords and a deleted cache
dir are followed."""

from __future__ import annotations

import asyncio
import shutil
import time

import pytest

from shoal.partitions.api import AppendRequest, FetchOptions, ReadRequest
from shoal.protocol.errors import ErrorCode

# ``node`` is test_partitions_seam's fixture: pytest finds it by that name, so the tests' parameters
# must be called ``node`` too (hence F811 for the whole file).
from tests.unit.test_partitions_seam import PRODUCE, Node, batch, node, values  # noqa: F401

CONSUMER = FetchOptions(max_bytes=1 << 20, min_bytes=1, max_wait_s=0.0)


def caches(node: Node):  # type: ignore[no-untyped-def]
    return node.partitions._kinds["diskless"]._caches  # type: ignore[attr-defined]


async def wait_for(predicate, what: str, timeout: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout}s")
        await asyncio.sleep(0.02)


async def read(node: Node, topic: str, offset: int):  # type: ignore[no-untyped-def]
    (outcome,) = await node.partitions.read([ReadRequest(topic, None, 0, offset, 1 << 20)], CONSUMER)
    return outcome


def cache_of(node: Node, topic: str):  # type: ignore[no-untyped-def]
    t = node.metadata.image.topic(topic)
    assert t is not None
    return caches(node).replicas[(t.topic_id, 0)]


async def test_reads_come_from_the_cache_once_it_holds_the_offset(node: Node) -> None:
    await node.create("d", 1, **{"diskless.enable": "true"})
    await node.partitions.publish(node.metadata.image)
    answers = await node.partitions.append([AppendRequest("d", 0, batch(b"a", b"b"))], PRODUCE)
    assert answers[0].error == ErrorCode.none
    replica = cache_of(node, "d")
    await wait_for(lambda: replica.cache_end == 2, "the cache filled")
    outcome = await read(node, "d", 0)
    assert outcome.from_cache and values(outcome.records) == [(0, b"a"), (1, b"b")]
    assert outcome.high_watermark == 2
    # At the cache's end: "nothing new" comes from the cache only once a fill round that began
    # after the fetch caught up (one does every diskless.replica.fetch.interval.ms).
    waiting = FetchOptions(max_bytes=1 << 20, min_bytes=1, max_wait_s=0.5)
    (at_end,) = await node.partitions.read([ReadRequest("d", None, 0, 2, 1 << 20)], waiting)
    assert at_end.from_cache and at_end.records == b"" and at_end.error == ErrorCode.none
    (immediate,) = await node.partitions.read([ReadRequest("d", None, 0, 2, 1 << 20)], CONSUMER)
    assert not immediate.from_cache and immediate.records == b""  # max wait 0: object storage answers

    # Out of sync (it has not caught up for replica.lag.time.max.ms): object storage answers.
    replica.progress.caught_up_ms = 0
    direct = await read(node, "d", 0)
    assert not direct.from_cache and values(direct.records) == [(0, b"a"), (1, b"b")]


async def test_delete_records_and_a_deleted_cache_dir_are_followed(node: Node) -> None:
    await node.create("d", 1, **{"diskless.enable": "true"})
    await node.partitions.publish(node.metadata.image)
    for i in range(3):
        await node.partitions.append([AppendRequest("d", 0, batch(f"r{i}".encode()))], PRODUCE)
    replica = cache_of(node, "d")
    await wait_for(lambda: replica.cache_end == 3, "the cache filled")
    (deleted,) = await node.partitions.delete_records([("d", 0, 2)])
    assert deleted.low_watermark == 2
    await node.partitions.append([AppendRequest("d", 0, batch(b"r3"))], PRODUCE)
    await wait_for(lambda: replica.cache_end == 4 and replica.log_start == 2, "the cache saw the new log start")
    below = await read(node, "d", 0)
    assert below.error == ErrorCode.offset_out_of_range and not below.from_cache
    assert values((await read(node, "d", 2)).records) == [(2, b"r2"), (3, b"r3")]

    assert replica.log is not None
    shutil.rmtree(replica.log.directory)
    caches(node).filler._next_dir_check = 0.0
    caches(node).filler.poke()
    await wait_for(lambda: replica.log is not None and replica.log.directory.is_dir(), "the cache rebuilt")
    await wait_for(lambda: replica.cache_end == 4, "the rebuilt cache caught up")
    again = await read(node, "d", 2)
    assert again.from_cache and values(again.records) == [(2, b"r2"), (3, b"r3")]


@pytest.mark.node_config(**{"diskless.replica.cache.start.bytes": "0"})
async def test_a_new_replica_with_start_bytes_zero_caches_from_the_log_end(node: Node) -> None:
    await node.create("d", 1, **{"diskless.enable": "true"})
    for i in range(3):
        await node.partitions.append([AppendRequest("d", 0, batch(f"r{i}".encode()))], PRODUCE)
    # The replica appears only now, with data in the partition (as one a reassignment adds).
    await node.partitions.publish(node.metadata.image)
    fresh = cache_of(node, "d")
    await wait_for(lambda: fresh.log is not None, "the new cache created")
    assert fresh.log is not None and fresh.log.log_start_offset == 3
    older = await read(node, "d", 0)
    assert not older.from_cache and [v for _, v in values(older.records)] == [b"r0", b"r1", b"r2"]


@pytest.mark.node_config(**{"diskless.replica.fetch.interval.ms": "600000"})
async def test_a_commit_fills_only_the_caches_of_its_partitions(node: Node) -> None:
    # At saturation a broker commits ~100 objects a second; a round per commit that asked the
    # coordinator for every cache made each commit's cache work grow with the partitions held.
    for name in ("a", "b", "c"):
        await node.create(name, 1, **{"diskless.enable": "true"})
    await node.partitions.publish(node.metadata.image)
    filler = caches(node).filler
    for name in ("a", "b", "c"):
        await wait_for(lambda name=name: cache_of(node, name).log is not None, f"cache {name} created")
    asked: list[set[str]] = []
    locate = filler._reader.locate

    async def spying(requests, *args, **kwargs):  # type: ignore[no-untyped-def]
        asked.append({key.topic_name for key, _, _ in requests})
        return await locate(requests, *args, **kwargs)

    filler._reader.locate = spying
    await node.partitions.append([AppendRequest("a", 0, batch(b"x"))], PRODUCE)
    await wait_for(lambda: cache_of(node, "a").cache_end == 1, "cache a filled")
    assert asked and all(topics == {"a"} for topics in asked)

    # Batches another broker committed reach the other caches in the round over every cache.
    asked.clear()
    filler.poke()
    await wait_for(lambda: {"a", "b", "c"} in asked, "a round over every cache")
