"""Finding an offset in remote segments: which copied segment holds it, and where in the segment's
log its batch starts (from the segment's offset index). Shared by the broker's remote reads
(``remote_log.reader``) and the pipeline's reads straight from object storage."""

from __future__ import annotations

import struct

from shoal.tiered.api import RemoteLogSegmentMetadata

__all__ = ["floor_segment", "index_position"]

_OFFSET_ENTRY = struct.Struct(">ii")


def floor_segment(segments: list[RemoteLogSegmentMetadata], offset: int) -> RemoteLogSegmentMetadata | None:
    """The copied segment holding ``offset`` with the highest start offset (``segments`` are
    COPY_SEGMENT_FINISHED ones): after a leader change two copies may overlap, and the later cut
    is the one the log went on from."""
    best = None
    for s in segments:
        if s.start_offset <= offset <= s.end_offset and (best is None or s.start_offset > best.start_offset):
            best = s
    return best


def index_position(index: bytes, base_offset: int, offset: int) -> int:
    """The file position of the last offset-index entry at or below ``offset`` (0 when none).

    Kafka's offset index: 8-byte entries (offset relative to the segment's base, position); a
    preallocated index ends in zeros."""
    position = 0
    for i in range(0, len(index) - len(index) % 8, 8):
        relative, pos = _OFFSET_ENTRY.unpack_from(index, i)
        if relative == 0 and pos == 0 and i > 0:
            break  # the zero-filled tail of a preallocated index
        if base_offset + relative > offset:
            break
        position = pos
    return position
