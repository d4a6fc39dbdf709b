"""The one seam request handlers call for any partition (Kafka's ReplicaManager).

It takes whole requests across topics and partitions of mixed kinds, resolves each partition
against the metadata image, asks "may this broker answer for it", validates what producers
send, and dispatches to the partition's kind. Answers are per partition and in request order.
Produce requests that mix kinds are answered when every partition may be acknowledged
(KIP-1163); Fetch long-polls until ``min_bytes`` arrive on any of its partitions.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

from shoal.cluster.placement import diskless_read_replica, preferred_read_replica
from shoal.config import Config
from shoal.metadata.image import MetadataImage, TopicImage
from shoal.observability.metrics import BrokerMetrics
from shoal.partitions.api import (
    AppendOutcome,
    AppendRequest,
    DeleteOutcome,
    EpochEndOutcome,
    FetchOptions,
    IsolationLevel,
    KindRead,
    MarkerWrite,
    OffsetOutcome,
    PartitionKind,
    PartitionRef,
    PartitionState,
    ProduceOptions,
    ProducersOutcome,
    ReadOutcome,
    ReadRequest,
    TxnMarker,
    ValidatedRecords,
)
from shoal.partitions.classic import ClassicPartitions
from shoal.partitions.notify import CommitNotifier
from shoal.partitions.refusals import check_leader_epoch, unknown_partition
from shoal.partitions.transactions import (
    GROUP_METADATA_TOPIC,
    GroupMarkers,
    TransactionGate,
    VerifyTransaction,
)
from shoal.partitions.validation import RecordValidator, TopicRules
from shoal.protocol.errors import ErrorCode, KafkaError, RecordValidationError

log = logging.getLogger(__name__)

# Even when our own commits would wake a long-poll, re-read this often for records that other
# brokers commit (diskless partitions are written by every broker).
REMOTE_COMMIT_POLL_S = 0.5

# Flushes of acks=0 requests: nobody waits for them, but they must run (and not be collected).
_background: set[asyncio.Future[Any]] = set()

T = TypeVar("T")
Outcome = TypeVar("Outcome")



class Partitions:
    """Append, read, list offsets, delete records, create/delete/describe for every partition."""

    def __init__(
        self,
        config: Config,
        image: Callable[[], MetadataImage],
        kinds: Mapping[str, PartitionKind],
        classic: ClassicPartitions,
        notifier: CommitNotifier,
        metrics: BrokerMetrics,
    ) -> None:
        self._config = config
        self._node_id: int = config["node.id"]
        self._image = image
        self._kinds = kinds
        self._classic = classic
        self._notifier = notifier
        self._metrics = metrics
        self._validator = RecordValidator(config)
        self._published = MetadataImage()
        self._publish_lock = asyncio.Lock()
        #: Per partition, the last append still waiting for its validation (arrival order).
        self._append_tails: dict[tuple[Any, int], asyncio.Future[None]] = {}
        self._transactions = TransactionGate()

    def serve_transactions(self, verify: VerifyTransaction, group_markers: GroupMarkers) -> None:
        """Accept transactional batches (verified with ``verify``) and route markers for
        ``__consumer_offsets`` partitions to the group coordinator (``group_markers``)."""
        self._transactions.serve(verify, group_markers)

    # ------------------------------------------------------------------------------- lifecycle

    async def start(self) -> None:
        self._published = self._image()
        for kind in self._kinds.values():
            await kind.start()

    async def publish(self, image: MetadataImage) -> None:
        """Bring this broker's storage in line with a newer image, once per change, whichever
        broker decided it (KRaft's metadata publisher): deleted topics go first (a name may come
        back with a new id), then new topics, new partitions and config changes. A failure is
        raised after every other change was applied; the change is not retried (start-up heals
        diskless topics, KIP-112 recovery classic ones)."""
        async with self._publish_lock:
            old = self._published
            if image.offset <= old.offset:
                return
            self._published = image
            errors: list[BaseException] = []

            async def attempt(step: Awaitable[None]) -> None:
                try:
                    await step
                except Exception as exc:
                    log.exception("applying a metadata change failed")
                    errors.append(exc)

            for topic_id, topic in old.topics_by_id.items():
                if topic_id not in image.topics_by_id:
                    await attempt(self.delete_topic(topic))
            for topic_id, topic in image.topics_by_id.items():
                before = old.topics_by_id.get(topic_id)
                if before is None:
                    await attempt(self.create_topic(topic, is_new=True))
                    continue
                added = sorted(set(topic.partitions) - set(before.partitions))
                if added:
                    await attempt(self.add_partitions(topic, added))
                if topic.configs != before.configs:
                    self.topic_config_changed(topic)
            for kind in self._kinds.values():
                await attempt(kind.publish(image))
            if errors:
                raise errors[0]

    async def stop(self) -> None:
        """Finish or fail every accepted append (diskless first: its answers wait on uploads)."""
        for kind in reversed(list(self._kinds.values())):
            await kind.stop()
        self._validator.close()

    # --------------------------------------------------------------------------------- routing

    def kind_of(self, topic: TopicImage) -> PartitionKind:
        return self._kinds["diskless" if topic.is_diskless else "classic"]

    def resolve(self, image: MetadataImage, topic: str, partition: int) -> PartitionRef:
        """The partition as the image has it, or UNKNOWN_TOPIC_OR_PARTITION."""
        found = image.topic(topic)
        if found is None or partition not in found.partitions:
            raise unknown_partition(topic, partition)
        ref = PartitionRef(found, partition)
        self.check_serving(ref)
        return ref

    def check_serving(self, partition: PartitionRef) -> None:
        """May this broker answer for the partition? Any broker serves a diskless partition; a
        classic one only its leader (NOT_LEADER_OR_FOLLOWER sends the client to refresh metadata)."""
        if partition.topic.is_diskless:
            return
        leader = partition.topic.partitions[partition.partition].leader
        if leader != self._node_id and self._classic.is_offline_here(partition.name, partition.partition):
            raise KafkaError(
                ErrorCode.kafka_storage_error,
                f"The replica of {partition.name}-{partition.partition} on this broker (node {self._node_id}) is "
                "on a failed log dir",
            )
        if leader != self._node_id:
            raise KafkaError(
                ErrorCode.not_leader_or_follower,
                f"This broker (node {self._node_id}) is not the leader of {partition.name}-{partition.partition}; "
                f"node {leader} is",
            )

    async def _by_kind(
        self,
        items: Sequence[tuple[PartitionRef, Any] | KafkaError],
        call: Callable[[PartitionKind, list[tuple[PartitionRef, Any]]], Awaitable[list[Outcome]]],
        on_error: Callable[[KafkaError], Outcome],
    ) -> list[Outcome]:
        """Group resolved items by kind, call each kind once, answer in the items' order."""
        groups: dict[str, list[int]] = {}
        for i, item in enumerate(items):
            if not isinstance(item, KafkaError):
                groups.setdefault(self.kind_of(item[0].topic).name, []).append(i)
        answers: dict[int, Outcome] = {
            i: on_error(item) for i, item in enumerate(items) if isinstance(item, KafkaError)
        }
        for name, indexes in groups.items():
            results = await call(self._kinds[name], [items[i] for i in indexes])  # type: ignore[misc]
            answers.update(zip(indexes, results, strict=True))
        return [answers[i] for i in range(len(items))]

    # ---------------------------------------------------------------------------------- append

    async def append(self, requests: Sequence[AppendRequest], options: ProduceOptions) -> list[AppendOutcome]:
        """Validate and append every partition's batches. With acks=0 the answers are not awaited
        (flushes still run); otherwise each answer comes when its partition may be acknowledged.

        Appends to one partition happen in the order the requests arrived, also when a big
        batch's validation finishes on a worker after a later request's (an idempotent
        producer's sequence numbers depend on it)."""
        image = self._image()
        outcomes: list[AppendOutcome] = []
        waits: list[Awaitable[AppendOutcome] | None] = []
        sizes: list[tuple[str, int, int]] = []
        for request in requests:
            outcome = AppendOutcome()
            outcomes.append(outcome)
            waits.append(None)
            sizes.append((request.topic, 0, 0))
            try:
                if options.acks not in (0, 1, -1):
                    raise KafkaError(ErrorCode.invalid_required_acks, f"acks={options.acks} is not one of 0, 1, -1")
                ref = self.resolve(image, request.topic, request.partition)
                validated = self._validator.validate(
                    ref.topic, ref.partition, request.records, options.produce_version
                )
                if isinstance(validated, ValidatedRecords):
                    self._transactions.check(ref, validated, options)
                    sizes[-1] = (request.topic, validated.size, validated.count)
                    if ref.wake_key not in self._append_tails and self._transactions.verified_already(ref, validated, options):
                        waits[-1] = self.kind_of(ref.topic).append(ref, validated, options)
                        continue
                waits[-1] = self._append_in_order(ref, validated, outcome, sizes, len(sizes) - 1, options)
            except KafkaError as exc:
                self._refused(request.topic, request.partition, options, outcome, exc)
        if options.acks == 0:
            for wait in waits:
                if wait is not None:
                    _background.add(task := asyncio.ensure_future(wait))
                    task.add_done_callback(_background.discard)
            return outcomes
        for i, wait in enumerate(waits):
            if wait is None:
                continue
            outcomes[i] = await wait
            topic, size, count = sizes[i]
            if outcomes[i].error == ErrorCode.none and size:
                self._metrics.bytes_in(topic, size, count)
        return outcomes

    def _append_in_order(
        self,
        ref: PartitionRef,
        validated: ValidatedRecords | Awaitable[ValidatedRecords],
        outcome: AppendOutcome,
        sizes: list[tuple[str, int, int]],
        index: int,
        options: ProduceOptions,
    ) -> Awaitable[AppendOutcome]:
        """Append after every earlier append to the partition that is still being validated.

        The partition's place in line is taken now (synchronously, in arrival order)."""
        key = ref.wake_key
        previous = self._append_tails.get(key)
        mine: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._append_tails[key] = mine

        async def run() -> AppendOutcome:
            try:
                try:
                    records = validated if isinstance(validated, ValidatedRecords) else await validated
                    self._transactions.check(ref, records, options)
                    guard = await self._transactions.verify(ref, records, options)
                finally:
                    if previous is not None:
                        await previous
                self._transactions.check_guard(ref, guard)
                sizes[index] = (ref.name, records.size, records.count)
                wait = self.kind_of(ref.topic).append(ref, records, options)
            except KafkaError as exc:
                self._refused(ref.name, ref.partition, options, outcome, exc)
                return outcome
            finally:
                mine.set_result(None)
                if self._append_tails.get(key) is mine:
                    del self._append_tails[key]
            return await wait

        # A task, not a bare coroutine: it must run (and free its place in line) even when
        # the request waiting for it is cancelled.
        task = asyncio.ensure_future(run())
        _background.add(task)
        task.add_done_callback(_background.discard)
        return task

    @staticmethod
    def _refused(topic: str, partition: int, options: ProduceOptions, outcome: AppendOutcome, exc: KafkaError) -> None:
        log.info(
            "rejected produce to %s-%d from %s: %s (%s)",
            topic, partition, options.client_id, exc.message, exc.code.name,
        )
        record_errors = exc.record_errors if isinstance(exc, RecordValidationError) else ()
        outcome.fail(exc.code, exc.message, record_errors)

    # ------------------------------------------------------------------------------------ read

    async def read(self, requests: Sequence[ReadRequest], options: FetchOptions) -> list[ReadOutcome]:
        """Read every partition within ``max_bytes`` (the first batch always comes, as in Kafka),
        waiting up to ``max_wait_s`` for ``min_bytes`` to arrive. READ_COMMITTED consumers get only
        records below each last stable offset, and only those count towards ``min_bytes`` (Kafka's
        DelayedFetch measures up to the LSO too); a follower broker always reads uncommitted."""
        image = self._image()
        isolation = options.isolation if options.replica_id < 0 else IsolationLevel.READ_UNCOMMITTED
        slots: list[KindRead | ReadOutcome] = []
        for r in requests:
            topic = image.topics_by_id.get(r.topic_id) if r.topic is None else image.topic(r.topic)
            if topic is None:
                by_id = r.topic is None
                slots.append(ReadOutcome(ErrorCode.unknown_topic_id if by_id else ErrorCode.unknown_topic_or_partition))
            elif r.partition not in topic.partitions:
                slots.append(ReadOutcome(ErrorCode.unknown_topic_or_partition))
            else:
                ref = PartitionRef(topic, r.partition)
                try:
                    self.check_serving(ref)
                except KafkaError as exc:
                    if not (options.follower_reads and options.replica_id < 0 and self._follows(ref)):
                        slots.append(ReadOutcome(exc.code))
                        continue
                fenced = check_leader_epoch(ref, r.current_leader_epoch)
                if fenced is not None:
                    slots.append(ReadOutcome(fenced.code))
                    continue
                elsewhere = self._read_replica_elsewhere(image, ref, options)
                if elsewhere is not None:
                    state = (await self.kind_of(topic).describe([ref]))[0]
                    slots.append(ReadOutcome(ErrorCode.none, state.high_watermark, state.high_watermark,
                                             state.log_start_offset, preferred_read_replica=elsewhere))
                    continue
                slots.append(KindRead(ref, r.fetch_offset, r.max_bytes, options.replica_id, isolation))
        reads = [s for s in slots if isinstance(s, KindRead)]
        keys = [r.partition.wake_key for r in reads]
        errors = len(reads) != len(slots)
        deadline = time.monotonic() + options.max_wait_s
        started_ms = time.time_ns() // 1_000_000
        while True:
            version = self._notifier.version(keys)
            # The last pass (the wait is over) must show what was committed before the fetch began.
            last = time.monotonic() >= deadline
            outcomes = await self._read_once(reads, options.max_bytes, fresh_since_ms=started_ms if last else None)
            total = sum(len(o.records) for o in outcomes)
            remaining = deadline - time.monotonic()
            if (
                total >= max(options.min_bytes, 1)
                or remaining <= 0
                or errors
                or any(o.error != ErrorCode.none for o in outcomes)
            ):
                break
            await self._notifier.wait(keys, min(remaining, REMOTE_COMMIT_POLL_S), version)
        for r, o in zip(reads, outcomes, strict=True):
            if o.records:
                self._metrics.bytes_out(r.partition.name, len(o.records), to_follower=options.replica_id >= 0)
                if r.partition.topic.is_diskless:
                    self._metrics.caches.fetched(len(o.records), o.from_cache, options.client_rack)
        answers = iter(outcomes)
        return [next(answers) if isinstance(s, KindRead) else s for s in slots]

    def _follows(self, ref: PartitionRef) -> bool:
        """Whether this broker holds a follower replica of the classic partition that may answer a
        consumer (KIP-392): consumers of Fetch v11+ may read from followers, below their high watermark."""
        p = ref.topic.partitions[ref.partition]
        return (
            not ref.topic.is_diskless
            and self._node_id in p.replicas
            and not self._classic.is_offline_here(ref.name, ref.partition)
        )

    def _read_replica_elsewhere(self, image: MetadataImage, ref: PartitionRef, options: FetchOptions) -> int | None:
        """KIP-392's PreferredReadReplica (with no records) for a consumer that sent its rack.
        A classic partition's leader, with ``replica.selector.class`` set, sends it to an in-sync
        replica in its rack. A diskless partition's broker, any of them, sends it to a replica in
        its rack, in-sync ones first (KIP-1163 "Consume path"), unless this broker is one."""
        if options.replica_id >= 0 or not options.client_rack:
            return None
        p = ref.topic.partitions[ref.partition]
        if ref.topic.is_diskless:
            if not options.follower_reads:
                return None  # Fetch before v11 cannot be sent elsewhere
            return diskless_read_replica(image, p, options.client_rack, self._node_id)
        if self._config["replica.selector.class"] is None or p.leader != self._node_id:
            return None
        return preferred_read_replica(image, p, options.client_rack)

    async def _read_once(
        self, reads: list[KindRead], max_bytes: int, *, fresh_since_ms: int | None = None
    ) -> list[ReadOutcome]:
        """One pass over the kinds, diskless first (its reads are batched in one coordinator
        call), each within what is left of the response's ``max_bytes``."""
        by_kind: dict[str, list[int]] = {}
        for i, r in enumerate(reads):
            by_kind.setdefault(self.kind_of(r.partition.topic).name, []).append(i)
        answers: dict[int, ReadOutcome] = {}
        used = 0
        for name in sorted(by_kind, key=lambda n: n != "diskless"):
            indexes = by_kind[name]
            results = await self._kinds[name].read(
                [reads[i] for i in indexes], max(max_bytes - used, 0), min_one_batch=used == 0, fresh_since_ms=fresh_since_ms
            )
            answers.update(zip(indexes, results, strict=True))
            used += sum(len(o.records) for o in results)
        return [answers[i] for i in range(len(reads))]

    # ------------------------------------------------------------------- offsets, delete, describe

    def _resolve_all(self, items: Sequence[tuple[str, int, T]]) -> list[tuple[PartitionRef, T] | KafkaError]:
        image = self._image()
        resolved: list[tuple[PartitionRef, T] | KafkaError] = []
        for topic, partition, value in items:
            try:
                resolved.append((self.resolve(image, topic, partition), value))
            except KafkaError as exc:
                resolved.append(exc)
        return resolved

    async def list_offsets(
        self,
        lookups: Sequence[tuple[str, int, int]],
        current_leader_epochs: Sequence[int] | None = None,
        isolation: IsolationLevel | None = IsolationLevel.READ_UNCOMMITTED,
    ) -> list[OffsetOutcome]:
        """(topic, partition, timestamp) -> offset; every special timestamp of Kafka's ListOffsets.
        With ``current_leader_epochs`` (ListOffsets v4+), a stale or future epoch is fenced (KIP-320).
        A client's ``isolation`` bounds the answers by what it may fetch (latest: the high watermark,
        READ_COMMITTED: the last stable offset); None (a replica's request) reads to the log end."""
        resolved = self._resolve_all(lookups)
        for i, epoch in enumerate(current_leader_epochs or ()):
            item = resolved[i]
            if not isinstance(item, KafkaError):
                fenced = check_leader_epoch(item[0], epoch)
                if fenced is not None:
                    resolved[i] = fenced
        return await self._by_kind(
            resolved, lambda kind, items: kind.list_offsets(items, isolation), lambda exc: OffsetOutcome(exc.code)
        )

    async def write_txn_markers(
        self, markers: Sequence[tuple[str, int, TxnMarker]], timeout_ms: int
    ) -> list[AppendOutcome]:
        """WriteTxnMarkers: append each (topic, partition, marker) on this broker, the partition's
        leader (NOT_LEADER_OR_FOLLOWER otherwise), answered per partition once the ISR has it."""
        resolved = self._resolve_all([m for m in markers if m[0] != GROUP_METADATA_TOPIC])
        for i, (topic, _, marker) in enumerate(markers):
            if topic == GROUP_METADATA_TOPIC:
                # Answered below by the group coordinator; a placeholder keeps the order.
                resolved.insert(i, KafkaError(ErrorCode.unknown_topic_or_partition))
                continue
            if not isinstance(resolved[i], KafkaError):
                # The transaction ends here: the next transactional batch is verified again.
                self._transactions.marker_written(resolved[i][0], marker.producer_id)
            if marker.transaction_version < 0 and not isinstance(resolved[i], KafkaError):
                resolved[i] = KafkaError(
                    ErrorCode.invalid_request, f"Transaction version {marker.transaction_version} is not one"
                )
        outcomes = await self._by_kind(
            resolved,
            lambda kind, items: kind.write_txn_markers(
                [MarkerWrite(ref, m, TopicRules.of(ref.topic, self._config).timestamp_type) for ref, m in items],
                timeout_ms,
            ),
            lambda exc: AppendOutcome().fail(exc.code, exc.message),
        )
        for i, (topic, partition, marker) in enumerate(markers):
            if topic == GROUP_METADATA_TOPIC:
                outcomes[i] = await self._transactions.group_marker(partition, marker)
        for (topic, partition, marker), outcome in zip(markers, outcomes, strict=True):
            if outcome.error != ErrorCode.none:
                log.info(
                    "%s marker of producer %d (epoch %d, coordinator epoch %d) for %s-%d not written: %s (%s)",
                    "COMMIT" if marker.commit else "ABORT", marker.producer_id, marker.producer_epoch,
                    marker.coordinator_epoch, topic, partition, outcome.message, outcome.error.name,
                )
        return outcomes

    async def end_offsets_for_epochs(
        self, lookups: Sequence[tuple[str, int, int, int]]
    ) -> list[EpochEndOutcome]:
        """OffsetForLeaderEpoch: (topic, partition, current leader epoch, requested epoch) -> the
        largest epoch <= the requested one and its end offset. A current leader epoch older than
        the partition's is FENCED_LEADER_EPOCH, a newer one UNKNOWN_LEADER_EPOCH (-1: not checked)."""
        resolved: list[tuple[PartitionRef, int] | KafkaError] = []
        for item in self._resolve_all([(t, p, (current, epoch)) for t, p, current, epoch in lookups]):
            if isinstance(item, KafkaError):
                resolved.append(item)
                continue
            ref, (current, epoch) = item
            fenced = check_leader_epoch(ref, current)
            resolved.append(fenced if fenced is not None else (ref, epoch))
        return await self._by_kind(
            resolved, lambda kind, items: kind.end_offsets_for_epochs(items), lambda exc: EpochEndOutcome(exc.code)
        )

    async def delete_records(self, deletes: Sequence[tuple[str, int, int]]) -> list[DeleteOutcome]:
        """(topic, partition, offset) -> the new log start offset (DeleteRecords)."""
        outcomes = await self._by_kind(
            self._resolve_all(deletes), lambda kind, items: kind.delete_records(items),
            lambda exc: DeleteOutcome(exc.code),
        )
        for (topic, partition, offset), outcome in zip(deletes, outcomes, strict=True):
            if outcome.error == ErrorCode.none:
                log.info("DeleteRecords %s-%d up to %d: log start offset now %d",
                         topic, partition, offset, outcome.low_watermark)
        return outcomes

    async def describe(self, partitions: Sequence[tuple[str, int]]) -> list[PartitionState]:
        """Log start, log end, high watermark and size of each partition."""
        return await self._by_kind(
            self._resolve_all([(t, p, None) for t, p in partitions]),
            lambda kind, items: kind.describe([ref for ref, _ in items]),
            lambda exc: PartitionState(exc.code),
        )

    # ---------------------------------------------------------------------------------- topics

    async def create_topic(self, topic: TopicImage, *, is_new: bool = True) -> None:
        """Create the storage of a topic the metadata log now has (coordinator logs or local replicas)."""
        await self.kind_of(topic).create_topic(topic, is_new=is_new)

    async def add_partitions(self, topic: TopicImage, partitions: Sequence[int]) -> None:
        """Create the storage of partitions CreatePartitions added (the image already has them)."""
        await self.kind_of(topic).add_partitions(topic, partitions)

    async def delete_topic(self, topic: TopicImage) -> None:
        await self.kind_of(topic).delete_topic(topic)
        self._metrics.forget_topic(topic.name)

    def topic_config_changed(self, topic: TopicImage) -> None:
        self.kind_of(topic).topic_config_changed(topic)

    def describe_kind(self, topic: TopicImage) -> str:
        """The topic's kind, for log lines."""
        return self.kind_of(topic).name

    # -------------------------------------------------------------------- JBOD (classic replicas)

    def offline_partitions(self) -> Mapping[tuple[str, int], str | None]:
        """Partitions whose replica on this broker sits on a failed log dir (KIP-112)."""
        return self._classic.offline_partitions()

    async def describe_log_dirs(self, partitions: list[tuple[str, int]] | None) -> list:
        return await self._classic.describe_log_dirs(partitions)

    async def alter_log_dir(self, topic: str, partition: int, log_dir: str) -> None:
        """Move a replica to another log dir (AlterReplicaLogDirs); only replicas on disk can move."""
        ref = self.resolve(self._image(), topic, partition)
        if self.kind_of(ref.topic) is not self._classic:
            raise KafkaError(
                ErrorCode.invalid_request, f"{topic} is {self.describe_kind(ref.topic)}: its data is in object storage"
            )
        await self._classic.alter_log_dir(ref, log_dir)

    # -------------------------------------------------------------------------- producer state

    async def describe_producers(self, partitions: Sequence[tuple[str, int]]) -> list[ProducersOutcome]:
        """DescribeProducers: the producers each (topic, partition) log knows on this broker. Not
        only the leader answers: as in Kafka, any replica does (the tools' ``--broker-id``), so
        there is no ``check_serving`` here; a partition the image lacks is UNKNOWN_TOPIC_OR_PARTITION."""
        image = self._image()
        resolved: list[tuple[PartitionRef, None] | KafkaError] = []
        for topic, partition in partitions:
            found = image.topic(topic)
            if found is None or partition not in found.partitions:
                resolved.append(unknown_partition(topic, partition))
            else:
                resolved.append((PartitionRef(found, partition), None))
        return await self._by_kind(
            resolved,
            lambda kind, items: kind.describe_producers([ref for ref, _ in items]),
            lambda exc: ProducersOutcome(exc.code, exc.message),
        )

