"""CreateTopics (19), DeleteTopics (20), DescribeConfigs (32), AlterConfigs (33), CreatePartitions (37),
IncrementalAlterConfigs (44)."""

from __future__ import annotations

import datetime
import logging
from dataclasses import dataclass, field
from typing import Any

from shoal.config import BROKER_CONFIGS, DYNAMIC_BROKER_CONFIGS, ConfigType, format_value
from shoal.metadata import tiered_state
from shoal.metadata.controller import CreatedTopic, NewTopic
from shoal.metadata.records import ConfigRecord
from shoal.protocol.apis import RequestHeader, response_class
from shoal.protocol.build import make, nested
from shoal.protocol.errors import ErrorCode, KafkaError
from shoal.server.context import ServerContext
from shoal.topic_configs import TOPIC_CONFIGS

log = logging.getLogger(__name__)

_ZERO = datetime.timedelta(0)

# DescribeConfigs config sources, as Kafka numbers them.
SOURCE_DYNAMIC_TOPIC = 1
SOURCE_DYNAMIC_BROKER = 2
SOURCE_DYNAMIC_DEFAULT_BROKER = 3
SOURCE_STATIC_BROKER = 4
SOURCE_DEFAULT = 5

_CONFIG_TYPE_IDS = {
    ConfigType.BOOLEAN: 1,
    ConfigType.STRING: 2,
    ConfigType.INT: 3,
    ConfigType.SHORT: 4,
    ConfigType.LONG: 5,
    ConfigType.DOUBLE: 6,
    ConfigType.LIST: 7,
}


async def handle_create_topics(ctx: ServerContext, header: RequestHeader, request: Any) -> Any:
    cls = response_class(header.api_key, header.api_version)
    result_cls, config_cls = nested(cls, "CreatableTopicResult"), nested(cls, "CreatableTopicConfigs")
    validate_only = getattr(request, "validate_only", False)
    results = []
    seen: set[str] = set()
    for topic in request.topics:
        fields: dict[str, Any] = {
            "name": topic.name,
            "topic_id": None,
            "num_partitions": -1,
            "replication_factor": -1,
            "configs": None,
            "error_message": None,
            "topic_config_error_code": 0,
        }
        try:
            if topic.name in seen:
                raise KafkaError(
                    ErrorCode.invalid_request,
                    f"Create topics request from client contains duplicate topic {topic.name}",
                )
            seen.add(topic.name)
            new_topic = NewTopic(
                name=topic.name,
                num_partitions=topic.num_partitions,
                replication_factor=topic.replication_factor,
                assignments={a.partition_index: tuple(a.broker_ids) for a in topic.assignments},
                configs={c.name: c.value for c in topic.configs},
            )
            if validate_only:
                created = await ctx.run_blocking(ctx.controller.validate_new_topic, new_topic, ctx.image)
            else:
                created = await create_topic(ctx, new_topic)
            fields.update(
                error_code=ErrorCode.none,
                topic_id=None if validate_only else created.topic_id,
                num_partitions=created.num_partitions,
                replication_factor=created.replication_factor,
                configs=None
                if config_cls is None
                else tuple(
                    make(
                        config_cls,
                        name=name,
                        value=value,
                        read_only=False,
                        config_source=source,
                        is_sensitive=False,
                    )
                    for name, value, source in _topic_config_values(ctx, created.configs)
                ),
            )
        except KafkaError as exc:
            log.info(
                "CreateTopics %s from %s refused: %s (%s)",
                topic.name,
                header.client_id,
                exc.message,
                exc.code.name,
            )
            fields.update(error_code=exc.code, error_message=exc.message)
        results.append(make(result_cls, **fields))
    return make(cls, throttle_time=_ZERO, topics=tuple(results))


async def create_topic(ctx: ServerContext, new_topic: NewTopic) -> CreatedTopic:
    """Record a topic in the metadata log; its storage is created when ``ctx.control`` publishes the
    change (every other broker does the same when its tail reaches it). Raises KafkaError when refused."""
    created, _ = await ctx.control(ctx.controller.create_topic, new_topic)
    topic = ctx.image.topic(created.name)
    assert topic is not None  # the controller's write is in the image (ctx.control caught up)
    log.info(
        "created %s topic %s (%s) with %d partitions, configs %s",
        ctx.partitions.describe_kind(topic),
        created.name,
        created.topic_id,
        created.num_partitions,
        dict(created.configs),
    )
    return created


@dataclass(frozen=True, slots=True)
class _ConfigEntry:
    """One DescribeConfigs entry: the effective value, Kafka's source of it, and the synonyms
    (the sources it could come from, highest priority first; the first one is the source)."""

    name: str
    value: str | None
    source: int
    type: ConfigType
    doc: str
    synonyms: list[tuple[str, str | None, int]] = field(default_factory=list)


def _broker_synonyms(ctx: ServerContext, name: str) -> list[tuple[str, str | None, int]]:
    """A broker config's sources as Kafka lists them: a dynamic value of this broker, the dynamic
    cluster default, the operator's value, then the default."""
    synonyms: list[tuple[str, str | None, int]] = []
    for resource, source in ((str(ctx.node_id), SOURCE_DYNAMIC_BROKER), ("", SOURCE_DYNAMIC_DEFAULT_BROKER)):
        value = ctx.image.broker_configs.get(resource, {}).get(name)
        if value is not None:
            synonyms.append((name, value, source))
    if ctx.config.is_set(name):
        value = ctx.config[name]
        synonyms.append((name, None if value is None else format_value(value), SOURCE_STATIC_BROKER))
    default = BROKER_CONFIGS[name].default
    if default is not None:
        synonyms.append((name, format_value(default), SOURCE_DEFAULT))
    return synonyms


def _topic_config_entries(ctx: ServerContext, configs: Any) -> list[_ConfigEntry]:
    """Every topic config (an internal one only when set) with its effective value, and Kafka's
    source: DYNAMIC_TOPIC_CONFIG when the topic sets it, STATIC_BROKER_CONFIG when the operator set
    its broker synonym, else DEFAULT_CONFIG."""
    entries = []
    for name, d in TOPIC_CONFIGS.items():
        if d.internal and name not in configs:
            continue
        synonyms: list[tuple[str, str | None, int]] = []
        if name in configs:
            synonyms.append((name, configs[name], SOURCE_DYNAMIC_TOPIC))
        if d.broker_synonym is not None:
            synonyms += _broker_synonyms(ctx, d.broker_synonym)
        if name in configs:
            value = configs[name]
        else:
            default = ctx.config.topic_default(name)
            value = None if default is None else format_value(default)
        source = synonyms[0][2] if synonyms else SOURCE_DEFAULT
        entries.append(_ConfigEntry(name, value, source, d.type, d.doc, synonyms))
    return entries


TIERED_STATE_KEYS = tiered_state.DESCRIBE_KEYS


def _tiered_state_entries(topic: Any) -> list[_ConfigEntry]:
    return [
        _ConfigEntry(TIERED_STATE_KEYS[0], tiered_state.NAMES[topic.tiered_state], SOURCE_DYNAMIC_TOPIC,
                     ConfigType.STRING, "KIP-950: ENABLED, DISABLING or DISABLED.", []),
        _ConfigEntry(TIERED_STATE_KEYS[1], str(topic.tiered_epoch), SOURCE_DYNAMIC_TOPIC, ConfigType.INT,
                     "KIP-950: the tiered epoch (one more at each re-enablement).", []),
    ]


def _topic_config_values(ctx: ServerContext, configs: Any) -> list[tuple[str, str | None, int]]:
    """Every topic config with its effective value and Kafka's source code."""
    return [(e.name, e.value, e.source) for e in _topic_config_entries(ctx, configs)]


async def handle_delete_topics(ctx: ServerContext, header: RequestHeader, request: Any) -> Any:
    cls = response_class(header.api_key, header.api_version)
    result_cls = nested(cls, "DeletableTopicResult")
    if header.api_version >= 6:
        wanted = [(t.name, t.topic_id) for t in request.topics]
    else:
        wanted = [(name, None) for name in request.topic_names]
    results = []
    for name, topic_id in wanted:
        image = ctx.image
        topic = image.topic(name) if name is not None else image.topics_by_id.get(topic_id)
        fields: dict[str, Any] = {"name": name, "topic_id": topic_id, "error_message": None}
        try:
            if not ctx.config["delete.topic.enable"]:
                raise KafkaError(ErrorCode.topic_deletion_disabled, "Topic deletion is disabled.")
            if topic is None:
                if name is None:
                    raise KafkaError(ErrorCode.unknown_topic_id, f"Topic id {topic_id} does not exist")
                raise KafkaError(
                    ErrorCode.unknown_topic_or_partition, "This server does not host this topic-partition."
                )
            await ctx.control(ctx.controller.delete_topic, topic.topic_id)
            log.info("deleted topic %s (%s)", topic.name, topic.topic_id)
            fields.update(name=topic.name, topic_id=topic.topic_id, error_code=ErrorCode.none)
        except KafkaError as exc:
            fields.update(error_code=exc.code, error_message=exc.message)
        results.append(make(result_cls, **fields))
    return make(cls, throttle_time=_ZERO, responses=tuple(results))


async def handle_describe_configs(ctx: ServerContext, header: RequestHeader, request: Any) -> Any:
    cls = response_class(header.api_key, header.api_version)
    result_cls, entry_cls = nested(cls, "DescribeConfigsResult"), nested(cls, "DescribeConfigsResourceResult")
    synonym_cls = nested(cls, "DescribeConfigsSynonym")
    include_docs = getattr(request, "include_documentation", False)
    include_synonyms = getattr(request, "include_synonyms", False) and synonym_cls is not None
    results = []
    for resource in request.resources:
        entries: list[_ConfigEntry] = []
        error, message = ErrorCode.none, None
        if resource.resource_type == ConfigRecord.TOPIC:
            topic = ctx.image.topic(resource.resource_name)
            if topic is None:
                error, message = (
                    ErrorCode.unknown_topic_or_partition,
                    f"Topic {resource.resource_name} does not exist",
                )
            else:
                entries = _topic_config_entries(ctx, topic.configs)
                if topic.tiered_state is not None and resource.configuration_keys:
                    entries += _tiered_state_entries(topic)
        elif resource.resource_type == ConfigRecord.BROKER:
            if resource.resource_name not in ("", str(ctx.node_id)):
                error, message = ErrorCode.invalid_request, f"Unexpected broker id {resource.resource_name}"
            else:
                for name, d in BROKER_CONFIGS.items():
                    synonyms = _broker_synonyms(ctx, name)
                    value, source = (synonyms[0][1], synonyms[0][2]) if synonyms else (None, SOURCE_DEFAULT)
                    entries.append(_ConfigEntry(name, value, source, d.type, d.doc, synonyms))
        else:
            error, message = ErrorCode.invalid_request, f"Unsupported resource type {resource.resource_type}"
        keys = set(resource.configuration_keys) if resource.configuration_keys else None
        results.append(
            make(
                result_cls,
                error_code=error,
                error_message=message,
                resource_type=resource.resource_type,
                resource_name=resource.resource_name,
                configs=tuple(
                    make(
                        entry_cls,
                        name=e.name,
                        value=e.value,
                        read_only=e.name == "diskless.enable" or e.name in TIERED_STATE_KEYS
                        or (resource.resource_type == ConfigRecord.BROKER and e.name not in DYNAMIC_BROKER_CONFIGS),
                        config_source=e.source,
                        is_default=e.source == SOURCE_DEFAULT,
                        is_sensitive=False,
                        synonyms=tuple(
                            make(synonym_cls, name=name, value=value, source=source)
                            for name, value, source in e.synonyms
                        )
                        if include_synonyms
                        else (),
                        config_type=_CONFIG_TYPE_IDS[e.type],
                        documentation=e.doc if include_docs else None,
                    )
                    for e in entries
                    if keys is None or e.name in keys
                ),
            )
        )
    return make(cls, throttle_time=_ZERO, results=tuple(results))


# IncrementalAlterConfigs operations, as Kafka numbers them.
OP_SET, OP_DELETE, OP_APPEND, OP_SUBTRACT = 0, 1, 2, 3


def _incremental(current: dict[str, str], changes: Any) -> dict[str, str | None]:
    desired: dict[str, str | None] = dict(current)
    for change in changes:
        d = TOPIC_CONFIGS.get(change.name)
        if change.config_operation == OP_SET:
            desired[change.name] = change.value
        elif change.config_operation == OP_DELETE:
            desired.pop(change.name, None)
        elif change.config_operation in (OP_APPEND, OP_SUBTRACT):
            if d is None or d.type is not ConfigType.LIST:
                verb = "append" if change.config_operation == OP_APPEND else "subtract"
                raise KafkaError(
                    ErrorCode.invalid_config, f"Config value {verb} is not allowed for config {change.name}"
                )
            items = [x for x in (desired.get(change.name) or format_value(d.default) or "").split(",") if x]
            values = [x for x in (change.value or "").split(",") if x]
            if change.config_operation == OP_APPEND:
                items += [v for v in values if v not in items]
            else:
                items = [x for x in items if x not in values]
            desired[change.name] = ",".join(items)
        else:
            raise KafkaError(ErrorCode.invalid_request, f"Unknown config operation {change.config_operation}")
    return desired


async def _alter_broker_configs(ctx: ServerContext, resource: Any, validate_only: bool, incremental: bool) -> None:
    """A broker's (or, with an empty name, the cluster default's) dynamic configs."""
    current = dict(ctx.image.broker_configs.get(resource.resource_name, {}))
    wanted = _incremental(current, resource.configs) if incremental else {c.name: c.value for c in resource.configs}
    await ctx.control(ctx.controller.alter_broker_configs, resource.resource_name, wanted, validate_only)
    if not validate_only:
        log.info("altered dynamic configs of broker %r: %s", resource.resource_name or "(default)", wanted)


async def _alter_topic_configs(ctx: ServerContext, resource: Any, validate_only: bool, incremental: bool) -> None:
    topic = ctx.image.topic(resource.resource_name)
    if topic is None:
        raise KafkaError(ErrorCode.unknown_topic_or_partition, f"Topic {resource.resource_name} does not exist")
    if incremental:
        desired = _incremental(dict(topic.configs), resource.configs)
    else:
        desired = {c.name: c.value for c in resource.configs}
    await ctx.control(ctx.controller.alter_topic_configs, topic.name, desired, validate_only)
    if not validate_only:
        log.info("altered configs of topic %s: %s", topic.name, desired)


async def _alter_configs(ctx: ServerContext, header: RequestHeader, request: Any, incremental: bool) -> Any:
    cls = response_class(header.api_key, header.api_version)
    result_cls = nested(cls, "AlterConfigsResourceResponse")
    results = []
    for resource in request.resources:
        error, message = ErrorCode.none, None
        try:
            if resource.resource_type == ConfigRecord.BROKER:
                await _alter_broker_configs(ctx, resource, request.validate_only, incremental)
            elif resource.resource_type != ConfigRecord.TOPIC:
                raise KafkaError(
                    ErrorCode.invalid_request, f"Unsupported resource type {resource.resource_type}"
                )
            else:
                await _alter_topic_configs(ctx, resource, request.validate_only, incremental)
        except KafkaError as exc:
            log.info(
                "AlterConfigs %s from %s refused: %s", resource.resource_name, header.client_id, exc.message
            )
            error, message = exc.code, exc.message
        results.append(
            make(
                result_cls,
                error_code=error,
                error_message=message,
                resource_type=resource.resource_type,
                resource_name=resource.resource_name,
            )
        )
    return make(cls, throttle_time=_ZERO, responses=tuple(results))


async def handle_alter_configs(ctx: ServerContext, header: RequestHeader, request: Any) -> Any:
    return await _alter_configs(ctx, header, request, incremental=False)


async def handle_incremental_alter_configs(ctx: ServerContext, header: RequestHeader, request: Any) -> Any:
    return await _alter_configs(ctx, header, request, incremental=True)


async def handle_create_partitions(ctx: ServerContext, header: RequestHeader, request: Any) -> Any:
    """CreatePartitions (37): grow classic and diskless topics; each topic answered on its own."""
    cls = response_class(header.api_key, header.api_version)
    result_cls = nested(cls, "CreatePartitionsTopicResult")
    names = [topic.name for topic in request.topics]
    duplicates = {name for name in names if names.count(name) > 1}
    results = []
    for topic in request.topics:
        error, message = ErrorCode.none, None
        try:
            if topic.name in duplicates:
                raise KafkaError(ErrorCode.invalid_request, "Duplicate topic name.")
            assignments = None if topic.assignments is None else [a.broker_ids for a in topic.assignments]
            await add_partitions(ctx, topic.name, topic.count, assignments, request.validate_only)
        except KafkaError as exc:
            log.info(
                "CreatePartitions %s from %s refused: %s (%s)",
                topic.name,
                header.client_id,
                exc.message,
                exc.code.name,
            )
            error, message = exc.code, exc.message
        results.append(make(result_cls, name=topic.name, error_code=error, error_message=message))
    return make(cls, throttle_time=_ZERO, results=tuple(results))


async def add_partitions(
    ctx: ServerContext, name: str, count: int, assignments: list[Any] | None, validate_only: bool
) -> None:
    """Record the new partitions in the metadata log (``ctx.control`` publishes them: their storage
    is created before it returns)."""
    new, offset = await ctx.control(ctx.controller.create_partitions, name, count, assignments, validate_only)
    if offset is None:
        return
    topic = ctx.image.topic(name)
    assert topic is not None  # the controller's write is in the image (ctx.control caught up)
    log.info(
        "added partitions %s to %s topic %s, which now has %d",
        new,
        ctx.partitions.describe_kind(topic),
        name,
        len(topic.partitions),
    )
