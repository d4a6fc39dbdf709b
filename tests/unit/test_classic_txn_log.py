"""Transactions on a classic PartitionLog (KIP-98, transaction version 2): transactional appends,
markers, fencing, the last stable offset, follower replays and READ_COMMITTED reads. Real files."""

from __future__ import annotations

import random
import struct
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from crc32c import crc32c

from shoal.classic.log import PartitionLog
from shoal.classic.log_config import LogConfig
from shoal.classic.log_results import AppendResult
from shoal.protocol.errors import ErrorCode, KafkaError
from shoal.records.batch import read_header, validate_records
from shoal.records.codec import build_batch, build_control_batch, decode_batch, iter_batches
from shoal.records.control import ControlRecordType, parse_end_txn_marker
from shoal.records.types import TimestampType

TS = time.time_ns() // 1_000_000
CONFIG = LogConfig(segment_bytes=1024, index_interval_bytes=100)


def data(pid: int, epoch: int, seq: int, count: int = 1, *, txn: bool = True) -> bytearray:
    return bytearray(
        build_batch(
            [(None, b"p%d-e%d-s%d" % (pid, epoch, seq + i), (), TS + i) for i in range(count)],
            producer_id=pid,
            producer_epoch=epoch,
            base_sequence=seq,
            is_transactional=txn,
        )
    )


def produce(log: PartitionLog, buf: bytearray, **kw: object) -> AppendResult:
    return log.append(memoryview(buf), validate_records(buf, 1 << 20), **kw)


class Producer:
    """A transactional producer as the coordinator drives it with transaction version 2: every
    marker carries the epoch bumped by one, and the next transaction starts at sequence 0."""

    def __init__(self, pid: int, epoch: int = 0) -> None:
        self.pid, self.epoch, self.seq = pid, epoch, 0

    def send(self, log: PartitionLog, count: int = 1, *, txn: bool = True, **kw: object) -> AppendResult:
        result = produce(log, data(self.pid, self.epoch, self.seq, count, txn=txn), **kw)
        self.seq += count
        return result

    def end(self, log: PartitionLog, commit: bool, coordinator_epoch: int = 0, **kw: object) -> AppendResult:
        result = log.append_transaction_marker(
            self.pid, self.epoch + 1, coordinator_epoch, commit, 0, transaction_version=2, **kw
        )
        self.epoch, self.seq = self.epoch + 1, 0
        return result


def error_code(call: Callable[[], object]) -> ErrorCode:
    with pytest.raises(KafkaError) as e:
        call()
    return e.value.code


def new_log(directory: Path, config: LogConfig = CONFIG) -> PartitionLog:
    return PartitionLog.create(directory, "t", 0, None, config)


@pytest.fixture()
def log(tmp_path: Path) -> PartitionLog:
    return new_log(tmp_path / "t-0")


def test_lso_follows_transactions_of_several_producers(log: PartitionLog) -> None:
    a, b, c = Producer(1), Producer(2), Producer(3)
    plain = Producer(9)
    plain.send(log, 2, txn=False)  # 0-1: idempotent, no transaction
    assert (log.first_unstable_offset, log.last_stable_offset) == (None, 2)
    a.send(log, 2)  # 2-3: a's transaction starts at 2
    assert (log.first_unstable_offset, log.last_stable_offset) == (2, 2)
    b.send(log)  # 4
    a.send(log)  # 5: still a's transaction
    c.send(log)  # 6
    assert log.ongoing_transactions == [(2, 1), (4, 2), (6, 3)]
    assert log.producer_state.producers[1].current_txn_first_offset == 2
    b.end(log, commit=False)  # 7: b aborts; a is older and still open
    assert log.last_stable_offset == 2
    marker = a.end(log, commit=True)  # 8
    assert (marker.base_offset, marker.last_offset) == (8, 8)
    assert (log.first_unstable_offset, log.last_stable_offset) == (6, 6)
    a.send(log)  # 9: a's next transaction, new epoch, sequence 0
    c.end(log, commit=True)  # 10
    assert (log.first_unstable_offset, log.last_stable_offset) == (9, 9)
    a.end(log, commit=False)  # 11
    assert (log.first_unstable_offset, log.last_stable_offset) == (None, 12)
    assert log.ongoing_transactions == []
    # b's abort completed with a's transaction (first offset 2) still open: LSO 2; a's with none.
    assert [(t.producer_id, t.first_offset, t.last_offset, t.last_stable_offset) for t in log.aborted_transactions(0, 12)] == [
        (2, 4, 7, 2),
        (1, 9, 11, 12),
    ]
    assert log.collect_aborted_transactions(0, 12) == [(2, 4), (1, 9)]
    entry = log.producer_state.producers[1]
    assert (entry.producer_epoch, entry.current_txn_first_offset, entry.coordinator_epoch) == (2, -1, 0)


def test_high_watermark_bounds_the_lso_until_the_marker_is_replicated(log: PartitionLog) -> None:
    log.hw_follows_leo = False
    p = Producer(5)
    p.send(log, 2)  # 0-1
    p.end(log, commit=True)  # 2
    assert log.first_unstable_offset == 0  # decided, but the marker is not below the high watermark
    log.set_high_watermark(2)
    assert (log.high_watermark, log.last_stable_offset) == (2, 0)
    log.set_high_watermark(3)
    assert (log.first_unstable_offset, log.last_stable_offset) == (None, 3)
    q = Producer(6)
    q.send(log)  # 3
    assert log.last_stable_offset == 3
    log.set_high_watermark(4)
    assert log.last_stable_offset == 3  # q's transaction is open


def test_marker_batch_is_built_as_kafka_builds_it(log: PartitionLog) -> None:
    p = Producer(77, epoch=4)
    p.send(log)
    log.append_transaction_marker(77, 5, 12, False, 3, transaction_version=2, now_ms=TS + 5000)
    raw = bytes(log.read(1, 1 << 20).records)
    h = read_header(raw)
    assert (h.base_offset, h.partition_leader_epoch, h.magic, h.attributes) == (1, 3, 2, 0x30)
    assert (h.last_offset_delta, h.base_timestamp, h.max_timestamp) == (0, TS + 5000, TS + 5000)
    assert (h.producer_id, h.producer_epoch, h.base_sequence, h.records_count) == (77, 5, -1, 1)
    key = struct.pack(">hh", 0, 0)  # version 0, ABORT
    value = struct.pack(">hi", 0, 12)  # version 0, coordinator epoch
    # One record: length, attributes, timestamp delta, offset delta, key, value, no headers (varints zigzag).
    body = b"\x00\x00\x00" + b"\x08" + key + b"\x0c" + value + b"\x00"
    assert raw[61:] == bytes([len(body) * 2]) + body
    assert h.crc == crc32c(raw[21:]) and h.size == len(raw)
    marker = parse_end_txn_marker(raw, h)
    assert marker is not None
    assert (marker.control_type, marker.coordinator_epoch, marker.timestamp) == (ControlRecordType.ABORT, 12, TS + 5000)
    # Byte for byte what the codec's control batch gives, with the offset and leader epoch stamped.
    built = bytearray(build_control_batch(False, producer_id=77, producer_epoch=5, coordinator_epoch=12, timestamp=TS + 5000))
    struct.pack_into(">q", built, 0, 1)
    struct.pack_into(">i", built, 12, 3)
    assert raw == bytes(built)


def test_markers_on_log_append_time_topics_carry_the_append_time(log: PartitionLog) -> None:
    p = Producer(3)
    p.send(log, timestamp_type=TimestampType.LOG_APPEND_TIME, now_ms=TS + 1)
    result = p.end(log, commit=True, timestamp_type=TimestampType.LOG_APPEND_TIME, now_ms=TS + 99)
    assert result.log_append_time == TS + 99
    h, records = decode_batch(log.read(1, 1 << 20).records)
    assert h.timestamp_type == 1 and h.max_timestamp == TS + 99 and records[0].timestamp == TS + 99
    assert log.producer_state.producers[3].last_timestamp == TS + 99


def test_fencing_by_coordinator_and_producer_epochs(log: PartitionLog) -> None:
    p = Producer(4, epoch=2)
    p.send(log)  # 0
    log.append_transaction_marker(4, 3, 7, True, 0, transaction_version=2)  # 1: coordinator epoch 7
    p.epoch, p.seq = 3, 0
    p.send(log)  # 2
    end = log.log_end_offset

    def marker(epoch: int, coordinator_epoch: int, tv: int = 2) -> AppendResult:
        return log.append_transaction_marker(4, epoch, coordinator_epoch, False, 0, transaction_version=tv)

    # A coordinator epoch below the producer's last one: a zombie coordinator.
    assert error_code(lambda: marker(4, 6)) == ErrorCode.transaction_coordinator_fenced
    # TV2: the marker must carry a bumped epoch while the transaction is open.
    assert error_code(lambda: marker(3, 7)) == ErrorCode.invalid_producer_epoch
    assert error_code(lambda: marker(2, 7)) == ErrorCode.invalid_producer_epoch
    # TV1: same epoch is fine, an older one is not.
    assert error_code(lambda: marker(2, 7, tv=1)) == ErrorCode.invalid_producer_epoch
    # A transactional batch of a fenced (older) epoch.
    assert error_code(lambda: produce(log, data(4, 2, 1))) == ErrorCode.invalid_producer_epoch
    # A non-transactional batch inside the producer's open transaction.
    assert error_code(lambda: produce(log, data(4, 3, 1, txn=False))) == ErrorCode.invalid_txn_state
    assert log.log_end_offset == end and log.last_stable_offset == 2  # nothing was written
    assert marker(4, 7).base_offset == end  # the right marker
    assert log.last_stable_offset == end + 1
    # TV2: a retried marker at the same epoch after the transaction ended is written again (KAFKA-19999).
    assert marker(4, 8).base_offset == end + 1
    assert log.producer_state.producers[4].coordinator_epoch == 8
    # Older epochs with nothing open are still refused.
    assert error_code(lambda: marker(3, 8)) == ErrorCode.invalid_producer_epoch
    # With TV1 a marker without an open transaction completes nothing and adds no index entry.
    assert marker(4, 8, tv=1).base_offset == end + 2
    assert log.collect_aborted_transactions(0, log.log_end_offset) == [(4, 2)]


def test_transaction_marker_for_an_unknown_producer_is_written(log: PartitionLog) -> None:
    result = log.append_transaction_marker(42, 0, 1, True, 0, transaction_version=2)
    assert result.base_offset == 0 and log.last_stable_offset == 1
    entry = log.producer_state.producers[42]
    assert (entry.producer_epoch, entry.coordinator_epoch, entry.current_txn_first_offset) == (0, 1, -1)
    with pytest.raises(ValueError):
        log.append_transaction_marker(42, 1, 1, True, 0, transaction_version=-1)


def test_clients_may_not_write_control_batches(log: PartitionLog) -> None:
    marker = bytearray(build_control_batch(True, producer_id=1, producer_epoch=0, coordinator_epoch=0))
    with pytest.raises(KafkaError) as e:
        validate_records(marker, 1 << 20)  # the produce path's validation
    assert e.value.code == ErrorCode.invalid_record
    # Even batches validated as a follower's are refused by the leader's client append.
    batches = validate_records(marker, 1 << 20, from_client=False)
    assert error_code(lambda: log.append(memoryview(marker), batches)) == ErrorCode.invalid_record
    assert log.log_end_offset == 0


def test_idempotent_retries_inside_a_transaction(log: PartitionLog) -> None:
    p = Producer(8)
    first = p.send(log, 3)
    again = produce(log, data(8, 0, 0, 3))
    assert again.is_duplicate and (again.base_offset, again.last_offset) == (first.base_offset, first.last_offset)
    assert log.ongoing_transactions == [(0, 8)] and log.log_end_offset == 3


def test_expiry_keeps_producers_with_an_open_transaction(log: PartitionLog) -> None:
    Producer(1).send(log)
    Producer(2).send(log, txn=False)
    assert log.expire_producers(TS + 10 * 86_400_000) == 1
    assert set(log.producer_state.producers) == {1}


def _follow(leader: PartitionLog, follower: PartitionLog, chunk: int) -> None:
    offset = follower.log_end_offset
    while offset < leader.log_end_offset:
        offset = follower.append_as_follower(leader.read(offset, chunk, committed_only=False).records)


def _concatenated(directory: Path, suffix: str) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(directory.glob("*" + suffix)))


def _random_transactions(log: PartitionLog, rng: random.Random, steps: int) -> None:
    producers = [Producer(pid) for pid in range(1, 6)]
    open_: set[int] = set()
    for _ in range(steps):
        p = rng.choice(producers)
        roll = rng.random()
        if p.pid in open_ and roll < 0.3:
            p.end(log, commit=rng.random() < 0.5)
            open_.discard(p.pid)
        elif p.pid not in open_ and roll < 0.15:
            p.send(log, rng.randint(1, 3), txn=False)
        else:
            p.send(log, rng.randint(1, 3))
            open_.add(p.pid)


def test_followers_replay_leader_batches_byte_identically(tmp_path: Path) -> None:
    (tmp_path / "leader").mkdir()
    leader = new_log(tmp_path / "leader" / "t-0")
    _random_transactions(leader, random.Random(7), 300)
    assert leader.num_segments > 5 and leader.collect_aborted_transactions(0, leader.log_end_offset)
    for chunk in (1, 700, 1 << 20):  # one batch at a time, a few, everything at once
        (tmp_path / f"f{chunk}").mkdir()
        follower = PartitionLog.create(tmp_path / f"f{chunk}" / "t-0", "t", 0, None, CONFIG)
        _follow(leader, follower, chunk)
        assert follower.log_end_offset == leader.log_end_offset
        assert follower.ongoing_transactions == leader.ongoing_transactions
        assert follower.last_stable_offset == leader.last_stable_offset
        assert follower.collect_aborted_transactions(0, leader.log_end_offset) == leader.collect_aborted_transactions(
            0, leader.log_end_offset
        )
        for suffix in (".log", ".txnindex"):
            assert _concatenated(follower.directory, suffix) == _concatenated(leader.directory, suffix)
        if chunk == 1:  # appended batch by batch, a follower rolls where its leader did
            assert follower.segment_base_offsets == leader.segment_base_offsets
            assert sorted(p.name for p in follower.directory.glob("*.txnindex")) == sorted(
                p.name for p in leader.directory.glob("*.txnindex")
            )
        follower.close()


def test_follower_appends_check_transactions_too(log: PartitionLog, tmp_path: Path) -> None:
    assert log.append_as_follower(data(3, 0, 0)) == 1
    assert log.ongoing_transactions == [(0, 3)]
    stray = bytearray(build_batch([(None, b"x")], base_offset=1, producer_id=3, producer_epoch=0, base_sequence=1))
    assert error_code(lambda: log.append_as_follower(stray)) == ErrorCode.invalid_txn_state
    assert log.log_end_offset == 1
    marker = build_control_batch(False, producer_id=3, producer_epoch=0, coordinator_epoch=5, base_offset=1)
    assert log.append_as_follower(marker) == 2
    assert log.collect_aborted_transactions(0, 2) == [(3, 0)]
    again = data(3, 0, 1)
    struct.pack_into(">q", again, 0, 2)
    assert log.append_as_follower(again) == 3
    # A zombie coordinator's marker is only logged on followers: the leader accepted it.
    zombie = build_control_batch(False, producer_id=3, producer_epoch=0, coordinator_epoch=3, base_offset=3)
    assert log.append_as_follower(zombie) == 4
    assert log.collect_aborted_transactions(0, 4) == [(3, 0), (3, 2)]
    assert log.producer_state.producers[3].coordinator_epoch == 3
    # A control batch that is no transaction marker.
    leader_change = bytearray(build_batch([(struct.pack(">hh", 0, 2), b"\x00\x00")], base_offset=4, is_control=True))
    assert error_code(lambda: log.append_as_follower(leader_change)) == ErrorCode.invalid_record
    assert log.log_end_offset == 4


def test_read_committed_stops_at_the_lso_and_lists_aborted_transactions(log: PartitionLog) -> None:
    a, b = Producer(1), Producer(2)
    a.send(log, 2)  # 0-1
    b.send(log)  # 2
    a.end(log, commit=False)  # 3
    b.send(log)  # 4
    read = log.read_committed(0, 1 << 20)
    assert (read.last_stable_offset, read.high_watermark, read.log_start_offset) == (2, 5, 0)
    assert [h.base_offset for _, h in iter_batches(read.records)] == [0]
    assert read.aborted_transactions == [(1, 0)]  # its data is in the range read, its marker after it
    b.end(log, commit=True)  # 5
    read = log.read_committed(0, 1 << 20)
    assert read.last_stable_offset == 6
    assert [h.base_offset for _, h in iter_batches(read.records)] == [0, 2, 3, 4, 5]
    assert read.aborted_transactions == [(1, 0)]
    assert log.read_committed(4, 1 << 20).aborted_transactions == []
    assert log.read_committed(6, 1 << 20).records == b""
    with pytest.raises(KafkaError) as e:
        log.read_committed(7, 100)
    assert e.value.code == ErrorCode.offset_out_of_range
