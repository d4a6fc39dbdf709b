"""A directory of Parquet files exported from a topic, with its offsets in ``_shoal_offsets``.

Layout of ``<path>``: data files ``part-<run>-<n>.parquet``; one manifest per committed run,
``_shoal_offsets/<run>.json``, listing that run's files, the offset range it exported per
partition and the next offset of every partition; Spark's in-progress output under
``_shoal_staging/`` (names starting with ``_`` are hidden from Spark and pyarrow readers).

A run commits by moving its staged files into place and then creating its manifest
atomically (written aside, fsynced, hard-linked to its final name, which fails if another
exporter got there first). The manifest is the commit point: a run that crashed before it
left files whose run number is above the last manifest's, and the next run deletes them (and
the staging area) before it starts, so the directory never keeps records twice.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

__all__ = ["ParquetExportTable"]

MANIFEST_DIR = "_shoal_offsets"
STAGING_DIR = "_shoal_staging"
_MANIFEST = re.compile(r"^(\d{10})\.json$")
_DATA = re.compile(r"^part-(\d{10})-\d{5}\.parquet$")


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _local(path: str) -> Path:
    if path.startswith("file://"):
        path = path[len("file://") :]
    if "://" in path:
        raise ValueError(f"Parquet exports go to a local or mounted directory, got {path!r}")
    return Path(path).resolve()


class ParquetExportTable:
    """Exported offsets and data files of one topic in a Parquet directory."""

    format = "parquet"

    def __init__(self, path: str) -> None:
        self.root = _local(path)
        self._manifests = self.root / MANIFEST_DIR

    def _manifest_runs(self) -> list[int]:
        if not self._manifests.is_dir():
            return []
        return sorted(int(m.group(1)) for p in self._manifests.iterdir() if (m := _MANIFEST.match(p.name)))

    def _manifest(self, run: int) -> dict[str, Any]:
        return json.loads((self._manifests / f"{run:010d}.json").read_text())

    def last_run(self) -> int:
        runs = self._manifest_runs()
        return runs[-1] if runs else 0

    def committed_offsets(self, topic: str, partitions: list[int]) -> dict[int, int]:
        """Next offset to export per partition, from the last manifest (empty before the first run)."""
        last = self.last_run()
        if not last:
            return {}
        manifest = self._manifest(last)
        if manifest["topic"] != topic:
            raise ValueError(f"{self.root} holds an export of topic {manifest['topic']!r}, not {topic!r}")
        return {int(p): int(o) for p, o in manifest["offsets"].items()}

    def recover(self) -> list[str]:
        """Delete what crashed runs left (staging, files above the last manifest); returns the names."""
        removed: list[str] = []
        staging = self.root / STAGING_DIR
        if staging.exists():
            shutil.rmtree(staging)
            removed.append(STAGING_DIR)
        last = self.last_run()
        if self.root.is_dir():
            for p in sorted(self.root.iterdir()):
                m = _DATA.match(p.name)
                if m and int(m.group(1)) > last:
                    p.unlink()
                    removed.append(p.name)
            if removed:
                _fsync_dir(self.root)
        for p in self._manifests.glob("*.tmp") if self._manifests.is_dir() else ():
            p.unlink()
        return removed

    def new_run(self) -> int:
        return self.last_run() + 1

    def staging_uri(self, run: int) -> str:
        return (self.root / STAGING_DIR / f"run-{run:010d}").as_uri()

    def commit(
        self,
        run: int,
        topic: str,
        ranges: Mapping[int, tuple[int, int]],
        next_offsets: Mapping[int, int],
    ) -> dict[str, Any]:
        """Move the run's staged files into place, then write its manifest (the commit point)."""
        staged = self.root / STAGING_DIR / f"run-{run:010d}"
        sources = sorted(staged.glob("part-*.parquet")) if staged.is_dir() else []
        files: list[str] = []
        records = 0
        for n, src in enumerate(sources):
            records += pq.read_metadata(src).num_rows
            name = f"part-{run:010d}-{n:05d}.parquet"
            os.replace(src, self.root / name)
            files.append(name)
        self.root.mkdir(parents=True, exist_ok=True)
        _fsync_dir(self.root)
        manifest = {
            "version": 1,
            "run": run,
            "topic": topic,
            "committed_at_ms": time.time_ns() // 1_000_000,
            "ranges": {str(p): [s, e] for p, (s, e) in sorted(ranges.items())},
            "offsets": {str(p): o for p, o in sorted(next_offsets.items())},
            "records": records,
            "files": files,
        }
        self._manifests.mkdir(parents=True, exist_ok=True)
        final = self._manifests / f"{run:010d}.json"
        tmp = self._manifests / f"{run:010d}.json.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            json.dump(manifest, f, indent=1)
            f.flush()
            os.fsync(f.fileno())
        try:
            os.link(tmp, final)  # fails if the name exists: two exporters raced for this run
        except FileExistsError:
            raise RuntimeError(f"another export committed run {run} of {self.root} meanwhile") from None
        finally:
            tmp.unlink()
        _fsync_dir(self._manifests)
        shutil.rmtree(self.root / STAGING_DIR, ignore_errors=True)
        return manifest

    def files(self) -> list[str]:
        """Every committed data file, oldest run first."""
        return [name for run in self._manifest_runs() for name in self._manifest(run)["files"]]
