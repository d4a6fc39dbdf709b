"""Groups coming into memory from the store and leaving it again, as this broker's share of them changes.

In a cluster each group is served by exactly one broker at a time (in Kafka: the leader of
its ``__consumer_offsets`` partition, ``ownership.group_partition``). The broker decides
which groups it owns and says so through ``GroupCoordinator.set_ownership``; this module
carries the change out, the way Kafka loads an offsets partition it starts leading and
unloads one it stops leading:

- a group this broker no longer owns is refused at once (NOT_COORDINATOR), its deadlines
  stop, every write already submitted becomes durable (so the next owner reads all of it),
  then its parked JoinGroup/SyncGroup get NOT_COORDINATOR and it leaves memory;
- a group it now owns is refused with COORDINATOR_LOAD_IN_PROGRESS until it is read from
  the store and rebuilt as at start-up (members' sessions restart, an over-capacity group
  rebalances).

Changes run one at a time under one lock. Memory always holds every stored group this
broker owned throughout (it created or loaded each, and the store only changes through
it), so only groups newly owned are read; reading a group owned all along could bring
back one deleted while the store was being read.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from shoal.groups.group import ClassicGroup
from shoal.groups.rebalance import Rebalancer
from shoal.groups.state import CoordinatorState
from shoal.groups.stored import group_from_store
from shoal.groups.writer import RunBlocking, StoreWriter
from shoal.store.groups import CommittedOffset, GroupStore, PendingOffset

log = logging.getLogger(__name__)

Ownership = Callable[[str], bool]


class GroupLoader:
    def __init__(
        self,
        state: CoordinatorState,
        rebalancer: Rebalancer,
        store: GroupStore,
        writer: StoreWriter,
        run_blocking: RunBlocking,
    ) -> None:
        self._state = state
        self._rebalancer = rebalancer
        self._store = store
        self._writer = writer
        self._run_blocking = run_blocking
        #: Held while groups load or unload, and while the coordinator closes.
        self.lock = asyncio.Lock()

    async def load(self) -> None:
        """Read the groups this broker owns and start serving them (start-up)."""
        async with self.lock:
            await self._load(self._state.owns)
            self._state.active = True

    async def set_ownership(self, owns: Ownership) -> None:
        """Serve only the groups ``owns`` accepts from now on. Before ``load`` or after closing,
        only remember it."""
        async with self.lock:
            state = self._state
            previous = state.owns
            state.owns = owns
            if not state.active:
                return

            def acquired(group_id: str) -> bool:
                return owns(group_id) and not previous(group_id)

            released = [group for group_id, group in state.groups.items() if not owns(group_id)]
            state.loading = acquired
            try:
                await self._release(released)
                await self._load(acquired)
            except BaseException:
                # The newly owned groups did not load: refuse them (NOT_COORDINATOR) rather than serve
                # them as if they had never existed; asking again with the same ``owns`` retries them.
                state.owns = lambda group_id: owns(group_id) and previous(group_id)
                raise
            finally:
                state.loading = None

    async def _release(self, groups: list[ClassicGroup]) -> None:
        if not groups:
            return
        state = self._state
        for group in groups:
            state.cancel_deadlines(group)  # nothing drives a group it no longer owns
        try:
            # What was submitted before the change lands in the store (and its waiters are answered)
            # before the group is let go: the next owner reads it all.
            await self._writer.flush()
        finally:
            for group in groups:
                if state.groups.get(group.group_id) is group:
                    state.answer_parked_not_coordinator(group)
                    state.forget_group(group)
            log.info(
                "group coordinator unloaded %d groups now coordinated elsewhere: %s",
                len(groups), ", ".join(sorted(g.group_id for g in groups)),
            )

    async def _load(self, wanted: Ownership) -> None:
        """Bring the stored groups ``wanted`` accepts into memory, with their committed and pending offsets,
        unless already there. A group known only by its offsets (committed or pending) comes back as a
        simple group, as Kafka's replay of an offset commit creates one."""
        state = self._state
        stored_groups, stored_offsets = await self._run_blocking(self._store.load)
        # A second read, not the same snapshot: only a group's owner writes it, and the groups read here
        # are owned by no one else now (a previous owner flushed its writes before letting them go).
        stored_pending = await self._run_blocking(self._store.load_pending)
        groups: dict[str, ClassicGroup] = {}
        offsets: dict[str, dict[tuple[str, int], CommittedOffset]] = {}
        pending: dict[str, list[PendingOffset]] = {}
        for stored in stored_groups:
            if wanted(stored.group_id) and stored.group_id not in state.groups:
                groups[stored.group_id] = group_from_store(stored)
        for group_id, committed in stored_offsets.items():
            if not wanted(group_id) or group_id in state.groups:
                continue
            if group_id not in groups:
                groups[group_id] = state.new_group(group_id)
            offsets[group_id] = {(o.topic, o.partition): o for o in committed}
        for group_id, entries in stored_pending.items():
            if not wanted(group_id) or group_id in state.groups:
                continue
            if group_id not in groups:
                groups[group_id] = state.new_group(group_id)
            pending[group_id] = entries
        state.groups.update(groups)
        state.offsets.update(offsets)
        for group_id, entries in pending.items():
            state.pending.put(group_id, entries)
        max_size = state.config.max_size
        for group in groups.values():
            for member in group.members.values():
                self._rebalancer.reschedule_heartbeat(group, member)
            if len(group.members) > max_size:
                self._rebalancer.prepare_rebalance(
                    group,
                    f"freshly-loaded group {group.group_id} (size {len(group.members)}) is over capacity "
                    f"{max_size}; rebalancing so consumers can commit offsets",
                )
        log.info(
            "group coordinator loaded %d groups, %d committed offsets and %d pending transactional offsets",
            len(groups), sum(len(o) for o in offsets.values()), sum(len(p) for p in pending.values()),
        )
