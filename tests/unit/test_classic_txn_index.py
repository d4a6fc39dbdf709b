"""The aborted-transaction index (``.txnindex``) of classic segments, Kafka's format: exact bytes,
lookups across segments, and its life with the segments (roll, restart after clean and unclean
shutdown, truncation, retention, tiered copies). Real files in tmp dirs."""

from __future__ import annotations

import os
import random
import struct
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from shoal.classic.log import PartitionLog
from shoal.classic.log_config import LogConfig
from shoal.classic.segment import file_name
from shoal.classic.txn_index import ABORTED_TXN_SIZE, AbortedTxn, TransactionIndex
from shoal.records.batch import read_header, validate_records
from shoal.records.codec import build_batch

TS = time.time_ns() // 1_000_000
CONFIG = LogConfig(segment_bytes=700, index_interval_bytes=100)


@dataclass
class Model:
    """What the log should hold: the transactions, as the test drove them."""

    epochs: dict[int, int] = field(default_factory=dict)
    seqs: dict[int, int] = field(default_factory=dict)
    ongoing: dict[int, int] = field(default_factory=dict)  # producer -> first offset
    aborted: list[tuple[int, int, int]] = field(default_factory=list)  # producer, first, last

    def lso(self, end: int) -> int:
        return min(self.ongoing.values(), default=end)


def send(log: PartitionLog, model: Model, pid: int, count: int = 1, *, txn: bool = True) -> int:
    epoch, seq = model.epochs.setdefault(pid, 0), model.seqs.get(pid, 0)
    buf = bytearray(
        build_batch(
            [(None, b"%d-%d" % (pid, seq + i), (), TS + i) for i in range(count)],
            producer_id=pid,
            producer_epoch=epoch,
            base_sequence=seq,
            is_transactional=txn,
        )
    )
    result = log.append(memoryview(buf), validate_records(buf, 1 << 20))
    model.seqs[pid] = seq + count
    if txn:
        model.ongoing.setdefault(pid, result.base_offset)
    return result.base_offset


def end(log: PartitionLog, model: Model, pid: int, commit: bool) -> int:
    epoch = model.epochs.setdefault(pid, 0) + 1
    offset = log.append_transaction_marker(pid, epoch, 0, commit, 0, transaction_version=2).base_offset
    model.epochs[pid], model.seqs[pid] = epoch, 0
    first = model.ongoing.pop(pid, None)
    if first is not None and not commit:
        model.aborted.append((pid, first, offset))
    return offset


def drive(log: PartitionLog, model: Model, rng: random.Random, steps: int, pids: range = range(1, 5)) -> None:
    for _ in range(steps):
        pid = rng.choice(pids)
        if pid in model.ongoing and rng.random() < 0.35:
            end(log, model, pid, commit=rng.random() < 0.4)
        elif pid not in model.ongoing and rng.random() < 0.1:
            send(log, model, pid, rng.randint(1, 2), txn=False)
        else:
            send(log, model, pid, rng.randint(1, 3))


def expected_aborted(model: Model, start: int, upper: int) -> list[tuple[int, int]]:
    return sorted((pid, first) for pid, first, last in model.aborted if last >= start and first < upper)


def new_log(directory: Path, config: LogConfig = CONFIG) -> PartitionLog:
    return PartitionLog.create(directory, "t", 0, None, config)


def reopen(directory: Path, config: LogConfig = CONFIG, *, clean: bool, recovery_point: int = 0) -> PartitionLog:
    return PartitionLog.open(directory, "t", 0, config, clean_shutdown=clean, recovery_point=recovery_point)


def txn_files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.glob("*.txnindex"))}


def check_against(log: PartitionLog, model: Model) -> None:
    assert log.last_stable_offset == model.lso(log.log_end_offset)
    assert log.ongoing_transactions == sorted((first, pid) for pid, first in model.ongoing.items())
    end_offset = log.log_end_offset
    rng = random.Random(end_offset)
    for _ in range(60):
        start = rng.randrange(log.log_start_offset, end_offset + 1)
        upper = rng.randrange(start, end_offset + 2)
        assert sorted(log.collect_aborted_transactions(start, upper)) == expected_aborted(model, start, upper), (start, upper)


@pytest.fixture()
def log_dir(tmp_path: Path) -> Path:
    return tmp_path / "t-0"


def test_entries_are_kafka_aborted_txns_byte_for_byte(log_dir: Path) -> None:
    log = new_log(log_dir, LogConfig())
    model = Model()
    send(log, model, 10, 2)  # 0-1
    send(log, model, 20)  # 2
    end(log, model, 10, commit=False)  # 3: LSO after it is 2 (producer 20 still open)
    send(log, model, 30)  # 4
    end(log, model, 20, commit=True)  # 5: committed, no entry
    end(log, model, 30, commit=False)  # 6: nothing open after it: LSO 7
    end(log, model, 40, commit=False)  # 7: a producer that wrote nothing here: no entry
    raw = (log_dir / f"{file_name(0)}.txnindex").read_bytes()
    assert raw == struct.pack(">hqqqq", 0, 10, 0, 3, 2) + struct.pack(">hqqqq", 0, 30, 4, 6, 7)
    assert len(raw) == 2 * ABORTED_TXN_SIZE == 68
    assert TransactionIndex(log_dir / f"{file_name(0)}.txnindex", 0).all_aborted() == [
        AbortedTxn(10, 0, 3, 2),
        AbortedTxn(30, 4, 6, 7),
    ]
    # A segment without aborted transactions has no file (Kafka creates it at the first entry).
    log.roll()
    send(log, model, 50)
    end(log, model, 50, commit=True)
    assert sorted(p.name for p in log_dir.glob("*.txnindex")) == [f"{file_name(0)}.txnindex"]
    log.close()


def test_lookups_across_many_segments_match_the_model(log_dir: Path) -> None:
    log = new_log(log_dir)
    model = Model()
    drive(log, model, random.Random(1), 400)
    assert log.num_segments > 10 and len(model.aborted) > 10
    # Transactions spanning segments: the entry is in the marker's segment, found from the first one.
    bases = log.segment_base_offsets
    spanning = [(p, f, last) for p, f, last in model.aborted if bases[log_index(bases, f)] != bases[log_index(bases, last)]]
    assert spanning
    check_against(log, model)
    for pid, first, last in spanning[:5]:
        assert (pid, first) in log.collect_aborted_transactions(first, first + 1)
        assert (pid, first) in log.collect_aborted_transactions(last, last + 1)
        assert (pid, first) not in log.collect_aborted_transactions(last + 1, log.log_end_offset)
    log.close()


def log_index(bases: list[int], offset: int) -> int:
    return max(i for i, b in enumerate(bases) if b <= offset)


def test_clean_restart_keeps_ongoing_transactions_lso_and_index(log_dir: Path) -> None:
    log = new_log(log_dir)
    model = Model()
    drive(log, model, random.Random(2), 200)
    send(log, model, 9)  # make sure something is open
    before = txn_files(log_dir)
    log.close()
    again = reopen(log_dir, clean=True)
    assert txn_files(log_dir) == before
    check_against(again, model)
    # The reloaded producer state goes on: the open transaction ends after the restart.
    end(again, model, 9, commit=False)
    check_against(again, model)
    again.close()


def test_unclean_restart_rebuilds_the_index_from_the_log(log_dir: Path) -> None:
    log = new_log(log_dir)
    model = Model()
    drive(log, model, random.Random(3), 250)
    send(log, model, 9)
    before = txn_files(log_dir)
    assert len(before) > 3
    point = log.recovery_point
    log.close_handles()  # kill -9: nothing flushed, no clean-shutdown snapshot
    for path in log_dir.glob("*.txnindex"):
        path.unlink()  # lost with the page cache
    for path in log_dir.glob("*.snapshot"):
        path.unlink()
    again = reopen(log_dir, clean=False, recovery_point=point)
    assert txn_files(log_dir) == before
    check_against(again, model)
    again.close()


def test_unclean_restart_with_a_torn_tail(log_dir: Path) -> None:
    log = new_log(log_dir)
    model = Model()
    send(log, model, 1)  # 0: stays open
    send(log, model, 2, 2)  # 1-2
    end(log, model, 2, commit=False)  # 3
    send(log, model, 3)  # 4
    last_marker = end(log, model, 3, commit=False)  # 5
    assert [(p, f) for p, f, _ in model.aborted] == [(2, 1), (3, 4)]
    log.close_handles()
    active = max(log_dir.glob("*.log"))
    raw = active.read_bytes()
    pos, h = 0, read_header(raw)
    while h.base_offset != last_marker:
        pos += h.size
        h = read_header(raw, pos)
    os.truncate(active, pos + h.size - 3)  # the last marker was half written
    index = max(log_dir.glob("*.txnindex"))
    with open(index, "ab") as f:
        f.write(b"\x00" * 7)  # and the index has a torn entry
    again = reopen(log_dir, clean=False, recovery_point=0)
    assert again.log_end_offset == last_marker
    # Producer 3's transaction is open again; producer 2's abort is still indexed.
    assert again.ongoing_transactions == [(0, 1), (4, 3)]
    assert again.collect_aborted_transactions(0, last_marker) == [(2, 1)]
    assert index.read_bytes() == struct.pack(">hqqqq", 0, 2, 1, 3, 0)
    assert again.last_stable_offset == 0
    again.close()


def test_missing_offset_index_or_corrupt_txn_index_rebuilds_it_after_a_clean_shutdown(log_dir: Path) -> None:
    log = new_log(log_dir)
    model = Model()
    drive(log, model, random.Random(4), 200)
    log.close()
    before = txn_files(log_dir)
    names = sorted(before)
    assert len(names) >= 3
    first, second = (int(n.split(".")[0]) for n in names[:2])
    (log_dir / f"{file_name(first)}.index").unlink()
    (log_dir / f"{file_name(first)}.txnindex").unlink()
    with open(log_dir / f"{file_name(second)}.txnindex", "ab") as f:
        f.write(b"\x01\x02")  # not a whole entry: the segment is recovered
    again = reopen(log_dir, clean=True)
    assert txn_files(log_dir) == before
    check_against(again, model)
    again.close()


def test_truncation_cuts_index_entries_and_reopens_transactions(log_dir: Path) -> None:
    log = new_log(log_dir)
    model = Model()
    send(log, model, 1, 2)  # 0-1
    send(log, model, 2)  # 2
    end(log, model, 1, commit=False)  # 3
    log.roll()
    send(log, model, 3)  # 4
    end(log, model, 2, commit=False)  # 5
    end(log, model, 3, commit=False)  # 6
    assert log.collect_aborted_transactions(0, 7) == [(1, 0), (2, 2), (3, 4)]
    assert log.truncate_to(6)  # producer 3's marker goes
    assert log.collect_aborted_transactions(0, 7) == [(1, 0), (2, 2)]
    assert (log_dir / f"{file_name(4)}.txnindex").read_bytes() == struct.pack(">hqqqq", 0, 2, 2, 5, 4)
    assert log.ongoing_transactions == [(4, 3)] and log.last_stable_offset == 4
    assert log.truncate_to(4)  # down to the second segment's base: its entries all go
    assert (log_dir / f"{file_name(4)}.txnindex").read_bytes() == b""
    assert log.ongoing_transactions == [(2, 2)] and log.last_stable_offset == 2
    assert log.truncate_to(3)  # the first segment's marker goes too: producer 1 is open again
    assert log.collect_aborted_transactions(0, 7) == []
    assert log.ongoing_transactions == [(0, 1), (2, 2)] and log.last_stable_offset == 0
    log.truncate_fully_and_start_at(100)
    assert not list(log_dir.glob("*.txnindex"))
    assert (log.ongoing_transactions, log.first_unstable_offset, log.last_stable_offset) == ([], None, 100)
    log.close()
    again = reopen(log_dir, clean=True)
    assert (again.ongoing_transactions, again.last_stable_offset) == ([], 100)
    again.close()


def test_retention_deletes_txn_indexes_with_their_segments(log_dir: Path) -> None:
    config = LogConfig(segment_bytes=700, index_interval_bytes=100, retention_bytes=1500)
    log = new_log(log_dir, config)
    model = Model()
    drive(log, model, random.Random(5), 200, pids=range(1, 3))
    indexed = set(txn_files(log_dir))
    assert len(indexed) > 3
    deleted = log.delete_old_segments(TS)
    assert deleted > 0
    kept = {file_name(b) for b in log.segment_base_offsets}
    gone = {n for n in indexed if n.split(".")[0] not in kept}
    assert gone and {p.name[: -len(".deleted")] for p in log_dir.glob("*.txnindex.deleted")} == gone
    assert log.delete_pending_files(int(time.time() * 1000) + 120_000) > 0
    assert not list(log_dir.glob("*.deleted"))
    assert set(txn_files(log_dir)) == indexed - gone
    # DeleteRecords: the log start moves, the LSO never goes below it.
    start = log.delete_records(-1) if not model.ongoing else log.delete_records(log.last_stable_offset)
    assert log.log_start_offset == start and log.last_stable_offset >= start
    assert {file_name(b) for b in log.segment_base_offsets} >= {n.split(".")[0] for n in txn_files(log_dir)}
    log.close()


def test_rolled_segments_stop_at_the_lso_and_carry_their_txn_index(log_dir: Path) -> None:
    log = new_log(log_dir, LogConfig())
    model = Model()
    send(log, model, 1)  # 0
    end(log, model, 1, commit=False)  # 1
    log.roll()
    send(log, model, 2)  # 2
    end(log, model, 2, commit=True)  # 3
    log.roll()
    send(log, model, 3)  # 4: open
    log.roll()
    send(log, model, 4, txn=False)  # 5
    log.roll()
    segments = log.rolled_segments()
    assert [(s.base_offset, s.end_offset) for s in segments] == [(0, 1), (2, 3)]  # 4.. is above the LSO
    assert segments[0].txn_index_path == log_dir / f"{file_name(0)}.txnindex"
    assert segments[1].txn_index_path is None
    end(log, model, 3, commit=True)
    assert [s.base_offset for s in log.rolled_segments(after=3)] == [4, 5]
    log.close()


def test_restart_at_a_high_watermark_below_a_marker_keeps_it_unstable(log_dir: Path) -> None:
    log = new_log(log_dir, LogConfig())
    model = Model()
    send(log, model, 1, 2)  # 0-1
    end(log, model, 1, commit=True)  # 2
    log.close_handles()
    for path in log_dir.glob("*.snapshot"):
        path.unlink()  # replayed from the log: the completed transaction is seen (snapshots do not keep it)
    again = PartitionLog.open(log_dir, "t", 0, LogConfig(), clean_shutdown=False, high_watermark=2)
    again.hw_follows_leo = False
    assert (again.first_unstable_offset, again.last_stable_offset) == (0, 0)
    again.set_high_watermark(3)
    assert (again.first_unstable_offset, again.last_stable_offset) == (None, 3)
    again.close()


def test_unclean_restart_trusts_segments_below_the_recovery_point(log_dir: Path) -> None:
    log = new_log(log_dir)
    model = Model()
    drive(log, model, random.Random(6), 250)
    bases = log.segment_base_offsets
    log.flush(bases[len(bases) // 2])  # fsynced up to the middle segment
    point = log.recovery_point
    before = txn_files(log_dir)
    log.close_handles()
    recovered = [b for i, b in enumerate(bases) if i + 1 == len(bases) or bases[i + 1] > point]
    lost = [n for n in before if int(n.split(".")[0]) in recovered]
    assert lost and len(lost) < len(before)
    for name in lost:
        (log_dir / name).unlink()  # the page cache never reached the disk for these
    again = reopen(log_dir, clean=False, recovery_point=point)
    assert txn_files(log_dir) == before
    check_against(again, model)
    again.close()


def test_dump_log_prints_a_txnindex_as_kafka_does(log_dir: Path) -> None:
    """``shoal dump-log`` on a ``.txnindex``: DumpLogSegments' line per aborted transaction."""
    from typer.testing import CliRunner

    from shoal.cli.main import app

    log = new_log(log_dir, LogConfig())
    model = Model()
    send(log, model, 10, 2)  # 0-1
    end(log, model, 10, commit=False)  # 2
    log.close()
    path = log_dir / f"{file_name(0)}.txnindex"
    result = CliRunner().invoke(app, ["dump-log", str(path)])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == [
        f"Dumping {path}",
        "version: 0 producerId: 10 firstOffset: 0 lastOffset: 2 lastStableOffset: 3",
    ]
