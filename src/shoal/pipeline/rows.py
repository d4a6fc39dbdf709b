"""The Kafka source schema of Spark, and Arrow record batches that match it exactly.

Spark checks a Python source's Arrow batches against the declared schema field by field,
so the Arrow types here are what ``pyspark.sql.pandas.types.to_arrow_schema`` makes of
the DDL (a test keeps the two equal). Values follow Spark's Kafka source: timestamps in
microseconds (UTC), ``timestampType`` as Kafka's id (0 CreateTime, 1 LogAppendTime) and
``headers`` null for a record without headers.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["BASE_DDL", "HEADERS_DDL", "RowBuffer", "arrow_schema", "schema_ddl"]

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
