"""Physical deletion of WAL segment objects: marked objects after a grace period, and orphans.

KIP-1163 "Batch deletion": the Batch Coordinator only *marks* an object for deletion
once no live batch is left in it; a broker deletes it from object storage later, after
a grace period that lets Fetch requests already reading it finish, and then tells the
coordinator to forget it (KIP-1164 getFilesToDelete / deleteFiles).

KIP-1163 "Error handling and segment object garbage collection": an object uploaded
but never committed (the commit failed or its answer was lost, or the broker died in
between) is garbage nobody references. Objects under ``wal/`` older than a safety age
that the coordinator does not know (``isSafeToDeleteFile``) are deleted. The age must
exceed by far the longest time between an upload and its commit: the coordinator is
asked before the delete, and a commit landing in between would lose its object.

Never delete when unsure: any coordinator error skips the rest of the round (objects
are only ever deleted after the coordinator said so in this round), a storage error
skips the rest of its phase, and objects whose deletion failed are not reported to
the coordinator, so they are retried next round.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from shoal.coordinator.api import BatchCoordinator, DeleteFilesRequest
from shoal.diskless.periodic import PeriodicTask
from shoal.objects.storage import ObjectStorage
from shoal.observability.metrics import BrokerMetrics
from shoal.records.wal import WAL_KEY_PREFIX

__all__ = ["CleanerRound", "ObjectCleaner", "DELETE_CHUNK"]

log = logging.getLogger(__name__)

#: Keys per storage delete call (S3's DeleteObjects takes at most 1000) and per deleteFiles.
DELETE_CHUNK = 1000


@dataclass(frozen=True, slots=True)
class CleanerRound:
    """What one round did; ``skipped`` names the phases given up after an error."""

    objects_deleted: int = 0
    orphans_deleted: int = 0
    skipped: tuple[str, ...] = ()


def _utc_now() -> datetime:
    return datetime.now(UTC)


class _CoordinatorUnavailable(Exception):
    """The coordinator failed: nothing more is deleted this round."""


class ObjectCleaner(PeriodicTask):
    """Deletes marked objects every ``interval_ms`` and collects orphans every ``orphan_interval_ms``.

    The orphan phase lists every object under the prefix, live ones included, so it
    runs less often: by default once per ``orphan_min_age_ms`` (an orphan is then gone
    within twice that age), and in the first round after ``start`` (after a crash is
    when orphans appear). The first round runs one interval after ``start``.
    """

    def __init__(
        self,
        storage: ObjectStorage,
        coordinator: BatchCoordinator,
        run_blocking: Callable[..., Awaitable],
        *,
        interval_ms: int,
        delete_grace_ms: int,
        orphan_min_age_ms: int,
        orphan_interval_ms: int | None = None,
        metrics: BrokerMetrics | None = None,
        clock: Callable[[], datetime] = _utc_now,
        prefix: str = WAL_KEY_PREFIX,
    ) -> None:
        self._storage = storage
        self._coordinator = coordinator
        self._run_blocking = run_blocking
        self._interval = interval_ms / 1000
        self._grace = timedelta(milliseconds=delete_grace_ms)
        self._orphan_age = timedelta(milliseconds=orphan_min_age_ms)
        self._orphan_interval = timedelta(
            milliseconds=orphan_min_age_ms if orphan_interval_ms is None else orphan_interval_ms
        )
        self._metrics = metrics
        self._clock = clock
        self._prefix = prefix
        self._last_orphan_scan: datetime | None = None
        self._name = "diskless-object-cleaner"

    async def round(self) -> None:
        last = self._last_orphan_scan
        await self.run_once(orphans=last is None or self._clock() - last >= self._orphan_interval)

    async def run_once(self, *, orphans: bool = True) -> CleanerRound:
        """One round: delete marked objects past their grace period, then (if asked) orphans."""
        now = self._clock()
        state = _Round()
        try:
            try:
                files = await self._run_blocking(self._coordinator.get_files_to_delete)
            except Exception as exc:
                raise _CoordinatorUnavailable(exc) from exc
            due = [f.object_key for f in files if f.marked_for_deletion_at <= now - self._grace]
            await self._delete_marked(due, state)
            state.finished.append("delete")
            if orphans:
                await self._delete_orphans(now, state)
                state.finished.append("orphans")
                if "orphans" not in state.skipped:
                    self._last_orphan_scan = now
        except _CoordinatorUnavailable as exc:
            log.warning("object cleaner: batch coordinator failed (%s); skipping the rest of this round", exc)
            for phase in ("delete", "orphans") if orphans else ("delete",):
                if phase not in state.finished and phase not in state.skipped:
                    state.skip(phase)
                    self._failed(phase)
        return CleanerRound(state.objects_deleted, state.orphans_deleted, tuple(state.skipped))

    async def _delete_marked(self, keys: list[str], state: _Round) -> None:
        """Delete ``keys`` from storage, then have the coordinator forget them, chunk by chunk."""
        for start in range(0, len(keys), DELETE_CHUNK):
            chunk = keys[start : start + DELETE_CHUNK]
            try:
                await self._storage.delete(chunk)
            except Exception as exc:
                # Not forgotten, so retried next round; storage trouble does not stop the orphan phase
                # from trying (it may be a per-key problem).
                log.warning("object cleaner: deleting %d objects failed (%s); retrying next round", len(chunk), exc)
                state.skip("delete")
                self._failed("delete")
                return
            try:
                await self._run_blocking(self._coordinator.delete_files, DeleteFilesRequest(frozenset(chunk)))
            except Exception as exc:
                # Deleted but not forgotten: next round deletes them again (a no-op) and retries.
                raise _CoordinatorUnavailable(exc) from exc
            state.objects_deleted += len(chunk)
            log.info("object cleaner: deleted %d objects marked for deletion", len(chunk))
            if self._metrics is not None:
                self._metrics.objects_deleted(len(chunk))

    async def _delete_orphans(self, now: datetime, state: _Round) -> None:
        """Delete objects older than the safety age that the coordinator does not know."""
        try:
            listed = await self._storage.list(self._prefix)
        except Exception as exc:
            log.warning("object cleaner: listing %r failed (%s); skipping orphan collection", self._prefix, exc)
            state.skip("orphans")
            self._failed("orphans")
            return
        old = [o.key for o in listed if o.last_modified <= now - self._orphan_age]
        for start in range(0, len(old), DELETE_CHUNK):
            try:
                orphans = await self._run_blocking(self._unknown_keys, old[start : start + DELETE_CHUNK])
            except Exception as exc:
                raise _CoordinatorUnavailable(exc) from exc
            if not orphans:
                continue
            try:
                await self._storage.delete(orphans)
            except Exception as exc:
                log.warning("object cleaner: deleting %d orphan objects failed (%s)", len(orphans), exc)
                state.skip("orphans")
                self._failed("orphans")
                return
            state.orphans_deleted += len(orphans)
            log.info(
                "object cleaner: deleted %d orphan objects (uploaded, never committed): %s",
                len(orphans), ", ".join(orphans[:5]) + (" ..." if len(orphans) > 5 else ""),
            )
            if self._metrics is not None:
                self._metrics.orphans_deleted(len(orphans))

    def _unknown_keys(self, keys: list[str]) -> list[str]:
        """The keys the coordinator calls safe to delete; one worker-thread hop for a whole chunk."""
        return [key for key in keys if self._coordinator.is_safe_to_delete_file(key) is True]

    def _failed(self, phase: str) -> None:
        if self._metrics is not None:
            self._metrics.cleaner_failed(phase)


@dataclass(slots=True)
class _Round:
    objects_deleted: int = 0
    orphans_deleted: int = 0
    skipped: list[str] = field(default_factory=list)
    finished: list[str] = field(default_factory=list)

    def skip(self, phase: str) -> None:
        if phase not in self.skipped:
            self.skipped.append(phase)
