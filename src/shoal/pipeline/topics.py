"""Which topic-partitions a read covers, and how each is read (object storage or brokers).

With the stores (``shoal.config``, ``shoal.data.dir``, ``./shoal-data``; see ``stores.py``)
the driver reads the cluster metadata log itself, through the store factory, so it knows which topics are diskless and their topic ids,
with no broker round trip. Without it, Metadata from the brokers lists the topics and every
partition is read through the brokers.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from shoal.pipeline.options import OptionError, ReadOptions, Subscription, TopicPartition
from shoal.pipeline.stores import load_image

__all__ = ["PartitionSource", "TopicInfo", "resolve_partitions", "list_topics"]

STORAGE = "storage"
BROKER = "broker"


@dataclass(frozen=True, slots=True)
class TopicInfo:
    name: str
    topic_id: str | None  # the UUID, when the metadata log says it
    partitions: tuple[int, ...]
    diskless: bool


@dataclass(frozen=True, slots=True)
class PartitionSource:
    """One topic-partition to read and the path it is read by (``storage`` or ``broker``)."""

    topic: str
    partition: int
    topic_id: str | None
    via: str

    @property
    def tp(self) -> TopicPartition:
        return (self.topic, self.partition)

    def topic_uuid(self) -> uuid.UUID:
        assert self.topic_id is not None, "only diskless partitions read from storage have a topic id"
        return uuid.UUID(self.topic_id)


def list_topics(opts: ReadOptions) -> dict[str, TopicInfo]:
    """Every topic of the cluster, from the metadata log or else from the brokers."""
    if opts.store is not None:
        image = load_image(opts.store)
        return {
            t.name: TopicInfo(t.name, str(t.topic_id), tuple(sorted(t.partitions)), t.is_diskless)
            for t in image.topics_by_name.values()
        }
    from confluent_kafka.admin import AdminClient

    assert opts.bootstrap_servers is not None
    admin = AdminClient({"bootstrap.servers": opts.bootstrap_servers, **opts.kafka_conf})
    md = admin.list_topics(timeout=opts.poll_timeout_ms / 1000)
    out: dict[str, TopicInfo] = {}
    for name, t in md.topics.items():
        if t.error is not None:
            continue
        out[name] = TopicInfo(name, None, tuple(sorted(t.partitions)), False)
    return out


def _via(opts: ReadOptions, topic: TopicInfo) -> str:
    if opts.read_via == BROKER:
        return BROKER
    can_storage = topic.diskless and topic.topic_id is not None and opts.storage_url is not None
    if opts.read_via == STORAGE:
        if not can_storage:
            raise OptionError(f"shoal.readVia=storage: topic {topic.name} is not a diskless topic")
        return STORAGE
    if can_storage:
        return STORAGE
    if not opts.bootstrap_servers:
        raise OptionError(
            f"topic {topic.name} is not diskless: it can only be read through the brokers (set kafka.bootstrap.servers)"
        )
    return BROKER


def resolve_partitions(opts: ReadOptions, *, allow_missing: bool = False) -> list[PartitionSource]:
    """The subscribed topic-partitions in (topic, partition) order.

    ``subscribe`` and ``assign`` name topics that must exist (Spark's batch reads fail the
    same way); ``allow_missing`` lets streaming queries wait for topics created later.
    """
    topics = list_topics(opts)
    sub: Subscription = opts.subscription
    out: list[PartitionSource] = []
    if sub.kind == "assign":
        for topic, partition in sub.assignment:
            info = topics.get(topic)
            if info is None or partition not in info.partitions:
                if allow_missing:
                    continue
                raise OptionError(f"assign: {topic}-{partition} does not exist")
            out.append(PartitionSource(topic, partition, info.topic_id, _via(opts, info)))
        return out
    names = sorted(n for n in topics if sub.matches(n))
    if sub.kind == "subscribe" and not allow_missing:
        missing = [t for t in sub.topics if t not in topics]
        if missing:
            raise OptionError(f"subscribe: topic(s) {', '.join(missing)} do not exist")
    for name in names:
        info = topics[name]
        via = _via(opts, info)
        out.extend(PartitionSource(name, p, info.topic_id, via) for p in info.partitions)
    return out
