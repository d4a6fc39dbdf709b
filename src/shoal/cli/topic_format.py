"""The lines ``shoal topics describe`` prints: Kafka's tab-separated topic and partition lines,
with the topic's kind and each partition's log start and end offsets added at the end (so
scripts that split Kafka's lines on tabs still find every field where they expect it).

Also which partitions kafka-topics.sh's describe reports keep (``--under-replicated-partitions``,
``--unavailable-partitions``, ``--under-min-isr-partitions``, ``--at-min-isr-partitions``), as
Kafka's TopicCommand decides it: a partition is printed when any of the asked reports holds for it,
and with a report asked no topic line is printed.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from shoal.cli.diskless_metadata import kafka_uuid
from shoal.cli.topic_admin import ClusterTopics, ConfigEntry, PartitionMeta, TopicCommandError, TopicMeta
from shoal.metadata.tiered_state import DESCRIBE_KEYS

MIN_ISR_CONFIG = "min.insync.replicas"

Offsets = tuple[int | None, int | None]
_NO_OFFSETS: Offsets = (None, None)


def _ids(values: Sequence[int]) -> str:
    return ",".join(map(str, values))


def _offset(value: int | None) -> str:
    return "-" if value is None else str(value)


TIERED_STATE_KEYS = DESCRIBE_KEYS  # a tiered topic's KIP-950 state, asked for by name


def topic_line(meta: TopicMeta, configs: Sequence[ConfigEntry], is_diskless: bool) -> str:
    """Kafka's TopicDescription line, plus the kind."""
    tiered = {c.name: c.value for c in configs if c.name in TIERED_STATE_KEYS}
    overrides = ",".join(f"{c.name}={c.value}" for c in configs if not c.is_default and c.name not in tiered)
    replication = len(meta.partitions[0].replicas) if meta.partitions else 0
    line = f"Topic: {meta.name}"
    if meta.topic_id is not None:
        line += f"\tTopicId: {kafka_uuid(meta.topic_id)}"
    line += f"\tPartitionCount: {len(meta.partitions)}\tReplicationFactor: {replication}\tConfigs: {overrides}"
    line += f"\tKind: {'diskless' if is_diskless else 'classic'}"
    if tiered:  # KIP-950's state machine of a tiered topic
        line += f"\tTieredState: {tiered.get(TIERED_STATE_KEYS[0])}\tTieredEpoch: {tiered.get(TIERED_STATE_KEYS[1])}"
    return line


def partition_line(topic: str, p: PartitionMeta, offsets: Offsets) -> str:
    """Kafka's PartitionDescription line, plus ``Offline:`` when replicas are offline and log start/end."""
    line = (
        f"\tTopic: {topic}\tPartition: {p.partition}\tLeader: {p.leader if p.leader >= 0 else 'none'}"
        f"\tReplicas: {_ids(p.replicas)}\tIsr: {_ids(p.isr)}"
    )
    if p.offline:
        line += f"\tOffline: {_ids(p.offline)}"
    return line + f"\tLogStartOffset: {_offset(offsets[0])}\tLogEndOffset: {_offset(offsets[1])}"


# ----------------------------------------------------------------------------- describe reports


@dataclass(frozen=True, slots=True)
class PartitionReports:
    """The describe reports asked for. Kafka 4.x's TopicCommand accepts them together (its older Scala
    version refused that) and prints a partition when any of them holds for it."""

    under_replicated: bool = False
    unavailable: bool = False
    under_min_isr: bool = False
    at_min_isr: bool = False

    @property
    def any(self) -> bool:
        """Whether a report was asked: then only matching partitions are printed, and no topic lines."""
        return self.under_replicated or self.unavailable or self.under_min_isr or self.at_min_isr

    @property
    def needs_min_isr(self) -> bool:
        """Whether the topics' min.insync.replicas is needed (DescribeConfigs)."""
        return self.under_min_isr or self.at_min_isr


def has_leader(p: PartitionMeta, live_brokers: Collection[int]) -> bool:
    """Kafka's admin client gives a partition no leader when its leader id is -1 or not a broker of the
    Metadata answer."""
    return p.leader >= 0 and p.leader in live_brokers


def is_under_replicated(p: PartitionMeta) -> bool:
    """Fewer in-sync replicas than replicas."""
    return len(p.isr) < len(p.replicas)


def is_unavailable(p: PartitionMeta, live_brokers: Collection[int]) -> bool:
    """No leader, or a leader that is not a live broker."""
    return not has_leader(p, live_brokers)


def is_under_min_isr(p: PartitionMeta, live_brokers: Collection[int], min_isr: int) -> bool:
    """Fewer in-sync replicas than min.insync.replicas; a partition without a leader counts too (as Kafka's)."""
    return not has_leader(p, live_brokers) or len(p.isr) < min_isr


def is_at_min_isr(p: PartitionMeta, min_isr: int) -> bool:
    """Exactly min.insync.replicas in-sync replicas."""
    return len(p.isr) == min_isr


def min_insync_replicas(topic: str, configs: Sequence[ConfigEntry]) -> int:
    """The topic's min.insync.replicas from its DescribeConfigs answer."""
    for entry in configs:
        if entry.name == MIN_ISR_CONFIG:
            try:
                return int(entry.value or "")
            except ValueError:
                raise TopicCommandError(
                    f"Topic '{topic}' has an invalid {MIN_ISR_CONFIG}: {entry.value!r}"
                ) from None
    raise TopicCommandError(f"DescribeConfigs did not give {MIN_ISR_CONFIG} for topic '{topic}'")


def is_reported(
    p: PartitionMeta, reports: PartitionReports, live_brokers: Collection[int], min_isr: int | None
) -> bool:
    """Whether ``describe`` prints the partition: always without reports, else when one asked holds."""
    if not reports.any:
        return True
    if reports.under_replicated and is_under_replicated(p):
        return True
    if reports.unavailable and is_unavailable(p, live_brokers):
        return True
    if not reports.needs_min_isr:
        return False
    if min_isr is None:
        raise ValueError("the min-ISR reports need the topic's min.insync.replicas")
    return (reports.under_min_isr and is_under_min_isr(p, live_brokers, min_isr)) or (
        reports.at_min_isr and is_at_min_isr(p, min_isr)
    )


def reported_partitions(
    cluster: ClusterTopics,
    names: Sequence[str],
    reports: PartitionReports,
    min_isr: Mapping[str, int] | None = None,
) -> dict[str, tuple[PartitionMeta, ...]]:
    """Each topic's partitions that ``describe`` prints, in partition order."""
    return {
        name: tuple(
            p
            for p in cluster.topics[name].partitions
            if is_reported(p, reports, cluster.brokers, None if min_isr is None else min_isr.get(name))
        )
        for name in names
    }


def describe_lines(
    cluster: ClusterTopics,
    partitions: Mapping[str, Sequence[PartitionMeta]],
    offsets: Mapping[tuple[str, int], Offsets],
    headers: Mapping[str, tuple[Sequence[ConfigEntry], bool]] | None,
    local_starts: Mapping[tuple[str, int], int | None] | None = None,
) -> list[str]:
    """The lines of ``describe``: per topic (in ``partitions``' order) its topic line when ``headers``
    gives its configs and kind (None: no topic lines, as with a report), then its partition lines
    (with ``LocalLogStartOffset`` for tiered partitions in ``local_starts``)."""
    lines: list[str] = []
    for name, parts in partitions.items():
        if headers is not None:
            configs, is_diskless = headers[name]
            lines.append(topic_line(cluster.topics[name], configs, is_diskless))
        for p in parts:
            line = partition_line(name, p, offsets.get((name, p.partition), _NO_OFFSETS))
            if local_starts and (name, p.partition) in local_starts:
                line += f"\tLocalLogStartOffset: {_offset(local_starts[(name, p.partition)])}"
            lines.append(line)
    return lines
