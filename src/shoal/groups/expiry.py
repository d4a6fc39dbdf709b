"""Offset retention (``offsets.retention.minutes``, checked every ``offsets.retention.check.interval.ms``).

As in Kafka, an offset's retention counts from the moment its group became Empty, or from
its commit for a simple group (offsets only) or for a topic a Stable consumer group no
longer subscribes to; the offsets of groups in any other state do not expire. An explicit
OffsetCommit v2-4 retention time replaces that count. Offsets of deleted topics are dropped
at the next check (pending transactional ones too), and an Empty group left without offsets is
deleted. As in Kafka, an offset does not expire while a transaction has an offset of its
partition pending, nor is a group deleted while it has pending offsets: the transaction's commit
would otherwise land on a partition (or a group) retention had just removed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from shoal.groups.group import ClassicGroup, GroupState
from shoal.groups.state import CoordinatorState
from shoal.groups.writer import StoreWriteError
from shoal.store.groups import CommittedOffset, DeleteGroup, DeleteOffsets, Mutation

log = logging.getLogger(__name__)


class OffsetExpiry:
    def __init__(self, state: CoordinatorState) -> None:
        self._state = state
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._retention_loop(), name="group-offset-retention")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _retention_loop(self) -> None:
        interval = self._state.config.offsets_retention_check_interval_ms / 1000.0
        while True:
            await asyncio.sleep(interval)
            try:
                await self.cleanup_expired_offsets()
            except Exception:
                log.exception("offset retention check failed")

    async def cleanup_expired_offsets(self) -> int:
        """Expire offsets as Kafka does, forget offsets of deleted topics, and delete empty groups left
        without offsets. Returns how many offsets were removed."""
        if not self._state.active:
            return 0
        now = self._state.now_ms()
        retention_ms = self._state.config.offsets_retention_ms
        mutations: list[Mutation] = []
        removed_count = 0
        for group_id, group in list(self._state.groups.items()):
            if not self._state.owns(group_id):
                continue  # being handed to another broker (see GroupCoordinator.set_ownership): not ours to change
            offsets = self._state.offsets.get(group_id, {})
            pending = self._state.pending.of(group_id)
            base = self._expiration_base(group)
            expired: list[tuple[str, int]] = []
            kept = False
            for key, offset in offsets.items():
                if not self._state.is_live(offset):
                    expired.append(key)
                elif base is None or group.is_subscribed_to_topic(offset.topic) or any(
                    key in by_partition for by_partition in pending.values()
                ):
                    kept = True
                elif (
                    now >= offset.expire_timestamp_ms
                    if offset.expire_timestamp_ms is not None
                    else now - base(offset) >= retention_ms
                ):
                    expired.append(key)
                else:
                    kept = True
            for key in expired:
                del offsets[key]
            expired += sorted(
                {
                    key
                    for by_partition in pending.values()
                    for key, p in by_partition.items()
                    if not self._state.is_live(p.offset) and key not in offsets
                }.difference(expired)
            )
            # DeleteOffsets drops the partitions' pending offsets as well, in the store and here.
            self._state.pending.drop(group_id, expired)
            if expired:
                removed_count += len(expired)
                mutations.append(DeleteOffsets(group_id, tuple(expired)))
                log.info("expired %d offsets of group %s", len(expired), group_id)
            if group.is_in(GroupState.EMPTY) and not kept and not self._state.pending.has_group(group_id):
                log.info("group %s is empty and has no offsets left: deleting it", group_id)
                self._state.forget_group(group)
                mutations.append(DeleteGroup(group_id))
        if mutations:
            try:
                await self._state.writer.submit(mutations)
            except StoreWriteError:
                log.warning("offset retention changes were not stored; they are retried at the next check")
        return removed_count

    def _expiration_base(self, group: ClassicGroup) -> Callable[[CommittedOffset], int] | None:
        """What an offset's retention counts from for this group, or None when its offsets don't expire."""
        if group.protocol_type:
            if group.is_in(GroupState.EMPTY):
                state_ts = group.state_timestamp_ms
                return lambda o: state_ts if state_ts is not None else o.commit_timestamp_ms
            if group.uses_consumer_protocol() and group.subscribed_topics is not None and group.is_in(
                GroupState.STABLE
            ):
                return lambda o: o.commit_timestamp_ms
            return None
        # A simple group (manual assignment, offsets only): each offset expires from its commit.
        return lambda o: o.commit_timestamp_ms
