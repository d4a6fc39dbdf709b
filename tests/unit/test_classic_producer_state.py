"""Idempotent producers on classic logs: dedup, Kafka's errors, snapshots and replay after reopen."""

from __future__ import annotations

import struct
import time
from pathlib import Path

import pytest
from crc32c import crc32c

from shoal.classic.log import PartitionLog
from shoal.classic.log_config import LogConfig
from shoal.classic.producer_state import ProducerStateEntry, read_snapshot, write_snapshot
from shoal.classic.segment import file_name
from shoal.protocol.errors import ErrorCode, KafkaError
from shoal.records.batch import validate_records
from shoal.records.codec import build_batch

# Recent timestamps: producers idle for producer.id.expiration.ms (by record time) are forgotten.
TS = time.time_ns() // 1_000_000
CONFIG = LogConfig(segment_bytes=1500, index_interval_bytes=100)


def produce(log: PartitionLog, pid: int, epoch: int, seq: int, count: int = 2, **kw: object):
    buf = bytearray(
        build_batch(
            [(None, b"p%d-e%d-s%d" % (pid, epoch, seq + i), (), TS + seq + i) for i in range(count)],
            producer_id=pid,
            producer_epoch=epoch,
            base_sequence=seq,
        )
    )
    return log.append(memoryview(buf), validate_records(buf, 1 << 20), **kw)


def error_code(call) -> ErrorCode:
    with pytest.raises(KafkaError) as e:
        call()
    return e.value.code


@pytest.fixture()
def log(tmp_path: Path) -> PartitionLog:
    return PartitionLog.create(tmp_path / "t-0", "t", 0, None, CONFIG)


def test_duplicates_answer_the_original_offsets(log: PartitionLog) -> None:
    first = produce(log, 7, 0, 0)
    second = produce(log, 7, 0, 2)
    assert (first.base_offset, second.base_offset) == (0, 2)
    end = log.log_end_offset
    retry = produce(log, 7, 0, 0)
    assert retry.is_duplicate and (retry.base_offset, retry.last_offset) == (0, 1)
    assert log.log_end_offset == end
    assert produce(log, 7, 0, 2).base_offset == 2
    assert produce(log, 7, 0, 4).base_offset == 4  # in sequence again after the retries


def test_kafka_sequence_and_epoch_errors(log: PartitionLog) -> None:
    produce(log, 1, 3, 10)  # an unknown producer may start at any sequence
    assert error_code(lambda: produce(log, 1, 3, 13)) == ErrorCode.out_of_order_sequence_number
    assert error_code(lambda: produce(log, 1, 2, 12)) == ErrorCode.invalid_producer_epoch
    assert error_code(lambda: produce(log, 1, 4, 5)) == ErrorCode.out_of_order_sequence_number
    assert produce(log, 1, 4, 0).base_offset == 2  # a new epoch starts at 0
    assert error_code(lambda: produce(log, 1, 3, 12)) == ErrorCode.invalid_producer_epoch
    assert log.log_end_offset == 4  # no rejected batch was written
    # Sequences wrap from 2**31-1 to 0.
    produce(log, 2, 0, 2**31 - 2, count=2)
    assert produce(log, 2, 0, 0).base_offset == 6


def test_only_the_last_five_batches_are_remembered(log: PartitionLog) -> None:
    for i in range(6):
        produce(log, 9, 0, i * 2)
    assert produce(log, 9, 0, 2).is_duplicate  # 2nd batch: still among the last five
    assert error_code(lambda: produce(log, 9, 0, 0)) == ErrorCode.out_of_order_sequence_number


def test_dedup_after_clean_reopen_uses_the_snapshot(tmp_path: Path, log: PartitionLog) -> None:
    for i in range(30):
        produce(log, 5, 1, i * 2)
    log.close()
    end = log.log_end_offset
    assert (tmp_path / "t-0" / f"{file_name(end)}.snapshot").exists()
    again = PartitionLog.open(tmp_path / "t-0", "t", 0, CONFIG, clean_shutdown=True)
    retry = produce(again, 5, 1, 58)
    assert retry.is_duplicate and retry.base_offset == 58
    assert produce(again, 5, 1, 60).base_offset == end
    assert error_code(lambda: produce(again, 5, 0, 62)) == ErrorCode.invalid_producer_epoch


def test_dedup_after_crash_replays_the_log_after_the_snapshot(tmp_path: Path, log: PartitionLog) -> None:
    for i in range(40):
        produce(log, 5, 1, i * 2)
    snapshots = sorted((tmp_path / "t-0").glob("*.snapshot"))
    assert snapshots, "a roll takes a producer snapshot at the new segment's base offset"
    last_snapshot = int(snapshots[-1].name.split(".")[0])
    assert last_snapshot < log.log_end_offset - 6  # batches after it exist only in the log
    log.close_handles()  # crash: no snapshot at the log end
    again = PartitionLog.open(tmp_path / "t-0", "t", 0, CONFIG, clean_shutdown=False)
    # The fifth-newest batch is known only through the replay of the log after the snapshot.
    retry = produce(again, 5, 1, 70)
    assert retry.is_duplicate and retry.base_offset == 70
    assert produce(again, 5, 1, 80).base_offset == 80
    again.close()
    # A corrupt newest snapshot is dropped; the older one plus a longer replay give the same state.
    newest = max((tmp_path / "t-0").glob("*.snapshot"))
    newest.write_bytes(newest.read_bytes()[:-3] + b"\0\0\0")
    third = PartitionLog.open(tmp_path / "t-0", "t", 0, CONFIG, clean_shutdown=False)
    assert not newest.exists() or newest.read_bytes()[-3:] != b"\0\0\0"
    assert produce(third, 5, 1, 78).is_duplicate
    assert produce(third, 5, 1, 82).base_offset == 82


def test_snapshot_is_kafkas_v1_format(tmp_path: Path) -> None:
    entry = ProducerStateEntry(42, 3)
    entry.add_batch(3, last_seq=9, last_offset=109, offset_delta=4, timestamp=TS)
    path = tmp_path / "00000000000000000110.snapshot"
    write_snapshot(path, [entry], sync=True)
    raw = path.read_bytes()
    version, crc, count = struct.unpack_from(">hIi", raw)
    assert (version, count) == (1, 1) and crc == crc32c(raw[6:])
    assert struct.unpack_from(">qhiqiqiq", raw, 10) == (42, 3, 9, 109, 4, TS, -1, -1)
    assert len(raw) == 10 + 46
    (loaded,) = read_snapshot(path)
    assert (loaded.producer_id, loaded.producer_epoch, loaded.last_seq, loaded.last_data_offset) == (
        42,
        3,
        9,
        109,
    )
    assert loaded.batches[0].first_seq == 5 and loaded.batches[0].first_offset == 105


def test_idle_producers_expire(log: PartitionLog) -> None:
    produce(log, 3, 0, 0)
    assert log.expire_producers(TS + CONFIG.producer_id_expiration_ms - 1) == 0
    assert log.expire_producers(TS + CONFIG.producer_id_expiration_ms + 10) == 1
    assert produce(log, 3, 0, 40).base_offset == 2  # forgotten: any sequence is taken again
