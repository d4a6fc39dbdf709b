"""Produce request bodies read without copying their records.

kio's reader copies every ``records`` field into a new ``bytes``: a second copy of each
megabyte a producer sends, on the event loop, before the segment build copies it again. This
reader builds the same kio dataclasses with ``records`` as a read-only view of the request frame
(the frame lives as long as a batch needs it: the appender keeps the views until its segment is
built). It runs only after ``guard.check_request`` accepted the frame, so the counts and lengths
it follows are known to fit; tagged fields (none are defined for Produce) are skipped.
"""

from __future__ import annotations

import datetime
import struct
import sys
from typing import Any

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")


class _Cursor:
    __slots__ = ("buf", "pos", "flexible")

    def __init__(self, buf: memoryview, pos: int, flexible: bool) -> None:
        self.buf, self.pos, self.flexible = buf, pos, flexible

    def int16(self) -> int:
        (value,) = _INT16.unpack_from(self.buf, self.pos)
        self.pos += 2
        return value

    def int32(self) -> int:
        (value,) = _INT32.unpack_from(self.buf, self.pos)
        self.pos += 4
        return value

    def uvarint(self) -> int:
        value = shift = 0
        while True:
            byte = self.buf[self.pos]
            self.pos += 1
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                return value
            shift += 7

    def length(self) -> int:
        """A string's, bytes' or array's length; -1 for null."""
        return self.uvarint() - 1 if self.flexible else self.int32()

    def string(self) -> str | None:
        n = self.uvarint() - 1 if self.flexible else self.int16()
        if n < 0:
            return None
        value = str(self.buf[self.pos : self.pos + n], "utf-8")
        self.pos += n
        return value

    def bytes_view(self) -> memoryview | None:
        n = self.length()
        if n < 0:
            return None
        view = self.buf[self.pos : self.pos + n]
        self.pos += n
        return view

    def skip_tags(self) -> None:
        if self.flexible:
            for _ in range(self.uvarint()):
                self.uvarint()  # tag
                self.pos += self.uvarint()


def read_produce_request(frame: memoryview, offset: int, cls: type) -> tuple[Any, int]:
    """The ProduceRequest (v3-v12 layout: topics by name) at ``offset``; and where it ends."""
    schema = sys.modules[cls.__module__]
    topic_cls, partition_cls = schema.TopicProduceData, schema.PartitionProduceData
    buf = frame if frame.readonly else frame.toreadonly()
    if buf.format != "B" or buf.ndim != 1:
        buf = buf.cast("B")
    r = _Cursor(buf, offset, cls.__flexible__)
    transactional_id = r.string()
    acks = r.int16()
    timeout = datetime.timedelta(milliseconds=r.int32())
    topics = []
    for _ in range(r.length()):
        name = r.string()
        partitions = []
        for _ in range(r.length()):
            index = r.int32()
            partitions.append(partition_cls(index=index, records=r.bytes_view()))
            r.skip_tags()
        r.skip_tags()
        topics.append(topic_cls(name=name, partition_data=tuple(partitions)))
    r.skip_tags()
    request = cls(transactional_id=transactional_id, acks=acks, timeout=timeout, topic_data=tuple(topics))
    return request, r.pos
