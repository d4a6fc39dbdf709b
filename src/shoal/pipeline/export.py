"""The export job: copy a topic, incrementally, into a Parquet directory or a Delta table.

Each run reads, with the ``shoal`` source, every partition from the offset the table says was
exported last (the log start for a partition never exported) up to the high watermark taken
when the run starts, has Spark write those records as Parquet files into a staging place, and
commits the files together with the new offsets (``parquet_table`` / ``delta_table`` say how
each format makes that atomic). A run that crashes at any point leaves the table as it was
after the last commit, so the next run neither skips nor repeats a record.

Columns: Spark's Kafka source schema with headers (key, value, topic, partition, offset,
timestamp, timestampType, headers).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from shoal.pipeline.offsets import OffsetLookup
from shoal.pipeline.options import OptionError, offsets_to_json, parse_read_options
from shoal.pipeline.storage_read import DataLossError
from shoal.pipeline.topics import resolve_partitions

__all__ = ["ExportResult", "export_topic", "open_table"]

FORMATS = ("parquet", "delta")


@dataclass
class ExportResult:
    topic: str
    format: str
    path: str
    run: int
    records: int
    ranges: dict[str, list[int]] = field(default_factory=dict)
    offsets: dict[str, int] = field(default_factory=dict)
    files: list[str] = field(default_factory=list)
    recovered: list[str] = field(default_factory=list)
    committed: bool = False
    elapsed_s: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def open_table(fmt: str, path: str) -> Any:
    """The table adapter for ``fmt`` (``parquet`` or ``delta``)."""
    if fmt == "parquet":
        from shoal.pipeline.parquet_table import ParquetExportTable

        return ParquetExportTable(path)
    if fmt == "delta":
        from shoal.pipeline.delta_table import DeltaExportTable

        return DeltaExportTable(path)
    raise OptionError(f"unknown export format {fmt!r}; use one of {', '.join(FORMATS)}")


def export_topic(
    spark: Any, topic: str, fmt: str, path: str, source_options: Mapping[str, str]
) -> ExportResult:
    """Run one incremental export of ``topic`` (see the module docstring)."""
    from shoal.pipeline import register

    started = time.monotonic()
    register(spark)
    options = {k: str(v) for k, v in source_options.items()}
    options.update({"subscribe": topic, "includeHeaders": "true"})
    fixed = [k for k in source_options if k.lower().startswith(("starting", "ending"))]
    if fixed:
        raise OptionError(f"the export job sets offsets itself; remove the option(s) {', '.join(fixed)}")
    opts = parse_read_options(options, streaming=False)
    table = open_table(fmt, path)
    recovered = table.recover()
    sources = resolve_partitions(opts)
    partitions = [s.partition for s in sources]
    done = table.committed_offsets(topic, partitions)
    starts: dict[int, int] = {}
    ends: dict[int, int] = {}
    with OffsetLookup(opts) as lookup:
        for src in sources:
            log_start, high_watermark = lookup.bounds(src)
            start = done.get(src.partition, log_start)
            if start < log_start:
                if opts.fail_on_data_loss:
                    raise DataLossError(
                        f"{topic}-{src.partition}: offsets {start}..{log_start - 1} were deleted before they were "
                        "exported; pass failOnDataLoss=false to export from the log start"
                    )
                start = log_start
            starts[src.partition] = start
            ends[src.partition] = max(start, high_watermark)
    run = table.new_run()
    ranges = {p: (starts[p], ends[p]) for p in partitions if ends[p] > starts[p]}
    result = ExportResult(topic, fmt, str(table.root), run, 0, recovered=recovered)
    if not ranges:
        result.offsets = {str(p): done.get(p, starts[p]) for p in partitions}
        result.elapsed_s = round(time.monotonic() - started, 3)
        return result
    options["startingOffsets"] = offsets_to_json({(topic, p): o for p, o in starts.items()})
    options["endingOffsets"] = offsets_to_json({(topic, p): o for p, o in ends.items()})
    df = spark.read.format("shoal").options(**options).load()
    staging = table.staging_uri(run)
    conf = spark.conf
    previous = conf.get("spark.sql.parquet.outputTimestampType", None)
    # Spark's default, INT96, is deprecated in Parquet and unknown to Delta: write microseconds.
    conf.set("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")
    try:
        df.write.mode("errorifexists").parquet(staging)
    finally:
        if previous is None:
            conf.unset("spark.sql.parquet.outputTimestampType")
        else:
            conf.set("spark.sql.parquet.outputTimestampType", previous)
    next_offsets = {**done, **ends}
    summary = table.commit(run, topic, ranges, next_offsets)
    result.records = int(summary["records"])
    result.files = list(summary["files"])
    result.ranges = {str(p): [s, e] for p, (s, e) in sorted(ranges.items())}
    result.offsets = {str(p): o for p, o in sorted(next_offsets.items())}
    result.committed = True
    result.elapsed_s = round(time.monotonic() - started, 3)
    return result
