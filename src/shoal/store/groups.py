"""The group and offset store seam: what the group coordinator keeps durable, and how it asks.

Kafka keeps both in ``__consumer_offsets``: an OffsetCommit record per group and
partition, and a GroupMetadata record per group (generation, protocol, leader and the
members with their subscription and assignment, written when a rebalance completes and
when the group becomes empty). A store holds the latest value of each of those keys, so
loading it is what replaying the compacted topic gives Kafka.

Transactional offset commits (TxnOffsetCommit) are kept apart as *pending* offsets, per
group, producer id and partition, until the transaction's marker reaches the group's
``__consumer_offsets`` partition: ``CompleteTransaction`` then makes them committed offsets
(COMMIT) or drops them (ABORT). Kafka keeps them as OffsetCommit records written by that
producer and settles them when it replays the marker; which of two values of one partition
wins follows Kafka's rule (the later write), hence ``write_sequence`` and ``superseded``.

Writes come as batches of mutations applied all or nothing and durably: a commit that
returns is on disk, and a batch of many consumers' commits costs one sync. Backends live
under ``shoal.store.<backend>``; the coordinator only sees :class:`GroupStore`.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

__all__ = [
    "CommittedOffset",
    "DeleteGroup",
    "DeleteOffsets",
    "GroupStore",
    "CompleteTransaction",
    "Mutation",
    "PendingOffset",
    "PutGroup",
    "PutOffsets",
    "PutPendingOffsets",
    "StoredGroup",
    "StoredMember",
]


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    topic: str
    partition: int
    topic_id: uuid.UUID | None
    offset: int
    leader_epoch: int  # -1: none
    metadata: str
    commit_timestamp_ms: int
    # Set only by OffsetCommit v2-4 with an explicit retention time; else the broker's retention applies.
    expire_timestamp_ms: int | None = None


@dataclass(frozen=True, slots=True)
class StoredMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes  # the member's metadata for the group's protocol
    assignment: bytes


@dataclass(frozen=True, slots=True)
class StoredGroup:
    group_id: str
    protocol_type: str | None
    protocol_name: str | None
    generation: int
    leader: str | None
    state_timestamp_ms: int  # -1: unknown
    members: tuple[StoredMember, ...] = ()


@dataclass(frozen=True, slots=True)
class PendingOffset:
    """An offset a transaction committed (TxnOffsetCommit), invisible until the transaction commits."""

    producer_id: int
    offset: CommittedOffset
    #: Write order within the group (increasing), so that of two producers' pending offsets of one
    #: partition the later one wins, as Kafka compares their positions in ``__consumer_offsets``.
    write_sequence: int
    #: A committed offset of the partition was written after this one (a plain OffsetCommit, or a
    #: later transaction's offset that committed first): when this transaction commits, this offset
    #: is not applied, as Kafka keeps the most recent committed offset.
    superseded: bool = False


@dataclass(frozen=True, slots=True)
class PutOffsets:
    """Committed offsets, replacing the group's previous ones of those partitions; each also supersedes
    every pending offset of its partition (it is the later write)."""

    group_id: str
    offsets: tuple[CommittedOffset, ...]


@dataclass(frozen=True, slots=True)
class DeleteOffsets:
    """The group's committed and pending offsets of these partitions (Kafka's offset tombstone drops both)."""

    group_id: str
    partitions: tuple[tuple[str, int], ...]


@dataclass(frozen=True, slots=True)
class PutPendingOffsets:
    """Pending offsets, each replacing the same producer's pending offset of its partition in the group."""

    group_id: str
    offsets: tuple[PendingOffset, ...]


@dataclass(frozen=True, slots=True)
class CompleteTransaction:
    """The end of a producer's transaction in one group. COMMIT: each of its pending offsets that is
    not superseded becomes the committed offset of its partition (replacing the previous one), and
    each of its pending offsets supersedes the other producers' pending offsets of that partition
    written before it; ABORT: nothing is applied. Either way the producer's pending offsets in the group go.
    Completing a transaction with nothing pending is a no-op (markers are retried)."""

    group_id: str
    producer_id: int
    commit: bool


@dataclass(frozen=True, slots=True)
class PutGroup:
    group: StoredGroup


@dataclass(frozen=True, slots=True)
class DeleteGroup:
    """The group's metadata, members, committed offsets and pending offsets."""

    group_id: str


Mutation = PutOffsets | DeleteOffsets | PutGroup | DeleteGroup | PutPendingOffsets | CompleteTransaction


class GroupStore(Protocol):
    """Durable group metadata, committed offsets and pending transactional offsets. Calls block: the coordinator makes them off the event
    loop (through its ``run_blocking``), one at a time or concurrently, so implementations serialise."""

    def load(self) -> tuple[list[StoredGroup], dict[str, list[CommittedOffset]]]:
        """Every stored group (in group id order, members in their stored order) and every committed offset
        (grouped by group id, in topic and partition order), read on one consistent snapshot."""
        ...

    def load_pending(self, producer_id: int | None = None) -> dict[str, list[PendingOffset]]:
        """Every pending offset (of one producer, given ``producer_id``), grouped by group id, in producer
        id, topic and partition order. A coordinator reads it with ``load`` (only the owner of a group
        writes it, so the two reads agree) and to find the groups a transaction marker concerns."""
        ...

    def apply(self, mutations: Sequence[Mutation]) -> None:
        """Apply the mutations in order, in one durable transaction (all or nothing)."""
        ...

    def close(self) -> None: ...
