"""The group and offset store seam: what the group coordinator keeps durable, and how it asks.

Kafka keeps both in ``__consumer_offsets``: an OffsetCommit record per group and
partition, and a GroupMetadata record per group (generation, protocol, leader and the
members with their subscription and assignment, written when a rebalance completes and
when the group becomes empty). A store holds the latest value of each of those keys, so
loading it is what replaying the compacted topic gives Kafka.

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
    "Mutation",
    "PutGroup",
    "PutOffsets",
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
class PutOffsets:
    group_id: str
    offsets: tuple[CommittedOffset, ...]


@dataclass(frozen=True, slots=True)
class DeleteOffsets:
    group_id: str
    partitions: tuple[tuple[str, int], ...]


@dataclass(frozen=True, slots=True)
class PutGroup:
    group: StoredGroup


@dataclass(frozen=True, slots=True)
class DeleteGroup:
    """The group's metadata, members and committed offsets."""

    group_id: str


Mutation = PutOffsets | DeleteOffsets | PutGroup | DeleteGroup


class GroupStore(Protocol):
    """Durable group metadata and committed offsets. Calls block: the coordinator makes them off the event
    loop (through its ``run_blocking``), one at a time or concurrently, so implementations serialise."""

    def load(self) -> tuple[list[StoredGroup], dict[str, list[CommittedOffset]]]:
        """Every stored group (in group id order, members in their stored order) and every committed offset
        (grouped by group id, in topic and partition order), read on one consistent snapshot."""
        ...

    def apply(self, mutations: Sequence[Mutation]) -> None:
        """Apply the mutations in order, in one durable transaction (all or nothing)."""
        ...

    def close(self) -> None: ...
