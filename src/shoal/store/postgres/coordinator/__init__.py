"""The Batch Coordinator of KIP-1164 on PostgreSQL: the one several brokers on several hosts share.

The same behaviour as the SQLite backend (``shoal.store.sqlite.coordinator``), on the same
tables (after Inkless's PostgreSQL schema, ``schema``), checked by the same conformance tests.
One module per concern, each a mixin over ``CoordinatorBase`` (the pool, transactions with
retries, unavailability as CoordinatorUnavailableError, ``base``):

- ``logs``: locking partitions' log rows, deleting batches and shrinking objects (shared);
- ``commit``: commit_file, idempotent-producer deduplication;
- ``txns``: transactions' rows (what commits decide, what fetches read), transaction_state;
- ``find``: find_batches, list_offsets, get_log_info;
- ``delete``: topics, delete_records, enforce_retention, deleting emptied objects;
- ``compaction``: compaction candidates, their batches, replace_batches;
- ``log_compaction``: compact_partition (cleanup.policy=compact), cleaner_checkpoints;
- ``inspect``: describe_topic and describe_object for tools.
"""

from __future__ import annotations

from shoal.coordinator.idempotence import PRODUCER_STATE_BATCHES
from shoal.store.postgres.coordinator.commit import CommitMixin
from shoal.store.postgres.coordinator.compaction import CompactionMixin
from shoal.store.postgres.coordinator.delete import DeleteMixin
from shoal.store.postgres.coordinator.find import FindMixin
from shoal.store.postgres.coordinator.inspect import InspectMixin
from shoal.store.postgres.coordinator.log_compaction import LogCompactionMixin
from shoal.store.postgres.coordinator.txns import TxnMixin

__all__ = ["PostgresBatchCoordinator", "PRODUCER_STATE_BATCHES"]


class PostgresBatchCoordinator(
    CommitMixin, FindMixin, TxnMixin, DeleteMixin, CompactionMixin, LogCompactionMixin, InspectMixin
):
    """KIP-1164 Batch Coordinator persisted in PostgreSQL (see the package docstring).

    ``PostgresBatchCoordinator(url, clock=..., connect_timeout_s=10.0, pool_size=8)``.
    """
