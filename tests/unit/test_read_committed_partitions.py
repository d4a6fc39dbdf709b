"""READ_COMMITTED through the partitions seam, wired as the broker wires it (real classic logs on a
log dir, diskless on SQLite and a local object store): Fetch stops at the last stable offset and
lists aborted transactions, ListOffsets answers by isolation level, and WriteTxnMarkers appends
markers on the leader. Clients cannot produce transactional batches yet (the produce path refuses
them), so the transactions are written on the leader's log directly, as the produce path will."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from shoal.classic.replica_manager import ReplicaManager
from shoal.config import Config
from shoal.metadata.cache import MetadataCache
from shoal.metadata.controller import Controller, NewTopic
from shoal.metadata.records import RegisterBrokerRecord
from shoal.objects.factory import open_object_storage
from shoal.observability.metrics import BrokerMetrics
from shoal.partitions.api import (
    AppendRequest,
    FetchOptions,
    IsolationLevel,
    ProduceOptions,
    ReadOutcome,
    ReadRequest,
    TxnMarker,
)
from shoal.partitions.factory import build_partitions
from shoal.partitions.manager import Partitions
from shoal.protocol.apis import SUPPORTED_APIS, ApiKey
from shoal.protocol.errors import ErrorCode
from shoal.records.batch import validate_records
from shoal.records.codec import NewRecord, build_batch, decode_batch, iter_batches
from shoal.records.types import TimestampType
from shoal.server.dispatch import HANDLERS
from shoal.store.factory import object_storage_url, open_stores
from shoal.store.locate import embedded_config

TS = 1_700_000_000_000
COMMITTED, UNCOMMITTED = IsolationLevel.READ_COMMITTED, IsolationLevel.READ_UNCOMMITTED


async def run_blocking(fn: Callable, *args: Any) -> Any:
    return await asyncio.to_thread(fn, *args)


class Node:
    def __init__(self, partitions: Partitions, controller: Controller, metadata: MetadataCache) -> None:
        self.partitions = partitions
        self.controller = controller
        self.metadata = metadata

    async def create(self, name: str, partitions: int = 1, **configs: str) -> None:
        await run_blocking(self.controller.create_topic, NewTopic(name, partitions, configs=configs))
        await run_blocking(self.metadata.catch_up)
        topic = self.metadata.image.topic(name)
        assert topic is not None
        await self.partitions.create_topic(topic, is_new=True)

    def replicas(self, topic: str) -> ReplicaManager:
        image = self.metadata.image.topic(topic)
        assert image is not None
        return self.partitions.kind_of(image).replicas  # type: ignore[attr-defined]

    async def plain(self, topic: str, value: bytes, timestamp: int) -> int:
        (answer,) = await self.partitions.append(
            [AppendRequest(topic, 0, build_batch([NewRecord(None, value, (), timestamp)]))],
            ProduceOptions(acks=-1, produce_version=9),
        )
        assert answer.error == ErrorCode.none, answer
        return answer.base_offset

    def transactional(self, topic: str, pid: int, seq: int, *values: bytes, timestamp: int = TS) -> int:
        """A transactional batch appended on the leader, as the produce path will once it takes them."""
        raw = bytearray(
            build_batch(
                [NewRecord(None, v, (), timestamp + i) for i, v in enumerate(values)],
                producer_id=pid, producer_epoch=0, base_sequence=seq, is_transactional=True,
            )
        )
        result = self.replicas(topic).append(
            topic, 0, memoryview(raw), validate_records(raw, 1 << 20), TimestampType.CREATE_TIME
        )
        return result.base_offset

    async def read(
        self, topic: str, offset: int, isolation: IsolationLevel, *, min_bytes: int = 0, max_wait_s: float = 0
    ) -> ReadOutcome:
        (outcome,) = await self.partitions.read(
            [ReadRequest(topic, None, 0, offset, 1 << 20)],
            FetchOptions(max_bytes=1 << 20, min_bytes=min_bytes, max_wait_s=max_wait_s, isolation=isolation),
        )
        return outcome

    async def end(self, topic: str, pid: int, commit: bool, *, coordinator_epoch: int = 0, epoch: int = 0) -> ErrorCode:
        (outcome,) = await self.partitions.write_txn_markers(
            [(topic, 0, TxnMarker(pid, epoch, coordinator_epoch, commit))], timeout_ms=5000
        )
        return outcome.error


@pytest.fixture
async def node(tmp_path: Path) -> AsyncIterator[Node]:
    raw = embedded_config(tmp_path)
    raw.update({"diskless.append.commit.interval.ms": "20", "log.retention.check.interval.ms": "600000"})
    config = Config.from_raw(raw)
    stores = await run_blocking(open_stores, config)
    metadata = MetadataCache(stores.metadata)
    await run_blocking(metadata.catch_up)
    controller = Controller(stores.metadata, config, metadata.catch_up)
    register = RegisterBrokerRecord(1, "127.0.0.1", 9092, None, fenced=False)
    await run_blocking(stores.metadata.append, [register], metadata.image.offset, 1)
    await run_blocking(metadata.catch_up)
    storage = open_object_storage(object_storage_url(config))
    partitions = build_partitions(
        config, 1, "cluster", lambda: metadata.image, stores.coordinator, storage, BrokerMetrics(),
        run_blocking, lambda reason: None,
    )
    await partitions.start()
    try:
        yield Node(partitions, controller, metadata)
    finally:
        await partitions.stop()
        await storage.close()
        stores.close()


def offsets(records: bytes) -> list[int]:
    """The offsets of the data records (control batches are skipped, as clients skip them)."""
    out = []
    for position, header in iter_batches(records):
        if header.is_control:
            continue
        _, decoded = decode_batch(records[position : position + header.size])
        out.extend(r.offset for r in decoded)
    return out


async def open_transactions(node: Node) -> None:
    """t-0: plain 0, producer 7's transaction 1-2, plain 3 (at TS+100), producer 8's transaction 4."""
    await node.create("t")
    assert await node.plain("t", b"a", TS) == 0
    assert node.transactional("t", 7, 0, b"t7-a", b"t7-b") == 1
    assert await node.plain("t", b"b", TS + 100) == 3
    assert node.transactional("t", 8, 0, b"t8-a") == 4


async def test_read_committed_stops_at_the_last_stable_offset(node: Node) -> None:
    await open_transactions(node)
    committed = await node.read("t", 0, COMMITTED)
    assert committed.error == ErrorCode.none
    assert (committed.high_watermark, committed.last_stable_offset) == (5, 1)
    assert offsets(committed.records) == [0]
    assert committed.aborted_transactions == ()
    # At the LSO: nothing yet, and no OFFSET_OUT_OF_RANGE (the offset is in the log).
    at_lso = await node.read("t", 1, COMMITTED)
    assert (at_lso.error, at_lso.records, at_lso.aborted_transactions) == (ErrorCode.none, b"", ())

    uncommitted = await node.read("t", 0, UNCOMMITTED)
    assert (uncommitted.high_watermark, uncommitted.last_stable_offset) == (5, 1)  # Kafka always fills the LSO
    assert offsets(uncommitted.records) == [0, 1, 2, 3, 4]
    assert uncommitted.aborted_transactions is None


async def test_markers_move_the_lso_and_aborted_transactions_are_listed(node: Node) -> None:
    await open_transactions(node)
    assert await node.end("t", 7, commit=False) == ErrorCode.none  # ABORT at 5
    after_abort = await node.read("t", 0, COMMITTED)
    assert after_abort.last_stable_offset == 4  # producer 8 is still open
    assert offsets(after_abort.records) == [0, 1, 2, 3]
    assert after_abort.aborted_transactions == ((7, 1),)

    assert await node.end("t", 8, commit=True) == ErrorCode.none  # COMMIT at 6
    everything = await node.read("t", 0, COMMITTED)
    assert (everything.high_watermark, everything.last_stable_offset) == (7, 7)
    assert offsets(everything.records) == [0, 1, 2, 3, 4]
    assert everything.aborted_transactions == ((7, 1),)
    # A read past the aborted transaction's data still lists nothing it does not overlap.
    tail = await node.read("t", 6, COMMITTED)
    assert offsets(tail.records) == [] and tail.aborted_transactions == ()
    assert (await node.read("t", 0, UNCOMMITTED)).aborted_transactions is None


async def test_list_offsets_answers_by_isolation_level(node: Node) -> None:
    await open_transactions(node)

    async def answer(timestamp: int, isolation: IsolationLevel | None) -> tuple[int, int]:
        (found,) = await node.partitions.list_offsets([("t", 0, timestamp)], isolation=isolation)
        assert found.error == ErrorCode.none
        return found.timestamp, found.offset

    assert await answer(-1, UNCOMMITTED) == (-1, 5)  # the high watermark
    assert await answer(-1, COMMITTED) == (-1, 1)  # the last stable offset
    assert await answer(-1, None) == (-1, 5)  # a replica: the log end
    assert await answer(-2, COMMITTED) == (-1, 0)  # earliest is not bounded
    # The record at TS+100 is at offset 3, past the LSO: READ_COMMITTED has no answer (Kafka's -1, -1).
    assert await answer(TS + 100, UNCOMMITTED) == (TS + 100, 3)
    assert await answer(TS + 100, COMMITTED) == (-1, -1)
    assert await answer(TS, COMMITTED) == (TS, 0)
    # Max timestamp (-3) is bounded the same way.
    assert await answer(-3, COMMITTED) == (-1, -1)

    assert await node.end("t", 7, commit=True) == ErrorCode.none
    assert await node.end("t", 8, commit=False) == ErrorCode.none
    assert await answer(-1, COMMITTED) == (-1, 7)
    assert await answer(TS + 100, COMMITTED) == (TS + 100, 3)


async def test_a_read_committed_long_poll_waits_for_the_lso(node: Node) -> None:
    """Data above the LSO does not end the wait (it is not readable); the marker does."""
    await node.create("t")
    node.transactional("t", 7, 0, b"open")
    started = time.monotonic()
    poll = asyncio.ensure_future(node.read("t", 0, COMMITTED, min_bytes=1, max_wait_s=5))
    await asyncio.sleep(0.6)
    assert not poll.done()
    assert await node.end("t", 7, commit=True) == ErrorCode.none
    outcome = await asyncio.wait_for(poll, 5)
    assert offsets(outcome.records) == [0] and outcome.last_stable_offset == 2
    assert time.monotonic() - started < 4

    quiet = time.monotonic()
    node.transactional("t", 9, 0, b"open again")
    nothing = await node.read("t", 2, COMMITTED, min_bytes=1, max_wait_s=0.5)
    assert nothing.records == b"" and time.monotonic() - quiet >= 0.5


async def test_marker_errors_per_partition(node: Node) -> None:
    await node.create("t")
    await node.create("d", **{"diskless.enable": "true"})
    node.transactional("t", 7, 0, b"x")
    assert await node.end("t", 7, commit=True, coordinator_epoch=3) == ErrorCode.none
    node.transactional("t", 7, 1, b"y")
    # A coordinator behind the one that wrote the last marker is fenced; nothing is written.
    assert await node.end("t", 7, commit=True, coordinator_epoch=2) == ErrorCode.transaction_coordinator_fenced
    outcomes = await node.partitions.write_txn_markers(
        [
            ("t", 0, TxnMarker(7, 0, 3, False)),
            ("missing", 0, TxnMarker(7, 0, 3, True)),
            ("t", 4, TxnMarker(7, 0, 3, True)),
            ("__consumer_offsets", 0, TxnMarker(7, 0, 3, True)),
            ("d", 0, TxnMarker(7, 0, 3, True)),
            ("t", 0, TxnMarker(5, 0, 0, True, transaction_version=-1)),
        ],
        timeout_ms=5000,
    )
    assert [o.error for o in outcomes] == [
        ErrorCode.none,
        ErrorCode.unknown_topic_or_partition,
        ErrorCode.unknown_topic_or_partition,
        ErrorCode.unknown_topic_or_partition,
        ErrorCode.none,  # diskless: committed through the Batch Coordinator
        ErrorCode.invalid_request,
    ]
    read = await node.read("t", 0, COMMITTED)
    assert read.last_stable_offset == 4 and read.aborted_transactions == ((7, 2),)
    # A COMMIT for a producer with no transaction here is written anyway (Kafka appends it).
    assert await node.end("t", 42, commit=True) == ErrorCode.none
    assert (await node.read("t", 0, COMMITTED)).last_stable_offset == 5


async def test_diskless_lso_is_the_high_watermark(node: Node) -> None:
    await node.create("d", **{"diskless.enable": "true"})
    await node.plain("d", b"a", TS)
    await node.plain("d", b"b", TS + 1)
    committed = await node.read("d", 0, COMMITTED)
    assert (committed.high_watermark, committed.last_stable_offset) == (2, 2)
    assert offsets(committed.records) == [0, 1] and committed.aborted_transactions == ()
    uncommitted = await node.read("d", 0, UNCOMMITTED)
    assert uncommitted.last_stable_offset == 2 and uncommitted.aborted_transactions is None
    (latest,) = await node.partitions.list_offsets([("d", 0, -1)], isolation=COMMITTED)
    assert latest.offset == 2


def test_write_txn_markers_is_advertised_because_it_is_handled() -> None:
    """ApiVersions advertises SUPPORTED_APIS; dispatch needs a handler for each."""
    assert set(HANDLERS) == set(SUPPORTED_APIS)
    spec = SUPPORTED_APIS[ApiKey.WRITE_TXN_MARKERS]
    assert (spec.min_version, spec.max_version) == (1, 2)
