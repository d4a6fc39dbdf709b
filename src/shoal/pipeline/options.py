"""Options of the ``shoal`` Spark data source, parsed once on the driver into picklable values.

Names and meanings follow Spark's Kafka connector (``subscribe``, ``startingOffsets``,
``maxOffsetsPerTrigger``, ``kafka.*`` ...), so a Kafka job moves over by changing
``format("kafka")`` to ``format("shoal")``; Shoal's own options start with ``shoal.``.
Everything here is plain Python (no pyspark import), so it can be unit-tested alone and
shipped to executors inside input partitions.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from shoal.config import Config
from shoal.pipeline.errors import OptionError
from shoal.pipeline.isolation import ISOLATION_LEVELS, READ_COMMITTED, READ_UNCOMMITTED
from shoal.pipeline.stores import find_store_config
from shoal.store.factory import object_storage_url

__all__ = [
    "EARLIEST",
    "LATEST",
    "DEFAULT_MAX_PARTITION_BYTES",
    "OffsetSpec",
    "OptionError",
    "ReadOptions",
    "Subscription",
    "TopicPartition",
    "WriteOptions",
    "offsets_from_json",
    "offsets_to_json",
    "parse_read_options",
    "parse_write_options",
]

#: Kafka's special offsets in offset JSON, as Spark's Kafka source takes them.
EARLIEST = -2
LATEST = -1

#: No input partition (Spark task) reads more than about this many bytes of record batches: Spark's
#: own ``spark.sql.files.maxPartitionBytes``. Each task pays a Python worker round trip and an Arrow
#: stream; with records decoded in C, 64 MiB tasks spent a visible share of their time on that.
DEFAULT_MAX_PARTITION_BYTES = 128 * 1024 * 1024

TopicPartition = tuple[str, int]

# kafka.* options Spark's Kafka connector refuses, because the connector itself owns them.
_FORBIDDEN_KAFKA = frozenset(
    {
        "auto.offset.reset",
        "enable.auto.commit",
        "key.deserializer",
        "value.deserializer",
        "key.serializer",
        "value.serializer",
        "interceptor.classes",
    }
)
_READ_VIA = ("auto", "storage", "broker")
#: ``shoal.override.<config>=value``: a broker config over the one ``shoal.config``/``shoal.data.dir`` gives.
_OVERRIDE = "shoal.override."


@dataclass(frozen=True, slots=True)
class Subscription:
    """Which topic-partitions to read: exactly one of Spark's assign / subscribe / subscribePattern."""

    kind: str  # "assign" | "subscribe" | "subscribePattern"
    topics: tuple[str, ...] = ()
    pattern: str | None = None
    assignment: tuple[TopicPartition, ...] = ()

    def matches(self, topic: str) -> bool:
        """Whether ``topic`` is subscribed (internal ``__`` topics never match a pattern, as in Kafka)."""
        if self.kind == "subscribe":
            return topic in self.topics
        if self.kind == "subscribePattern":
            assert self.pattern is not None
            return not topic.startswith("__") and re.fullmatch(self.pattern, topic) is not None
        return any(t == topic for t, _ in self.assignment)

    def describe(self) -> str:
        if self.kind == "subscribe":
            return f"subscribe={','.join(self.topics)}"
        if self.kind == "subscribePattern":
            return f"subscribePattern={self.pattern}"
        return f"assign={offsets_to_json(dict.fromkeys(self.assignment, 0))}"


@dataclass(frozen=True, slots=True)
class OffsetSpec:
    """Where to start or end: earliest, latest, per-partition offsets, or by timestamp.

    ``kind``: ``earliest`` | ``latest`` | ``offsets`` (``offsets`` maps each partition to an
    offset, -2 earliest, -1 latest) | ``timestamp`` (one ``timestamp`` for every partition) |
    ``timestamps`` (``offsets`` maps each partition to a timestamp). ``strategy`` says what a
    timestamp lookup that finds no record does: ``error`` or ``latest``.
    """

    kind: str
    offsets: Mapping[TopicPartition, int] = field(default_factory=dict)
    timestamp: int = -1
    strategy: str = "error"


@dataclass(frozen=True, slots=True)
class ReadOptions:
    """Everything a reader needs, on the driver and in tasks."""

    subscription: Subscription
    starting: OffsetSpec
    ending: OffsetSpec | None  # None for streaming reads
    include_headers: bool = False
    fail_on_data_loss: bool = True
    max_offsets_per_trigger: int | None = None
    min_partitions: int | None = None
    max_partition_bytes: int = DEFAULT_MAX_PARTITION_BYTES
    #: The configuration naming Shoal's stores (None: read through the brokers only).
    store: Config | None = None
    storage_url: str | None = None
    bootstrap_servers: str | None = None
    read_via: str = "auto"
    kafka_conf: Mapping[str, str] = field(default_factory=dict)
    poll_timeout_ms: int = 120_000
    #: ``kafka.isolation.level``: ``read_uncommitted`` (Kafka's and Spark's default) or ``read_committed``.
    isolation_level: str = READ_UNCOMMITTED

    @property
    def read_committed(self) -> bool:
        return self.isolation_level == READ_COMMITTED


@dataclass(frozen=True, slots=True)
class WriteOptions:
    """Everything a writer task needs (see ``shoal.pipeline.write`` for the dedup protocol)."""

    bootstrap_servers: str
    topic: str | None = None
    kafka_conf: Mapping[str, str] = field(default_factory=dict)
    dedup: bool = True
    marker_url: str | None = None
    clock_skew_ms: int = 60_000
    retry_grace_ms: int = 5_000
    flush_timeout_ms: int = 120_000


def offsets_to_json(offsets: Mapping[TopicPartition, int]) -> str:
    """Spark's offset JSON: ``{"topic": {"0": 23, "1": -1}}``, topics and partitions sorted."""
    out: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        out.setdefault(topic, {})[str(partition)] = int(offset)
    return json.dumps(out, separators=(",", ":"))


def offsets_from_json(
    text: str | Mapping[str, Mapping[str, int]], what: str = "offsets"
) -> dict[TopicPartition, int]:
    """Parse Spark's offset JSON (or the same shape already decoded) into ``{(topic, partition): n}``."""
    try:
        raw = json.loads(text) if isinstance(text, str) else text
    except json.JSONDecodeError as exc:
        raise OptionError(f"{what} is not valid JSON: {exc}: {text!r}") from None
    if not isinstance(raw, Mapping):
        raise OptionError(f"{what} must be a JSON object of topic -> {{partition: offset}}, got {text!r}")
    out: dict[TopicPartition, int] = {}
    for topic, parts in raw.items():
        if not isinstance(parts, Mapping):
            raise OptionError(f"{what}: topic {topic!r} must map partitions to offsets, got {parts!r}")
        for partition, offset in parts.items():
            try:
                p = int(partition)
            except (TypeError, ValueError):
                raise OptionError(
                    f"{what}: partition {partition!r} of topic {topic!r} is not an integer"
                ) from None
            if isinstance(offset, bool) or not isinstance(offset, int):
                raise OptionError(f"{what}: offset of {topic}-{p} must be an integer, got {offset!r}")
            out[(str(topic), p)] = offset
    return out


def _assignment(text: str) -> tuple[TopicPartition, ...]:
    """Spark's ``assign`` JSON: ``{"topicA": [0, 1], "topicB": [2]}``."""
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise OptionError(f"assign is not valid JSON: {exc}: {text!r}") from None
    if not isinstance(raw, dict) or not raw:
        raise OptionError(f'assign must be a JSON object like {{"topic": [0, 1]}}, got {text!r}')
    out: list[TopicPartition] = []
    for topic, parts in raw.items():
        if not isinstance(parts, list) or not all(
            isinstance(p, int) and not isinstance(p, bool) for p in parts
        ):
            raise OptionError(
                f"assign: topic {topic!r} must map to a list of partition numbers, got {parts!r}"
            )
        out.extend((topic, p) for p in parts)
    return tuple(sorted(set(out)))


def _subscription(opts: Mapping[str, str]) -> Subscription:
    given = [k for k in ("assign", "subscribe", "subscribepattern") if opts.get(k)]
    if len(given) != 1:
        raise OptionError(
            "exactly one of the options 'assign', 'subscribe' or 'subscribePattern' must be set"
            + (f" (got {', '.join(given)})" if given else "")
        )
    kind = given[0]
    value = opts[kind].strip()
    if kind == "subscribe":
        topics = tuple(t.strip() for t in value.split(",") if t.strip())
        if not topics:
            raise OptionError(f"subscribe needs a comma-separated list of topics, got {value!r}")
        return Subscription("subscribe", topics=topics)
    if kind == "subscribepattern":
        try:
            re.compile(value)
        except re.error as exc:
            raise OptionError(
                f"subscribePattern {value!r} is not a valid regular expression: {exc}"
            ) from None
        return Subscription("subscribePattern", pattern=value)
    return Subscription("assign", assignment=_assignment(value))


def _int(opts: Mapping[str, str], name: str, *, minimum: int) -> int | None:
    raw = opts.get(name.lower())
    if raw is None or str(raw).strip() == "":
        return None
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise OptionError(f"option {name} must be an integer, got {raw!r}") from None
    if value < minimum:
        raise OptionError(f"option {name} must be at least {minimum}, got {value}")
    return value


def _int_or(opts: Mapping[str, str], name: str, default: int, *, minimum: int) -> int:
    value = _int(opts, name, minimum=minimum)
    return default if value is None else value


def _bool(opts: Mapping[str, str], name: str, default: bool) -> bool:
    raw = opts.get(name.lower())
    if raw is None:
        return default
    lowered = str(raw).strip().lower()
    if lowered in ("true", "1", "yes"):
        return True
    if lowered in ("false", "0", "no"):
        return False
    raise OptionError(f"option {name} must be true or false, got {raw!r}")


def _offset_spec(opts: Mapping[str, str], prefix: str, default: str | None) -> OffsetSpec | None:
    """Spark's precedence: ``<prefix>Timestamp`` > ``<prefix>OffsetsByTimestamp`` > ``<prefix>Offsets``."""
    strategy = str(opts.get(f"{prefix}offsetsbytimestampstrategy", "error")).strip().lower()
    if strategy not in ("error", "latest"):
        raise OptionError(f"{prefix}OffsetsByTimestampStrategy must be 'error' or 'latest', got {strategy!r}")
    ts = _int(opts, f"{prefix}Timestamp", minimum=0)
    if ts is not None:
        return OffsetSpec("timestamp", timestamp=ts, strategy=strategy)
    by_ts = opts.get(f"{prefix}offsetsbytimestamp")
    if by_ts:
        stamps = offsets_from_json(by_ts, f"{prefix}OffsetsByTimestamp")
        if any(v < 0 for v in stamps.values()):
            raise OptionError(f"{prefix}OffsetsByTimestamp takes timestamps (ms, >= 0)")
        return OffsetSpec("timestamps", offsets=stamps, strategy=strategy)
    raw = opts.get(f"{prefix}offsets", default)
    if raw is None:
        return None
    text = str(raw).strip()
    if text.lower() in ("earliest", "latest"):
        return OffsetSpec(text.lower())
    offsets = offsets_from_json(text, f"{prefix}Offsets")
    bad = {tp: o for tp, o in offsets.items() if o < EARLIEST}
    if bad:
        raise OptionError(f"{prefix}Offsets has invalid offsets {bad} (use -2 for earliest, -1 for latest)")
    return OffsetSpec("offsets", offsets=offsets)


def _kafka_conf(opts: Mapping[str, str]) -> tuple[str | None, dict[str, str]]:
    conf: dict[str, str] = {}
    for key, value in opts.items():
        if not key.startswith("kafka."):
            continue
        name = key[len("kafka.") :]
        if name in _FORBIDDEN_KAFKA:
            raise OptionError(f"option kafka.{name} is not supported: the shoal source manages it itself")
        conf[name] = str(value)
    bootstrap = conf.pop("bootstrap.servers", None)
    return bootstrap, conf


def _isolation_level(kafka_conf: dict[str, str]) -> str:
    """``kafka.isolation.level``, taken out of the consumer settings: the source applies it itself
    (storage reads filter by it, broker reads give it to their consumer) and it means nothing to
    the admin client that lists topics."""
    raw = kafka_conf.pop("isolation.level", READ_UNCOMMITTED)
    level = raw.strip().lower()
    if level not in ISOLATION_LEVELS:
        raise OptionError(f"kafka.isolation.level must be {' or '.join(ISOLATION_LEVELS)}, got {raw!r}")
    return level


def parse_read_options(opts: Mapping[str, str], *, streaming: bool) -> ReadOptions:
    """Validate the reader options the way Spark's Kafka source does; keys are case-insensitive."""
    lowered = {str(k).lower(): v for k, v in opts.items()}
    subscription = _subscription(lowered)
    starting = _offset_spec(lowered, "starting", "latest" if streaming else "earliest")
    assert starting is not None
    ending = None
    if streaming:
        if any(k.startswith("ending") for k in lowered):
            raise OptionError(
                "ending offsets options are not allowed in streaming queries (Spark refuses them too)"
            )
    else:
        ending = _offset_spec(lowered, "ending", "latest")
        if starting.kind == "latest" or (starting.kind == "offsets" and LATEST in starting.offsets.values()):
            raise OptionError("startingOffsets can't be latest (-1) for batch queries")
        if ending is not None and (
            ending.kind == "earliest" or (ending.kind == "offsets" and EARLIEST in ending.offsets.values())
        ):
            raise OptionError("endingOffsets can't be earliest (-2) for batch queries")
    bootstrap, kafka_conf = _kafka_conf(lowered)
    isolation_level = _isolation_level(kafka_conf)
    read_via = str(lowered.get("shoal.readvia", "auto")).strip().lower()
    if read_via not in _READ_VIA:
        raise OptionError(f"shoal.readVia must be one of {', '.join(_READ_VIA)}, got {read_via!r}")
    if read_via == "broker" and not bootstrap:
        raise OptionError("shoal.readVia=broker needs kafka.bootstrap.servers")
    # The stores are needed unless every partition is read through the brokers.
    store = None
    if read_via != "broker":
        store = find_store_config(
            lowered.get("shoal.config") or None,
            lowered.get("shoal.data.dir") or None,
            lowered.get("shoal.metadata.path") or None,
            overrides=[f"{k[len(_OVERRIDE):]}={v}" for k, v in lowered.items() if k.startswith(_OVERRIDE)],
            required=not bootstrap,
        )
    storage_url = lowered.get("shoal.storage.url") or None
    if storage_url is None and store is not None and not lowered.get("shoal.metadata.path"):
        # A metadata dir alone does not say where the objects are; a configuration does.
        storage_url = object_storage_url(store)
    if store is not None and storage_url is None and not bootstrap:
        raise OptionError(
            "shoal.metadata.path needs shoal.storage.url to read diskless topics from object storage"
        )
    if read_via == "storage" and store is None:
        raise OptionError(
            "shoal.readVia=storage needs Shoal's stores: set shoal.config or shoal.data.dir "
            "(or run where ./shoal-data is)"
        )
    return ReadOptions(
        subscription=subscription,
        starting=starting,
        ending=ending,
        include_headers=_bool(lowered, "includeHeaders", False),
        fail_on_data_loss=_bool(lowered, "failOnDataLoss", True),
        max_offsets_per_trigger=_int(lowered, "maxOffsetsPerTrigger", minimum=1),
        min_partitions=_int(lowered, "minPartitions", minimum=1),
        max_partition_bytes=_int_or(
            lowered, "shoal.maxBytesPerPartition", DEFAULT_MAX_PARTITION_BYTES, minimum=1
        ),
        store=store,
        storage_url=storage_url,
        bootstrap_servers=bootstrap,
        read_via=read_via,
        kafka_conf=kafka_conf,
        poll_timeout_ms=_int_or(lowered, "kafkaConsumer.pollTimeoutMs", 120_000, minimum=1),
        isolation_level=isolation_level,
    )


def parse_write_options(opts: Mapping[str, str]) -> WriteOptions:
    """Validate the writer options (Spark's Kafka sink's, plus the dedup settings)."""
    lowered = {str(k).lower(): v for k, v in opts.items()}
    bootstrap, kafka_conf = _kafka_conf(lowered)
    if not bootstrap:
        raise OptionError("writes go through the brokers: set kafka.bootstrap.servers")
    dedup = _bool(lowered, "shoal.write.dedup", True)
    marker_url = lowered.get("shoal.write.markers") or lowered.get("shoal.storage.url") or None
    if dedup and not marker_url:
        raise OptionError(
            "retry dedup needs a place for write markers: set shoal.storage.url (or shoal.write.markers), "
            "or turn dedup off with shoal.write.dedup=false (then a retried task may duplicate records)"
        )
    return WriteOptions(
        bootstrap_servers=bootstrap,
        topic=(lowered.get("topic") or None),
        kafka_conf=kafka_conf,
        dedup=dedup,
        marker_url=marker_url,
        clock_skew_ms=_int_or(lowered, "shoal.write.clockSkewMs", 60_000, minimum=0),
        retry_grace_ms=_int_or(lowered, "shoal.write.retryGraceMs", 5_000, minimum=0),
        flush_timeout_ms=_int_or(lowered, "shoal.write.flushTimeoutMs", 120_000, minimum=1),
    )
