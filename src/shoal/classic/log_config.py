"""The topic configs a classic log obeys, under Kafka's names and with Kafka's defaults.

The broker resolves topic overrides over its ``log.*`` defaults and hands the result here as a
mapping of Kafka topic-config names; ``LogConfig.from_properties`` picks what the engine uses.
``internal.segment.bytes``, when set, replaces ``segment.bytes`` (Kafka's ``segmentSize()``), and
``cleanup.policy`` says whether retention deletes (Kafka's ``config.delete``) and whether the
log cleaner compacts (``config.compact``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields

__all__ = ["LogConfig"]

_LONG_MAX = 2**63 - 1

# Kafka topic-config name -> LogConfig field.
_NAMES = {
    "segment.bytes": "segment_bytes",
    "segment.ms": "segment_ms",
    "segment.jitter.ms": "segment_jitter_ms",
    "segment.index.bytes": "segment_index_bytes",
    "index.interval.bytes": "index_interval_bytes",
    "flush.messages": "flush_messages",
    "flush.ms": "flush_ms",
    "retention.ms": "retention_ms",
    "retention.bytes": "retention_bytes",
    "file.delete.delay.ms": "file_delete_delay_ms",
    "producer.id.expiration.ms": "producer_id_expiration_ms",
    "delete.retention.ms": "delete_retention_ms",
    "min.compaction.lag.ms": "min_compaction_lag_ms",
    "max.compaction.lag.ms": "max_compaction_lag_ms",
}


@dataclass(frozen=True, slots=True)
class LogConfig:
    """Per-partition log settings (Kafka defaults)."""

    segment_bytes: int = 1024 * 1024 * 1024
    segment_ms: int = 7 * 24 * 3600 * 1000
    segment_jitter_ms: int = 0
    segment_index_bytes: int = 10 * 1024 * 1024
    index_interval_bytes: int = 4096
    flush_messages: int = _LONG_MAX
    flush_ms: int = _LONG_MAX
    retention_ms: int = 7 * 24 * 3600 * 1000
    retention_bytes: int = -1
    file_delete_delay_ms: int = 60_000
    producer_id_expiration_ms: int = 86_400_000
    #: ``cleanup.policy`` includes ``delete``: retention.ms / retention.bytes delete old segments.
    #: Without it (an empty policy) only the log start offset (DeleteRecords) removes segments.
    cleanup_delete: bool = True
    #: ``cleanup.policy`` includes ``compact``: the log cleaner keeps the latest record per key
    #: (``log_cleaner``), driven by the four settings after it.
    cleanup_compact: bool = False
    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = _LONG_MAX
    delete_retention_ms: int = 86_400_000
    #: Tiered storage (KIP-405, ``remote.storage.enable``): ``retention_ms`` / ``retention_bytes``
    #: are then the *local* retention (``local.retention.*``, -2: ``retention.*``), a segment is
    #: deleted locally only once it is in remote storage, and ``total_retention_*`` (the topic's
    #: ``retention.*``) applies to the whole log, remote segments included.
    remote_storage_enable: bool = False
    total_retention_ms: int = 7 * 24 * 3600 * 1000
    total_retention_bytes: int = -1

    @classmethod
    def from_properties(cls, props: Mapping[str, object] | None) -> LogConfig:
        """Build from Kafka names (``segment.bytes``...); unknown names are ignored, None means default."""
        if not props:
            return cls()
        values: dict[str, int | bool | float] = {}
        for name, field_name in _NAMES.items():
            value = props.get(name)
            if value is not None:
                values[field_name] = int(value)  # type: ignore[call-overload]
        internal = props.get("internal.segment.bytes")
        if internal is not None:
            values["segment_bytes"] = int(internal)  # type: ignore[call-overload]
        policy = props.get("cleanup.policy")
        if policy is not None:
            items = policy if isinstance(policy, list | tuple) else str(policy).split(",")
            policies = {str(p).strip() for p in items}
            values["cleanup_delete"] = "delete" in policies
            values["cleanup_compact"] = "compact" in policies
        ratio = props.get("min.cleanable.dirty.ratio")
        if ratio is not None:
            values["min_cleanable_dirty_ratio"] = float(ratio)  # type: ignore[arg-type]
        if str(props.get("remote.storage.enable", "false")).lower() == "true":
            values["remote_storage_enable"] = True
            defaults = {f.name: f.default for f in fields(cls)}
            for name in ("ms", "bytes"):
                total = int(values.get(f"retention_{name}", defaults[f"retention_{name}"]))  # type: ignore[call-overload]
                local = props.get(f"local.retention.{name}")
                values[f"total_retention_{name}"] = total
                if local is not None and int(local) != -2:  # type: ignore[call-overload]
                    values[f"retention_{name}"] = int(local)  # type: ignore[call-overload]
        return cls(**values)  # type: ignore[arg-type]

    def to_properties(self) -> dict[str, object]:
        """The settings under Kafka's names."""
        by_field = {v: k for k, v in _NAMES.items()}
        props: dict[str, object] = {
            by_field[f.name]: getattr(self, f.name) for f in fields(self) if f.name in by_field
        }
        props["cleanup.policy"] = ",".join(
            p for p, on in (("compact", self.cleanup_compact), ("delete", self.cleanup_delete)) if on
        )
        props["min.cleanable.dirty.ratio"] = self.min_cleanable_dirty_ratio
        if self.remote_storage_enable:  # retention.* is the whole log's, local.retention.* the local one
            props.update({
                "remote.storage.enable": "true",
                "retention.ms": self.total_retention_ms, "retention.bytes": self.total_retention_bytes,
                "local.retention.ms": self.retention_ms, "local.retention.bytes": self.retention_bytes,
            })
        return props
