"""The cluster metadata log, the broker registry and the controller lease, kept in the metadata store.

KRaft's shape on a database: changes are typed records appended in one transaction each,
every broker tails the log. Any broker may decide a change (CreateTopics, configs, producer-id
blocks): it validates against its image at offset N and appends *after N* only
(compare-and-append), so the database serialises deciders the way KRaft's single active
controller does. The lease elects the one broker that runs the periodic controller duties
(fencing brokers that stop heartbeating, retention, object cleaning). Durability and ordering
come from the database's transactions, not from a consensus protocol written here. The backends live in ``shoal.store`` (SQLite:
``shoal.store.sqlite.metadata_log.SqliteMetadataStore``).
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from shoal.metadata.records import MetadataRecord

#: How many records ``MetadataStore.read`` returns at most when the caller does not say.
READ_LIMIT = 10000


class MetadataConflictError(Exception):
    """The log moved past the offset the caller decided on: catch up, decide again."""


class DuplicateBrokerError(Exception):
    """Another live incarnation holds this node id (Kafka's DUPLICATE_BROKER_REGISTRATION)."""


@dataclass(frozen=True, slots=True)
class BrokerRegistration:
    """A broker's row in the registry: who it is, where it listens, and how long ago it last
    heartbeated, on the store's clock (so brokers on different hosts compare one clock)."""

    node_id: int
    incarnation_id: uuid.UUID
    host: str
    port: int
    rack: str | None
    heartbeat_age_ms: int


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
        so a holder that lost it can tell (its renewals fail).
        """
        ...

    def renew_lease(self, node_id: int, epoch: int, ttl_ms: int) -> bool:
        """Extend the lease held under ``epoch``; False once it is no longer ours."""
        ...

    def append(
        self, records: Sequence[MetadataRecord], after_offset: int, writer: int, *, lease_epoch: int | None = None
    ) -> int:
        """Append records atomically right after ``after_offset`` (the offset of the image the
        caller decided on); returns the last offset. ``writer`` (a node id) is kept for audits.

        Raises MetadataConflictError, writing nothing, when the log's last offset is not
        ``after_offset``, or when ``lease_epoch`` is given (the controller's own writes) and is
        not the controller lease's current epoch: a stale controller's writes are rejected.
        """
        ...

    def register_broker(
        self, node_id: int, incarnation_id: uuid.UUID, host: str, port: int, rack: str | None,
        session_timeout_ms: int,
    ) -> None:
        """Put this incarnation in the registry with a fresh heartbeat.

        Raises DuplicateBrokerError when another incarnation of ``node_id`` heartbeated within
        ``session_timeout_ms`` at a different endpoint. The caller holds ``host:port`` bound,
        so an incarnation registered at that same endpoint is gone and is replaced at once.
        """
        ...

    def heartbeat_broker(self, node_id: int, incarnation_id: uuid.UUID) -> bool:
        """Refresh this incarnation's heartbeat; False when it is no longer registered."""
        ...

    def unregister_broker(self, node_id: int, incarnation_id: uuid.UUID) -> None:
        """Remove this incarnation (a clean shutdown), so the controller fences it at once."""
        ...

    def broker_registrations(self) -> list[BrokerRegistration]:
        """Every registered broker, by node id."""
        ...

    def read(self, from_offset: int, limit: int = READ_LIMIT) -> list[tuple[int, MetadataRecord]]:
        """Records with offset >= from_offset, in order."""
        ...

    def close(self) -> None:
        """Release the store's connections."""
        ...
