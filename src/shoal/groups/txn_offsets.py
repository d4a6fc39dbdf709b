"""TxnOffsetCommit and the end of a transaction in the groups: offsets a transaction commits.

Kafka's OffsetMetadataManager (``commitTransactionalOffset``, ``replayEndTransactionMarker``):
a transactional producer's TxnOffsetCommit leaves its offsets *pending* for that producer id
in the group, invisible to OffsetFetch, and answers once they are durable. When the
transaction coordinator sends the COMMIT marker to the group's ``__consumer_offsets``
partition they become the group's committed offsets; an ABORT marker drops them. Until
then OffsetFetch with ``require_stable`` answers UNSTABLE_OFFSET_COMMIT for their
partitions, retention keeps the partitions' offsets and the group, and a plain
OffsetCommit of the partition wins over them (the later write wins, as in Kafka).

Pending offsets are durable like committed ones (``PutPendingOffsets`` and
``CompleteTransaction`` on the group store), so they survive a restart and move with the
group to another broker. As in Kafka's group coordinator, the producer id and epoch are
not checked here: the transaction coordinator fences producers.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from shoal.groups.offsets import OffsetCommitEntry
from shoal.groups.state import STORE_FAILURE, CoordinatorState
from shoal.groups.writer import RunBlocking, StoreWriteError
from shoal.protocol.errors import ErrorCode
from shoal.store.groups import (
    CommittedOffset,
    CompleteTransaction,
    GroupStore,
    PendingOffset,
    PutPendingOffsets,
)

log = logging.getLogger(__name__)


class TxnOffsetManager:
    def __init__(self, state: CoordinatorState, store: GroupStore, run_blocking: RunBlocking) -> None:
        self._state = state
        self._store = store
        self._run_blocking = run_blocking

    # -- TxnOffsetCommit ---------------------------------------------------------------------------
    async def txn_commit_offsets(
        self,
        *,
        group_id: str,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        entries: Sequence[OffsetCommitEntry],
        api_version: int,
    ) -> list[ErrorCode]:
        """Store the offsets (of partitions the caller checked exist) as pending for ``producer_id``; one
        error per entry, in order, answered once durable. v0-2 carry no member id nor generation
        (``generation_id`` -1, ``member_id`` ""): such a commit is accepted whatever the group's state."""
        if not entries:
            return []
        if not self._state.active:
            return [ErrorCode.coordinator_not_available] * len(entries)
        if not group_id:
            return [ErrorCode.invalid_group_id] * len(entries)
        unavailable = self._state.unavailable(group_id)
        if unavailable is not None:
            return [unavailable] * len(entries)
        group = self._state.groups.get(group_id)
        if group is None:
            if generation_id >= 0:
                # Kafka answers ILLEGAL_GENERATION here for every TxnOffsetCommit version.
                return [ErrorCode.illegal_generation] * len(entries)
            # A simple group (no membership) is created once the pending offsets are durable.
        else:
            error = group.validate_offset_commit(member_id, group_instance_id, generation_id, transactional=True)
            if error is not None:
                return [error] * len(entries)
        now = self._state.now_ms()
        results: list[ErrorCode] = []
        records: list[PendingOffset] = []
        for entry in entries:
            if entry.metadata is not None and len(entry.metadata) > self._state.config.offset_metadata_max_bytes:
                results.append(ErrorCode.offset_metadata_too_large)
                continue
            results.append(ErrorCode.none)
            offset = CommittedOffset(
                topic=entry.topic,
                partition=entry.partition,
                topic_id=entry.topic_id,
                offset=entry.offset,
                leader_epoch=entry.leader_epoch,
                metadata=entry.metadata or "",
                commit_timestamp_ms=now,
            )
            records.append(PendingOffset(producer_id, offset, self._state.pending.next_sequence()))
        if records:
            log.debug(
                "group %s: transactional offsets of %s (producer id %d, epoch %d) pending: %s",
                group_id, transactional_id, producer_id, producer_epoch, records,
            )
            try:
                await self._state.writer.submit(
                    [PutPendingOffsets(group_id, tuple(records))], lambda: self._apply_pending(group_id, records)
                )
            except StoreWriteError:
                return [STORE_FAILURE if e is ErrorCode.none else e for e in results]
        return results

    def _apply_pending(self, group_id: str, records: Sequence[PendingOffset]) -> None:
        if group_id not in self._state.groups:
            log.info("creating simple consumer group %s via transactional offset commit", group_id)
            self._state.groups[group_id] = self._state.new_group(group_id)
        self._state.pending.put(group_id, records)

    # -- transaction markers -----------------------------------------------------------------------
    async def complete_transaction(self, producer_id: int, commit: bool, in_partition: Callable[[str], bool]) -> ErrorCode:
        """Settle the producer's pending offsets in every group of one ``__consumer_offsets`` partition
        (``in_partition`` says which groups hash to it): COMMIT makes them committed offsets, ABORT
        drops them; durably, then in memory. NONE also when nothing is pending (markers are retried).

        The store, not only memory, says which groups have offsets pending, so a marker that arrives
        while the partition's groups are still loading here, or already moved away, gets
        COORDINATOR_LOAD_IN_PROGRESS or NOT_COORDINATOR (Kafka's broker answers the transaction
        coordinator NOT_LEADER_OR_FOLLOWER for those, and it sends the marker again) instead of being
        lost. A store that cannot be read or written answers STORE_FAILURE (retriable).
        """
        state = self._state
        if not state.active:
            return ErrorCode.coordinator_not_available
        try:
            stored = await self._run_blocking(self._store.load_pending, producer_id)
        except Exception as exc:
            log.error("reading the pending offsets of producer id %d failed: %s", producer_id, exc)
            return STORE_FAILURE
        group_ids = sorted(g for g in set(stored).union(state.pending.groups_of(producer_id)) if in_partition(g))
        for group_id in group_ids:
            unavailable = state.unavailable(group_id)
            if unavailable is not None:
                return unavailable
        if not group_ids:
            return ErrorCode.none
        try:
            await state.writer.submit(
                [CompleteTransaction(group_id, producer_id, commit) for group_id in group_ids],
                lambda: self._apply_completion(group_ids, producer_id, commit),
            )
        except StoreWriteError:
            return STORE_FAILURE
        return ErrorCode.none

    def _apply_completion(self, group_ids: Sequence[str], producer_id: int, commit: bool) -> None:
        state = self._state
        for group_id in group_ids:
            if group_id not in state.groups:
                continue  # deleted (with its pending offsets) meanwhile
            applied = state.pending.complete(group_id, producer_id, commit, state.offsets.setdefault(group_id, {}))
            if not state.offsets[group_id]:
                del state.offsets[group_id]
            log.debug(
                "group %s: transaction of producer id %d %s (%d offsets applied)",
                group_id, producer_id, "committed" if commit else "aborted", applied,
            )

    def has_pending(self, group_id: str, topic: str, partition: int) -> bool:
        """Whether an open transaction has an offset of the partition pending in the group."""
        return self._state.pending.has(group_id, topic, partition)
