"""Cluster changes (topics, partitions, configs, producer-id blocks): validated and appended to
the metadata log.

Every broker decides the changes its clients ask for, as KRaft's active controller would:
each operation catches up, validates against that image and appends right after it
(compare-and-append). If another broker appended meanwhile the store refuses with
MetadataConflictError and the caller runs the operation again on the newer image, so the
log never holds a change decided on a stale picture. Methods block (they read and write the
store): call them from a worker thread.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from shoal.config import BROKER_CONFIGS, DYNAMIC_BROKER_CONFIGS, Config, ConfigError
from shoal.metadata import tiered_state
from shoal.metadata.assignment import assign_replicas
from shoal.metadata.image import MetadataImage
from shoal.metadata.log import MetadataStore
from shoal.metadata.records import (
    ConfigRecord,
    MetadataRecord,
    PartitionRecord,
    ProducerIdsRecord,
    RemoveTopicRecord,
    TopicRecord,
)
from shoal.protocol.errors import ErrorCode, KafkaError
from shoal.topic_configs import validate_tiering_change, validate_topic_configs

_LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]+$")
MAX_TOPIC_NAME_LENGTH = 249
PRODUCER_ID_BLOCK_SIZE = 1000


@dataclass(frozen=True, slots=True)
class NewTopic:
    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    assignments: Mapping[int, Sequence[int]] = field(default_factory=dict)
    configs: Mapping[str, str | None] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class CreatedTopic:
    name: str
    topic_id: uuid.UUID
    num_partitions: int
    replication_factor: int
    configs: Mapping[str, str]
    is_diskless: bool


def _check_manual_assignment(
    replicas: Sequence[int], replication_factor: int, brokers: Mapping[int, Any]
) -> None:
    """Kafka's validateManualPartitionAssignment, with its messages."""
    if not replicas:
        raise KafkaError(
            ErrorCode.invalid_replica_assignment,
            "The manual partition assignment includes an empty replica list.",
        )
    seen: set[int] = set()
    for broker in replicas:
        if broker not in brokers:
            raise KafkaError(
                ErrorCode.invalid_replica_assignment,
                f"The manual partition assignment includes broker {broker}, but no such broker is registered.",
            )
        if broker in seen:
            raise KafkaError(
                ErrorCode.invalid_replica_assignment,
                f"The manual partition assignment includes the broker {broker} more than once.",
            )
        seen.add(broker)
    if len(replicas) != replication_factor:
        raise KafkaError(
            ErrorCode.invalid_replica_assignment,
            f"The manual partition assignment includes a partition with {len(replicas)} replica(s), but this is "
            f"not consistent with previous partitions, which have {replication_factor} replica(s).",
        )


def validate_topic_name(name: str) -> None:
    """Kafka's topic name rules (Topic.validate)."""
    if not name:
        raise KafkaError(ErrorCode.invalid_topic_exception, "Topic name is illegal, it can't be empty")
    if name in (".", ".."):
        raise KafkaError(ErrorCode.invalid_topic_exception, 'Topic name cannot be "." or ".."')
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        raise KafkaError(
            ErrorCode.invalid_topic_exception,
            f"Topic name is illegal, it can't be longer than {MAX_TOPIC_NAME_LENGTH} characters, topic name: {name}",
        )
    if not _LEGAL_TOPIC.fullmatch(name):
        raise KafkaError(
            ErrorCode.invalid_topic_exception,
            f"Topic name {name} is illegal, it contains a character other than ASCII alphanumerics, '.', '_' and '-'",
        )


def new_partition(image: MetadataImage, topic_id: uuid.UUID, partition: int, replicas: Sequence[int]) -> PartitionRecord:
    """A new partition: every replica on an unfenced broker is in the ISR (it has the empty log),
    led by the first of them; with none alive the partition starts leaderless (KRaft's rule)."""
    alive = {b.node_id for b in image.alive_brokers()}
    isr = tuple(b for b in replicas if b in alive) or tuple(replicas)
    leader = next((b for b in replicas if b in alive), -1)
    return PartitionRecord(topic_id, partition, tuple(replicas), isr, leader)


class Controller:
    """Validates and records topic, config and producer-id changes (see the module docstring)."""

    def __init__(self, store: MetadataStore, config: Config, image: Callable[[], MetadataImage]) -> None:
        self._store = store
        self._config = config
        self._image = image  # catches up with the log and returns the image
        self._node_id: int = config["node.id"]

    def _append(self, records: Sequence[MetadataRecord], image: MetadataImage) -> int:
        """Append records decided on ``image``; MetadataConflictError if the log moved past it."""
        return self._store.append(records, image.offset, self._node_id)

    def validate_new_topic(self, topic: NewTopic, image: MetadataImage) -> CreatedTopic:
        """Check a CreateTopics entry as Kafka does; raises KafkaError with Kafka's code and message."""
        validate_topic_name(topic.name)
        if image.topic(topic.name) is not None:
            raise KafkaError(ErrorCode.topic_already_exists, f"Topic '{topic.name}' already exists.")
        # Metric names replace '.' with '_', so Kafka refuses names that differ only there.
        collision = next(
            (n for n in image.topics_by_name if n.replace(".", "_") == topic.name.replace(".", "_")), None
        )
        if collision is not None:
            raise KafkaError(
                ErrorCode.invalid_topic_exception,
                f"Topic '{topic.name}' collides with existing topic: {collision}",
            )
        try:
            configs = validate_topic_configs(
                topic.configs, remote_storage_system_enabled=self._config["remote.log.storage.system.enable"]
            )
        except ConfigError as exc:
            raise KafkaError(ErrorCode.invalid_config, str(exc)) from None
        is_diskless = configs.get("diskless.enable") == "true"
        if is_diskless and not self._config["diskless.system.enable"]:
            raise KafkaError(
                ErrorCode.invalid_config,
                "Diskless topics are not enabled on this cluster: set diskless.system.enable=true on the brokers.",
            )
        brokers = image.alive_brokers()
        if topic.assignments:
            if topic.num_partitions != -1 or topic.replication_factor != -1:
                raise KafkaError(
                    ErrorCode.invalid_request,
                    "Both numPartitions or replicationFactor and replicasAssignments were set. Both cannot be used at the same time.",
                )
            num_partitions = len(topic.assignments)
            if sorted(topic.assignments) != list(range(num_partitions)):
                raise KafkaError(
                    ErrorCode.invalid_replica_assignment,
                    "Partitions should be a consecutive 0-based integer sequence",
                )
            replication_factor = len(next(iter(topic.assignments.values())))
            for replicas in topic.assignments.values():
                if len(replicas) != replication_factor:
                    raise KafkaError(
                        ErrorCode.invalid_replica_assignment,
                        "All partitions should have the same number of replicas",
                    )
                if not replicas or len(set(replicas)) != len(replicas):
                    raise KafkaError(
                        ErrorCode.invalid_replica_assignment, "Duplicate or empty replica assignment"
                    )
                unknown = [b for b in replicas if b not in image.brokers]
                if unknown:
                    raise KafkaError(
                        ErrorCode.invalid_replica_assignment,
                        f"The manual partition assignment includes unknown brokers {unknown}",
                    )
        else:
            num_partitions = (
                self._config["num.partitions"] if topic.num_partitions == -1 else topic.num_partitions
            )
            replication_factor = (
                self._config["default.replication.factor"]
                if topic.replication_factor == -1
                else topic.replication_factor
            )
            if num_partitions <= 0:
                raise KafkaError(ErrorCode.invalid_partitions, "Number of partitions must be larger than 0.")
            if replication_factor <= 0:
                raise KafkaError(
                    ErrorCode.invalid_replication_factor, "Replication factor must be larger than 0."
                )
            if replication_factor > len(brokers):
                raise KafkaError(
                    ErrorCode.invalid_replication_factor,
                    f"Unable to replicate the partition {replication_factor} time(s): The target replication factor "
                    f"of {replication_factor} cannot be reached because only {len(brokers)} broker(s) are registered.",
                )
        return CreatedTopic(
            topic.name, uuid.uuid4(), num_partitions, replication_factor, configs, is_diskless
        )

    def create_topic(self, topic: NewTopic) -> tuple[CreatedTopic, int]:
        """Validate and record one topic; returns it and the metadata offset that made it."""
        image = self._image()
        created = self.validate_new_topic(topic, image)
        records: list[MetadataRecord] = [TopicRecord(created.name, created.topic_id)]
        placements = (
            [tuple(topic.assignments[p]) for p in range(created.num_partitions)]
            if topic.assignments
            else assign_replicas(image.alive_brokers(), range(created.num_partitions), created.replication_factor)
        )
        for p, replicas in enumerate(placements):
            records.append(new_partition(image, created.topic_id, p, replicas))
        records += [ConfigRecord(ConfigRecord.TOPIC, created.name, k, v) for k, v in created.configs.items()]
        tiering = tiered_state.change(None, created.topic_id, {}, created.configs)
        if tiering is not None:
            records.append(tiering)
        return created, self._append(records, image)

    def create_partitions(
        self, name: str, count: int, assignments: Sequence[Sequence[int]] | None, validate_only: bool
    ) -> tuple[list[int], int | None]:
        """Grow a topic to ``count`` partitions (CreatePartitions), checked as Kafka's
        ReplicationControlManager checks it. Returns the new partition indexes and the metadata
        offset that made them (None with ``validate_only``). New partitions are placed as
        CreateTopics places them, continuing the rotation; ``assignments`` gives their replicas."""
        image = self._image()
        topic = image.topic(name)
        if topic is None:
            raise KafkaError(
                ErrorCode.unknown_topic_or_partition, "This server does not host this topic-partition."
            )
        current = len(topic.partitions)
        if count < current:
            raise KafkaError(
                ErrorCode.invalid_partitions,
                f"The topic {name} currently has {current} partition(s); {count} would not be an increase.",
            )
        if count == current:
            raise KafkaError(ErrorCode.invalid_partitions, f"Topic already has {current} partition(s).")
        added = count - current
        replication_factor = len(topic.partitions[0].replicas) if 0 in topic.partitions else 1
        brokers = image.alive_brokers()
        if assignments is not None:
            if len(assignments) != added:
                raise KafkaError(
                    ErrorCode.invalid_replica_assignment,
                    f"Attempted to add {added} additional partition(s), but only {len(assignments)} "
                    "assignment(s) were specified.",
                )
            placements = [tuple(replicas) for replicas in assignments]
            for replicas in placements:
                _check_manual_assignment(replicas, replication_factor, image.brokers)
        else:
            if replication_factor > len(brokers):
                raise KafkaError(
                    ErrorCode.invalid_replication_factor,
                    f"Unable to replicate the partition {replication_factor} time(s): The target replication "
                    f"factor of {replication_factor} cannot be reached because only {len(brokers)} broker(s) "
                    "are registered.",
                )
            placements = assign_replicas(brokers, range(current, count), replication_factor)
        new = list(range(current, count))
        if validate_only:
            return new, None
        records: list[MetadataRecord] = [
            new_partition(image, topic.topic_id, p, replicas) for p, replicas in zip(new, placements, strict=True)
        ]
        return new, self._append(records, image)

    def alter_topic_configs(
        self, name: str, desired: Mapping[str, str | None], validate_only: bool
    ) -> int | None:
        """Replace a topic's configs with ``desired`` (validated); returns the metadata offset.

        ``diskless.enable`` is fixed at creation (KIP-1163): changing it is INVALID_CONFIG.
        """
        image = self._image()
        topic = image.topic(name)
        if topic is None:
            raise KafkaError(ErrorCode.unknown_topic_or_partition, f"Topic {name} does not exist")
        try:
            configs = validate_topic_configs(
                desired, remote_storage_system_enabled=self._config["remote.log.storage.system.enable"]
            )
            validate_tiering_change(topic.configs, configs)
            tiering = tiered_state.change(topic, topic.topic_id, topic.configs, configs)
        except ConfigError as exc:
            raise KafkaError(ErrorCode.invalid_config, str(exc)) from None
        if configs.get("diskless.enable", "false") != topic.configs.get("diskless.enable", "false"):
            raise KafkaError(
                ErrorCode.invalid_config,
                "diskless.enable can only be set when the topic is created; it cannot be changed afterwards.",
            )
        records: list[MetadataRecord] = [
            ConfigRecord(ConfigRecord.TOPIC, name, k, v)
            for k, v in configs.items()
            if topic.configs.get(k) != v
        ]
        records += [
            ConfigRecord(ConfigRecord.TOPIC, name, k, None) for k in topic.configs if k not in configs
        ]
        if tiering is not None:
            records.append(tiering)
        if validate_only or not records:
            return None
        return self._append(records, image)

    def finish_tiering_disablement(self, topic_id: uuid.UUID, tiered_epoch: int) -> int | None:
        """KIP-950: DISABLING -> DISABLED for the topic's disablement at ``tiered_epoch`` (None when
        the topic moved on: deleted, already DISABLED, or enabled again)."""
        image = self._image()
        topic = image.topics_by_id.get(topic_id)
        if topic is None or topic.tiered_state != tiered_state.DISABLING or topic.tiered_epoch != tiered_epoch:
            return None
        return self._append([tiered_state.finished(topic)], image)

    def alter_broker_configs(
        self, broker: str, desired: Mapping[str, str | None], validate_only: bool
    ) -> int | None:
        """Replace the dynamic configs of ``broker`` (a node id, or "" for the cluster default) with
        ``desired``; only the broker configs Kafka lets change at run time are accepted."""
        image = self._image()
        if broker and (not broker.isdigit() or int(broker) not in image.brokers):
            raise KafkaError(ErrorCode.invalid_request, f"Unexpected broker id {broker}")
        static = sorted(n for n in desired if n not in DYNAMIC_BROKER_CONFIGS)
        if static:
            raise KafkaError(
                ErrorCode.invalid_request,
                f"Cannot update these configs dynamically: Set({', '.join(static)}); set them in server.properties",
            )
        for name, value in desired.items():
            if value is not None:
                try:
                    BROKER_CONFIGS[name].parse(value)
                except ConfigError as exc:
                    raise KafkaError(ErrorCode.invalid_config, str(exc)) from None
        current = image.broker_configs.get(broker, {})
        records: list[MetadataRecord] = [
            ConfigRecord(ConfigRecord.BROKER, broker, k, v) for k, v in desired.items() if current.get(k) != v
        ]
        records += [ConfigRecord(ConfigRecord.BROKER, broker, k, None) for k in current if k not in desired]
        if validate_only or not records:
            return None
        return self._append(records, image)

    def delete_topic(self, topic_id: uuid.UUID) -> int:
        image = self._image()
        if topic_id not in image.topics_by_id:
            raise KafkaError(ErrorCode.unknown_topic_id, f"Topic id {topic_id} does not exist")
        return self._append([RemoveTopicRecord(topic_id)], image)

    def allocate_producer_ids(self) -> tuple[int, int]:
        """Hand out the next block of producer ids: (first id, block size). Blocks of different
        brokers never overlap: each is appended right after the image that named its start."""
        image = self._image()
        first = image.next_producer_id
        self._append([ProducerIdsRecord(self._node_id, first + PRODUCER_ID_BLOCK_SIZE)], image)
        return first, PRODUCER_ID_BLOCK_SIZE
