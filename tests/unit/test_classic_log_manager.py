"""LogManager over JBOD dirs: start-up, checkpoints, failures, isNewReplica, reset, moves, describe."""

from __future__ import annotations

import os
import threading
import time
import uuid
from pathlib import Path

import pytest

from shoal.classic.checkpoint import (
    CLEAN_SHUTDOWN_FILE,
    LOG_START_OFFSET_CHECKPOINT,
    META_PROPERTIES,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    read_meta_properties,
    read_offset_checkpoint,
)
from shoal.classic.log import PartitionLog
from shoal.classic.log_config import LogConfig
from shoal.classic.log_dirs import describe_log_dirs
from shoal.classic.log_manager import LogManager
from shoal.classic.log_manager_failures import LogDirFailureEvent
from shoal.classic.log_manager_startup import LogDirConfigError
from shoal.protocol.errors import ErrorCode, KafkaError
from shoal.records.batch import validate_records
from shoal.records.codec import build_batch, decode_batch, iter_batches

CONFIG = LogConfig(segment_bytes=4096, index_interval_bytes=256)
TOPIC_ID = uuid.UUID("0f8e7d6c-5b4a-4938-8271-605f4e3d2c1b")


def append(log: PartitionLog, value: bytes) -> int:
    buf = bytearray(build_batch([(None, value)]))
    return log.append(memoryview(buf), validate_records(buf, 1 << 20)).base_offset


def values(log: PartitionLog) -> list[bytes | None]:
    out: list[bytes | None] = []
    offset = log.log_start_offset
    while offset < log.high_watermark:
        data = log.read(offset, 1 << 20).records
        for pos, h in iter_batches(data):
            out += [r.value for r in decode_batch(memoryview(data)[pos : pos + h.size])[1]]
            offset = h.next_offset
    return out


def storage_error(call) -> str:
    with pytest.raises(KafkaError) as e:
        call()
    assert e.value.code == ErrorCode.kafka_storage_error, e.value
    return e.value.message


class Events:
    def __init__(self) -> None:
        self.events: list[LogDirFailureEvent] = []

    def __call__(self, event: LogDirFailureEvent) -> None:
        self.events.append(event)


def manager(dirs: list[Path], events: Events | None = None, **kw: object) -> LogManager:
    m = LogManager(dirs, 1, "cluster-A", default_config=CONFIG, on_dir_failure=events, **kw)  # type: ignore[arg-type]
    m.startup()
    return m


def test_startup_placement_checkpoints_and_clean_restart(tmp_path: Path) -> None:
    dirs = [tmp_path / "d1", tmp_path / "d2"]
    m = manager(dirs)
    for d in dirs:
        props = read_meta_properties(d / META_PROPERTIES)
        assert props["version"] == "1" and props["cluster.id"] == "cluster-A" and props["node.id"] == "1"
        assert len(props["directory.id"]) == 22
    logs = [m.create_log("orders", TOPIC_ID, p, is_new=True) for p in range(4)]
    assert sorted(log.log_dir for log in logs) == sorted([str(dirs[0]), str(dirs[1])] * 2)
    assert m.get_log("orders", 2) is logs[2]
    for i in range(50):
        for log in logs:
            append(log, b"%s-%d" % (log.name.encode(), i))
    logs[1].delete_records(10)
    m.shutdown()
    for d in dirs:
        assert (d / CLEAN_SHUTDOWN_FILE).exists()
        assert set(read_offset_checkpoint(d / RECOVERY_POINT_CHECKPOINT).values()) == {50}
        assert set(read_offset_checkpoint(d / REPLICATION_OFFSET_CHECKPOINT).values()) == {50}
    starts = {
        **read_offset_checkpoint(dirs[0] / LOG_START_OFFSET_CHECKPOINT),
        **read_offset_checkpoint(dirs[1] / LOG_START_OFFSET_CHECKPOINT),
    }
    assert starts == {("orders", 1): 10}
    again = manager(dirs, expected=[("orders", p) for p in range(4)])
    assert not any((d / CLEAN_SHUTDOWN_FILE).exists() for d in dirs)  # removed as loading starts
    assert again.get_log("orders", 1).log_start_offset == 10
    assert values(again.get_log("orders", 3))[-1] == b"orders-3-49"
    assert again.offline_partitions() == {}
    again.shutdown()


def test_unclean_restart_recovers(tmp_path: Path) -> None:
    m = manager([tmp_path / "d1"])
    log = m.create_log("t", TOPIC_ID, 0, is_new=True)
    for i in range(200):
        append(log, b"v%d" % i)
    m.checkpoint()
    log.close_handles()  # crash: no clean marker, recovery point 0
    again = manager([tmp_path / "d1"], expected=[("t", 0)])
    assert values(again.get_log("t", 0)) == [b"v%d" % i for i in range(200)]
    again.shutdown()


def test_foreign_meta_properties_refuse_to_start(tmp_path: Path) -> None:
    manager([tmp_path / "d1"]).shutdown()
    with pytest.raises(LogDirConfigError):
        LogManager([tmp_path / "d1"], 1, "other-cluster").startup()
    with pytest.raises(LogDirConfigError):
        LogManager([tmp_path / "d1"], 2, "cluster-A").startup()


def test_a_dir_that_is_a_file_at_startup_is_offline(tmp_path: Path) -> None:
    bad = tmp_path / "d2"
    bad.write_text("not a directory")
    events = Events()
    m = manager([tmp_path / "d1", bad], events)
    assert m.offline_dirs() == [str(bad)] and m.offline_log_dir_count == 1
    assert events.events and events.events[0].log_dir == str(bad) and not events.events[0].halt
    log = m.create_log("t", TOPIC_ID, 0, is_new=True)
    assert log.log_dir == str(tmp_path / "d1")
    append(log, b"fine")
    described = {d.path: d for d in describe_log_dirs(m)}
    assert described[str(bad)].error == ErrorCode.kafka_storage_error
    assert described[str(bad)].total_bytes == -1 and described[str(bad)].replicas == []
    good = described[str(tmp_path / "d1")]
    assert good.error == ErrorCode.none and good.total_bytes > 0 and 0 < good.usable_bytes <= good.total_bytes
    assert [(r.topic, r.partition, r.is_future) for r in good.replicas] == [("t", 0, False)]
    assert good.replicas[0].size == log.size > 0
    # A partition neither expected nor new could be on the failed dir: refused, not created.
    storage_error(lambda: m.create_log("t", TOPIC_ID, 1))
    m.shutdown()


def test_every_dir_offline_means_halt(tmp_path: Path) -> None:
    (tmp_path / "d1").write_text("x")
    events = Events()
    with pytest.raises(KafkaError) as e:
        manager([tmp_path / "d1"], events)
    assert e.value.code == ErrorCode.kafka_storage_error
    assert events.events[-1].halt


def test_run_time_io_error_takes_the_dir_offline(tmp_path: Path) -> None:
    """A descriptor that stops working (EBADF here; EIO through FUSE in test_classic_failfs)."""
    events = Events()
    m = manager([tmp_path / "d1", tmp_path / "d2"], events)
    a = m.create_log("t", TOPIC_ID, 0, is_new=True)
    b = m.create_log("t", TOPIC_ID, 1, is_new=True)
    append(a, b"a0")
    append(b, b"b0")
    os.close(a._segments[-1]._fd)  # the disk under d1 "dies" for this file
    storage_error(lambda: append(a, b"a1"))
    assert m.offline_dirs() == [a.log_dir]
    assert events.events[-1].offline_partitions == [("t", 0)] and not events.events[-1].halt
    assert "offline" in storage_error(lambda: m.get_log("t", 0))
    storage_error(lambda: a.read(0, 100))
    assert append(b, b"b1") == 1 and values(m.get_log("t", 1)) == [b"b0", b"b1"]
    assert m.offline_partitions() == {("t", 0): a.log_dir} and m.offline_replica_count == 1
    # New partitions go to the good dir.
    assert m.create_log("u", TOPIC_ID, 0, is_new=True).log_dir == b.log_dir
    m.shutdown()
    assert not (Path(a.log_dir) / CLEAN_SHUTDOWN_FILE).exists()
    assert (Path(b.log_dir) / CLEAN_SHUTDOWN_FILE).exists()


def test_is_new_replica_rule_and_reset_dir(tmp_path: Path) -> None:
    d1, d2 = tmp_path / "d1", tmp_path / "d2"
    m = manager([d1, d2])
    logs = {p: m.create_log("t", TOPIC_ID, p, is_new=True) for p in range(2)}
    for p, log in logs.items():
        append(log, b"p%d" % p)
    lost = next(p for p, log in logs.items() if log.log_dir == str(d2))
    m.shutdown()
    # The disk behind d2 is replaced by an empty one: the partition on it is missing everywhere.
    for child in d2.iterdir():
        if child.is_dir():
            for f in child.iterdir():
                f.unlink()
            child.rmdir()
    expected = [("t", 0), ("t", 1)]
    m = manager([d1, d2], expected=expected)
    assert m.offline_partitions() == {("t", lost): None}
    storage_error(lambda: m.get_log("t", lost))
    storage_error(lambda: m.create_log("t", TOPIC_ID, lost))  # never silently re-created
    assert values(m.get_log("t", 1 - lost)) == [b"p%d" % (1 - lost)]
    # The operator accepts the loss: the replica may be created again (empty, replication refills it).
    assert m.reset_dir(d2) == [("t", lost)]
    fresh = m.create_log("t", TOPIC_ID, lost)
    assert fresh.log_end_offset == 0
    m.shutdown()


def test_reset_dir_after_a_run_time_failure(tmp_path: Path) -> None:
    d1, d2 = tmp_path / "d1", tmp_path / "d2"
    events = Events()
    m = manager([d1, d2], events)
    a = m.create_log("t", TOPIC_ID, 0, is_new=True)
    for i in range(5):
        append(a, b"a%d" % i)
    a.flush()
    os.close(a._segments[-1]._fd)
    storage_error(lambda: append(a, b"lost"))
    assert m.offline_dirs() == [a.log_dir]
    with pytest.raises(KafkaError) as e:
        m.reset_dir(tmp_path / "nope")
    assert e.value.code == ErrorCode.log_dir_not_found
    # The disk was fine after all (old data still there): it comes back with its partitions.
    assert m.reset_dir(a.log_dir) == []
    assert m.offline_dirs() == [] and values(m.get_log("t", 0)) == [b"a%d" % i for i in range(5)]
    m.shutdown()


def test_create_log_topic_id_mismatch_and_delete(tmp_path: Path) -> None:
    m = manager([tmp_path / "d1"])
    log = m.create_log("t", TOPIC_ID, 0, is_new=True)
    append(log, b"x")
    with pytest.raises(KafkaError) as e:
        m.create_log("t", uuid.uuid4(), 0)
    assert e.value.code == ErrorCode.inconsistent_topic_id
    directory = log.directory
    m.delete_log("t", 0)
    assert not directory.exists() and not list((tmp_path / "d1").glob("t-0*"))
    with pytest.raises(KafkaError) as e:
        m.get_log("t", 0)
    assert e.value.code == ErrorCode.unknown_topic_or_partition
    m.shutdown()


def test_move_to_another_dir_under_concurrent_appends(tmp_path: Path) -> None:
    d1, d2 = tmp_path / "d1", tmp_path / "d2"
    m = manager([d1, d2])
    log = m.create_log("t", TOPIC_ID, 0, is_new=True)
    source = log.log_dir
    dest = str(d2) if source == str(d1) else str(d1)
    for i in range(300):
        append(log, b"before-%d" % i)
    log.delete_records(20)  # the copy starts at the log start
    acked: list[int] = []
    stop = threading.Event()

    def producer() -> None:
        i = 0
        while not stop.is_set() or i < 200:
            acked.append(append(log, b"during-%d" % i))
            i += 1
            if i % 20 == 0:
                # Let the copier have the GIL: an unthrottled thread can outrun 16 KiB copy rounds
                # forever, and the move would never get a round that does not fill its budget.
                time.sleep(0.001)

    with pytest.raises(KafkaError) as e:
        m.alter_log_dir("t", 0, tmp_path / "elsewhere")
    assert e.value.code == ErrorCode.log_dir_not_found
    m.alter_log_dir("t", 0, dest)
    described = {d.path: d for d in describe_log_dirs(m)}
    assert [(r.partition, r.is_future) for r in described[dest].replicas] == [(0, True)]
    assert described[dest].replicas[0].offset_lag > 0
    thread = threading.Thread(target=producer)
    thread.start()
    try:
        done: list[tuple[str, int]] = []
        while not done:
            done = m.complete_moves(copy_budget_bytes=16 * 1024)
    finally:
        stop.set()
        thread.join()
    assert done == [("t", 0)]
    assert m.get_log("t", 0) is log and log.log_dir == dest and not log.is_future
    assert log.directory == Path(dest) / "t-0"
    assert not list(Path(source).glob("t-0*"))
    assert acked == list(range(300, 300 + len(acked)))
    assert log.log_start_offset == 20
    expected = [b"before-%d" % i for i in range(20, 300)] + [b"during-%d" % i for i in range(len(acked))]
    assert values(log) == expected
    append(log, b"after")
    m.shutdown()
    again = manager([d1, d2], expected=[("t", 0)])
    assert again.get_log("t", 0).log_dir == dest and values(again.get_log("t", 0)) == [*expected, b"after"]
    again.shutdown()


def test_an_interrupted_move_resumes_after_restart(tmp_path: Path) -> None:
    d1, d2 = tmp_path / "d1", tmp_path / "d2"
    m = manager([d1, d2])
    log = m.create_log("t", TOPIC_ID, 0, is_new=True)
    dest = str(d2) if log.log_dir == str(d1) else str(d1)
    for i in range(100):
        append(log, b"v%d" % i)
    m.alter_log_dir("t", 0, dest)
    m.future_move("t", 0).copy_step(1000)
    m.shutdown()
    assert len(list(Path(dest).glob("t-0.*-future"))) == 1
    again = manager([d1, d2], expected=[("t", 0)])
    assert again.future_move("t", 0) is not None
    assert again.complete_moves() == [("t", 0)]
    assert again.get_log("t", 0).log_dir == dest and values(again.get_log("t", 0)) == [
        b"v%d" % i for i in range(100)
    ]
    again.shutdown()


def test_duplicate_copies_after_a_crash_mid_swap_keep_one(tmp_path: Path) -> None:
    d1, d2 = tmp_path / "d1", tmp_path / "d2"
    m = manager([d1])
    log = m.create_log("t", TOPIC_ID, 0, is_new=True)
    for i in range(10):
        append(log, b"v%d" % i)
    m.shutdown()
    manager([d2]).shutdown()
    other = PartitionLog.create(d2 / "t-0", "t", 0, TOPIC_ID, CONFIG)
    append(other, b"short")
    other.close()
    again = manager([d1, d2])
    kept = again.get_log("t", 0)
    assert kept.log_dir == str(d1) and kept.log_end_offset == 10
    assert not list(d2.glob("t-0*"))
    again.shutdown()


def test_background_thread_flushes_and_checkpoints(tmp_path: Path) -> None:
    m = manager([tmp_path / "d1"], flush_check_interval_ms=20, recovery_point_checkpoint_interval_ms=20)
    log = m.create_log("t", TOPIC_ID, 0, LogConfig(segment_bytes=1024, flush_ms=10), is_new=True)
    for i in range(100):
        append(log, b"value-%d" % i)
    m.start()
    try:
        for _ in range(200):
            cp = read_offset_checkpoint(tmp_path / "d1" / RECOVERY_POINT_CHECKPOINT)
            if cp.get(("t", 0)) == 100:
                break
            threading.Event().wait(0.02)
    finally:
        m.stop()
    assert log.recovery_point == 100
    assert read_offset_checkpoint(tmp_path / "d1" / RECOVERY_POINT_CHECKPOINT) == {("t", 0): 100}
    m.shutdown()


def test_background_round_deletes_segment_files_after_file_delete_delay(tmp_path: Path) -> None:
    """file.delete.delay.ms: DeleteRecords renames the segment files ``.deleted`` at once; the
    manager's background round unlinks them once the delay has passed, not before."""
    m = manager([tmp_path / "d1"])
    log = m.create_log("t", TOPIC_ID, 0, {"segment.bytes": 1024, "file.delete.delay.ms": 200}, is_new=True)
    assert log.config.file_delete_delay_ms == 200
    for i in range(100):
        append(log, b"value-%d" % i)
    log.delete_records(log.segment_base_offsets[3])
    renamed = list(log.directory.glob("*.deleted"))
    assert renamed
    m.run_periodic_tasks()
    assert all(p.exists() for p in renamed)
    threading.Event().wait(0.3)
    m.run_periodic_tasks()
    assert not list(log.directory.glob("*.deleted"))
    m.shutdown()
