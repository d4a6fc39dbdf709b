"""What one Spark task does for one input range: read it and hand Spark Arrow batches.

Both readers apply the read's ``kafka.isolation.level``: transaction markers never become rows,
and with ``read_committed`` neither do records of aborted transactions.

No pyspark here: the function runs the same inside an executor's Python worker and in a
plain test, and opens everything it needs (coordinator, object storage or a consumer)
itself, because only picklable plain values travel from the driver.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa

from shoal.pipeline.broker_read import BrokerRangeReader
from shoal.pipeline.options import ReadOptions
from shoal.pipeline.planning import ReadRange
from shoal.pipeline.rows import ColumnBuffer, RowBuffer
from shoal.pipeline.storage_read import DisklessRangeReader
from shoal.pipeline.topics import STORAGE

__all__ = ["scan_range"]


def scan_range(opts: ReadOptions, rng: ReadRange) -> Iterator[pa.RecordBatch]:
    """The records of ``rng`` as Arrow batches in Spark's Kafka source schema, in offset order."""
    src = rng.source
    if src.via == STORAGE:
        yield from _scan_storage(opts, rng)
        return
    assert opts.bootstrap_servers
    reader = BrokerRangeReader(opts.bootstrap_servers, opts.kafka_conf, opts.poll_timeout_ms, opts.isolation_level)
    buffer = RowBuffer(src.topic, src.partition, opts.include_headers)
    try:
        for chunk in reader.read(src, rng.start, rng.end, fail_on_data_loss=opts.fail_on_data_loss):
            for offset, ts, ts_type, key, value, headers in chunk:
                buffer.add(offset, ts, ts_type, key, value, headers)
                if buffer.full():
                    yield from buffer.drain()
        yield from buffer.drain()
    finally:
        reader.close()


def _scan_storage(opts: ReadOptions, rng: ReadRange) -> Iterator[pa.RecordBatch]:
    """A diskless range straight from object storage, the records decoded in C into columns."""
    src = rng.source
    assert opts.store is not None and opts.storage_url
    buffer = ColumnBuffer(src.topic, src.partition, opts.include_headers)
    with DisklessRangeReader(opts.store, opts.storage_url, read_committed=opts.read_committed) as reader:
        for batches in reader.read_batches(src, rng.start, rng.end, fail_on_data_loss=opts.fail_on_data_loss):
            for batch in batches:
                buffer.add(batch)
                if buffer.full():
                    yield from buffer.drain()
        yield from buffer.drain()
