"""Segments built from a diskless partition's batches for tiered storage (KIP-1163 "Moving to
Tiered Storage").

The leader of a diskless partition with ``remote.storage.enable`` builds Kafka segments from the
Batch Coordinator's batches, from the partition's earliest local offset on, in a log of its own
under ``<log dir>/diskless-tiering/<topic>-<partition>``: separate from the cache replica, as the
KIP says (a cache starts near the log end, this chain at the beginning). The RemoteLogManager
copies the chain's rolled segments as it copies a classic log's; once a segment is remote the
coordinator deletes the batches below its end (``delete_tiered_batches``), so WAL objects empty
out through the normal object deletion and the coordinator's rows stay bounded, and the chain
drops the segment. Reads of those offsets get OFFSET_MOVED_TO_TIERED_STORAGE from the coordinator
and go to the remote segments.

A chain is a staging area and nothing more: the coordinator keeps every batch until its copy has
finished, so a chain is rebuilt from the coordinator after a restart or a change of leader. Chains
roll by the topic's ``segment.bytes`` / ``segment.ms`` (by record time, as Kafka rolls, so old data
replayed into a chain is cut as it was written); batches go in one at a time so no segment grows
past ``segment.bytes`` by more than one batch.
"""

from __future__ import annotations

import logging
import os
import shutil
import struct
import uuid
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

from shoal.classic.log import PartitionLog
from shoal.classic.log_config import LogConfig
from shoal.classic.log_manager_startup import DISKLESS_TIERING_DIR
from shoal.coordinator.api import (
    BatchCoordinator,
    DeleteRecordsRequest,
    DeleteTieredBatchesRequest,
    ListOffsetsRequest,
    ListOffsetsTimestamp,
)
from shoal.coordinator.api import TopicIdPartition as CoordinatorKey
from shoal.diskless.read import DisklessReader
from shoal.metadata.image import TopicImage
from shoal.protocol.errors import ErrorCode, KafkaError
from shoal.tiered.api import TopicIdPartition

log = logging.getLogger(__name__)

#: Bytes read from the coordinator's log per read while filling a chain.
READ_BYTES = 4 * 1024 * 1024
#: Bytes a chain takes in per round (the RemoteLogManager copies between rounds).
ROUND_BYTES = 64 * 1024 * 1024

ChainKey = tuple[uuid.UUID, int]


def coordinator_key(tp: TopicIdPartition) -> CoordinatorKey:
    return CoordinatorKey(tp.topic_id, tp.partition, tp.topic)


def split_batches(records: bytes) -> list[memoryview]:
    """The record batches of a fetch answer, one view each (the length field at bytes 8..12)."""
    view = memoryview(records)
    out = []
    position = 0
    while position + 12 <= len(view):
        (length,) = struct.unpack_from(">i", view, position + 8)
        end = position + 12 + length
        out.append(view[position:end])
        position = end
    return out


class DisklessChains:
    """This broker's chains, one per tiered diskless partition it leads."""

    def __init__(
        self,
        log_dirs: Sequence[str],
        coordinator: BatchCoordinator,
        reader: DisklessReader,
        run_blocking: Callable[..., Awaitable[Any]],
        config_for: Callable[[TopicImage], LogConfig],
    ) -> None:
        self._roots = [Path(os.path.abspath(d)) / DISKLESS_TIERING_DIR for d in log_dirs]
        self._coordinator = coordinator
        self._reader = reader
        self._run_blocking = run_blocking
        self._config_for = config_for
        self._chains: dict[ChainKey, PartitionLog] = {}

    # ------------------------------------------------------------------------- the coordinator

    async def local_state(self, tp: TopicIdPartition) -> tuple[int, int, int, int]:
        """(log start, earliest local offset, high watermark, bytes held) of the partition in the
        coordinator (two indexed reads); raises KafkaError when the coordinator does not know it."""
        key = coordinator_key(tp)
        info = await self._run_blocking(self._coordinator.get_log_info, tp.topic_id, tp.partition)
        (local,) = await self._run_blocking(
            self._coordinator.list_offsets, [ListOffsetsRequest(key, ListOffsetsTimestamp.EARLIEST_LOCAL)]
        )
        if info is None or local.errors != ErrorCode.none:
            code = ErrorCode.unknown_topic_or_partition if info is None else local.errors
            raise KafkaError(code, f"the coordinator answered {code.name} for {tp}")
        log_start, high_watermark, size = info
        return log_start, local.offset, high_watermark, size

    async def delete_tiered(self, tp: TopicIdPartition, offset: int) -> int:
        """The batches below ``offset`` are in tiered storage: the coordinator drops them (the log
        start stays). Returns the earliest local offset."""
        (answer,) = await self._run_blocking(
            self._coordinator.delete_tiered_batches, [DeleteTieredBatchesRequest(coordinator_key(tp), offset)]
        )
        if answer.errors != ErrorCode.none:
            raise KafkaError(answer.errors, f"deleting tiered batches of {tp} below {offset}: {answer.errors.name}")
        if answer.batches_deleted:
            log.info("%s-%d: %d batches (%d bytes) below offset %d are in tiered storage now, deleted from the "
                     "coordinator", tp.topic, tp.partition, answer.batches_deleted, answer.bytes_deleted, offset)
        return int(answer.local_start_offset)

    async def move_log_start(self, tp: TopicIdPartition, offset: int) -> None:
        """The partition's log start moves up to ``offset`` (remote segments below it expired)."""
        (answer,) = await self._run_blocking(self._coordinator.delete_records, [DeleteRecordsRequest(coordinator_key(tp), offset)])
        if answer.errors != ErrorCode.none:
            raise KafkaError(answer.errors, f"moving the log start of {tp} to {offset}: {answer.errors.name}")

    # ------------------------------------------------------------------------------- the chains

    def wipe(self) -> None:
        """At start: chains left by an earlier run go (they are rebuilt from the coordinator)."""
        for root in self._roots:
            shutil.rmtree(root, ignore_errors=True)

    def get(self, key: ChainKey) -> PartitionLog | None:
        return self._chains.get(key)

    async def fill(self, topic: TopicImage, partition: int, start: int, high_watermark: int) -> PartitionLog:
        """The partition's chain holding [start, high watermark) (up to ``ROUND_BYTES`` more per
        call): made at ``start`` when missing, and started again at ``start`` when it does not
        begin there (another leader copied a different cut meanwhile)."""
        key = (topic.topic_id, partition)
        chain = self._chains.get(key)
        if chain is not None and (chain.is_offline or chain.is_closed):
            await self.drop(key)
            chain = None
        if chain is None:
            chain = await self._run_blocking(self._create, topic, partition, start)
            self._chains[key] = chain
        elif chain.log_start_offset != start:
            log.info("%s-%d: the tiering chain starts at %d, the data not yet tiered at %d: starting it over",
                     topic.name, partition, chain.log_start_offset, start)
            await self._run_blocking(chain.truncate_fully_and_start_at, start)
        tp = CoordinatorKey(topic.topic_id, partition, topic.name)
        taken = 0
        while chain.log_end_offset < high_watermark and taken < ROUND_BYTES:
            (read,) = await self._reader.read([(tp, chain.log_end_offset, READ_BYTES)], READ_BYTES, for_cache=True)
            if read.error != ErrorCode.none:
                raise KafkaError(read.error, f"reading {tp} at {chain.log_end_offset} for tiering: {read.error.name}")
            if not read.records:
                break
            taken += len(read.records)
            await self._run_blocking(self._append, chain, read.records)
        return chain

    @staticmethod
    def _append(chain: PartitionLog, records: bytes) -> None:
        for batch in split_batches(records):
            chain.append_as_follower(batch)

    def _create(self, topic: TopicImage, partition: int, start: int) -> PartitionLog:
        root = self._roots[0]
        root.mkdir(parents=True, exist_ok=True)
        directory = root / f"{topic.name}-{partition}"
        shutil.rmtree(directory, ignore_errors=True)
        chain = PartitionLog.create(directory, topic.name, partition, topic.topic_id, self._config_for(topic),
                                    log_dir=str(root), start_offset=start)
        chain.hw_follows_leo = True
        log.info("%s-%d: building tiered segments from offset %d", topic.name, partition, start)
        return chain

    async def trim(self, chain: PartitionLog, copied: int) -> None:
        """Drop the chain's segments that are in remote storage (up to ``copied``)."""
        chain.highest_offset_in_remote = max(chain.highest_offset_in_remote, copied)
        await self._run_blocking(self._trim, chain)

    @staticmethod
    def _trim(chain: PartitionLog) -> None:
        chain.delete_old_segments()
        chain.delete_pending_files()

    async def drop(self, key: ChainKey) -> None:
        chain = self._chains.pop(key, None)
        if chain is not None:
            await self._run_blocking(self._remove, chain)

    async def keep_only(self, keys: set[ChainKey]) -> None:
        """Chains of partitions no longer led here, or no longer tiering, go."""
        for key in [k for k in self._chains if k not in keys]:
            await self.drop(key)

    @staticmethod
    def _remove(chain: PartitionLog) -> None:
        chain.close_handles()
        shutil.rmtree(chain.directory, ignore_errors=True)

    def close(self) -> None:
        for chain in self._chains.values():
            chain.close_handles()
        self._chains.clear()
