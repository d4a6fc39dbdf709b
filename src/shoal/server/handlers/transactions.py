"""The transaction coordinator's APIs (KIP-98, KIP-664): AddPartitionsToTxn (24), AddOffsetsToTxn
(25), EndTxn (26), DescribeTransactions (65) and ListTransactions (66). InitProducerId and
FindCoordinator live with the other coordinator lookups (``coordinators.py``).
"""

from __future__ import annotations

import datetime
import re
from typing import Any

from shoal.protocol.apis import RequestHeader, response_class
from shoal.protocol.build import make, nested
from shoal.protocol.errors import ErrorCode
from shoal.server.context import ServerContext

_ZERO = datetime.timedelta(0)


def _topic_partitions(topics: Any) -> list[tuple[str, int]]:
    return [(t.name, int(p)) for t in topics for p in t.partitions]


def _topic_results(cls: type, topics: Any, errors: dict[tuple[str, int], ErrorCode]) -> tuple[Any, ...]:
    topic_cls, partition_cls = nested(cls, "AddPartitionsToTxnTopicResult"), nested(cls, "AddPartitionsToTxnPartitionResult")
    return tuple(
        make(
            topic_cls,
            name=t.name,
            results_by_partition=tuple(
                make(partition_cls, partition_index=p, partition_error_code=errors[(t.name, int(p))]) for p in t.partitions
            ),
        )
        for t in topics
    )


async def _add(ctx: ServerContext, tid: str, pid: int, epoch: int, topics: Any, verify_only: bool) -> dict[tuple[str, int], ErrorCode]:
    """One transaction's partitions: unknown topics are UNKNOWN_TOPIC_OR_PARTITION and the others
    OPERATION_NOT_ATTEMPTED (as Kafka refuses the whole set), else the coordinator's answer."""
    wanted = _topic_partitions(topics)
    image = ctx.image
    unknown = {
        (topic, p) for topic, p in wanted
        if (found := image.topic(topic)) is None or p not in found.partitions
    }
    if unknown:
        return {tp: ErrorCode.unknown_topic_or_partition if tp in unknown else ErrorCode.operation_not_attempted for tp in wanted}
    if verify_only:
        return dict(zip(wanted, ctx.transactions.verify_partitions(tid, pid, epoch, wanted), strict=True))
    error = await ctx.transactions.add_partitions(tid, pid, epoch, wanted)
    return dict.fromkeys(wanted, error)


async def handle_add_partitions_to_txn(ctx: ServerContext, header: RequestHeader, request: Any) -> Any:
    cls = response_class(header.api_key, header.api_version)
    if header.api_version < 4:
        topics = request.v3_and_below_topics
        errors = await _add(ctx, request.v3_and_below_transactional_id, int(request.v3_and_below_producer_id),
                            int(request.v3_and_below_producer_epoch), topics, verify_only=False)
        return make(cls, throttle_time=_ZERO, results_by_topic_v3_and_below=_topic_results(cls, topics, errors))
    result_cls = nested(cls, "AddPartitionsToTxnResult")
    results = []
    for txn in request.transactions:
        errors = await _add(ctx, txn.transactional_id, int(txn.producer_id), int(txn.producer_epoch), txn.topics,
                            verify_only=bool(txn.verify_only))
        results.append(make(result_cls, transactional_id=txn.transactional_id,
                            topic_results=_topic_results(cls, txn.topics, errors)))
    return make(cls, throttle_time=_ZERO, error_code=ErrorCode.none, results_by_transaction=tuple(results))


async def handle_add_offsets_to_txn(ctx: ServerContext, header: RequestHeader, request: Any) -> Any:
    cls = response_class(header.api_key, header.api_version)
    if not request.group_id:
        error = ErrorCode.invalid_group_id
    else:
        error = await ctx.transactions.add_offsets(
            request.transactional_id, int(request.producer_id), int(request.producer_epoch), request.group_id
        )
    return make(cls, throttle_time=_ZERO, error_code=error)


async def handle_end_txn(ctx: ServerContext, header: RequestHeader, request: Any) -> Any:
    cls = response_class(header.api_key, header.api_version)
    error = await ctx.transactions.end_transaction(
        request.transactional_id, int(request.producer_id), int(request.producer_epoch), bool(request.committed)
    )
    # v5's producer id and epoch are transaction version 2's epoch bump; with versions 0-1 they
    # stay the producer's own (Kafka answers -1 when not bumping).
    return make(cls, throttle_time=_ZERO, error_code=error, producer_id=-1, producer_epoch=-1)


def _ms_datetime(ms: int) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC)


async def handle_describe_transactions(ctx: ServerContext, header: RequestHeader, request: Any) -> Any:
    cls = response_class(header.api_key, header.api_version)
    state_cls, topic_cls = nested(cls, "TransactionState"), nested(cls, "TopicData")
    states = []
    for tid in request.transactional_ids:
        error, txn = ctx.transactions.describe(tid)
        if txn is None:
            states.append(make(state_cls, error_code=error, transactional_id=tid, transaction_state="",
                               transaction_timeout=_ZERO, transaction_start_time=_ms_datetime(-1),
                               producer_id=-1, producer_epoch=-1, topics=()))
            continue
        by_topic: dict[str, list[int]] = {}
        for topic, partition in txn.partitions:
            by_topic.setdefault(topic, []).append(partition)
        states.append(make(
            state_cls,
            error_code=ErrorCode.none,
            transactional_id=tid,
            transaction_state=txn.state,
            transaction_timeout=datetime.timedelta(milliseconds=txn.txn_timeout_ms),
            transaction_start_time=_ms_datetime(txn.txn_start_timestamp_ms),
            producer_id=txn.producer_id,
            producer_epoch=txn.producer_epoch,
            topics=tuple(make(topic_cls, topic=t, partitions=tuple(ps)) for t, ps in by_topic.items()),
        ))
    return make(cls, throttle_time=_ZERO, transaction_states=tuple(states))


async def handle_list_transactions(ctx: ServerContext, header: RequestHeader, request: Any) -> Any:
    cls = response_class(header.api_key, header.api_version)
    state_cls = nested(cls, "TransactionState")
    pattern = getattr(request, "transactional_id_pattern", None)
    try:
        matcher = re.compile(pattern) if pattern else None
    except re.error as exc:
        return make(cls, throttle_time=_ZERO, error_code=ErrorCode.invalid_request, unknown_state_filters=(),
                    transaction_states=(), error_message=f"invalid transactional id pattern: {exc}")
    error, listed, unknown = ctx.transactions.list_transactions(
        request.state_filters, [int(p) for p in request.producer_id_filters], int(getattr(request, "duration_filter", -1))
    )
    return make(
        cls,
        throttle_time=_ZERO,
        error_code=error,
        unknown_state_filters=tuple(unknown),
        transaction_states=tuple(
            make(state_cls, transactional_id=t.transactional_id, producer_id=t.producer_id, transaction_state=t.state)
            for t in listed
            if matcher is None or matcher.fullmatch(t.transactional_id)
        ),
    )
