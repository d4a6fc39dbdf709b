"""Classic segments and their indexes: Kafka's file formats, lookups, truncation and recovery."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from shoal.classic.index import CorruptIndexError, OffsetIndex, TimeIndex
from shoal.classic.segment import AppendedBatch, LogSegment, file_name
from shoal.records.batch import read_header, stamp_batch, validate_records
from shoal.records.codec import build_batch, decode_batch, iter_batches

TS = 1_700_000_000_000


def new_segment(
    directory: Path, base: int = 0, interval: int = 100, index_bytes: int = 1 << 20
) -> LogSegment:
    return LogSegment(
        directory, base, index_interval_bytes=interval, max_index_size=index_bytes, now_ms=TS, create=True
    )


def open_segment(directory: Path, base: int = 0, interval: int = 100) -> LogSegment:
    return LogSegment(
        directory, base, index_interval_bytes=interval, max_index_size=1 << 20, now_ms=TS, create=False
    )


def write_batches(seg: LogSegment, count: int, *, per_batch: int = 3, ts_step: int = 10) -> list[int]:
    """Append ``count`` batches at the segment's end; return their base offsets."""
    bases = []
    for _ in range(count):
        base = seg.next_offset
        ts = TS + base * ts_step
        buf = bytearray(build_batch([(None, b"x" * 40, (), ts + i) for i in range(per_batch)]))
        ((pos, h),) = validate_records(buf, 1 << 20)
        stamp_batch(buf, 0, base, 0)
        seg.append(memoryview(buf), [AppendedBatch(0, h.size, base + h.last_offset_delta, h.max_timestamp)])
        bases.append(base)
    return bases


def test_offset_index_format_lookup_truncate(tmp_path: Path) -> None:
    idx = OffsetIndex(tmp_path / "x.index", 100, 64)
    assert idx.max_entries == 8 and idx.lookup(150) == (100, 0)
    idx.append(105, 0)
    idx.append(110, 4200)
    idx.append(130, 9000)
    assert (tmp_path / "x.index").read_bytes() == struct.pack(">iiiiii", 5, 0, 10, 4200, 30, 9000)
    assert idx.lookup(104) == (100, 0)
    assert (
        idx.lookup(110) == (110, 4200) and idx.lookup(129) == (110, 4200) and idx.lookup(10**9) == (130, 9000)
    )
    with pytest.raises(ValueError):
        idx.append(130, 9500)
    idx.truncate_to(110)
    assert idx.entries == 1 and (tmp_path / "x.index").stat().st_size == 8
    idx.close()
    again = OffsetIndex(tmp_path / "x.index", 100, 64)
    assert again.lookup(200) == (105, 0)
    again.sanity_check(log_size=10)
    with pytest.raises(CorruptIndexError):
        again.sanity_check(log_size=0)
    again.close()
    (tmp_path / "x.index").write_bytes(b"\0" * 12)
    with pytest.raises(CorruptIndexError):
        OffsetIndex(tmp_path / "x.index", 100, 64).sanity_check(100)


def test_time_index_format_and_lookup(tmp_path: Path) -> None:
    idx = TimeIndex(tmp_path / "x.timeindex", 50, 12 * 4)
    idx.maybe_append(1000, 52)
    idx.maybe_append(1000, 55)  # not larger: no entry
    idx.maybe_append(2000, 60)
    assert (tmp_path / "x.timeindex").read_bytes() == struct.pack(">qiqi", 1000, 2, 2000, 10)
    assert idx.lookup(999) == (-1, 50) and idx.lookup(1500) == (1000, 52) and idx.lookup(5000) == (2000, 60)
    idx.maybe_append(3000, 61)
    assert idx.is_full  # one slot is kept for the final entry
    idx.maybe_append(4000, 62, skip_full_check=True)
    assert idx.entries == 4 and idx.last_entry() == (4000, 62)
    idx.truncate_to(60)
    assert idx.last_entry() == (1000, 52)


def test_segment_append_read_translate(tmp_path: Path) -> None:
    seg = new_segment(tmp_path, base=1000)
    bases = write_batches(seg, 40)
    assert (tmp_path / (file_name(1000) + ".log")).exists()
    assert seg.next_offset == 1120
    # Sparse index, Kafka's rule: an entry once more than 100 bytes were written since the last one.
    assert 0 < seg.offset_index.entries < 40
    for base in (1000, 1001, 1059, 1119):
        pos, h = seg.translate_offset(base)
        assert h.base_offset <= base <= h.last_offset
        assert seg.read_batch(pos, h.size)
    assert seg.translate_offset(1120) is None
    pos, _ = seg.translate_offset(1030)
    data = seg.read(pos, 10_000, max_offset=1060, min_one=False)
    assert [h.base_offset for _, h in iter_batches(data)] == [b for b in bases if 1030 <= b < 1060]
    assert seg.read(pos, 10, max_offset=10**9, min_one=False) == b""
    one = seg.read(pos, 10, max_offset=10**9, min_one=True)
    assert read_header(one).base_offset == 1030 and len(one) == read_header(one).size
    # Batch 1030 holds records at TS+10300..10302 (offsets 1030..1032), the next batch starts at TS+10330.
    assert seg.find_offset_by_timestamp(TS + 10301, 0) == (TS + 10301, 1031)
    assert seg.find_offset_by_timestamp(TS + 10301, 1032) == (TS + 10302, 1032)
    assert seg.find_offset_by_timestamp(TS + 10303, 0) == (TS + 10330, 1033)
    assert seg.find_offset_by_timestamp(TS * 2, 0) is None
    seg.close()


def test_segment_reopen_and_rebuilt_indexes_match(tmp_path: Path) -> None:
    seg = new_segment(tmp_path)
    write_batches(seg, 60)
    seg.close()
    index_bytes = (tmp_path / (file_name(0) + ".index")).read_bytes()
    again = open_segment(tmp_path)
    assert again.next_offset == 180 and not again.indexes_missing
    assert again.max_timestamp_so_far == TS + 177 * 10 + 2
    again.sanity_check()
    again.close_handles()
    (tmp_path / (file_name(0) + ".index")).unlink()
    (tmp_path / (file_name(0) + ".timeindex")).unlink()
    rebuilt = open_segment(tmp_path)
    assert rebuilt.indexes_missing
    result = rebuilt.recover()
    assert result.truncated_bytes == 0 and result.valid_bytes == rebuilt.size
    assert (tmp_path / (file_name(0) + ".index")).read_bytes() == index_bytes
    assert rebuilt.next_offset == 180
    rebuilt.close_handles()


def test_segment_recover_truncates_at_corruption(tmp_path: Path) -> None:
    seg = new_segment(tmp_path)
    write_batches(seg, 20)
    pos, h = seg.translate_offset(30)
    seg.close_handles()
    log_path = tmp_path / (file_name(0) + ".log")
    raw = bytearray(log_path.read_bytes())
    raw[pos + h.size - 3] ^= 0xFF  # a payload byte of the batch holding offsets 30..32
    log_path.write_bytes(bytes(raw))
    again = open_segment(tmp_path)
    result = again.recover()
    assert result.valid_bytes == pos and result.truncated_bytes == len(raw) - pos
    assert again.next_offset == 30 and log_path.stat().st_size == pos
    for _, hh in again.batches():
        decode_batch(again.read_batch(_, hh.size))
    again.close_handles()


def test_segment_truncate_to_and_delete(tmp_path: Path) -> None:
    seg = new_segment(tmp_path)
    write_batches(seg, 30)
    removed = seg.truncate_to(31)  # mid-batch: the batch holding 31 (30..32) goes too
    assert removed > 0 and seg.next_offset == 30
    assert seg.offset_index.last_offset < 30
    assert seg.max_timestamp_so_far == TS + 27 * 10 + 2
    write_batches(seg, 1)
    assert seg.next_offset == 33
    seg.delete()
    assert list(tmp_path.iterdir()) == []
