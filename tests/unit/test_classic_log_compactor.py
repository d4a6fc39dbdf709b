"""The classic log cleaner's pass on real segment files: latest value per key, tombstones and their
delete horizon, aborted transactions, producer state, crash points of the segment swap."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from shoal.classic.log import PartitionLog
from shoal.classic.log_compactor import CleaningAbortedError, LogTooDirtyError, Throttler, clean_log
from shoal.classic.log_config import LogConfig
from shoal.classic.segment import SWAP_END_SUFFIX, file_name
from shoal.records.batch import validate_records
from shoal.records.codec import build_batch, decode_batch, iter_batches
from shoal.records.compaction import OffsetMap

TS = 1_700_000_000_000
COMPACT = LogConfig(segment_bytes=4096, index_interval_bytes=200, cleanup_compact=True, cleanup_delete=False)
NO_LIMIT = Throttler(float("inf"))


def new_log(directory: Path, config: LogConfig = COMPACT) -> PartitionLog:
    return PartitionLog.create(directory, "t", 0, None, config, clock=lambda: TS)


def put(log: PartitionLog, records: list[tuple[bytes | None, bytes | None]], **batch: object) -> None:
    buf = bytearray(build_batch([(k, v, (), TS) for k, v in records], **batch))  # type: ignore[arg-type]
    log.append(memoryview(buf), validate_records(buf, 1 << 30), now_ms=TS)


def marker(log: PartitionLog, pid: int, commit: bool) -> None:
    log.append_transaction_marker(pid, 0, 0, commit, 0, transaction_version=0, now_ms=TS)


def read_all(log: PartitionLog) -> list[tuple[int, bytes | None, bytes | None]]:
    out: list[tuple[int, bytes | None, bytes | None]] = []
    offset = log.log_start_offset
    while offset < log.high_watermark:
        data = log.read(offset, 1 << 20).records
        if not data:
            break
        for pos, h in iter_batches(data):
            header, records = decode_batch(memoryview(data)[pos : pos + h.size])
            if not header.is_control:
                out += [(r.offset, r.key, r.value) for r in records if r.offset >= offset]
            offset = h.next_offset
    return out


def clean(log: PartitionLog, now: int = TS, checkpoint: int = 0, capacity: int = 100_000):
    return clean_log(log, checkpoint, OffsetMap(capacity), NO_LIMIT, now)


def fill(log: PartitionLog, rounds: int, keys: int) -> dict[bytes, bytes]:
    latest: dict[bytes, bytes] = {}
    for r in range(rounds):
        batch = []
        for k in range(keys):
            key, value = b"k%03d" % k, b"v%d-%d" % (r, k)
            batch.append((key, value))
            latest[key] = value
        put(log, batch)
    return latest


def test_clean_keeps_the_latest_value_of_every_key_and_shrinks_the_log(tmp_path: Path) -> None:
    log = new_log(tmp_path / "t-0")
    latest = fill(log, 40, 20)
    put(log, [(b"tail", b"x")])
    size_before = log.size
    done = clean(log)
    assert done is not None and done.swapped_groups >= 1
    values = read_all(log)
    seen = {k: v for _, k, v in values}
    assert {k: v for k, v in seen.items() if k != b"tail"} == latest
    offsets = [o for o, _, _ in values]
    assert offsets == sorted(offsets)
    assert log.size < size_before / 3
    assert log.log_end_offset == 40 * 20 + 1  # offsets never move


def test_cleaned_log_survives_reopen_and_recovery(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    log = new_log(directory)
    latest = fill(log, 30, 10)
    put(log, [(b"tail", b"x")])
    clean(log)
    before = read_all(log)
    log.close()
    again = PartitionLog.open(directory, "t", 0, COMPACT, clean_shutdown=False, recovery_point=0)
    assert read_all(again) == before
    assert {k: v for _, k, v in before if k != b"tail"} == latest
    again.close()


def test_tombstones_stay_until_their_delete_horizon(tmp_path: Path) -> None:
    log = new_log(tmp_path / "t-0", LogConfig(segment_bytes=4096, cleanup_compact=True, delete_retention_ms=1000))
    fill(log, 20, 10)
    put(log, [(b"k001", None), (b"k002", None)])
    fill(log, 1, 3)  # k000..k002 written again after the tombstones
    put(log, [(b"k005", None)])
    for _ in range(3):
        put(log, [(b"tail", b"x")] * 200)
    clean(log, now=TS)
    keys = {k: v for _, k, v in read_all(log)}
    assert keys[b"k005"] is None  # the tombstone is kept until its horizon
    clean(log, now=TS + 2000, checkpoint=0)
    keys = {k: v for _, k, v in read_all(log)}
    assert b"k005" not in keys
    assert keys[b"k001"] is not None


def test_aborted_transaction_records_and_markers_disappear(tmp_path: Path) -> None:
    log = new_log(tmp_path / "t-0", LogConfig(segment_bytes=4096, cleanup_compact=True, delete_retention_ms=0))
    put(log, [(b"a", b"committed")])
    put(log, [(b"a", b"aborted"), (b"b", b"aborted")], producer_id=7, producer_epoch=0, base_sequence=0,
        is_transactional=True)
    marker(log, 7, commit=False)
    for _ in range(3):
        put(log, [(b"c", b"later")] * 100)
    clean(log, now=TS)
    clean(log, now=TS + 10, checkpoint=0)
    values = read_all(log)
    assert (b"a", b"committed") in [(k, v) for _, k, v in values]
    assert all(v != b"aborted" for _, _, v in values)


def test_a_first_dirty_segment_larger_than_the_map_is_uncleanable(tmp_path: Path) -> None:
    log = new_log(tmp_path / "t-0")
    fill(log, 10, 30)
    put(log, [(b"tail", b"x")])
    with pytest.raises(LogTooDirtyError):
        clean(log, capacity=5)


@pytest.mark.parametrize("crash_at", ["cleaned", "swap", "half-renamed"])
def test_a_crash_during_the_swap_recovers_to_one_consistent_log(tmp_path: Path, crash_at: str) -> None:
    directory = tmp_path / "t-0"
    log = new_log(directory)
    latest = fill(log, 30, 10)
    put(log, [(b"tail", b"x")])
    expected_before = read_all(log)
    segments = list(log._segments)[:-1]  # noqa: SLF001 - simulate the swap's files at each step
    bases = [s.base_offset for s in segments]
    end = log._segments[-1].base_offset  # noqa: SLF001
    log.close()
    # Build a cleaned copy of the group in another dir, then lay its files down as the crash left them.
    scratch = tmp_path / "scratch" / "t-0"
    scratch.parent.mkdir()
    import shutil

    shutil.copytree(directory, scratch)
    copy = PartitionLog.open(scratch, "t", 0, COMPACT, clean_shutdown=True, recovery_point=end)
    clean(copy)
    cleaned_files = sorted(p for p in os.listdir(scratch) if p.startswith(file_name(bases[0])) and "." in p)
    copy.close()
    suffix = {"cleaned": ".cleaned", "swap": ".swap", "half-renamed": ".swap"}[crash_at]
    for name in cleaned_files:
        if name.endswith((".log", ".index", ".timeindex", ".txnindex")):
            shutil.copy(scratch / name, directory / (name + suffix))
    if crash_at != "cleaned":
        (directory / (file_name(bases[0]) + SWAP_END_SUFFIX)).write_text(str(end))
    if crash_at == "half-renamed":  # the old group's later segments were already renamed .deleted
        for base in bases[1:]:
            for ext in (".log", ".index", ".timeindex"):
                path = directory / (file_name(base) + ext)
                if path.exists():
                    path.rename(path.with_name(path.name + ".deleted"))
    again = PartitionLog.open(directory, "t", 0, COMPACT, clean_shutdown=False, recovery_point=0)
    after = read_all(again)
    if crash_at == "cleaned":
        assert after == expected_before
    else:
        assert {k: v for _, k, v in after if k != b"tail"} == latest
        assert len(after) < len(expected_before)
    assert not [p for p in os.listdir(directory) if p.endswith((".swap", ".cleaned", SWAP_END_SUFFIX, ".deleted"))]
    again.close()


def test_retention_during_a_pass_aborts_it_at_the_next_batch_instead_of_waiting(tmp_path: Path) -> None:
    import threading
    import time as _time

    log = new_log(tmp_path / "t-0")
    fill(log, 40, 20)
    put(log, [(b"tail", b"x")])
    slow = Throttler(20_000.0)  # 20 kB/s: the pass would take many seconds
    outcome: list[object] = []

    def run() -> None:
        try:
            outcome.append(clean_log(log, 0, OffsetMap(10_000), slow, TS))
        except Exception as e:  # noqa: BLE001 - the outcome is what the test checks
            outcome.append(e)

    worker = threading.Thread(target=run)
    worker.start()
    _time.sleep(0.3)
    started = _time.monotonic()
    log.delete_records(5)  # closes and deletes segments: must stop the pass, not wait for it
    assert _time.monotonic() - started < 3
    worker.join(10)
    assert isinstance(outcome[0], CleaningAbortedError)
    assert log.log_start_offset == 5
    assert clean(log, checkpoint=0) is not None  # the next pass runs from scratch
