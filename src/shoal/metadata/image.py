"""MetadataImage: the immutable picture of the cluster that request handlers read.

A new image is built by applying metadata records to the previous one; handlers
hold a reference to one image for the length of a request, so they never see a
half-applied change.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from shoal.metadata.records import (
    ConfigRecord,
    ControllerChangeRecord,
    FenceBrokerRecord,
    MetadataRecord,
    PartitionChangeRecord,
    PartitionRecord,
    ProducerIdsRecord,
    RegisterBrokerRecord,
    RemoveTopicRecord,
    TieredStateRecord,
    TopicRecord,
    UnfenceBrokerRecord,
)


@dataclass(frozen=True, slots=True)
class PartitionImage:
    partition: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int
    partition_epoch: int
    offline_replicas: tuple[int, ...] = ()
    adding_replicas: tuple[int, ...] = ()
    removing_replicas: tuple[int, ...] = ()

    def changed(self, change: PartitionChangeRecord) -> PartitionImage:
        """This partition after ``change`` (KRaft's epochs: any change bumps the partition epoch,
        a new leader the leader epoch too)."""
        leader = self.leader if change.leader is None else change.leader
        return replace(
            self,
            replicas=self.replicas if change.replicas is None else tuple(change.replicas),
            isr=self.isr if change.isr is None else tuple(change.isr),
            leader=leader,
            leader_epoch=self.leader_epoch + 1 if leader != self.leader else self.leader_epoch,
            partition_epoch=self.partition_epoch + 1,
            offline_replicas=(
                self.offline_replicas if change.offline_replicas is None else tuple(change.offline_replicas)
            ),
            adding_replicas=self.adding_replicas if change.adding_replicas is None else tuple(change.adding_replicas),
            removing_replicas=(
                self.removing_replicas if change.removing_replicas is None else tuple(change.removing_replicas)
            ),
        )


@dataclass(frozen=True, slots=True)
class TopicImage:
    name: str
    topic_id: uuid.UUID
    partitions: Mapping[int, PartitionImage]
    configs: Mapping[str, str]
    #: KIP-950: the tiered storage state (``tiered_state``; None: never tiered), its tiered epoch
    #: and whether the disablement in progress or done deletes the remote data.
    tiered_state: int | None = None
    tiered_epoch: int = 0
    tiered_delete: bool = False

    @property
    def is_diskless(self) -> bool:
        return self.configs.get("diskless.enable", "false") == "true"


@dataclass(frozen=True, slots=True)
class BrokerImage:
    node_id: int
    host: str
    port: int
    rack: str | None
    incarnation_id: uuid.UUID | None = None
    fenced: bool = False


@dataclass(frozen=True, slots=True)
class MetadataImage:
    offset: int = -1
    topics_by_name: Mapping[str, TopicImage] = field(default_factory=dict)
    topics_by_id: Mapping[uuid.UUID, TopicImage] = field(default_factory=dict)
    brokers: Mapping[int, BrokerImage] = field(default_factory=dict)
    broker_configs: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    next_producer_id: int = 0
    #: The active controller as last announced in the log (node id, lease epoch), or None.
    controller: tuple[int, int] | None = None

    def topic(self, name: str) -> TopicImage | None:
        return self.topics_by_name.get(name)

    def alive_brokers(self) -> list[BrokerImage]:
        """Unfenced brokers by node id: the ones clients are sent to."""
        return [self.brokers[b] for b in sorted(self.brokers) if not self.brokers[b].fenced]

    def apply(self, records: Iterable[tuple[int, MetadataRecord]]) -> MetadataImage:
        """A new image with the records applied (copy-on-write of the changed maps)."""
        by_name = dict(self.topics_by_name)
        brokers = dict(self.brokers)
        broker_configs = dict(self.broker_configs)
        next_producer_id = self.next_producer_id
        controller = self.controller
        offset = self.offset
        # Topics are rebuilt from mutable drafts so several records about one topic stay cheap.
        drafts: dict[str, dict] = {}

        def draft(name: str) -> dict:
            if name not in drafts:
                t = by_name[name]
                drafts[name] = {
                    "name": t.name,
                    "topic_id": t.topic_id,
                    "partitions": dict(t.partitions),
                    "configs": dict(t.configs),
                    "tiered": (t.tiered_state, t.tiered_epoch, t.tiered_delete),
                }
            return drafts[name]

        names_by_id = {t.topic_id: t.name for t in by_name.values()}
        for record_offset, record in records:
            offset = record_offset
            if isinstance(record, TopicRecord):
                by_name[record.name] = TopicImage(record.name, record.topic_id, {}, {})
                names_by_id[record.topic_id] = record.name
                drafts.pop(record.name, None)
            elif isinstance(record, PartitionRecord):
                name = names_by_id.get(record.topic_id)
                if name is not None:
                    draft(name)["partitions"][record.partition] = PartitionImage(
                        record.partition,
                        tuple(record.replicas),
                        tuple(record.isr),
                        record.leader,
                        record.leader_epoch,
                        record.partition_epoch,
                    )
            elif isinstance(record, PartitionChangeRecord):
                name = names_by_id.get(record.topic_id)
                if name is not None:
                    partitions = draft(name)["partitions"]
                    if record.partition in partitions:
                        partitions[record.partition] = partitions[record.partition].changed(record)
            elif isinstance(record, RemoveTopicRecord):
                name = names_by_id.pop(record.topic_id, None)
                if name is not None:
                    by_name.pop(name, None)
                    drafts.pop(name, None)
            elif isinstance(record, ConfigRecord):
                if record.resource_type == ConfigRecord.TOPIC:
                    if record.resource_name in by_name:
                        configs = draft(record.resource_name)["configs"]
                        if record.value is None:
                            configs.pop(record.name, None)
                        else:
                            configs[record.name] = record.value
                else:
                    current = dict(broker_configs.get(record.resource_name, {}))
                    if record.value is None:
                        current.pop(record.name, None)
                    else:
                        current[record.name] = record.value
                    broker_configs[record.resource_name] = current
            elif isinstance(record, RegisterBrokerRecord):
                brokers[record.node_id] = BrokerImage(
                    record.node_id, record.host, record.port, record.rack, record.incarnation_id, record.fenced
                )
            elif isinstance(record, (FenceBrokerRecord, UnfenceBrokerRecord)):
                if record.node_id in brokers:
                    brokers[record.node_id] = replace(
                        brokers[record.node_id], fenced=isinstance(record, FenceBrokerRecord)
                    )
            elif isinstance(record, ProducerIdsRecord):
                next_producer_id = max(next_producer_id, record.next_producer_id)
            elif isinstance(record, ControllerChangeRecord):
                controller = (record.node_id, record.epoch)
            elif isinstance(record, TieredStateRecord):
                name = names_by_id.get(record.topic_id)
                if name is not None:
                    draft(name)["tiered"] = (record.state, record.tiered_epoch, record.delete_remote)
        for name, d in drafts.items():
            by_name[name] = TopicImage(
                d["name"], d["topic_id"], MappingProxyType(d["partitions"]), MappingProxyType(d["configs"]), *d["tiered"]
            )
        return replace(
            self,
            offset=offset,
            topics_by_name=MappingProxyType(by_name),
            topics_by_id=MappingProxyType({t.topic_id: t for t in by_name.values()}),
            brokers=MappingProxyType(brokers),
            broker_configs=MappingProxyType(broker_configs),
            next_producer_id=next_producer_id,
            controller=controller,
        )
