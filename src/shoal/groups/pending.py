"""The pending transactional offsets of the groups in memory: the mirror of the store's pending table.

A TxnOffsetCommit leaves its offsets pending for (group, producer id, partition) until the
transaction's marker settles them. Every change here replays, in the writer's order, the
mutation the store applied (``shoal.store.groups``: ``PutPendingOffsets``,
``CompleteTransaction``, and what ``PutOffsets``, ``DeleteOffsets`` and ``DeleteGroup`` do to
pending offsets), so memory and store agree without reading the store back. Kafka keeps the
same state in its OffsetMetadataManager (``pendingTransactionalOffsets``,
``openTransactionsByGroup``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from shoal.store.groups import CommittedOffset, PendingOffset

PartitionKey = tuple[str, int]


class PendingOffsets:
    def __init__(self) -> None:
        #: group id -> producer id -> (topic, partition) -> pending offset
        self._by_group: dict[str, dict[int, dict[PartitionKey, PendingOffset]]] = {}
        #: The next write sequence; above every sequence loaded, so a new write is always the latest.
        self._next_sequence = 0

    # -- reading -------------------------------------------------------------------------------------
    def has(self, group_id: str, topic: str, partition: int) -> bool:
        """Whether any open transaction has a pending offset of the partition (OffsetFetch's require_stable)."""
        return any((topic, partition) in offsets for offsets in self._by_group.get(group_id, {}).values())

    def has_group(self, group_id: str) -> bool:
        """Whether the group has pending offsets: an open transaction keeps it from being expired away."""
        return bool(self._by_group.get(group_id))

    def partitions(self, group_id: str) -> set[PartitionKey]:
        return {key for offsets in self._by_group.get(group_id, {}).values() for key in offsets}

    def groups_of(self, producer_id: int) -> list[str]:
        """The groups where the producer has pending offsets."""
        return [group_id for group_id, producers in self._by_group.items() if producer_id in producers]

    def of(self, group_id: str) -> dict[int, dict[PartitionKey, PendingOffset]]:
        """The group's pending offsets by producer id (a read-only view for callers)."""
        return self._by_group.get(group_id, {})

    def next_sequence(self) -> int:
        sequence = self._next_sequence
        self._next_sequence += 1
        return sequence

    # -- replaying the store's mutations -------------------------------------------------------------
    def put(self, group_id: str, offsets: Iterable[PendingOffset]) -> None:
        """``PutPendingOffsets`` (and loading from the store): each replaces the same producer's pending
        offset of its partition."""
        producers = self._by_group.setdefault(group_id, {})
        for pending in offsets:
            producers.setdefault(pending.producer_id, {})[(pending.offset.topic, pending.offset.partition)] = pending
            self._next_sequence = max(self._next_sequence, pending.write_sequence + 1)

    def complete(
        self, group_id: str, producer_id: int, commit: bool, committed: dict[PartitionKey, CommittedOffset]
    ) -> int:
        """``CompleteTransaction``: on COMMIT the producer's pending offsets not superseded go into
        ``committed`` (the group's committed offsets) and supersede the other producers' older pending
        offsets of their partitions; either way they leave. Returns how many were applied."""
        producers = self._by_group.get(group_id)
        if producers is None:
            return 0
        completed = producers.pop(producer_id, None)
        if not producers:
            del self._by_group[group_id]
        if not completed or not commit:
            return 0
        applied = 0
        for key, pending in completed.items():
            if not pending.superseded:
                committed[key] = pending.offset
                applied += 1
            for others in producers.values():
                older = others.get(key)
                if older is not None and older.write_sequence < pending.write_sequence and not older.superseded:
                    others[key] = dataclasses.replace(older, superseded=True)
        return applied

    def supersede(self, group_id: str, keys: Iterable[PartitionKey]) -> None:
        """``PutOffsets``: a plain commit is a later write than every pending offset of its partition."""
        producers = self._by_group.get(group_id)
        if not producers:
            return
        for key in keys:
            for offsets in producers.values():
                pending = offsets.get(key)
                if pending is not None and not pending.superseded:
                    offsets[key] = dataclasses.replace(pending, superseded=True)

    def drop(self, group_id: str, keys: Iterable[PartitionKey]) -> None:
        """``DeleteOffsets``: Kafka's offset tombstone removes the partition's pending offsets too."""
        producers = self._by_group.get(group_id)
        if not producers:
            return
        wanted = set(keys)
        for producer_id in list(producers):
            offsets = producers[producer_id]
            for key in wanted & offsets.keys():
                del offsets[key]
            if not offsets:
                del producers[producer_id]
        if not producers:
            del self._by_group[group_id]

    def forget(self, group_id: str) -> None:
        """``DeleteGroup``, or the group leaving memory for another broker."""
        self._by_group.pop(group_id, None)
