"""The ConsumerProtocol Assignment decoder that ``shoal groups describe`` uses on member_assignment bytes.

Checked against hand-laid bytes (Kafka's layout written out field by field) and against kio's
encoder of Kafka's ConsumerProtocolAssignment schema, versions 0-3.
"""

from __future__ import annotations

import importlib
import io
import struct

import pytest
from kio.serial import entity_writer

from shoal.cli.consumer_protocol import (
    EMPTY_ASSIGNMENT,
    Assignment,
    ConsumerProtocolError,
    TopicAssignment,
    decode_assignment,
)


def string(value: str) -> bytes:
    raw = value.encode()
    return struct.pack(">h", len(raw)) + raw


def hand_built(version: int, topics: list[tuple[str, list[int]]], user_data: bytes | None) -> bytes:
    out = struct.pack(">h", version) + struct.pack(">i", len(topics))
    for topic, partitions in topics:
        out += string(topic) + struct.pack(">i", len(partitions)) + b"".join(struct.pack(">i", p) for p in partitions)
    out += struct.pack(">i", -1) if user_data is None else struct.pack(">i", len(user_data)) + user_data
    return out


def kio_built(version: int, topics: list[tuple[str, list[int]]], user_data: bytes | None) -> bytes:
    """What a Java consumer's leader writes: the int16 version header, then the versioned struct."""
    module = importlib.import_module(f"kio.schema.consumer_protocol_assignment.v{version}.data")
    entity = module.ConsumerProtocolAssignment(
        assigned_partitions=tuple(module.TopicPartition(topic=t, partitions=tuple(ps)) for t, ps in topics),
        user_data=user_data,
    )
    buffer = io.BytesIO()
    buffer.write(struct.pack(">h", version))
    entity_writer(type(entity))(buffer, entity)
    return buffer.getvalue()


def test_hand_built_bytes_decode_field_by_field() -> None:
    data = hand_built(1, [("orders", [2, 0, 5]), ("payments", [1])], b"\x01\x02")
    assignment = decode_assignment(data)
    assert assignment == Assignment(
        version=1,
        topics=(TopicAssignment("orders", (2, 0, 5)), TopicAssignment("payments", (1,))),
        user_data=b"\x01\x02",
    )
    # Wire order is kept: the tool sorts for display, the decoder does not reorder.
    assert assignment.topic_partitions() == [("orders", 2), ("orders", 0), ("orders", 5), ("payments", 1)]


@pytest.mark.parametrize("version", [0, 1, 2, 3])
@pytest.mark.parametrize("user_data", [None, b"", b"sticky-generation\x00\x07"])
def test_agrees_with_kafka_schema_encoder(version: int, user_data: bytes | None) -> None:
    topics = [("t", [0, 1]), ("ünïcode-topic", [7]), ("empty-list", [])]
    assignment = decode_assignment(kio_built(version, topics, user_data))
    assert assignment.version == version
    assert [(t.topic, list(t.partitions)) for t in assignment.topics] == topics
    assert assignment.user_data == user_data


def test_empty_bytes_are_a_member_without_assignment() -> None:
    # A member that joined but has not synced yet has empty member_assignment bytes.
    assert decode_assignment(b"") == EMPTY_ASSIGNMENT
    assert decode_assignment(b"").topic_partitions() == []


def test_no_topics() -> None:
    assert decode_assignment(hand_built(0, [], None)) == Assignment(0, (), None)


def test_newer_versions_read_with_the_known_layout_and_trailing_bytes_ignored() -> None:
    # Kafka reads a future version with its newest layout; new fields can only be appended.
    data = hand_built(9, [("t", [3])], None) + b"\x00\x00\x00\x2a future field"
    assert decode_assignment(data) == Assignment(9, (TopicAssignment("t", (3,)),), None)


def test_memoryview_and_bytearray_inputs() -> None:
    data = hand_built(0, [("t", [0])], b"x")
    assert decode_assignment(bytearray(data)) == decode_assignment(memoryview(data)) == decode_assignment(data)


@pytest.mark.parametrize("cut", [1, 2, 5, 8, 9, 12, 15, 19, 22])
def test_every_truncation_is_an_error(cut: int) -> None:
    data = hand_built(0, [("abc", [4])], b"ud")
    assert len(data) == 2 + 4 + 5 + 4 + 4 + 4 + 2
    with pytest.raises(ConsumerProtocolError, match="truncated"):
        decode_assignment(data[:cut])


def test_negative_version_is_rejected() -> None:
    with pytest.raises(ConsumerProtocolError, match="version -1"):
        decode_assignment(struct.pack(">hi", -1, 0) + struct.pack(">i", -1))


def test_negative_counts_are_rejected() -> None:
    with pytest.raises(ConsumerProtocolError, match="negative topic count"):
        decode_assignment(struct.pack(">hi", 0, -1))
    bad_partitions = struct.pack(">hi", 0, 1) + string("t") + struct.pack(">i", -5)
    with pytest.raises(ConsumerProtocolError, match="negative partition count"):
        decode_assignment(bad_partitions)


def test_null_topic_name_is_rejected() -> None:
    with pytest.raises(ConsumerProtocolError, match="null topic name"):
        decode_assignment(struct.pack(">hih", 0, 1, -1))


def test_huge_count_fails_on_the_missing_bytes_not_on_memory() -> None:
    with pytest.raises(ConsumerProtocolError, match="truncated"):
        decode_assignment(struct.pack(">hi", 0, 2**31 - 1))


def test_non_utf8_topic_is_rejected() -> None:
    data = struct.pack(">hi", 0, 1) + struct.pack(">h", 2) + b"\xff\xfe" + struct.pack(">ii", 0, -1)
    with pytest.raises(ConsumerProtocolError, match="UTF-8"):
        decode_assignment(data)
