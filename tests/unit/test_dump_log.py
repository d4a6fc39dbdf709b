"""`shoal dump-log` on WAL segments built by the broker's own layout code and on Kafka-style `.log` files.

Lines are checked field by field against Kafka's DumpLogSegments layout, so scripts written for
kafka-dump-log.sh keep working; the WAL-only parts (topic-partition and assigned offsets from the
Batch Coordinator) are checked against a real coordinator file.
"""

from __future__ import annotations

import re
import struct
import uuid
from pathlib import Path

import pytest
from typer.testing import CliRunner

from shoal.cli.dump_log import SegmentKind, detect_kind
from shoal.cli.main import app
from shoal.coordinator.api import CommitBatchRequest, CreateTopicAndPartitionsRequest, TopicIdPartition
from shoal.records.batch import CRC_OFFSET, read_header
from shoal.records.codec import NewRecord, build_batch, build_control_batch
from shoal.records.types import TimestampType
from shoal.records.wal import build_segment
from shoal.store.sqlite.coordinator import SqliteBatchCoordinator
from shoal.store.sqlite.metadata_log import SqliteMetadataStore

TS = 1_700_000_000_000
TOPIC_ID = uuid.UUID("0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0")

runner = CliRunner()


def run(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, ["dump-log", *args])
    return result.exit_code, result.stdout, result.stderr


def fields(line: str) -> dict[str, str]:
    """`name: value` pairs of a Kafka dump line (values have no blanks, except the last payload)."""
    return dict(re.findall(r"(\w+): (\S+)", line))


def batch_lines(out: str) -> list[str]:
    return [line for line in out.splitlines() if "baseOffset: " in line]


def record_lines(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith("| offset: ")]


# ------------------------------------------------------------------------------------- fixtures


def wal_batches() -> list[tuple[int, bytes]]:
    """Partition 0: an idempotent producer's two batches (gzip, then none); partition 1: one lz4 batch
    with headers, a null key and a null value; the segment groups them by partition."""
    p0a = build_batch(
        [NewRecord(b"k0", b"v0", (("h", b"x"),), TS), NewRecord(b"k1", b"v1", (), TS + 1)],
        compression=1,
        producer_id=7,
        producer_epoch=2,
        base_sequence=10,
    )
    p1 = build_batch(
        [NewRecord(None, b"only-value", (("trace", b"abc"), ("empty", None)), TS + 5), NewRecord(b"tomb", None, (), TS + 6)],
        compression=3,
    )
    p0b = build_batch([NewRecord(b"k2", b"v2", (), TS + 2)], producer_id=7, producer_epoch=2, base_sequence=12)
    return [(0, p0a), (1, p1), (0, p0b)]


@pytest.fixture
def wal_file(tmp_path: Path) -> tuple[Path, bytes, list]:
    data, placed = build_segment(wal_batches())
    path = tmp_path / "objects" / "wal" / str(uuid.UUID(int=42))
    path.parent.mkdir(parents=True)
    path.write_bytes(data)
    return path, data, placed


def classic_file(tmp_path: Path, base: int = 100, gap: bool = False, trailing: bytes = b"") -> Path:
    """A segment as Kafka's FileRecords holds it: batches with their real offsets from byte 0."""
    first = build_batch([NewRecord(b"a", b"1", (), TS), NewRecord(b"b", b"2", (), TS + 1)], base_offset=base)
    second_base = base + 2 + (5 if gap else 0)
    second = build_batch([NewRecord(None, b"3", (), TS + 2)], base_offset=second_base, timestamp_type=1,
                         max_timestamp=TS + 99)
    marker = build_control_batch(True, producer_id=9, producer_epoch=1, coordinator_epoch=4,
                                 base_offset=second_base + 1, timestamp=TS + 3)
    path = tmp_path / "orders-0" / f"{base:020d}.log"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(first + second + marker + trailing)
    return path


# ------------------------------------------------------------------------------------------ WAL


def test_wal_batches_in_kafka_layout(wal_file: tuple[Path, bytes, list]) -> None:
    path, data, placed = wal_file
    rc, out, err = run(str(path))
    assert rc == 0, err
    lines = out.splitlines()
    assert lines[0] == f"Dumping {path}"
    assert lines[1].startswith("WAL segment version: 0")
    assert "offsets below are the producer's" in lines[2]
    batches = batch_lines(out)
    assert len(batches) == 3
    # In segment order: both partition-0 batches first (grouped), then partition 1.
    assert [int(fields(b)["position"]) for b in batches] == [p.byte_offset for p in placed] == [1, placed[1].byte_offset,
                                                                                                placed[2].byte_offset]
    first = fields(batches[0])
    size = read_header(data, 1).size
    assert first == {
        "baseOffset": "0", "lastOffset": "1", "count": "2", "baseSequence": "10", "lastSequence": "11",
        "producerId": "7", "producerEpoch": "2", "partitionLeaderEpoch": "-1", "isTransactional": "false",
        "isControl": "false", "deleteHorizonMs": "OptionalLong.empty", "position": "1", "CreateTime": str(TS + 1),
        "size": str(size), "magic": "2", "compresscodec": "gzip", "crc": str(read_header(data, 1).crc),
        "isvalid": "true",
    }
    # Kafka's exact field order: batch-level fields, then position, timestamp, size and CRC.
    assert batches[0].startswith("baseOffset: 0 lastOffset: 1 count: 2 baseSequence: 10 lastSequence: 11 ")
    assert " deleteHorizonMs: OptionalLong.empty position: 1 CreateTime: " in batches[0]
    assert fields(batches[1])["compresscodec"] == "none"
    assert fields(batches[2])["compresscodec"] == "lz4"
    assert not record_lines(out), "records are printed only with --print-data or --deep-iteration"


def test_wal_print_data(wal_file: tuple[Path, bytes, list]) -> None:
    path, _, _ = wal_file
    rc, out, err = run(str(path), "--print-data")
    assert rc == 0, err
    records = record_lines(out)
    assert records == [
        f"| offset: 0 CreateTime: {TS} keySize: 2 valueSize: 2 sequence: 10 headerKeys: [h] headers: [h=x] "
        "key: k0 payload: v0",
        f"| offset: 1 CreateTime: {TS + 1} keySize: 2 valueSize: 2 sequence: 11 headerKeys: [] key: k1 payload: v1",
        f"| offset: 0 CreateTime: {TS + 2} keySize: 2 valueSize: 2 sequence: 12 headerKeys: [] key: k2 payload: v2",
        f"| offset: 0 CreateTime: {TS + 5} keySize: -1 valueSize: 10 sequence: -1 headerKeys: [trace,empty] "
        "headers: [trace=abc,empty=null] payload: only-value",
        f"| offset: 1 CreateTime: {TS + 6} keySize: 4 valueSize: -1 sequence: -1 headerKeys: [] key: tomb",
    ]
    # --deep-iteration: the same records, metadata only (Kafka prints keys and payloads only with --print-data).
    rc, deep, _ = run(str(path), "--deep-iteration")
    assert rc == 0
    assert [r.split(" headerKeys")[0] for r in record_lines(deep)] == [r.split(" headerKeys")[0] for r in records]
    assert not any("payload:" in r or "key:" in r for r in record_lines(deep))


def test_wal_corrupt_crc_and_truncation(tmp_path: Path, wal_file: tuple[Path, bytes, list]) -> None:
    path, data, placed = wal_file
    bad = bytearray(data)
    bad[placed[1].byte_offset + placed[1].size - 1] ^= 0xFF  # last byte of the second batch
    corrupt = tmp_path / "corrupt"
    corrupt.write_bytes(bytes(bad))
    rc, out, _ = run(str(corrupt))
    assert rc == 0
    assert [fields(b)["isvalid"] for b in batch_lines(out)] == ["true", "false", "true"]

    truncated = tmp_path / "truncated"
    truncated.write_bytes(data[:-10])
    rc, out, err = run(str(truncated))
    assert rc == 1
    assert len(batch_lines(out)) == 2
    assert "is not a valid WAL segment: truncated batch" in err
    assert f"Found {placed[2].size - 10} invalid bytes at the end of truncated" in out


def test_wal_with_coordinator_offsets(tmp_path: Path, wal_file: tuple[Path, bytes, list]) -> None:
    """With --metadata-dir the batches show the topic-partition and the offsets the coordinator assigned."""
    path, data, placed = wal_file
    metadata_dir = tmp_path / "meta"
    db = metadata_dir / "shoal.db"
    SqliteMetadataStore(db).close()
    coordinator = SqliteBatchCoordinator(db, clock=lambda: TS + 1000)
    try:
        coordinator.create_topic_and_partitions({CreateTopicAndPartitionsRequest(TOPIC_ID, "orders", 2)})
        # Partition 0 already holds 40 records, so its batches here get offsets 40.. and 42.
        earlier = build_batch([NewRecord(None, b"x", (), TS)] * 40)
        coordinator.commit_file("wal/earlier", 1, len(earlier) + 1, [_commit(0, 0, 1, earlier)])
        requests = [
            _commit(i, p.key, p.byte_offset, data[p.byte_offset : p.byte_offset + p.size],
                    TimestampType.LOG_APPEND_TIME if p.key == 1 else TimestampType.CREATE_TIME)
            for i, p in enumerate(placed)
        ]
        key = f"wal/{path.name}"
        responses = coordinator.commit_file(key, 1, len(data), requests)
        assert [r.assigned_base_offset for r in responses] == [40, 42, 0]
    finally:
        coordinator.close()

    rc, out, err = run(str(path), "--print-data", "--metadata-dir", str(metadata_dir))
    assert rc == 0, err
    assert f"Object key: {key} size: {len(data)} usedSize: {len(data) - 1} state: uploaded" in out
    batches = [fields(b) for b in batch_lines(out)]
    assert [(b["topic"], b["partition"], b["baseOffset"], b["lastOffset"]) for b in batches] == [
        ("orders", "0", "40", "41"),
        ("orders", "0", "42", "42"),
        ("orders", "1", "0", "1"),
    ]
    # Partition 1 is a LogAppendTime topic: readers get the coordinator's append time.
    assert batches[2]["LogAppendTime"] == str(TS + 1000)
    offsets = [(fields(r)["offset"], fields(r).get("CreateTime") or fields(r)["LogAppendTime"]) for r in record_lines(out)]
    assert offsets == [("40", str(TS)), ("41", str(TS + 1)), ("42", str(TS + 2)), ("0", str(TS + 1000)),
                       ("1", str(TS + 1000))]

    # The same object under another name is looked up by its key's trailing path components.
    copy = tmp_path / "copy" / "wal" / path.name
    copy.parent.mkdir(parents=True)
    copy.write_bytes(data)
    rc, out, _ = run(str(copy), "--metadata-dir", str(metadata_dir))
    assert rc == 0 and "topic: orders partition: 0 baseOffset: 40 " in out

    # An object the coordinator never committed: the producer's offsets, partitions unknown.
    stranger = tmp_path / "stranger"
    stranger.write_bytes(data)
    rc, out, _ = run(str(stranger), "--metadata-dir", str(metadata_dir))
    assert rc == 0
    assert "is not known to the batch coordinator" in out
    assert batch_lines(out)[0].startswith("topic: unknown partition: unknown baseOffset: 0 ")


def _commit(request_id: int, partition: int, byte_offset: int, batch: bytes,
            ts_type: TimestampType = TimestampType.CREATE_TIME) -> CommitBatchRequest:
    header = read_header(batch)
    return CommitBatchRequest(
        request_id=request_id,
        topic_id_partition=TopicIdPartition(TOPIC_ID, partition, "orders"),
        byte_offset=byte_offset,
        size=header.size,
        base_offset=header.base_offset,
        last_offset=header.last_offset,
        batch_max_timestamp=header.max_timestamp,
        message_timestamp_type=ts_type,
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence,
        last_sequence=header.last_sequence,
    )


def test_metadata_dir_without_store(tmp_path: Path, wal_file: tuple[Path, bytes, list]) -> None:
    path, _, _ = wal_file
    rc, _, err = run(str(path), "--metadata-dir", str(tmp_path / "nowhere"))
    assert rc == 1
    assert "No metadata store at" in err
    assert not (tmp_path / "nowhere").exists(), "the tool must never create a store"


# -------------------------------------------------------------------------------------- classic


def test_classic_segment(tmp_path: Path) -> None:
    path = classic_file(tmp_path)
    data = path.read_bytes()
    rc, out, err = run(str(path), "--print-data")
    assert rc == 0, err
    lines = out.splitlines()
    assert lines[:2] == [f"Dumping {path}", "Log starting offset: 100"]
    batches = [fields(b) for b in batch_lines(out)]
    first_size = read_header(data, 0).size
    second_size = read_header(data, first_size).size
    assert [(b["baseOffset"], b["lastOffset"], b["position"], b["count"]) for b in batches] == [
        ("100", "101", "0", "2"),
        ("102", "102", str(first_size), "1"),
        ("103", "103", str(first_size + second_size), "1"),
    ]
    assert batches[1]["LogAppendTime"] == str(TS + 99)
    assert batches[2]["isTransactional"] == "true" and batches[2]["isControl"] == "true"
    assert all(b["isvalid"] == "true" and b["magic"] == "2" for b in batches)
    assert record_lines(out) == [
        f"| offset: 100 CreateTime: {TS} keySize: 1 valueSize: 1 sequence: -1 headerKeys: [] key: a payload: 1",
        f"| offset: 101 CreateTime: {TS + 1} keySize: 1 valueSize: 1 sequence: -1 headerKeys: [] key: b payload: 2",
        f"| offset: 102 LogAppendTime: {TS + 99} keySize: -1 valueSize: 1 sequence: -1 headerKeys: [] payload: 3",
        f"| offset: 103 CreateTime: {TS + 3} keySize: 4 valueSize: 6 sequence: -1 headerKeys: [] "
        "endTxnMarker: COMMIT coordinatorEpoch: 4",
    ]
    assert "Non-consecutive" not in err


def test_classic_gaps_and_trailing_bytes(tmp_path: Path) -> None:
    partial = build_batch([NewRecord(None, b"cut", (), TS)])[:30]
    path = classic_file(tmp_path, base=0, gap=True, trailing=partial)
    rc, out, err = run(str(path), "--deep-iteration")
    assert rc == 0, "a partial batch at the end (a crash mid-append) is reported, not a failure"
    assert out.splitlines()[-1] == f"Found 30 invalid bytes at the end of {path.name}"
    assert f"Non-consecutive offsets in {path.resolve()}" in err
    assert "  1 is followed by 7" in err


def test_classic_bad_magic_fails(tmp_path: Path) -> None:
    path = classic_file(tmp_path)
    data = bytearray(path.read_bytes())
    second = read_header(data, 0).size
    data[second + 16] = 1  # magic of the second batch
    path.write_bytes(bytes(data))
    rc, out, err = run(str(path))
    assert rc == 1
    assert len(batch_lines(out)) == 1
    assert f"Cannot read {path} past byte {second}" in err


def test_several_files_and_files_option(tmp_path: Path, wal_file: tuple[Path, bytes, list]) -> None:
    wal, _, _ = wal_file
    log = classic_file(tmp_path)
    rc, out, _ = run("--files", f"{log},{wal}")
    assert rc == 0
    assert [line for line in out.splitlines() if line.startswith("Dumping ")] == [f"Dumping {log}", f"Dumping {wal}"]
    rc, _, err = run(str(tmp_path / "missing.log"), str(log))
    assert rc == 1 and "Cannot read" in err


# ------------------------------------------------------------------------------------ detection


def test_detection_by_name_then_content(tmp_path: Path, wal_file: tuple[Path, bytes, list]) -> None:
    _, wal_data, _ = wal_file
    log_data = classic_file(tmp_path).read_bytes()
    assert detect_kind(Path("wal/abc"), wal_data) == SegmentKind.WAL
    assert detect_kind(Path("00000000000000000100.log"), log_data) == SegmentKind.CLASSIC
    # Both start with a zero byte; the content decides for files with other names.
    assert log_data[0] == wal_data[0] == 0
    assert detect_kind(Path("copy-of-segment"), log_data) == SegmentKind.CLASSIC
    assert detect_kind(Path("copy-of-object.bin"), wal_data) == SegmentKind.WAL
    assert detect_kind(Path("empty-object"), b"\x00") == SegmentKind.WAL
    # A classic batch whose CRC starts with 2 would fool a one-byte check; parsing the whole file does not.
    crafted = bytearray(log_data)
    struct.pack_into(">B", crafted, CRC_OFFSET, 2)
    assert detect_kind(Path("crafted"), bytes(crafted)) == SegmentKind.CLASSIC
