"""The cluster metadata log and the controller lease, kept in the metadata store.

KRaft's shape on a database: the active controller appends typed records in one
transaction per change, fenced by its lease epoch; every broker tails the log.
Durability and ordering come from the database's transactions, not from a
consensus protocol written here. The backends live in ``shoal.store`` (SQLite:
``shoal.store.sqlite.metadata_log.SqliteMetadataStore``).
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import Sequence
from typing import Protocol

from shoal.metadata.records import MetadataRecord

#: How many records ``MetadataStore.read`` returns at most when the caller does not say.
READ_LIMIT = 10000


class FencedControllerError(Exception):
    """The caller's lease epoch is no longer the active controller's."""


def new_cluster_id() -> str:
    """A Kafka-style cluster id: a random UUID in URL-safe base64 without padding."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


class MetadataStore(Protocol):
    """Metadata log, controller lease and cluster id, as the controller and brokers use them.

    Methods block (they talk to the database): call them off the event loop.
    """

    def cluster_id(self) -> str:
        """The cluster id, created on first use."""
        ...

    def acquire_lease(self, node_id: int, ttl_ms: int) -> int | None:
        """Take or renew the controller lease; returns our epoch, or None if another node holds it.

        A node that takes over a lease (its own after a restart included) gets a new epoch,
        which fences appends made under the old one.
        """
        ...

    def renew_lease(self, node_id: int, epoch: int, ttl_ms: int) -> bool:
        """Extend the lease held under ``epoch``; False once it is no longer ours."""
        ...

    def append(self, records: Sequence[MetadataRecord], controller_epoch: int) -> int:
        """Append records atomically under the given lease epoch; returns the last offset.

        Raises FencedControllerError, writing nothing, when ``controller_epoch`` is not the
        active lease epoch.
        """
        ...

    def read(self, from_offset: int, limit: int = READ_LIMIT) -> list[tuple[int, MetadataRecord]]:
        """Records with offset >= from_offset, in order."""
        ...

    def close(self) -> None:
        """Release the store's connections."""
        ...
