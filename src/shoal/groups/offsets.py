"""OffsetCommit, OffsetFetch and OffsetDelete: a group's committed offsets.

A commit is answered only once durable (through the coordinator's one ``StoreWriter``),
and only then is it visible to OffsetFetch. Offsets are kept per group whatever its
state: a "simple" group (manual assignment, the admin client) uses Kafka only to store them.
Transactional commits (``txn_offsets.py``) show here only as OffsetFetch's UNSTABLE_OFFSET_COMMIT
for ``require_stable``, and as pending offsets that a plain commit supersedes and OffsetDelete drops.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from shoal.groups.group import GroupState
from shoal.groups.rebalance import Rebalancer
from shoal.groups.state import STORE_FAILURE, CoordinatorState
from shoal.groups.writer import StoreWriteError
from shoal.protocol.errors import ErrorCode
from shoal.store.groups import CommittedOffset, DeleteOffsets, PutOffsets

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class OffsetCommitEntry:
    topic: str
    partition: int
    topic_id: uuid.UUID | None
    offset: int
    leader_epoch: int
    metadata: str | None


@dataclass(frozen=True, slots=True)
class FetchedOffset:
    topic: str
    partition: int
    offset: int  # -1: none committed
    leader_epoch: int
    metadata: str
    #: UNSTABLE_OFFSET_COMMIT when ``require_stable`` and a transaction has a pending offset of the partition.
    error: ErrorCode = ErrorCode.none


class OffsetManager:
    def __init__(self, state: CoordinatorState, rebalancer: Rebalancer) -> None:
        self._state = state
        self._rebalancer = rebalancer

    # -- OffsetCommit ------------------------------------------------------------------------------
    async def commit_offsets(
        self,
        *,
        group_id: str,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        entries: Sequence[OffsetCommitEntry],
        retention_ms: int = -1,
        api_version: int,
    ) -> list[ErrorCode]:
        """Commit offsets of partitions the caller checked exist; one error per entry, in order."""
        if not entries:
            return []
        unavailable = self._state.unavailable(group_id)
        if unavailable is not None:
            return [unavailable] * len(entries)
        group = self._state.groups.get(group_id)
        if group is None:
            if generation_id >= 0:
                # v9+ answers GROUP_ID_NOT_FOUND; older clients only know ILLEGAL_GENERATION here.
                error = ErrorCode.group_id_not_found if api_version >= 9 else ErrorCode.illegal_generation
                return [error] * len(entries)
            # A "simple" commit (admin client, manual assignment) creates the group once durable.
        else:
            error = group.validate_offset_commit(member_id, group_instance_id, generation_id)
            if error is not None:
                return [error] * len(entries)
            if group.is_in(GroupState.STABLE, GroupState.PREPARING_REBALANCE):
                # Committing keeps a classic member's session alive.
                self._rebalancer.reschedule_heartbeat(group, group.members[member_id])
        now = self._state.now_ms()
        expire = None if retention_ms == -1 else now + retention_ms
        results: list[ErrorCode] = []
        records: list[CommittedOffset] = []
        for entry in entries:
            if entry.metadata is not None and len(entry.metadata) > self._state.config.offset_metadata_max_bytes:
                results.append(ErrorCode.offset_metadata_too_large)
                continue
            results.append(ErrorCode.none)
            records.append(
                CommittedOffset(
                    topic=entry.topic,
                    partition=entry.partition,
                    topic_id=entry.topic_id,
                    offset=entry.offset,
                    leader_epoch=entry.leader_epoch,
                    metadata=entry.metadata or "",
                    commit_timestamp_ms=now,
                    expire_timestamp_ms=expire,
                )
            )
        if records:
            try:
                await self._state.writer.submit(
                    [PutOffsets(group_id, tuple(records))], lambda: self._apply_offsets(group_id, records)
                )
            except StoreWriteError:
                return [STORE_FAILURE if e is ErrorCode.none else e for e in results]
        return results

    def _apply_offsets(self, group_id: str, records: Iterable[CommittedOffset]) -> None:
        if group_id not in self._state.groups:
            log.info("creating simple consumer group %s via manual offset commit", group_id)
            self._state.groups[group_id] = self._state.new_group(group_id)
        offsets = self._state.offsets.setdefault(group_id, {})
        for record in records:
            offsets[(record.topic, record.partition)] = record
        # As the store does: a plain commit is the latest write of its partitions, so a transaction's
        # offset pending before it no longer applies when that transaction commits (Kafka's rule).
        self._state.pending.supersede(group_id, ((r.topic, r.partition) for r in records))

    # -- OffsetFetch -------------------------------------------------------------------------------
    def fetch_offsets(
        self, group_id: str, partitions: Sequence[tuple[str, int]] | None, *, require_stable: bool = False
    ) -> tuple[ErrorCode, list[FetchedOffset]]:
        """The committed offsets of the partitions (or of every partition with one, for None).

        Offsets are returned whatever the group's state: the group may use Kafka only to store them.
        With ``require_stable`` (OffsetFetch v7+) a partition with a transaction's offset pending answers
        UNSTABLE_OFFSET_COMMIT (offset -1) instead, as Kafka does: the consumer retries until it settles.
        """
        unavailable = self._state.unavailable(group_id)
        if unavailable is not None:
            return unavailable, []
        group = self._state.groups.get(group_id)
        known = group is not None and not group.is_in(GroupState.DEAD)
        offsets = self._state.offsets.get(group_id, {}) if known else {}
        pending = self._state.pending

        def unstable(topic: str, partition: int) -> bool:
            return require_stable and pending.has(group_id, topic, partition)

        if partitions is None:
            return ErrorCode.none, [
                FetchedOffset(o.topic, o.partition, -1, -1, "", ErrorCode.unstable_offset_commit)
                if unstable(o.topic, o.partition)
                else FetchedOffset(o.topic, o.partition, o.offset, o.leader_epoch, o.metadata)
                for _, o in sorted(offsets.items())
                if self._state.is_live(o)
            ]
        fetched = []
        for topic, partition in partitions:
            o = offsets.get((topic, partition))
            if unstable(topic, partition):
                fetched.append(FetchedOffset(topic, partition, -1, -1, "", ErrorCode.unstable_offset_commit))
            elif o is None or not self._state.is_live(o):
                fetched.append(FetchedOffset(topic, partition, -1, -1, ""))
            else:
                fetched.append(FetchedOffset(topic, partition, o.offset, o.leader_epoch, o.metadata))
        return ErrorCode.none, fetched

    # -- OffsetDelete ------------------------------------------------------------------------------
    async def delete_offsets(
        self, group_id: str, topics: Sequence[tuple[str, Sequence[int]]]
    ) -> tuple[ErrorCode, dict[tuple[str, int], ErrorCode]]:
        """OffsetDelete: (group error, error per partition) for topics the caller checked exist."""
        if not group_id:
            return ErrorCode.invalid_group_id, {}
        unavailable = self._state.unavailable(group_id)
        if unavailable is not None:
            return unavailable, {}
        group = self._state.groups.get(group_id)
        if group is None or group.is_in(GroupState.DEAD):
            return ErrorCode.group_id_not_found, {}
        if not group.is_in(GroupState.EMPTY) and not group.uses_consumer_protocol():
            return ErrorCode.non_empty_group, {}
        results: dict[tuple[str, int], ErrorCode] = {}
        removed: list[tuple[str, int]] = []
        offsets = self._state.offsets.get(group_id, {})
        pending = self._state.pending.partitions(group_id)
        for topic, partitions in topics:
            subscribed = group.is_subscribed_to_topic(topic)
            for partition in partitions:
                if subscribed:
                    results[(topic, partition)] = ErrorCode.group_subscribed_to_topic
                    continue
                results[(topic, partition)] = ErrorCode.none
                # Kafka writes the tombstone when the partition has a committed or a pending offset;
                # it drops both (the pending ones once durable, in the order the store applies it).
                if offsets.pop((topic, partition), None) is not None or (topic, partition) in pending:
                    removed.append((topic, partition))
        if removed:
            try:
                await self._state.writer.submit(
                    [DeleteOffsets(group_id, tuple(removed))], lambda: self._state.pending.drop(group_id, removed)
                )
            except StoreWriteError:
                return STORE_FAILURE, {}
            log.info("deleted offsets of group %s: %s", group_id, removed)
        return ErrorCode.none, results
