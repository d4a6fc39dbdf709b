"""Metadata (3, v0-v14), DescribeTopicPartitions (75) and DescribeCluster (60, v0-v2).

Both list the brokers that are alive (unfenced); a fenced broker is left out as Kafka leaves it
out, except from DescribeCluster v2 with ``IncludeFencedBrokers``.

Metadata v14 is KIP-1163's: the client sends its rack, and diskless partitions
answer ``IsDiskless`` and ``PreferredProduceBrokers`` (``partitions.views`` shapes them). Older clients can put
``diskless_rack_id=<rack>`` in their client id to get a leader in their rack.
"""

from __future__ import annotations

import datetime
import logging
from typing import Any

from shoal.metadata.controller import NewTopic
from shoal.metadata.image import BrokerImage, MetadataImage
from shoal.partitions.views import partition_fields, topic_fields
from shoal.protocol.apis import RequestHeader, response_class
from shoal.protocol.build import make, nested
from shoal.protocol.errors import ErrorCode, KafkaError
from shoal.server.context import ServerContext
from shoal.server.handlers.admin import create_topic

log = logging.getLogger(__name__)

_ZERO = datetime.timedelta(0)
UNKNOWN_AUTHORIZED_OPERATIONS = -2147483648


def client_rack(header: RequestHeader, request: Any) -> str | None:
    """The client's rack: Metadata v14's RackId, else ``diskless_rack_id=`` in the client id (KIP-1163)."""
    rack = getattr(request, "rack_id", "") or None
    if rack is None and header.client_id and "diskless_rack_id=" in header.client_id:
        rack = header.client_id.split("diskless_rack_id=", 1)[1].split(",", 1)[0] or None
    return rack


async def handle_metadata(ctx: ServerContext, header: RequestHeader, request: Any) -> Any:
    image = ctx.image
    cls = response_class(header.api_key, header.api_version)
    topic_cls, partition_cls = nested(cls, "MetadataResponseTopic"), nested(cls, "MetadataResponsePartition")
    rack = client_rack(header, request)
    offline = ctx.partitions.offline_partitions()
    if request.topics is None or (header.api_version == 0 and not request.topics):
        wanted: list[tuple[str | None, Any]] = [(t.name, t.topic_id) for t in image.topics_by_name.values()]
    else:
        wanted = [(t.name, getattr(t, "topic_id", None)) for t in request.topics]
    topics = []
    for name, topic_id in wanted:
        topic = image.topic(name) if name is not None else image.topics_by_id.get(topic_id)
        error = ErrorCode.unknown_topic_id if name is None else ErrorCode.unknown_topic_or_partition
        if (
            topic is None
            and name is not None
            and getattr(request, "allow_auto_topic_creation", True)
            and ctx.config["auto.create.topics.enable"]
        ):
            try:
                await create_topic(ctx, NewTopic(name))
                topic = ctx.image.topic(name)
                log.info("auto-created topic %s for %s", name, header.client_id)
            except KafkaError as exc:
                # Another broker may have just made it: the failed attempt caught the image up.
                topic = ctx.image.topic(name)
                if topic is None:
                    log.info("auto-creating topic %r for %s refused: %s", name, header.client_id, exc.message)
                    # As Kafka: a topic being created elsewhere is LEADER_NOT_AVAILABLE (retriable).
                    error = ErrorCode.leader_not_available if exc.code == ErrorCode.topic_already_exists else exc.code
        if topic is None:
            topics.append(make(topic_cls, error_code=error, name=name, topic_id=topic_id, is_internal=False,
                               partitions=(), topic_authorized_operations=UNKNOWN_AUTHORIZED_OPERATIONS))
            continue
        partitions = tuple(
            make(partition_cls, **partition_fields(image, topic, p, rack, offline, ctx.node_id))
            for p in sorted(topic.partitions.values(), key=lambda p: p.partition)
        )
        topics.append(
            make(
                topic_cls,
                error_code=ErrorCode.none,
                name=topic.name,
                topic_id=topic.topic_id,
                is_internal=False,
                partitions=partitions,
                topic_authorized_operations=UNKNOWN_AUTHORIZED_OPERATIONS,
                **topic_fields(topic),
            )
        )
    broker_cls = nested(cls, "MetadataResponseBroker")
    return make(
        cls,
        throttle_time=_ZERO,
        brokers=tuple(make(broker_cls, node_id=b.node_id, host=b.host, port=b.port, rack=b.rack)
                      for b in image.alive_brokers()),
        cluster_id=ctx.cluster_id,
        controller_id=controller_id(ctx),
        topics=tuple(topics),
        cluster_authorized_operations=UNKNOWN_AUTHORIZED_OPERATIONS,
        error_code=ErrorCode.none,
    )


async def handle_describe_topic_partitions(ctx: ServerContext, header: RequestHeader, request: Any) -> Any:
    image = ctx.image
    cls = response_class(header.api_key, header.api_version)
    topic_cls = nested(cls, "DescribeTopicPartitionsResponseTopic")
    partition_cls = nested(cls, "DescribeTopicPartitionsResponsePartition")
    names = [t.name for t in request.topics] if request.topics else sorted(image.topics_by_name)
    if request.cursor is not None:
        names = [n for n in names if n >= request.cursor.topic_name]
    limit = max(request.response_partition_limit, 1)
    offline = ctx.partitions.offline_partitions()
    topics, next_cursor = [], None
    for name in names:
        topic = image.topic(name)
        if topic is None:
            topics.append(make(topic_cls, error_code=ErrorCode.unknown_topic_or_partition, name=name, topic_id=None,
                               is_internal=False, partitions=(), topic_authorized_operations=UNKNOWN_AUTHORIZED_OPERATIONS))
            continue
        first = request.cursor.partition_index if request.cursor is not None and name == request.cursor.topic_name else 0
        chosen = []
        for p in sorted(topic.partitions.values(), key=lambda p: p.partition):
            if p.partition < first:
                continue
            if limit == 0:
                next_cursor = make(nested(cls, "Cursor"), topic_name=name, partition_index=p.partition)
                break
            chosen.append(make(partition_cls, **partition_fields(image, topic, p, None, offline, ctx.node_id)))
            limit -= 1
        topics.append(make(topic_cls, error_code=ErrorCode.none, name=name, topic_id=topic.topic_id, is_internal=False,
                           partitions=tuple(chosen), topic_authorized_operations=UNKNOWN_AUTHORIZED_OPERATIONS))
        if next_cursor is not None:
            break
    return make(cls, throttle_time=_ZERO, topics=tuple(topics), next_cursor=next_cursor)


def controller_id(ctx: ServerContext) -> int:
    """The active controller as the metadata log last announced it, while it is alive; else this
    broker (any broker decides cluster changes, so clients sending admin requests there are served)."""
    image = ctx.image
    if image.controller is not None:
        holder = image.brokers.get(image.controller[0])
        if holder is not None and not holder.fenced:
            return holder.node_id
    return ctx.node_id


def _described_brokers(image: MetadataImage, include_fenced: bool) -> list[BrokerImage]:
    """Unfenced brokers, and fenced ones too when DescribeCluster v2 asks (KIP-1073)."""
    return [image.brokers[b] for b in sorted(image.brokers) if include_fenced or not image.brokers[b].fenced]


async def handle_describe_cluster(ctx: ServerContext, header: RequestHeader, request: Any) -> Any:
    cls = response_class(header.api_key, header.api_version)
    broker_cls = nested(cls, "DescribeClusterBroker")
    return make(
        cls,
        throttle_time=_ZERO,
        error_code=ErrorCode.none,
        error_message=None,
        endpoint_type=1,
        cluster_id=ctx.cluster_id,
        controller_id=controller_id(ctx),
        brokers=tuple(make(broker_cls, broker_id=b.node_id, host=b.host, port=b.port, rack=b.rack,
                           is_fenced=b.fenced)
                      for b in _described_brokers(ctx.image, getattr(request, "include_fenced_brokers", False))),
        cluster_authorized_operations=UNKNOWN_AUTHORIZED_OPERATIONS,
    )
