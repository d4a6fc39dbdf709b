"""The Kafka source schema of Spark, and Arrow record batches that match it exactly.

Spark checks a Python source's Arrow batches against the declared schema field by field,
so the Arrow types here are what ``pyspark.sql.pandas.types.to_arrow_schema`` makes of
the DDL (a test keeps the two equal). Values follow Spark's Kafka source: timestamps in
microseconds (UTC), ``timestampType`` as Kafka's id (0 CreateTime, 1 LogAppendTime) and
``headers`` null for a record without headers.

Two builders make the same batches: ``RowBuffer`` from records as Python tuples (what a
consumer through the broker gives), ``ColumnBuffer`` from stored batches, whose records C code
(``shoal.records._columns``) lays out as Arrow buffers without a Python object per record.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from shoal.pipeline.stored_batches import StoredBatch
from shoal.records._columns import RecordColumns

if TYPE_CHECKING:
    from typing_extensions import Buffer  # collections.abc.Buffer from Python 3.12

__all__ = ["BASE_DDL", "HEADERS_DDL", "ColumnBuffer", "RowBuffer", "arrow_schema", "schema_ddl"]

BASE_DDL = (
    "key binary, value binary, topic string, partition int, offset long, "
    "timestamp timestamp, timestampType int"
)
HEADERS_DDL = "headers array<struct<key:string,value:binary>>"

_HEADER_TYPE = pa.list_(
    pa.field("element", pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]))
)
_BASE_FIELDS = [
    pa.field("key", pa.binary()),
    pa.field("value", pa.binary()),
    pa.field("topic", pa.string()),
    pa.field("partition", pa.int32()),
    pa.field("offset", pa.int64()),
    pa.field("timestamp", pa.timestamp("us", tz="UTC")),
    pa.field("timestampType", pa.int32()),
]
_TIMESTAMP_TYPE = pa.timestamp("us", tz="UTC")

#: Rows per Arrow batch handed to Spark: big enough to amortise, small enough to stream.
DEFAULT_BATCH_ROWS = 8192


def schema_ddl(include_headers: bool) -> str:
    """Spark's Kafka source schema; the ``headers`` column only with ``includeHeaders``."""
    return f"{BASE_DDL}, {HEADERS_DDL}" if include_headers else BASE_DDL


def arrow_schema(include_headers: bool) -> pa.Schema:
    fields = list(_BASE_FIELDS)
    if include_headers:
        fields.append(pa.field("headers", _HEADER_TYPE))
    return pa.schema(fields)


Headers = Sequence[tuple[str, bytes | None]]


class RowBuffer:
    """Collects the records of one topic-partition and cuts them into Arrow batches."""

    def __init__(
        self, topic: str, partition: int, include_headers: bool, batch_rows: int = DEFAULT_BATCH_ROWS
    ) -> None:
        self._topic = topic
        self._partition = partition
        self._include_headers = include_headers
        self._schema = arrow_schema(include_headers)
        self._batch_rows = batch_rows
        self._clear()

    def _clear(self) -> None:
        self.keys: list[bytes | None] = []
        self.values: list[bytes | None] = []
        self.offsets: list[int] = []
        self.timestamps: list[int] = []
        self.types: list[int] = []
        self.headers: list[list[dict[str, object]] | None] = []

    def __len__(self) -> int:
        return len(self.offsets)

    def add(
        self,
        offset: int,
        timestamp_ms: int,
        timestamp_type: int,
        key: bytes | None,
        value: bytes | None,
        headers: Headers,
    ) -> None:
        self.keys.append(key)
        self.values.append(value)
        self.offsets.append(offset)
        self.timestamps.append(timestamp_ms)
        self.types.append(timestamp_type)
        if self._include_headers:
            self.headers.append([{"key": k, "value": v} for k, v in headers] if headers else None)

    def full(self) -> bool:
        return len(self.offsets) >= self._batch_rows

    def drain(self) -> Iterator[pa.RecordBatch]:
        """The buffered rows as one batch (nothing when empty); the buffer starts over."""
        n = len(self.offsets)
        if n == 0:
            return
        millis = pa.array(self.timestamps, pa.int64())
        columns = [
            pa.array(self.keys, pa.binary()),
            pa.array(self.values, pa.binary()),
            pa.array([self._topic] * n, pa.string()),
            pa.array([self._partition] * n, pa.int32()),
            pa.array(self.offsets, pa.int64()),
            pc.multiply(millis, 1000).cast(_TIMESTAMP_TYPE),
            pa.array(self.types, pa.int32()),
        ]
        if self._include_headers:
            columns.append(pa.array(self.headers, _HEADER_TYPE))
        self._clear()
        yield pa.RecordBatch.from_arrays(columns, schema=self._schema)


def _binary(kind: pa.DataType, rows: int, parts: tuple[Buffer | None, Buffer, Buffer, int]) -> pa.Array:
    validity, offsets, data, nulls = parts
    return pa.Array.from_buffers(
        kind,
        rows,
        [None if validity is None else pa.py_buffer(validity), pa.py_buffer(offsets), pa.py_buffer(data)],
        null_count=nulls,
    )


class ColumnBuffer:
    """Collects the records of one topic-partition's stored batches and cuts them into Arrow
    batches, the records parsed in C straight into Arrow's buffers."""

    def __init__(
        self, topic: str, partition: int, include_headers: bool, batch_rows: int = DEFAULT_BATCH_ROWS
    ) -> None:
        self._topic = topic
        self._partition = partition
        self._include_headers = include_headers
        self._schema = arrow_schema(include_headers)
        self._batch_rows = batch_rows
        self._columns = RecordColumns(include_headers)

    def __len__(self) -> int:
        return self._columns.rows

    def add(self, batch: StoredBatch) -> None:
        h = batch.header
        self._columns.add(
            batch.records, h.records_count, h.base_offset, h.base_timestamp, h.max_timestamp,
            batch.log_append_time, batch.start, batch.end,
        )

    def full(self) -> bool:
        return self._columns.rows >= self._batch_rows

    def drain(self) -> Iterator[pa.RecordBatch]:
        """The buffered rows as one batch (nothing when empty); the buffer starts over."""
        if self._columns.rows == 0:
            return
        taken = self._columns.take()
        n = taken["rows"]
        columns = [
            _binary(pa.binary(), n, taken["keys"]),
            _binary(pa.binary(), n, taken["values"]),
            pa.repeat(pa.scalar(self._topic, pa.string()), n),
            pa.repeat(pa.scalar(self._partition, pa.int32()), n),
            pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(taken["offsets"])]),
            pa.Array.from_buffers(_TIMESTAMP_TYPE, n, [None, pa.py_buffer(taken["timestamps"])]),
            pa.Array.from_buffers(pa.int32(), n, [None, pa.py_buffer(taken["ts_types"])]),
        ]
        if self._include_headers:
            validity, offsets, nulls, entries, keys, values = taken["headers"]
            header_keys = _binary(pa.string(), entries, keys)
            header_keys.validate(full=True)  # header keys are UTF-8 (checked on produce; cheap to be sure)
            entry = pa.StructArray.from_arrays(
                [header_keys, _binary(pa.binary(), entries, values)], fields=list(_HEADER_TYPE.value_type)
            )
            columns.append(
                pa.Array.from_buffers(
                    _HEADER_TYPE,
                    n,
                    [None if validity is None else pa.py_buffer(validity), pa.py_buffer(offsets)],
                    null_count=nulls,
                    children=[entry],
                )
            )
        yield pa.RecordBatch.from_arrays(columns, schema=self._schema)
