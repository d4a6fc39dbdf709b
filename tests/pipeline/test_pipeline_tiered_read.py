"""Reading diskless topics whose first offsets moved to tiered storage (KIP-1163), straight from
object storage: remote segments for the offsets the coordinator no longer holds, its batches after.

The unit tests build what a partition leader leaves behind, with the real stores: batches
committed to a SQLite coordinator in WAL objects, Kafka segments made of those batches stamped
with their offsets (as the leader's chain holds them), copied by the ObjectRemoteStorageManager
and recorded in the RLMM, then the batches below them deleted (``delete_tiered_batches``). The
end-to-end test does it with a real broker and reads with Spark.
"""

from __future__ import annotations

import asyncio
import struct
import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from shoal.coordinator.api import (
    CommitBatchRequest,
    CreateTopicAndPartitionsRequest,
    DeleteRecordsRequest,
    DeleteTieredBatchesRequest,
    FindBatchRequest,
    ListOffsetsRequest,
    ListOffsetsTimestamp,
    TopicIdPartition,
)
from shoal.objects.local import LocalObjectStorage
from shoal.objects.storage import ByteRange
from shoal.pipeline.stores import find_store_config
from shoal.pipeline.topics import STORAGE, PartitionSource
from shoal.protocol.errors import ErrorCode, KafkaError
from shoal.records.batch import TIMESTAMP_TYPE_FLAG, read_header, stamp_batch
from shoal.records.codec import build_batch, build_control_batch, decode_batch
from shoal.records.types import TimestampType
from shoal.store.sqlite.coordinator import SqliteBatchCoordinator
from shoal.store.sqlite.remote_log_metadata import SqliteRemoteLogMetadataManager
from shoal.tiered.api import (
    LogSegmentData,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
)
from shoal.tiered.api import TopicIdPartition as RemotePartition
from shoal.tiered.storage_manager import ObjectRemoteStorageManager

TOPIC_ID = uuid.UUID("87654321-4321-8765-4321-876543218765")
TIP = TopicIdPartition(TOPIC_ID, 0, "orders")
RTP = RemotePartition(TOPIC_ID, 0, "orders")
SRC = PartitionSource("orders", 0, str(TOPIC_ID), STORAGE)
#: CreateTime stamps lie after any append time, so timestamp lookups can tell the two apart.
BASE_TS = 2_000_000_000_000
#: Offsets the workload holds: 156, offset 30 a transaction marker.
HIGH_WATERMARK = 156
FINISHED = RemoteLogSegmentState.COPY_SEGMENT_FINISHED

Stamped = tuple[int, int, bytes]  # (base offset, last offset, batch as the leader's segment holds it)


def _records(n: int, first: int, value: bytes = b"v") -> list[tuple]:
    return [
        (
            f"k{first + i}".encode(),
            value + str(first + i).encode() * 20,
            [("h", b"x"), ("nil", None)],
            BASE_TS + first + i,
        )
        for i in range(n)
    ]


class _Stores:
    """A coordinator, local object storage, RLMM and RSM in ``tmp_path`` (what a broker creates)."""

    def __init__(self, tmp_path: Path) -> None:
        self.path = tmp_path
        self.coord = SqliteBatchCoordinator(tmp_path / "shoal.db")
        self.coord.create_topic_and_partitions({CreateTopicAndPartitionsRequest(TOPIC_ID, "orders", 1)})
        self.storage = LocalObjectStorage(tmp_path / "objects")
        self.rlmm = SqliteRemoteLogMetadataManager(tmp_path / "shoal.db")
        self.rsm = ObjectRemoteStorageManager(self.storage)
        self.segments = 0

    def reader(self, **kwargs: Any) -> Any:
        from shoal.pipeline.storage_read import DisklessRangeReader

        config = find_store_config(metadata_path=str(self.path / "shoal.db"))
        return DisklessRangeReader(config, str(self.path / "objects"), **kwargs)

    def close(self) -> None:
        self.rlmm.close()
        self.coord.close()

    def commit(self, key: str, batches: list[tuple[bytes, int]]) -> None:
        """One WAL-like object of ``(batch, timestamp type)``, committed."""
        blob = b"\x00" + b"".join(raw for raw, _ in batches)
        asyncio.run(self.storage.upload(key, blob))
        requests, position = [], 1
        for i, (raw, ts_type) in enumerate(batches):
            h = read_header(raw, 0)
            requests.append(
                CommitBatchRequest(
                    i,
                    TIP,
                    position,
                    len(raw),
                    0,
                    h.last_offset_delta,
                    h.max_timestamp,
                    TimestampType(ts_type),
                )
            )
            position += len(raw)
        assert all(r.errors == ErrorCode.none for r in self.coord.commit_file(key, 1, len(blob), requests))

    def stamped(self) -> list[Stamped]:
        """Every batch the coordinator holds, stamped as the broker's Fetch answers it."""
        (resp,) = self.coord.find_batches([FindBatchRequest(TIP, 0, 1 << 30)], 1 << 30)
        out = []
        for b in resp.batches:
            m = b.metadata
            buf = bytearray(
                asyncio.run(self.storage.fetch(b.object_key, ByteRange(m.byte_offset, m.byte_size)))
            )
            lat = m.log_append_timestamp if m.timestamp_type == TimestampType.LOG_APPEND_TIME else None
            stamp_batch(buf, 0, m.base_offset, 0, lat)
            out.append((m.base_offset, m.last_offset, bytes(buf)))
        return out

    def copy(self, batches: list[Stamped]) -> RemoteLogSegmentMetadata:
        """A segment of ``batches`` copied to remote storage (COPY_SEGMENT_FINISHED), with an
        offset index entry at every other batch, as Kafka indexes every index.interval.bytes."""
        start, end = batches[0][0], batches[-1][1]
        log, index = b"", b""
        for i, (base, _, raw) in enumerate(batches):
            if i % 2 == 1:
                index += struct.pack(">ii", base - start, len(log))
            log += raw
        self.segments += 1
        files = self.path / f"segment-{self.segments}"
        files.mkdir()
        (files / "log").write_bytes(log)
        (files / "index").write_bytes(index)
        (files / "timeindex").write_bytes(b"")
        metadata = RemoteLogSegmentMetadata(
            RemoteLogSegmentId.generate(RTP),
            start,
            end,
            max(read_header(r, 0).max_timestamp for _, _, r in batches),
            1,
            0,
            len(log),
            {0: start},
        )
        self.rlmm.add_remote_log_segment_metadata(metadata)
        data = LogSegmentData(files / "log", files / "index", files / "timeindex", None, None, b"")
        asyncio.run(self.rsm.copy_log_segment_data(metadata, data))
        self.rlmm.update_remote_log_segment_metadata(
            RemoteLogSegmentMetadataUpdate(metadata.segment_id, 0, FINISHED, 1)
        )
        return replace(metadata, state=FINISHED)

    def tier(self, below: int) -> None:
        (resp,) = self.coord.delete_tiered_batches([DeleteTieredBatchesRequest(TIP, below)])
        assert resp.errors == ErrorCode.none and resp.batches_deleted > 0 and resp.local_start_offset == below

    def expire(self, segment: RemoteLogSegmentMetadata) -> None:
        """What retention does: the segment's data and metadata go."""
        for state in (
            RemoteLogSegmentState.DELETE_SEGMENT_STARTED,
            RemoteLogSegmentState.DELETE_SEGMENT_FINISHED,
        ):
            if state == RemoteLogSegmentState.DELETE_SEGMENT_FINISHED:
                asyncio.run(self.rsm.delete_log_segment_data(segment))
            self.rlmm.update_remote_log_segment_metadata(
                RemoteLogSegmentMetadataUpdate(segment.segment_id, 0, state, 1)
            )


@pytest.fixture
def stores(tmp_path: Path) -> Iterator[_Stores]:
    """The workload: every codec, a transaction marker, a LogAppendTime batch and a batch bigger
    than the reads' chunks, in three WAL objects; offsets 0..155."""
    s = _Stores(tmp_path)
    s.commit(
        "wal/a",
        [
            (build_batch(_records(10, 0)), 0),
            (build_batch(_records(10, 10), compression=1), 0),
            (build_batch(_records(10, 20), compression=2), 0),
            (build_control_batch(True, producer_id=7, producer_epoch=0), 0),  # offset 30
        ],
    )
    s.commit(
        "wal/b",
        [
            (build_batch(_records(10, 31), compression=3), 0),
            (build_batch(_records(5, 41)), 1),  # LogAppendTime: the append time is stamped in
            (build_batch(_records(60, 46)), 0),  # bigger than a chunk
            (build_batch(_records(10, 106), compression=4), 0),
        ],
    )
    s.commit("wal/c", [(build_batch(_records(10, 116 + 10 * i)), 0) for i in range(4)])
    yield s
    s.close()


def _all(chunks: Iterable[list[Any]]) -> list[Any]:
    return [r for chunk in chunks for r in chunk]


def _wal_read(stores: _Stores) -> list[Any]:
    with stores.reader() as reader:
        records = _all(reader.read(SRC, 0, HIGH_WATERMARK))
    assert [r[0] for r in records] == [o for o in range(HIGH_WATERMARK) if o != 30]
    return records


# ----------------------------------------------------------------------------- reading


def test_read_tiered_offsets_from_segments_then_batches(stores: _Stores) -> None:
    before = _wal_read(stores)
    stamped = stores.stamped()
    stores.copy(stamped[0:4])  # offsets 0..30
    seg2 = stores.copy(stamped[4:8])  # offsets 31..115
    stores.tier(116)
    (moved,) = stores.coord.find_batches([FindBatchRequest(TIP, 0, 1000)], 1000)
    assert moved.errors == ErrorCode.offset_moved_to_tiered_storage
    assert {
        r.offset
        for r in stores.coord.list_offsets([ListOffsetsRequest(TIP, ListOffsetsTimestamp.EARLIEST_LOCAL)])
    } == {116}

    with stores.reader(chunk_bytes=300) as reader:
        assert reader.bounds(SRC) == (0, HIGH_WATERMARK)  # tiered offsets are part of the log
        assert _all(reader.read(SRC, 0, HIGH_WATERMARK)) == before
        assert reader.stats["segments"] == 2 and reader.stats["gets"] > 20  # bounded chunks
        for start, end in [(0, 5), (5, 31), (30, 31), (33, 50), (45, 46), (47, 120), (100, 156), (115, 117)]:
            assert _all(reader.read(SRC, start, end)) == [r for r in before if start <= r[0] < end], (
                start,
                end,
            )
        lat = [r for r in before if 41 <= r[0] <= 45]
        assert {r[2] for r in lat} == {1} and len({r[1] for r in lat}) == 1
        # Timestamp lookups: into tiered data, into the coordinator's batches, none.
        assert reader.offset_for_timestamp(SRC, BASE_TS + 12) == 12
        assert reader.offset_for_timestamp(SRC, BASE_TS + 33) == 33
        assert reader.offset_for_timestamp(SRC, BASE_TS + 120) == 120
        assert reader.offset_for_timestamp(SRC, 0) == 0
        assert reader.offset_for_timestamp(SRC, BASE_TS * 10) is None

    # The offset index skips the segment's bytes below the offset read.
    with stores.reader() as reader:
        assert _all(reader.read(SRC, 106, 116)) == [r for r in before if 106 <= r[0] < 116]
        assert reader.stats["bytes"] < seg2.segment_size_in_bytes / 2


def test_read_takes_the_copy_with_the_highest_start(stores: _Stores) -> None:
    """After a leader change two finished copies may overlap; the later cut holds an offset, as
    the broker reads it (both hold the same records; here the later one is marked to tell)."""
    before = _wal_read(stores)
    stamped = stores.stamped()
    stores.copy(stamped[0:6])  # offsets 0..45
    marked = []
    for base, last, raw in stamped[4:8]:  # offsets 31..115 again, values marked
        header, records = decode_batch(raw)
        lat = bool(header.attributes & TIMESTAMP_TYPE_FLAG)
        again = [(r.key, b"again" + (r.value or b""), list(r.headers), r.timestamp) for r in records]
        marked.append(
            (
                base,
                last,
                build_batch(
                    again,
                    base_offset=base,
                    compression=header.attributes & 7,
                    timestamp_type=int(lat),
                    max_timestamp=header.max_timestamp,
                ),
            )
        )
    stores.copy(marked)
    stores.tier(116)

    def expected(start: int, again_from: int) -> list[Any]:
        return [
            r if r[0] < again_from or r[0] >= 116 else (*r[:4], b"again" + r[4], r[5])
            for r in before
            if r[0] >= start
        ]

    with stores.reader(chunk_bytes=500) as reader:
        assert _all(reader.read(SRC, 35, HIGH_WATERMARK)) == expected(35, 35)
        # From 0 the first copy is read to its end (46), then the later one holds 46.
        assert _all(reader.read(SRC, 0, HIGH_WATERMARK)) == expected(0, 46)


@pytest.mark.parametrize("fail_on_data_loss", [True, False])
def test_read_tiered_data_loss(stores: _Stores, fail_on_data_loss: bool) -> None:
    from shoal.pipeline.storage_read import DataLossError

    before = _wal_read(stores)
    stamped = stores.stamped()
    seg1 = stores.copy(stamped[0:4])
    seg2 = stores.copy(stamped[4:8])
    stores.tier(116)

    # Retention deletes a segment while a read is in it, after moving the log start past it.
    with stores.reader(chunk_bytes=300) as reader:
        chunks = reader.read(SRC, 0, HIGH_WATERMARK, fail_on_data_loss=fail_on_data_loss)
        first = next(chunks)
        (moved,) = stores.coord.delete_records([DeleteRecordsRequest(TIP, 31)])
        assert moved.low_watermark == 31
        stores.expire(seg1)
        if fail_on_data_loss:
            with pytest.raises(DataLossError, match="failOnDataLoss"):
                _all(chunks)
            return
        got = first + _all(chunks)
    kept = [r for r in got if r[0] < 31]
    assert kept == before[: len(kept)] and len(kept) < 30  # what was read before the segment went
    assert got[len(kept) :] == [r for r in before if r[0] >= 31]  # then on from the new log start

    # A segment whose data is missing while the log says it holds live offsets: an error,
    # whatever failOnDataLoss says.
    asyncio.run(stores.storage.delete([stores.rsm.log_key(seg2)]))
    with stores.reader() as reader, pytest.raises(KafkaError, match="tiered storage"):
        _all(reader.read(SRC, 31, HIGH_WATERMARK, fail_on_data_loss=False))


def test_read_tiered_checks_crcs(stores: _Stores) -> None:
    stamped = stores.stamped()
    segment = stores.copy(stamped[0:4])
    stores.tier(31)
    path = stores.path / "objects" / stores.rsm.log_key(segment)
    data = bytearray(path.read_bytes())
    data[len(stamped[0][2]) + 100] ^= 0xFF  # inside the second batch's records
    path.write_bytes(bytes(data))
    with stores.reader() as reader, pytest.raises(KafkaError, match="CRC"):
        _all(reader.read(SRC, 0, 31))
    with stores.reader() as reader:  # the batch before is fine
        assert [r[0] for r in _all(reader.read(SRC, 0, 10))] == list(range(10))


def test_read_goes_to_tiered_storage_when_tiering_empties_a_planned_object(
    stores: _Stores, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read planned its batches, then tiering deleted them and the WAL object went: the read
    goes to the segment that holds them now."""
    import shoal.pipeline.storage_read as storage_read

    before = _wal_read(stores)
    stamped = stores.stamped()
    opened = storage_read.open_coordinator

    class TieredAfterPlanning:
        def __init__(self, inner: Any) -> None:
            self._inner = inner
            self.pending = True

        def find_batches(self, *args: Any) -> Any:
            found = self._inner.find_batches(*args)
            if self.pending:
                self.pending = False
                stores.copy(stamped[0:8])
                stores.tier(116)
                asyncio.run(stores.storage.delete(["wal/a", "wal/b"]))
            return found

        def __getattr__(self, name: str) -> Any:
            return getattr(self._inner, name)

    monkeypatch.setattr(storage_read, "open_coordinator", lambda config: TieredAfterPlanning(opened(config)))
    with stores.reader() as reader:
        assert _all(reader.read(SRC, 0, HIGH_WATERMARK)) == before
        assert reader.stats["segments"] == 1


# ----------------------------------------------------------------------------- planning


def test_planning_cuts_tiered_offsets_by_segment(stores: _Stores) -> None:
    from shoal.pipeline.planning import plan_ranges

    before = _wal_read(stores)
    stamped = stores.stamped()
    seg1 = stores.copy(stamped[0:4])
    seg2 = stores.copy(stamped[4:8])
    stores.tier(116)
    config = find_store_config(metadata_path=str(stores.path / "shoal.db"))

    def plan(max_bytes: int) -> list[Any]:
        return plan_ranges(
            [SRC],
            {SRC.tp: 0},
            {SRC.tp: HIGH_WATERMARK},
            store=config,
            max_partition_bytes=max_bytes,
            min_partitions=None,
        )

    limit = seg1.segment_size_in_bytes
    ranges = plan(limit)
    assert ranges[0].start == 0 and ranges[0].end == 31  # the first segment: one task
    assert (
        sum(1 for r in ranges if 31 <= r.start < 116) >= seg2.segment_size_in_bytes // limit
    )  # the second, cut
    assert all(0 < r.size <= limit for r in ranges)
    assert [r.start for r in ranges[1:]] == [r.end for r in ranges[:-1]] and ranges[-1].end == HIGH_WATERMARK
    with stores.reader() as reader:
        assert [
            x for r in ranges for x in _all(reader.read(SRC, r.start, r.end))
        ] == before  # no gap, no repeat
    # A limit above everything: one task, tiered and local offsets together.
    assert [(r.start, r.end) for r in plan(1 << 30)] == [(0, HIGH_WATERMARK)]


def test_read_index_position_and_floor_segment() -> None:
    from shoal.pipeline.tiered_read import floor_segment, index_position

    index = struct.pack(">iiiiii", 5, 100, 9, 250, 0, 0)  # two entries, then preallocated zeros
    assert [index_position(index, 1000, o) for o in (1000, 1004, 1005, 1008, 1009, 5000)] == [
        0,
        0,
        100,
        100,
        250,
        250,
    ]
    segs = [
        RemoteLogSegmentMetadata(RemoteLogSegmentId.generate(RTP), s, e, 0, 1, 0, 10, {0: s}, FINISHED)
        for s, e in [(0, 45), (31, 115), (116, 200)]
    ]
    assert [
        (f.start_offset if f else None) for f in (floor_segment(segs, o) for o in (0, 31, 45, 46, 116, 201))
    ] == [
        0,
        31,
        31,
        31,
        116,
        None,
    ]


# ----------------------------------------------------------------------------- end to end


@pytest.mark.timeout(420)
def test_spark_reads_a_tiered_diskless_topic_from_offset_zero(
    spark: Any, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """A real broker with tiered storage moves a diskless topic's first offsets to tiered
    segments; Spark reads the whole topic from object storage, byte for byte."""
    from tests.integration.test_tiered_storage import TIERED_BROKER, list_offset
    from tests.pipeline.helpers import new_topic, rows_from_arrow, rows_from_consumer, source_options
    from tests.support.broker import BrokerProcess
    from tests.support.chaos_clients import wait_until
    from tests.support.kafka_clients import confluent_consume, confluent_produce
    from tests.support.workload import make_workload

    broker = BrokerProcess(tmp_path_factory.mktemp("tiered-broker"), overrides=TIERED_BROKER)
    broker.start()
    try:
        topic = new_topic(
            broker, "tiered", 1, {"remote.storage.enable": "true", "internal.segment.bytes": "16384"}
        )
        sent = make_workload(
            3000, 1, "tiered-read", seed=11, base_timestamp=int(time.time() * 1000) - 600_000
        )
        confluent_produce(broker.bootstrap, topic, sent, config={"linger.ms": 5, "batch.size": 4096})
        # Earliest local (-4) above 0: the coordinator answers OFFSET_MOVED_TO_TIERED_STORAGE below it.
        # Half the topic: many segments (of about 100 records) to read and to cut into tasks.
        half = len(sent) // 2
        wait_until(
            lambda: list_offset(broker.port, topic, -4)[1] > half, "batches moved to tiered storage", 120
        )
        local_start = list_offset(broker.port, topic, -4)[1]
        assert list_offset(broker.port, topic, -2) == (ErrorCode.none, 0)
        expected = rows_from_consumer(confluent_consume(broker.bootstrap, topic, [0], len(sent), settle=0.3))
        assert [r[1] for r in expected] == list(range(len(sent)))

        options = {
            **source_options(broker),
            "subscribe": topic,
            "includeHeaders": "true",
            "shoal.readVia": "storage",
        }
        df = spark.read.format("shoal").options(**options, **{"shoal.maxBytesPerPartition": "40000"}).load()
        assert df.rdd.getNumPartitions() > 2  # the tiered part is cut into tasks too
        table = df.toArrow()
        got = rows_from_arrow(table)
        assert got == expected
        assert table.column("offset").to_pylist() == list(range(len(sent)))  # in order, per task and across
        assert [s.value for s in sent] == [r[3] for r in got] and [s.key for s in sent] == [r[2] for r in got]

        # startingTimestamp inside the tiered offsets: the first record at or after it.
        cut = expected[local_start // 2][5]
        df = spark.read.format("shoal").options(**options, startingTimestamp=str(cut)).load()
        first = min(r[1] for r in expected if r[5] >= cut)
        assert sorted(r.offset for r in df.select("offset").collect()) == list(range(first, len(sent)))
    finally:
        broker.close()
