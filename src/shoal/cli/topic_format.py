"""The lines ``shoal topics describe`` prints: Kafka's tab-separated topic and partition lines,
with the topic's kind and each partition's log start and end offsets added at the end (so
scripts that split Kafka's lines on tabs still find every field where they expect it)."""

from __future__ import annotations

from collections.abc import Sequence

from shoal.cli.diskless_metadata import kafka_uuid
from shoal.cli.topic_admin import ConfigEntry, PartitionMeta, TopicMeta


def _ids(values: Sequence[int]) -> str:
    return ",".join(map(str, values))


def _offset(value: int | None) -> str:
    return "-" if value is None else str(value)


def topic_line(meta: TopicMeta, configs: Sequence[ConfigEntry], is_diskless: bool) -> str:
    """Kafka's TopicDescription line, plus the kind."""
    overrides = ",".join(f"{c.name}={c.value}" for c in configs if not c.is_default)
    replication = len(meta.partitions[0].replicas) if meta.partitions else 0
    line = f"Topic: {meta.name}"
    if meta.topic_id is not None:
        line += f"\tTopicId: {kafka_uuid(meta.topic_id)}"
    line += f"\tPartitionCount: {len(meta.partitions)}\tReplicationFactor: {replication}\tConfigs: {overrides}"
    return line + f"\tKind: {'diskless' if is_diskless else 'classic'}"


def partition_line(topic: str, p: PartitionMeta, offsets: tuple[int | None, int | None]) -> str:
    """Kafka's PartitionDescription line (``Offline:`` when replicas are offline), plus log start/end."""
    line = (
        f"\tTopic: {topic}\tPartition: {p.partition}\tLeader: {p.leader if p.leader >= 0 else 'none'}"
        f"\tReplicas: {_ids(p.replicas)}\tIsr: {_ids(p.isr)}"
    )
    if p.offline:
        line += f"\tOffline: {_ids(p.offline)}"
    return line + f"\tLogStartOffset: {_offset(offsets[0])}\tLogEndOffset: {_offset(offsets[1])}"
