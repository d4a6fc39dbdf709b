"""Planning of object compaction: which live batches go into which new object, in what order.

Pure code (no Spark, no I/O) so the layout rules are testable on their own. Every live
batch of the candidate objects is laid out in (topic id, partition, offset) order and the
sequence is cut into outputs of about the target size: each output holds consecutive
offset ranges of few partitions, contiguous per partition (the WAL format's "grouped by
partition"), so a consumer of one partition reads few objects afterwards. The cut points
are balanced (``n`` outputs of about ``live / n`` bytes) rather than greedy, so a run does
not leave a tiny tail object that the next run would have to rewrite again.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from shoal.coordinator.api import BatchInfo
from shoal.coordinator.compaction_types import ObjectCandidate
from shoal.records.wal import WAL_HEADER_SIZE

__all__ = ["CompactionPlan", "OutputPlan", "PlannedBatch", "plan_outputs"]


class PlannedBatch(NamedTuple):
    """A live batch where the driver found it; a plain tuple so large plans ship cheaply to tasks."""

    object_key: str
    byte_offset: int
    byte_size: int
    batch_id: int
    topic_id: bytes  # the topic's UUID bytes
    topic_name: str
    partition: int
    base_offset: int
    last_offset: int

    @staticmethod
    def of(info: BatchInfo) -> PlannedBatch:
        m = info.metadata
        tip = m.topic_id_partition
        return PlannedBatch(
            info.object_key, m.byte_offset, m.byte_size, info.batch_id, tip.topic_id.bytes, tip.topic_name,
            tip.partition, m.base_offset, m.last_offset,
        )  # fmt: skip


@dataclass(frozen=True, slots=True)
class OutputPlan:
    """One new object (one Spark task): its batches in the order they will be written."""

    index: int
    batches: tuple[PlannedBatch, ...]

    @property
    def live_bytes(self) -> int:
        return sum(b.byte_size for b in self.batches)

    @property
    def source_objects(self) -> frozenset[str]:
        return frozenset(b.object_key for b in self.batches)


@dataclass(slots=True)
class CompactionPlan:
    """What a run would do; ``outputs`` empty means nothing worth rewriting (``reason`` says why)."""

    candidates: list[ObjectCandidate]
    outputs: list[OutputPlan] = field(default_factory=list)
    input_objects: int = 0  # candidates that still had live batches
    input_bytes: int = 0  # their total size
    live_bytes: int = 0  # bytes of their live batches: what the run rewrites
    reason: str = ""

    def summary(self) -> dict[str, object]:
        return {
            "candidates": len(self.candidates),
            "input_objects": self.input_objects,
            "input_bytes": self.input_bytes,
            "live_bytes": self.live_bytes,
            "planned_outputs": len(self.outputs),
            "planned_batches": sum(len(o.batches) for o in self.outputs),
            "reason": self.reason,
        }


def _is_sparse(candidate: ObjectCandidate) -> bool:
    return candidate.used_size * 2 <= candidate.size


def plan_outputs(
    candidates: Sequence[ObjectCandidate],
    batches_by_object: Mapping[str, Sequence[BatchInfo]],
    target_bytes: int,
) -> CompactionPlan:
    """Lay the candidates' live batches out into outputs of at most ``target_bytes`` (one batch larger
    than that gets an output of its own).

    Nothing is planned when it would not help: a single input object that is not sparse
    would only be copied.
    """
    if target_bytes <= WAL_HEADER_SIZE:
        raise ValueError(
            f"target bytes must exceed the {WAL_HEADER_SIZE}-byte WAL header, got {target_bytes}"
        )
    plan = CompactionPlan(list(candidates))
    inputs = [c for c in candidates if batches_by_object.get(c.object_key)]
    plan.input_objects = len(inputs)
    plan.input_bytes = sum(c.size for c in inputs)
    batches = sorted(
        (PlannedBatch.of(b) for c in inputs for b in batches_by_object[c.object_key]),
        key=lambda b: (b.topic_id, b.partition, b.last_offset),
    )
    plan.live_bytes = sum(b.byte_size for b in batches)
    if not inputs:
        plan.reason = "no candidate object has live batches"
        return plan
    if len(inputs) == 1 and not _is_sparse(inputs[0]):
        plan.reason = "a single candidate object that is not sparse: rewriting it would gain nothing"
        return plan
    capacity = target_bytes - WAL_HEADER_SIZE
    goal = plan.live_bytes / max(1, math.ceil(plan.live_bytes / capacity))
    current: list[PlannedBatch] = []
    size = 0
    for batch in batches:
        if current and size + batch.byte_size > capacity:
            plan.outputs.append(OutputPlan(len(plan.outputs), tuple(current)))
            current, size = [], 0
        current.append(batch)
        size += batch.byte_size
        if size >= goal:
            plan.outputs.append(OutputPlan(len(plan.outputs), tuple(current)))
            current, size = [], 0
    if current:
        plan.outputs.append(OutputPlan(len(plan.outputs), tuple(current)))
    return plan
