"""DescribeProducers (KIP-664) through the partitions seam and its handler, wired as the broker wires
them (real classic logs on a log dir, diskless on SQLite and a local object store). Idempotent
batches go through the produce path; transactional ones are appended on the leader's log directly
(no transaction coordinator runs here to verify them; diskless ones go through the seam with a
verification that lets them in) and ended with WriteTxnMarkers through the seam."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from kio.schema.describe_producers.v0.request import DescribeProducersRequest, TopicRequest

from shoal.classic.replica_manager import ReplicaManager
from shoal.config import Config
from shoal.coordinator.faulty import Fault, FaultyBatchCoordinator
from shoal.metadata.cache import MetadataCache
from shoal.metadata.controller import Controller, NewTopic
from shoal.metadata.records import RegisterBrokerRecord
from shoal.objects.factory import open_object_storage
from shoal.observability.metrics import BrokerMetrics
from shoal.partitions.api import ActiveProducer, AppendRequest, PartitionRef, ProduceOptions, TxnMarker
from shoal.partitions.factory import build_partitions
from shoal.partitions.manager import Partitions
from shoal.protocol.apis import RequestHeader, decode_response, encode_response
from shoal.protocol.errors import ErrorCode
from shoal.records.batch import validate_records
from shoal.records.codec import NewRecord, build_batch
from shoal.records.types import TimestampType
from shoal.server.handlers.describe_producers import handle_describe_producers
from shoal.store.factory import object_storage_url, open_stores
from shoal.store.locate import embedded_config

TS = 1_700_000_000_000
DESCRIBE_PRODUCERS = 61


async def run_blocking(fn: Callable, *args: Any) -> Any:
    return await asyncio.to_thread(fn, *args)


def batch(pid: int, epoch: int, seq: int, count: int, *, txn: bool, timestamp: int = TS) -> bytearray:
    return bytearray(
        build_batch(
            [NewRecord(None, b"v%d" % i, (), timestamp + i) for i in range(count)],
            producer_id=pid, producer_epoch=epoch, base_sequence=seq, is_transactional=txn,
        )
    )


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

    async def idempotent(self, topic: str, pid: int, seq: int, count: int, timestamp: int = TS) -> int:
        (answer,) = await self.partitions.append(
            [AppendRequest(topic, 0, batch(pid, 0, seq, count, txn=False, timestamp=timestamp))],
            ProduceOptions(acks=-1, produce_version=9),
        )
        assert answer.error == ErrorCode.none, answer
        return answer.base_offset

    def transactional(self, topic: str, pid: int, seq: int, count: int, timestamp: int = TS) -> int:
        raw = batch(pid, 0, seq, count, txn=True, timestamp=timestamp)
        result = self.replicas(topic).append(
            topic, 0, memoryview(raw), validate_records(raw, 1 << 20), TimestampType.CREATE_TIME
        )
        return result.base_offset

    async def abort(self, topic: str, pid: int, coordinator_epoch: int) -> None:
        (outcome,) = await self.partitions.write_txn_markers(
            [(topic, 0, TxnMarker(pid, 0, coordinator_epoch, commit=False))], timeout_ms=5000
        )
        assert outcome.error == ErrorCode.none, outcome


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


async def three_producers(node: Node) -> None:
    """t-0: idempotent producer 5 (offsets 0-2, 3-4), producer 7's open transaction from 5, producer 8's
    transaction at 7 aborted by coordinator epoch 3 (marker at 8), producer 7 again at 9."""
    await node.create("t")
    assert await node.idempotent("t", 5, 0, 3) == 0
    assert await node.idempotent("t", 5, 3, 2, timestamp=TS + 50) == 3
    assert node.transactional("t", 7, 0, 2, timestamp=TS + 100) == 5
    assert node.transactional("t", 8, 0, 1, timestamp=TS + 200) == 7
    await node.abort("t", 8, coordinator_epoch=3)
    assert node.transactional("t", 7, 2, 1, timestamp=TS + 300) == 9


async def test_classic_leader_answers_each_producers_state(node: Node) -> None:
    await three_producers(node)
    (outcome,) = await node.partitions.describe_producers([("t", 0)])
    assert outcome.error == ErrorCode.none
    by_id = {p.producer_id: p for p in outcome.producers}
    assert [p.producer_id for p in outcome.producers] == [5, 7, 8]
    # Idempotent only: no coordinator, no transaction; the last batch's last sequence and time.
    assert by_id[5] == ActiveProducer(5, 0, last_sequence=4, last_timestamp=TS + 51, coordinator_epoch=-1,
                                      current_txn_start_offset=-1)
    # The open transaction starts at its first batch, not its latest one.
    assert by_id[7] == ActiveProducer(7, 0, last_sequence=2, last_timestamp=TS + 300, coordinator_epoch=-1,
                                      current_txn_start_offset=5)
    # Aborted: no transaction any more, and the coordinator epoch of the marker.
    assert by_id[8].current_txn_start_offset == -1
    assert by_id[8].coordinator_epoch == 3
    assert by_id[8].last_sequence == 0


async def test_a_committed_transaction_leaves_no_start_offset(node: Node) -> None:
    await node.create("t")
    assert node.transactional("t", 7, 0, 1) == 0
    ((p,),) = [o.producers for o in await node.partitions.describe_producers([("t", 0)])]
    assert p.current_txn_start_offset == 0
    (written,) = await node.partitions.write_txn_markers([("t", 0, TxnMarker(7, 0, 1, commit=True))], 5000)
    assert written.error == ErrorCode.none
    ((p,),) = [o.producers for o in await node.partitions.describe_producers([("t", 0)])]
    assert (p.current_txn_start_offset, p.coordinator_epoch) == (-1, 1)


async def test_unknown_partitions_and_a_partition_without_a_replica_here(node: Node) -> None:
    await node.create("t")
    answers = await node.partitions.describe_producers([("nope", 0), ("t", 1), ("t", 0)])
    assert [a.error for a in answers] == [
        ErrorCode.unknown_topic_or_partition, ErrorCode.unknown_topic_or_partition, ErrorCode.none,
    ]
    assert answers[2].producers == ()
    # A topic the image has but whose replica is not on this broker: Kafka's NOT_LEADER_OR_FOLLOWER.
    topic = node.metadata.image.topic("t")
    assert topic is not None
    elsewhere = PartitionRef(dataclasses.replace(topic, name="elsewhere"), 0)
    (outcome,) = await node.partitions.kind_of(topic).describe_producers([elsewhere])
    assert outcome.error == ErrorCode.not_leader_or_follower


async def _verified(transactional_id: str, pid: int, epoch: int, topic: str, partition: int) -> None:
    """KIP-890 verification that lets every transaction in (no transaction coordinator runs here)."""


async def _no_group_markers(partition: int, marker: TxnMarker) -> ErrorCode:
    return ErrorCode.none


async def test_diskless_partitions_answer_the_batch_coordinators_producers(
    node: Node, monkeypatch: pytest.MonkeyPatch
) -> None:
    await node.create("d", **{"diskless.enable": "true"})
    node.partitions.serve_transactions(_verified, _no_group_markers)
    assert await node.idempotent("d", 5, 0, 2) == 0
    (opened,) = await node.partitions.append(
        [AppendRequest("d", 0, batch(7, 0, 0, 2, txn=True, timestamp=TS + 100))],
        ProduceOptions(acks=-1, produce_version=9, transactional_id="tx-7"),
    )
    assert (opened.error, opened.base_offset) == (ErrorCode.none, 2)
    await node.abort("d", 5, coordinator_epoch=3)  # nothing ongoing: only the coordinator epoch stays
    (outcome,) = await node.partitions.describe_producers([("d", 0)])
    assert outcome.error == ErrorCode.none
    assert outcome.producers == (
        ActiveProducer(5, 0, last_sequence=1, last_timestamp=TS + 1, coordinator_epoch=3, current_txn_start_offset=-1),
        ActiveProducer(7, 0, last_sequence=1, last_timestamp=TS + 101, coordinator_epoch=-1, current_txn_start_offset=2),
    )
    # The Batch Coordinator unreachable: that partition's answer is retriable.
    topic = node.metadata.image.topic("d")
    assert topic is not None
    kind = node.partitions.kind_of(topic)
    faulty = FaultyBatchCoordinator(kind._coordinator)  # type: ignore[attr-defined]
    faulty.set_fault("describe_producers", Fault(failure_rate=1.0))
    monkeypatch.setattr(kind, "_coordinator", faulty)
    (down,) = await node.partitions.describe_producers([("d", 0)])
    assert (down.error, down.producers) == (ErrorCode.kafka_storage_error, ())


async def test_the_handler_answers_per_topic_and_partition_in_request_order(node: Node) -> None:
    await three_producers(node)
    await node.create("d", **{"diskless.enable": "true"})
    request = DescribeProducersRequest(
        topics=(
            TopicRequest(name="t", partition_indexes=(0, 3)),
            TopicRequest(name="bad name", partition_indexes=(0,)),
            TopicRequest(name="d", partition_indexes=(0,)),
        )
    )
    header = RequestHeader(DESCRIBE_PRODUCERS, 0, 11, "test")
    response = await handle_describe_producers(SimpleNamespace(partitions=node.partitions), header, request)
    # What goes on the wire decodes back to the same answer.
    frame = encode_response(header, response)
    decoded = decode_response(DESCRIBE_PRODUCERS, 0, frame[4:])
    assert decoded == response
    assert decoded.throttle_time == datetime.timedelta(0)
    t, bad, d = decoded.topics
    assert [p.partition_index for p in t.partitions] == [0, 3]
    first, missing = t.partitions
    assert (first.error_code, first.error_message) == (ErrorCode.none, None)
    assert [(p.producer_id, p.current_txn_start_offset, p.coordinator_epoch) for p in first.active_producers] == [
        (5, -1, -1), (7, 5, -1), (8, -1, 3),
    ]
    assert first.active_producers[0].last_sequence == 4
    assert first.active_producers[0].last_timestamp == TS + 51
    assert missing.error_code == ErrorCode.unknown_topic_or_partition
    assert missing.error_message and "t-3" in missing.error_message
    assert bad.name == "bad name"
    assert bad.partitions[0].error_code == ErrorCode.invalid_topic_exception
    assert d.partitions[0].error_code == ErrorCode.none and d.partitions[0].active_producers == ()
