"""Object compaction: merge many small WAL objects into fewer, larger ones laid out per partition.

Diskless produce writes one object per commit interval per broker, shared by every
partition produced to meanwhile: many small objects, each partition's data spread over
all of them. This job rewrites them while producers, consumers and retention keep running:

1. The driver asks the Batch Coordinator for candidates (``list_compaction_candidates``:
   committed at least ``min_age_ms`` ago, small or sparse) and their live batches
   (``list_object_batches``), and plans outputs of about ``target_bytes``
   (``compaction_plan``).
2. One Spark task per output reads the batches, checks them, uploads the new object and
   swaps the coordinates with ``replace_batches`` (``compaction_task``), one coordinator
   transaction per output.
3. Old objects left without a live batch are marked for deletion by that transaction; the
   brokers' object cleaner deletes them after ``diskless.object.delete.grace.ms``, so
   fetches that looked up the old coordinates just before the swap still find them.

Batches deleted (retention, DeleteRecords, DeleteTopics) while the job runs are skipped by
the replace, never brought back; their bytes in the new object are dead space that a later
run reclaims (the object is then sparse). Running two jobs at once is safe (the second's
moves are skipped and its objects marked for deletion at once) but wasteful.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any

from shoal.config import Config
from shoal.pipeline.compaction_plan import CompactionPlan, plan_outputs
from shoal.pipeline.compaction_task import OutputResult, TaskSettings, compact_output
from shoal.pipeline.stores import open_coordinator

__all__ = ["CompactionOptions", "CompactionResult", "compact", "plan_compaction"]

MiB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class CompactionOptions:
    """Knobs of one run (the CLI's flags)."""

    target_bytes: int = 64 * MiB
    #: Objects younger than this are left alone: tailing consumers read them from the
    #: brokers' cache, and rewriting what retention is about to delete is wasted work.
    min_age_ms: int = 5 * 60 * 1000
    #: Objects up to this size are candidates (default: half the target); larger ones only when sparse.
    max_object_bytes: int | None = None
    #: At most this many candidate objects per run (the oldest).
    max_objects: int = 10_000
    #: A task deletes its upload instead of registering it when the replace would start later
    #: than this after the upload began; keep it well below diskless.object.orphan.min.age.ms.
    max_replace_delay_ms: int = 20_000

    def small_bytes(self) -> int:
        return self.max_object_bytes if self.max_object_bytes is not None else self.target_bytes // 2


@dataclass
class CompactionResult:
    """The run's summary (the CLI prints it as JSON)."""

    dry_run: bool
    plan: dict[str, Any]
    outputs_written: int = 0
    batches_moved: int = 0
    batches_skipped: int = 0
    bytes_moved: int = 0
    bytes_written: int = 0
    bytes_read: int = 0
    objects_emptied: int = 0
    abandoned_uploads: int = 0
    missing_objects: list[str] = field(default_factory=list)
    corrupt_batches: list[str] = field(default_factory=list)
    plan_s: float = 0.0
    elapsed_s: float = 0.0
    mb_per_s: float = 0.0  # 10^6 bytes moved (rewritten) per second of the whole run
    outputs: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def plan_compaction(store: Config, options: CompactionOptions) -> CompactionPlan:
    """Candidates and their live batches from the coordinator, laid out into outputs."""
    coordinator = open_coordinator(store)
    try:
        candidates = coordinator.list_compaction_candidates(
            options.min_age_ms, options.small_bytes(), options.max_objects
        )
        batches = coordinator.list_object_batches([c.object_key for c in candidates]) if candidates else {}
    finally:
        coordinator.close()
    return plan_outputs(candidates, batches, options.target_bytes)


def compact(
    spark: Any | None,
    store: Config,
    storage_url: str,
    options: CompactionOptions,
    *,
    dry_run: bool = False,
    plan: CompactionPlan | None = None,
) -> CompactionResult:
    """Plan (unless ``plan`` is given) and, unless ``dry_run`` or nothing is worth doing, run one compaction.

    ``spark`` may be None for a dry run. One task per output object; the results come back
    to the driver only for the summary (each task has already swapped its coordinates).
    """
    started = time.monotonic()
    if plan is None:
        plan = plan_compaction(store, options)
    result = CompactionResult(dry_run, plan.summary(), plan_s=round(time.monotonic() - started, 3))
    if dry_run or not plan.outputs:
        result.elapsed_s = result.plan_s
        return result
    if spark is None:
        raise ValueError("a compaction run needs a SparkSession")
    settings = TaskSettings(store, storage_url, options.max_replace_delay_ms)
    sc = spark.sparkContext
    sc.setJobDescription(f"shoal compaction: {len(plan.outputs)} output objects")
    try:
        outputs: list[OutputResult] = (
            sc.parallelize(plan.outputs, len(plan.outputs))
            .map(lambda output: compact_output(output, settings))
            .collect()
        )
    finally:
        sc.setJobDescription(None)
    for out in sorted(outputs, key=lambda o: o.index):
        registered = out.object_key is not None and not out.abandoned
        result.outputs_written += int(registered)
        result.bytes_written += out.object_size if registered else 0
        result.batches_moved += out.moved
        result.batches_skipped += out.skipped
        result.bytes_moved += out.moved_bytes
        result.bytes_read += out.bytes_read
        result.objects_emptied += len(out.emptied)
        result.abandoned_uploads += int(out.abandoned)
        result.missing_objects.extend(out.missing_objects)
        result.corrupt_batches.extend(out.corrupt)
        result.outputs.append(out.to_json())
    result.missing_objects = sorted(set(result.missing_objects))
    result.elapsed_s = round(time.monotonic() - started, 3)
    result.mb_per_s = round(result.bytes_moved / max(result.elapsed_s, 1e-9) / 1e6, 2)
    return result
