"""Topic configs: every one Apache Kafka 4.x defines, with Kafka's types, defaults and validation.

The table is Kafka's ``LogConfig`` (4.3: the 33 public topic configs and ``internal.segment.bytes``,
in Kafka's definition order, which is also the order values are checked in) plus KIP-1163's
``diskless.enable``. CreateTopics, AlterConfigs and IncrementalAlterConfigs all go through
``validate_topic_configs``: unknown names, values of the wrong type or out of range, and Kafka's
cross-config rules are refused with Kafka's INVALID_CONFIG message. Then Shoal refuses, with a
message that says so, the values that ask for behaviour it does not have yet (``_NOT_BUILT_YET``):
such a value is never accepted and ignored.

Each config's doc says what Shoal does with it. Three cases:

- honoured: the classic log (or every topic) acts on the value;
- accepted, stored and described, but without effect in exactly the circumstances where Kafka
  ignores it too (a compaction setting on a topic that is not compacted, a recompression level
  while ``compression.type`` is ``producer``, a tiered-storage setting without
  ``remote.storage.enable``, a replication setting on a single-replica partition);
- refused when not the default (``_NOT_BUILT_YET``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from shoal.config_def import (
    ConfigDef,
    ConfigError,
    ConfigType,
    Validator,
    at_least,
    between,
    format_value,
    invalid_value,
    one_of,
    valid_list,
)

__all__ = ["TOPIC_CONFIGS", "validate_tiering_change", "validate_topic_configs"]

LONG_MAX = 2**63 - 1

# Compaction, tiered storage and replication throttles only act where Shoal does not go yet.
_COMPACTION_ONLY = (
    "Honoured when `cleanup.policy` includes `compact` (classic and diskless topics); Kafka ignores it "
    "otherwise, and so does Shoal."
)
_RECOMPRESSION_ONLY = (
    "Only used when the broker recompresses, and `compression.type` must stay `producer` (the broker "
    "keeps the producer's batches), so it is stored and described without effect, as Kafka ignores "
    "it then."
)
_THROTTLE_ONLY = (
    "Replication throttles are not built yet: followers fetch at full speed, and it is stored and "
    "described without effect."
)
_CLASSIC_ONLY = "Diskless topics have no local segments: there it is stored without effect."


def _gzip_level(name: str, value: Any) -> None:
    """``CompressionType.GZIP.levelValidator()``: 1 to 9, or -1 (zlib's default)."""
    if value > 9 or (value < 1 and value != -1):
        raise invalid_value(name, value, "Value must be between 1 and 9 or equal to -1")


def _throttled_replicas(name: str, value: Any) -> None:
    """Kafka's ``ThrottledReplicaListValidator``: ``*``, or ``partitionId:brokerId`` items (an empty
    item only at the end)."""
    proposed = [str(item).strip() for item in value]
    if proposed == ["*"] or _is_replica_list(proposed):
        return
    raise invalid_value(
        name,
        value,
        f"{name} must be the literal '*' or a list of replicas in the following format: "
        "[partitionId]:[brokerId],[partitionId]:[brokerId],...",
    )


_REPLICA = re.compile(r"[0-9]+:[0-9]+")


def _is_replica(replica: str) -> bool:
    """``partitionId:brokerId``, both Java ints."""
    return bool(_REPLICA.fullmatch(replica)) and all(int(part) < 2**31 for part in replica.split(":"))


def _is_replica_list(proposed: list[str]) -> bool:
    found_empty = False
    for replica in proposed:
        if not replica:
            found_empty = True
        elif found_empty or not _is_replica(replica):
            return False
    return True


def _def(
    name: str,
    type_: ConfigType,
    default: Any,
    doc: str,
    validator: Validator | None = None,
    broker_synonym: str | None = None,
    *,
    internal: bool = False,
) -> ConfigDef:
    return ConfigDef(name, type_, default, doc, validator, broker_synonym, internal=internal, kafka_list=True)


TOPIC_CONFIGS: dict[str, ConfigDef] = {
    d.name: d
    for d in [
        _def(
            "diskless.enable",
            ConfigType.BOOLEAN,
            False,
            "Makes the topic diskless (KIP-1163). Settable only when the topic is created.",
        ),
        _def(
            "segment.bytes",
            ConfigType.INT,
            1073741824,
            "Honoured by classic logs: the size at which a segment file is closed and a new one started. "
            "Retention deletes whole segments, so smaller segments free space more finely. Kafka 4.x's "
            f"minimum is 1 MiB (`internal.segment.bytes` goes lower). {_CLASSIC_ONLY}",
            at_least(1024 * 1024),
            "log.segment.bytes",
        ),
        _def(
            "segment.ms",
            ConfigType.LONG,
            604800000,
            "Honoured by classic logs: roll to a new segment once the active one is this old, even if it "
            f"is not full, so that retention can delete old data. {_CLASSIC_ONLY}",
            at_least(1),
        ),
        _def(
            "segment.jitter.ms",
            ConfigType.LONG,
            0,
            "Honoured by classic logs: the most that is subtracted, at random, from `segment.ms` for each "
            f"new segment, so that many partitions do not roll at once. {_CLASSIC_ONLY}",
            at_least(0),
        ),
        _def(
            "segment.index.bytes",
            ConfigType.INT,
            10485760,
            "Honoured by classic logs: the largest offset (and time) index of a segment; a segment whose "
            f"index is full rolls. {_CLASSIC_ONLY}",
            at_least(4),
            "log.index.size.max.bytes",
        ),
        _def(
            "flush.messages",
            ConfigType.LONG,
            LONG_MAX,
            "Honoured by classic logs: fsync the log after this many records (acks wait for it). Kafka's "
            f"default leaves flushing to the OS and relies on replication. {_CLASSIC_ONLY}",
            at_least(1),
            "log.flush.interval.messages",
        ),
        _def(
            "flush.ms",
            ConfigType.LONG,
            LONG_MAX,
            f"Honoured by classic logs: fsync the log when its oldest unflushed record is this old. {_CLASSIC_ONLY}",
            at_least(0),
        ),
        _def(
            "retention.bytes",
            ConfigType.LONG,
            None,
            "Honoured: with the `delete` cleanup policy, the most a partition keeps; whole old segments "
            "(classic) or batches (diskless) go beyond it. -1: no size limit.",
            None,
            "log.retention.bytes",
        ),
        _def(
            "retention.ms",
            ConfigType.LONG,
            None,
            "Honoured: with the `delete` cleanup policy, how long data is kept before old segments "
            "(classic) or batches (diskless) are deleted. -1: no time limit.",
            at_least(-1),
            "log.retention.ms",
        ),
        _def(
            "max.message.bytes",
            ConfigType.INT,
            None,
            "Honoured: the largest record batch (after compression) a producer may send to this topic.",
            at_least(0),
            "message.max.bytes",
        ),
        _def(
            "index.interval.bytes",
            ConfigType.INT,
            4096,
            "Honoured by classic logs: add an offset index entry every this many bytes of records; more "
            f"entries make lookups land closer but the index larger. {_CLASSIC_ONLY}",
            at_least(0),
            "log.index.interval.bytes",
        ),
        _def(
            "delete.retention.ms",
            ConfigType.LONG,
            86400000,
            "How long a tombstone (a record with a key and no value) and a transaction marker stay in a "
            "compacted log after the cleaner first reached them (KIP-534's delete horizon), so consumers "
            f"that read to the end in that time see the delete. {_COMPACTION_ONLY}",
            at_least(0),
            "log.cleaner.delete.retention.ms",
        ),
        _def(
            "min.compaction.lag.ms",
            ConfigType.LONG,
            0,
            f"The least time a record stays uncompacted: segments with newer records are not cleaned. {_COMPACTION_ONLY}",
            at_least(0),
            "log.cleaner.min.compaction.lag.ms",
        ),
        _def(
            "max.compaction.lag.ms",
            ConfigType.LONG,
            LONG_MAX,
            "The most time a record stays uncompacted: a log whose first uncleaned record is older is "
            f"cleaned whatever its dirty ratio. {_COMPACTION_ONLY}",
            at_least(1),
            "log.cleaner.max.compaction.lag.ms",
        ),
        _def(
            "file.delete.delay.ms",
            ConfigType.LONG,
            60000,
            "Honoured by classic logs: a segment that retention, DeleteRecords or truncation removes is "
            "renamed `*.deleted` at once and its files are deleted this much later (a restart deletes "
            f"leftovers). {_CLASSIC_ONLY}",
            at_least(0),
            "log.segment.delete.delay.ms",
        ),
        _def(
            "min.cleanable.dirty.ratio",
            ConfigType.DOUBLE,
            0.5,
            "How much of a compacted log (dirty bytes over all cleanable bytes) must be uncleaned before "
            f"the cleaner works on it. {_COMPACTION_ONLY}",
            between(0, 1),
            "log.cleaner.min.cleanable.ratio",
        ),
        _def(
            "cleanup.policy",
            ConfigType.LIST,
            ["delete"],
            "`delete`: retention (`retention.ms`, `retention.bytes`) deletes old data; `compact`: the log "
            "cleaner keeps the latest record of every key (records without a key are refused with "
            "INVALID_RECORD); both together do both; an empty list keeps data forever (only DeleteRecords "
            "removes it), as in Kafka 4.x.",
            valid_list("compact", "delete"),
        ),
        _def(
            "unclean.leader.election.enable",
            ConfigType.BOOLEAN,
            False,
            "Whether a replica outside the ISR may become leader of a classic partition when no ISR "
            "replica can, losing the records it lacks.",
            None,
            "unclean.leader.election.enable",
        ),
        _def(
            "min.insync.replicas",
            ConfigType.INT,
            1,
            "With acks=all, how many in-sync replicas a classic partition needs (at most its replication factor, "
            "as Kafka's effective min ISR): with fewer in the ISR, "
            "produce answers NOT_ENOUGH_REPLICAS before appending, or NOT_ENOUGH_REPLICAS_AFTER_APPEND when "
            "the ISR shrank while the write waited. Diskless data is kept by object storage: not used there.",
            at_least(1),
            "min.insync.replicas",
        ),
        _def(
            "compression.type",
            ConfigType.STRING,
            None,
            "Final compression of the topic's data. Only `producer` (keep the producer's compression) "
            "is accepted for now: the broker does not recompress batches yet.",
            one_of("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"),
            "compression.type",
        ),
        _def(
            "compression.gzip.level",
            ConfigType.INT,
            -1,
            f"The gzip level when `compression.type` is `gzip` (-1: zlib's default). {_RECOMPRESSION_ONLY}",
            _gzip_level,
        ),
        _def(
            "compression.lz4.level",
            ConfigType.INT,
            9,
            f"The lz4 level when `compression.type` is `lz4`. {_RECOMPRESSION_ONLY}",
            between(1, 17),
        ),
        _def(
            "compression.zstd.level",
            ConfigType.INT,
            3,
            f"The zstd level when `compression.type` is `zstd`. {_RECOMPRESSION_ONLY}",
            between(-131072, 22),
        ),
        _def(
            "preallocate",
            ConfigType.BOOLEAN,
            False,
            "Preallocate a segment file's full size when it is created. `true` is refused with "
            "INVALID_CONFIG: Shoal's classic log does not preallocate segment files.",
        ),
        _def(
            "message.timestamp.type",
            ConfigType.STRING,
            None,
            "Honoured: `CreateTime` keeps the producer's timestamps; `LogAppendTime` stamps the broker's.",
            one_of("CreateTime", "LogAppendTime"),
            "log.message.timestamp.type",
        ),
        _def(
            "message.timestamp.before.max.ms",
            ConfigType.LONG,
            None,
            "Honoured, CreateTime topics: refuse records whose timestamp is more than this before the broker's clock.",
            at_least(0),
            "log.message.timestamp.before.max.ms",
        ),
        _def(
            "message.timestamp.after.max.ms",
            ConfigType.LONG,
            None,
            "Honoured, CreateTime topics: refuse records whose timestamp is more than this after the broker's clock.",
            at_least(0),
            "log.message.timestamp.after.max.ms",
        ),
        _def(
            "leader.replication.throttled.replicas",
            ConfigType.LIST,
            [],
            "Replicas (`partitionId:brokerId`, or `*`) whose replication the leader throttles. "
            + _THROTTLE_ONLY,
            _throttled_replicas,
        ),
        _def(
            "follower.replication.throttled.replicas",
            ConfigType.LIST,
            [],
            "Replicas (`partitionId:brokerId`, or `*`) whose replication the follower throttles. "
            + _THROTTLE_ONLY,
            _throttled_replicas,
        ),
        _def(
            "remote.storage.enable",
            ConfigType.BOOLEAN,
            False,
            "Tiered storage for the topic (KIP-405): the leader copies rolled segments to remote storage and "
            "local segments are then kept by `local.retention.*`, the whole log by `retention.*`. Needs "
            "`remote.log.storage.system.enable=true` on the brokers (else refused with Kafka's message); "
            "refused for compacted topics. On a diskless topic (KIP-1163) the partition leader builds segments "
            "from the Batch Coordinator's batches and copies them; the coordinator then drops those batches, so "
            "WAL objects and coordinator rows stay bounded while the oldest offsets are read from tiered "
            "segments. Turning it off needs `remote.log.delete.on.disable=true` (KIP-950 as Kafka 3.9 ships it).",
        ),
        _def(
            "local.retention.ms",
            ConfigType.LONG,
            -2,
            "How long segments stay on local disk (-2: `retention.ms`): on a tiered classic topic, once they are "
            "in remote storage; on a diskless topic, in each replica's cache log (KIP-1163). Without either it "
            "has no effect. At most `retention.ms`.",
            at_least(-2),
        ),
        _def(
            "local.retention.bytes",
            ConfigType.LONG,
            -2,
            "How many bytes a partition keeps on local disk (-2: `retention.bytes`): on a tiered classic topic, "
            "of segments already in remote storage; on a diskless topic, in each replica's cache log (KIP-1163). "
            "Without either it has no effect. At most `retention.bytes`.",
            at_least(-2),
        ),
        _def(
            "remote.log.copy.disable",
            ConfigType.BOOLEAN,
            False,
            "With tiered storage, stop copying segments to remote storage (KIP-950's retain: remote data stays "
            "readable and expires by `retention.*`); `local.retention.*` must then equal `retention.*`.",
        ),
        _def(
            "remote.log.delete.on.disable",
            ConfigType.BOOLEAN,
            False,
            "Delete the remote data when `remote.storage.enable` is turned off (KIP-950); turning it off "
            "without this is refused.",
        ),
        _def(
            "internal.segment.bytes",
            ConfigType.INT,
            None,
            "Kafka's internal test setting: when set, it replaces `segment.bytes` for classic logs, without "
            "`segment.bytes`' 1 MiB minimum. Honoured; listed by DescribeConfigs only when set.",
            internal=True,
        ),
    ]
}


def validate_topic_configs(
    configs: Mapping[str, str | None], *, remote_storage_system_enabled: bool = False
) -> dict[str, str]:
    """Check topic configs as Kafka's ``LogConfig.validate`` does, then refuse what Shoal does not
    do yet; returns them normalised as Kafka describes them (in the order given).

    Raises ConfigError with Kafka's message (INVALID_CONFIG)."""
    for name in configs:
        if name not in TOPIC_CONFIGS:
            raise ConfigError(f"Unknown topic config name: {name}")
    values: dict[str, Any] = {}
    for name, d in TOPIC_CONFIGS.items():  # Kafka parses in its definition order
        if name not in configs:
            continue
        raw = configs[name]
        if raw is None:
            raise ConfigError(f"Invalid value null for configuration {name}: value must not be null")
        values[name] = d.parse(raw)
    _check_together(values, remote_storage_system_enabled)
    for name, value in values.items():
        problem = _NOT_BUILT_YET.get(name, lambda _: None)(value)
        if problem:
            raise ConfigError(f"Invalid value {configs[name]} for configuration {name}: {problem}")
    return {name: format_value(values[name]) for name in configs}


def _value(values: Mapping[str, Any], name: str) -> Any:
    return values[name] if name in values else TOPIC_CONFIGS[name].default


#: Kafka's defaults of ``log.retention.ms`` / ``log.retention.bytes``, for a topic that sets neither.
_RETENTION_DEFAULTS = {"ms": 7 * 24 * 3600 * 1000, "bytes": -1}


def _retention(values: Mapping[str, Any], unit: str) -> int:
    value = _value(values, f"retention.{unit}")
    return _RETENTION_DEFAULTS[unit] if value is None else int(value)


def _check_together(values: Mapping[str, Any], remote_storage_system_enabled: bool) -> None:
    """Kafka's ``LogConfig.validateValues`` and its remote-storage checks of the whole set."""
    min_lag, max_lag = _value(values, "min.compaction.lag.ms"), _value(values, "max.compaction.lag.ms")
    if min_lag > max_lag:
        raise ConfigError(
            f"conflict topic config setting min.compaction.lag.ms ({min_lag}) > max.compaction.lag.ms ({max_lag})"
        )
    if not _value(values, "remote.storage.enable"):
        return
    if not remote_storage_system_enabled:  # Kafka's validateRemoteStorageOnlyIfSystemEnabled
        raise ConfigError(
            "Tiered Storage functionality is disabled in the broker. Topic cannot be configured with remote log storage."
        )
    if "compact" in _value(values, "cleanup.policy"):  # validateNoRemoteStorageForCompactedTopic
        raise ConfigError("Remote log storage is unsupported for the compacted topics")
    for unit in ("ms", "bytes"):  # validateRemoteStorageRetentionSize / ...Time
        total, local = _retention(values, unit), _value(values, f"local.retention.{unit}")
        if total != -1 and local != -2 and (local == -1 or local > total):
            raise ConfigError(
                f"Invalid value {local} for configuration local.retention.{unit}: Value must not be more than "
                f"retention.{unit} property value: {total}"
            )


def validate_tiering_change(old: Mapping[str, str], new: Mapping[str, str]) -> None:
    """KIP-950 as Kafka 3.9 ships it, for AlterConfigs of a topic (``old`` -> ``new``, both
    validated): turning remote storage off needs ``remote.log.delete.on.disable=true``, and with
    ``remote.log.copy.disable=true`` local retention must equal total retention (nothing more is
    copied, so local data must not expire before remote data)."""

    def flag(configs: Mapping[str, str], name: str) -> bool:
        return configs.get(name, "false") == "true"

    if flag(old, "remote.storage.enable") and not flag(new, "remote.storage.enable") and not flag(
        new, "remote.log.delete.on.disable"
    ):
        raise ConfigError(
            "It is invalid to disable remote storage without deleting remote data. If you want to keep the remote "
            "data and turn to read only, please set `remote.storage.enable=true,remote.log.copy.disable=true`. If "
            "you want to disable remote storage and delete all remote data, please set "
            "`remote.storage.enable=false,remote.log.delete.on.disable=true`."
        )
    if flag(new, "remote.storage.enable") and flag(new, "remote.log.copy.disable"):
        for unit in ("bytes", "ms"):
            total = int(new[f"retention.{unit}"]) if f"retention.{unit}" in new else _retention({}, unit)
            local = int(new.get(f"local.retention.{unit}", -2))
            if local != -2 and local != total:
                raise ConfigError(
                    f"When `remote.log.copy.disable` is set to true, the `local.retention.{unit}` and "
                    f"`retention.{unit}` must be set to the identical value because there will be no more logs "
                    "copied to the remote storage."
                )


# Values that ask for behaviour this Shoal version does not have: refused, never accepted and
# ignored.
_NOT_BUILT_YET: dict[str, Callable[[Any], str | None]] = {
    "compression.type": lambda v: (
        "this Shoal version stores batches as the producer compressed them and does not recompress "
        "them yet; only compression.type=producer is supported"
        if v != "producer"
        else None
    ),
    "preallocate": lambda v: (
        "this Shoal version's classic log does not preallocate segment files (preallocation is not "
        "built); only preallocate=false is supported"
        if v
        else None
    ),
}
