"""The C column decoder (``shoal.records._columns`` through ``rows.ColumnBuffer``) gives exactly
the Arrow batches the Python decoder (``records_of`` + ``RowBuffer``) gives, and refuses malformed
records instead of reading past them."""

from __future__ import annotations

import os

import pyarrow as pa
import pytest

from shoal.pipeline.rows import ColumnBuffer, RowBuffer
from shoal.pipeline.stored_batches import StoredBatch, records_of, stored_batch
from shoal.records.codec import NewRecord, build_batch
from shoal.records.compression import GZIP, NONE, ZSTD


def _records(n: int) -> list[NewRecord]:
    return [
        NewRecord(
            key=(b"key-%d" % i) if i % 7 else None,
            value=os.urandom(i % 300) if i % 11 else None,
            headers=[(f"h{i}", b"v"), ("\u00e9", None)] if i % 3 == 0 else (),
            timestamp=1_700_000_000_000 + i,
        )
        for i in range(400)
    ]


def _table(buffer: RowBuffer | ColumnBuffer) -> pa.Table:
    return pa.Table.from_batches(list(buffer.drain()))


@pytest.mark.parametrize("include_headers", [False, True])
@pytest.mark.parametrize("log_append", [False, True])
@pytest.mark.parametrize("compression", [NONE, GZIP, ZSTD])
def test_columns_equal_rows(include_headers: bool, log_append: bool, compression: int) -> None:
    batches = [
        stored_batch(
            build_batch(
                _records(400),
                base_offset=base,
                compression=compression,
                timestamp_type=1 if log_append else 0,
                max_timestamp=1_800_000_000_000 + base if log_append else None,
            ),
            0,
            start,
            end,
        )
        for base, start, end in ((100, 150, 10_000), (500, 0, 10_000), (900, 0, 1_250))
    ]
    rows = RowBuffer("topic", 3, include_headers, batch_rows=1_000_000)
    for record in records_of(batches):
        rows.add(*record)
    columns = ColumnBuffer("topic", 3, include_headers, batch_rows=1_000_000)
    for batch in batches:
        columns.add(batch)
    assert len(columns) == 350 + 400 + 350
    got = _table(columns)
    got.validate(full=True)
    assert got.equals(_table(rows))
    assert len(columns) == 0


def test_columns_cut_into_batches_of_the_row_limit() -> None:
    batch = stored_batch(build_batch(_records(400)), 0, 0, 400)
    columns = ColumnBuffer("t", 0, False, batch_rows=100)
    cut = []
    columns.add(batch)
    while columns.full():
        cut.extend(columns.drain())
    assert [b.num_rows for b in cut] == [400]  # a stored batch is never split
    assert list(columns.drain()) == []


def test_malformed_records_raise() -> None:
    good = stored_batch(build_batch(_records(10)), 0, 0, 10)
    section = bytes(good.records)
    columns = ColumnBuffer("t", 0, True)
    for records in (section[:-1], section + b"\x00", b"\x7f" + section[1:]):
        with pytest.raises(ValueError):
            columns.add(StoredBatch(good.header, records, 0, 10))
    columns.add(good)  # a failed batch leaves nothing half-added
    assert len(columns) == 10
