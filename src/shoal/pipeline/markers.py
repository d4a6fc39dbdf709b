"""Write markers: one small object per writer task attempt, so a retry knows it is one.

Before a writer task produces anything it lists the markers of its (write, batch, task)
and then uploads its own. A task that finds earlier markers is a retry (or a re-run after
a restart) and first looks for what those attempts wrote; one that finds none is the first
and skips that work. Markers live in object storage (``shoal.write.markers``, by default
``shoal.storage.url``) under ``pipeline/write-markers/``, a prefix the broker's object
cleaner never touches (it only collects ``wal/``), and the driver deletes them once Spark
has committed the write.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from shoal.objects.factory import open_object_storage
from shoal.objects.storage import ObjectStorage

__all__ = ["MARKER_PREFIX", "Marker", "MarkerStore"]

MARKER_PREFIX = "pipeline/write-markers"

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Marker:
    """One task attempt: when it started (ms, the clock of the executor that stamps its records)."""

    started_ms: int
    task_attempt_id: int
    attempt: int


def _batch_segment(batch: int) -> str:
    return f"{batch:020d}"


class MarkerStore:
    """Markers under ``pipeline/write-markers/<write key>/<batch>/<task partition>/``."""

    def __init__(self, url: str) -> None:
        self._url = url

    def _run(self, work: Callable[[ObjectStorage], Awaitable[T]]) -> T:
        async def go() -> T:
            storage = open_object_storage(self._url)
            try:
                return await work(storage)
            finally:
                await storage.close()

        return asyncio.run(go())

    @staticmethod
    def _task_prefix(write_key: str, batch: int, task: int) -> str:
        return f"{MARKER_PREFIX}/{write_key}/{_batch_segment(batch)}/{task}/"

    def previous(self, write_key: str, batch: int, task: int) -> list[Marker]:
        """Markers left by earlier attempts of this task (any stage attempt, any earlier run)."""
        prefix = self._task_prefix(write_key, batch, task)

        async def work(storage: ObjectStorage) -> list[Marker]:
            found = []
            for info in await storage.list(prefix):
                raw = json.loads(await storage.fetch(info.key))
                found.append(Marker(int(raw["started_ms"]), int(raw["task_attempt_id"]), int(raw["attempt"])))
            return found

        return self._run(work)

    def record(self, write_key: str, batch: int, task: int, marker: Marker) -> None:
        """Upload this attempt's marker (durable when this returns)."""
        key = f"{self._task_prefix(write_key, batch, task)}{marker.started_ms}-{marker.task_attempt_id}.json"
        body = json.dumps(
            {
                "started_ms": marker.started_ms,
                "task_attempt_id": marker.task_attempt_id,
                "attempt": marker.attempt,
            }
        ).encode()

        async def work(storage: ObjectStorage) -> None:
            await storage.upload(key, body)

        self._run(work)

    def delete(self, write_key: str, *, below_batch: int | None = None) -> int:
        """Delete a write's markers (only those of batches < ``below_batch`` when given); returns how many."""
        prefix = f"{MARKER_PREFIX}/{write_key}/"

        async def work(storage: ObjectStorage) -> int:
            keys = []
            for info in await storage.list(prefix):
                if below_batch is not None:
                    segment = info.key[len(prefix) :].split("/", 1)[0]
                    if not segment.isdigit() or int(segment) >= below_batch:
                        continue
                keys.append(info.key)
            if keys:
                await storage.delete(keys)
            return len(keys)

        return self._run(work)
