"""A Delta table exported from topics, written with delta-rs (``deltalake``), offsets in its log.

Spark writes a run's Parquet files into a fresh folder inside the table (``shoal-export-<id>/``);
the driver then commits them with one Delta transaction that also sets, per topic-partition,
the app transaction (``txn`` action) ``shoal-export/<topic>/<partition>`` to the next offset
to export. Data and offsets land in the same atomic commit, and ``txn`` versions survive log
checkpoints, so a rerun reads exactly where the last commit ended. Files of a run that
crashed before its commit are in no Delta version: readers never see them, and ``VACUUM``
removes them. The commit's ``commitInfo`` also carries the run's ranges (``shoal.export``).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
from deltalake import CommitProperties, DeltaTable, Transaction
from deltalake.exceptions import TableNotFoundError
from deltalake.transaction import AddAction, create_table_with_add_actions

from shoal.pipeline.rows import arrow_schema

__all__ = ["DeltaExportTable", "app_id"]

_STATS_COLUMNS = ("partition", "offset")


def app_id(topic: str, partition: int) -> str:
    return f"shoal-export/{topic}/{partition}"


def _local(path: str) -> Path:
    if path.startswith("file://"):
        path = path[len("file://") :]
    if "://" in path:
        raise ValueError(f"Delta exports go to a local or mounted directory for now, got {path!r}")
    return Path(path).resolve()


def _stats(path: Path) -> tuple[int, str]:
    """numRecords and min/max/nullCount of partition and offset, from the Parquet footer."""
    meta = pq.read_metadata(path)
    names = [meta.schema.column(i).name for i in range(meta.num_columns)]
    mins: dict[str, int] = {}
    maxs: dict[str, int] = {}
    nulls: dict[str, int] = {}
    for column in _STATS_COLUMNS:
        if column not in names:
            continue
        index = names.index(column)
        for rg in range(meta.num_row_groups):
            st = meta.row_group(rg).column(index).statistics
            if st is None or not st.has_min_max:
                mins.pop(column, None)
                maxs.pop(column, None)
                break
            mins[column] = min(mins.get(column, st.min), st.min)
            maxs[column] = max(maxs.get(column, st.max), st.max)
            nulls[column] = nulls.get(column, 0) + (st.null_count or 0)
    stats = {"numRecords": meta.num_rows, "minValues": mins, "maxValues": maxs, "nullCount": nulls}
    return meta.num_rows, json.dumps(stats)


class DeltaExportTable:
    """Exported offsets and data files of topics in a Delta table."""

    format = "delta"

    def __init__(self, path: str) -> None:
        self.root = _local(path)
        self._run_dir: str | None = None

    def _table(self) -> DeltaTable | None:
        try:
            return DeltaTable(str(self.root))
        except TableNotFoundError:
            return None

    def committed_offsets(self, topic: str, partitions: list[int]) -> dict[int, int]:
        table = self._table()
        if table is None:
            return {}
        out: dict[int, int] = {}
        for p in partitions:
            version = table.transaction_version(app_id(topic, p))
            if version is not None:
                out[p] = int(version)
        return out

    def recover(self) -> list[str]:
        """Nothing to undo: a crashed run's files are in no Delta version (VACUUM deletes them)."""
        return []

    def new_run(self) -> int:
        table = self._table()
        return 0 if table is None else table.version() + 1

    def staging_uri(self, run: int) -> str:
        self._run_dir = f"shoal-export-{run:010d}-{uuid.uuid4().hex[:12]}"
        return (self.root / self._run_dir).as_uri()

    def commit(
        self,
        run: int,
        topic: str,
        ranges: Mapping[int, tuple[int, int]],
        next_offsets: Mapping[int, int],
    ) -> dict[str, Any]:
        """One Delta commit: the run's files plus the per-partition offset transactions."""
        assert self._run_dir is not None, "staging_uri first"
        folder = self.root / self._run_dir
        actions: list[AddAction] = []
        records = 0
        for path in sorted(folder.glob("part-*.parquet")) if folder.is_dir() else []:
            rows, stats = _stats(path)
            records += rows
            actions.append(
                AddAction(
                    path=f"{self._run_dir}/{path.name}",
                    size=path.stat().st_size,
                    partition_values={},
                    modification_time=path.stat().st_mtime_ns // 1_000_000,
                    data_change=True,
                    stats=stats,
                )
            )
        now = time.time_ns() // 1_000_000
        summary = {
            "run": run,
            "topic": topic,
            "ranges": {str(p): [s, e] for p, (s, e) in sorted(ranges.items())},
            "offsets": {str(p): o for p, o in sorted(next_offsets.items())},
            "records": records,
            "files": [a.path for a in actions],
        }
        props = CommitProperties(
            custom_metadata={"shoal.export": json.dumps(summary)},
            app_transactions=[
                Transaction(app_id(topic, p), int(o), now) for p, o in sorted(next_offsets.items())
            ],
        )
        schema = arrow_schema(include_headers=True)
        table = self._table()
        if table is None:
            create_table_with_add_actions(
                str(self.root), _delta_schema(schema), actions, mode="error", commit_properties=props
            )
        else:
            table.create_write_transaction(actions, "append", schema, commit_properties=props)
        return summary

    def files(self) -> list[str]:
        """Data files of the current version, relative to the table root."""
        table = self._table()
        if table is None:
            return []
        return sorted(str(p) for p in table.get_add_actions(flatten=True).column("path").to_pylist())


def _delta_schema(schema: Any) -> Any:
    from deltalake import Schema

    return Schema.from_arrow(schema)
