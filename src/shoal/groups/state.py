"""What every part of the group coordinator shares: the groups, their committed offsets and pending
transactional offsets, which groups this broker owns, the clock, the timers and the store writer.

All of it lives on the event loop and only code running there (request handlers, timer
callbacks, completed writes) changes it, so no locks are needed. Every request path asks
``unavailable`` first, so whether this broker serves a group right now is decided in one place.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

from shoal.groups.config import GroupConfig
from shoal.groups.group import ClassicGroup, GroupState, JoinResponse, SyncResponse
from shoal.groups.pending import PendingOffsets
from shoal.groups.stored import stored_group
from shoal.groups.timer import Timer
from shoal.groups.writer import StoreWriter
from shoal.protocol.errors import ErrorCode
from shoal.store.groups import CommittedOffset, PutGroup

#: What a commit gets when its write did not reach the store: retriable, the consumer tries again.
STORE_FAILURE = ErrorCode.coordinator_not_available


# Timer keys: scheduling a key again replaces its deadline.
def join_key(group_id: str) -> tuple[str, str]:
    return ("join", group_id)


def sync_key(group_id: str) -> tuple[str, str]:
    return ("sync", group_id)


def heartbeat_key(group_id: str, member_id: str) -> tuple[str, str, str]:
    return ("heartbeat", group_id, member_id)


def owns_every_group(group_id: str) -> bool:
    """A single broker coordinates every group."""
    return True


class CoordinatorState:
    def __init__(
        self,
        config: GroupConfig,
        writer: StoreWriter,
        timer: Timer,
        now_ms: Callable[[], int],
        topic_id_of: Callable[[str], uuid.UUID | None],
    ) -> None:
        self.config = config
        self.writer = writer
        self.timer = timer
        self.now_ms = now_ms
        self.topic_id_of = topic_id_of
        self.groups: dict[str, ClassicGroup] = {}
        self.offsets: dict[str, dict[tuple[str, int], CommittedOffset]] = {}
        #: TxnOffsetCommit offsets awaiting their transaction's marker.
        self.pending = PendingOffsets()
        #: Loaded and not closed: requests are served only while set.
        self.active = False
        #: The groups this broker coordinates (in a cluster, those of the offsets partitions it leads).
        self.owns: Callable[[str], bool] = owns_every_group
        #: While groups newly owned are being read from the store: which ones (they are not served yet).
        self.loading: Callable[[str], bool] | None = None

    def unavailable(self, group_id: str) -> ErrorCode | None:
        """Why a request about this group cannot be served here right now, or None when it can.

        COORDINATOR_NOT_AVAILABLE before loading and after closing; NOT_COORDINATOR for a group
        another broker coordinates (the client looks the coordinator up again); and
        COORDINATOR_LOAD_IN_PROGRESS while the group is being read from the store (the client
        retries here), as Kafka answers while it replays an offsets partition it just took over.
        """
        if not self.active:
            return ErrorCode.coordinator_not_available
        if not self.owns(group_id):
            return ErrorCode.not_coordinator
        if self.loading is not None and self.loading(group_id):
            return ErrorCode.coordinator_load_in_progress
        return None

    def new_group(self, group_id: str) -> ClassicGroup:
        return ClassicGroup(group_id, state_timestamp_ms=self.now_ms())

    def is_live(self, offset: CommittedOffset) -> bool:
        """False once the topic was deleted (or deleted and created again): its offsets are gone in Kafka."""
        current = self.topic_id_of(offset.topic)
        return current is not None and (offset.topic_id is None or offset.topic_id == current)

    def forget_group(self, group: ClassicGroup) -> None:
        """Drop the group, its offsets (committed and pending) and its deadlines from memory (the caller
        deletes it from the store, or another broker takes it over)."""
        group.transition_to(GroupState.DEAD, self.now_ms())
        del self.groups[group.group_id]
        self.offsets.pop(group.group_id, None)
        self.pending.forget(group.group_id)
        self.cancel_deadlines(group)

    def cancel_deadlines(self, group: ClassicGroup) -> None:
        """Cancel the group's join and sync phase deadlines and its members' sessions."""
        self.timer.cancel(join_key(group.group_id))
        self.timer.cancel(sync_key(group.group_id))
        for member_id in list(group.members) + list(group.pending_join_members):
            self.timer.cancel(heartbeat_key(group.group_id, member_id))

    def answer_parked_not_coordinator(self, group: ClassicGroup) -> None:
        """Answer the members' parked JoinGroup and SyncGroup NOT_COORDINATOR: this broker stops serving the
        group (it closes, or the group moved to another broker), so the clients look the coordinator up again."""
        for member in list(group.members.values()):
            group.complete_join(member, JoinResponse(ErrorCode.not_coordinator, member.member_id))
            group.complete_sync(member, SyncResponse(ErrorCode.not_coordinator))

    def persist_group(self, group: ClassicGroup) -> None:
        """Store the group's metadata without anyone waiting for it (a failure is only logged, as in Kafka:
        the previous generation comes back after a restart and its members simply rejoin)."""
        self.writer.submit([PutGroup(stored_group(group))])
