"""What a commit decides for each batch, whatever store holds the state: the one place the Batch
Coordinator's offset assignment, Kafka's idempotent-producer rules and its transaction rules meet.

A backend loads the partition's log row, the producer's state and the partition's transactional
state in its own transaction, asks ``decide`` about each batch in request order (state updated
as it goes, so several batches of one producer in one object are checked against each other),
and writes back what changed. A rejected or duplicate batch takes no offset and no used size.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from shoal.coordinator.api import CommitBatchRequest, CommitBatchResponse
from shoal.coordinator.idempotence import NO_PRODUCER, ProducerEntry, ProducerState, check_sequence, rejected
from shoal.coordinator.transactions import (
    LogTxns,
    ProducerTxn,
    accept_data,
    accept_marker,
    check_data,
    check_marker,
    malformed,
)
from shoal.protocol.errors import ErrorCode
from shoal.records.types import TimestampType


class CommitLog(Protocol):
    """The log row of a partition as a write transaction holds it (each backend's ``LogState``)."""

    log_id: int
    log_start_offset: int
    high_watermark: int
    byte_size: int
    max_timestamp: int
    dirty: bool


def decide(
    req: CommitBatchRequest,
    log: CommitLog | None,
    producer_state: Callable[[int, int], ProducerState],
    log_txns: Callable[[int], LogTxns],
    now: int,
    file_size: int,
) -> tuple[CommitBatchResponse, bool]:
    """(the batch's answer, whether it was accepted). An accepted batch has advanced ``log``
    (high watermark, size, max timestamp), the producer's remembered batches and the partition's
    transactions; ``producer_state(log_id, producer_id)`` and ``log_txns(log_id)`` return the
    state, loading it if needed."""
    if log is None:
        return rejected(ErrorCode.unknown_topic_or_partition, -1, req), False
    if (
        req.last_offset < req.base_offset
        or req.size <= 0
        or req.byte_offset < 0
        or req.byte_offset + req.size > file_size
        or malformed(req)
    ):
        return rejected(ErrorCode.corrupt_message, log.log_start_offset, req), False
    state: ProducerState | None = None
    txns: LogTxns | None = None
    txn: ProducerTxn | None = None
    reset = False
    if req.producer_id != NO_PRODUCER:
        state = producer_state(log.log_id, req.producer_id)
        txns = log_txns(log.log_id)
        txn = txns.for_batch(state, req)
        if req.control is not None:
            # Markers are not deduplicated: a retried one is appended again, as in Kafka.
            error = check_marker(state, txn, req)
        else:
            duplicate = state.find_duplicate(req.producer_epoch, req.base_sequence, req.last_sequence)
            if duplicate is not None:
                answer = CommitBatchResponse(
                    errors=ErrorCode.none,
                    assigned_base_offset=duplicate.assigned_offset,
                    log_append_time=duplicate.log_append_time,
                    log_start_offset=log.log_start_offset,
                    is_duplicate=True,
                    request=req,
                )
                return answer, False
            error, reset = check_sequence(state, req, txn.epoch)
            if error is ErrorCode.none:
                error = check_data(txn, req)
        if error is not ErrorCode.none:
            return rejected(error, log.log_start_offset, req), False

    base_offset = log.high_watermark
    log.high_watermark = base_offset + (req.last_offset - req.base_offset) + 1
    log.byte_size += req.size
    effective_ts = now if req.message_timestamp_type == TimestampType.LOG_APPEND_TIME else req.batch_max_timestamp
    log.max_timestamp = max(log.max_timestamp, effective_ts)
    log.dirty = True
    if state is not None and txns is not None and txn is not None:
        if req.control is not None:
            accept_marker(state, txns, req, base_offset)
        else:
            state.append(
                ProducerEntry(
                    row_id=state.next_row_id,
                    epoch=req.producer_epoch,
                    base_sequence=req.base_sequence,
                    last_sequence=req.last_sequence,
                    assigned_offset=base_offset,
                    log_append_time=now,
                    new=True,
                ),
                reset,
            )
            accept_data(txn, req, base_offset)
    answer = CommitBatchResponse(
        errors=ErrorCode.none,
        assigned_base_offset=base_offset,
        log_append_time=now,
        log_start_offset=log.log_start_offset,
        is_duplicate=False,
        request=req,
    )
    return answer, True
