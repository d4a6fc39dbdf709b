"""DescribeProducers (API 61, KIP-664): the producers a partition's log remembers, what
``kafka-transactions.sh describe-producers``, ``find-hanging`` and ``abort --start-offset`` read.

As Kafka's ``KafkaApis.handleDescribeProducersRequest``: a topic name that is not a valid one is
INVALID_TOPIC_EXCEPTION for each of its partitions, an unknown topic or partition
UNKNOWN_TOPIC_OR_PARTITION; otherwise this broker's replica answers (a follower's too, so an
operator can compare replicas), NOT_LEADER_OR_FOLLOWER when it has none. Any broker answers for a
diskless partition, from the Batch Coordinator's producer state.
"""

from __future__ import annotations

import datetime
from typing import Any

from shoal.metadata.controller import validate_topic_name
from shoal.protocol.apis import RequestHeader, response_class
from shoal.protocol.build import make, nested
from shoal.protocol.errors import ErrorCode, KafkaError
from shoal.server.context import ServerContext

_ZERO = datetime.timedelta(0)


def _invalid_name(name: str) -> KafkaError | None:
    try:
        validate_topic_name(name)
    except KafkaError as exc:
        return exc
    return None


async def handle_describe_producers(ctx: ServerContext, header: RequestHeader, request: Any) -> Any:
    cls = response_class(header.api_key, header.api_version)
    topic_cls, partition_cls = nested(cls, "TopicResponse"), nested(cls, "PartitionResponse")
    producer_cls = nested(cls, "ProducerState")
    invalid = {t.name: _invalid_name(t.name) for t in request.topics}
    wanted = [
        (t.name, int(index)) for t in request.topics if invalid[t.name] is None for index in t.partition_indexes
    ]
    outcomes = iter(await ctx.partitions.describe_producers(wanted))
    topics = []
    for t in request.topics:
        refused = invalid[t.name]
        partitions = []
        for index in t.partition_indexes:
            if refused is not None:
                code, message, producers = refused.code, refused.message, ()
            else:
                found = next(outcomes)
                code, message, producers = found.error, found.message, found.producers
            partitions.append(
                make(
                    partition_cls,
                    partition_index=index,
                    error_code=code,
                    error_message=message if code != ErrorCode.none else None,
                    active_producers=tuple(
                        make(
                            producer_cls,
                            producer_id=p.producer_id,
                            producer_epoch=p.producer_epoch,
                            last_sequence=p.last_sequence,
                            last_timestamp=p.last_timestamp,
                            coordinator_epoch=p.coordinator_epoch,
                            current_txn_start_offset=p.current_txn_start_offset,
                        )
                        for p in producers
                    ),
                )
            )
        topics.append(make(topic_cls, name=t.name, partitions=tuple(partitions)))
    return make(cls, throttle_time=_ZERO, topics=tuple(topics))
