"""The rules of the remote log metadata (tiered storage's ``RemoteLogMetadataManager``) that every
backend shares, after Kafka's ``RemoteLogMetadataCache`` and ``RemoteLogLeaderEpochState``.

- A segment is added in COPY_SEGMENT_STARTED only (ValueError otherwise, or when its id exists),
  with at least one leader epoch, ``start_offset <= end_offset`` and its epochs' first offsets
  ascending inside the segment. Updates move it along ``valid_transition`` only (ValueError;
  RemoteResourceNotFoundError for an unknown id); an update sets the state, the event time and the
  broker id, and the custom metadata when it carries some (None keeps what the segment has).
  DELETE_SEGMENT_FINISHED deletes the segment's rows.
- Each leader epoch of a segment covers ``[its first offset, the next epoch's first offset - 1]``
  in that segment, the last one up to ``end_offset`` (Kafka's ``higherEntry(epoch)``); the
  backends store that range per (segment, epoch).
- ``remote_log_segment_metadata(tp, epoch, offset)``: among COPY_SEGMENT_FINISHED segments whose
  range of ``epoch`` holds ``offset``, the one whose range starts highest (Kafka's floor lookup on
  the epoch's first offsets); between copies whose range starts at the same offset (two leaders
  copied the same offsets), the one that finished copying last, as Kafka's map keeps the last
  finished segment under that key.
- ``highest_offset_for_epoch``: the highest end of ``epoch``'s ranges over COPY_SEGMENT_FINISHED
  segments. ``remote_log_size``: their total size.
- ``list_remote_log_segments``: every segment of the partition (none is DELETE_SEGMENT_FINISHED:
  those rows are gone), by start offset, then end offset, then id; with an epoch, the
  COPY_SEGMENT_FINISHED ones holding it.
- Partition delete metadata: the latest state put for a partition (any state may follow any, as
  Kafka's RLMM takes them; FINISHED is kept, so a broker can tell a finished deletion).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from shoal.tiered.api import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemoteResourceNotFoundError,
    TopicIdPartition,
    valid_transition,
)

__all__ = [
    "COPY_FINISHED",
    "SEGMENT_COLUMNS",
    "check_new_segment",
    "check_update",
    "epoch_ranges",
    "segment_from_row",
]

COPY_FINISHED = RemoteLogSegmentState.COPY_SEGMENT_FINISHED

#: The columns of ``remote_log_segments`` that ``segment_from_row`` reads, in its order.
SEGMENT_COLUMNS = (
    "segment_id",
    "topic_id",
    "partition",
    "topic",
    "start_offset",
    "end_offset",
    "max_timestamp_ms",
    "broker_id",
    "event_timestamp_ms",
    "segment_size",
    "state",
    "custom_metadata",
    "tiered_epoch",
)


def check_new_segment(metadata: RemoteLogSegmentMetadata) -> None:
    """Refuse a segment that cannot be added (ValueError)."""
    if metadata.state != RemoteLogSegmentState.COPY_SEGMENT_STARTED:
        raise ValueError(
            f"remote log segment {metadata.segment_id.id} must be added in COPY_SEGMENT_STARTED, "
            f"not {metadata.state.name}"
        )
    if not metadata.segment_leader_epochs:
        raise ValueError(f"remote log segment {metadata.segment_id.id} has no leader epochs")
    if not 0 <= metadata.start_offset <= metadata.end_offset:
        raise ValueError(
            f"remote log segment {metadata.segment_id.id} has offsets "
            f"[{metadata.start_offset}, {metadata.end_offset}]"
        )
    previous = metadata.start_offset
    for epoch in sorted(metadata.segment_leader_epochs):
        first = metadata.segment_leader_epochs[epoch]
        if not previous <= first <= metadata.end_offset:
            raise ValueError(
                f"remote log segment {metadata.segment_id.id}: leader epoch {epoch} starts at {first}, "
                f"outside the segment [{metadata.start_offset}, {metadata.end_offset}] or before the "
                "epoch preceding it"
            )
        previous = first


def check_update(update: RemoteLogSegmentMetadataUpdate, current: RemoteLogSegmentState | None) -> None:
    """Refuse an update of a segment in state ``current`` (None: no such segment)."""
    if current is None:
        raise RemoteResourceNotFoundError(f"no remote log segment {update.segment_id.id}")
    if not valid_transition(current, update.state):
        raise ValueError(
            f"remote log segment {update.segment_id.id} cannot go from {current.name} to {update.state.name}"
        )


def epoch_ranges(metadata: RemoteLogSegmentMetadata) -> list[tuple[int, int, int]]:
    """``(epoch, first offset, last offset)`` of each leader epoch in the segment."""
    epochs = sorted(metadata.segment_leader_epochs.items())
    return [
        (epoch, first, epochs[i + 1][1] - 1 if i + 1 < len(epochs) else metadata.end_offset)
        for i, (epoch, first) in enumerate(epochs)
    ]


def segment_from_row(row: Sequence, epochs: Mapping[int, int]) -> RemoteLogSegmentMetadata:
    """A segment from its ``SEGMENT_COLUMNS`` (ids as ``uuid.UUID``) and its epochs' first offsets."""
    (sid, topic_id, partition, topic, start, end, max_ts, broker, event_ts, size, state, custom, tiered) = row
    return RemoteLogSegmentMetadata(
        segment_id=RemoteLogSegmentId(TopicIdPartition(topic_id, partition, topic), sid),
        start_offset=start,
        end_offset=end,
        max_timestamp_ms=max_ts,
        broker_id=broker,
        event_timestamp_ms=event_ts,
        segment_size_in_bytes=size,
        segment_leader_epochs=dict(sorted(epochs.items())),
        state=RemoteLogSegmentState(state),
        custom_metadata=None if custom is None else bytes(custom),
        tiered_epoch=tiered,
    )
