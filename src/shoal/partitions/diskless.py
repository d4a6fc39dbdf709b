"""Diskless partitions (KIP-1163) behind the partition interface: batches go to the broker's WAL
appender and are answered at commit; reads, offsets and deletions go through the Batch
Coordinator (KIP-1164) and object storage. The retention task, the object cleaner and the log
cleaner (compacted topics) run here because they keep these partitions' storage in shape."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from shoal.cache_replicas.manager import CacheReplicas
from shoal.coordinator.api import (
    BatchCoordinator,
    CommitBatchResponse,
    CreateTopicAndPartitionsRequest,
    DeleteRecordsRequest,
    ListOffsetsRequest,
    ListOffsetsResponse,
    ListOffsetsTimestamp,
    TopicIdPartition,
    TxnControl,
)
from shoal.diskless.append import Appender
from shoal.diskless.periodic import PeriodicTask
from shoal.diskless.read import DisklessReader, PartitionRead, exact_timestamp_offset
from shoal.metadata.image import MetadataImage, TopicImage
from shoal.partitions.api import (
    ActiveProducer,
    AppendOutcome,
    DeleteOutcome,
    EpochEndOutcome,
    IsolationLevel,
    KindRead,
    MarkerWrite,
    OffsetOutcome,
    PartitionRef,
    PartitionState,
    ProduceOptions,
    ProducersOutcome,
    ReadOutcome,
    ValidatedRecords,
)
from shoal.protocol.errors import ErrorCode, KafkaError
from shoal.records.batch import read_header
from shoal.records.control import build_end_txn_marker
from shoal.records.types import TimestampType
from shoal.remote_log.manager import RemoteLogManager, is_tiered
from shoal.tiered.api import TopicIdPartition as TieredKey

log = logging.getLogger(__name__)


def coordinator_key(partition: PartitionRef) -> TopicIdPartition:
    return TopicIdPartition(partition.topic.topic_id, partition.partition, partition.name)


def tiered_key(partition: PartitionRef) -> TieredKey:
    return TieredKey(partition.topic.topic_id, partition.partition, partition.name)


def epoch_of(ref: PartitionRef) -> int:
    """A diskless partition has one leader epoch, the image's: every offset is in it."""
    return ref.topic.partitions[ref.partition].leader_epoch


class DisklessPartitions:
    name = "diskless"

    def __init__(
        self,
        coordinator: BatchCoordinator,  # every implementation is also a CoordinatorInspector (sizes)
        appender: Appender,
        reader: DisklessReader,
        tasks: Sequence[PeriodicTask],
        run_blocking: Callable[..., Awaitable[Any]],
        image: Callable[[], MetadataImage],
        caches: CacheReplicas | None = None,
        remote: RemoteLogManager | None = None,
    ) -> None:
        self._image = image
        #: Tiered storage (KIP-1163 "Moving to Tiered Storage"), when ``remote.log.storage.system.enable``.
        self._remote = remote
        self._caches = caches
        self._coordinator = coordinator
        self._appender = appender
        self._reader = reader
        #: Retention, the object cleaner and the log cleaner: periodic rounds on the event loop.
        self._tasks = list(tasks)
        self._run_blocking = run_blocking

    async def start(self) -> None:
        await self.ensure_topics([t for t in self._image().topics_by_name.values() if t.is_diskless])
        self._appender.start()
        if self._caches is not None:
            await self._caches.start()
        for task in self._tasks:
            task.start()

    async def stop(self) -> None:
        # Flushes the active WAL segment and waits for its upload and commit, so every
        # request already accepted is answered with its real outcome.
        await self._appender.close()
        if self._caches is not None:
            await self._caches.stop()
        for task in self._tasks:
            await task.stop()

    async def ensure_topics(self, topics: Sequence[TopicImage]) -> None:
        """Make sure every diskless topic of the metadata log has its logs in the coordinator
        (a crash between the metadata write and the coordinator write heals here)."""
        wanted = {CreateTopicAndPartitionsRequest(t.topic_id, t.name, len(t.partitions)) for t in topics}
        if wanted:
            await self._run_blocking(self._coordinator.create_topic_and_partitions, wanted)

    # ------------------------------------------------------------------------------------ data

    def append(
        self, partition: PartitionRef, records: ValidatedRecords, options: ProduceOptions | None = None
    ) -> Awaitable[AppendOutcome]:
        tp = coordinator_key(partition)
        futures = [
            self._appender.append(tp, records.records[position : position + header.size], header,
                                  records.timestamp_type)
            for position, header in records.batches
        ]
        return _settle(futures)

    async def read(
        self, reads: Sequence[KindRead], max_bytes: int, min_one_batch: bool, *, fresh_since_ms: int | None = None
    ) -> list[ReadOutcome]:
        """Replicas' Fetches are answered with no records (the leader notes where their caches
        end); consumers' reads come from this broker's cache replica when it is in sync and holds
        the offset, else straight from object storage (KIP-1163 "Consume path"). At the cache's end
        the cache answers "nothing new" (the long-poll waits for it to grow), except on the
        long-poll's last pass (``fresh_since_ms``) when it has not caught up with the coordinator
        since the fetch began: then object storage is asked, so a lagging cache never holds back a
        record acknowledged before the fetch longer than the fetch's max wait."""
        answers: dict[int, ReadOutcome] = {}
        direct: list[int] = []
        used = 0
        for i, r in enumerate(reads):
            if r.replica_id >= 0:
                answers[i] = self._replica_fetch(r)
                continue
            committed = r.isolation == IsolationLevel.READ_COMMITTED
            cached = (
                self._caches.read(r.partition.wake_key, r.fetch_offset, min(r.max_bytes, max(max_bytes - used, 0)),
                                  min_one_batch and used == 0, caught_up_since_ms=fresh_since_ms,
                                  read_committed=committed)
                if self._caches is not None else None
            )
            if cached is None:
                direct.append(i)
                continue
            answers[i] = ReadOutcome(ErrorCode.none, cached.high_watermark, cached.last_stable_offset,
                                     cached.log_start_offset, cached.records, from_cache=True,
                                     aborted_transactions=cached.aborted_transactions if committed else None)
            used += len(cached.records)
        if direct:
            # The coordinator always returns the first batch: Kafka's min-one rule holds by itself.
            try:
                results = await self._reader.read(
                    [(coordinator_key(reads[i].partition), reads[i].fetch_offset, reads[i].max_bytes) for i in direct],
                    max(max_bytes - used, 0),
                    read_committed=[reads[i].isolation == IsolationLevel.READ_COMMITTED for i in direct],
                )
            except Exception as exc:  # object storage or coordinator unreachable: retriable, keep the connection
                log.warning("diskless read failed, answering KAFKA_STORAGE_ERROR: %s: %s", type(exc).__name__, exc)
                results = [PartitionRead(ErrorCode.kafka_storage_error, -1, -1, b"") for _ in direct]
            for i, result in zip(direct, results, strict=True):
                if result.error == ErrorCode.offset_moved_to_tiered_storage:
                    answers[i] = await self._remote_read(reads[i], result, max(max_bytes - used, 0),
                                                         min_one_batch and used == 0)
                else:
                    stable = result.last_stable_offset if result.last_stable_offset >= 0 else result.high_watermark
                    committed = reads[i].isolation == IsolationLevel.READ_COMMITTED and result.error == ErrorCode.none
                    answers[i] = ReadOutcome(result.error, result.high_watermark, stable, result.log_start_offset,
                                             result.records,
                                             aborted_transactions=result.aborted_transactions if committed else None)
                used += len(answers[i].records)
        return [_isolated(r, answers[i]) for i, r in enumerate(reads)]

    async def _remote_read(self, r: KindRead, found: PartitionRead, max_bytes: int, min_one: bool) -> ReadOutcome:
        """The coordinator no longer holds the offset's batches: they are in tiered segments."""
        hw, start = found.high_watermark, found.log_start_offset
        if self._remote is None:  # tiered by a broker with tiered storage on; this one has it off
            return ReadOutcome(ErrorCode.kafka_storage_error, hw, hw, start)
        if not is_tiered(r.partition.topic):
            # Tiering was turned off with remote.log.delete.on.disable (KIP-950): remote data is
            # refused while it is deleted; the log start moves to the first batch left.
            return ReadOutcome(ErrorCode.offset_out_of_range, hw, hw, start)
        try:
            remote = await self._remote.read(tiered_key(r.partition), r.fetch_offset,
                                             min(r.max_bytes, max_bytes), min_one, start)
        except Exception as exc:  # remote storage or its metadata failed: retriable
            log.warning("remote read of %s-%d at %d failed: %s: %s", r.partition.name, r.partition.partition,
                        r.fetch_offset, type(exc).__name__, exc)
            return ReadOutcome(ErrorCode.kafka_storage_error, hw, hw, start)
        if remote is None:  # expired meanwhile: the log start moves past it next
            return ReadOutcome(ErrorCode.offset_out_of_range, hw, hw, start)
        stable = found.last_stable_offset if found.last_stable_offset >= 0 else hw
        return ReadOutcome(ErrorCode.none, hw, stable, start, remote[0])

    def _replica_fetch(self, r: KindRead) -> ReadOutcome:
        """A replica reports where its cache ends; the leader answers with no records."""
        if self._caches is None:
            return ReadOutcome(ErrorCode.not_leader_or_follower)
        error, hw, log_start = self._caches.follower_fetch(r.partition.wake_key, r.replica_id, r.fetch_offset)
        return ReadOutcome(error, hw, hw, log_start) if error == ErrorCode.none else ReadOutcome(error)

    async def list_offsets(
        self, lookups: Sequence[tuple[PartitionRef, int]], isolation: IsolationLevel | None = IsolationLevel.READ_UNCOMMITTED
    ) -> list[OffsetOutcome]:
        """The coordinator answers, refined to the record; on a tiered topic (-5) latest tiered and
        time lookups into data already moved come from the remote segments. With READ_COMMITTED the
        coordinator answers latest with the last stable offset and bounds time lookups by it (the
        coordinator knows only committed batches: log end = high watermark)."""
        outcomes: list[OffsetOutcome | None] = [None] * len(lookups)
        if self._remote is not None:
            for i, (ref, timestamp) in enumerate(lookups):
                if is_tiered(ref.topic):
                    outcomes[i] = await self._tiered_offset(ref, timestamp)
        rest = [i for i, found in enumerate(outcomes) if found is None]
        if rest:
            committed = isolation == IsolationLevel.READ_COMMITTED
            for i, found in zip(
                rest, await self._coordinator_offsets([lookups[i] for i in rest], read_committed=committed), strict=True
            ):
                outcomes[i] = found
        return [found for found in outcomes if found is not None]

    async def _tiered_offset(self, ref: PartitionRef, timestamp: int) -> OffsetOutcome | None:
        """Latest tiered (-5): the highest offset copied (-1: none); a time lookup looks at the
        remote segments first (they hold the oldest records). None: the coordinator answers."""
        assert self._remote is not None
        tp = tiered_key(ref)
        try:
            if timestamp == ListOffsetsTimestamp.LATEST_TIERED:
                highest = await self._remote.highest_copied(tp)
                return OffsetOutcome(ErrorCode.none, -1, highest, epoch_of(ref) if highest >= 0 else -1)
            if timestamp >= 0:
                found = await self._remote.offset_for_timestamp(tp, timestamp)
                if found is None:
                    return None
                (local,) = await self._coordinator_offsets([(ref, ListOffsetsTimestamp.EARLIEST_LOCAL)])
                if local.error == ErrorCode.none and found[0] < local.offset:
                    return OffsetOutcome(ErrorCode.none, found[1], found[0], epoch_of(ref))
        except Exception as exc:  # remote storage or its metadata failed: retriable
            log.warning("ListOffsets of %s-%d in tiered storage failed: %s: %s", ref.name, ref.partition,
                        type(exc).__name__, exc)
            return OffsetOutcome(ErrorCode.kafka_storage_error)
        return None

    async def _coordinator_offsets(
        self, lookups: Sequence[tuple[PartitionRef, int]], *, read_committed: bool = False
    ) -> list[OffsetOutcome]:
        requests = [
            ListOffsetsRequest(coordinator_key(ref), timestamp, read_committed=read_committed)
            for ref, timestamp in lookups
        ]
        try:
            answers = await self._run_blocking(self._coordinator.list_offsets, requests)
        except Exception as exc:  # coordinator unreachable: retriable, keep the connection
            log.warning("ListOffsets on the Batch Coordinator failed: %s: %s", type(exc).__name__, exc)
            answers = [ListOffsetsResponse(ErrorCode.kafka_storage_error, r.topic_id_partition, -1, -1)
                       for r in requests]
        # The coordinator knows batches; ListOffsets answers records: read the batch to find the record.
        refined = await asyncio.gather(
            *(
                exact_timestamp_offset(self._reader, request.topic_id_partition, answer.offset, request.timestamp)
                if answer.errors == ErrorCode.none and answer.offset >= 0
                and (request.timestamp >= 0 or request.timestamp == ListOffsetsTimestamp.MAX_TIMESTAMP)
                else _none()
                for request, answer in zip(requests, answers, strict=True)
            ),
            return_exceptions=True,
        )
        outcomes = []
        for (ref, _), answer, exact in zip(lookups, answers, refined, strict=True):
            if isinstance(exact, BaseException):
                # The batch could not be read or decoded: a batch-level answer could be an earlier
                # record than Kafka's, so say what failed instead (KAFKA_STORAGE_ERROR is retriable).
                code = exact.code if isinstance(exact, KafkaError) else ErrorCode.kafka_storage_error
                log.warning(
                    "ListOffsets on %s-%d: reading the batch at offset %d failed, answering %s: %s: %s",
                    ref.name, ref.partition, answer.offset, code.name, type(exact).__name__, exact,
                )
                outcomes.append(OffsetOutcome(code))
            elif exact is None:  # the batch was deleted meanwhile: the batch-level answer stands
                outcomes.append(OffsetOutcome(answer.errors, answer.timestamp, answer.offset, epoch_of(ref)))
            else:
                offset, timestamp = exact
                outcomes.append(OffsetOutcome(answer.errors, timestamp, offset, epoch_of(ref)))
        return outcomes

    async def write_txn_markers(self, writes: Sequence[MarkerWrite], timeout_ms: int) -> list[AppendOutcome]:
        """A marker is a control batch built as Kafka builds it, uploaded in the next WAL segment
        like any batch and committed with its result: the Batch Coordinator then ends the
        producer's transaction on the partition (the last stable offset moves; an ABORT is kept
        for READ_COMMITTED reads), fencing a deposed coordinator (TRANSACTION_COORDINATOR_FENCED)
        or an older producer epoch (INVALID_PRODUCER_EPOCH) as a classic leader does. Any broker
        writes a diskless partition's marker; the answer comes once it is committed."""
        now = int(time.time() * 1000)
        waits = []
        for w in writes:
            m = w.marker
            data = build_end_txn_marker(
                m.commit, producer_id=m.producer_id, producer_epoch=m.producer_epoch,
                coordinator_epoch=m.coordinator_epoch, timestamp=now,
            )
            try:
                future = self._appender.append(
                    coordinator_key(w.partition), data, read_header(data), w.timestamp_type,
                    control=TxnControl(m.commit, m.coordinator_epoch),
                )
            except KafkaError as exc:
                waits.append(_failed(exc))
                continue
            waits.append(_settle([future]))
        return list(await asyncio.gather(*waits))

    async def delete_records(self, deletes: Sequence[tuple[PartitionRef, int]]) -> list[DeleteOutcome]:
        requests = [DeleteRecordsRequest(coordinator_key(ref), offset) for ref, offset in deletes]
        answers = await self._run_blocking(self._coordinator.delete_records, requests)
        if self._remote is not None and any(is_tiered(ref.topic) for ref, _ in deletes):
            self._remote.poke()  # remote segments below the new log start go
        return [DeleteOutcome(a.errors, a.low_watermark) for a in answers]

    async def end_offsets_for_epochs(self, lookups: Sequence[tuple[PartitionRef, int]]) -> list[EpochEndOutcome]:
        """A diskless log is never truncated and has one leader epoch (the image's): an epoch up to
        it ends at the log end, so a consumer validating its position (KIP-320) never sees a
        truncation; an epoch above it is undefined, as in Kafka."""
        latest = await self.list_offsets([(ref, ListOffsetsTimestamp.LATEST) for ref, _ in lookups])
        outcomes = []
        for (ref, epoch), end in zip(lookups, latest, strict=True):
            current = ref.topic.partitions[ref.partition].leader_epoch
            if end.error != ErrorCode.none:
                outcomes.append(EpochEndOutcome(end.error))
            elif epoch < 0 or epoch > current:
                outcomes.append(EpochEndOutcome(ErrorCode.none))
            else:
                outcomes.append(EpochEndOutcome(ErrorCode.none, epoch, end.offset))
        return outcomes

    async def describe(self, partitions: Sequence[PartitionRef]) -> list[PartitionState]:
        earliest = await self.list_offsets([(p, ListOffsetsTimestamp.EARLIEST) for p in partitions])
        latest = await self.list_offsets([(p, ListOffsetsTimestamp.LATEST) for p in partitions])
        sizes: dict[tuple[Any, int], int] = {}
        for topic_id in {p.topic.topic_id for p in partitions}:
            described = await self._run_blocking(self._coordinator.describe_topic, topic_id)
            for d in described.partitions if described is not None else ():
                sizes[(topic_id, d.partition)] = d.byte_size
        states = []
        for p, start, end in zip(partitions, earliest, latest, strict=True):
            error = start.error if start.error != ErrorCode.none else end.error
            if error != ErrorCode.none:
                states.append(PartitionState(error))
                continue
            # Diskless partitions have no uncommitted tail: the log end is the high watermark.
            states.append(PartitionState(ErrorCode.none, start.offset, end.offset, end.offset,
                                         sizes.get((p.topic.topic_id, p.partition), -1)))
        return states

    # ---------------------------------------------------------------------------------- topics

    async def create_topic(self, topic: TopicImage, *, is_new: bool) -> None:
        await self.ensure_topics([topic])

    async def add_partitions(self, topic: TopicImage, partitions: Sequence[int]) -> None:
        """The coordinator creates the logs it lacks (KIP-1164's createTopicAndPartitions is
        idempotent: existing partitions keep their offsets)."""
        await self.ensure_topics([topic])

    async def delete_topic(self, topic: TopicImage) -> None:
        await self._run_blocking(self._coordinator.delete_topics, {topic.topic_id})

    def topic_config_changed(self, topic: TopicImage) -> None:
        """Diskless topics read their configs from the image at each use (cache logs take theirs
        in ``publish``)."""

    async def publish(self, image: MetadataImage) -> None:
        """Any broker serves every diskless partition; the replicas placed here keep caches."""
        if self._caches is not None:
            await self._caches.publish(image)

    async def describe_producers(self, partitions: Sequence[PartitionRef]) -> list[ProducersOutcome]:
        """The producers the Batch Coordinator knows on each partition (their last batches, epochs,
        ongoing transaction), so ``kafka-transactions.sh find-hanging`` sees diskless partitions too.
        Any broker answers, as every broker serves every diskless partition; the coordinator
        unreachable is KAFKA_STORAGE_ERROR for that partition (retriable), one it does not know
        UNKNOWN_TOPIC_OR_PARTITION (the image has it, the coordinator not yet)."""
        outcomes = []
        for ref in partitions:
            try:
                entries = await self._run_blocking(
                    self._coordinator.describe_producers, ref.topic.topic_id, ref.partition
                )
            except Exception as exc:  # coordinator unreachable: retriable, keep the connection
                log.warning("DescribeProducers of %s-%d on the Batch Coordinator failed: %s: %s",
                            ref.name, ref.partition, type(exc).__name__, exc)
                outcomes.append(ProducersOutcome(ErrorCode.kafka_storage_error, "Batch Coordinator unavailable"))
                continue
            if entries is None:
                outcomes.append(ProducersOutcome(ErrorCode.unknown_topic_or_partition))
                continue
            producers = tuple(
                ActiveProducer(e.producer_id, e.producer_epoch, e.last_sequence, e.last_timestamp,
                               e.coordinator_epoch, e.current_txn_start_offset)
                for e in entries
            )
            outcomes.append(ProducersOutcome(ErrorCode.none, producers=producers))
        return outcomes


async def _none() -> None:
    return None


async def _failed(exc: KafkaError) -> AppendOutcome:
    return AppendOutcome().fail(exc.code, exc.message)


async def _settle(futures: list[asyncio.Future[CommitBatchResponse]]) -> AppendOutcome:
    """Wait for every batch of the partition to commit; the answer is the first batch's offset."""
    outcome = AppendOutcome()
    if not futures:
        return outcome
    outcomes = await asyncio.gather(*futures, return_exceptions=True)
    for result in outcomes:
        if isinstance(result, KafkaError):
            return outcome.fail(result.code, result.message)
        if isinstance(result, BaseException):
            return outcome.fail(ErrorCode.unknown_server_error, str(result))
        if result.errors != ErrorCode.none:
            return outcome.fail(result.errors, None)
    first = outcomes[0]
    assert isinstance(first, CommitBatchResponse)
    outcome.base_offset = first.assigned_base_offset
    outcome.log_start_offset = first.log_start_offset
    if first.request.message_timestamp_type == TimestampType.LOG_APPEND_TIME:
        outcome.log_append_time = first.log_append_time
    return outcome


def _isolated(read: KindRead, outcome: ReadOutcome) -> ReadOutcome:
    """A READ_COMMITTED answer always lists its aborted transactions (Kafka's empty list, not
    null), also when they came from tiered segments, which do not list them yet."""
    if read.isolation != IsolationLevel.READ_COMMITTED or read.replica_id >= 0 or outcome.error != ErrorCode.none:
        return outcome
    if outcome.aborted_transactions is not None:
        return outcome
    return dataclasses.replace(outcome, aborted_transactions=())
