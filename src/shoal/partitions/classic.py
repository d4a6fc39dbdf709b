"""Classic partitions behind the partition interface: Kafka's log segments on this broker's
JBOD log dirs, through the classic ReplicaManager (leader appends on the event loop, fsync and
file work in worker threads). Also the JBOD operations only classic replicas have: describing
log dirs and moving a replica between them (KIP-112/113)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence

from shoal.classic.replica_manager import ReplicaManager
from shoal.metadata.image import TopicImage
from shoal.partitions.api import (
    AppendOutcome,
    DeleteOutcome,
    EpochEndOutcome,
    KindRead,
    OffsetOutcome,
    PartitionRef,
    PartitionState,
    ReadOutcome,
    ValidatedRecords,
)
from shoal.protocol.errors import ErrorCode, KafkaError

log = logging.getLogger(__name__)


class ClassicPartitions:
    name = "classic"

    def __init__(self, replicas: ReplicaManager, wake: Callable[[Iterable[tuple]], None]) -> None:
        self.replicas = replicas
        self._wake = wake  # long-polling fetches of a partition wake when it gets records

    async def start(self) -> None:
        await self.replicas.start()

    async def stop(self) -> None:
        await self.replicas.stop()

    # ------------------------------------------------------------------------------------ data

    def append(self, partition: PartitionRef, records: ValidatedRecords) -> Awaitable[AppendOutcome]:
        appended = self.replicas.append(
            partition.name, partition.partition, records.records, records.batches, records.timestamp_type
        )
        outcome = AppendOutcome(
            base_offset=appended.base_offset,
            log_append_time=appended.log_append_time,
            log_start_offset=appended.log_start_offset,
        )
        self._wake([partition.wake_key])
        return self._flushed(partition, outcome, appended.flush_needed)

    async def _flushed(self, partition: PartitionRef, outcome: AppendOutcome, flush_needed: bool) -> AppendOutcome:
        """Honour the topic's ``flush.messages``: fsync before the append is acknowledged."""
        if flush_needed:
            try:
                await self.replicas.flush(partition.name, partition.partition)
            except KafkaError as exc:
                outcome.fail(exc.code, exc.message)
        return outcome

    async def read(self, reads: Sequence[KindRead], max_bytes: int, min_one_batch: bool) -> list[ReadOutcome]:
        outcomes = []
        used = 0
        for r in reads:
            try:
                result = self.replicas.read(
                    r.partition.name, r.partition.partition, r.fetch_offset,
                    min(r.max_bytes, max(max_bytes - used, 0)), min_one_batch=min_one_batch and used == 0,
                )
                hw = result.high_watermark
                outcomes.append(ReadOutcome(ErrorCode.none, hw, hw, result.log_start_offset, bytes(result.records)))
                used += len(result.records)
            except KafkaError as exc:
                outcomes.append(self._error(r.partition, exc))
        return outcomes

    def _error(self, partition: PartitionRef, exc: KafkaError) -> ReadOutcome:
        """An error answer, with the log's offsets when the log is there (OFFSET_OUT_OF_RANGE)."""
        try:
            log_ = self.replicas.get(partition.name, partition.partition)
            return ReadOutcome(exc.code, log_.high_watermark, log_.high_watermark, log_.log_start_offset)
        except KafkaError:
            return ReadOutcome(exc.code)

    async def list_offsets(self, lookups: Sequence[tuple[PartitionRef, int]]) -> list[OffsetOutcome]:
        outcomes = []
        for ref, timestamp in lookups:
            try:
                found = await self.replicas.list_offset(ref.name, ref.partition, timestamp)
            except KafkaError as exc:
                outcomes.append(OffsetOutcome(exc.code))
                continue
            if found is None:
                outcomes.append(OffsetOutcome(ErrorCode.none))
            else:
                outcomes.append(OffsetOutcome(ErrorCode.none, found.timestamp, found.offset))
        return outcomes

    async def delete_records(self, deletes: Sequence[tuple[PartitionRef, int]]) -> list[DeleteOutcome]:
        outcomes = []
        for ref, offset in deletes:
            try:
                low = await self.replicas.delete_records(ref.name, ref.partition, offset)
            except KafkaError as exc:
                outcomes.append(DeleteOutcome(exc.code))
                continue
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
                states.append(PartitionState(ErrorCode.none, log_.log_start_offset, log_.log_end_offset,
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

    async def describe_log_dirs(self, partitions: list[tuple[str, int]] | None) -> list:
        return await self.replicas.describe_log_dirs(partitions)

    async def alter_log_dir(self, partition: PartitionRef, log_dir: str) -> None:
        await self.replicas.alter_log_dir(partition.name, partition.partition, log_dir)
