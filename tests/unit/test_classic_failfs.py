"""A log dir whose disk dies at run time (EIO from every operation, open files included).

The disk is tests/support/failfs.py (FUSE), through the ``failing_disk`` fixture of
tests/conftest.py: skipped only where FUSE itself is unavailable.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from shoal.classic.log import PartitionLog
from shoal.classic.log_config import LogConfig
from shoal.classic.log_dirs import describe_log_dirs
from shoal.classic.log_manager import LogManager
from shoal.classic.log_manager_failures import LogDirFailureEvent
from shoal.protocol.errors import ErrorCode, KafkaError
from shoal.records.batch import validate_records
from shoal.records.codec import build_batch, decode_batch, iter_batches
from tests.support.failfs import FailingDisk

TOPIC_ID = uuid.UUID("3a0b0c0d-0e0f-4a1b-8c2d-3e4f5a6b7c8d")


def append(log: PartitionLog, value: bytes) -> int:
    buf = bytearray(build_batch([(None, value)]))
    return log.append(memoryview(buf), validate_records(buf, 1 << 20)).base_offset


def values(log: PartitionLog) -> list[bytes | None]:
    data = log.read(log.log_start_offset, 1 << 20).records
    return [
        r.value
        for pos, h in iter_batches(data)
        for r in decode_batch(memoryview(data)[pos : pos + h.size])[1]
    ]


def test_disk_dies_at_run_time(failing_disk: FailingDisk, tmp_path: Path) -> None:
    mount = failing_disk.mount_point
    good = tmp_path / "good"
    events: list[LogDirFailureEvent] = []
    m = LogManager(
        [good, mount],
        1,
        "cluster-A",
        default_config=LogConfig(segment_bytes=1024),
        on_dir_failure=events.append,
    )
    m.startup()
    logs = [m.create_log("t", TOPIC_ID, p, is_new=True) for p in range(2)]
    dying = next(log for log in logs if log.log_dir == str(mount))
    healthy = next(log for log in logs if log.log_dir == str(good))
    for i in range(20):
        append(dying, b"d%d" % i)
        append(healthy, b"h%d" % i)
    dying.flush()
    m.checkpoint()

    failing_disk.fail()  # the disk dies
    with pytest.raises(KafkaError) as e:
        append(dying, b"never")
    assert e.value.code == ErrorCode.kafka_storage_error
    assert m.offline_dirs() == [str(mount)]
    assert (
        events
        and events[0].log_dir == str(mount)
        and events[0].offline_partitions == [("t", dying.partition)]
    )
    assert not events[0].halt
    with pytest.raises(KafkaError) as e:
        m.get_log("t", dying.partition)
    assert e.value.code == ErrorCode.kafka_storage_error
    # The other dir keeps producing and consuming.
    for i in range(20, 40):
        append(healthy, b"h%d" % i)
    assert values(m.get_log("t", healthy.partition)) == [b"h%d" % i for i in range(40)]
    assert m.create_log("u", TOPIC_ID, 0, is_new=True).log_dir == str(good)
    described = {d.path: d for d in describe_log_dirs(m)}
    assert described[str(mount)].error == ErrorCode.kafka_storage_error
    assert described[str(good)].error == ErrorCode.none
    m.checkpoint()  # only the good dir is written

    failing_disk.recover()  # the disk "comes back": the dir stays offline until it is reset
    with pytest.raises(KafkaError):
        m.get_log("t", dying.partition)
    m.shutdown()
    assert (good / ".kafka_cleanshutdown").exists() and not (mount / ".kafka_cleanshutdown").exists()


def test_background_flush_failure_takes_the_dir_offline(failing_disk: FailingDisk) -> None:
    mount = failing_disk.mount_point
    events: list[LogDirFailureEvent] = []
    m = LogManager([mount], 1, "cluster-A", on_dir_failure=events.append)
    m.startup()
    log = m.create_log("t", TOPIC_ID, 0, LogConfig(flush_messages=1), is_new=True)
    assert append(log, b"x") == 0
    failing_disk.fail()
    m.run_periodic_tasks()  # the worker's fsync fails: no exception escapes, the dir goes offline
    assert m.offline_dirs() == [str(mount)]
    assert events[-1].halt  # it was the only dir: the broker must stop
    with pytest.raises(KafkaError) as e:
        log.read(0, 100)
    assert e.value.code == ErrorCode.kafka_storage_error
    m.shutdown()
