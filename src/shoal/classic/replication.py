"""Replication of classic partitions on this broker: which replicas lead and which follow, as the
metadata image says, and the leader's ISR upkeep (Kafka's ReplicaManager.applyDelta,
ReplicaFetcherManager and the ISR-shrink task).

- ``apply(image)`` runs at start and at every new image: a replica whose broker the image names
  leader becomes leader (its leader epoch is recorded at the log end, followers get
  ``replica.lag.time.max.ms`` to fetch); one that follows is handed to the fetcher of its leader's
  broker, truncating first; a partition without a leader is neither. A leadership that ends answers
  its waiting ``acks=all`` writes with NOT_LEADER_OR_FOLLOWER.
- Every ``replica.lag.time.max.ms / 2`` each leader drops the followers that fell behind from its
  ISR; a follower that catches up is added back when it fetches. Both go through
  ``PartitionControl.alter_isr`` (leader and partition epochs checked), one change per partition
  at a time.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from shoal.classic.leader_state import LeaderState
from shoal.classic.log import PartitionLog
from shoal.classic.log_manager import TopicPartition
from shoal.classic.replica_fetcher import (
    FetcherSettings,
    FollowedPartition,
    ReplicaFetcher,
    TieredStateSource,
)
from shoal.classic.replication_quota import ReplicationQuota
from shoal.cluster.partition_control import PartitionControl
from shoal.config import Config
from shoal.metadata.image import MetadataImage, PartitionImage, TopicImage
from shoal.protocol.errors import ErrorCode, KafkaError

log = logging.getLogger(__name__)


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class Replication:
    def __init__(
        self,
        config: Config,
        node_id: int,
        get_log: Callable[[str, int], PartitionLog],
        run_blocking: Callable[..., Awaitable[Any]],
        control: PartitionControl | None,
        wake: Callable[[TopicPartition], None],
        throttle: tuple[Callable[[TopicPartition], bool], ReplicationQuota] | None = None,
    ) -> None:
        self._node_id = node_id
        self._throttle = throttle
        #: Set when tiered storage runs here (``RemoteLogManager.aux_state``): followers behind their
        #: leader's local log start take the state below it from remote storage.
        self.tiered_state: TieredStateSource | None = None
        self._get_log = get_log
        self._run_blocking = run_blocking
        self._control = control
        self._wake = wake
        self._lag_ms: int = config["replica.lag.time.max.ms"]
        self._settings = FetcherSettings(
            node_id=node_id,
            max_wait_ms=config["replica.fetch.wait.max.ms"],
            min_bytes=config["replica.fetch.min.bytes"],
            max_bytes=config["replica.fetch.response.max.bytes"],
            partition_max_bytes=config["replica.fetch.max.bytes"],
            backoff_ms=config["replica.fetch.backoff.ms"],
            socket_timeout_ms=config["replica.socket.timeout.ms"],
        )
        self.leaders: dict[TopicPartition, LeaderState] = {}
        self._following: dict[TopicPartition, tuple[int, int]] = {}  # -> (leader, leader epoch)
        self._fetchers: dict[int, ReplicaFetcher] = {}
        self._isr_changes: set[TopicPartition] = set()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._isr_task: asyncio.Task[None] | None = None
        self.isr_shrinks = 0
        self.isr_expands = 0
        self._stopped = False

    # ------------------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        self._isr_task = asyncio.create_task(self._shrink_loop(), name="isr-shrink")

    async def stop(self) -> None:
        """Stop fetching and answer every waiting write (NOT_LEADER_OR_FOLLOWER: the client retries
        on the next leader)."""
        self._stopped = True
        if self._isr_task is not None:
            self._isr_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._isr_task
        for fetcher in list(self._fetchers.values()):
            await fetcher.stop()
        self._fetchers.clear()
        for state in self.leaders.values():
            state.fail_waiters(ErrorCode.not_leader_or_follower)
        for task in list(self._tasks):
            task.cancel()

    # ---------------------------------------------------------------------------------- roles

    async def apply(self, image: MetadataImage, hosted: Callable[[TopicPartition], bool]) -> None:
        """Bring every local replica's role in line with ``image`` (see the module docstring)."""
        if self._stopped:
            return
        seen: set[TopicPartition] = set()
        for topic in image.topics_by_name.values():
            if topic.is_diskless:
                continue
            for p in topic.partitions.values():
                tp = (topic.name, p.partition)
                if self._node_id not in p.replicas or not hosted(tp):
                    continue
                seen.add(tp)
                try:
                    log_ = self._get_log(*tp)
                except KafkaError:
                    continue  # offline or missing: KIP-112 reports it
                if p.leader == self._node_id:
                    self._lead(tp, topic, log_, p)
                elif p.leader >= 0 and p.leader in image.brokers:
                    self._follow(tp, topic, log_, p, image)
                else:
                    self._resign(tp)
        for tp in [*self.leaders, *self._following]:
            if tp not in seen:
                self.forget(tp)
        for leader, fetcher in list(self._fetchers.items()):
            if not fetcher.partitions:
                del self._fetchers[leader]
                self._spawn(fetcher.stop())  # not awaited: publishing never waits on a connection

    def _lead(self, tp: TopicPartition, topic: TopicImage, log_: PartitionLog, p: PartitionImage) -> None:
        state = self.leaders.get(tp)
        if state is not None and state.leader_epoch == p.leader_epoch:
            self._update_leader(state, p)
            return
        self._stop_following(tp)
        if state is not None:
            state.fail_waiters(ErrorCode.not_leader_or_follower)
        log_.begin_leader_epoch(p.leader_epoch)
        log_.hw_follows_leo = len(p.replicas) == 1
        state = LeaderState.start(log_, self._node_id, topic.topic_id, p, _now_ms())
        self.leaders[tp] = state
        state.advance_high_watermark()
        log.info(
            "%s-%d: leader at epoch %d (replicas %s, ISR %s, log end %d, high watermark %d)",
            tp[0], tp[1], p.leader_epoch, list(p.replicas), list(p.isr), log_.log_end_offset, log_.high_watermark,
        )

    def _follow(
        self, tp: TopicPartition, topic: TopicImage, log_: PartitionLog, p: PartitionImage, image: MetadataImage
    ) -> None:
        if self._following.get(tp) == (p.leader, p.leader_epoch):
            return
        self._resign(tp)
        self._stop_following(tp)
        log_.hw_follows_leo = False
        broker = image.brokers[p.leader]
        fetcher = self._fetchers.get(p.leader)
        if fetcher is not None and fetcher.address != (broker.host, broker.port):
            self._fetchers.pop(p.leader)
            self._spawn(fetcher.stop())
            fetcher = None
        if fetcher is None:
            fetcher = ReplicaFetcher(
                p.leader, broker.host, broker.port, self._settings, self._run_blocking, self._wake, self._throttle,
                self._tiered_aux_state,
            )
            self._fetchers[p.leader] = fetcher
            fetcher.start()
        fetcher.add(tp, FollowedPartition(topic.topic_id, log_, p.leader_epoch))
        self._following[tp] = (p.leader, p.leader_epoch)
        log.info("%s-%d: following leader %d at epoch %d", tp[0], tp[1], p.leader, p.leader_epoch)

    async def _tiered_aux_state(
        self, topic_id: uuid.UUID, topic: str, partition: int, offset: int
    ) -> tuple[list[tuple[int, int]], bytes | None] | None:
        return None if self.tiered_state is None else await self.tiered_state(topic_id, topic, partition, offset)

    def _resign(self, tp: TopicPartition) -> None:
        state = self.leaders.pop(tp, None)
        if state is not None:
            state.fail_waiters(ErrorCode.not_leader_or_follower)
            state.log.hw_follows_leo = False
        self._stop_following(tp)

    def _stop_following(self, tp: TopicPartition) -> None:
        following = self._following.pop(tp, None)
        if following is not None and following[0] in self._fetchers:
            self._fetchers[following[0]].remove(tp)

    def forget(self, tp: TopicPartition) -> None:
        """The replica is gone from this broker (deleted, reassigned away, its dir failed)."""
        self._resign(tp)

    # ------------------------------------------------------------------------------ the leader

    def leader(self, tp: TopicPartition) -> LeaderState:
        """The partition's leader state; KAFKA_STORAGE_ERROR when its log is offline (KIP-112),
        NOT_LEADER_OR_FOLLOWER when this broker does not lead it now."""
        self._get_log(*tp)
        state = self.leaders.get(tp)
        if state is None:
            raise KafkaError(
                ErrorCode.not_leader_or_follower, f"This broker (node {self._node_id}) does not lead {tp[0]}-{tp[1]} now"
            )
        return state

    def replica_fetched(self, tp: TopicPartition, replica: int, fetch_offset: int, leader_leo: int) -> None:
        """A follower's fetch reached the leader: track it, move the high watermark, maybe expand."""
        state = self.leaders.get(tp)
        if state is None:
            return
        if state.record_fetch(replica, fetch_offset, leader_leo, _now_ms()):
            self._change_isr(tp, state, (*state.isr, replica), expand=True)

    async def _shrink_loop(self) -> None:
        interval = max(self._lag_ms / 2, 10) / 1000
        while True:
            await asyncio.sleep(interval)
            now = _now_ms()
            for tp, state in list(self.leaders.items()):
                lagging = state.lagging(now, self._lag_ms)
                if lagging:
                    self._change_isr(tp, state, tuple(b for b in state.isr if b not in lagging), expand=False)

    def _change_isr(self, tp: TopicPartition, state: LeaderState, isr: tuple[int, ...], *, expand: bool) -> None:
        if self._control is None or tp in self._isr_changes:
            return
        self._isr_changes.add(tp)
        state.pending_isr = isr if expand else None  # a shrink counts only once it is in the image
        self._spawn(self._submit_isr(tp, state, isr, expand))

    async def _submit_isr(self, tp: TopicPartition, state: LeaderState, isr: tuple[int, ...], expand: bool) -> None:
        assert self._control is not None
        p = state.partition
        try:
            changed = await self._run_blocking(
                self._control.alter_isr, state.topic_id, tp[1], p.leader_epoch, p.partition_epoch, isr
            )
        except KafkaError as exc:
            log.info("%s-%d: ISR change to %s refused: %s", tp[0], tp[1], list(isr), exc.message)
            state.pending_isr = None
            return
        except Exception as exc:
            log.warning("%s-%d: ISR change to %s failed: %s", tp[0], tp[1], list(isr), exc)
            state.pending_isr = None
            return
        finally:
            self._isr_changes.discard(tp)
        if self.leaders.get(tp) is state:
            log.info("%s-%d: ISR %s from %s to %s", tp[0], tp[1], "expanded" if expand else "shrunk",
                     list(p.isr), list(changed.isr))
            self._update_leader(state, changed)

    def _update_leader(self, state: LeaderState, p: PartitionImage) -> None:
        """The partition changed under this leadership: count ISR shrinks and expansions, whether
        this leader asked for them or the controller made them (a follower's broker was fenced)."""
        if p.partition_epoch <= state.partition.partition_epoch:
            return
        if set(p.isr) < set(state.isr):
            self.isr_shrinks += 1
        elif set(p.isr) > set(state.isr):
            self.isr_expands += 1
        # A reassignment may add replicas to a single-replica partition (or take them away).
        state.log.hw_follows_leo = len(p.replicas) == 1
        state.update(p, _now_ms())

    def _spawn(self, coro: Awaitable[Any]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # ------------------------------------------------------------------------------- reporting

    def under_replicated(self) -> int:
        return sum(1 for s in self.leaders.values() if len(s.isr) < len(s.partition.replicas))

    def fetcher_bytes(self) -> int:
        return sum(f.bytes_fetched for f in self._fetchers.values())
