"""PartitionLog with real files: rolls, reads, reopen, crash recovery, retention, timestamps."""

from __future__ import annotations

import os
import struct
import threading
import time
from pathlib import Path

import pytest

from shoal.classic.checkpoint import LEADER_EPOCH_CHECKPOINT, PARTITION_METADATA
from shoal.classic.log import PartitionLog
from shoal.classic.log_config import LogConfig
from shoal.classic.segment import file_name
from shoal.protocol.errors import ErrorCode, KafkaError
from shoal.records.batch import read_header, validate_records
from shoal.records.codec import build_batch, decode_batch, iter_batches
from shoal.records.types import TimestampType

TS = 1_700_000_000_000
SMALL = LogConfig(segment_bytes=2048, index_interval_bytes=200)


def append(log: PartitionLog, *values: bytes, ts: int | None = None, **kw: object):
    stamps = [TS + i if ts is None else ts + i for i in range(len(values))]
    buf = bytearray(build_batch([(None, v, (), t) for v, t in zip(values, stamps, strict=True)]))
    return log.append(memoryview(buf), validate_records(buf, 1 << 30), **kw)


def all_values(log: PartitionLog, start: int | None = None) -> list[tuple[int, bytes]]:
    offset = log.log_start_offset if start is None else start
    out = []
    while offset < log.high_watermark:
        data = log.read(offset, 1 << 20).records
        for pos, h in iter_batches(data):
            _, records = decode_batch(memoryview(data)[pos : pos + h.size])
            out += [(r.offset, r.value) for r in records if r.offset >= offset]
        offset = out[-1][0] + 1
    return out


def kill(log: PartitionLog) -> int:
    """A crash: files closed, nothing flushed or written; returns the recovery point to reopen with."""
    point = log.recovery_point
    log.close_handles()
    return point


def reopen(
    directory: Path, config: LogConfig = SMALL, *, clean: bool, recovery_point: int = 0
) -> PartitionLog:
    return PartitionLog.open(directory, "t", 0, config, clean_shutdown=clean, recovery_point=recovery_point)


@pytest.fixture()
def log_dir(tmp_path: Path) -> Path:
    return tmp_path / "t-0"


def new_log(directory: Path, config: LogConfig = SMALL) -> PartitionLog:
    return PartitionLog.create(directory, "t", 0, "Zm9vYmFyYmF6cXV4MTIzNA", config)


def test_round_trip_across_many_rolls_and_reopen(log_dir: Path) -> None:
    log = new_log(log_dir)
    expected = []
    for i in range(300):
        values = [b"v%d-%d" % (i, j) * 5 for j in range(1 + i % 3)]
        r = append(log, *values)
        assert r.base_offset == len(expected) and not r.is_duplicate and r.log_append_time == -1
        expected += [(r.base_offset + j, v) for j, v in enumerate(values)]
    assert log.num_segments >= 15
    assert (log_dir / PARTITION_METADATA).read_text() == "version: 0\ntopic_id: Zm9vYmFyYmF6cXV4MTIzNA\n"
    assert all_values(log) == expected
    for offset in (0, 1, 57, 300, len(expected) - 1):
        data = log.read(offset, 1).records  # min one batch
        h = read_header(data)
        assert h.base_offset <= offset <= h.last_offset and len(data) == h.size
    log.close()
    names = sorted(os.listdir(log_dir))
    assert f"{file_name(0)}.log" in names and f"{file_name(0)}.index" in names
    again = reopen(log_dir, clean=True)
    assert again.log_end_offset == len(expected) and again.num_segments == log.num_segments
    assert all_values(again) == expected
    r = append(again, b"after")
    assert r.base_offset == len(expected)
    again.close()


def test_indexes_identical_after_rebuild(log_dir: Path) -> None:
    log = new_log(log_dir)
    for i in range(200):
        append(log, b"x" * (20 + i % 50))
    log.close()
    offset_indexes = {p.name: p.read_bytes() for p in log_dir.glob("*.index")}
    for p in log_dir.glob("*index"):
        p.unlink()
    again = reopen(log_dir, clean=True)  # missing indexes are rebuilt even after a clean shutdown
    assert {p.name: p.read_bytes() for p in log_dir.glob("*.index")} == offset_indexes
    # every offset-index entry points at the start of the batch whose last offset it names
    for name in offset_indexes:
        base = int(name.split(".")[0])
        raw = (log_dir / name).read_bytes()
        log_bytes = (log_dir / f"{file_name(base)}.log").read_bytes()
        for rel, pos in struct.iter_unpack(">ii", raw):
            assert read_header(log_bytes, pos).last_offset == base + rel
    assert len(all_values(again)) == 200
    again.close()


def test_read_limits_offsets_and_high_watermark(log_dir: Path) -> None:
    log = new_log(log_dir)
    for i in range(10):
        append(log, b"a%d" % i, b"b%d" % i)
    data, hw, start = log.read(20, 100)
    assert (data, hw, start) == (b"", 20, 0)
    with pytest.raises(KafkaError) as e:
        log.read(21, 100)
    assert e.value.code == ErrorCode.offset_out_of_range
    one = log.read(5, 10).records
    assert read_header(one).base_offset == 4
    assert log.read(5, 10, min_one_batch=False).records == b""
    log.hw_follows_leo = False
    log.set_high_watermark(6)
    assert [h.base_offset for _, h in iter_batches(log.read(0, 1 << 20).records)] == [0, 2, 4]
    assert len(list(iter_batches(log.read(0, 1 << 20, committed_only=False).records))) == 10
    assert log.read(6, 100).records == b""


def test_log_append_time_and_leader_epochs(log_dir: Path) -> None:
    log = new_log(log_dir)
    r = append(log, b"a", b"b", timestamp_type=TimestampType.LOG_APPEND_TIME, now_ms=TS + 5000)
    assert r.log_append_time == TS + 5000
    h, records = decode_batch(log.read(0, 1000).records)
    assert h.timestamp_type == 1 and {rec.timestamp for rec in records} == {TS + 5000}
    assert h.partition_leader_epoch == 0
    append(log, b"c", leader_epoch=3)
    append(log, b"d", leader_epoch=3)
    append(log, b"e", leader_epoch=5)
    assert (log_dir / LEADER_EPOCH_CHECKPOINT).read_text() == "0\n3\n0 0\n3 2\n5 4\n"
    assert read_header(log.read(4, 10).records).partition_leader_epoch == 5
    assert log.end_offset_for_epoch(3) == (3, 4) and log.end_offset_for_epoch(5) == (5, 5)
    assert log.fetch_offset_by_timestamp(-2).leader_epoch == 0
    assert log.fetch_offset_by_timestamp(-1).offset == 5


def test_offsets_by_timestamp(log_dir: Path) -> None:
    log = new_log(log_dir)
    for i in range(100):
        append(log, b"v", b"w", ts=TS + i * 100)  # offsets 2i, 2i+1 at TS+100i, TS+100i+1
    append(log, b"old", ts=TS - 10_000)  # timestamps need not grow
    assert log.offset_for_timestamp(TS + 4250).offset == 86
    assert log.offset_for_timestamp(TS + 4201) == log.fetch_offset_by_timestamp(TS + 4201)
    assert log.offset_for_timestamp(TS + 4201).offset == 85
    assert log.offset_for_timestamp(TS).offset == 0
    assert log.offset_for_timestamp(TS + 10**6) is None
    top = log.fetch_offset_by_timestamp(-3)
    assert (top.timestamp, top.offset) == (TS + 9901, 199)
    assert log.fetch_offset_by_timestamp(-2).offset == 0
    assert log.fetch_offset_by_timestamp(-1).offset == 201
    assert log.fetch_offset_by_timestamp(-5).offset == -1
    log.close()
    again = reopen(log_dir, clean=True)
    assert again.offset_for_timestamp(TS + 4201).offset == 85
    assert again.fetch_offset_by_timestamp(-3).offset == 199


def test_unclean_shutdown_truncated_and_garbage_tail(log_dir: Path) -> None:
    log = new_log(log_dir)
    for i in range(30):
        append(log, b"value-%d" % i)
    log.flush(10)
    assert log.recovery_point == 10
    point = kill(log)
    active = max(log_dir.glob("*.log"))
    size = active.stat().st_size
    os.truncate(active, size - 5)  # the last batch was half written
    with open(active, "ab") as f:
        f.write(os.urandom(3000))  # and garbage after it
    again = reopen(log_dir, clean=False, recovery_point=point)
    assert again.log_end_offset == 29
    assert [v for _, v in all_values(again)] == [b"value-%d" % i for i in range(29)]
    assert append(again, b"next").base_offset == 29
    again.close()


def test_corrupt_middle_segment_truncates_there_and_drops_later_segments(log_dir: Path) -> None:
    log = new_log(log_dir)
    for i in range(200):
        append(log, b"value-%d" % i * 3)
    bases = log.segment_base_offsets
    assert len(bases) >= 6
    middle = bases[len(bases) // 2]
    point = kill(log)  # nothing was flushed: the recovery point is 0
    assert point == 0
    path = log_dir / f"{file_name(middle)}.log"
    raw = bytearray(path.read_bytes())
    first = read_header(raw, 0)
    third_pos = first.size + read_header(raw, first.size).size
    raw[third_pos + 70] ^= 0x01  # a flipped bit in the third batch of the middle segment
    path.write_bytes(bytes(raw))
    again = reopen(log_dir, clean=False, recovery_point=point)
    # Kafka's LogLoader: truncate at the first corrupt batch and delete every later segment.
    assert again.log_end_offset == middle + 2
    assert again.segment_base_offsets == [b for b in bases if b <= middle]
    assert not [p for p in log_dir.glob("*.log") if int(p.name.split(".")[0]) > middle]
    assert [v for _, v in all_values(again)] == [b"value-%d" % i * 3 for i in range(middle + 2)]
    assert append(again, b"new").base_offset == middle + 2
    again.close()


def test_clean_shutdown_skips_recovery_and_recovery_point_is_trusted(log_dir: Path) -> None:
    log = new_log(log_dir)
    for i in range(100):
        append(log, b"value-%d" % i)
    log.close()
    first = log_dir / f"{file_name(0)}.log"
    raw = bytearray(first.read_bytes())
    raw[200] ^= 0x01
    first.write_bytes(bytes(raw))
    # With the clean-shutdown marker nothing is re-read: the bad batch is not noticed (as in Kafka).
    clean = reopen(log_dir, clean=True)
    assert clean.log_end_offset == 100
    point = clean.recovery_point
    kill(clean)
    # Below the recovery point segments were fsynced before the crash: trusted, not re-read.
    unclean = reopen(log_dir, clean=False, recovery_point=point)
    assert unclean.log_end_offset == 100
    kill(unclean)
    # From offset 0 everything is re-read: the corruption is found.
    full = reopen(log_dir, clean=False, recovery_point=0)
    assert full.log_end_offset < 10 and full.num_segments == 1
    full.close()


def test_retention_by_time_keeps_the_active_segment(log_dir: Path) -> None:
    now = TS + 10 * 3600_000
    config = LogConfig(segment_bytes=1024, index_interval_bytes=200, retention_ms=3600_000)
    log = new_log(log_dir, config)
    for i in range(60):
        append(log, b"old-%d" % i * 4, ts=TS)  # 10 hours old
    for i in range(60):
        append(log, b"new-%d" % i * 4, ts=now - 60_000)
    segments = log.num_segments
    deleted = log.delete_old_segments(now)
    assert deleted > 0 and log.num_segments == segments - deleted
    assert log.log_start_offset == log.segment_base_offsets[0] <= 60
    assert all(v.startswith(b"new") for o, v in all_values(log) if o >= 60)
    # file.delete.delay.ms (Kafka's default, one minute): renamed now, unlinked when due.
    renamed = list(log_dir.glob("*.deleted"))
    assert renamed and log.pending_file_deletions == len(renamed)
    wall = int(time.time() * 1000)
    assert log.delete_pending_files(wall + 50_000) == 0 and all(p.exists() for p in renamed)
    assert log.delete_pending_files(wall + 70_000) == len(renamed)
    assert not list(log_dir.glob("*.deleted")) and log.pending_file_deletions == 0
    # Everything old, still the active segment stays.
    log.update_config(LogConfig(segment_bytes=1024, index_interval_bytes=200, retention_ms=0))
    log.delete_old_segments(now + 3600_000)
    assert log.num_segments == 1 and log.log_end_offset == 120
    with pytest.raises(KafkaError) as e:
        log.read(0, 100)
    assert e.value.code == ErrorCode.offset_out_of_range


def test_retention_by_size(log_dir: Path) -> None:
    config = LogConfig(segment_bytes=1024, index_interval_bytes=200, retention_bytes=3000)
    log = new_log(log_dir, config)
    for i in range(100):
        append(log, b"x%d" % i * 10)
    before = log.size
    log.delete_old_segments(TS)
    assert log.size <= before and log.size >= 3000
    sizes = [p.stat().st_size for p in sorted(log_dir.glob("*.log"))]
    assert sum(sizes) - sizes[0] < 3000  # without the oldest kept segment the log would be too small
    assert all_values(log)[-1] == (99, b"x99" * 10)


def test_delete_records(log_dir: Path) -> None:
    log = new_log(log_dir)
    for i in range(100):
        append(log, b"value-%d" % i)
    bases = log.segment_base_offsets
    target = bases[3] + 1
    assert log.delete_records(target) == target
    assert log.log_start_offset == target and log.segment_base_offsets[0] == bases[3]
    assert not (log_dir / f"{file_name(bases[0])}.log").exists()
    with pytest.raises(KafkaError) as e:
        log.read(target - 1, 100)
    assert e.value.code == ErrorCode.offset_out_of_range
    assert all_values(log)[0] == (target, b"value-%d" % target)
    assert log.fetch_offset_by_timestamp(-2).offset == target
    with pytest.raises(KafkaError) as e:
        log.delete_records(101)
    assert e.value.code == ErrorCode.offset_out_of_range
    assert log.delete_records(-1) == 100  # up to the high watermark
    assert log.num_segments == 1


def test_roll_on_time_and_full_index(log_dir: Path) -> None:
    log = new_log(log_dir, LogConfig(segment_ms=1000, index_interval_bytes=10, segment_index_bytes=8 * 4))
    append(log, b"a", ts=TS)
    append(log, b"b", ts=TS + 500)
    assert log.num_segments == 1
    append(log, b"c", ts=TS + 1500)  # 1.5 s of record time since the segment's first batch
    assert log.num_segments == 2
    for _ in range(12):
        append(log, b"x" * 30, ts=TS + 1600)
    assert log.num_segments >= 4  # four index entries fill a 32-byte offset index


def test_flush_moves_the_recovery_point_and_flush_messages(log_dir: Path) -> None:
    log = new_log(log_dir, LogConfig(flush_messages=5))
    results = [append(log, b"v") for _ in range(5)]
    assert [r.flush_needed for r in results] == [False] * 4 + [True]
    assert log.flush_if_due(TS)
    assert log.recovery_point == 5
    assert not log.flush_if_due(TS)
    timed = new_log(log_dir.with_name("t-1"), LogConfig(flush_ms=100))
    append(timed, b"v")
    assert not timed.flush_if_due(timed._last_flush_ms + 50)
    assert timed.flush_if_due(timed._last_flush_ms + 100)
    assert timed.recovery_point == 1


def test_truncate_to_for_followers(log_dir: Path) -> None:
    log = new_log(log_dir)
    for i in range(80):
        append(log, b"value-%d" % i, leader_epoch=i // 40)
    assert log.truncate_to(50)
    assert log.log_end_offset == 50 and log.leader_epoch_entries == [(0, 0), (1, 40)]
    assert all_values(log)[-1] == (49, b"value-49")
    assert append(log, b"again", leader_epoch=2).base_offset == 50
    log.truncate_fully_and_start_at(1000)
    assert (log.log_start_offset, log.log_end_offset) == (1000, 1000)
    assert append(log, b"far").base_offset == 1000


def test_follower_append_keeps_offsets(log_dir: Path, tmp_path: Path) -> None:
    leader = new_log(log_dir)
    for i in range(50):
        append(leader, b"value-%d" % i, leader_epoch=2)
    (tmp_path / "f").mkdir()
    follower = PartitionLog.create(tmp_path / "f" / "t-0", "t", 0, None, SMALL)
    offset = 0
    while offset < leader.log_end_offset:
        data = leader.read(offset, 700).records
        offset = follower.append_as_follower(data)
    assert follower.log_end_offset == 50 and all_values(follower) == all_values(leader)
    assert follower.leader_epoch_entries == [(2, 0)]
    with pytest.raises(KafkaError):
        follower.append_as_follower(leader.read(10, 100).records)


def values_racing_retention(log: PartitionLog) -> list[tuple[int, bytes]]:
    """``all_values`` while another thread deletes old segments: the log start may move past the
    offset we started from (OFFSET_OUT_OF_RANGE, as Kafka answers); start again from the new one."""
    for _ in range(10):
        try:
            return all_values(log)
        except KafkaError as e:
            if e.code != ErrorCode.offset_out_of_range:
                raise
    raise AssertionError("the log start kept moving under the reader")


def test_appends_on_one_thread_with_maintenance_on_another(log_dir: Path) -> None:
    config = LogConfig(segment_bytes=1024, index_interval_bytes=100, retention_bytes=4096)
    log = new_log(log_dir, config)
    stop = threading.Event()
    errors: list[BaseException] = []

    def worker() -> None:
        try:
            while not stop.is_set():
                log.flush()
                log.delete_old_segments(TS)
                log.flush_if_due()
        except BaseException as e:  # surfaced below
            errors.append(e)

    thread = threading.Thread(target=worker)
    thread.start()
    try:
        for i in range(2000):
            assert append(log, b"value-%d" % i).base_offset == i
            if i % 50 == 0:
                values = values_racing_retention(log)
                assert values[-1] == (i, b"value-%d" % i)
    finally:
        stop.set()
        thread.join()
    assert not errors
    log.flush()
    assert log.recovery_point == 2000
    log.delete_old_segments(TS)
    assert log.size < 4096 + 1024
    log.close()
    again = reopen(log_dir, config, clean=False, recovery_point=0)
    assert again.log_end_offset == 2000


def test_log_config_takes_kafka_names() -> None:
    config = LogConfig.from_properties(
        {"segment.bytes": "1024", "retention.ms": 5, "cleanup.policy": "delete"}
    )
    assert (config.segment_bytes, config.retention_ms, config.index_interval_bytes) == (1024, 5, 4096)
    assert config.to_properties()["flush.messages"] == 2**63 - 1
    assert LogConfig.from_properties(config.to_properties()) == config
    # internal.segment.bytes replaces segment.bytes (Kafka's segmentSize()); an empty cleanup
    # policy turns time and size retention off.
    other = LogConfig.from_properties(
        {
            "segment.bytes": "1048576",
            "internal.segment.bytes": "4096",
            "cleanup.policy": "",
            "segment.jitter.ms": "7",
            "segment.index.bytes": "64",
            "index.interval.bytes": "10",
            "file.delete.delay.ms": "0",
        }
    )
    assert (other.segment_bytes, other.cleanup_delete, other.segment_jitter_ms) == (4096, False, 7)
    assert (other.segment_index_bytes, other.index_interval_bytes, other.file_delete_delay_ms) == (64, 10, 0)
    assert LogConfig.from_properties(other.to_properties()) == other
    assert LogConfig.from_properties({"cleanup.policy": ["compact", "delete"]}).cleanup_delete


def test_file_delete_delay_zero_deletes_at_once(log_dir: Path) -> None:
    log = new_log(log_dir, LogConfig(segment_bytes=1024, index_interval_bytes=200, file_delete_delay_ms=0))
    for i in range(100):
        append(log, b"value-%d" % i)
    bases = log.segment_base_offsets
    assert log.delete_records(bases[2]) == bases[2]
    assert not list(log_dir.glob("*.deleted")) and log.pending_file_deletions == 0
    assert not (log_dir / f"{file_name(bases[0])}.log").exists()


def test_leftover_deleted_files_go_at_reopen(log_dir: Path) -> None:
    """A segment renamed ``.deleted`` whose delay had not passed at shutdown is deleted at the next
    start, as Kafka's log loading does."""
    log = new_log(log_dir)
    for i in range(100):
        append(log, b"value-%d" % i)
    log.delete_records(log.segment_base_offsets[3])
    assert list(log_dir.glob("*.deleted"))
    log.close()
    again = reopen(log_dir, clean=True)
    assert not list(log_dir.glob("*.deleted"))
    assert again.log_start_offset >= again.first_segment_base_offset
    again.close()


def test_empty_cleanup_policy_keeps_everything_but_delete_records_still_deletes(log_dir: Path) -> None:
    """Kafka 4.x: ``cleanup.policy=`` (empty) keeps data forever; only the log start offset
    (DeleteRecords) removes segments."""
    config = LogConfig(
        segment_bytes=1024,
        index_interval_bytes=200,
        retention_ms=0,
        retention_bytes=0,
        cleanup_delete=False,
        file_delete_delay_ms=0,
    )
    log = new_log(log_dir, config)
    for i in range(100):
        append(log, b"value-%d" % i, ts=TS)
    segments = log.num_segments
    assert log.delete_old_segments(TS + 3600_000) == 0 and log.num_segments == segments
    bases = log.segment_base_offsets
    log.delete_records(bases[2])
    assert log.delete_old_segments(TS + 3600_000) == 0
    assert log.num_segments == segments - 2 and log.log_start_offset == bases[2]
    log.update_config(
        LogConfig(segment_bytes=1024, index_interval_bytes=200, retention_ms=0, file_delete_delay_ms=0)
    )
    assert log.delete_old_segments(TS + 3600_000) == segments - 3 and log.num_segments == 1
