"""The partitions seam with its real kinds wired as the broker wires them: SQLite stores from the
store factory, a local-directory object store, classic logs on a log dir. Requests mix classic and
diskless partitions, as a handler hands them over; every answer is per partition, in order."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from shoal.config import Config
from shoal.metadata.cache import MetadataCache
from shoal.metadata.controller import Controller, NewTopic
from shoal.metadata.records import RegisterBrokerRecord
from shoal.objects.factory import open_object_storage
from shoal.objects.faulty import Fault, FaultyObjectStorage
from shoal.observability.metrics import BrokerMetrics
from shoal.partitions.api import AppendRequest, FetchOptions, ProduceOptions, ReadRequest
from shoal.partitions.factory import build_partitions
from shoal.partitions.manager import Partitions
from shoal.protocol.errors import ErrorCode
from shoal.records.codec import NewRecord, build_batch, decode_batch, iter_batches
from shoal.store.factory import object_storage_url, open_stores
from shoal.store.locate import embedded_config

PRODUCE = ProduceOptions(acks=-1, produce_version=9)


async def run_blocking(fn: Callable, *args: Any) -> Any:
    return await asyncio.to_thread(fn, *args)


class Node:
    def __init__(
        self, partitions: Partitions, controller: Controller, metadata: MetadataCache, storage: FaultyObjectStorage
    ) -> None:
        self.partitions = partitions
        self.controller = controller
        self.metadata = metadata
        self.storage = storage

    async def create(self, name: str, partitions: int, **configs: str) -> None:
        await run_blocking(self.controller.create_topic, NewTopic(name, partitions, configs=configs))
        await run_blocking(self.metadata.catch_up)
        topic = self.metadata.image.topic(name)
        assert topic is not None
        await self.partitions.create_topic(topic, is_new=True)


@pytest.fixture
async def node(tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[Node]:
    """A node; ``@pytest.mark.node_config(key=value, ...)`` on a test adds broker configs."""
    raw = embedded_config(tmp_path)
    raw.update({"diskless.append.commit.interval.ms": "20", "log.retention.check.interval.ms": "600000"})
    marker = request.node.get_closest_marker("node_config")
    raw.update(marker.kwargs if marker else {})
    config = Config.from_raw(raw)
    stores = await run_blocking(open_stores, config)
    metadata = MetadataCache(stores.metadata)
    await run_blocking(metadata.catch_up)
    controller = Controller(stores.metadata, config, metadata.catch_up)
    # This broker, unfenced in the image (as the controller's fencing would write it).
    register = RegisterBrokerRecord(1, "127.0.0.1", 9092, None, fenced=False)
    await run_blocking(stores.metadata.append, [register], metadata.image.offset, 1)
    await run_blocking(metadata.catch_up)
    storage = FaultyObjectStorage(open_object_storage(object_storage_url(config)))
    partitions = build_partitions(
        config, 1, "cluster", lambda: metadata.image, stores.coordinator, storage, BrokerMetrics(),
        run_blocking, lambda reason: None,
    )
    await partitions.start()
    try:
        yield Node(partitions, controller, metadata, storage)
    finally:
        await partitions.stop()
        await storage.close()
        stores.close()


def batch(*values: bytes, timestamp: int = 1_700_000_000_000) -> bytes:
    return build_batch([NewRecord(None, v, (), timestamp + i) for i, v in enumerate(values)])


def bad_crc(raw: bytes) -> bytes:
    """The batch with its last byte changed: the CRC no longer matches (CORRUPT_MESSAGE)."""
    return raw[:-1] + bytes([raw[-1] ^ 0xFF])


def values(records: bytes) -> list[tuple[int, bytes | None]]:
    out = []
    for position, header in iter_batches(records):
        _, decoded = decode_batch(records[position : position + header.size])
        out.extend((r.offset, r.value) for r in decoded)
    return out


async def test_one_request_mixes_kinds_and_answers_each_partition(node: Node) -> None:
    await node.create("d", 2, **{"diskless.enable": "true"})
    await node.create("c", 1)
    answers = await node.partitions.append(
        [
            AppendRequest("d", 0, batch(b"d0-a", b"d0-b")),
            AppendRequest("c", 0, batch(b"c0-a")),
            AppendRequest("missing", 0, batch(b"x")),
            AppendRequest("d", 7, batch(b"x")),
            AppendRequest("d", 1, bad_crc(batch(b"x"))),
        ],
        PRODUCE,
    )
    assert [a.error for a in answers] == [
        ErrorCode.none, ErrorCode.none, ErrorCode.unknown_topic_or_partition,
        ErrorCode.unknown_topic_or_partition, ErrorCode.corrupt_message,
    ]
    assert answers[0].base_offset == 0 and answers[1].base_offset == 0
    again = await node.partitions.append([AppendRequest("d", 0, batch(b"d0-c")), AppendRequest("c", 0, batch(b"c0-b"))],
                                         PRODUCE)
    assert [(a.error, a.base_offset) for a in again] == [(ErrorCode.none, 2), (ErrorCode.none, 1)]

    topic_id = node.metadata.image.topic("d").topic_id
    reads = await node.partitions.read(
        [
            ReadRequest("c", None, 0, 0, 1 << 20),
            ReadRequest(None, topic_id, 0, 1, 1 << 20),  # by topic id, as Fetch v13+ names it
            ReadRequest("nope", None, 0, 0, 1 << 20),
        ],
        FetchOptions(max_bytes=1 << 20, min_bytes=1, max_wait_s=0),
    )
    assert reads[0].error == ErrorCode.none and values(reads[0].records) == [(0, b"c0-a"), (1, b"c0-b")]
    assert reads[0].high_watermark == 2
    assert reads[1].error == ErrorCode.none and (reads[1].high_watermark, reads[1].log_start_offset) == (3, 0)
    assert [v for o, v in values(reads[1].records) if o >= 1] == [b"d0-b", b"d0-c"]
    assert reads[2].error == ErrorCode.unknown_topic_or_partition

    offsets = await node.partitions.list_offsets([("d", 0, -1), ("c", 0, -1), ("d", 0, -2), ("c", 0, -2), ("x", 0, -1)])
    assert [(o.error, o.offset) for o in offsets] == [
        (ErrorCode.none, 3), (ErrorCode.none, 2), (ErrorCode.none, 0), (ErrorCode.none, 0),
        (ErrorCode.unknown_topic_or_partition, -1),
    ]
    deleted = await node.partitions.delete_records([("d", 0, 1), ("c", 0, 1)])
    assert [(d.error, d.low_watermark) for d in deleted] == [(ErrorCode.none, 1), (ErrorCode.none, 1)]
    states = await node.partitions.describe([("d", 0), ("c", 0), ("d", 9)])
    assert [(s.error, s.log_start_offset, s.high_watermark) for s in states] == [
        (ErrorCode.none, 1, 3), (ErrorCode.none, 1, 2), (ErrorCode.unknown_topic_or_partition, -1, -1),
    ]
    assert states[0].size > 0 and states[1].size > 0


async def test_a_long_poll_wakes_when_records_arrive_on_any_kind(node: Node) -> None:
    await node.create("d", 1, **{"diskless.enable": "true"})
    await node.create("c", 1)
    for topic in ("c", "d"):
        started = time.monotonic()
        waiting = asyncio.ensure_future(
            node.partitions.read([ReadRequest(topic, None, 0, 0, 1 << 20)],
                                 FetchOptions(max_bytes=1 << 20, min_bytes=1, max_wait_s=30))
        )
        await asyncio.sleep(0.2)
        assert not waiting.done()
        await node.partitions.append([AppendRequest(topic, 0, batch(b"wake"))], PRODUCE)
        (read,) = await asyncio.wait_for(waiting, 10)
        assert values(read.records) == [(0, b"wake")]
        assert time.monotonic() - started < 15  # woken, not timed out


async def test_request_level_refusals_touch_no_partition(node: Node) -> None:
    await node.create("c", 1)
    refused = await node.partitions.append(
        [AppendRequest("c", 0, batch(b"x"))], ProduceOptions(acks=2, produce_version=9)
    )
    assert refused[0].error == ErrorCode.invalid_required_acks
    (end,) = await node.partitions.list_offsets([("c", 0, -1)])
    assert end.offset == 0
    # A transactional id matters only for transactional batches (as in Kafka): these are appended.
    plain = await node.partitions.append(
        [AppendRequest("c", 0, batch(b"x"))], ProduceOptions(acks=-1, produce_version=9, transactional_id="t")
    )
    assert plain[0].error == ErrorCode.none


async def test_only_replicas_on_disk_move_between_log_dirs(node: Node, tmp_path: Path) -> None:
    await node.create("d", 1, **{"diskless.enable": "true"})
    with pytest.raises(Exception, match="diskless: its data is in object storage") as refused:
        await node.partitions.alter_log_dir("d", 0, str(tmp_path / "logs"))
    assert refused.value.code == ErrorCode.invalid_request
    with pytest.raises(Exception) as unknown:
        await node.partitions.alter_log_dir("nope", 0, str(tmp_path / "logs"))
    assert unknown.value.code == ErrorCode.unknown_topic_or_partition


@pytest.mark.node_config(**{"diskless.fetch.cache.max.bytes": "0"})
async def test_a_timestamp_lookup_that_cannot_read_its_batch_says_so(node: Node) -> None:
    """ListOffsets by time reads the diskless batch to find the exact record; when object storage
    fails that read, the answer is KAFKA_STORAGE_ERROR (retriable), not the batch's first offset."""
    await node.create("d", 1, **{"diskless.enable": "true"})
    ts = 1_700_000_000_000
    (answer,) = await node.partitions.append([AppendRequest("d", 0, batch(b"a", b"b", b"c", timestamp=ts))], PRODUCE)
    assert answer.error == ErrorCode.none
    (found,) = await node.partitions.list_offsets([("d", 0, ts + 2)])
    assert (found.error, found.offset, found.timestamp) == (ErrorCode.none, 2, ts + 2)
    node.storage.set_fault("fetch", Fault(failure_rate=1.0))
    (failed,) = await node.partitions.list_offsets([("d", 0, ts + 2)])
    assert failed.error == ErrorCode.kafka_storage_error and failed.offset == -1
    node.storage.set_fault("fetch", None)
    (again,) = await node.partitions.list_offsets([("d", 0, ts + 2)])
    assert (again.error, again.offset) == (ErrorCode.none, 2)
