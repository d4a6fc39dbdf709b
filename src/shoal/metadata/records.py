"""Typed cluster metadata records, KRaft's vocabulary on a database-backed log.

Each record is a small frozen dataclass stored as JSON in the ``metadata_log``
table; the MetadataImage is the result of applying them in offset order.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import asdict, dataclass, field, fields
from typing import Any, ClassVar


@dataclass(frozen=True, slots=True)
class TopicRecord:
    name: str
    topic_id: uuid.UUID


@dataclass(frozen=True, slots=True)
class PartitionRecord:
    topic_id: uuid.UUID
    partition: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int = 0
    partition_epoch: int = 0


@dataclass(frozen=True, slots=True)
class PartitionChangeRecord:
    """A change of one partition's leadership or replicas (KRaft's PartitionChangeRecord): a field
    left None is unchanged. Every change bumps the partition epoch; a new leader also bumps the
    leader epoch (followers truncate against it, clients are fenced by it)."""

    topic_id: uuid.UUID
    partition: int
    isr: tuple[int, ...] | None = None
    leader: int | None = None
    replicas: tuple[int, ...] | None = None
    #: Replicas whose log dir failed on their broker (KIP-112; Metadata's OfflineReplicas).
    offline_replicas: tuple[int, ...] | None = None
    #: Reassignment in progress (KIP-455): replicas being added / removed, () when none.
    adding_replicas: tuple[int, ...] | None = None
    removing_replicas: tuple[int, ...] | None = None


@dataclass(frozen=True, slots=True)
class RemoveTopicRecord:
    topic_id: uuid.UUID


@dataclass(frozen=True, slots=True)
class ConfigRecord:
    """A config of a resource; ``value=None`` deletes it. resource_type 2 = topic, 4 = broker (Kafka's)."""

    resource_type: int
    resource_name: str
    name: str
    value: str | None

    TOPIC: ClassVar[int] = 2
    BROKER: ClassVar[int] = 4


@dataclass(frozen=True, slots=True)
class RegisterBrokerRecord:
    """A broker incarnation joined (or changed its endpoint). As in KRaft it starts fenced:
    the controller unfences it once it heartbeats."""

    node_id: int
    host: str
    port: int
    rack: str | None
    incarnation_id: uuid.UUID = field(default_factory=uuid.uuid4)
    fenced: bool = True


@dataclass(frozen=True, slots=True)
class FenceBrokerRecord:
    """The broker stopped heartbeating (or shut down): clients are no longer sent to it."""

    node_id: int


@dataclass(frozen=True, slots=True)
class UnfenceBrokerRecord:
    """The broker heartbeats: it serves clients."""

    node_id: int


@dataclass(frozen=True, slots=True)
class ControllerChangeRecord:
    """A node took the controller lease under ``epoch`` (KRaft's leader change): Metadata and
    DescribeCluster name it as the controller."""

    node_id: int
    epoch: int


@dataclass(frozen=True, slots=True)
class ProducerIdsRecord:
    """A block of producer ids handed to a broker; the next block starts at next_producer_id."""

    broker_id: int
    next_producer_id: int


@dataclass(frozen=True, slots=True)
class TieredStateRecord:
    """KIP-950: a topic's tiered storage state (``metadata.tiered_state``), its tiered epoch, and
    whether the disablement deletes the remote data (policy delete) or keeps it (retain)."""

    topic_id: uuid.UUID
    state: int
    tiered_epoch: int
    delete_remote: bool = False


MetadataRecord = (
    TopicRecord
    | PartitionRecord
    | PartitionChangeRecord
    | RemoveTopicRecord
    | ConfigRecord
    | RegisterBrokerRecord
    | FenceBrokerRecord
    | UnfenceBrokerRecord
    | ControllerChangeRecord
    | ProducerIdsRecord
    | TieredStateRecord
)

_TYPES: dict[str, type] = {
    cls.__name__: cls
    for cls in (
        TopicRecord,
        PartitionRecord,
        PartitionChangeRecord,
        RemoveTopicRecord,
        ConfigRecord,
        RegisterBrokerRecord,
        FenceBrokerRecord,
        UnfenceBrokerRecord,
        ControllerChangeRecord,
        ProducerIdsRecord,
        TieredStateRecord,
    )
}


def encode_record(record: MetadataRecord) -> tuple[str, str]:
    """(type name, JSON payload) for the metadata log table."""
    payload = {
        k: (str(v) if isinstance(v, uuid.UUID) else list(v) if isinstance(v, tuple) else v)
        for k, v in asdict(record).items()
    }
    return type(record).__name__, json.dumps(payload, separators=(",", ":"))


def decode_record(type_name: str, payload: str) -> MetadataRecord:
    cls = _TYPES[type_name]
    raw: dict[str, Any] = json.loads(payload)
    values: dict[str, Any] = {}
    for f in fields(cls):
        if f.name not in raw:
            continue
        value = raw[f.name]
        if "UUID" in str(f.type) and value is not None:
            value = uuid.UUID(value)
        elif "tuple" in str(f.type) and value is not None:
            value = tuple(value)
        values[f.name] = value
    return cls(**values)
