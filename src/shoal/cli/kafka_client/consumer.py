"""A synchronous consumer, enough for ``shoal consume`` and shaped like Kafka's.

Two ways to get partitions, as Kafka's consumer has:
- **subscribe** (a group id): a member of a classic consumer group (JoinGroup/SyncGroup with
  the ``range`` assignor, which every Kafka client speaks), heartbeats between fetches, starts
  each partition at the group's committed offset (else ``auto.offset.reset``), commits every
  ``auto.commit.interval.ms``, before a rebalance and when closed, and rejoins when a
  subscribed topic's partition count changes (CreatePartitions);
- **assign** (no group): fixed partitions from given offsets; nothing is committed.

``read_committed`` drops records of aborted transactions with the Fetch answer's aborted list,
as Kafka's fetcher does; control records are never returned. One thread does everything, so
heartbeats happen between fetches (a fetch waits at most ``fetch.max.wait.ms``): the caller
must keep calling ``poll``.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from shoal.cli.consumer_protocol import (
    PROTOCOL_TYPE,
    decode_assignment,
    decode_subscription_topics,
    encode_assignment,
    encode_subscription,
)
from shoal.cli.kafka_client.client import KafkaClient
from shoal.cli.kafka_client.cluster import ClusterMetadata, TopicPartition
from shoal.cli.kafka_client.errors import (
    BrokerConnectionError,
    KafkaApiError,
    KafkaClientError,
    RetriableAnswer,
)
from shoal.cli.kafka_client.fetch_apis import READ_UNCOMMITTED, FetchedPartition
from shoal.cli.kafka_client.offset_apis import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
from shoal.protocol.errors import ErrorCode, KafkaError
from shoal.records.codec import CONTROL_ABORT, Headers, control_record_type, decode_batch, iter_batches

RANGE_ASSIGNOR = "range"
_REJOIN = frozenset(
    {ErrorCode.rebalance_in_progress, ErrorCode.illegal_generation, ErrorCode.unknown_member_id,
     ErrorCode.fenced_instance_id}
)
_REFRESH_METADATA = frozenset(
    {ErrorCode.not_leader_or_follower, ErrorCode.leader_not_available, ErrorCode.unknown_topic_or_partition,
     ErrorCode.fenced_leader_epoch, ErrorCode.unknown_leader_epoch, ErrorCode.kafka_storage_error,
     ErrorCode.offset_not_available, ErrorCode.replica_not_available, ErrorCode.broker_not_available,
     ErrorCode.unknown_server_error}
)


@dataclass(frozen=True, slots=True)
class ConsumedRecord:
    topic: str
    partition: int
    offset: int
    timestamp: int
    timestamp_type: int  # 0 CreateTime, 1 LogAppendTime
    key: bytes | None
    value: bytes | None
    headers: Headers


def range_assign(
    subscriptions: Mapping[str, Iterable[str]], partitions: Mapping[str, int]
) -> dict[str, list[tuple[str, int]]]:
    """Kafka's RangeAssignor: per topic, members in id order get consecutive ranges, the first
    ``partitions % members`` one partition more."""
    result: dict[str, list[tuple[str, int]]] = {member: [] for member in subscriptions}
    topics = sorted({t for subscribed in subscriptions.values() for t in subscribed})
    for topic in topics:
        members = sorted(m for m, subscribed in subscriptions.items() if topic in subscribed)
        count = partitions.get(topic, 0)
        if not members or count <= 0:
            continue
        each, extra = divmod(count, len(members))
        for i, member in enumerate(members):
            start = i * each + min(i, extra)
            length = each + (1 if i < extra else 0)
            result[member].extend((topic, p) for p in range(start, start + length))
    return result


class Consumer:
    """Fetches from the partitions it has (subscribed through a group, or assigned)."""

    def __init__(
        self,
        client: KafkaClient,
        *,
        topics: Iterable[str] = (),
        group_id: str | None = None,
        assignment: Mapping[TopicPartition, int | None] | None = None,
        auto_offset_reset: str = "latest",
        isolation_level: int = READ_UNCOMMITTED,
        session_timeout_ms: int = 45_000,
        heartbeat_interval_ms: int = 3_000,
        rebalance_timeout_ms: int = 300_000,
        auto_commit: bool = True,
        auto_commit_interval_ms: int = 5_000,
        metadata_max_age_ms: int = 30_000,
        fetch_max_wait_ms: int = 500,
    ) -> None:
        if (group_id is None) == (assignment is None):
            raise ValueError("give either a group id (subscribe) or an assignment")
        self.client = client
        self.topics = sorted(set(topics))
        self.group_id = group_id
        self.auto_offset_reset = auto_offset_reset
        self.isolation_level = isolation_level
        self.session_timeout_ms = session_timeout_ms
        self.heartbeat_interval = heartbeat_interval_ms / 1000
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.auto_commit = auto_commit
        self.auto_commit_interval = auto_commit_interval_ms / 1000
        self.metadata_max_age = metadata_max_age_ms / 1000
        self.fetch_max_wait_ms = fetch_max_wait_ms
        self.member_id = ""
        self.generation: int | None = None
        self.positions: dict[TopicPartition, int] = {}
        self._committed: dict[TopicPartition, int] = {}
        self._metadata: ClusterMetadata | None = None
        self._metadata_at = 0.0
        self._joined_counts: dict[str, int] = {}
        self._next_heartbeat = 0.0
        self._next_commit = time.monotonic() + self.auto_commit_interval
        if assignment is not None:
            self._assign(assignment)

    # -- the loop --------------------------------------------------------------------------------
    def poll(self, timeout: float) -> list[ConsumedRecord]:
        """Records fetched within about ``timeout`` seconds (possibly none)."""
        deadline = time.monotonic() + timeout
        while True:
            if self.group_id is not None:
                self._keep_membership()
            records = self._fetch_once(max(0.0, deadline - time.monotonic()))
            if records or time.monotonic() >= deadline:
                return records

    def commit(self) -> None:
        """Commit the current positions (group mode), skipping partitions already committed there."""
        if self.group_id is None or self.generation is None:
            return
        todo = {tp: off for tp, off in self.positions.items() if self._committed.get(tp) != off}
        if not todo:
            return
        results = self.client.commit_offsets(self.group_id, todo, generation=self.generation, member_id=self.member_id)
        for tp, code in results.items():
            if code == ErrorCode.none:
                self._committed[tp] = todo[tp]
            elif code in _REJOIN:
                self._lost_membership(code)
                return
            else:
                raise KafkaApiError(code, context=f"OffsetCommit for {tp}")

    def _commit_if_auto(self) -> None:
        if self.auto_commit:
            self.commit()

    def rewind(self, records: Iterable[ConsumedRecord]) -> None:
        """Move positions back so these fetched but unused records count as not consumed."""
        for r in records:
            tp = TopicPartition(r.topic, r.partition)
            if tp in self.positions:
                self.positions[tp] = min(self.positions[tp], r.offset)

    def close(self) -> None:
        """Commit what was consumed (with auto commit) and leave the group, so the others take over at once."""
        if self.group_id is None or self.generation is None:
            return
        try:
            if self.auto_commit:
                self.commit()
        finally:
            if self.generation is not None:
                self.client.leave_group(self.group_id, self.member_id)
                self.generation = None

    # -- group membership ------------------------------------------------------------------------
    def _keep_membership(self) -> None:
        now = time.monotonic()
        if self.generation is not None and now - self._metadata_at >= self.metadata_max_age:
            self._refresh_metadata()
        if self.generation is not None and self._partition_counts() != self._joined_counts:
            self._commit_if_auto()
            self.generation = None  # a subscribed topic grew: rejoin so the leader reassigns
        if self.generation is not None and now >= self._next_heartbeat:
            code = self.client.heartbeat(self.group_id or "", self.generation, self.member_id)
            self._next_heartbeat = now + self.heartbeat_interval
            if code == ErrorCode.rebalance_in_progress:
                self._commit_if_auto()  # the old generation may still commit while the group rebalances
                self.generation = None
            elif code != ErrorCode.none:
                self._lost_membership(code)
        if self.generation is not None and now >= self._next_commit:
            self._commit_if_auto()
            self._next_commit = now + self.auto_commit_interval
        while self.generation is None:
            self._join()

    def _lost_membership(self, code: ErrorCode) -> None:
        if code in (ErrorCode.unknown_member_id, ErrorCode.fenced_instance_id):
            self.member_id = ""
        elif code not in _REJOIN:
            raise KafkaApiError(code, context=f"Group '{self.group_id}'")
        self.generation = None
        self.positions.clear()
        self._committed.clear()

    def _join(self) -> None:
        group = self.group_id or ""
        answer = self.client.join_group(
            group,
            self.member_id,
            PROTOCOL_TYPE,
            [(RANGE_ASSIGNOR, encode_subscription(self.topics))],
            session_timeout_ms=self.session_timeout_ms,
            rebalance_timeout_ms=self.rebalance_timeout_ms,
        )
        if answer.error == ErrorCode.member_id_required:
            self.member_id = answer.member_id
            return
        if answer.error in _REJOIN:
            self._lost_membership(answer.error)
            return
        if answer.error != ErrorCode.none:
            raise KafkaApiError(answer.error, context=f"JoinGroup for group '{group}'")
        self.member_id = answer.member_id
        counts = self._partition_counts(refresh=True)
        assignments: dict[str, bytes] = {}
        if answer.leader == answer.member_id:
            subscriptions = {m: decode_subscription_topics(meta) for m, meta in answer.members}
            wanted = sorted({t for topics in subscriptions.values() for t in topics})
            metadata = self.client.metadata(wanted)
            sizes = {t: len(info.partitions) for t, info in metadata.topics.items() if info.error == ErrorCode.none}
            assignments = {m: encode_assignment(parts) for m, parts in range_assign(subscriptions, sizes).items()}
        code, raw = self.client.sync_group(
            group, answer.generation, self.member_id, PROTOCOL_TYPE, answer.protocol, assignments,
            rebalance_timeout_ms=self.rebalance_timeout_ms,
        )
        if code in _REJOIN:
            self._lost_membership(code)
            return
        if code != ErrorCode.none:
            raise KafkaApiError(code, context=f"SyncGroup for group '{group}'")
        self.generation = answer.generation
        self._joined_counts = counts
        self._next_heartbeat = time.monotonic() + self.heartbeat_interval
        owned = [TopicPartition(t, p) for t, p in decode_assignment(raw).topic_partitions()]
        committed = self.client.fetch_offsets(group)
        self.positions = {}
        self._committed = {}
        start: dict[TopicPartition, int | None] = {}
        for tp in owned:
            if tp in committed:
                self._committed[tp] = committed[tp]
            start[tp] = committed.get(tp)
        self._assign(start)

    def _partition_counts(self, *, refresh: bool = False) -> dict[str, int]:
        if refresh or self._metadata is None:
            self._refresh_metadata()
        assert self._metadata is not None
        return {t: len(i.partitions) for t, i in self._metadata.topics.items() if t in self.topics}

    # -- positions and fetching ------------------------------------------------------------------
    def _refresh_metadata(self) -> None:
        wanted = sorted(set(self.topics) | {tp.topic for tp in self.positions})
        self._metadata = self.client.metadata(wanted)
        self._metadata_at = time.monotonic()

    def _assign(self, start: Mapping[TopicPartition, int | None]) -> None:
        """Set positions: given offsets, and ``auto.offset.reset`` for the rest."""
        unknown = [tp for tp, off in start.items() if off is None]
        self.positions.update({tp: off for tp, off in start.items() if off is not None})
        self._reset(unknown)

    def _reset(self, partitions: Iterable[TopicPartition]) -> None:
        todo = list(partitions)
        if not todo:
            return
        if self.auto_offset_reset not in ("earliest", "latest"):
            raise KafkaClientError(f"Undefined offset with no reset policy for partitions: {sorted(todo)}")
        stamp = EARLIEST_TIMESTAMP if self.auto_offset_reset == "earliest" else LATEST_TIMESTAMP
        for tp, listed in self.client.list_offsets(dict.fromkeys(todo, stamp)).items():
            if listed.error != ErrorCode.none:
                raise KafkaApiError(listed.error, context=f"ListOffsets for {tp}")
            self.positions[tp] = listed.offset

    def _leader(self, tp: TopicPartition) -> int:
        info = self._metadata.topics.get(tp.topic) if self._metadata else None
        part = info.partitions.get(tp.partition) if info else None
        return part.leader if part is not None else -1

    def _fetch_once(self, wait: float) -> list[ConsumedRecord]:
        if not self.positions:
            time.sleep(min(wait, self.heartbeat_interval, 0.5))
            return []
        if self._metadata is None or time.monotonic() - self._metadata_at >= self.metadata_max_age:
            self._refresh_metadata()
        by_leader: dict[int, dict[TopicPartition, int]] = {}
        for tp, offset in self.positions.items():
            by_leader.setdefault(self._leader(tp), {})[tp] = offset
        stale = bool(by_leader.pop(-1, None))
        wait_ms = max(0, min(self.fetch_max_wait_ms, int(wait * 1000)))
        records: list[ConsumedRecord] = []
        for i, (leader, positions) in enumerate(by_leader.items()):
            try:
                answers = self.client.fetch_from(  # only the first leader may hold the request for data
                    leader, positions, isolation_level=self.isolation_level, max_wait_ms=wait_ms if i == 0 else 0
                )
            except (BrokerConnectionError, RetriableAnswer):
                stale = True
                continue
            for tp, fetched in answers.items():
                if tp not in self.positions or self.positions[tp] != positions.get(tp):
                    continue  # reassigned or reset meanwhile
                if fetched.error == ErrorCode.none:
                    try:
                        records.extend(self._records(tp, fetched))
                    except KafkaError as exc:
                        raise KafkaClientError(
                            f"Received a corrupt record batch from {tp} at offset {self.positions[tp]}: {exc}"
                        ) from None
                elif fetched.error == ErrorCode.offset_out_of_range:
                    self._reset([tp])
                elif fetched.error in _REFRESH_METADATA:
                    stale = True
                else:
                    raise KafkaApiError(fetched.error, context=f"Fetch for {tp}")
        if stale:
            time.sleep(0.1)
            self._refresh_metadata()
        return records

    def _records(self, tp: TopicPartition, fetched: FetchedPartition) -> list[ConsumedRecord]:
        """The records of a fetched partition from its position on; advances the position."""
        position = self.positions[tp]
        data = fetched.records
        aborted_txns = sorted(fetched.aborted, key=lambda a: a[1])
        aborting: set[int] = set()
        out: list[ConsumedRecord] = []
        for pos, header in iter_batches(data):
            if header.last_offset < position:
                continue
            if self.isolation_level != READ_UNCOMMITTED:
                while aborted_txns and aborted_txns[0][1] <= header.last_offset:
                    aborting.add(aborted_txns.pop(0)[0])
            if header.is_control:
                if self.isolation_level != READ_UNCOMMITTED and header.producer_id in aborting:
                    _, records = decode_batch(data, pos)
                    if records and control_record_type(records[0]) == CONTROL_ABORT:
                        aborting.discard(header.producer_id)
                position = header.next_offset
                continue
            if header.is_transactional and header.producer_id in aborting:
                position = header.next_offset
                continue
            _, records = decode_batch(data, pos)
            for r in records:
                if r.offset >= position:
                    out.append(ConsumedRecord(tp.topic, tp.partition, r.offset, r.timestamp,
                                              header.timestamp_type, r.key, r.value, r.headers))
            position = header.next_offset
        self.positions[tp] = position
        return out
