"""What the leader of a replicated classic partition tracks (Kafka's Partition on the leader):
each follower's log end and when it last caught up, the ISR, the high watermark, and the
produce requests with ``acks=all`` waiting for it.

- A follower's fetch offset is its log end offset. It *caught up* at a fetch that asked for the
  leader's log end, or, if it asked for at least the log end the leader had at its previous fetch,
  at that previous fetch (Kafka's ``lastCaughtUpTimeMs``); one that has not caught up for
  ``replica.lag.time.max.ms`` leaves the ISR.
- The high watermark is the smallest log end among the leader and the ISR, counting a replica
  whose addition is pending (the maximal ISR, as Kafka does); it only moves forward.
- A write with ``acks=all`` completes when the high watermark passes it; if the ISR is then smaller
  than ``min.insync.replicas`` it completes with NOT_ENOUGH_REPLICAS_AFTER_APPEND.

Everything here runs on the event loop.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import uuid
from dataclasses import dataclass, field

from shoal.classic.log import PartitionLog
from shoal.metadata.image import PartitionImage
from shoal.protocol.errors import ErrorCode

__all__ = ["FollowerProgress", "LeaderState"]

_tiebreak = itertools.count()


@dataclass(slots=True)
class FollowerProgress:
    log_end_offset: int = -1  # unknown until it fetches
    last_caught_up_ms: int = 0
    last_fetch_leader_leo: int = -1
    last_fetch_ms: int = 0


@dataclass(slots=True)
class LeaderState:
    log: PartitionLog
    node_id: int
    topic_id: uuid.UUID
    partition: PartitionImage
    #: Where this leader epoch started in the log: a follower must reach it to join the ISR.
    epoch_start_offset: int
    followers: dict[int, FollowerProgress] = field(default_factory=dict)
    #: The ISR asked for from the controller and not yet in the image.
    pending_isr: tuple[int, ...] | None = None
    _waiters: list[tuple[int, int, int, asyncio.Future[ErrorCode]]] = field(default_factory=list)

    @classmethod
    def start(
        cls, log: PartitionLog, node_id: int, topic_id: uuid.UUID, partition: PartitionImage, now_ms: int
    ) -> LeaderState:
        """A new leadership: followers count as caught up now (they get ``replica.lag.time.max.ms``
        to fetch before they leave the ISR)."""
        state = cls(log, node_id, topic_id, partition, log.log_end_offset)
        for b in partition.replicas:
            if b != node_id:
                state.followers[b] = FollowerProgress(last_caught_up_ms=now_ms)
        return state

    @property
    def leader_epoch(self) -> int:
        return self.partition.leader_epoch

    @property
    def isr(self) -> tuple[int, ...]:
        return self.partition.isr

    def maximal_isr(self) -> set[int]:
        return {*self.partition.isr, *(self.pending_isr or ())}

    def update(self, partition: PartitionImage, now_ms: int) -> None:
        """The image changed this partition under the same leader epoch (our ISR change landed,
        replicas were reassigned)."""
        self.partition = partition
        if self.pending_isr is not None and set(self.pending_isr) == set(partition.isr):
            self.pending_isr = None
        for b in partition.replicas:
            if b != self.node_id and b not in self.followers:
                self.followers[b] = FollowerProgress(last_caught_up_ms=now_ms)
        for b in list(self.followers):
            if b not in partition.replicas:
                del self.followers[b]
        self.advance_high_watermark()

    # ------------------------------------------------------------------------------ followers

    def record_fetch(self, replica: int, fetch_offset: int, leader_leo: int, now_ms: int) -> bool:
        """A follower fetched at ``fetch_offset`` (its log end) while ours was ``leader_leo``.
        Returns True when it is out of the ISR and now eligible to join it."""
        f = self.followers.get(replica)
        if f is None:
            return False
        if fetch_offset >= leader_leo:
            f.last_caught_up_ms = max(f.last_caught_up_ms, now_ms)
        elif fetch_offset >= f.last_fetch_leader_leo >= 0:
            f.last_caught_up_ms = max(f.last_caught_up_ms, f.last_fetch_ms)
        f.log_end_offset = fetch_offset
        f.last_fetch_leader_leo = leader_leo
        f.last_fetch_ms = now_ms
        self.advance_high_watermark()
        return (
            replica not in self.maximal_isr()
            and fetch_offset >= self.log.high_watermark
            and fetch_offset >= self.epoch_start_offset
        )

    def lagging(self, now_ms: int, lag_ms: int) -> list[int]:
        """ISR followers that have not caught up for ``lag_ms`` (Kafka's getOutOfSyncReplicas)."""
        return [
            b for b in self.isr
            if b != self.node_id and (f := self.followers.get(b)) is not None and now_ms - f.last_caught_up_ms > lag_ms
        ]

    # ------------------------------------------------------------------------- high watermark

    def advance_high_watermark(self) -> None:
        leo = self.log.log_end_offset
        ends = [leo]
        for b in self.maximal_isr():
            if b == self.node_id:
                continue
            f = self.followers.get(b)
            ends.append(f.log_end_offset if f is not None else -1)
        new_hw = min(ends)
        if new_hw > self.log.high_watermark:
            self.log.set_high_watermark(new_hw)
        self._complete_waiters()

    def wait_for(self, offset: int, min_isr: int) -> asyncio.Future[ErrorCode]:
        """A future that completes when the high watermark reaches ``offset`` (exclusive end of a
        write): NONE, or NOT_ENOUGH_REPLICAS_AFTER_APPEND when the ISR is then below ``min_isr``."""
        future: asyncio.Future[ErrorCode] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiters, (offset, next(_tiebreak), min_isr, future))
        self._complete_waiters()
        return future

    def _complete_waiters(self) -> None:
        hw = self.log.high_watermark
        while self._waiters and self._waiters[0][0] <= hw:
            _, _, min_isr, future = heapq.heappop(self._waiters)
            if not future.done():
                enough = len(self.isr) >= min_isr
                future.set_result(ErrorCode.none if enough else ErrorCode.not_enough_replicas_after_append)

    def fail_waiters(self, code: ErrorCode) -> None:
        """The leadership ended: writes still waiting are answered with ``code``."""
        waiters, self._waiters = self._waiters, []
        for *_, future in waiters:
            if not future.done():
                future.set_result(code)
