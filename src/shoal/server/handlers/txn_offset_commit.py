"""TxnOffsetCommit (API 28, v0-5): a transactional producer commits a consumer group's offsets as part
of its transaction (KIP-98's sendOffsetsToTransaction).

The group coordinator keeps them pending until the transaction's marker reaches the group's
``__consumer_offsets`` partition (``GroupCoordinator.txn_commit_offsets`` and
``complete_transaction``). What Kafka's request layer checks is checked here, as for
OffsetCommit: a partition of an unknown topic, or one the topic does not have, answers
UNKNOWN_TOPIC_OR_PARTITION and never reaches the coordinator. v0-2 carry no member id nor
generation (the coordinator then takes the commit whatever the group's state), v2 adds the
leader epoch, v3 the member id, generation and group instance id.
"""

from __future__ import annotations

import datetime
from typing import Any

from shoal.protocol.apis import RequestHeader, response_class
from shoal.protocol.build import make, nested
from shoal.protocol.errors import ErrorCode
from shoal.server.context import ServerContext
from shoal.server.handlers.offset_commit_entries import CommitPartitions

_ZERO = datetime.timedelta(0)


async def handle_txn_offset_commit(ctx: ServerContext, header: RequestHeader, request: Any) -> Any:
    cls = response_class(header.api_key, header.api_version)
    topic_cls = nested(cls, "TxnOffsetCommitResponseTopic")
    partition_cls = nested(cls, "TxnOffsetCommitResponsePartition")
    partitions = CommitPartitions(ctx.image, request.topics)
    errors = await ctx.groups.txn_commit_offsets(
        group_id=request.group_id,
        transactional_id=request.transactional_id,
        producer_id=int(request.producer_id),
        producer_epoch=int(request.producer_epoch),
        generation_id=int(getattr(request, "generation_id", -1)),
        member_id=getattr(request, "member_id", ""),
        group_instance_id=getattr(request, "group_instance_id", None),
        entries=partitions.entries,
        api_version=header.api_version,
    )
    if header.api_version < 2:
        # Kafka's KafkaApis: producers before 2.0 (KAFKA-7296) do not expect the loading error.
        errors = [
            ErrorCode.coordinator_not_available if e is ErrorCode.coordinator_load_in_progress else e for e in errors
        ]
    partitions.answer(errors)
    return make(cls, throttle_time=_ZERO, topics=partitions.topics(topic_cls, partition_cls))
