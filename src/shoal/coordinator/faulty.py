"""A BatchCoordinator wrapper that injects failures and latency, for failure-scenario tests.

KIP-1163's test plan asks what happens when the Batch Coordinator is unreachable, or
answers late, or commits a file but the answer never reaches the broker. This wrapper
makes any coordinator behave so, per operation (the method names of BatchCoordinator and
CoordinatorInspector): a fraction of calls raise ``CoordinatorUnavailableError`` (what a
real backend raises when its store is unreachable), optionally after the real call ran
(``after``: the ambiguous commit), and calls can be slowed down (``time.sleep``: the
methods are blocking and the broker runs them in worker threads).

Faults are set in code or through the JSON control file of ``shoal.faults``; the broker
wraps its coordinator when ``diskless.coordinator.fault.control.file`` names one, e.g.::

    {"commit_file": {"failure_rate": 1.0, "after": true},
     "is_safe_to_delete_file": {"failure_rate": 1.0}}

``close`` is never faulted: shutdown must release resources.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TypeVar, cast

from shoal.coordinator.api import (
    BatchCoordinator,
    BatchInfo,
    CommitBatchRequest,
    CommitBatchResponse,
    CoordinatorInspector,
    CoordinatorUnavailableError,
    CreateTopicAndPartitionsRequest,
    DeleteFilesRequest,
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    DeleteTieredBatchesRequest,
    DeleteTieredBatchesResponse,
    EnforceRetentionRequest,
    EnforceRetentionResponse,
    FileToDelete,
    FindBatchRequest,
    FindBatchResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    ObjectDescription,
    ProducerStateEntry,
    TopicDescription,
)
from shoal.coordinator.compaction_types import (
    BatchMove,
    CompactPartitionRequest,
    CompactPartitionResult,
    ObjectCandidate,
    ReplaceResult,
)
from shoal.faults import Fault, FaultControlled, FaultInjector
from shoal.faults import write_control_file as _write_control_file

__all__ = ["OPERATIONS", "Fault", "FaultyBatchCoordinator", "write_control_file"]

#: Every faultable method of BatchCoordinator and CoordinatorInspector.
OPERATIONS = (
    "create_topic_and_partitions",
    "commit_file",
    "find_batches",
    "list_offsets",
    "get_log_info",
    "transaction_state",
    "describe_producers",
    "delete_records",
    "delete_tiered_batches",
    "enforce_retention",
    "delete_topics",
    "get_files_to_delete",
    "delete_files",
    "is_safe_to_delete_file",
    "list_compaction_candidates",
    "list_object_batches",
    "replace_batches",
    "compact_partition",
    "cleaner_checkpoints",
    "describe_topic",
    "describe_object",
)

T = TypeVar("T")


def write_control_file(path: str | Path, faults: Mapping[str, Fault], seed: int = 0) -> None:
    """Atomically replace a coordinator control file; ValueError for a method the coordinator lacks."""
    _write_control_file(path, faults, seed, operations=OPERATIONS)


class FaultyBatchCoordinator(FaultControlled):
    """Wraps a BatchCoordinator; calls pass through unless a configured fault picks them.

    ``inner`` should also be a CoordinatorInspector for the ``describe_*`` methods to work.
    """

    def __init__(self, inner: BatchCoordinator, *, control_file: str | Path | None = None, seed: int = 0) -> None:
        self.inner = inner
        self.faults = FaultInjector(OPERATIONS, seed=seed, control_file=control_file, name="batch coordinator")

    def _call(self, operation: str, call: Callable[[], T]) -> T:
        plan = self.faults.plan(operation)
        if plan.latency_s > 0:
            time.sleep(plan.latency_s)
        if plan.failure is None:
            return call()
        if plan.failure.after:
            call()
            raise CoordinatorUnavailableError(f"injected {operation} failure (the call ran; its answer was lost)")
        raise CoordinatorUnavailableError(f"injected {operation} failure")

    # ------------------------------------------------------------------ BatchCoordinator

    def create_topic_and_partitions(self, requests: set[CreateTopicAndPartitionsRequest]) -> None:
        """Delegated unless a fault picks this call."""
        self._call("create_topic_and_partitions", lambda: self.inner.create_topic_and_partitions(requests))

    def commit_file(
        self,
        object_key: str,
        uploader_broker_id: int,
        file_size: int,
        batches: list[CommitBatchRequest],
    ) -> list[CommitBatchResponse]:
        """Delegated unless a fault picks this call (``after``: committed, answer lost)."""
        return self._call(
            "commit_file", lambda: self.inner.commit_file(object_key, uploader_broker_id, file_size, batches)
        )

    def find_batches(
        self, find_batch_requests: list[FindBatchRequest], fetch_max_bytes: int
    ) -> list[FindBatchResponse]:
        """Delegated unless a fault picks this call."""
        return self._call("find_batches", lambda: self.inner.find_batches(find_batch_requests, fetch_max_bytes))

    def list_offsets(self, requests: list[ListOffsetsRequest]) -> list[ListOffsetsResponse]:
        """Delegated unless a fault picks this call."""
        return self._call("list_offsets", lambda: self.inner.list_offsets(requests))

    def get_log_info(self, topic_id: uuid.UUID, partition: int) -> tuple[int, int, int] | None:
        """Delegated unless a fault picks this call."""
        return self._call("get_log_info", lambda: self.inner.get_log_info(topic_id, partition))

    def transaction_state(self, topic_id: uuid.UUID, partition: int) -> tuple[int, list[tuple[int, int, int]]] | None:
        """Delegated unless a fault picks this call."""
        return self._call("transaction_state", lambda: self.inner.transaction_state(topic_id, partition))

    def describe_producers(self, topic_id: uuid.UUID, partition: int) -> list[ProducerStateEntry] | None:
        """Delegated unless a fault picks this call."""
        return self._call("describe_producers", lambda: self.inner.describe_producers(topic_id, partition))

    def delete_records(self, requests: list[DeleteRecordsRequest]) -> list[DeleteRecordsResponse]:
        """Delegated unless a fault picks this call."""
        return self._call("delete_records", lambda: self.inner.delete_records(requests))

    def delete_tiered_batches(
        self, requests: list[DeleteTieredBatchesRequest]
    ) -> list[DeleteTieredBatchesResponse]:
        """Delegated unless a fault picks this call (``after``: batches deleted, answer lost)."""
        return self._call("delete_tiered_batches", lambda: self.inner.delete_tiered_batches(requests))

    def enforce_retention(self, requests: list[EnforceRetentionRequest]) -> list[EnforceRetentionResponse]:
        """Delegated unless a fault picks this call."""
        return self._call("enforce_retention", lambda: self.inner.enforce_retention(requests))

    def delete_topics(self, topic_ids: set[uuid.UUID]) -> None:
        """Delegated unless a fault picks this call."""
        self._call("delete_topics", lambda: self.inner.delete_topics(topic_ids))

    def get_files_to_delete(self) -> list[FileToDelete]:
        """Delegated unless a fault picks this call."""
        return self._call("get_files_to_delete", self.inner.get_files_to_delete)

    def delete_files(self, request: DeleteFilesRequest) -> None:
        """Delegated unless a fault picks this call."""
        self._call("delete_files", lambda: self.inner.delete_files(request))

    def is_safe_to_delete_file(self, object_key: str) -> bool:
        """Delegated unless a fault picks this call."""
        return self._call("is_safe_to_delete_file", lambda: self.inner.is_safe_to_delete_file(object_key))

    def list_compaction_candidates(
        self, min_age_ms: int, max_object_bytes: int, limit: int
    ) -> list[ObjectCandidate]:
        """Delegated unless a fault picks this call."""
        return self._call(
            "list_compaction_candidates",
            lambda: self.inner.list_compaction_candidates(min_age_ms, max_object_bytes, limit),
        )

    def list_object_batches(self, object_keys: list[str]) -> dict[str, list[BatchInfo]]:
        """Delegated unless a fault picks this call."""
        return self._call("list_object_batches", lambda: self.inner.list_object_batches(object_keys))

    def replace_batches(
        self,
        new_object_key: str,
        new_object_size: int,
        moves: list[BatchMove],
        uploader_broker_id: int,
    ) -> ReplaceResult:
        """Delegated unless a fault picks this call (``after``: batches repointed, answer lost)."""
        return self._call(
            "replace_batches",
            lambda: self.inner.replace_batches(new_object_key, new_object_size, moves, uploader_broker_id),
        )

    def compact_partition(
        self,
        new_object_key: str,
        new_object_size: int,
        uploader_broker_id: int,
        request: CompactPartitionRequest,
    ) -> CompactPartitionResult:
        """Delegated unless a fault picks this call (``after``: range swapped, answer lost)."""
        return self._call(
            "compact_partition",
            lambda: self.inner.compact_partition(
                new_object_key, new_object_size, uploader_broker_id, request
            ),
        )

    def cleaner_checkpoints(self, topic_id: uuid.UUID) -> dict[int, int]:
        """Delegated unless a fault picks this call."""
        return self._call("cleaner_checkpoints", lambda: self.inner.cleaner_checkpoints(topic_id))

    def close(self) -> None:
        """Close the inner coordinator (never faulted)."""
        self.inner.close()

    # ------------------------------------------------------------------ CoordinatorInspector

    def describe_topic(self, topic_id: uuid.UUID) -> TopicDescription | None:
        """Delegated unless a fault picks this call."""
        inspector = cast(CoordinatorInspector, self.inner)
        return self._call("describe_topic", lambda: inspector.describe_topic(topic_id))

    def describe_object(self, object_key: str) -> ObjectDescription | None:
        """Delegated unless a fault picks this call."""
        inspector = cast(CoordinatorInspector, self.inner)
        return self._call("describe_object", lambda: inspector.describe_object(object_key))
