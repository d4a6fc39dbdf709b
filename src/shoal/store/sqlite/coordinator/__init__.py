"""The Batch Coordinator of KIP-1164 on a local SQLite file.

SQLite is what the KIP itself proposes for materialising coordinator state, and what
Inkless's PostgreSQL schema maps onto directly (the tables: ``schema``). One module per
concern, each a mixin over ``CoordinatorBase`` (the connections, ``base``):

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
from shoal.store.sqlite.coordinator.commit import CommitMixin
from shoal.store.sqlite.coordinator.compaction import CompactionMixin
from shoal.store.sqlite.coordinator.delete import DeleteMixin
from shoal.store.sqlite.coordinator.find import FindMixin
from shoal.store.sqlite.coordinator.inspect import InspectMixin
from shoal.store.sqlite.coordinator.log_compaction import LogCompactionMixin
from shoal.store.sqlite.coordinator.txns import TxnMixin

__all__ = ["SqliteBatchCoordinator", "PRODUCER_STATE_BATCHES"]


class SqliteBatchCoordinator(
    CommitMixin, FindMixin, TxnMixin, DeleteMixin, CompactionMixin, LogCompactionMixin, InspectMixin
):
    """KIP-1164 Batch Coordinator persisted in SQLite (see the package docstring)."""
