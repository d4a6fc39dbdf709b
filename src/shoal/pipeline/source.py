"""The ``shoal`` Spark data source: ``spark.read`` / ``readStream`` / ``write`` / ``writeStream``.

A Python Data Source (``pyspark.sql.datasource``) with Spark's Kafka source schema and options.
The driver resolves topics from the metadata log, turns offset options into offsets and cuts
the offset ranges into input partitions (``planning``); each task reads its range
(``scan``) straight from object storage for diskless topics, through the brokers otherwise.
Streaming reads keep their position in Spark's checkpoint: offsets are the JSON dict
``{"topic": {"partition": next offset}}`` Spark's Kafka source uses. Writes are in ``write``.

Register once per session: ``shoal.pipeline.register(spark)`` (or
``spark.dataSource.register(ShoalDataSource)``).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from shoal.memory import tune_allocator
from shoal.pipeline.offsets import OffsetLookup, rate_limit, resolve_offsets
from shoal.pipeline.options import (
    OptionError,
    ReadOptions,
    TopicPartition,
    offsets_from_json,
    parse_read_options,
    parse_write_options,
)
from shoal.pipeline.planning import ReadRange, plan_ranges
from shoal.pipeline.rows import schema_ddl
from shoal.pipeline.scan import scan_range
from shoal.pipeline.storage_read import DataLossError
from shoal.pipeline.topics import PartitionSource, resolve_partitions

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.datasource import DataSourceStreamWriter, DataSourceWriter

__all__ = ["ShoalDataSource", "ShoalBatchReader", "ShoalStreamReader", "spark_schema"]

Offsets = dict[TopicPartition, int]


def _to_spark(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        out.setdefault(topic, {})[str(partition)] = int(offset)
    return out


def _from_spark(offsets: Mapping[str, Mapping[str, int]]) -> Offsets:
    return offsets_from_json(offsets, "streaming offset")


def spark_schema(include_headers: bool) -> StructType:
    """The DDL of ``rows.schema_ddl`` as a StructType, built without a SparkContext (workers have none)."""
    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        header = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
        fields.append(StructField("headers", ArrayType(header)))
    return StructType(fields)


def _check_schema(schema: StructType, include_headers: bool) -> None:
    expected = spark_schema(include_headers)
    if schema != expected:
        raise OptionError(
            f"the shoal source has a fixed schema (Spark's Kafka schema) and cannot be read with {schema.simpleString()}; "
            f"expected {expected.simpleString()}"
        )


def _partitions(ranges: Sequence[ReadRange]) -> list[InputPartition]:
    return [InputPartition(r) for r in ranges]


_worker_settled = False


def _settle_worker() -> bool:
    """Ready this Python worker for reading megabytes, once per worker process (workers are reused
    across tasks); True for the task that does it.

    PySpark's daemon runs a full ``gc.collect()`` in the worker after every task. With pyspark,
    pyarrow and this package imported that walks some 85,000 objects, which took about 40% of the
    worker's CPU in a warm read of 400 MB in six tasks (2-core VM, perf). ``gc.freeze()`` moves
    what is alive now (modules, mostly) to the permanent generation, out of those walks; what tasks
    allocate later is still collected. The first task freezes again when it ends (``_frozen_after``),
    to take in what reading imported and cached on first use. Not at every task: frozen objects that
    later become garbage in a reference cycle are never freed, so a long streaming query would leak
    each task's cyclic leftovers; the first task's are a one-off. glibc gets the broker's thresholds
    (``shoal.memory``) so object chunks and column buffers of megabytes stop being fresh mappings
    page-faulted in for every use."""
    global _worker_settled
    if _worker_settled:
        return False
    _worker_settled = True
    gc.freeze()
    tune_allocator()
    return True


def _frozen_after(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    yield from batches
    gc.freeze()


def _read(opts: ReadOptions, partition: InputPartition) -> Iterator[pa.RecordBatch]:
    first = _settle_worker()
    rng = partition.value
    if rng is None:  # Spark's placeholder partition of an empty read
        return iter(())
    batches = scan_range(opts, rng)
    return _frozen_after(batches) if first else batches


class ShoalDataSource(DataSource):
    """Spark's Kafka connector, for Shoal (see the module docstring and docs/pipeline.md)."""

    @classmethod
    def name(cls) -> str:
        return "shoal"

    def schema(self) -> str:
        raw = str(self.options.get("includeHeaders", "false")).strip().lower()
        return schema_ddl(raw == "true")

    def reader(self, schema: StructType) -> DataSourceReader:
        opts = parse_read_options(dict(self.options), streaming=False)
        _check_schema(schema, opts.include_headers)
        return ShoalBatchReader(opts)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        opts = parse_read_options(dict(self.options), streaming=True)
        _check_schema(schema, opts.include_headers)
        return ShoalStreamReader(opts)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        """Appends (``overwrite`` too, as Spark's Kafka sink does)."""
        from shoal.pipeline.write import ShoalBatchWriter, check_write_schema

        opts = parse_write_options(dict(self.options))
        check_write_schema(schema, opts)
        return ShoalBatchWriter(opts)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from shoal.pipeline.write import ShoalStreamWriter, check_write_schema

        opts = parse_write_options(dict(self.options))
        check_write_schema(schema, opts)
        return ShoalStreamWriter(opts)


class ShoalBatchReader(DataSourceReader):
    """``spark.read``: offsets resolved and ranges planned once, on the driver."""

    def __init__(self, opts: ReadOptions) -> None:
        self._opts = opts

    def partitions(self) -> list[InputPartition]:
        opts = self._opts
        assert opts.ending is not None
        sources = resolve_partitions(opts)
        with OffsetLookup(opts) as lookup:
            bounds = {s.tp: lookup.bounds(s) for s in sources}
            starts = resolve_offsets(opts.starting, sources, lookup, what="startingOffsets", bounds=bounds)
            ends = resolve_offsets(
                opts.ending, sources, lookup, what="endingOffsets", is_end=True, bounds=bounds
            )
        for tp, start in starts.items():
            if start > ends[tp]:
                raise OptionError(
                    f"{tp[0]}-{tp[1]}: the starting offset {start} is after the ending offset {ends[tp]}"
                )
        if opts.read_committed:
            # Given ending offsets too stop at the last stable offset: past it lie transactions
            # still open, which a READ_COMMITTED consumer cannot read either.
            ends = {tp: max(starts[tp], min(end, bounds[tp][1])) for tp, end in ends.items()}
        ranges = plan_ranges(
            sources,
            starts,
            ends,
            store=opts.store,
            max_partition_bytes=opts.max_partition_bytes,
            min_partitions=opts.min_partitions,
        )
        return _partitions(ranges)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(self._opts, partition)


class ShoalStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream``: Spark checkpoints the offsets this reader hands out; nothing is kept here.

    Partitions that appear while the query runs are read from their earliest offset, like
    Spark's Kafka source. ``Trigger.AvailableNow`` fixes the end at the offsets of the moment
    the query starts (``prepareForTriggerAvailableNow``). With ``kafka.isolation.level=read_committed``
    every end is at most the partition's last stable offset (``OffsetLookup.bounds``), so a
    micro-batch never plans offsets of a transaction still open.
    """

    def __init__(self, opts: ReadOptions) -> None:
        self._opts = opts
        self._initial: dict[str, dict[str, int]] | None = None
        self._target: Offsets | None = None

    # -- offsets -------------------------------------------------------------------------------

    def _sources(self) -> dict[TopicPartition, PartitionSource]:
        return {s.tp: s for s in resolve_partitions(self._opts, allow_missing=True)}

    def initialOffset(self) -> dict:
        if self._initial is None:
            sources = list(self._sources().values())
            with OffsetLookup(self._opts) as lookup:
                starts = resolve_offsets(self._opts.starting, sources, lookup, what="startingOffsets")
            self._initial = _to_spark(starts)
        return self._initial

    def getDefaultReadLimit(self) -> ReadLimit:
        if self._opts.max_offsets_per_trigger:
            return ReadMaxRows(self._opts.max_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        sources = list(self._sources().values())
        with OffsetLookup(self._opts) as lookup:
            self._target = {s.tp: lookup.bounds(s)[1] for s in sources}

    def _available(self, start: Offsets) -> tuple[Offsets, Offsets]:
        """(begin, end) per partition now: begin is ``start`` or, for a new partition, its earliest."""
        sources = self._sources()
        begin: Offsets = {}
        end: Offsets = {}
        with OffsetLookup(self._opts) as lookup:
            for tp, src in sources.items():
                log_start, high_watermark = lookup.bounds(src)
                first = start.get(tp, log_start)
                last = high_watermark
                if self._target is not None:
                    last = min(last, self._target.get(tp, first))
                if last < first:
                    if high_watermark < first and self._opts.fail_on_data_loss:
                        raise DataLossError(
                            f"{tp[0]}-{tp[1]}: the high watermark {high_watermark} went back below the offset {first} "
                            "already read (was the topic recreated?); set failOnDataLoss=false to go on"
                        )
                    last = first
                begin[tp] = first
                end[tp] = last
        for tp, offset in start.items():
            if tp not in end:  # topic deleted: keep the position, partitions() applies failOnDataLoss
                begin[tp] = end[tp] = offset
        return begin, end

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        begin, end = self._available(_from_spark(start))
        if isinstance(limit, ReadMaxRows):
            end = rate_limit(limit.max_rows, begin, end)
        return _to_spark(end)

    def reportLatestOffset(self) -> dict | None:
        sources = list(self._sources().values())
        with OffsetLookup(self._opts) as lookup:
            return _to_spark({s.tp: lookup.bounds(s)[1] for s in sources})

    # -- reading -------------------------------------------------------------------------------

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        begin = _from_spark(start)
        stop = _from_spark(end)
        sources = self._sources()
        chosen: list[PartitionSource] = []
        starts: Offsets = {}
        with OffsetLookup(self._opts) as lookup:
            for tp, last in stop.items():
                src = sources.get(tp)
                if src is None:
                    if self._opts.fail_on_data_loss and begin.get(tp, last) < last:
                        raise DataLossError(
                            f"{tp[0]}-{tp[1]} does not exist any more; set failOnDataLoss=false to go on"
                        )
                    continue
                first = begin[tp] if tp in begin else lookup.bounds(src)[0]
                if first >= last:
                    continue
                chosen.append(src)
                starts[tp] = first
        ranges = plan_ranges(
            chosen,
            starts,
            stop,
            store=self._opts.store,
            max_partition_bytes=self._opts.max_partition_bytes,
            min_partitions=self._opts.min_partitions,
        )
        return _partitions(ranges)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(self._opts, partition)

    def commit(self, end: dict) -> None:
        """Nothing to do: the position lives in Spark's checkpoint, not in Shoal."""
