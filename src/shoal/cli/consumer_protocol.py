"""Kafka's ConsumerProtocol Assignment, as found in DescribeGroups' ``member_assignment`` bytes.

A classic consumer group's leader assigns partitions inside opaque bytes that the broker only
stores and hands back; tools that show who owns which partition (``shoal groups describe``)
must decode them the way Kafka's ``ConsumerProtocol.deserializeAssignment`` does:

    version          int16
    assigned         int32 count, then per topic: topic (int16-length string),
                     partitions (int32 count, then int32 each)
    user_data        int32-length bytes, -1 for null

Every version so far (0-3) has this layout; like Kafka, a newer version is read with the
newest known layout and trailing bytes are ignored (newer versions may only append fields).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

PROTOCOL_TYPE = "consumer"
"""The protocol type of groups whose members speak the consumer protocol."""

LATEST_ASSIGNMENT_VERSION = 3

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")


class ConsumerProtocolError(ValueError):
    """The bytes are not a ConsumerProtocol Assignment (truncated, negative lengths, bad version)."""


@dataclass(frozen=True, slots=True)
class TopicAssignment:
    topic: str
    partitions: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Assignment:
    """A member's assignment: topics with their partitions, in the order the leader wrote them."""

    version: int
    topics: tuple[TopicAssignment, ...]
    user_data: bytes | None

    def topic_partitions(self) -> list[tuple[str, int]]:
        """Every assigned (topic, partition), in wire order (what the tool counts and shows)."""
        return [(t.topic, p) for t in self.topics for p in t.partitions]


EMPTY_ASSIGNMENT = Assignment(version=0, topics=(), user_data=None)


class _Cursor:
    """Bounds-checked big-endian reads: a short buffer is an error, never a silent zero."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def _take(self, n: int, what: str) -> bytes:
        end = self.pos + n
        if end > len(self.data):
            raise ConsumerProtocolError(
                f"assignment truncated reading {what} at byte {self.pos} ({len(self.data)} bytes in all)"
            )
        chunk = self.data[self.pos : end]
        self.pos = end
        return chunk

    def int16(self, what: str) -> int:
        return int(_INT16.unpack(self._take(2, what))[0])

    def int32(self, what: str) -> int:
        return int(_INT32.unpack(self._take(4, what))[0])

    def count(self, what: str) -> int:
        n = self.int32(what)
        if n < 0:
            raise ConsumerProtocolError(f"negative {what} ({n}) at byte {self.pos - 4}")
        return n

    def string(self, what: str) -> str:
        n = self.int16(what)
        if n < 0:
            raise ConsumerProtocolError(f"null {what} at byte {self.pos - 2}")
        raw = self._take(n, what)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ConsumerProtocolError(f"{what} is not UTF-8: {exc}") from None

    def nullable_bytes(self, what: str) -> bytes | None:
        n = self.int32(what)
        if n < 0:
            return None
        return self._take(n, what)


def decode_assignment(data: bytes | bytearray | memoryview) -> Assignment:
    """Decode a member's assignment; empty bytes (a member not yet synced) mean no partitions."""
    raw = bytes(data)
    if not raw:
        return EMPTY_ASSIGNMENT
    cur = _Cursor(raw)
    version = cur.int16("version")
    if version < 0:
        raise ConsumerProtocolError(f"unsupported assignment version {version}")
    topics: list[TopicAssignment] = []
    for _ in range(cur.count("topic count")):
        topic = cur.string("topic name")
        partitions = tuple(cur.int32("partition") for _ in range(cur.count("partition count")))
        topics.append(TopicAssignment(topic, partitions))
    user_data = cur.nullable_bytes("user data")
    return Assignment(version=version, topics=tuple(topics), user_data=user_data)


# -- what a member itself sends: its Subscription (JoinGroup metadata) and, as leader, Assignments --

SUBSCRIPTION_VERSION = 0
"""The Subscription version this client writes: topics and user data, what the range assignor needs."""


def _string(value: str) -> bytes:
    raw = value.encode("utf-8")
    return _INT16.pack(len(raw)) + raw


def encode_subscription(topics: list[str]) -> bytes:
    """ConsumerProtocolSubscription v0: version, topics, null user data."""
    out = bytearray(_INT16.pack(SUBSCRIPTION_VERSION))
    out += _INT32.pack(len(topics))
    for topic in topics:
        out += _string(topic)
    out += _INT32.pack(-1)
    return bytes(out)


def decode_subscription_topics(data: bytes | bytearray | memoryview) -> list[str]:
    """The topics of any member's Subscription (every version starts with version and topics)."""
    cur = _Cursor(bytes(data))
    version = cur.int16("version")
    if version < 0:
        raise ConsumerProtocolError(f"unsupported subscription version {version}")
    return [cur.string("topic name") for _ in range(cur.count("topic count"))]


def encode_assignment(partitions: list[tuple[str, int]]) -> bytes:
    """ConsumerProtocolAssignment v0: the member's partitions grouped by topic, null user data."""
    by_topic: dict[str, list[int]] = {}
    for topic, partition in partitions:
        by_topic.setdefault(topic, []).append(partition)
    out = bytearray(_INT16.pack(0))
    out += _INT32.pack(len(by_topic))
    for topic, parts in by_topic.items():
        out += _string(topic)
        out += _INT32.pack(len(parts))
        for p in parts:
            out += _INT32.pack(p)
    out += _INT32.pack(-1)
    return bytes(out)
