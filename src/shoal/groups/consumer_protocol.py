"""The part of the consumer protocol the coordinator reads: a member's subscribed topics.

Members of a ``consumer`` group put a ConsumerProtocolSubscription in their JoinGroup
metadata. Kafka's coordinator reads the topics from it (with the version 0 layout, which
prefixes every later version) to know which topics a group consumes: those offsets may
not be deleted (GROUP_SUBSCRIBED_TO_TOPIC) nor expired while the group is active.
"""

from __future__ import annotations

import struct

PROTOCOL_TYPE = "consumer"

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


class MalformedSubscription(ValueError):
    """The metadata is not a consumer protocol subscription."""


def subscribed_topics(metadata: bytes) -> list[str]:
    """Topics of a ConsumerProtocolSubscription (version, then an array of int16-length strings)."""
    try:
        (version,) = _I16.unpack_from(metadata, 0)
        if version < 0:
            raise MalformedSubscription(f"negative consumer protocol version {version}")
        (count,) = _I32.unpack_from(metadata, 2)
        if count < 0 or count > len(metadata):
            raise MalformedSubscription(f"bad topic count {count}")
        pos = 6
        topics = []
        for _ in range(count):
            (size,) = _I16.unpack_from(metadata, pos)
            pos += 2
            if size < 0 or pos + size > len(metadata):
                raise MalformedSubscription(f"bad topic name length {size}")
            topics.append(metadata[pos : pos + size].decode())
            pos += size
        return topics
    except (struct.error, UnicodeDecodeError) as exc:
        raise MalformedSubscription(str(exc)) from None
