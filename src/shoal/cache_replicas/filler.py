"""Filling cache logs from object storage by following the Batch Coordinator's log tail.

One task per broker. Each round asks the coordinator for the batches after its caches' ends in
one ``find_batches`` call, reads them with ranged GETs planned across partitions (one GET serves
neighbouring batches of many partitions in one WAL object, and objects this broker just uploaded
are still in the range cache, so they cost no GET), and appends them to the cache logs with their
assigned offsets. Every ``diskless.replica.fetch.interval.ms`` a round covers every cache (other
brokers' commits). When this broker commits an object a round runs at once for the partitions
that object holds only: at saturation that is about a hundred rounds a second, and asking for
every cache each time made the coordinator's work per commit grow with the partitions the broker
holds. Caches still behind after a round go into the next one at once.

A replica without a cache starts ``diskless.replica.cache.start.bytes`` before the log end or at
the log start, whichever is later (KIP-1163's policy 3). A cache that falls behind the log start
(retention, DeleteRecords), meets a gap, loses its directory or fails on disk starts over: it is
only a cache. Every ``log.retention.check.interval.ms`` caches apply local retention and drop
what lies below the coordinator's log start.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from shoal.aio import wait_for
from shoal.cache_replicas.cache_log import CacheLogs
from shoal.cache_replicas.replica import CacheReplica, Key
from shoal.classic.log import PartitionLog
from shoal.classic.log_config import LogConfig
from shoal.coordinator.api import BatchCoordinator, ListOffsetsRequest, ListOffsetsTimestamp, TopicIdPartition
from shoal.diskless.read import DisklessReader, Located
from shoal.metadata.image import TopicImage
from shoal.protocol.errors import ErrorCode
from shoal.records.codec import iter_batches

log = logging.getLogger(__name__)

_DIR_CHECK_S = 1.0
#: A round that appends at least this many bytes copies and appends them on a worker thread.
APPEND_OFF_LOOP_BYTES = 1 << 20


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True, slots=True)
class FillSettings:
    start_bytes: int
    interval_ms: int
    #: Bytes per round in all and per partition (``replica.fetch.response.max.bytes`` and
    #: ``replica.fetch.max.bytes``, as a classic follower's fetch).
    max_bytes: int
    partition_max_bytes: int
    retention_check_ms: int


def start_offset(earliest: int, latest: int, size: int, start_bytes: int) -> int:
    """KIP-1163's policy 3: about ``start_bytes`` before the log end, or the log start when the
    partition holds less (offsets estimated from the partition's average batch bytes)."""
    if latest <= earliest or start_bytes <= 0:
        return max(latest, earliest)
    if size <= start_bytes:
        return earliest
    return max(earliest, latest - math.ceil((latest - earliest) * start_bytes / size))


def _append_all(
    located: Located, targets: list[tuple[PartitionLog, int]]
) -> list[tuple[int, bool] | Exception]:
    """Copy out and stamp each target's batches of ``located`` and append them to its cache log.
    Per target: (bytes appended, whether a batch was transactional) or the error. Rounds of
    ``APPEND_OFF_LOOP_BYTES`` or more call it on a worker thread: copying
    megabytes into fresh pages and checking their CRCs took a third of the loop's busy time at
    saturation; the log's own lock keeps the loop's reads of the same log consistent meanwhile."""
    outcomes: list[tuple[int, bool] | Exception] = []
    for cache_log, index in targets:
        try:
            records = located.records(index)
            cache_log.append_as_follower(memoryview(records))
            outcomes.append((len(records), any(h.is_transactional for _, h in iter_batches(records))))
        except Exception as exc:
            outcomes.append(exc)
    return outcomes


def key_of(replica: CacheReplica) -> TopicIdPartition:
    return TopicIdPartition(replica.topic.topic_id, replica.partition, replica.topic.name)


class CacheFiller:
    def __init__(
        self,
        replicas: Callable[[], Sequence[CacheReplica]],
        logs: CacheLogs,
        reader: DisklessReader,
        coordinator: BatchCoordinator,
        run_blocking: Callable[..., Awaitable[Any]],
        settings: FillSettings,
        config_for: Callable[[TopicImage], LogConfig],
        on_appended: Callable[[Iterable[CacheReplica]], None],
    ) -> None:
        self._replicas = replicas
        self._logs = logs
        self._reader = reader
        self._coordinator = coordinator
        self._run_blocking = run_blocking
        self._settings = settings
        self._config_for = config_for
        self._on_appended = on_appended
        self._wake = asyncio.Event()
        #: What the next round covers: every cache, or these (this broker's commits, and caches
        #: still behind after the last round).
        self._full_due = True
        self._due: set[Key] = set()
        self._task: asyncio.Task[None] | None = None
        self._failing = False
        self._next_dir_check = 0.0
        self._next_retention = time.monotonic() + settings.retention_check_ms / 1000
        #: Bytes appended to cache logs (downloaded or taken from the range cache).
        self.bytes_filled = 0

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="diskless-cache-filler")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def poke(self, keys: Iterable[Key] | None = None) -> None:
        """Run a round now: over the caches of ``keys`` (partitions this broker just committed
        to), or over every cache (None: a replica was added)."""
        if keys is None:
            self._full_due = True
        else:
            self._due.update(keys)
        self._wake.set()

    async def _run(self) -> None:
        interval = self._settings.interval_ms / 1000
        next_full = 0.0
        while True:
            self._wake.clear()
            now = time.monotonic()
            keys: set[Key] | None = None
            if self._full_due or now >= next_full:
                self._full_due, next_full = False, now + interval
            else:
                keys = self._due
            self._due = set()
            behind: set[Key] = set()
            try:
                behind = await self.fill_once(keys)
                await self._maintain()
                if self._failing:
                    log.info("filling diskless caches again")
                self._failing = False
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if not self._failing:  # once per outage
                    log.warning("filling diskless caches failed (retrying): %s: %s", type(exc).__name__, exc)
                self._failing = True
                self._full_due = True
            if behind:
                self._due |= behind
            else:
                with contextlib.suppress(TimeoutError):
                    await wait_for(self._wake.wait(), max(next_full - time.monotonic(), 0.0))

    # ------------------------------------------------------------------------------- one round

    async def fill_once(self, keys: set[Key] | None = None) -> set[Key]:
        """One round over the caches of ``keys`` (None: every cache); returns the caches still
        behind after it."""
        replicas = list(self._replicas())
        if keys is not None:
            replicas = [r for r in replicas if r.key in keys]
        undecided = [r for r in replicas if r.log is None and r.start_at is None]
        if undecided:
            await self._decide_starts(undecided)
        ready = [r for r in replicas if r.log is not None or r.start_at is not None]
        if not ready:
            return set()
        s = self._settings
        asked_ms = _now_ms()
        requests = [
            (key_of(r), r.cache_end if r.log is not None else r.start_at, s.partition_max_bytes) for r in ready
        ]
        located = await self._reader.locate(requests, s.max_bytes, for_cache=True)  # type: ignore[arg-type]
        behind: set[Key] = set()
        batches: list[tuple[CacheReplica, int]] = []  # (replica, index in the round) with batches to append
        for index, (r, (_, asked, _), found) in enumerate(zip(ready, requests, located.found, strict=True)):
            if r.cache_end != asked and r.log is not None:
                continue  # dropped or restarted while the round was out
            if found.errors in (ErrorCode.offset_out_of_range, ErrorCode.offset_moved_to_tiered_storage):
                # Below the log start, or below the batches left in the coordinator once older ones
                # moved to tiered storage (KIP-1163): a cache holds what the coordinator holds.
                log.info("%s: the cache fell out of the coordinator's log, starting it over", r.name)
                await self._start_over(r)
                continue
            if found.errors != ErrorCode.none:
                log.info("%s: the coordinator answered %s to the cache fill", r.name, found.errors.name)
                continue
            r.log_start, r.high_watermark = found.log_start_offset, found.high_watermark
            try:
                if found.batches:
                    await self._prepare(r, found.batches[0].metadata.base_offset)
                    batches.append((r, index))
                    continue
                if r.log is None:
                    r.log = await self._create(r, max(found.high_watermark, found.log_start_offset, 0))
            except Exception as exc:  # a disk error or a bad cache: it is only a cache, start over
                log.warning("%s: the cache failed and starts over: %s: %s", r.name, type(exc).__name__, exc)
                await self._start_over(r)
                continue
            r.progress.update(r.cache_end, r.high_watermark, asked_ms)
            if r.cache_end < r.high_watermark:
                behind.add(r.key)
        appended: list[CacheReplica] = []
        if batches:
            targets = [(r.log, index) for r, index in batches]
            size = sum(b.metadata.byte_size for _, index in batches for b in located.found[index].batches)
            if size >= APPEND_OFF_LOOP_BYTES:
                outcomes = await self._run_blocking(_append_all, located, targets)
            else:  # a worker-thread hop costs more than a small round's copy and append
                outcomes = _append_all(located, targets)
            for (r, _), outcome in zip(batches, outcomes, strict=True):
                if isinstance(outcome, Exception):
                    log.warning("%s: the cache failed and starts over: %s: %s", r.name, type(outcome).__name__, outcome)
                    await self._start_over(r)
                    continue
                filled, transactional = outcome
                self.bytes_filled += filled
                r.txn_dirty = r.txn_dirty or transactional  # READ_COMMITTED waits for the coordinator's state
                appended.append(r)
                r.progress.update(r.cache_end, r.high_watermark, asked_ms)
                if r.cache_end < r.high_watermark:
                    behind.add(r.key)
        await self._refresh_transactions([r for r in ready if r.log is not None and r.txn_dirty])
        if appended:
            self._on_appended(appended)
        return behind

    async def _refresh_transactions(self, replicas: list[CacheReplica]) -> None:
        """Read the coordinator's last stable offset and aborted transactions (one snapshot) for
        caches that took transactional batches, so READ_COMMITTED reads can be served from them:
        every transaction that ended below that LSO is in that aborted list."""
        for r in replicas:
            end = r.cache_end
            try:
                state = await self._run_blocking(self._coordinator.transaction_state, r.topic.topic_id, r.partition)
            except Exception as exc:  # READ_COMMITTED reads go to the coordinator meanwhile
                log.debug("%s: transaction state not read: %s", r.name, exc)
                continue
            if state is None:
                continue
            lso, aborted = state
            r.txn_lso, r.txn_aborted = lso, tuple(aborted)
            r.stable_to_end = lso >= end
            r.txn_dirty = False

    async def _decide_starts(self, replicas: list[CacheReplica]) -> None:
        """Where new caches start: one ListOffsets call for all, one describe per topic for sizes."""
        keys = [key_of(r) for r in replicas]
        earliest = await self._run_blocking(  # the first batch the coordinator holds (the rest is tiered)
            self._coordinator.list_offsets, [ListOffsetsRequest(k, ListOffsetsTimestamp.EARLIEST_LOCAL) for k in keys]
        )
        latest = await self._run_blocking(
            self._coordinator.list_offsets, [ListOffsetsRequest(k, ListOffsetsTimestamp.LATEST) for k in keys]
        )
        sizes: dict[tuple[uuid.UUID, int], int] = {}
        for topic_id in {r.topic.topic_id for r in replicas}:
            described = await self._run_blocking(self._coordinator.describe_topic, topic_id)
            for d in described.partitions if described is not None else ():
                sizes[(topic_id, d.partition)] = d.byte_size
        for r, first, last in zip(replicas, earliest, latest, strict=True):
            if first.errors != ErrorCode.none or last.errors != ErrorCode.none:
                continue  # the topic is being created or deleted: next round
            r.start_at = start_offset(
                first.offset, last.offset, sizes.get((r.topic.topic_id, r.partition), 0), self._settings.start_bytes
            )
            log.info("%s: building the cache from offset %d (log %d..%d)", r.name, r.start_at, first.offset, last.offset)

    async def _prepare(self, r: CacheReplica, first: int) -> None:
        """Make the cache log ready to take batches from offset ``first``."""
        if r.log is None:
            r.log = await self._create(r, first)
        elif r.log.log_end_offset != first:
            # A gap (batches deleted before the cache got them) or the first batch of a new
            # cache beginning before its start offset: restart the cache log at the batch.
            await self._run_blocking(r.log.truncate_fully_and_start_at, first)

    async def _create(self, r: CacheReplica, offset: int) -> Any:
        return await self._run_blocking(self._logs.create, r.topic, r.partition, offset, self._config_for(r.topic))

    async def _start_over(self, r: CacheReplica) -> None:
        """Drop the cache log; the next round decides its start again."""
        dropped, r.log, r.start_at = r.log, None, None
        if dropped is not None:
            with contextlib.suppress(Exception):
                await self._run_blocking(self._logs.drop, dropped)

    # ---------------------------------------------------------------------------- maintenance

    async def _maintain(self) -> None:
        """Caches whose dir vanished start over (checked every second); local retention and the
        coordinator's log start apply every ``log.retention.check.interval.ms``."""
        now = time.monotonic()
        if now >= self._next_dir_check:
            self._next_dir_check = now + _DIR_CHECK_S
            for r in self._replicas():
                if r.log is not None and not r.log.directory.is_dir():
                    log.warning("%s: the cache dir %s is gone, rebuilding the cache", r.name, r.log.directory)
                    await self._start_over(r)
        if now < self._next_retention:
            return
        self._next_retention = now + self._settings.retention_check_ms / 1000
        for r in list(self._replicas()):
            if r.log is None:
                continue
            try:
                await self._run_blocking(self._enforce_retention, r)
            except Exception as exc:
                log.warning("%s: cache retention failed, the cache starts over: %s", r.name, exc)
                await self._start_over(r)

    @staticmethod
    def _enforce_retention(r: CacheReplica) -> None:
        cache = r.log
        if cache is None:
            return
        if cache.log_start_offset < r.log_start <= cache.log_end_offset:
            cache.delete_records(r.log_start)
        cache.delete_old_segments()
        cache.delete_pending_files()

    def update_configs(self, replicas: Iterable[CacheReplica]) -> None:
        """A topic's configs changed: its caches take the new segment and retention settings."""
        for r in replicas:
            if r.log is not None:
                r.log.update_config(self._config_for(r.topic))
