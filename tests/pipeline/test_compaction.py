"""Object compaction (``shoal pipeline compact``): planning, one task in process, and the job on a live broker.

The broker tests run the job while a producer and a consumer keep going and the broker's
retention and object cleaner run with short intervals. They check what matters to a
consumer (identical records and offsets before, during and after; identical batch bytes)
and to storage (fewer live objects; emptied objects deleted through the cleaner and none
still referenced; every batch's coordinates in a live object, parsing with a valid CRC),
and that batches retention deleted while the job ran stay deleted.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from shoal.coordinator.api import (
    BatchInfo,
    BatchMetadata,
    CommitBatchRequest,
    CreateTopicAndPartitionsRequest,
    DeleteRecordsRequest,
    FindBatchRequest,
    TopicIdPartition,
)
from shoal.coordinator.compaction_types import ObjectCandidate
from shoal.objects.local import LocalObjectStorage
from shoal.pipeline.compaction_plan import plan_outputs
from shoal.pipeline.compaction_task import TaskSettings, compact_output, verify_batch
from shoal.pipeline.stores import find_store_config
from shoal.records.batch import read_header
from shoal.records.codec import build_batch
from shoal.records.types import TimestampType
from shoal.records.wal import build_segment, iter_segment
from shoal.store.sqlite.coordinator import SqliteBatchCoordinator
from tests.pipeline.helpers import new_topic, rows_from_consumer
from tests.support.broker import BrokerProcess
from tests.support.kafka_clients import confluent_consume, rec_from_confluent
from tests.support.workload import Rec, make_workload

TOPIC_ID = uuid.UUID("12345678-1234-5678-1234-567812345678")
OTHER_ID = uuid.UUID("87654321-4321-8765-4321-876543218765")
T0 = 1_700_000_000_000


# ----------------------------------------------------------------------------- planning (pure)


_batch_ids = iter(range(1, 10**9))


def _info(
    key: str, offset: int, size: int, partition: int, base: int, topic: uuid.UUID = TOPIC_ID
) -> BatchInfo:
    tip = TopicIdPartition(topic, partition, "t")
    meta = BatchMetadata(tip, offset, size, base, base, T0, T0, TimestampType.CREATE_TIME)
    return BatchInfo(next(_batch_ids), key, meta)


def _candidate(key: str, size: int, used: int) -> ObjectCandidate:
    from datetime import UTC, datetime

    return ObjectCandidate(key, size, used, datetime.fromtimestamp(T0 / 1000, UTC))


def test_plan_lays_out_per_partition_in_offset_order_with_balanced_cuts() -> None:
    # 10 objects, each with one 100-byte batch of p0, p1 and OTHER's p0, in production order.
    batches = {
        f"o{i}": [_info(f"o{i}", 1, 100, 1, i), _info(f"o{i}", 101, 100, 0, i), _info(f"o{i}", 201, 100, 0, i, OTHER_ID)]
        for i in range(10)
    }  # fmt: skip
    candidates = [_candidate(k, 301, 300) for k in batches]
    plan = plan_outputs(candidates, batches, target_bytes=1201)  # 1200 bytes of batches per object at most
    assert plan.input_objects == 10 and plan.live_bytes == 3000
    assert [o.live_bytes for o in plan.outputs] == [1000, 1000, 1000]  # 3 balanced outputs, not 1200+1200+600
    order = [(b.topic_id, b.partition, b.base_offset) for o in plan.outputs for b in o.batches]
    assert order == sorted(order)  # grouped by partition, offsets ascending, across and within outputs
    assert {b.partition for b in plan.outputs[0].batches} == {0}  # few partitions per output
    assert plan.summary()["planned_batches"] == 30


def test_plan_skips_what_would_gain_nothing_and_isolates_huge_batches() -> None:
    one = {"a": [_info("a", 1, 100, 0, 0)]}
    assert plan_outputs([_candidate("a", 101, 100)], one, 1000).outputs == []
    sparse = plan_outputs([_candidate("a", 1001, 100)], one, 1000)
    assert len(sparse.outputs) == 1  # a mostly dead object is worth rewriting alone
    empty = plan_outputs([_candidate("a", 101, 100)], {"a": []}, 1000)
    assert empty.outputs == [] and "no candidate" in empty.reason
    big = {"a": [_info("a", 1, 5000, 0, 0)], "b": [_info("b", 1, 10, 0, 1)], "c": [_info("c", 1, 10, 0, 2)]}
    plan = plan_outputs([_candidate(k, 5001, 5000) for k in big], big, 1000)
    assert [len(o.batches) for o in plan.outputs] == [1, 2]
    with pytest.raises(ValueError):
        plan_outputs([], {}, 1)


# ----------------------------------------------------------------------------- one task, in process


def _records(n: int, start: int) -> list[tuple]:
    return [
        (f"k{start + i}".encode(), f"v{start + i}".encode() * 10, [("h", b"x")], T0 + start + i)
        for i in range(n)
    ]


def _put(
    coord: SqliteBatchCoordinator, storage: LocalObjectStorage, key: str, batches: list[tuple[int, bytes]]
) -> None:
    """Upload one WAL object of (partition, batch) pairs, as the broker lays it out, and commit it."""
    blob, placed = build_segment(batches)
    asyncio.run(storage.upload(key, blob))
    requests = []
    for i, p in enumerate(placed):
        header = read_header(batches[p.index][1], 0)
        requests.append(
            CommitBatchRequest(
                i, TopicIdPartition(TOPIC_ID, p.key, "orders"), p.byte_offset, p.size, 0,
                header.last_offset_delta, header.max_timestamp, TimestampType.CREATE_TIME,
            )
        )  # fmt: skip
    assert all(r.errors == 0 for r in coord.commit_file(key, 1, len(blob), requests))


def _read_all(db: Path, storage_url: str, ends: dict[int, int]) -> dict[int, list[Any]]:
    """Records of each partition from its log start up to ``ends``, through the Spark source's storage reader."""
    from shoal.pipeline.storage_read import DisklessRangeReader
    from shoal.pipeline.topics import STORAGE, PartitionSource

    out: dict[int, list[Any]] = {}
    with DisklessRangeReader(find_store_config(metadata_path=str(db)), storage_url) as reader:
        for p, end in ends.items():
            src = PartitionSource("orders", p, str(TOPIC_ID), STORAGE)
            start, _ = reader.bounds(src)
            out[p] = [r for chunk in reader.read(src, start, end) for r in chunk]
    return out


def test_task_rewrites_live_batches_and_leaves_gone_and_corrupt_ones(tmp_path: Path) -> None:
    db, objects = tmp_path / "shoal.db", tmp_path / "objects"
    coord = SqliteBatchCoordinator(db)
    coord.create_topic_and_partitions({CreateTopicAndPartitionsRequest(TOPIC_ID, "orders", 3)})
    storage = LocalObjectStorage(objects)
    n = 0
    for key in ("wal/a", "wal/b"):
        batches = []
        for p in (1, 0):
            batches.append((p, build_batch(_records(5, n), compression=n % 5)))
            n += 5
        _put(coord, storage, key, batches)
    _put(coord, storage, "wal/gone", [(2, build_batch(_records(3, 100)))])
    _put(coord, storage, "wal/bad", [(2, build_batch(_records(3, 200))), (1, build_batch(_records(3, 300)))])
    readable = {0: 10, 1: 10}  # p1's batch at 10 is about to rot
    before = _read_all(db, str(objects), readable)
    keys = ["wal/a", "wal/b", "wal/gone", "wal/bad"]
    plan = plan_outputs([_candidate(k, 1, 0) for k in keys], coord.list_object_batches(keys), 1 << 20)
    (output,) = plan.outputs
    # Meanwhile: partition 2 is deleted up to 3 and the cleaner removed the emptied "gone"; a bit of
    # "bad"'s partition-1 batch rots in storage.
    coord.delete_records([DeleteRecordsRequest(TopicIdPartition(TOPIC_ID, 2, "orders"), 3)])
    asyncio.run(storage.delete(["wal/gone"]))
    bad_path = objects / "wal" / "bad"
    data = bytearray(bad_path.read_bytes())
    data[-3] ^= 0xFF
    bad_path.write_bytes(bytes(data))

    result = compact_output(output, TaskSettings(find_store_config(metadata_path=str(db)), str(objects), 60_000))
    assert result.missing_objects == ["wal/gone"]
    assert len(result.corrupt) == 1 and "CRC" in result.corrupt[0] and "wal/bad" in result.corrupt[0]
    assert (result.planned, result.moved, result.skipped) == (7, 5, 2)
    assert sorted(result.emptied) == ["wal/a", "wal/b"]
    assert result.object_key is not None and result.object_key.startswith("wal/")

    # The new object is a WAL segment grouped by partition, offsets ascending; the broker's reader
    # and the Spark source read the same records as before.
    blob = (objects / result.object_key).read_bytes()
    layout = [(pos, h.batch_length + 12) for pos, h in iter_segment(blob)]
    assert len(layout) == 5 and all(verify_batch(blob[p : p + s], s) is None for p, s in layout)
    requests = [
        FindBatchRequest(TopicIdPartition(TOPIC_ID, p, "orders"), 3 if p == 2 else 0, 1 << 20)
        for p in range(3)
    ]
    placed = sorted(
        (
            b.object_key,
            b.metadata.byte_offset,
            b.metadata.topic_id_partition.partition,
            b.metadata.base_offset,
        )
        for r in coord.find_batches(requests, 1 << 20)
        for b in r.batches
    )
    assert [x[2:] for x in placed if x[0] == result.object_key] == [(0, 0), (0, 5), (1, 0), (1, 5), (2, 3)]
    assert [x[1] for x in placed if x[0] == result.object_key] == [pos for pos, _ in layout]
    assert [x[2:] for x in placed if x[0] != result.object_key] == [(1, 10)]  # the rotten batch stays put
    assert _read_all(db, str(objects), readable) == before
    coord.close()


def test_task_drops_an_upload_it_could_register_too_late(tmp_path: Path) -> None:
    db, objects = tmp_path / "shoal.db", tmp_path / "objects"
    coord = SqliteBatchCoordinator(db)
    coord.create_topic_and_partitions({CreateTopicAndPartitionsRequest(TOPIC_ID, "orders", 1)})
    storage = LocalObjectStorage(objects)
    _put(coord, storage, "wal/a", [(0, build_batch(_records(2, 0)))])
    _put(coord, storage, "wal/b", [(0, build_batch(_records(2, 2)))])
    keys = ["wal/a", "wal/b"]
    (output,) = plan_outputs(
        [_candidate(k, 1, 0) for k in keys], coord.list_object_batches(keys), 1 << 20
    ).outputs
    result = compact_output(output, TaskSettings(find_store_config(metadata_path=str(db)), str(objects), 0))
    assert result.abandoned and result.moved == 0
    assert sorted(p.name for p in (objects / "wal").iterdir()) == ["a", "b"]  # the upload is gone again
    assert {b.object_key for b in coord.list_object_batches(keys)["wal/a"]} == {"wal/a"}
    coord.close()


# ----------------------------------------------------------------------------- on a live broker


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """A broker writing many small objects, with fast retention and a fast object cleaner."""
    b = BrokerProcess(
        tmp_path_factory.mktemp("compaction-broker"),
        overrides={
            "diskless.append.commit.interval.ms": 20,
            "diskless.object.cleaner.interval.ms": 500,
            "diskless.object.delete.grace.ms": 1000,
            "log.retention.check.interval.ms": 500,
        },
    )
    b.start()
    yield b
    died = b.proc is not None and b.proc.poll() is not None
    b.close()
    if died:
        pytest.fail(f"the broker died during the compaction tests\n{b.log_tail(60)}", pytrace=False)


def _db(broker: BrokerProcess) -> Path:
    return broker.log_dir / "shoal.db"


def _topic_id(broker: BrokerProcess, topic: str) -> uuid.UUID:
    from shoal.pipeline.stores import load_image

    return load_image(find_store_config(metadata_path=str(_db(broker)))).topics_by_name[topic].topic_id


def _query(broker: BrokerProcess, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(f"file:{_db(broker)}?mode=ro", uri=True, timeout=30)
    try:
        return conn.execute(sql, params).fetchall()
    finally:
        conn.close()


def _live_objects(broker: BrokerProcess) -> set[str]:
    return {r[0] for r in _query(broker, "SELECT object_key FROM diskless_files WHERE state = 'uploaded'")}


def _produce_small_objects(
    broker: BrokerProcess, topics: list[str], n: int, per_flush: int, tag: str
) -> None:
    """``n`` records per topic, flushed every ``per_flush``: every flush ends up in its own objects."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True, "linger.ms": 0})
    sent = make_workload(n, 3, tag, seed=len(tag), base_timestamp=int(time.time() * 1000))
    for i, s in enumerate(sent):
        for topic in topics:
            producer.produce(
                topic, key=s.key, value=s.value, headers=list(s.headers), partition=s.partition % 3, timestamp=s.timestamp
            )  # fmt: skip
        if i % per_flush == per_flush - 1:
            assert producer.flush(30) == 0
    assert producer.flush(30) == 0


class _LiveProducer(threading.Thread):
    """Keeps producing one record at a time (its own small objects) until stopped."""

    def __init__(self, broker: BrokerProcess, topic: str, pause: float) -> None:
        super().__init__(daemon=True)
        self.broker, self.topic, self.pause = broker, topic, pause
        self.stop = threading.Event()
        self.sent = 0
        self.errors: list[str] = []

    def run(self) -> None:
        from confluent_kafka import Producer

        producer = Producer({"bootstrap.servers": self.broker.bootstrap, "enable.idempotence": True})

        def done(err: Any, _msg: Any) -> None:
            if err is not None:
                self.errors.append(str(err))

        while not self.stop.is_set():
            producer.produce(
                self.topic, value=b"live|%d" % self.sent, partition=self.sent % 3, on_delivery=done
            )
            self.sent += 1
            producer.flush(30)
            time.sleep(self.pause)
        if producer.flush(30):
            self.errors.append("undelivered records")


class _LiveConsumer(threading.Thread):
    """Reads every partition from the beginning, again and again, until told where to stop.

    Each pass that reaches the end starts over from the beginning, so fetches keep hitting
    old and new coordinates while the job swaps them; a record read again must be identical.
    """

    def __init__(self, broker: BrokerProcess, topic: str) -> None:
        super().__init__(daemon=True)
        self.broker, self.topic = broker, topic
        self.records: dict[tuple[int, int], Rec] = {}
        self.passes = 0
        self.errors: list[str] = []
        self.until: dict[int, int] | None = None  # set by the test: stop at these next offsets

    def run(self) -> None:
        from confluent_kafka import OFFSET_BEGINNING, TopicPartition

        from tests.support.kafka_clients import confluent_consumer

        consumer = confluent_consumer(self.broker.bootstrap, **{"fetch.wait.max.ms": 50})
        start = [TopicPartition(self.topic, p, OFFSET_BEGINNING) for p in range(3)]
        consumer.assign(start)
        next_offsets = {p: 0 for p in range(3)}
        read_in_pass = 0
        deadline = time.monotonic() + 150
        try:
            while time.monotonic() < deadline:
                messages = consumer.consume(num_messages=1000, timeout=0.1)
                for msg in messages:
                    if msg.error():
                        self.errors.append(str(msg.error()))
                        continue
                    rec = rec_from_confluent(msg)
                    seen = self.records.setdefault((rec.partition, rec.offset), rec)
                    if seen != rec:
                        self.errors.append(
                            f"p{rec.partition}@{rec.offset} read differently: {seen} then {rec}"
                        )
                    next_offsets[rec.partition] = rec.offset + 1
                until = self.until
                if until is not None and all(next_offsets[p] >= until[p] for p in until):
                    return
                read_in_pass += len(messages)
                if not messages and read_in_pass and until is None:  # caught up: read it all again
                    self.passes += 1
                    next_offsets = {p: 0 for p in range(3)}
                    read_in_pass = 0
                    consumer.assign(start)
            self.errors.append(f"consumer stopped at {next_offsets}, wanted {self.until}")
        finally:
            consumer.close()


def _objects_of(broker: BrokerProcess, topic: str) -> set[str]:
    """Keys of the objects holding live batches of ``topic``."""
    rows = _query(
        broker,
        "SELECT DISTINCT f.object_key FROM diskless_batches AS b JOIN diskless_files AS f ON f.file_id = b.file_id "
        "JOIN diskless_logs AS l ON l.log_id = b.log_id WHERE l.topic_id = ?",
        (_topic_id(broker, topic).bytes,),
    )
    return {r[0] for r in rows}


def _high_watermarks(broker: BrokerProcess, topic: str) -> dict[int, int]:
    topic_id = _topic_id(broker, topic)
    rows = _query(
        broker, "SELECT partition, high_watermark FROM diskless_logs WHERE topic_id = ?", (topic_id.bytes,)
    )
    return dict(rows)


def _read(broker: BrokerProcess, topic: str, below: dict[int, int]) -> list[Any]:
    """Everything below ``below`` through the broker, as comparable rows."""
    recs = confluent_consume(broker.bootstrap, topic, range(3), sum(below.values()), settle=0.2)
    return rows_from_consumer(r for r in recs if r.offset < below[r.partition])


def _stored_batches(broker: BrokerProcess, topic: str) -> dict[tuple[int, int], bytes]:
    """(partition, base offset) -> the batch's bytes in object storage, as the coordinator points at them."""
    coord = SqliteBatchCoordinator(_db(broker))
    assert broker.objects_dir is not None
    tid = _topic_id(broker, topic)
    try:
        out: dict[tuple[int, int], bytes] = {}
        for p in range(3):
            start = coord.get_log_info(tid, p)
            assert start is not None
            (resp,) = coord.find_batches(
                [FindBatchRequest(TopicIdPartition(tid, p, topic), start[0], 1 << 30)], 1 << 30
            )
            for b in resp.batches:
                m = b.metadata
                data = (broker.objects_dir / b.object_key).read_bytes()
                out[(p, m.base_offset)] = data[m.byte_offset : m.byte_offset + m.byte_size]
        return out
    finally:
        coord.close()


def _check_consistent(broker: BrokerProcess) -> int:
    """Every batch lies inside a live object and its bytes there are that batch (CRC); used sizes add up.

    Returns the number of batches checked. Reads one snapshot of the coordinator while the broker runs.
    """
    conn = sqlite3.connect(f"file:{_db(broker)}?mode=ro", uri=True, timeout=30)
    try:
        conn.execute("BEGIN")
        rows = conn.execute(
            "SELECT f.object_key, f.size, f.state, b.byte_offset, b.byte_size, b.base_offset, b.last_offset "
            "FROM diskless_batches AS b LEFT JOIN diskless_files AS f ON f.file_id = b.file_id"
        ).fetchall()
        used = conn.execute(
            "SELECT f.object_key, f.used_size, COALESCE(SUM(b.byte_size), 0) FROM diskless_files AS f "
            "LEFT JOIN diskless_batches AS b ON b.file_id = f.file_id WHERE f.state = 'uploaded' GROUP BY f.file_id"
        ).fetchall()
    finally:
        conn.close()
    assert broker.objects_dir is not None
    problems = [f"{key}: used size {u} but live batches hold {s}" for key, u, s in used if u != s]
    blobs: dict[str, bytes] = {}
    for key, size, state, offset, length, base, last in rows:
        where = f"batch {base}..{last} at {key}:{offset}+{length}"
        if key is None or state != "uploaded":
            problems.append(f"{where}: object is {state or 'unknown'}")
            continue
        if offset < 1 or offset + length > size:
            problems.append(f"{where}: outside the object's {size} bytes")
            continue
        if key not in blobs:
            path = broker.objects_dir / key
            blobs[key] = path.read_bytes() if path.exists() else b""
        if len(blobs[key]) != size:
            problems.append(f"{where}: object has {len(blobs[key])} bytes in storage, {size} registered")
            continue
        problem = verify_batch(blobs[key][offset : offset + length], length)
        if problem is None and read_header(blobs[key], offset).last_offset_delta != last - base:
            problem = "record count differs from the coordinator's offsets"
        if problem is not None:
            problems.append(f"{where}: {problem}")
    assert not problems, "\n".join(problems[:20])
    return len(rows)


def _wait(condition: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


@pytest.mark.timeout(240)
def test_compaction_under_load_keeps_every_record_and_frees_objects(
    spark: Any, broker: BrokerProcess
) -> None:
    from typer.testing import CliRunner

    from shoal.cli.pipeline import pipeline_app

    topic = new_topic(broker, "compact", 3)
    _produce_small_objects(broker, [topic], 600, per_flush=4, tag="pre")
    live_before = _live_objects(broker)
    assert len(live_before) >= 100
    marks = _high_watermarks(broker, topic)
    before_rows = _read(broker, topic, marks)
    before_bytes = _stored_batches(broker, topic)

    producer = _LiveProducer(broker, topic, pause=0.25)
    consumer = _LiveConsumer(broker, topic)
    producer.start()
    consumer.start()
    time.sleep(0.5)
    args = [
        "compact", "--metadata-path", str(_db(broker)), "--storage-url", broker.storage_url,
        "--target-bytes", str(32 * 1024), "--min-age-ms", "0",
    ]  # fmt: skip
    done = CliRunner().invoke(pipeline_app, args)
    producer.stop.set()
    producer.join(60)
    assert done.exit_code == 0, done.output
    result = json.loads(done.stdout)
    final = _high_watermarks(broker, topic)
    consumer.until = final
    consumer.join(120)
    assert not producer.errors and not consumer.errors, (producer.errors, consumer.errors)

    plan = result["plan"]
    assert plan["input_objects"] >= 100 and result["outputs_written"] == plan["planned_outputs"] >= 2
    assert result["batches_moved"] == plan["planned_batches"] and result["batches_skipped"] == 0
    assert result["objects_emptied"] == plan["input_objects"] and not result["corrupt_batches"]
    live_after = _live_objects(broker)
    new_objects = {o["object_key"] for o in result["outputs"]}
    assert new_objects <= live_after
    assert len(live_after) < len(live_before), (len(live_after), len(live_before))
    compacted = live_before - live_after
    assert compacted == live_before  # every object that existed before the run was rewritten

    # Consumers: the one that ran throughout, a full read now, and the read before, agree.
    after_rows = _read(broker, topic, final)
    assert consumer.passes >= 3  # full reads during the run
    assert rows_from_consumer(consumer.records.values()) == after_rows
    assert [r for r in after_rows if r[1] < marks[r[0]]] == before_rows
    assert len(after_rows) == sum(final.values()) == 600 + producer.sent
    moved_bytes = _stored_batches(broker, topic)
    assert {k: v for k, v in moved_bytes.items() if k in before_bytes} == before_bytes
    _check_consistent(broker)

    # The cleaner deletes the emptied objects after the grace period, and nothing still referenced.
    assert broker.objects_dir is not None
    _wait(lambda: not any((broker.objects_dir / k).exists() for k in compacted), 20, "the cleaner")
    assert not _query(
        broker,
        "SELECT object_key FROM diskless_files WHERE object_key IN (SELECT value FROM json_each(?))",
        (json.dumps(sorted(compacted)),),
    )
    assert _check_consistent(broker) >= len(before_bytes)
    assert _read(broker, topic, final) == after_rows


@pytest.mark.timeout(240)
def test_batches_deleted_by_retention_during_compaction_stay_deleted(
    spark: Any, broker: BrokerProcess
) -> None:
    from shoal.pipeline.compact import CompactionOptions, compact, plan_compaction

    keep = new_topic(broker, "compact-keep", 3)
    expiring = new_topic(broker, "compact-expire", 3, config={"retention.ms": "6000"})
    _produce_small_objects(broker, [keep, expiring], 150, per_flush=5, tag="mixed")  # objects shared by both
    _produce_small_objects(broker, [expiring], 60, per_flush=5, tag="alone")  # objects of `expiring` only
    keep_marks = _high_watermarks(broker, keep)
    keep_rows = _read(broker, keep, keep_marks)
    keep_bytes = _stored_batches(broker, keep)
    expiring_id = _topic_id(broker, expiring)

    options = CompactionOptions(target_bytes=64 * 1024, min_age_ms=0)
    plan = plan_compaction(find_store_config(metadata_path=str(_db(broker))), options)
    planned_expiring = [b for o in plan.outputs for b in o.batches if b.topic_id == expiring_id.bytes]
    assert len(planned_expiring) >= 40

    # The job is "running" (planned, nothing copied yet) when retention deletes every batch of
    # `expiring`, and the cleaner deletes the objects that only held those.
    def expired() -> bool:
        rows = _query(
            broker,
            "SELECT log_start_offset, high_watermark FROM diskless_logs WHERE topic_id = ?",
            (expiring_id.bytes,),
        )
        return all(start == hwm > 0 for start, hwm in rows)

    _wait(expired, 30, "retention")
    alone = {b.object_key for b in planned_expiring} - {
        b.object_key for o in plan.outputs for b in o.batches if b.topic_id != expiring_id.bytes
    }
    assert alone
    assert broker.objects_dir is not None
    _wait(lambda: not any((broker.objects_dir / k).exists() for k in alone), 20, "the cleaner")

    result = compact(spark, find_store_config(metadata_path=str(_db(broker))), broker.storage_url, options, plan=plan)
    assert result.batches_skipped >= len(planned_expiring)
    assert set(result.missing_objects) == alone
    assert result.batches_moved == result.plan["planned_batches"] - result.batches_skipped > 0

    # Not one batch of `expiring` came back: no row, nothing to fetch, nothing to consume.
    assert _query(
        broker,
        "SELECT COUNT(*) FROM diskless_batches WHERE log_id IN (SELECT log_id FROM diskless_logs WHERE topic_id = ?)",
        (expiring_id.bytes,),
    ) == [(0,)]
    marks = _high_watermarks(broker, expiring)
    assert confluent_consume(broker.bootstrap, expiring, range(3), 0, settle=1.0) == []
    coord = SqliteBatchCoordinator(_db(broker))
    try:
        for p in range(3):
            (resp,) = coord.find_batches(
                [FindBatchRequest(TopicIdPartition(expiring_id, p, expiring), marks[p], 1 << 20)], 1 << 20
            )
            assert resp.batches == [] and resp.log_start_offset == resp.high_watermark == marks[p]
    finally:
        coord.close()
    # The new objects count only what they kept alive: the dead bytes make them sparse, for a later run.
    for out in result.outputs:
        (used, size) = _query(
            broker, "SELECT used_size, size FROM diskless_files WHERE object_key = ?", (out["object_key"],)
        )[0]
        assert used == out["moved_bytes"] < size
    assert _read(broker, keep, keep_marks) == keep_rows
    assert _stored_batches(broker, keep) == keep_bytes
    _check_consistent(broker)


def test_dry_run_only_plans(broker: BrokerProcess) -> None:
    from typer.testing import CliRunner

    from shoal.cli.pipeline import pipeline_app

    topic = new_topic(broker, "compact-dry", 3)
    _produce_small_objects(broker, [topic], 30, per_flush=3, tag="dry")
    assert broker.objects_dir is not None
    stored_before = {p.name for p in (broker.objects_dir / "wal").iterdir()}
    dry_before = _query(broker, "SELECT object_key, used_size, state FROM diskless_files WHERE object_key IN "
                        "(SELECT value FROM json_each(?))", (json.dumps(sorted(_objects_of(broker, topic))),))  # fmt: skip
    args = ["compact", "--metadata-path", str(_db(broker)), "--storage-url", broker.storage_url, "--dry-run",
            "--min-age-ms", "0", "--target-bytes", "4096"]  # fmt: skip
    done = CliRunner().invoke(pipeline_app, args)
    assert done.exit_code == 0, done.output
    result = json.loads(done.stdout)
    assert result["dry_run"] and result["plan"]["planned_outputs"] >= 2 and result["outputs_written"] == 0
    # Nothing written (the cleaner may still be deleting objects of earlier tests), nothing swapped.
    assert {p.name for p in (broker.objects_dir / "wal").iterdir()} <= stored_before
    assert _query(broker, "SELECT object_key, used_size, state FROM diskless_files WHERE object_key IN "
                  "(SELECT value FROM json_each(?))", (json.dumps([r[0] for r in dry_before]),)) == dry_before  # fmt: skip
    assert len(dry_before) >= 5
