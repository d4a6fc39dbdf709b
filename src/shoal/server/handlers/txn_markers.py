"""WriteTxnMarkers (API 27): the transaction coordinator asks each partition leader to end a
producer's transaction with a COMMIT or ABORT marker (KIP-98; v2 adds the transaction version of
KIP-890). ``partitions`` appends every marker on this broker's leaders and answers per partition
once the in-sync replicas have it, as Kafka appends markers with acks=all.

What the coordinator does with each code is Kafka's ``TransactionMarkerRequestCompletionHandler``:
UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER, NOT_ENOUGH_REPLICAS(_AFTER_APPEND),
REQUEST_TIMED_OUT and KAFKA_STORAGE_ERROR are retried (with the leaders of a newer metadata);
INVALID_PRODUCER_EPOCH and TRANSACTION_COORDINATOR_FENCED end the sending (a newer producer or
coordinator took over); UNSUPPORTED_FOR_MESSAGE_FORMAT drops the partition.
"""

from __future__ import annotations

from typing import Any

from shoal.partitions.api import TxnMarker
from shoal.protocol.apis import RequestHeader, response_class
from shoal.protocol.build import make, nested
from shoal.server.context import ServerContext

#: How long a marker may wait for the ISR. The request has no timeout of its own: Kafka uses the
#: broker's ``request.timeout.ms`` (default 30 s), which Shoal does not configure.
MARKER_TIMEOUT_MS = 30_000


def _marker(m: Any) -> TxnMarker:
    return TxnMarker(
        producer_id=int(m.producer_id),
        producer_epoch=int(m.producer_epoch),
        coordinator_epoch=int(m.coordinator_epoch),
        commit=bool(m.transaction_result),
        # v1 has no field: Kafka reads it as its default, 0 (the legacy transaction versions).
        transaction_version=int(getattr(m, "transaction_version", 0)),
    )


async def handle_write_txn_markers(ctx: ServerContext, header: RequestHeader, request: Any) -> Any:
    writes = [
        (t.name, int(index), _marker(m)) for m in request.markers for t in m.topics for index in t.partition_indexes
    ]
    outcomes = iter(await ctx.partitions.write_txn_markers(writes, MARKER_TIMEOUT_MS))
    cls = response_class(header.api_key, header.api_version)
    marker_cls, topic_cls = nested(cls, "WritableTxnMarkerResult"), nested(cls, "WritableTxnMarkerTopicResult")
    partition_cls = nested(cls, "WritableTxnMarkerPartitionResult")
    return make(
        cls,
        markers=tuple(
            make(
                marker_cls,
                producer_id=m.producer_id,
                topics=tuple(
                    make(
                        topic_cls,
                        name=t.name,
                        partitions=tuple(
                            make(partition_cls, partition_index=index, error_code=next(outcomes).error)
                            for index in t.partition_indexes
                        ),
                    )
                    for t in m.topics
                ),
            )
            for m in request.markers
        ),
    )
