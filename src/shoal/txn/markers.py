"""What the transaction coordinator hands the marker channel (``server/txn_marker_channel.py``):
one marker per partition of an ending transaction, the errors that stop it sending, and how it
retries the rest.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from shoal.protocol.errors import ErrorCode

__all__ = [
    "GROUP_METADATA_TOPIC",
    "MARKERS_FENCED",
    "MARKER_RETRY_LOG_EVERY",
    "MARKER_RETRY_MAX_S",
    "MarkerSend",
    "SendMarkers",
]

#: Kafka's internal offsets topic: AddOffsetsToTxn adds the group's partition of it.
GROUP_METADATA_TOPIC = "__consumer_offsets"
#: How often markers that failed (leader moving, replicas catching up) are sent again, at most.
MARKER_RETRY_MAX_S = 1.0
#: Markers still failing are logged every this many attempts (about every 10 s).
MARKER_RETRY_LOG_EVERY = 10


@dataclass(frozen=True, slots=True)
class MarkerSend:
    """One partition's marker, for ``send_markers``."""

    topic: str
    partition: int
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    commit: bool
    transaction_version: int


SendMarkers = Callable[[Sequence[MarkerSend]], Awaitable[list[ErrorCode]]]

#: Marker errors after which a coordinator stops sending: a newer producer epoch or a newer
#: coordinator took over (Kafka's TransactionMarkerRequestCompletionHandler).
MARKERS_FENCED = frozenset({ErrorCode.invalid_producer_epoch, ErrorCode.transaction_coordinator_fenced})
