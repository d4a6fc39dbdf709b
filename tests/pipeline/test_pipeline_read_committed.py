"""``kafka.isolation.level`` on reads: transaction markers never become rows, and ``read_committed``
stops at the last stable offset and drops the records of aborted transactions.

Diskless partitions are built as a broker leaves them, with the real stores: transactional batches
and transaction markers (control batches, ``CommitBatchRequest(control=TxnControl(...))``) committed
through the SQLite Batch Coordinator into WAL objects on local storage, some of them then moved to
tiered segments. One Spark test reads such a topic of the shared broker; the broker path is checked
on a classic topic with a real transactional producer, without Spark.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from shoal.coordinator.api import (
    CommitBatchRequest,
    CreateTopicAndPartitionsRequest,
    TopicIdPartition,
    TxnControl,
)
from shoal.objects.local import LocalObjectStorage
from shoal.pipeline.isolation import CONTROL_ONLY, BatchFilter
from shoal.pipeline.options import OptionError, parse_read_options
from shoal.pipeline.stores import find_store_config
from shoal.pipeline.topics import STORAGE, PartitionSource
from shoal.protocol.errors import ErrorCode
from shoal.records.batch import read_header
from shoal.records.codec import build_batch
from shoal.records.control import build_end_txn_marker
from shoal.records.types import TimestampType
from shoal.store.sqlite.coordinator import SqliteBatchCoordinator

TS = 1_700_000_000_000
P, Q = 1000, 2000  # two transactional producers
BASE = {"shoal.metadata.path": "/x/shoal.db", "shoal.storage.url": "/x/objects"}

# The workload, in offset order (what ``commit_workload`` commits, offsets assigned by the coordinator):
#   0-1 plain | 2-4 P txn | 5-6 Q txn | 7 plain | 8-9 Q txn | 10 COMMIT P | 11 ABORT Q
#   12-13 Q txn | 14 COMMIT Q | 15-16 P txn, still open | 17 plain
HIGH_WATERMARK = 18
LSO = 15  # P's open transaction starts there
MARKERS = {10, 11, 14}
ABORTED = {5, 6, 8, 9}  # Q's first transaction: (Q, 5, 11)
UNCOMMITTED = [o for o in range(HIGH_WATERMARK) if o not in MARKERS]
COMMITTED = [o for o in range(LSO) if o not in MARKERS | ABORTED]

Item = tuple[bytes, dict[str, Any]]  # (batch bytes, CommitBatchRequest fields beyond the coordinates)


def _records(first: int, n: int) -> list[tuple]:
    """Records whose key names the offset they will get, so rows can be checked by offset."""
    return [
        (f"k{first + i}".encode(), f"v{first + i}".encode() * 10, [("h", b"x")], TS + first + i)
        for i in range(n)
    ]


def _plain(first: int, n: int) -> Item:
    return build_batch(_records(first, n)), {}


def _txn(pid: int, seq: int, first: int, n: int) -> Item:
    raw = build_batch(
        _records(first, n), producer_id=pid, producer_epoch=0, base_sequence=seq, is_transactional=True
    )
    fields = {
        "producer_id": pid,
        "producer_epoch": 0,
        "base_sequence": seq,
        "last_sequence": seq + n - 1,
        "is_transactional": True,
    }
    return raw, fields


def _marker(pid: int, commit: bool) -> Item:
    raw = build_end_txn_marker(
        commit, producer_id=pid, producer_epoch=0, coordinator_epoch=3, timestamp=TS + 500
    )
    return raw, {"producer_id": pid, "producer_epoch": 0, "control": TxnControl(commit, 3)}


def _objects() -> list[list[Item]]:
    """The workload in three WAL objects (an aborted transaction spans two of them)."""
    return [
        [_plain(0, 2), _txn(P, 0, 2, 3), _txn(Q, 0, 5, 2), _plain(7, 1)],
        [_txn(Q, 2, 8, 2), _marker(P, True), _marker(Q, False), _txn(Q, 4, 12, 2)],
        [_marker(Q, True), _txn(P, 3, 15, 2), _plain(17, 1)],
    ]


def commit_object(
    coord: SqliteBatchCoordinator, storage: LocalObjectStorage, tip: TopicIdPartition, items: list[Item]
) -> None:
    """Upload one WAL object (version byte, then the batches) and commit it, as a broker does."""
    key = f"wal/{uuid.uuid4()}"
    blob = b"\x00" + b"".join(raw for raw, _ in items)
    asyncio.run(storage.upload(key, blob))
    requests, position = [], 1
    for i, (raw, fields) in enumerate(items):
        h = read_header(raw, 0)
        requests.append(
            CommitBatchRequest(
                i,
                tip,
                position,
                len(raw),
                0,
                h.last_offset_delta,
                h.max_timestamp,
                TimestampType.CREATE_TIME,
                **fields,
            )
        )
        position += len(raw)
    responses = coord.commit_file(key, 1, len(blob), requests)
    assert all(r.errors == ErrorCode.none for r in responses), responses


def commit_workload(
    coord: SqliteBatchCoordinator, storage: LocalObjectStorage, tip: TopicIdPartition
) -> None:
    for items in _objects():
        commit_object(coord, storage, tip, items)
    state = coord.transaction_state(tip.topic_id, tip.partition)
    assert state == (LSO, [(Q, 5, 11)])


def _offsets(chunks: Any) -> list[int]:
    return [r[0] for chunk in chunks for r in chunk]


# ----------------------------------------------------------------------------- options and filter


def test_read_isolation_level_option() -> None:
    default = parse_read_options({**BASE, "subscribe": "a"}, streaming=False)
    assert default.isolation_level == "read_uncommitted" and not default.read_committed
    committed = parse_read_options(
        {**BASE, "subscribe": "a", "kafka.isolation.level": " READ_COMMITTED", "kafka.client.id": "c"},
        streaming=True,
    )
    assert committed.read_committed and committed.isolation_level == "read_committed"
    # The source applies it itself; the other kafka.* settings still go to librdkafka.
    assert committed.kafka_conf == {"client.id": "c"}
    for bad in ("read-committed", "committed", ""):
        with pytest.raises(
            OptionError, match="kafka.isolation.level must be read_uncommitted or read_committed"
        ):
            parse_read_options({**BASE, "subscribe": "a", "kafka.isolation.level": bad}, streaming=False)


def test_read_filter_drops_aborted_batches_and_markers() -> None:
    aborted = BatchFilter([(7, 10, 20), (7, 40, 45), (9, 15, 16), (7, 30, 31)])
    # Kafka's rule: first <= offset <= last, of the same producer.
    assert [o for o in range(8, 50) if aborted.is_aborted(7, o)] == [
        *range(10, 21),
        30,
        31,
        *range(40, 46),
    ]
    assert [o for o in range(0, 30) if aborted.is_aborted(9, o)] == [15, 16]
    assert not aborted.is_aborted(8, 12) and not aborted.is_aborted(-1, 12)
    # Whole batches, by their header fields: (producer id, transactional, control, base offset).
    assert not aborted.keeps(7, True, False, 12)  # inside an aborted transaction
    assert aborted.keeps(7, False, False, 12)  # a non-transactional batch is never aborted
    assert aborted.keeps(7, True, False, 21) and aborted.keeps(8, True, False, 12)
    assert not aborted.keeps(7, True, True, 20)  # the ABORT marker itself: control
    # Markers give no rows in either level; data batches all do with read_uncommitted.
    assert not CONTROL_ONLY.keeps(7, True, True, 5) and not CONTROL_ONLY.keeps(-1, False, True, 5)
    assert CONTROL_ONLY.keeps(7, True, False, 12) and CONTROL_ONLY.keeps(-1, False, False, 0)


# ----------------------------------------------------------------------------- storage reads


TOPIC_ID = uuid.UUID("0badc0de-0000-4000-8000-00000000cafe")
TIP = TopicIdPartition(TOPIC_ID, 0, "txns")
SRC = PartitionSource("txns", 0, str(TOPIC_ID), STORAGE)


def _storage_workload(tmp_path: Path) -> tuple[Any, str]:
    coord = SqliteBatchCoordinator(tmp_path / "shoal.db")
    coord.create_topic_and_partitions({CreateTopicAndPartitionsRequest(TOPIC_ID, "txns", 1)})
    storage = LocalObjectStorage(tmp_path / "objects")
    try:
        commit_workload(coord, storage, TIP)
    finally:
        coord.close()
    return find_store_config(metadata_path=str(tmp_path / "shoal.db")), str(tmp_path / "objects")


def test_read_diskless_in_both_isolation_levels(tmp_path: Path) -> None:
    from shoal.pipeline.storage_read import DisklessRangeReader

    config, url = _storage_workload(tmp_path)
    with DisklessRangeReader(config, url, chunk_bytes=400) as reader:
        assert reader.bounds(SRC) == (0, HIGH_WATERMARK)
        records = [r for chunk in reader.read(SRC, 0, HIGH_WATERMARK) for r in chunk]
        assert [r[0] for r in records] == UNCOMMITTED  # markers never give rows
        assert [r[3] for r in records] == [f"k{o}".encode() for o in UNCOMMITTED]
        assert reader.stats["batches"] == 8  # the three markers were not even fetched
    with DisklessRangeReader(config, url, chunk_bytes=400, read_committed=True) as reader:
        assert reader.bounds(SRC) == (0, LSO)  # latest is the last stable offset
        assert _offsets(reader.read(SRC, 0, LSO)) == COMMITTED
        assert reader.stats["batches"] == 4  # nor were the aborted batches
        for start, end in [(0, 5), (5, 7), (5, 12), (6, 13), (8, 10), (9, 15), (12, 15)]:
            assert _offsets(reader.read(SRC, start, end)) == [o for o in COMMITTED if start <= o < end]
        # Timestamp lookups stop at the LSO and, like Kafka's time index, may answer an aborted record.
        assert reader.offset_for_timestamp(SRC, TS + 5) == 5
        assert reader.offset_for_timestamp(SRC, TS + 10) == 12
        assert reader.offset_for_timestamp(SRC, TS + 15) is None


def test_read_committed_drops_aborted_records_in_tiered_segments(tmp_path: Path) -> None:
    """The aborted transaction (Q, 5, 11) spans the tiered boundary (8): its first batch is read
    from a remote segment, its second from the coordinator's batches; both are dropped."""
    from tests.pipeline.test_pipeline_tiered_read import SRC as TIERED_SRC
    from tests.pipeline.test_pipeline_tiered_read import TIP as TIERED_TIP
    from tests.pipeline.test_pipeline_tiered_read import _Stores

    stores = _Stores(tmp_path)
    try:
        commit_workload(stores.coord, stores.storage, TIERED_TIP)
        stamped = stores.stamped()
        assert [b[0] for b in stamped[:4]] == [0, 2, 5, 7]
        stores.copy(stamped[:4])  # offsets 0..7 in one remote segment
        stores.tier(8)
        with stores.reader(chunk_bytes=300) as reader:
            assert _offsets(reader.read(TIERED_SRC, 0, HIGH_WATERMARK)) == UNCOMMITTED
            assert reader.stats["segments"] == 1
        with stores.reader(chunk_bytes=300, read_committed=True) as reader:
            assert reader.bounds(TIERED_SRC) == (0, LSO)
            assert _offsets(reader.read(TIERED_SRC, 0, LSO)) == COMMITTED
            assert _offsets(reader.read(TIERED_SRC, 4, 9)) == [4, 7]
            assert reader.stats["segments"] == 2
    finally:
        stores.close()


# ----------------------------------------------------------------------------- end to end


def _scan(opts: Any) -> list[tuple[int, bytes]]:
    """What ``spark.read`` would return, planned and read as Spark's driver and tasks do."""
    from shoal.pipeline.scan import scan_range
    from shoal.pipeline.source import ShoalBatchReader

    out = []
    for part in ShoalBatchReader(opts).partitions():
        for batch in scan_range(opts, part.value):
            out.extend(
                zip(batch.column("offset").to_pylist(), batch.column("value").to_pylist(), strict=True)
            )
    return sorted(out)


@pytest.mark.timeout(300)
def test_spark_read_committed_diskless_topic(spark: Any, pipeline_broker: Any) -> None:
    """Transactions committed straight into the shared broker's coordinator and object storage;
    Spark reads the topic from storage in both isolation levels, streaming ends stop at the LSO."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from shoal.pipeline.source import ShoalStreamReader
    from shoal.pipeline.stores import load_image
    from tests.pipeline.helpers import new_topic, source_options

    topic = new_topic(pipeline_broker, "txn", 1)
    db = pipeline_broker.log_dir / "shoal.db"
    topic_id = load_image(find_store_config(metadata_path=str(db))).topics_by_name[topic].topic_id
    assert pipeline_broker.objects_dir is not None
    coord = SqliteBatchCoordinator(db)
    try:
        commit_workload(
            coord, LocalObjectStorage(pipeline_broker.objects_dir), TopicIdPartition(topic_id, 0, topic)
        )
    finally:
        coord.close()

    options = {**source_options(pipeline_broker), "subscribe": topic, "shoal.readVia": "storage"}
    committed = {**options, "kafka.isolation.level": "read_committed"}

    def read(opts: dict[str, str], **extra: str) -> list[Any]:
        df = spark.read.format("shoal").options(**opts, **extra).load()
        return sorted(df.select("offset", "key", "value").collect())

    rows = read(committed, **{"shoal.maxBytesPerPartition": "300"})  # several tasks
    assert [r.offset for r in rows] == COMMITTED
    assert [bytes(r.key) for r in rows] == [f"k{o}".encode() for o in COMMITTED]
    assert [r.offset for r in read(options)] == UNCOMMITTED
    # Given ending offsets stop at the LSO too.
    assert [
        r.offset for r in read(committed, endingOffsets=json.dumps({topic: {"0": HIGH_WATERMARK}}))
    ] == COMMITTED

    stream = ShoalStreamReader(
        parse_read_options({**committed, "startingOffsets": "earliest"}, streaming=True)
    )
    assert stream.latestOffset(stream.initialOffset(), ReadAllAvailable()) == {topic: {"0": LSO}}
    stream.prepareForTriggerAvailableNow()
    assert stream.reportLatestOffset() == {topic: {"0": LSO}}


@pytest.mark.timeout(180)
def test_read_committed_through_the_broker(pipeline_broker: Any) -> None:
    """A classic topic read through the broker: the consumer gets the isolation level, and the
    planned end is the LSO (librdkafka's watermark query honours it)."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import NewTopic

    from tests.pipeline.helpers import source_options
    from tests.support.kafka_clients import admin_client, wait_for_topic

    topic = f"classic-txn-{uuid.uuid4().hex[:8]}"
    admin = admin_client(pipeline_broker.bootstrap)
    admin.create_topics([NewTopic(topic, 1, 1)], operation_timeout=30)[topic].result(30)
    wait_for_topic(admin, topic, 1)
    txn = Producer(
        {"bootstrap.servers": pipeline_broker.bootstrap, "transactional.id": f"{topic}-tx", "linger.ms": 5}
    )
    txn.init_transactions(30)
    txn.begin_transaction()
    for i in range(3):
        txn.produce(topic, value=f"committed-{i}".encode(), partition=0)
    txn.commit_transaction(30)
    txn.begin_transaction()
    for i in range(2):
        txn.produce(topic, value=f"aborted-{i}".encode(), partition=0)
    txn.flush(30)
    txn.abort_transaction(30)
    plain = Producer({"bootstrap.servers": pipeline_broker.bootstrap})
    plain.produce(topic, value=b"plain", partition=0)
    plain.flush(30)
    txn.begin_transaction()
    txn.produce(topic, value=b"open", partition=0)
    txn.flush(30)  # left open: the LSO stays at its first offset
    try:
        options = {**source_options(pipeline_broker), "subscribe": topic}
        committed = _scan(
            parse_read_options({**options, "kafka.isolation.level": "read_committed"}, streaming=False)
        )
        assert [v for _, v in committed] == [b"committed-0", b"committed-1", b"committed-2", b"plain"]
        everything = _scan(parse_read_options(options, streaming=False))
        assert [v for _, v in everything] == [
            b"committed-0",
            b"committed-1",
            b"committed-2",
            b"aborted-0",
            b"aborted-1",
            b"plain",
            b"open",
        ]
        assert committed[-1][0] < everything[-1][0]
    finally:
        txn.abort_transaction(30)
