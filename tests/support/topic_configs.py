"""Kafka 4.x's topic configs as test data: names, types and defaults (Kafka 4.3's ``LogConfig``), a
valid non-default value of each, values Kafka refuses with its message, and the values Shoal
refuses because they ask for what it does not do yet. The unit and integration tests share it."""

from __future__ import annotations

LONG_MAX = "9223372036854775807"
TIERED_OFF = "Tiered Storage functionality is disabled in the broker. Topic cannot be configured with remote log storage."
THROTTLE_FORMAT = "must be the literal '*' or a list of replicas in the following format: [partitionId]:[brokerId],[partitionId]:[brokerId],..."

#: Every topic config of Kafka 4.3's ``LogConfig`` (33 public ones and the internal
#: ``internal.segment.bytes``): its DescribeConfigs type and its default as Kafka prints it
#: (None: no default; a broker synonym supplies it).
KAFKA_TOPIC_CONFIGS: dict[str, tuple[str, str | None]] = {
    "cleanup.policy": ("LIST", "delete"),
    "compression.gzip.level": ("INT", "-1"),
    "compression.lz4.level": ("INT", "9"),
    "compression.type": ("STRING", "producer"),
    "compression.zstd.level": ("INT", "3"),
    "delete.retention.ms": ("LONG", "86400000"),
    "file.delete.delay.ms": ("LONG", "60000"),
    "flush.messages": ("LONG", LONG_MAX),
    "flush.ms": ("LONG", LONG_MAX),
    "follower.replication.throttled.replicas": ("LIST", ""),
    "index.interval.bytes": ("INT", "4096"),
    "internal.segment.bytes": ("INT", None),
    "leader.replication.throttled.replicas": ("LIST", ""),
    "local.retention.bytes": ("LONG", "-2"),
    "local.retention.ms": ("LONG", "-2"),
    "max.compaction.lag.ms": ("LONG", LONG_MAX),
    "max.message.bytes": ("INT", "1048588"),
    "message.timestamp.after.max.ms": ("LONG", "3600000"),
    "message.timestamp.before.max.ms": ("LONG", LONG_MAX),
    "message.timestamp.type": ("STRING", "CreateTime"),
    "min.cleanable.dirty.ratio": ("DOUBLE", "0.5"),
    "min.compaction.lag.ms": ("LONG", "0"),
    "min.insync.replicas": ("INT", "1"),
    "preallocate": ("BOOLEAN", "false"),
    "remote.log.copy.disable": ("BOOLEAN", "false"),
    "remote.log.delete.on.disable": ("BOOLEAN", "false"),
    "remote.storage.enable": ("BOOLEAN", "false"),
    "retention.bytes": ("LONG", "-1"),
    "retention.ms": ("LONG", "604800000"),
    "segment.bytes": ("INT", "1073741824"),
    "segment.index.bytes": ("INT", "10485760"),
    "segment.jitter.ms": ("LONG", "0"),
    "segment.ms": ("LONG", "604800000"),
    "unclean.leader.election.enable": ("BOOLEAN", "false"),
}

#: A valid non-default value of every Kafka topic config Shoal accepts a non-default value of, as
#: sent -> as DescribeConfigs returns it (Kafka's ``ConfigDef.convertToString`` of the parsed value).
VALID_NON_DEFAULT: dict[str, tuple[str, str]] = {
    "cleanup.policy": ("", ""),  # Kafka 4.x: an empty policy keeps data forever
    "compression.gzip.level": ("6", "6"),
    "compression.lz4.level": ("12", "12"),
    "compression.zstd.level": (" -5 ", "-5"),
    "delete.retention.ms": ("3600000", "3600000"),
    "file.delete.delay.ms": ("30000", "30000"),
    "flush.messages": ("10000", "10000"),
    "flush.ms": ("60000", "60000"),
    "follower.replication.throttled.replicas": ("*", "*"),
    "index.interval.bytes": ("8192", "8192"),
    "internal.segment.bytes": ("524288", "524288"),
    "leader.replication.throttled.replicas": ("0:1 , 1:1", "0:1,1:1"),
    "local.retention.bytes": ("1048576", "1048576"),
    "local.retention.ms": ("3600000", "3600000"),
    "max.compaction.lag.ms": ("86400000", "86400000"),
    "max.message.bytes": ("2097152", "2097152"),
    "message.timestamp.after.max.ms": ("7200000", "7200000"),
    "message.timestamp.before.max.ms": ("86400000", "86400000"),
    "message.timestamp.type": ("LogAppendTime", "LogAppendTime"),
    "min.cleanable.dirty.ratio": (".25", "0.25"),
    "min.compaction.lag.ms": ("1000", "1000"),
    "min.insync.replicas": ("2", "2"),
    "remote.log.copy.disable": ("TRUE", "true"),
    "remote.log.delete.on.disable": ("true", "true"),
    "retention.bytes": ("1073741824", "1073741824"),
    "retention.ms": ("86400000", "86400000"),
    "segment.bytes": ("2097152", "2097152"),
    "segment.index.bytes": ("1048576", "1048576"),
    "segment.jitter.ms": ("1000", "1000"),
    "segment.ms": ("3600000", "3600000"),
    "unclean.leader.election.enable": ("true", "true"),
}

#: The Kafka configs whose every non-default value Shoal refuses (what it does not do yet): the
#: one value allowed is Kafka's default.
REFUSED_NON_DEFAULT = {"compression.type", "preallocate", "remote.storage.enable"}


def invalid(name: str, value: str, message: str) -> str:
    return f"Invalid value {value} for configuration {name}: {message}"


#: Values Kafka refuses, (config, value) -> Kafka's INVALID_CONFIG message.
INVALID: dict[tuple[str, str], str] = {
    ("diskless.enable", "maybe"): invalid(
        "diskless.enable", "maybe", "Expected value to be either true or false"
    ),
    ("segment.bytes", "1048575"): invalid("segment.bytes", "1048575", "Value must be at least 1048576"),
    ("segment.bytes", "1GB"): invalid("segment.bytes", "1GB", "Not a number of type INT"),
    ("segment.bytes", "2147483648"): invalid("segment.bytes", "2147483648", "Not a number of type INT"),
    ("segment.ms", "0"): invalid("segment.ms", "0", "Value must be at least 1"),
    ("segment.jitter.ms", "-1"): invalid("segment.jitter.ms", "-1", "Value must be at least 0"),
    ("segment.index.bytes", "3"): invalid("segment.index.bytes", "3", "Value must be at least 4"),
    ("flush.messages", "0"): invalid("flush.messages", "0", "Value must be at least 1"),
    ("flush.ms", "-1"): invalid("flush.ms", "-1", "Value must be at least 0"),
    ("retention.bytes", "lots"): invalid("retention.bytes", "lots", "Not a number of type LONG"),
    ("retention.bytes", "9223372036854775808"): invalid(
        "retention.bytes", "9223372036854775808", "Not a number of type LONG"
    ),
    ("retention.ms", "-2"): invalid("retention.ms", "-2", "Value must be at least -1"),
    ("retention.ms", "1_000"): invalid("retention.ms", "1_000", "Not a number of type LONG"),
    ("max.message.bytes", "-1"): invalid("max.message.bytes", "-1", "Value must be at least 0"),
    ("index.interval.bytes", "-1"): invalid("index.interval.bytes", "-1", "Value must be at least 0"),
    ("delete.retention.ms", "-1"): invalid("delete.retention.ms", "-1", "Value must be at least 0"),
    ("min.compaction.lag.ms", "-1"): invalid("min.compaction.lag.ms", "-1", "Value must be at least 0"),
    ("max.compaction.lag.ms", "0"): invalid("max.compaction.lag.ms", "0", "Value must be at least 1"),
    ("file.delete.delay.ms", "-1"): invalid("file.delete.delay.ms", "-1", "Value must be at least 0"),
    ("min.cleanable.dirty.ratio", "1.5"): invalid(
        "min.cleanable.dirty.ratio", "1.5", "Value must be no more than 1"
    ),
    ("min.cleanable.dirty.ratio", "2"): invalid(
        "min.cleanable.dirty.ratio", "2.0", "Value must be no more than 1"
    ),
    ("min.cleanable.dirty.ratio", "-0.1"): invalid(
        "min.cleanable.dirty.ratio", "-0.1", "Value must be at least 0"
    ),
    ("min.cleanable.dirty.ratio", "half"): invalid(
        "min.cleanable.dirty.ratio", "half", "Not a number of type DOUBLE"
    ),
    ("cleanup.policy", "shred"): invalid("cleanup.policy", "shred", "String must be one of: compact, delete"),
    ("cleanup.policy", "delete,delete"): "Configuration 'cleanup.policy' values must not be duplicated.",
    ("cleanup.policy", "delete,"): "Configuration 'cleanup.policy' values must not be empty.",
    ("unclean.leader.election.enable", "yes"): invalid(
        "unclean.leader.election.enable", "yes", "Expected value to be either true or false"
    ),
    ("min.insync.replicas", "0"): invalid("min.insync.replicas", "0", "Value must be at least 1"),
    ("compression.type", "none"): invalid(
        "compression.type", "none", "String must be one of: uncompressed, zstd, lz4, snappy, gzip, producer"
    ),
    ("compression.type", "GZIP"): invalid(
        "compression.type", "GZIP", "String must be one of: uncompressed, zstd, lz4, snappy, gzip, producer"
    ),
    ("compression.gzip.level", "0"): invalid(
        "compression.gzip.level", "0", "Value must be between 1 and 9 or equal to -1"
    ),
    ("compression.gzip.level", "10"): invalid(
        "compression.gzip.level", "10", "Value must be between 1 and 9 or equal to -1"
    ),
    ("compression.lz4.level", "0"): invalid("compression.lz4.level", "0", "Value must be at least 1"),
    ("compression.lz4.level", "18"): invalid("compression.lz4.level", "18", "Value must be no more than 17"),
    ("compression.zstd.level", "-131073"): invalid(
        "compression.zstd.level", "-131073", "Value must be at least -131072"
    ),
    ("compression.zstd.level", "23"): invalid(
        "compression.zstd.level", "23", "Value must be no more than 22"
    ),
    ("preallocate", "maybe"): invalid("preallocate", "maybe", "Expected value to be either true or false"),
    ("message.timestamp.type", "Whenever"): invalid(
        "message.timestamp.type", "Whenever", "String must be one of: CreateTime, LogAppendTime"
    ),
    ("message.timestamp.before.max.ms", "-1"): invalid(
        "message.timestamp.before.max.ms", "-1", "Value must be at least 0"
    ),
    ("message.timestamp.after.max.ms", "-1"): invalid(
        "message.timestamp.after.max.ms", "-1", "Value must be at least 0"
    ),
    ("leader.replication.throttled.replicas", "0-1"): invalid(
        "leader.replication.throttled.replicas",
        "[0-1]",
        f"leader.replication.throttled.replicas {THROTTLE_FORMAT}",
    ),
    ("follower.replication.throttled.replicas", "*,0:1"): invalid(
        "follower.replication.throttled.replicas",
        "[*, 0:1]",
        f"follower.replication.throttled.replicas {THROTTLE_FORMAT}",
    ),
    ("remote.storage.enable", "sometimes"): invalid(
        "remote.storage.enable", "sometimes", "Expected value to be either true or false"
    ),
    ("local.retention.ms", "-3"): invalid("local.retention.ms", "-3", "Value must be at least -2"),
    ("local.retention.bytes", "-3"): invalid("local.retention.bytes", "-3", "Value must be at least -2"),
    ("remote.log.copy.disable", "2"): invalid(
        "remote.log.copy.disable", "2", "Expected value to be either true or false"
    ),
    ("remote.log.delete.on.disable", "no"): invalid(
        "remote.log.delete.on.disable", "no", "Expected value to be either true or false"
    ),
    ("internal.segment.bytes", "big"): invalid("internal.segment.bytes", "big", "Not a number of type INT"),
    ("no.such.config", "1"): "Unknown topic config name: no.such.config",
    ("message.downconversion.enable", "true"): "Unknown topic config name: message.downconversion.enable",
}

#: Config sets Kafka refuses as a whole (its cross-config checks), with Kafka's message.
INVALID_TOGETHER: list[tuple[dict[str, str], str]] = [
    (
        {"min.compaction.lag.ms": "10000", "max.compaction.lag.ms": "5000"},
        "conflict topic config setting min.compaction.lag.ms (10000) > max.compaction.lag.ms (5000)",
    ),
    ({"remote.storage.enable": "true"}, TIERED_OFF),
]

#: Values Kafka accepts and Shoal refuses because they ask for what it does not do yet, with the
#: part of the message that says so.
REFUSED_BY_DESIGN: dict[tuple[str, str], str] = {
    ("compression.type", "gzip"): "only compression.type=producer is supported",
    ("compression.type", "uncompressed"): "only compression.type=producer is supported",
    ("compression.type", "zstd"): "only compression.type=producer is supported",
    ("preallocate", "true"): "does not preallocate segment files",
    ("remote.storage.enable", "true"): TIERED_OFF,
}
