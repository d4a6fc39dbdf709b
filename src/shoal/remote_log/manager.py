"""This broker's RemoteLogManager (KIP-405) for partitions with ``remote.storage.enable``.

Every ``remote.log.manager.task.interval.ms``, for each such partition with a replica here:

- **the leader copies** its rolled segments above the highest offset already copied (found in the
  RemoteLogMetadataManager under the log's leader epochs, so a new leader carries on where the
  old one stopped): each gets COPY_SEGMENT_STARTED, its files go through the RemoteStorageManager,
  then COPY_SEGMENT_FINISHED; the log may then delete it locally (local retention,
  ``PartitionLog.highest_offset_in_remote``). ``remote.log.copy.disable`` stops new copies.
- **the leader expires** remote segments by the topic's total ``retention.ms`` / ``retention.bytes``
  and below the log start (DeleteRecords): DELETE_SEGMENT_STARTED, the data deleted,
  DELETE_SEGMENT_FINISHED; a copy left COPY_SEGMENT_STARTED by a crash is deleted the same way.
- **followers** only learn the highest copied offset, so their local retention follows too.
- **diskless partitions** (KIP-1163 "Moving to Tiered Storage"): the leader builds segments from
  the Batch Coordinator's batches in a chain of its own (``diskless_chains``), copies them the
  same way, then has the coordinator delete the batches below each copied segment. Expiry moves
  the coordinator's log start before it deletes remote segments, and follows its DeleteRecords.

Reads below a replica's local log start come from remote segments (``reader``). The partition's
log start is then the first remote segment's start (or the DeleteRecords offset in it).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from shoal.aio import wait_for
from shoal.classic.log import PartitionLog
from shoal.classic.log_config import LogConfig
from shoal.metadata.image import MetadataImage, TopicImage
from shoal.metadata.tiered_state import DISABLING, ENABLED, copying
from shoal.remote_log.diskless_chains import DisklessChains
from shoal.remote_log.reader import RemoteReader, floor_segment
from shoal.tiered.api import (
    IndexType,
    LogSegmentData,
    RemoteLogMetadataManager,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemoteResourceNotFoundError,
    RemoteStorageManager,
    TopicIdPartition,
    epochs_in,
)

log = logging.getLogger(__name__)

FINISHED = RemoteLogSegmentState.COPY_SEGMENT_FINISHED
STARTED = RemoteLogSegmentState.COPY_SEGMENT_STARTED
DELETE_STARTED = RemoteLogSegmentState.DELETE_SEGMENT_STARTED
DELETE_FINISHED = RemoteLogSegmentState.DELETE_SEGMENT_FINISHED


def _ignore_result(task: asyncio.Future[Any]) -> None:
    """A remote read nobody waits for any more: its failure is counted by the reader, not raised."""
    if not task.cancelled():
        task.exception()


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def is_tiered(topic: TopicImage) -> bool:
    return topic.configs.get("remote.storage.enable", "false") == "true"


class RemoteLogManager:
    def __init__(
        self,
        node_id: int,
        interval_ms: int,
        image: Callable[[], MetadataImage],
        get_log: Callable[[str, int], PartitionLog | None],
        rsm: RemoteStorageManager,
        rlmm: RemoteLogMetadataManager,
        run_blocking: Callable[..., Awaitable[Any]],
        is_controller: Callable[[], bool] = lambda: True,
        finish_disablement: Callable[[Any, int], object] | None = None,
        chains: DisklessChains | None = None,
        diskless_config: Callable[[TopicImage], LogConfig] | None = None,
        fetch_max_wait_ms: int = 500,
    ) -> None:
        #: ``remote.fetch.max.wait.ms``: how long a Fetch waits for a remote read.
        self._fetch_max_wait_s = fetch_max_wait_ms / 1000
        #: Remote reads that outlasted it (answered with no records).
        self.fetch_timeouts = 0
        self._node_id = node_id
        #: Segments of tiered diskless partitions led here, and those topics' retention settings.
        self._chains = chains
        self._diskless_config = diskless_config
        self._is_controller = is_controller
        #: KIP-950: DISABLING -> DISABLED (``Controller.finish_tiering_disablement``, blocking).
        self._finish_disablement = finish_disablement
        self._interval_ms = interval_ms
        self._image = image
        self._get_log = get_log
        self._rsm = rsm
        self._rlmm = rlmm
        self._run_blocking = run_blocking
        self.reader = RemoteReader(rsm)
        self._task: asyncio.Task[None] | None = None
        self._copying: set[RemoteLogSegmentId] = set()
        self._wake = asyncio.Event()
        self.copied_bytes: dict[str, int] = {}
        self.copy_errors = 0
        self.delete_errors = 0
        # Metrics (``observability.remote_metrics``), recomputed by ``measure`` every interval.
        #: Topic -> bytes of its COPY_SEGMENT_FINISHED segments, over the partitions led here.
        self.remote_log_sizes: dict[str, int] = {}
        #: Topic -> bytes of rolled segments not yet copied, over the partitions led here.
        self.copy_lag_bytes: dict[str, int] = {}
        self._measuring: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._chains is not None:
            self._chains.wipe()
        self._task = asyncio.create_task(self._run(), name="remote-log-manager")
        self.start_measuring()

    async def stop(self) -> None:
        await self.stop_measuring()
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._chains is not None:
            self._chains.close()

    def poke(self) -> None:
        self._wake.set()

    async def _run(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await wait_for(self._wake.wait(), self._interval_ms / 1000)
            self._wake.clear()
            if self._is_controller():
                try:
                    await self.delete_untiered_partitions()
                    await self._finish_disablements()
                except Exception as exc:
                    log.warning("deleting the remote data of deleted or untiered topics failed: %s", exc)
            replicas = self._tiered_replicas()
            if self._chains is not None:
                await self._chains.keep_only({
                    (t.topic_id, p) for t, p, leader in replicas if leader and t.is_diskless and self._copies(t)
                })
            for topic, partition, leader in replicas:
                try:
                    await self.run_partition(topic, partition, leader)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    log.warning("tiered storage of %s-%d failed this round: %s: %s",
                                topic.name, partition, type(exc).__name__, exc)

    def _tiered_replicas(self) -> list[tuple[TopicImage, int, bool]]:
        image = self._image()
        return [
            (topic, p.partition, p.leader == self._node_id)
            for topic in image.topics_by_name.values() if is_tiered(topic)
            for p in topic.partitions.values()
            if (p.leader == self._node_id if topic.is_diskless else self._node_id in p.replicas)
        ]

    @staticmethod
    def _copies(topic: TopicImage) -> bool:
        """Whether the topic's data is being copied (KIP-950: ENABLED, and no ``remote.log.copy.disable``)."""
        return copying(topic.configs) and topic.tiered_state in (None, ENABLED)

    async def run_partition(self, topic: TopicImage, partition: int, leader: bool) -> None:
        if topic.is_diskless:
            if leader and self._chains is not None:
                await self._run_diskless(topic, partition)
            return
        partition_log = self._get_log(topic.name, partition)
        if partition_log is None:
            return
        tp = TopicIdPartition(topic.topic_id, partition, topic.name)
        segments = await self._run_blocking(self._rlmm.list_remote_log_segments, tp)
        copied = max((s.end_offset for s in segments if s.state == FINISHED), default=-1)
        partition_log.highest_offset_in_remote = max(partition_log.highest_offset_in_remote, copied)
        if not leader:
            return
        if self._copies(topic):
            await self._copy(tp, partition_log, copied, topic.tiered_epoch)
        config: LogConfig = partition_log.config
        await self._expire(tp, config, partition_log.log_start_offset, partition_log.size, await self._deleted_below(tp))

    async def _run_diskless(self, topic: TopicImage, partition: int) -> None:
        """One round of a tiered diskless partition led here: batches a finished copy holds but the
        coordinator still has (a crash came between) go first; the chain takes the batches not yet
        tiered, its rolled segments are copied, and each copy deletes the batches below it."""
        chains = self._chains
        assert chains is not None and self._diskless_config is not None
        tp = TopicIdPartition(topic.topic_id, partition, topic.name)
        segments = await self._run_blocking(self._rlmm.list_remote_log_segments, tp)
        copied = max((s.end_offset for s in segments if s.state == FINISHED), default=-1)
        log_start, local_start, high_watermark, size = await chains.local_state(tp)
        if local_start <= copied < high_watermark:
            local_start = await chains.delete_tiered(tp, copied + 1)
        if self._copies(topic):
            chain = await chains.fill(topic, partition, max(local_start, copied + 1), high_watermark)

            async def copied_up_to(end: int) -> None:
                await chains.delete_tiered(tp, end + 1)

            try:
                moved = await self._copy(tp, chain, copied, topic.tiered_epoch, copied_up_to)
            finally:
                await chains.trim(chain, chain.highest_offset_in_remote)
            if moved:  # the coordinator's local start and size moved with the copies
                log_start, local_start, high_watermark, size = await chains.local_state(tp)
        await self._expire(tp, self._diskless_config(topic), local_start, size, log_start, chains.move_log_start)

    # ------------------------------------------------------------------------------------ copy

    async def _copy(
        self, tp: TopicIdPartition, partition_log: PartitionLog, copied: int, tiered_epoch: int,
        then: Callable[[int], Awaitable[None]] | None = None,
    ) -> int:
        """Copy the log's rolled segments above ``copied`` in order; ``then(end offset)`` after each.
        Returns how many were copied."""
        rolled = await self._run_blocking(partition_log.rolled_segments, copied)
        for segment in rolled:
            metadata = RemoteLogSegmentMetadata(
                RemoteLogSegmentId.generate(tp), segment.base_offset, segment.end_offset, segment.max_timestamp,
                self._node_id, _now_ms(), segment.size,
                epochs_in(segment.leader_epochs, segment.base_offset, segment.end_offset),
                tiered_epoch=tiered_epoch,
            )
            data = LogSegmentData(
                segment.log_path, segment.offset_index_path, segment.time_index_path, segment.txn_index_path, segment.producer_snapshot,
                "\n".join(f"{e} {o}" for e, o in sorted(metadata.segment_leader_epochs.items())).encode(),
            )
            await self._run_blocking(self._rlmm.add_remote_log_segment_metadata, metadata)
            self._copying.add(metadata.segment_id)
            try:
                custom = await self._rsm.copy_log_segment_data(metadata, data)
                await self._update(metadata, FINISHED, custom)
            except Exception:
                self.copy_errors += 1
                await self._abandon(metadata)
                raise
            finally:
                self._copying.discard(metadata.segment_id)
            partition_log.highest_offset_in_remote = max(partition_log.highest_offset_in_remote, segment.end_offset)
            self.copied_bytes[tp.topic] = self.copied_bytes.get(tp.topic, 0) + segment.size
            if then is not None:
                await then(segment.end_offset)
            log.info("%s-%d: copied segment %d..%d (%d bytes) to remote storage", tp.topic, tp.partition,
                     segment.base_offset, segment.end_offset, segment.size)
        return len(rolled)

    async def _abandon(self, metadata: RemoteLogSegmentMetadata) -> None:
        """A copy that failed leaves no parts behind: its metadata goes to DELETE_SEGMENT_FINISHED
        and its data is deleted, the data also when the metadata cannot move (another leader
        already deleted this copy, thinking it abandoned, while this broker was paused and then
        uploaded the rest)."""
        try:
            await self._delete_segment(metadata)
        except Exception:
            with contextlib.suppress(Exception):
                await self._rsm.delete_log_segment_data(metadata)

    async def _update(self, metadata: RemoteLogSegmentMetadata, state: RemoteLogSegmentState,
                      custom: bytes | None = None) -> None:
        update = RemoteLogSegmentMetadataUpdate(metadata.segment_id, _now_ms(), state, self._node_id, custom)
        await self._run_blocking(self._rlmm.update_remote_log_segment_metadata, update)

    async def _delete_segment(self, metadata: RemoteLogSegmentMetadata) -> None:
        """DELETE_SEGMENT_STARTED (unless already), the data deleted, DELETE_SEGMENT_FINISHED."""
        if metadata.state != DELETE_STARTED:
            await self._update(metadata, DELETE_STARTED)
        await self._rsm.delete_log_segment_data(metadata)
        await self._update(metadata, DELETE_FINISHED)

    # ---------------------------------------------------------------------------------- expiry

    async def _expire(
        self, tp: TopicIdPartition, config: LogConfig, local_start: int, local_size: int, start: int,
        move_log_start: Callable[[TopicIdPartition, int], Awaitable[None]] | None = None,
    ) -> None:
        """Delete the remote segments total retention (``config.total_retention_*``, over the remote
        segments below ``local_start`` and the ``local_size`` bytes above) expires, those below the
        log start ``start`` (-1: none) and abandoned copies. ``move_log_start`` first moves the
        log start past the expired segments (diskless: the coordinator holds it)."""
        segments = await self._run_blocking(self._rlmm.list_remote_log_segments, tp)
        finished = sorted((s for s in segments if s.state == FINISHED), key=lambda s: s.start_offset)
        doomed = [s for s in segments if s.state == DELETE_STARTED]
        doomed += [s for s in segments if s.state == STARTED and s.segment_id not in self._copying]
        now = _now_ms()
        expiring = []
        if config.cleanup_delete and config.total_retention_ms >= 0:
            for s in finished:
                if now - s.max_timestamp_ms <= config.total_retention_ms:
                    break
                expiring.append(s)
        if config.cleanup_delete and config.total_retention_bytes >= 0:
            remote_only = sum(s.segment_size_in_bytes for s in finished if s.end_offset < local_start)
            excess = remote_only + local_size - config.total_retention_bytes
            excess -= sum(s.segment_size_in_bytes for s in expiring)
            for s in finished[len(expiring):]:
                if s.end_offset >= local_start or excess - s.segment_size_in_bytes < 0:
                    break
                excess -= s.segment_size_in_bytes
                expiring.append(s)
        if start >= 0:
            expiring += [s for s in finished if s.end_offset < start and s not in expiring]
        if move_log_start is not None and expiring:
            kept = [s.start_offset for s in finished if s not in expiring]
            new_start = min(kept[0] if kept else local_start, local_start)
            if new_start > start:
                await move_log_start(tp, new_start)
        for s in doomed + expiring:
            try:
                await self._delete_segment(s)
            except Exception as exc:
                self.delete_errors += 1
                log.warning("%s-%d: deleting remote segment %d..%d failed: %s", tp.topic, tp.partition,
                            s.start_offset, s.end_offset, exc)
                return
            log.info("%s-%d: deleted remote segment %d..%d", tp.topic, tp.partition, s.start_offset, s.end_offset)

    # ----------------------------------------------------------------------------------- reads

    async def _finished(self, tp: TopicIdPartition) -> list[RemoteLogSegmentMetadata]:
        segments = await self._run_blocking(self._rlmm.list_remote_log_segments, tp)
        return sorted((s for s in segments if s.state == FINISHED), key=lambda s: s.start_offset)

    @staticmethod
    def _start_of(finished: list[RemoteLogSegmentMetadata], deleted_below: int, local_start: int) -> int:
        first = finished[0].start_offset if finished else local_start
        return min(max(first, deleted_below), local_start)

    async def log_start(self, tp: TopicIdPartition, local_start: int) -> int:
        """The partition's log start: its first remote segment's (or the DeleteRecords offset)."""
        return self._start_of(await self._finished(tp), await self._deleted_below(tp), local_start)

    async def read(
        self, tp: TopicIdPartition, offset: int, max_bytes: int, min_one_batch: bool, local_start: int
    ) -> tuple[bytes, int] | None:
        """Batches from ``offset`` out of remote segments, with the partition's log start (one
        look at the metadata for both); None when no remote segment holds the offset."""
        deleted_below = await self._deleted_below(tp)
        if offset < deleted_below:
            return None
        finished = await self._finished(tp)
        segment = floor_segment(finished, offset)
        if segment is None:
            return None
        reading = asyncio.ensure_future(self.reader.read(segment, offset, max_bytes, min_one_batch))
        try:
            # Shielded: a read that outlasts the wait goes on, so its segment's index is cached
            # when the consumer asks again (Kafka lets the task run on after DelayedRemoteFetch expires).
            records = await wait_for(asyncio.shield(reading), self._fetch_max_wait_s)
        except TimeoutError:
            self.fetch_timeouts += 1
            reading.add_done_callback(_ignore_result)
            log.info("%s-%d: the remote read at %d took longer than remote.fetch.max.wait.ms, answering no "
                     "records", tp.topic, tp.partition, offset)
            records = b""
        return records, self._start_of(finished, deleted_below, local_start)

    async def offset_for_timestamp(self, tp: TopicIdPartition, timestamp: int) -> tuple[int, int] | None:
        """The first remote record at or after ``timestamp`` (None: none remote)."""
        start = await self._deleted_below(tp)
        for segment in await self._finished(tp):
            if segment.max_timestamp_ms >= timestamp and segment.end_offset >= start:
                found = await self.reader.offset_for_timestamp(segment, timestamp)
                if found is not None and found[0] >= start:
                    return found
        return None

    async def epoch_at(self, tp: TopicIdPartition, offset: int) -> int:
        """The leader epoch of a remote offset, from the segments' leader epochs (-1: unknown)."""
        segment = floor_segment(await self._finished(tp), offset)
        if segment is None:
            return -1
        epochs = [e for e, start in segment.segment_leader_epochs.items() if start <= offset]
        return max(epochs, default=-1)

    async def aux_state(
        self, topic_id: uuid.UUID, topic: str, partition: int, offset: int
    ) -> tuple[list[tuple[int, int]], bytes | None] | None:
        """What a follower restarting its log at the leader's local log start ``offset`` takes from
        remote storage (Kafka's ``buildRemoteLogAuxState``): the leader epochs of the segments below
        ``offset`` ((epoch, start offset)), and the producer snapshot of the segment ending just
        below it (None when no copied segment ends there, e.g. an earlier leader cut elsewhere).
        None: no remote segment holds ``offset - 1``."""
        tp = TopicIdPartition(topic_id, partition, topic)
        finished = await self._finished(tp)
        holding = floor_segment(finished, offset - 1)
        if holding is None:
            return None
        starts: dict[int, int] = {}
        for s in finished:
            for epoch, start in s.segment_leader_epochs.items():
                if start < offset:
                    starts[epoch] = min(starts.get(epoch, start), start)
        snapshot = None
        if holding.end_offset == offset - 1:
            with contextlib.suppress(RemoteResourceNotFoundError):
                snapshot = await self._rsm.fetch_index(holding, IndexType.PRODUCER_SNAPSHOT)
        return sorted(starts.items(), key=lambda e: (e[1], e[0])), snapshot

    async def highest_copied(self, tp: TopicIdPartition) -> int:
        finished = await self._finished(tp)
        return max((s.end_offset for s in finished), default=-1)

    async def _deleted_below(self, tp: TopicIdPartition) -> int:
        """The DeleteRecords log start of the partition (-1: none), from the shared store every
        time (an indexed lookup), so a new leader or a follower serving reads never uses a stale one."""
        stored = await self._run_blocking(self._rlmm.log_start_offset, tp)
        return -1 if stored is None else stored

    async def delete_records(self, tp: TopicIdPartition, offset: int) -> None:
        """DeleteRecords into remote data: the log start moves (durably, in the shared metadata
        store), the next round deletes the segments below it."""
        await self._run_blocking(self._rlmm.put_log_start_offset, tp, offset)
        self.poke()

    async def _finish_disablements(self) -> None:
        """KIP-950: a DISABLING topic becomes DISABLED once no broker copies it (retain: at once,
        copies only run in ENABLED) and, with the delete policy, once its remote data is gone."""
        if self._finish_disablement is None:
            return
        disabling = [t for t in self._image().topics_by_id.values() if t.tiered_state == DISABLING]
        if not disabling:
            return
        with_data = {tp.topic_id for tp in await self._run_blocking(self._rlmm.partitions_with_segments)}
        for topic in disabling:
            if topic.tiered_delete and topic.topic_id in with_data:
                continue
            await self._run_blocking(self._finish_disablement, topic.topic_id, topic.tiered_epoch)
            log.info("tiered storage of %s is DISABLED (tiered epoch %d, remote data %s)", topic.name,
                     topic.tiered_epoch, "deleted" if topic.tiered_delete else "kept")

    async def delete_untiered_partitions(self) -> None:
        """The remote data of topics that were deleted, or whose ``remote.storage.enable`` was turned
        off (with ``remote.log.delete.on.disable``: Kafka refuses it otherwise), goes. One broker
        does it, the active controller."""
        image = self._image()
        for tp in await self._run_blocking(self._rlmm.partitions_with_segments):
            topic = image.topics_by_id.get(tp.topic_id)
            if topic is not None and is_tiered(topic):
                continue
            if topic is not None and topic.is_diskless and self._chains is not None:
                # The log start moves to the coordinator's first batch before the data goes.
                log_start, local_start, _, _ = await self._chains.local_state(tp)
                if log_start < local_start:
                    await self._chains.move_log_start(tp, local_start)
            for s in await self._run_blocking(self._rlmm.list_remote_log_segments, tp):
                with contextlib.suppress(Exception):
                    await self._delete_segment(s)

    # -------------------------------------------------------------- metrics (remote_metrics)

    def fetched_bytes(self) -> dict[str, int]:
        """Topic -> record bytes consumers were sent from remote segments (RemoteFetchBytesPerSec)."""
        return self.reader.fetched_bytes

    def fetch_errors(self) -> int:
        """Remote reads that failed (RemoteFetchErrorsPerSec)."""
        return self.reader.fetch_errors

    def start_measuring(self) -> None:
        """Recompute ``remote_log_sizes`` and ``copy_lag_bytes`` every interval (a scrape only reads them)."""
        self._measuring = asyncio.create_task(self._measure_forever(), name="remote-log-metrics")

    async def stop_measuring(self) -> None:
        task, self._measuring = self._measuring, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _measure_forever(self) -> None:
        while True:
            try:
                await self.measure()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.debug("measuring tiered storage failed: %s", exc)
            await asyncio.sleep(self._interval_ms / 1000)

    async def measure(self) -> None:
        """RemoteLogSizeBytes (one SUM in the metadata store) and RemoteCopyLagBytes (the log's
        rolled segments above ``highest_offset_in_remote``; 0 with ``remote.log.copy.disable``,
        where nothing is meant to be copied) of the tiered partitions led here."""
        sizes: dict[str, int] = {}
        lags: dict[str, int] = {}
        for topic, partition, leader in self._tiered_replicas():
            if not leader:
                continue
            if topic.is_diskless:  # the tiering chain, while it copies
                partition_log = self._chains.get((topic.topic_id, partition)) if self._chains is not None else None
            else:
                partition_log = self._get_log(topic.name, partition)
                if partition_log is None:
                    continue
            tp = TopicIdPartition(topic.topic_id, partition, topic.name)
            size = await self._run_blocking(self._rlmm.remote_log_size, tp)
            pending = []
            if partition_log is not None and topic.configs.get("remote.log.copy.disable", "false") != "true":
                pending = await self._run_blocking(partition_log.rolled_segments, partition_log.highest_offset_in_remote)
            sizes[topic.name] = sizes.get(topic.name, 0) + size
            lags[topic.name] = lags.get(topic.name, 0) + sum(s.size for s in pending)
        self.remote_log_sizes, self.copy_lag_bytes = sizes, lags
