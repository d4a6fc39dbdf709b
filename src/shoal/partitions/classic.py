"""Classic partitions behind the partition interface: Kafka's log segments on this broker's
JBOD log dirs, through the classic ReplicaManager (leader appends on the event loop, fsync and
file work in worker threads). Also the JBOD operations only classic replicas have: describing
log dirs and moving a replica between them (KIP-112/113)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence

from shoal.aio import wait_for
from shoal.classic.log import PartitionLog
from shoal.classic.log_list_offsets import (
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_TIMESTAMP,
    LATEST_TIERED_TIMESTAMP,
    LATEST_TIMESTAMP,
)
from shoal.classic.log_results import TimestampAndOffset
from shoal.classic.replica_manager import ReplicaManager
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
from shoal.records.batch import NO_TIMESTAMP
from shoal.records.codec import iter_batches
from shoal.remote_log.manager import RemoteLogManager, is_tiered
from shoal.tiered.api import TopicIdPartition

log = logging.getLogger(__name__)


class ClassicPartitions:
    name = "classic"

    def __init__(
        self, replicas: ReplicaManager, wake: Callable[[Iterable[tuple]], None], remote: RemoteLogManager | None = None
    ) -> None:
        self.replicas = replicas
        self._wake = wake  # long-polling fetches of a partition wake when it gets records
        #: Tiered storage (KIP-405), when ``remote.log.storage.system.enable``.
        self.remote = remote

    async def start(self) -> None:
        await self.replicas.start()
        if self.remote is not None:
            self.remote.start()

    async def stop(self) -> None:
        if self.remote is not None:
            await self.remote.stop()
        await self.replicas.stop()

    def _tiered(self, ref: PartitionRef) -> TopicIdPartition | None:
        """The partition's key in tiered storage, when its topic is tiered here."""
        if self.remote is None or not is_tiered(ref.topic):
            return None
        return TopicIdPartition(ref.topic.topic_id, ref.partition, ref.name)

    # ------------------------------------------------------------------------------------ data

    def append(
        self, partition: PartitionRef, records: ValidatedRecords, options: ProduceOptions
    ) -> Awaitable[AppendOutcome]:
        name, index = partition.name, partition.partition
        min_isr = self._min_isr(partition)
        if options.acks == -1:
            self.replicas.check_enough_replicas(name, index, min_isr)
        appended = self.replicas.append(name, index, records.records, records.batches, records.timestamp_type)
        outcome = AppendOutcome(
            base_offset=appended.base_offset,
            log_append_time=appended.log_append_time,
            log_start_offset=appended.log_start_offset,
        )
        self._wake([partition.wake_key])
        replicated = (
            self.replicas.replicated(name, index, appended.last_offset + 1, min_isr) if options.acks == -1 else None
        )
        return self._acknowledged(partition, outcome, appended.flush_needed, replicated, options.timeout_ms)

    def _min_isr(self, partition: PartitionRef) -> int:
        return self.replicas.effective_min_isr(partition.topic, partition.topic.partitions[partition.partition])

    async def _acknowledged(
        self,
        partition: PartitionRef,
        outcome: AppendOutcome,
        flush_needed: bool,
        replicated: asyncio.Future[ErrorCode] | None,
        timeout_ms: int,
    ) -> AppendOutcome:
        """Honour the topic's ``flush.messages`` (fsync before the append is acknowledged) and, with
        acks=all, wait for the ISR to have it (REQUEST_TIMED_OUT after the request's timeout)."""
        if flush_needed:
            try:
                await self.replicas.flush(partition.name, partition.partition)
            except KafkaError as exc:
                if replicated is not None:
                    replicated.cancel()
                return outcome.fail(exc.code, exc.message)
        if replicated is not None:
            try:
                code = await wait_for(replicated, max(timeout_ms, 0) / 1000)
            except TimeoutError:
                return outcome.fail(
                    ErrorCode.request_timed_out,
                    f"The in-sync replicas of {partition.name}-{partition.partition} did not all have the write "
                    f"within the request's timeout of {timeout_ms} ms",
                )
            if code == ErrorCode.not_enough_replicas_after_append:
                return outcome.fail(
                    code,
                    f"The write to {partition.name}-{partition.partition} was appended but the ISR shrank below "
                    "min.insync.replicas before it was replicated",
                )
            if code != ErrorCode.none:
                return outcome.fail(code, f"{partition.name}-{partition.partition} lost its leadership before the "
                                          "write was replicated")
        return outcome

    async def write_txn_markers(self, writes: Sequence[MarkerWrite], timeout_ms: int) -> list[AppendOutcome]:
        """WriteTxnMarkers on this broker's leaders: every marker is appended now, in request order
        (as Kafka's ``appendRecords`` with origin COORDINATOR: producer and coordinator epochs are
        checked, INVALID_PRODUCER_EPOCH or TRANSACTION_COORDINATOR_FENCED write nothing), then each
        is answered once the ISR has it (acks=all, as Kafka appends markers), or REQUEST_TIMED_OUT."""
        waits = [self._append_marker(w, timeout_ms) for w in writes]
        return list(await asyncio.gather(*waits))

    def _append_marker(self, write: MarkerWrite, timeout_ms: int) -> Awaitable[AppendOutcome]:
        ref, marker = write.partition, write.marker
        name, index = ref.name, ref.partition
        try:
            min_isr = self._min_isr(ref)
            self.replicas.check_enough_replicas(name, index, min_isr)
            # ReplicaManager has no marker append of its own: its leader state gives the log and
            # the leader epoch, as ``ReplicaManager.append`` uses them.
            state = self.replicas.replication.leader((name, index))
            appended = state.log.append_transaction_marker(
                marker.producer_id, marker.producer_epoch, marker.coordinator_epoch, marker.commit,
                state.leader_epoch, transaction_version=marker.transaction_version,
                timestamp_type=write.timestamp_type,
            )
            state.advance_high_watermark()
        except KafkaError as exc:
            return _ready(AppendOutcome().fail(exc.code, exc.message))
        outcome = AppendOutcome(base_offset=appended.base_offset, log_start_offset=appended.log_start_offset)
        self._wake([ref.wake_key])
        replicated = self.replicas.replicated(name, index, appended.last_offset + 1, min_isr)
        return self._marker_acknowledged(ref, outcome, appended.flush_needed, replicated, timeout_ms)

    async def _marker_acknowledged(
        self,
        ref: PartitionRef,
        outcome: AppendOutcome,
        flush_needed: bool,
        replicated: asyncio.Future[ErrorCode],
        timeout_ms: int,
    ) -> AppendOutcome:
        """The acks=all wait; then READ_COMMITTED long-polls wake: the high watermark passed the
        marker, so the last stable offset moved although no record arrived."""
        try:
            return await self._acknowledged(ref, outcome, flush_needed, replicated, timeout_ms)
        finally:
            self._wake([ref.wake_key])

    async def publish(self, image: MetadataImage) -> None:
        await self.replicas.apply_image(image)

    async def read(
        self, reads: Sequence[KindRead], max_bytes: int, min_one_batch: bool, *, fresh_since_ms: int | None = None
    ) -> list[ReadOutcome]:
        outcomes = []
        used = 0
        for r in reads:
            try:
                outcome = self._read_local(r, min(r.max_bytes, max(max_bytes - used, 0)), min_one_batch and used == 0)
                outcomes.append(outcome)
                used += len(outcome.records)
            except KafkaError as exc:
                tp = self._tiered(r.partition)
                if tp is not None and exc.code == ErrorCode.offset_out_of_range and r.replica_id < 0:
                    try:
                        remote = await self._remote_read(r, tp, min(r.max_bytes, max(max_bytes - used, 0)),
                                                         min_one_batch and used == 0)
                    except Exception as failure:  # remote storage or its metadata failed: retriable
                        log.warning("remote read of %s-%d at %d failed: %s: %s", r.partition.name,
                                    r.partition.partition, r.fetch_offset, type(failure).__name__, failure)
                        outcomes.append(ReadOutcome(ErrorCode.kafka_storage_error))
                        continue
                    if remote is not None:
                        outcomes.append(remote)
                        used += len(remote.records)
                        continue
                outcomes.append(await self._error(r.partition, exc, consumer=r.replica_id < 0, fetch_offset=r.fetch_offset))
        return outcomes

    def _read_local(self, r: KindRead, max_bytes: int, min_one: bool) -> ReadOutcome:
        """One partition's read from the local log. A consumer's READ_COMMITTED read stops at the
        last stable offset and lists the aborted transactions in what it returns (one lock: the
        records, the offsets and the aborted list agree); READ_UNCOMMITTED reports the LSO too, as
        Kafka always does. Followers read up to the log end whatever they asked."""
        name, index = r.partition.name, r.partition.partition
        if r.replica_id < 0 and r.isolation == IsolationLevel.READ_COMMITTED:
            c = self.replicas.get(name, index).read_committed(r.fetch_offset, max_bytes, min_one)
            return ReadOutcome(ErrorCode.none, c.high_watermark, c.last_stable_offset, c.log_start_offset,
                               bytes(c.records), aborted_transactions=tuple(c.aborted_transactions))
        result = self.replicas.read(name, index, r.fetch_offset, max_bytes, min_one_batch=min_one,
                                    replica_id=r.replica_id)
        hw = result.high_watermark
        lso = _stable(self.replicas.get(name, index), hw)
        return ReadOutcome(ErrorCode.none, hw, lso, result.log_start_offset, bytes(result.records))

    async def _remote_read(self, r: KindRead, tp: TopicIdPartition, max_bytes: int, min_one: bool) -> ReadOutcome | None:
        """A consumer's read below the local log start, from remote segments (KIP-405). Remote
        records lie below the last stable offset (only stable data is copied), so READ_COMMITTED
        reads them too; its aborted transactions come from the local ``.txnindex`` files only (those
        whose marker is still local), the remote segments' transaction indexes are not read yet."""
        assert self.remote is not None
        log_ = self.replicas.get(r.partition.name, r.partition.partition)
        if r.fetch_offset >= log_.log_start_offset:
            return None  # past the log end: OFFSET_OUT_OF_RANGE stands
        found = await self.remote.read(tp, r.fetch_offset, max_bytes, min_one, log_.log_start_offset)
        if found is None:
            return None
        records, start = found
        hw = log_.high_watermark
        lso = _stable(log_, hw)
        if r.isolation != IsolationLevel.READ_COMMITTED:
            return ReadOutcome(ErrorCode.none, hw, lso, start, records)
        upper = r.fetch_offset
        for _, header in iter_batches(records):
            upper = header.next_offset
        aborted = log_.collect_aborted_transactions(r.fetch_offset, upper) if upper > r.fetch_offset else []
        return ReadOutcome(ErrorCode.none, hw, lso, start, records, aborted_transactions=tuple(aborted))

    async def _error(
        self, partition: PartitionRef, exc: KafkaError, *, consumer: bool = True, fetch_offset: int = -1
    ) -> ReadOutcome:
        """An error answer, with the log's offsets when the log is there (OFFSET_OUT_OF_RANGE): a
        consumer of a tiered partition gets the partition's log start (remote data included); a
        follower fetching below the local log start of a tiered partition gets
        OFFSET_MOVED_TO_TIERED_STORAGE with the local log start, where it restarts its log with the
        state remote storage holds below it (as Kafka's followers do)."""
        try:
            log_ = self.replicas.get(partition.name, partition.partition)
        except KafkaError:
            return ReadOutcome(exc.code)
        start = log_.log_start_offset
        code = exc.code
        tp = self._tiered(partition)
        if tp is not None and consumer and self.remote is not None:
            start = await self.remote.log_start(tp, start)
        elif tp is not None and code == ErrorCode.offset_out_of_range and 0 <= fetch_offset < start:
            code = ErrorCode.offset_moved_to_tiered_storage
        hw = log_.high_watermark
        return ReadOutcome(code, hw, _stable(log_, hw), start)

    async def list_offsets(
        self, lookups: Sequence[tuple[PartitionRef, int]], isolation: IsolationLevel | None = IsolationLevel.READ_UNCOMMITTED
    ) -> list[OffsetOutcome]:
        outcomes = []
        for ref, timestamp in lookups:
            tp = self._tiered(ref)
            if tp is not None:
                # Remote answers lie below the local log start, so below any last fetchable offset.
                tiered = await self._tiered_offset(ref, tp, timestamp)
                if tiered is not None:
                    outcomes.append(tiered)
                    continue
            try:
                found = await self.replicas.list_offset(ref.name, ref.partition, timestamp)
                if isolation is not None:
                    found = self._fetchable(self.replicas.get(ref.name, ref.partition), timestamp, found, isolation)
            except KafkaError as exc:
                outcomes.append(OffsetOutcome(exc.code))
                continue
            if found is None:
                outcomes.append(OffsetOutcome(ErrorCode.none))
            else:
                epoch = -1 if found.leader_epoch is None else found.leader_epoch
                outcomes.append(OffsetOutcome(ErrorCode.none, found.timestamp, found.offset, epoch))
        return outcomes

    @staticmethod
    def _fetchable(
        log_: PartitionLog, timestamp: int, found: TimestampAndOffset | None, isolation: IsolationLevel
    ) -> TimestampAndOffset | None:
        """A client's answer bounded by what it may fetch (Kafka's ``Partition.fetchOffsetForTimestamp``
        and ``ReplicaManager.fetchOffset``): latest is the last fetchable offset (the high watermark;
        READ_COMMITTED: the last stable offset), earliest stays, and any other answer at or above it
        is no answer (-1, -1), so a consumer never starts past what it could read."""
        hw = log_.high_watermark
        last_fetchable = _stable(log_, hw) if isolation == IsolationLevel.READ_COMMITTED else hw
        if timestamp == LATEST_TIMESTAMP:
            epoch = found.leader_epoch if found is not None else None
            return TimestampAndOffset(NO_TIMESTAMP, last_fetchable, epoch)
        if timestamp in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP) or found is None:
            return found
        return None if found.offset >= last_fetchable else found

    async def _tiered_offset(self, ref: PartitionRef, tp: TopicIdPartition, timestamp: int) -> OffsetOutcome | None:
        """ListOffsets of a tiered partition where remote data answers (None: the local log does):
        earliest (-2) is the partition's log start, earliest local (-4) the local one, latest tiered
        (-5) the highest offset copied (-1: none), and a time lookup looks at remote segments first."""
        assert self.remote is not None
        try:
            log_ = self.replicas.get(ref.name, ref.partition)
        except KafkaError as exc:
            return OffsetOutcome(exc.code)
        local_start = log_.log_start_offset
        if timestamp == EARLIEST_TIMESTAMP:
            start = await self.remote.log_start(tp, local_start)
            epoch = self._epoch_at(log_, start) if start >= local_start else await self.remote.epoch_at(tp, start)
            return OffsetOutcome(ErrorCode.none, -1, start, epoch)
        if timestamp == EARLIEST_LOCAL_TIMESTAMP:
            return OffsetOutcome(ErrorCode.none, -1, local_start, self._epoch_at(log_, local_start))
        if timestamp == LATEST_TIERED_TIMESTAMP:
            highest = await self.remote.highest_copied(tp)
            return OffsetOutcome(ErrorCode.none, -1, highest, await self.remote.epoch_at(tp, highest) if highest >= 0 else -1)
        if timestamp >= 0:
            found = await self.remote.offset_for_timestamp(tp, timestamp)
            if found is not None and found[0] < local_start:
                return OffsetOutcome(ErrorCode.none, found[1], found[0], await self.remote.epoch_at(tp, found[0]))
        return None

    @staticmethod
    def _epoch_at(log_: object, offset: int) -> int:
        epoch = log_.epoch_for_offset(offset)  # type: ignore[attr-defined]
        return -1 if epoch is None else epoch

    async def delete_records(self, deletes: Sequence[tuple[PartitionRef, int]]) -> list[DeleteOutcome]:
        outcomes = []
        for ref, offset in deletes:
            try:
                low = await self.replicas.delete_records(ref.name, ref.partition, offset)
            except KafkaError as exc:
                outcomes.append(DeleteOutcome(exc.code))
                continue
            tp = self._tiered(ref)
            if tp is not None and self.remote is not None:
                # Remote segments below the new log start go too; a log start inside remote data
                # stays there (the local log cannot go below its own start).
                target = low if offset == -1 else offset
                await self.remote.delete_records(tp, target)
                low = await self.remote.log_start(tp, low) if target < low else low
            outcomes.append(DeleteOutcome(ErrorCode.none, low))
        return outcomes

    async def end_offsets_for_epochs(self, lookups: Sequence[tuple[PartitionRef, int]]) -> list[EpochEndOutcome]:
        outcomes = []
        for ref, epoch in lookups:
            try:
                found_epoch, end_offset = self.replicas.get(ref.name, ref.partition).end_offset_for_epoch(epoch)
            except KafkaError as exc:
                outcomes.append(EpochEndOutcome(exc.code))
                continue
            outcomes.append(EpochEndOutcome(ErrorCode.none, found_epoch, end_offset))
        return outcomes

    async def describe(self, partitions: Sequence[PartitionRef]) -> list[PartitionState]:
        states = []
        for ref in partitions:
            try:
                log_ = self.replicas.get(ref.name, ref.partition)
                start = log_.log_start_offset
                tp = self._tiered(ref)
                if tp is not None and self.remote is not None:
                    start = await self.remote.log_start(tp, start)
                states.append(PartitionState(ErrorCode.none, start, log_.log_end_offset,
                                             log_.high_watermark, log_.size))
            except KafkaError as exc:
                states.append(PartitionState(exc.code))
        return states

    # ---------------------------------------------------------------------------------- topics

    async def create_topic(self, topic: TopicImage, *, is_new: bool) -> None:
        await self.replicas.create_partitions(topic, is_new=is_new)

    async def add_partitions(self, topic: TopicImage, partitions: Sequence[int]) -> None:
        # Only the new ones are new: an existing replica missing from the log dirs stays offline.
        await self.replicas.create_partitions(topic, is_new=True, only=partitions)

    async def delete_topic(self, topic: TopicImage) -> None:
        await self.replicas.delete_topic(topic)

    def topic_config_changed(self, topic: TopicImage) -> None:
        self.replicas.update_topic_config(topic)

    # ------------------------------------------------------------------------------------ JBOD

    def offline_partitions(self) -> Mapping[tuple[str, int], str | None]:
        return self.replicas.offline_partitions()

    def is_offline_here(self, topic: str, partition: int) -> bool:
        return self.replicas.is_offline_here(topic, partition)

    async def describe_log_dirs(self, partitions: list[tuple[str, int]] | None) -> list:
        return await self.replicas.describe_log_dirs(partitions)

    async def alter_log_dir(self, partition: PartitionRef, log_dir: str) -> None:
        await self.replicas.alter_log_dir(partition.name, partition.partition, log_dir)

    # -------------------------------------------------------------------------- producer state

    async def describe_producers(self, partitions: Sequence[PartitionRef]) -> list[ProducersOutcome]:
        """The producers each local replica's log knows, leader or follower alike (Kafka's
        ``Partition.activeProducerState``: ``describe-producers --broker-id`` asks a follower).
        No replica here is NOT_LEADER_OR_FOLLOWER, one on a failed dir KAFKA_STORAGE_ERROR.

        Read on the event loop, where appends and markers change the state. Worker threads change
        it too, under the log's lock (producer expiry removes entries, a follower's truncation
        reloads them); the log has no locked view of it, so the map is copied in one step (atomic
        under the GIL) and the answer is a snapshot that may be a moment old."""
        outcomes = []
        for ref in partitions:
            try:
                log_ = self.replicas.get(ref.name, ref.partition)
            except KafkaError as exc:
                if exc.code == ErrorCode.unknown_topic_or_partition:  # in the image, not hosted here
                    exc = KafkaError(
                        ErrorCode.not_leader_or_follower,
                        f"This broker has no replica of {ref.name}-{ref.partition}",
                    )
                outcomes.append(ProducersOutcome(exc.code, exc.message))
                continue
            entries = list(log_.producer_state.producers.values())
            producers = tuple(
                ActiveProducer(e.producer_id, e.producer_epoch, e.last_seq, e.last_timestamp, e.coordinator_epoch,
                               e.current_txn_first_offset)
                for e in sorted(entries, key=lambda e: e.producer_id)
            )
            outcomes.append(ProducersOutcome(ErrorCode.none, producers=producers))
        return outcomes


def _stable(log_: PartitionLog, high_watermark: int) -> int:
    """The log's last stable offset, never above the high watermark reported beside it (the two
    are read under separate locks here, and the high watermark may have moved in between)."""
    return min(log_.last_stable_offset, high_watermark)


async def _ready(outcome: AppendOutcome) -> AppendOutcome:
    return outcome
