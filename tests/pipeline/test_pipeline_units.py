"""The pipeline's parts without Spark or a broker: options, rate limits, planning, storage reads,
Parquet manifests and write markers, against a real SQLite coordinator and local object storage."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path

import pytest

from shoal.coordinator.api import (
    CommitBatchRequest,
    CreateTopicAndPartitionsRequest,
    DeleteRecordsRequest,
    TopicIdPartition,
)
from shoal.objects.local import LocalObjectStorage
from shoal.pipeline.options import (
    OffsetSpec,
    OptionError,
    offsets_from_json,
    offsets_to_json,
    parse_read_options,
    parse_write_options,
)
from shoal.pipeline.stores import find_store_config
from shoal.records.codec import build_batch, build_control_batch
from shoal.records.types import TimestampType
from shoal.store.sqlite.coordinator import SqliteBatchCoordinator

TOPIC_ID = uuid.UUID("12345678-1234-5678-1234-567812345678")
BASE = {"shoal.metadata.path": "/x/shoal.db", "shoal.storage.url": "/x/objects"}


# ----------------------------------------------------------------------------- options


def test_read_options_like_spark_kafka() -> None:
    opts = parse_read_options(
        {**BASE, "subscribe": "a, b", "includeHeaders": "TRUE", "maxOffsetsPerTrigger": "10"}, streaming=True
    )
    assert opts.subscription.topics == ("a", "b")
    assert opts.starting == OffsetSpec("latest")  # streaming default, as Spark's
    assert opts.ending is None and opts.include_headers and opts.max_offsets_per_trigger == 10

    batch = parse_read_options(
        {**BASE, "assign": '{"t": [1, 0]}', "endingOffsets": '{"t": {"0": 5, "1": -1}}'}, streaming=False
    )
    assert batch.subscription.assignment == (("t", 0), ("t", 1))
    assert batch.starting == OffsetSpec("earliest")
    assert batch.ending == OffsetSpec("offsets", offsets={("t", 0): 5, ("t", 1): -1})

    ts = parse_read_options(
        {**BASE, "subscribePattern": "t.*", "startingTimestamp": "7", "startingOffsets": "earliest"},
        streaming=False,
    )
    assert ts.starting.kind == "timestamp" and ts.starting.timestamp == 7  # the timestamp wins, as in Spark
    assert (
        ts.subscription.matches("t1")
        and not ts.subscription.matches("__t")
        and not ts.subscription.matches("xt")
    )

    broker = parse_read_options(
        {"subscribe": "a", "kafka.bootstrap.servers": "h:1", "kafka.security.protocol": "SSL"},
        streaming=False,
    )
    assert broker.bootstrap_servers == "h:1" and broker.kafka_conf == {"security.protocol": "SSL"}


@pytest.mark.parametrize(
    ("options", "streaming", "message"),
    [
        ({}, False, "exactly one of"),
        ({"subscribe": "a", "assign": '{"a": [0]}'}, False, "exactly one of"),
        ({"subscribe": "a", "startingOffsets": "latest"}, False, "can't be latest"),
        ({"subscribe": "a", "endingOffsets": '{"a": {"0": -2}}'}, False, "can't be earliest"),
        ({"subscribe": "a", "endingOffsets": "latest"}, True, "not allowed in streaming"),
        ({"subscribe": "a", "maxOffsetsPerTrigger": "0"}, True, "at least 1"),
        ({"subscribePattern": "("}, False, "not a valid regular expression"),
        ({"assign": "[1]"}, False, "assign must be"),
        ({"subscribe": "a", "kafka.enable.auto.commit": "true"}, False, "not supported"),
        ({"subscribe": "a", "shoal.readVia": "ftp"}, False, "shoal.readVia"),
    ],
)
def test_read_options_rejected(options: dict[str, str], streaming: bool, message: str) -> None:
    with pytest.raises(OptionError, match=message):
        parse_read_options({**BASE, **options}, streaming=streaming)


def test_read_options_need_a_way_in() -> None:
    with pytest.raises(OptionError, match="kafka.bootstrap.servers"):
        parse_read_options({"subscribe": "a"}, streaming=False)
    with pytest.raises(OptionError, match="needs kafka.bootstrap.servers"):
        parse_read_options({**BASE, "subscribe": "a", "shoal.readVia": "broker"}, streaming=False)


def test_offsets_json_round_trip() -> None:
    offsets = {("b", 1): 5, ("a", 10): -1, ("a", 2): 0}
    text = offsets_to_json(offsets)
    assert text == '{"a":{"2":0,"10":-1},"b":{"1":5}}' or json.loads(text) == {
        "a": {"2": 0, "10": -1},
        "b": {"1": 5},
    }
    assert offsets_from_json(text) == offsets
    with pytest.raises(OptionError):
        offsets_from_json('{"a": {"x": 1}}')


def test_write_options() -> None:
    opts = parse_write_options({"kafka.bootstrap.servers": "h:1", "topic": "t", "shoal.storage.url": "/o"})
    assert opts.dedup and opts.marker_url == "/o" and opts.topic == "t"
    assert (
        parse_write_options({"kafka.bootstrap.servers": "h:1", "shoal.write.dedup": "false"}).marker_url
        is None
    )
    with pytest.raises(OptionError, match="write markers"):
        parse_write_options({"kafka.bootstrap.servers": "h:1"})
    with pytest.raises(OptionError, match="bootstrap"):
        parse_write_options({"shoal.storage.url": "/o"})


def test_rate_limit_shares_by_lag() -> None:
    from shoal.pipeline.offsets import rate_limit

    begin = {("t", 0): 0, ("t", 1): 100, ("t", 2): 7}
    end = {("t", 0): 300, ("t", 1): 200, ("t", 2): 8}
    limited = rate_limit(100, begin, end)
    assert limited == {("t", 0): 74, ("t", 1): 124, ("t", 2): 8}  # 300:100:1 of 100, at least one each
    assert rate_limit(1000, begin, end) == end


# ----------------------------------------------------------------------------- storage


def _coordinator(tmp_path: Path, partitions: int = 2) -> SqliteBatchCoordinator:
    coord = SqliteBatchCoordinator(tmp_path / "shoal.db")
    coord.create_topic_and_partitions({CreateTopicAndPartitionsRequest(TOPIC_ID, "orders", partitions)})
    return coord


def _put(
    coord: SqliteBatchCoordinator,
    storage: LocalObjectStorage,
    key: str,
    batches: list[tuple[int, bytes, int]],
) -> None:
    """Upload one WAL-like object of ``(partition, batch bytes, timestamp type)`` and commit it."""
    blob = b"\x00" + b"".join(b for _, b, _ in batches)
    asyncio.run(storage.upload(key, blob))
    requests = []
    position = 1
    for i, (partition, raw, ts_type) in enumerate(batches):
        from shoal.records.batch import read_header

        header = read_header(raw, 0)
        requests.append(
            CommitBatchRequest(
                i,
                TopicIdPartition(TOPIC_ID, partition, "orders"),
                position,
                len(raw),
                0,
                header.last_offset_delta,
                header.max_timestamp,
                TimestampType(ts_type),
            )
        )
        position += len(raw)
    responses = coord.commit_file(key, 1, len(blob), requests)
    assert all(r.errors == 0 for r in responses), responses


def _records(n: int, start: int, ts: int = 1000) -> list[tuple]:
    return [
        (
            f"k{start + i}".encode(),
            f"v{start + i}".encode() * 20,
            [("h", b"x"), ("nil", None)],
            ts + start + i,
        )
        for i in range(n)
    ]


def test_storage_reader_decodes_every_codec_with_real_offsets(tmp_path: Path) -> None:
    from shoal.pipeline.storage_read import DisklessRangeReader
    from shoal.pipeline.topics import STORAGE, PartitionSource

    coord = _coordinator(tmp_path)
    storage = LocalObjectStorage(tmp_path / "objects")
    batches = [(0, build_batch(_records(10, 10 * codec), compression=codec), 0) for codec in range(5)]
    batches.append((0, build_control_batch(True, producer_id=7, producer_epoch=0), 0))
    batches.append((1, build_batch(_records(5, 100)), 1))  # LogAppendTime: the append time is stamped in
    _put(coord, storage, "wal/a", batches)
    coord.close()

    src0 = PartitionSource("orders", 0, str(TOPIC_ID), STORAGE)
    src1 = PartitionSource("orders", 1, str(TOPIC_ID), STORAGE)
    with DisklessRangeReader(
        find_store_config(metadata_path=str(tmp_path / "shoal.db")), str(tmp_path / "objects"), chunk_bytes=300
    ) as reader:
        assert reader.bounds(src0) == (0, 51)
        got = [r for chunk in reader.read(src0, 3, 51) for r in chunk]
        assert [r[0] for r in got] == list(range(3, 50))  # the control record (offset 50) is skipped
        assert got[0][3:] == (b"k3", b"v3" * 20, (("h", b"x"), ("nil", None)))
        assert got[0][1:3] == (1003, 0)
        lat = [r for chunk in reader.read(src1, 0, 5) for r in chunk]
        assert [r[0] for r in lat] == [0, 1, 2, 3, 4]
        assert {r[2] for r in lat} == {1} and len({r[1] for r in lat}) == 1 and lat[0][1] > 1_000_000
        assert reader.offset_for_timestamp(src0, 1025) == 25
        assert reader.offset_for_timestamp(src0, 10**15) is None
        assert reader.stats["gets"] >= 2  # chunked: more than one planning step


def test_storage_reader_data_loss_and_corruption(tmp_path: Path) -> None:
    from shoal.pipeline.storage_read import DataLossError, DisklessRangeReader
    from shoal.pipeline.topics import STORAGE, PartitionSource
    from shoal.protocol.errors import KafkaError

    coord = _coordinator(tmp_path)
    storage = LocalObjectStorage(tmp_path / "objects")
    _put(coord, storage, "wal/a", [(0, build_batch(_records(10, 0)), 0)])
    _put(coord, storage, "wal/b", [(0, build_batch(_records(10, 10)), 0)])
    (resp,) = coord.delete_records([DeleteRecordsRequest(TopicIdPartition(TOPIC_ID, 0, "orders"), 10)])
    assert resp.low_watermark == 10
    coord.close()
    src = PartitionSource("orders", 0, str(TOPIC_ID), STORAGE)
    db = str(tmp_path / "shoal.db")
    with DisklessRangeReader(find_store_config(metadata_path=db), str(tmp_path / "objects")) as reader:
        with pytest.raises(DataLossError, match="failOnDataLoss"):
            list(reader.read(src, 0, 20))
        assert [r[0] for c in reader.read(src, 0, 20, fail_on_data_loss=False) for r in c] == list(
            range(10, 20)
        )
    path = tmp_path / "objects" / "wal" / "b"
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))
    with DisklessRangeReader(find_store_config(metadata_path=db), str(tmp_path / "objects")) as reader, pytest.raises(KafkaError, match="CRC"):
        list(reader.read(src, 10, 20))


def test_planning_cuts_at_batch_boundaries_by_size(tmp_path: Path) -> None:
    from shoal.pipeline.planning import plan_ranges
    from shoal.pipeline.topics import BROKER, STORAGE, PartitionSource

    coord = _coordinator(tmp_path)
    storage = LocalObjectStorage(tmp_path / "objects")
    raw = build_batch(_records(10, 0))
    _put(coord, storage, "wal/a", [(0, raw, 0)] * 6)  # offsets 0..59 in 6 batches of len(raw) bytes
    coord.close()
    src = PartitionSource("orders", 0, str(TOPIC_ID), STORAGE)
    db = str(tmp_path / "shoal.db")
    ranges = plan_ranges(
        [src],
        {src.tp: 5},
        {src.tp: 60},
        store=find_store_config(metadata_path=db),
        max_partition_bytes=2 * len(raw),
        min_partitions=None,
    )
    assert [(r.start, r.end) for r in ranges] == [(5, 20), (20, 40), (40, 60)]
    assert all(r.size == 2 * len(raw) for r in ranges)
    ranges = plan_ranges(
        [src], {src.tp: 0}, {src.tp: 60}, store=find_store_config(metadata_path=db), max_partition_bytes=1 << 30, min_partitions=4
    )
    assert [(r.start, r.end) for r in ranges] == [(0, 15), (15, 30), (30, 45), (45, 60)]
    other = PartitionSource("classic", 0, None, BROKER)
    ranges = plan_ranges(
        [other], {other.tp: 0}, {other.tp: 3}, store=None, max_partition_bytes=1, min_partitions=5
    )
    assert [(r.start, r.end) for r in ranges] == [(0, 1), (1, 2), (2, 3)]


# ----------------------------------------------------------------------------- export tables and markers


def test_parquet_table_recovers_from_a_crashed_run(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from shoal.pipeline.parquet_table import ParquetExportTable

    table = ParquetExportTable(str(tmp_path / "t"))
    assert table.committed_offsets("orders", [0]) == {} and table.new_run() == 1
    staged = tmp_path / "t" / "_shoal_staging" / "run-0000000001"
    staged.mkdir(parents=True)
    pq.write_table(pa.table({"offset": [0, 1]}), staged / "part-00000-x.parquet")
    manifest = table.commit(1, "orders", {0: (0, 2)}, {0: 2})
    assert manifest["files"] == ["part-0000000001-00000.parquet"] and manifest["records"] == 2
    assert table.committed_offsets("orders", [0]) == {0: 2}
    with pytest.raises(ValueError, match="holds an export of topic"):
        table.committed_offsets("other", [0])
    # A crashed run 2: its files were moved in, its manifest never written.
    pq.write_table(pa.table({"offset": [2]}), tmp_path / "t" / "part-0000000002-00000.parquet")
    (tmp_path / "t" / "_shoal_staging" / "run-0000000002").mkdir(parents=True)
    assert sorted(table.recover()) == ["_shoal_staging", "part-0000000002-00000.parquet"]
    assert table.files() == ["part-0000000001-00000.parquet"]
    assert pq.read_table(tmp_path / "t").column("offset").to_pylist() == [0, 1]


def test_markers(tmp_path: Path) -> None:
    from shoal.pipeline.markers import Marker, MarkerStore

    store = MarkerStore(str(tmp_path / "objects"))
    assert store.previous("q", 3, 0) == []
    store.record("q", 3, 0, Marker(1000, 11, 0))
    store.record("q", 3, 0, Marker(2000, 12, 1))
    store.record("q", 4, 0, Marker(3000, 13, 0))
    assert sorted(m.started_ms for m in store.previous("q", 3, 0)) == [1000, 2000]
    assert store.previous("q", 3, 1) == []
    assert store.delete("q", below_batch=4) == 2
    assert store.previous("q", 3, 0) == [] and len(store.previous("q", 4, 0)) == 1
    assert store.delete("q") == 1


# ----------------------------------------------------------------------------- read tasks


def test_a_read_task_takes_what_is_alive_out_of_the_workers_collections(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """PySpark's daemon runs a full gc.collect() after each task; the first read task in a worker
    freezes what is alive (imports, mostly), so those collections skip it. Later tasks do not
    freeze again: what they leave in reference cycles must stay collectable."""
    import gc

    from shoal.pipeline import source

    monkeypatch.setattr(source, "_worker_settled", False)
    options = parse_read_options({**BASE, "subscribe": "t"}, streaming=False)
    gc.unfreeze()
    try:
        assert gc.get_freeze_count() == 0
        source._read(options, _Placeholder())
        frozen = gc.get_freeze_count()
        assert frozen > 1000
        gc.unfreeze()
        source._read(options, _Placeholder())
        assert gc.get_freeze_count() == 0
    finally:
        gc.unfreeze()


def test_the_first_read_task_freezes_again_when_it_ends() -> None:
    """What reading imported and cached on first use joins the frozen objects."""
    import gc

    from shoal.pipeline import source

    gc.unfreeze()
    try:
        batches = source._frozen_after(iter(()))
        assert gc.get_freeze_count() == 0, "nothing happens before the task's batches are read"
        assert list(batches) == []
        assert gc.get_freeze_count() > 1000
    finally:
        gc.unfreeze()


class _Placeholder:
    """Spark's placeholder partition of an empty read."""

    value = None
