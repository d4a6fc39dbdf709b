"""Classic partitions behind the partition interface: Kafka's log segments on this broker's
JBOD log dirs, through the classic ReplicaManager (leader appends on the event loop, fsync and
file work in worker threads). Also the JBOD operations only classic replicas have: describing
log dirs and moving a replica between them (KIP-112/113)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence

from shoal.classic.replica_manager import ReplicaManager
from shoal.metadata.image import MetadataImage, TopicImage
from shoal.partitions.api import (
    AppendOutcome,
    DeleteOutcome,
    EpochEndOutcome,
    KindRead,
    OffsetOutcome,
    PartitionRef,
    PartitionState,
    ProduceOptions,
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
                code = await asyncio.wait_for(replicated, max(timeout_ms, 0) / 1000)
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

    async def publish(self, image: MetadataImage) -> None:
        await self.replicas.apply_image(image)

    async def read(self, reads: Sequence[KindRead], max_bytes: int, min_one_batch: bool) -> list[ReadOutcome]:
        outcomes = []
        used = 0
        for r in reads:
            try:
                result = self.replicas.read(
                    r.partition.name, r.partition.partition, r.fetch_offset,
                    min(r.max_bytes, max(max_bytes - used, 0)), min_one_batch=min_one_batch and used == 0,
                    replica_id=r.replica_id,
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
                epoch = -1 if found.leader_epoch is None else found.leader_epoch
                outcomes.append(OffsetOutcome(ErrorCode.none, found.timestamp, found.offset, epoch))
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

    def is_offline_here(self, topic: str, partition: int) -> bool:
        return self.replicas.is_offline_here(topic, partition)

    async def describe_log_dirs(self, partitions: list[tuple[str, int]] | None) -> list:
        return await self.replicas.describe_log_dirs(partitions)

    async def alter_log_dir(self, partition: PartitionRef, log_dir: str) -> None:
        await self.replicas.alter_log_dir(partition.name, partition.partition, log_dir)
