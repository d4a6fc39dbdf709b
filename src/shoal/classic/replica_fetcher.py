"""A follower's fetcher: one per leader broker, copying that broker's leaderships into the local
logs (Kafka's ReplicaFetcherThread, as an asyncio task).

Each round it first truncates the partitions that just got a new leader (KIP-101/279: ask the
leader with OffsetForLeaderEpoch where our latest epoch ends on its log, cut ours there), then
sends one Fetch for the rest at their log ends, with our node id as ``replica_id``. The batches
are appended with the offsets and leader epochs they carry; the high watermark follows the
leader's. Errors park one partition for ``replica.fetch.backoff.ms``; a broken connection parks
them all.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from shoal.aio import wait_for
from shoal.classic.log import PartitionLog
from shoal.classic.log_manager import TopicPartition
from shoal.classic.producer_state import CorruptSnapshotError
from shoal.classic.replication_quota import ReplicationQuota
from shoal.protocol.apis import request_class
from shoal.protocol.broker_client import (
    FETCH_VERSION,
    OFFSET_FOR_LEADER_EPOCH_VERSION,
    BrokerClient,
    BrokerConnectionError,
)
from shoal.protocol.build import make, nested
from shoal.protocol.errors import ErrorCode, KafkaError

log = logging.getLogger(__name__)

_UNDEFINED = -1
_MAX_TRUNCATION_ROUNDS = 20


#: (topic id, topic, partition, the leader's local log start) -> (leader epochs (epoch, start offset),
#: producer snapshot at that offset or None), or None when remote storage holds nothing below it.
TieredStateSource = Callable[
    [uuid.UUID, str, int, int], Awaitable[tuple[list[tuple[int, int]], bytes | None] | None]
]


@dataclass(slots=True)
class FollowedPartition:
    topic_id: uuid.UUID
    log: PartitionLog
    leader_epoch: int
    truncating: bool = True
    #: The epoch to ask the leader about next (None: our latest).
    probe_epoch: int | None = None
    paused_until: float = 0.0


@dataclass(frozen=True, slots=True)
class FetcherSettings:
    node_id: int
    max_wait_ms: int
    min_bytes: int
    max_bytes: int
    partition_max_bytes: int
    backoff_ms: int
    socket_timeout_ms: int


class ReplicaFetcher:
    def __init__(
        self,
        leader: int,
        host: str,
        port: int,
        settings: FetcherSettings,
        run_blocking: Callable[..., Awaitable[Any]],
        on_appended: Callable[[TopicPartition], None],
        throttle: tuple[Callable[[TopicPartition], bool], ReplicationQuota] | None = None,
        tiered_state: TieredStateSource | None = None,
    ) -> None:
        self.leader = leader
        #: Where a follower behind its leader's local log start gets the state below it (KIP-405).
        self._tiered_state = tiered_state
        #: ``follower.replication.throttled.*``: which partitions are throttled, and the quota.
        self._throttle = throttle
        self._settings = settings
        self._client = BrokerClient(host, port, f"replica-fetcher-{settings.node_id}", settings.socket_timeout_ms / 1000)
        self._run_blocking = run_blocking
        self._on_appended = on_appended
        self.partitions: dict[TopicPartition, FollowedPartition] = {}
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        #: Bytes copied from the leader since start (follower catch-up rate).
        self.bytes_fetched = 0

    @property
    def address(self) -> tuple[str, int]:
        return self._client.address

    # -------------------------------------------------------------------------------- control

    def add(self, tp: TopicPartition, followed: FollowedPartition) -> None:
        self.partitions[tp] = followed
        self._changed.set()

    def remove(self, tp: TopicPartition) -> None:
        self.partitions.pop(tp, None)

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"replica-fetcher-{self.leader}")

    async def stop(self) -> None:
        # The flag as well as the cancel: on Python 3.11 a cancel that lands while a connection
        # attempt fails inside ``wait_for`` is swallowed, and the loop would go on (and wait).
        self._stopping = True
        self._changed.set()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self._client.close()

    # ----------------------------------------------------------------------------------- loop

    async def _run(self) -> None:
        backoff = self._settings.backoff_ms / 1000
        while not self._stopping:
            now = time.monotonic()
            ready = {tp: f for tp, f in self.partitions.items() if f.paused_until <= now}
            if not ready:
                self._changed.clear()
                wake = min((f.paused_until for f in self.partitions.values()), default=now + 3600)
                with contextlib.suppress(asyncio.TimeoutError):
                    await wait_for(self._changed.wait(), max(wake - now, 0.01))
                continue
            try:
                truncating = {tp: f for tp, f in ready.items() if f.truncating}
                if truncating:
                    await self._truncate(truncating)
                fetching = {
                    tp: f for tp, f in ready.items()
                    if not f.truncating and self.partitions.get(tp) is f and not self._held_back(tp)
                }
                if fetching:
                    await self._fetch(fetching)
                elif not truncating:
                    await asyncio.sleep(0.1)  # every ready partition is throttled this instant
            except BrokerConnectionError as exc:
                if self._stopping:
                    return
                log.warning("replica fetcher for leader %d: %s; retrying in %.1f s", self.leader, exc, backoff)
                await asyncio.sleep(backoff)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("replica fetcher for leader %d failed a round; retrying in %.1f s", self.leader, backoff)
                await asyncio.sleep(backoff)

    def _held_back(self, tp: TopicPartition) -> bool:
        """A throttled partition waits while the follower's throttle quota is used up."""
        return self._throttle is not None and self._throttle[0](tp) and self._throttle[1].exceeded()

    def _pause(self, tp: TopicPartition, why: str) -> None:
        followed = self.partitions.get(tp)
        if followed is not None:
            followed.paused_until = time.monotonic() + self._settings.backoff_ms / 1000
            log.info("replica fetcher for leader %d: %s-%d paused: %s", self.leader, tp[0], tp[1], why)

    # ----------------------------------------------------------------------------- truncation

    async def _truncate(self, partitions: dict[TopicPartition, FollowedPartition]) -> None:
        """Cut each log where it diverges from the leader's (KIP-279), asking again with an older
        epoch while the leader answers an epoch we do not have."""
        for _ in range(_MAX_TRUNCATION_ROUNDS):
            asking: dict[TopicPartition, tuple[FollowedPartition, int]] = {}
            for tp, f in partitions.items():
                if not f.truncating or self.partitions.get(tp) is not f:
                    continue
                epoch = f.probe_epoch if f.probe_epoch is not None else f.log.latest_epoch
                if epoch is None:
                    # No epoch on record: an empty log, or one from before epochs; the high
                    # watermark is what is known to be committed.
                    await self._truncate_to(tp, f, f.log.high_watermark)
                    continue
                asking[tp] = (f, epoch)
            if not asking:
                return
            answers = await self._offsets_for_epochs(asking)
            partitions = dict(partitions)
            for tp, (f, asked) in asking.items():
                error, leader_epoch, end_offset = answers.get(tp, (ErrorCode.unknown_server_error, -1, -1))
                if error != ErrorCode.none:
                    # The leader has not taken up the leadership yet (its metadata lags), or lost it.
                    self._pause(tp, f"OffsetForLeaderEpoch answered {error.name}")
                    partitions.pop(tp, None)
                    continue
                if end_offset == _UNDEFINED:
                    await self._truncate_to(tp, f, f.log.high_watermark)
                elif leader_epoch == _UNDEFINED:
                    await self._truncate_to(tp, f, min(end_offset, f.log.log_end_offset))
                else:
                    ours_epoch, ours_end = f.log.end_offset_for_epoch(leader_epoch)
                    if ours_epoch == leader_epoch:
                        await self._truncate_to(tp, f, min(end_offset, ours_end))
                    elif ours_epoch in (_UNDEFINED, asked):
                        await self._truncate_to(tp, f, min(end_offset, f.log.log_end_offset, max(ours_end, 0)))
                    else:
                        # We do not have the leader's epoch: cut to where our older one ends, then
                        # ask about that one.
                        await self._truncate_to(tp, f, min(ours_end, f.log.log_end_offset), done=False)
                        f.probe_epoch = ours_epoch
            partitions = {tp: f for tp, f in partitions.items() if f.truncating}
            if not partitions:
                return

    async def _truncate_to(self, tp: TopicPartition, f: FollowedPartition, offset: int, *, done: bool = True) -> None:
        if offset < f.log.log_end_offset:
            log.info(
                "%s-%d: truncating from %d to %d to follow leader %d (epoch %d)",
                tp[0], tp[1], f.log.log_end_offset, offset, self.leader, f.leader_epoch,
            )
            await self._run_blocking(f.log.truncate_to, max(offset, 0))
        if done:
            f.truncating = False
            f.probe_epoch = None

    async def _offsets_for_epochs(
        self, asking: dict[TopicPartition, tuple[FollowedPartition, int]]
    ) -> dict[TopicPartition, tuple[ErrorCode, int, int]]:
        cls = request_class(23, OFFSET_FOR_LEADER_EPOCH_VERSION)
        topic_cls, partition_cls = nested(cls, "OffsetForLeaderTopic"), nested(cls, "OffsetForLeaderPartition")
        by_topic: dict[str, list[Any]] = {}
        for (topic, partition), (f, epoch) in asking.items():
            by_topic.setdefault(topic, []).append(
                make(partition_cls, partition=partition, current_leader_epoch=f.leader_epoch, leader_epoch=epoch)
            )
        request = make(
            cls,
            replica_id=self._settings.node_id,
            topics=tuple(make(topic_cls, topic=t, partitions=tuple(ps)) for t, ps in by_topic.items()),
        )
        response = await self._client.request(request)
        answers = {}
        for t in response.topics:
            for p in t.partitions:
                answers[(t.topic, int(p.partition))] = (ErrorCode(p.error_code), int(p.leader_epoch), int(p.end_offset))
        return answers

    # ---------------------------------------------------------------------------------- fetch

    async def _fetch(self, partitions: dict[TopicPartition, FollowedPartition]) -> None:
        s = self._settings
        cls = request_class(1, FETCH_VERSION)
        topic_cls, partition_cls = nested(cls, "FetchTopic"), nested(cls, "FetchPartition")
        by_topic: dict[str, list[Any]] = {}
        asked: dict[TopicPartition, int] = {}
        for (topic, partition), f in partitions.items():
            offset = f.log.log_end_offset
            asked[(topic, partition)] = offset
            latest = f.log.latest_epoch
            by_topic.setdefault(topic, []).append(
                make(
                    partition_cls,
                    partition=partition,
                    current_leader_epoch=f.leader_epoch,
                    fetch_offset=offset,
                    last_fetched_epoch=-1 if latest is None else latest,
                    log_start_offset=f.log.log_start_offset,
                    partition_max_bytes=s.partition_max_bytes,
                )
            )
        request = make(
            cls,
            cluster_id=None,
            replica_id=s.node_id,
            max_wait=datetime.timedelta(milliseconds=s.max_wait_ms),
            min_bytes=s.min_bytes,
            max_bytes=s.max_bytes,
            isolation_level=0,
            session_id=0,
            session_epoch=-1,
            topics=tuple(make(topic_cls, topic=t, partitions=tuple(ps)) for t, ps in by_topic.items()),
            forgotten_topics_data=(),
            rack_id="",
        )
        response = await self._client.request(request, wait_s=s.max_wait_ms / 1000)
        if response.error_code != ErrorCode.none:
            for tp in partitions:
                self._pause(tp, f"Fetch answered {ErrorCode(response.error_code).name}")
            return
        for t in response.responses:
            for p in t.partitions:
                tp = (t.topic, int(p.partition_index))
                f = self.partitions.get(tp)
                if f is None or f is not partitions.get(tp) or f.truncating:
                    continue  # the partition moved on while the fetch was out
                await self._handle(tp, f, asked[tp], p)

    async def _restart_from_tiered(self, tp: TopicPartition, f: FollowedPartition, leader_local_start: int) -> None:
        """The leader answered OFFSET_MOVED_TO_TIERED_STORAGE: what we need lies only in remote
        segments. Restart the log at the leader's local log start with the leader epochs and the
        producer snapshot the remote segments below it hold (Kafka's ``buildRemoteLogAuxState``);
        without them (no tiered storage here, none found) just restart it there."""
        state = None
        if self._tiered_state is not None:
            try:
                state = await self._tiered_state(f.topic_id, tp[0], tp[1], leader_local_start)
            except Exception as exc:  # remote metadata or storage failing: restart without
                log.warning("%s-%d: reading the tiered state below offset %d failed: %s: %s", tp[0], tp[1],
                            leader_local_start, type(exc).__name__, exc)
        if state is None:
            log.info("%s-%d: behind the leader's local log start %d: restarting the log there", tp[0], tp[1],
                     leader_local_start)
            await self._run_blocking(f.log.truncate_fully_and_start_at, leader_local_start)
            return
        epochs, snapshot = state
        try:
            producers = await self._run_blocking(f.log.start_at_with_tiered_state, leader_local_start, epochs, snapshot)
        except CorruptSnapshotError as exc:
            log.warning("%s-%d: the remote producer snapshot at %d is unusable: %s", tp[0], tp[1],
                        leader_local_start, exc)
            producers = await self._run_blocking(f.log.start_at_with_tiered_state, leader_local_start, epochs, None)
        log.info("%s-%d: behind the leader's local log start %d: restarted the log there with %d leader epochs and "
                 "%s from remote storage", tp[0], tp[1], leader_local_start, len(epochs),
                 "no producer snapshot" if producers < 0 else f"{producers} producers")

    async def _handle(self, tp: TopicPartition, f: FollowedPartition, asked: int, p: Any) -> None:
        error = ErrorCode(p.error_code)
        if error == ErrorCode.offset_moved_to_tiered_storage:
            await self._restart_from_tiered(tp, f, int(p.log_start_offset))
            return
        if error == ErrorCode.offset_out_of_range:
            if f.log.log_end_offset < p.log_start_offset:
                log.info("%s-%d: behind the leader's log start %d: restarting the log there",
                         tp[0], tp[1], p.log_start_offset)
                await self._run_blocking(f.log.truncate_fully_and_start_at, int(p.log_start_offset))
            else:
                f.truncating = True
            return
        if error != ErrorCode.none:
            self._pause(tp, f"Fetch answered {error.name}")
            return
        if f.log.log_end_offset != asked:
            return  # truncated meanwhile: the next round fetches from the new end
        records = p.records or b""
        try:
            if records:
                f.log.append_as_follower(memoryview(records))
                self.bytes_fetched += len(records)
                if self._throttle is not None and self._throttle[0](tp):
                    self._throttle[1].record(len(records))
            if int(p.high_watermark) > f.log.high_watermark:  # only forward, as Kafka's followers
                f.log.set_high_watermark(int(p.high_watermark))
        except KafkaError as exc:
            log.error("%s-%d: appending replicated records failed: %s", tp[0], tp[1], exc.message)
            self.remove(tp)
            return
        leader_start = int(p.log_start_offset)
        if f.log.log_start_offset < leader_start <= f.log.high_watermark:
            # The leader's log start moved (DeleteRecords, retention): follow it, as Kafka's
            # followers do (maybeIncrementLogStartOffset), so a later leader keeps the deletion.
            await self._run_blocking(f.log.delete_records, leader_start)
        if records:
            self._on_appended(tp)
