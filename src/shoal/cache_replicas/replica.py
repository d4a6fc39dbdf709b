"""One local cache replica's state, and Kafka's caught-up rule measured against the coordinator.

"In sync" for a diskless replica means in sync with the Batch Coordinator (KIP-1163): Kafka's
``lastCaughtUpTimeMs`` rule with the coordinator's high watermark in the place of the leader's
log end. After each fill round that asked the coordinator at time ``t`` and learnt its high
watermark ``hw``: a cache that reached ``hw`` was caught up at ``t``; one that reached the high
watermark of the round before was caught up at that round's time. A replica is in sync while
it was caught up within ``replica.lag.time.max.ms``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from shoal.classic.log import PartitionLog
from shoal.metadata.image import TopicImage

#: A diskless partition as the cache replicas key it: (topic id, partition).
Key = tuple[Any, int]


@dataclass(slots=True)
class Progress:
    """Kafka's follower fetch state: the last position and when it was last caught up."""

    #: The position (cache log end) last reported, -1 before any.
    position: int = -1
    caught_up_ms: int = 0
    #: The high watermark and time of the previous report (Kafka's lastFetchLeaderLogEndOffset).
    last_hw: int = -1
    last_ms: int = 0

    def update(self, position: int, hw: int, now_ms: int) -> None:
        if position >= hw:
            self.caught_up_ms = now_ms
        elif self.last_hw >= 0 and position >= self.last_hw:
            self.caught_up_ms = max(self.caught_up_ms, self.last_ms)
        self.position, self.last_hw, self.last_ms = position, hw, now_ms

    def in_sync(self, now_ms: int, lag_ms: int) -> bool:
        return now_ms - self.caught_up_ms <= lag_ms


@dataclass(slots=True)
class CacheReplica:
    """A diskless partition this broker holds a replica of."""

    topic: TopicImage
    partition: int
    #: The cache log; None until the first fill round decides where it starts.
    log: PartitionLog | None = None
    #: Where a replica without a cache log starts (KIP-1163's policy 3); None: not decided yet.
    start_at: int | None = None
    #: The coordinator's log start and high watermark as the last fill round learnt them.
    log_start: int = -1
    high_watermark: int = -1
    #: The next offset after the records this broker itself committed last (their produce is
    #: answered at commit, maybe before the cache has them).
    committed_end: int = -1
    progress: Progress = field(default_factory=Progress)
    #: READ_COMMITTED from the cache: the coordinator's last stable offset and aborted
    #: transactions ((producer id, first, last)) read in one snapshot after the cache took
    #: transactional batches (None: not read yet); ``stable_to_end``: no transaction was open in
    #: the cache then, and only plain batches came since, so the whole cache is stable.
    txn_lso: int | None = None
    txn_aborted: tuple[tuple[int, int, int], ...] = ()
    stable_to_end: bool = False
    txn_dirty: bool = True

    def committed_bound(self) -> int | None:
        """Where a READ_COMMITTED read from the cache must stop (None: it cannot serve one)."""
        if self.txn_lso is None or self.txn_dirty:
            return None
        return self.cache_end if self.stable_to_end else min(self.txn_lso, self.cache_end)

    def aborted_between(self, start: int, end: int) -> tuple[tuple[int, int], ...]:
        """(producer id, first offset) of the aborted transactions overlapping [start, end)."""
        return tuple((pid, first) for pid, first, last in self.txn_aborted if last >= start and first < end)

    @property
    def key(self) -> Key:
        return self.topic.topic_id, self.partition

    @property
    def name(self) -> str:
        return f"{self.topic.name}-{self.partition}"

    @property
    def cache_end(self) -> int:
        """The next offset the cache needs (-1 without a cache log)."""
        return self.log.log_end_offset if self.log is not None else -1

    def lag_offsets(self) -> int:
        if self.high_watermark < 0:
            return 0
        return max(self.high_watermark - max(self.cache_end, self.log_start), 0)

    def covers(self, offset: int) -> bool:
        """Whether a read at ``offset`` can be answered from the cache: within it (its end
        included: nothing newer yet) and not below the coordinator's log start."""
        if self.log is None or self.log.is_offline or self.log.is_closed or self.high_watermark < 0:
            return False  # (no fill round yet: the coordinator's offsets are unknown)
        return max(self.log.log_start_offset, self.log_start) <= offset <= self.log.log_end_offset
