"""The WAL segment object format: layout by partition, placements, parsing and format errors."""

from __future__ import annotations

import struct
from itertools import islice

import pytest

from shoal.records.batch import BATCH_LENGTH_OFFSET, HEADER_SIZE
from shoal.records.codec import build_batch, decode_batch
from shoal.records.wal import WAL_VERSION, PlacedBatch, WalFormatError, build_segment, iter_segment


def batch(tag: str, records: int = 1) -> bytes:
    return build_batch([(tag.encode(), f"{tag}-{i}".encode(), (), 1_000 + i) for i in range(records)])


def test_segment_groups_by_partition_and_keeps_each_partitions_order() -> None:
    inputs = [("p0", batch("a")), ("p1", batch("b", 2)), ("p0", batch("c", 3)), ("p2", batch("d")), ("p1", batch("e"))]
    data, placed = build_segment(inputs)

    assert data[0] == WAL_VERSION == 0
    # Partitions in order of first appearance, each one's batches contiguous and in input order.
    assert [(p.key, p.index) for p in placed] == [("p0", 0), ("p0", 2), ("p1", 1), ("p1", 4), ("p2", 3)]
    assert len(data) == 1 + sum(len(b) for _, b in inputs)
    position = 1
    for p in placed:
        assert p.byte_offset == position
        assert p.size == len(inputs[p.index][1])
        assert data[p.byte_offset : p.byte_offset + p.size] == inputs[p.index][1]
        position += p.size


def test_iter_segment_finds_every_batch() -> None:
    inputs = [(1, batch("x", 2)), (2, batch("y")), (1, batch("z", 5))]
    data, placed = build_segment(inputs)
    found = list(iter_segment(data))
    assert [offset for offset, _ in found] == [p.byte_offset for p in placed]
    assert [h.records_count for _, h in found] == [2, 5, 1]
    assert [h.size for _, h in found] == [p.size for p in placed]
    # The batches are intact: they decode (CRC checked) straight out of the object.
    _, records = decode_batch(data, found[1][0])
    assert [r.value for r in records] == [f"z-{i}".encode() for i in range(5)]
    # A memoryview works as well as bytes.
    assert [o for o, _ in iter_segment(memoryview(data))] == [o for o, _ in found]


def test_single_batch_and_memoryview_input() -> None:
    b = batch("only")
    data, placed = build_segment([("k", memoryview(b))])
    assert data == b"\x00" + b
    assert placed == [PlacedBatch("k", 0, 1, len(b))]


def test_empty_segment() -> None:
    data, placed = build_segment([])
    assert data == b"\x00" and placed == []
    assert list(iter_segment(data)) == []


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "empty object"),
        (b"\x01" + batch("a"), "unknown WAL segment version 1"),
        (b"\x00" + batch("a")[: HEADER_SIZE - 1], "truncated batch header at byte 1"),
        (b"\x00" + batch("a")[:-1], "truncated batch at byte 1"),
    ],
    ids=["empty", "version", "short-header", "short-batch"],
)
def test_format_errors(data: bytes, message: str) -> None:
    with pytest.raises(WalFormatError, match=message):
        list(iter_segment(data))


def test_truncation_after_a_good_batch_reports_its_position() -> None:
    first = batch("a")
    data, _ = build_segment([(0, first), (0, batch("b"))])
    it = iter_segment(data[:-3])
    assert next(it)[0] == 1
    with pytest.raises(WalFormatError, match=f"truncated batch at byte {1 + len(first)}"):
        next(it)


def _with_batch_length(length: int) -> bytes:
    b = bytearray(batch("a"))
    struct.pack_into(">i", b, BATCH_LENGTH_OFFSET, length)
    return b"\x00" + bytes(b)


def test_negative_batch_length_is_a_format_error() -> None:
    with pytest.raises(WalFormatError):
        list(islice(iter_segment(_with_batch_length(-12)), 5))


def test_batch_length_shorter_than_a_header_is_a_format_error() -> None:
    with pytest.raises(WalFormatError):
        next(iter_segment(_with_batch_length(0)))
