"""Replaying a partition's batches into its producer state, and writing aborted-transaction index
entries as transactions complete.

Loading a log, truncating it and recovering it all rebuild producer state the same way: the
latest usable snapshot, then every batch after it (Kafka's ``loadProducersFromRecords``). A
recovered segment's ``.txnindex`` was emptied by ``LogSegment.recover``; the replay refills it
from the ABORT markers found in that segment, with the last stable offset at that point, as
Kafka's ``LogSegment.recover`` does with the producer state rebuilt up to the segment. A
transaction marker is read back from the segment to learn its outcome and coordinator epoch.
"""

from __future__ import annotations

import logging
from collections.abc import Collection

from shoal.classic.log_state import batches_from
from shoal.classic.producer_append import CompletedTxn
from shoal.classic.producer_state import OnAborted, ProducerStateManager
from shoal.classic.segment import LogSegment
from shoal.classic.txn_index import AbortedTxn
from shoal.protocol.errors import KafkaError
from shoal.records.batch import BatchHeader
from shoal.records.control import EndTxnMarker, parse_end_txn_marker

__all__ = ["marker_at", "replay_producer_state", "txn_index_writer"]

_log = logging.getLogger(__name__)


def txn_index_writer(segment: LogSegment) -> OnAborted:
    """The callback that records a completed aborted transaction in ``segment``'s ``.txnindex``."""

    def write(txn: CompletedTxn, last_stable_offset: int) -> None:
        segment.update_txn_index(AbortedTxn(txn.producer_id, txn.first_offset, txn.last_offset, last_stable_offset))

    return write


def marker_at(data: bytes | bytearray | memoryview, position: int, h: BatchHeader) -> EndTxnMarker | None:
    """The transaction marker of the control batch at ``position`` of ``data`` (INVALID_RECORD if none)."""
    return parse_end_txn_marker(memoryview(data)[position : position + h.size], h)


def _stored_marker(segment: LogSegment, position: int, h: BatchHeader) -> EndTxnMarker | None:
    try:
        return parse_end_txn_marker(segment.read_batch(position, h.size), h)
    except KafkaError as e:
        _log.warning("Control batch at offset %d in %s is no transaction marker: %s", h.base_offset, segment.log_path, e)
        return None


def replay_producer_state(
    producers: ProducerStateManager,
    segments: list[LogSegment],
    start: int,
    *,
    rebuild: Collection[LogSegment] = (),
) -> None:
    """Replay every batch from offset ``start``; aborted transactions completed in a ``rebuild``
    segment go to its transaction index, and a snapshot is taken where each such segment ends
    (Kafka's ``recoverSegment`` does, so the next load need not replay it again)."""
    rebuilt = {id(s) for s in rebuild}
    current: LogSegment | None = None
    writer: OnAborted | None = None
    for segment, position, h in batches_from(segments, start):
        if segment is not current:
            if current is not None and id(current) in rebuilt:
                producers.update_map_end_offset(segment.base_offset)
                producers.take_snapshot(sync=True)
            current = segment
            writer = txn_index_writer(segment) if id(segment) in rebuilt else None
        marker = _stored_marker(segment, position, h) if h.is_control else None
        producers.replay_batch(h, marker, writer)
