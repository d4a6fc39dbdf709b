"""The request guard (shoal/protocol/guard.py): what kio must never be handed, and what it must still get.

kio 0.6.5 allocates for an array count before reading an element (a count of 2^32 aborts the
process), accepts null where the schema has none, and raises on unknown tagged fields. The
guard walks the frame first; these tests pin its rules, and that valid requests of every
advertised API and version decode exactly as before.
"""

from __future__ import annotations

import datetime
import io
import struct
import subprocess
import sys
import uuid
from dataclasses import MISSING, fields
from typing import Any

import pytest
from kio.serial import entity_reader, entity_writer
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveField,
    classify_field,
    get_field_tag,
    get_schema_field_type,
    is_optional,
)

from shoal.protocol import apis, guard, guard_runtime
from shoal.protocol.apis import (
    SUPPORTED_APIS,
    ApiKey,
    decode_request,
    decode_response,
    encode_request,
    request_class,
    response_class,
)
from shoal.protocol.build import make, nested
from shoal.protocol.errors import ErrorCode, KafkaError
from shoal.protocol.guard import MAX_STRING_LENGTH, MalformedRequest, check_request, encode_uvarint

ALL_VERSIONS = [
    (spec.key, version) for spec in SUPPORTED_APIS.values() for version in range(spec.min_version, spec.max_version + 1)
]
ALL_IDS = [f"{SUPPORTED_APIS[key].name}-v{version}" for key, version in ALL_VERSIONS]

HUGE = bytes.fromhex("ffffffff0f")  # uvarint 2^32-1: a compact array "of 2^32-2 elements"


def header_v2(api_key: int, version: int, correlation_id: int = 1, client_id: bytes = b"fuzz") -> bytes:
    """A flexible (v2) request header: int16 key, int16 version, int32 correlation id, int16-length client id, tags."""
    return struct.pack(">hhih", api_key, version, correlation_id, len(client_id)) + client_id + b"\x00"


def header_v1(api_key: int, version: int, correlation_id: int = 1, client_id: bytes = b"fuzz") -> bytes:
    return struct.pack(">hhih", api_key, version, correlation_id, len(client_id)) + client_id


def body(frame: bytes) -> bytes:
    assert struct.unpack_from(">i", frame)[0] == len(frame) - 4
    return frame[4:]


def refused(frame: bytes) -> str:
    """decode_request's refusal message for ``frame`` (which must be refused as INVALID_REQUEST)."""
    with pytest.raises(KafkaError) as info:
        decode_request(frame)
    assert info.value.code == ErrorCode.invalid_request
    assert "malformed" in info.value.message
    return info.value.message


@pytest.fixture
def kio_unreachable(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make any attempt to hand the frame to kio fail the test."""

    def no_kio(cls: type) -> Any:
        raise AssertionError(f"the frame reached kio ({cls.__name__})")

    monkeypatch.setattr(apis, "_reader", no_kio)


# --------------------------------------------------------------------------- absurd array counts

ABSURD_FRAMES = {
    # The frame from the report: Metadata v12 whose compact topics array claims 2^32-2 entries.
    "metadata-v12": bytes.fromhex("0003000c00000c3e000466757a7a00ffffffff0f000000"),
    # CreateTopics v5: topics HUGE, timeout_ms, validate_only, tags.
    "create-topics-v5": header_v2(ApiKey.CREATE_TOPICS, 5) + HUGE + bytes.fromhex("00007530" "00" "00"),
    # ListOffsets v7: replica_id, isolation_level, topics HUGE, tags.
    "list-offsets-v7": header_v2(ApiKey.LIST_OFFSETS, 7) + bytes.fromhex("ffffffff" "00") + HUGE + b"\x00",
    # Fetch v12: replica_id, max_wait, min_bytes, max_bytes, isolation_level, session id/epoch, topics HUGE.
    "fetch-v12": header_v2(ApiKey.FETCH, 12)
    + bytes.fromhex("ffffffff" "000001f4" "00000001" "03200000" "00" "00000000" "ffffffff")
    + HUGE
    + bytes.fromhex("01" "01" "00"),
    # Fetch v12 again, the count in a nested array: one topic "t" whose partitions claim 2^32-2.
    "fetch-v12-nested": header_v2(ApiKey.FETCH, 12)
    + bytes.fromhex("ffffffff" "000001f4" "00000001" "03200000" "00" "00000000" "ffffffff")
    + bytes.fromhex("02" "0274")
    + HUGE
    + bytes.fromhex("00" "01" "01" "00"),
    # FindCoordinator v4: key_type, coordinator_keys (compact array of strings) HUGE, tags.
    "find-coordinator-v4": header_v2(ApiKey.FIND_COORDINATOR, 4) + b"\x00" + HUGE + b"\x00",
    # Legacy (int32) counts: Metadata v1 topics 0x7fffffff, Produce v3 topic_data 0x7ffffffe.
    "metadata-v1": header_v1(ApiKey.METADATA, 1) + bytes.fromhex("7fffffff"),
    "produce-v3": header_v1(ApiKey.PRODUCE, 3) + bytes.fromhex("ffff" "ffff" "00007530" "7ffffffe"),
}


@pytest.mark.parametrize("name", list(ABSURD_FRAMES))
def test_absurd_array_counts_never_reach_kio(name: str, kio_unreachable: None) -> None:
    message = refused(ABSURD_FRAMES[name])
    assert "elements, but only" in message


def test_the_reported_frame_names_the_field() -> None:
    message = refused(ABSURD_FRAMES["metadata-v12"])
    assert message == (
        "malformed Metadata v12 request: MetadataRequest.topics: tried to read 4294967294 elements, "
        "but only 3 bytes remain"
    )


def test_absurd_frames_do_not_abort_the_process() -> None:
    """End to end in a child process: without the guard kio aborts it (exit 134)."""
    code = (
        "import sys\n"
        "from shoal.protocol.apis import decode_request\n"
        "from shoal.protocol.errors import KafkaError\n"
        "for frame in sys.argv[1:]:\n"
        "    try:\n"
        "        decode_request(bytes.fromhex(frame))\n"
        "    except KafkaError:\n"
        "        continue\n"
        "    sys.exit('decoded ' + frame)\n"
    )
    frames = [frame.hex() for frame in ABSURD_FRAMES.values()]
    result = subprocess.run([sys.executable, "-c", code, *frames], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr


def test_fixed_size_arrays_are_checked_by_size_not_count(kio_unreachable: None) -> None:
    # Fetch v4 (legacy): one topic "t" with 1000 partitions of 16 bytes each, but only 50 bytes.
    frame = (
        header_v1(ApiKey.FETCH, 4)
        + bytes.fromhex("ffffffff" "000001f4" "00000001" "03200000" "00")
        + bytes.fromhex("00000001" "000174" "000003e8")
        + bytes(50)
    )
    assert "tried to read 1000 elements, but only 50 bytes remain" in refused(frame)


def test_element_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    cls = request_class(ApiKey.METADATA, 12)
    topic_cls = nested(cls, "MetadataRequestTopic")
    topics = tuple(topic_cls(topic_id=None, name=f"t{i}") for i in range(11))
    frame = body(encode_request(1, "c", make(cls, topics=topics, allow_auto_topic_creation=False,
                                             include_topic_authorized_operations=False)))
    monkeypatch.setattr(guard_runtime, "MAX_ARRAY_ELEMENTS", 11)
    assert decode_request(frame)[1].topics == topics
    monkeypatch.setattr(guard_runtime, "MAX_ARRAY_ELEMENTS", 10)
    assert "more than 10 array elements" in refused(frame)


# --------------------------------------------------------------------------- null where the schema has none


def null_array_request(api_key: int, version: int, path: tuple[str, ...]) -> Any:
    """A sample request whose array at ``path`` (attribute names) is None; kio writes null for it."""
    request = sample(request_class(api_key, version))
    return _replace_path(request, path, None)


def _replace_path(entity: Any, path: tuple[str, ...], value: Any) -> Any:
    import dataclasses

    name, rest = path[0], path[1:]
    if not rest:
        return dataclasses.replace(entity, **{name: value})
    items = getattr(entity, name)
    first = _replace_path(items[0], rest, value)
    return dataclasses.replace(entity, **{name: (first, *items[1:])})


NULL_ARRAYS = [
    (ApiKey.PRODUCE, 3, ("topic_data",)),
    (ApiKey.PRODUCE, 9, ("topic_data",)),
    (ApiKey.PRODUCE, 9, ("topic_data", "partition_data")),
    (ApiKey.FETCH, 4, ("topics",)),
    (ApiKey.FETCH, 12, ("topics",)),
    (ApiKey.FETCH, 12, ("topics", "partitions")),
    (ApiKey.FETCH, 16, ("forgotten_topics_data",)),
    (ApiKey.LIST_OFFSETS, 1, ("topics",)),
    (ApiKey.LIST_OFFSETS, 7, ("topics", "partitions")),
    (ApiKey.OFFSET_COMMIT, 2, ("topics",)),
    (ApiKey.OFFSET_COMMIT, 8, ("topics", "partitions")),
    (ApiKey.JOIN_GROUP, 0, ("protocols",)),
    (ApiKey.JOIN_GROUP, 6, ("protocols",)),
    (ApiKey.CREATE_TOPICS, 2, ("topics",)),
    (ApiKey.CREATE_TOPICS, 5, ("topics", "configs")),
    (ApiKey.METADATA, 0, ("topics",)),  # nullable only from v1
    (ApiKey.FIND_COORDINATOR, 4, ("coordinator_keys",)),
    (ApiKey.DELETE_TOPICS, 6, ("topics",)),
    (ApiKey.SYNC_GROUP, 5, ("assignments",)),
    (ApiKey.DESCRIBE_CONFIGS, 4, ("resources",)),
]


@pytest.mark.parametrize(
    ("api_key", "version", "path"), NULL_ARRAYS, ids=[f"{SUPPORTED_APIS[k].name}-v{v}-{'.'.join(p)}" for k, v, p in NULL_ARRAYS]
)
def test_null_non_nullable_arrays_are_refused(api_key: int, version: int, path: tuple[str, ...]) -> None:
    frame = body(encode_request(1, "c", null_array_request(api_key, version, path)))
    message = refused(frame)
    assert "non-nullable field " in message and f".{path[-1]} was serialized as null" in message


@pytest.mark.parametrize(("api_key", "version"), ALL_VERSIONS, ids=ALL_IDS)
def test_null_in_every_non_nullable_top_level_field_is_refused(api_key: int, version: int) -> None:
    """Every top-level array and string the schema does not make nullable, set to null on the wire."""
    cls = request_class(api_key, version)
    for field in fields(cls):
        if get_field_tag(field) is not None:
            continue
        kind = classify_field(field)
        if isinstance(kind, EntityField):
            continue  # no non-nullable struct is written with a presence marker
        if isinstance(kind, PrimitiveField):
            if get_schema_field_type(field) != "string" or is_optional(field):
                continue
            frame = _null_string_frame(cls, field.name)
        else:
            if guard._nullable_top(field):
                continue
            frame = body(encode_request(1, "c", _replace_path(sample(cls), (field.name,), None)))
        assert f"non-nullable field {cls.__name__}.{field.name} was serialized as null" in refused(frame)


def _null_string_frame(cls: type, name: str) -> bytes:
    """A frame whose string field ``name`` is null: kio will not write that, so patch the bytes."""
    import dataclasses

    marker = "\x01null-me\x01"
    frame = body(encode_request(1, "c", dataclasses.replace(sample(cls), **{name: marker})))
    raw = marker.encode()
    if cls.__flexible__:
        encoded, null = bytes([len(raw) + 1]) + raw, b"\x00"
    else:
        encoded, null = struct.pack(">h", len(raw)) + raw, b"\xff\xff"
    assert frame.count(encoded) == 1
    return frame.replace(encoded, null)


def test_null_string_inside_an_array_is_refused() -> None:
    cls = request_class(ApiKey.PRODUCE, 9)
    frame = _nested_null_name(cls)
    assert "non-nullable field TopicProduceData.name was serialized as null" in refused(frame)


def _nested_null_name(cls: type) -> bytes:
    import dataclasses

    request = sample(cls)
    topic = dataclasses.replace(request.topic_data[0], name="\x01null-me\x01")
    frame = body(encode_request(1, "c", dataclasses.replace(request, topic_data=(topic,))))
    raw = b"\x01null-me\x01"
    return frame.replace(bytes([len(raw) + 1]) + raw, b"\x00")


def test_nullable_fields_accept_null() -> None:
    for key, version in ALL_VERSIONS:
        request = sample(request_class(key, version), nulls=True)
        header, decoded = decode_request(body(encode_request(9, None, request)))
        assert decoded == request, (key, version)
        assert header.client_id is None


@pytest.mark.parametrize(("marker", "present"), [(b"\xff", False), (b"\x01", True), (b"\x00", True)])
def test_nullable_struct_markers(marker: bytes, present: bool) -> None:
    cls = request_class(ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0)
    frame = header_v2(ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0) + bytes.fromhex("01" "000007d0") + marker
    if present:
        frame += bytes.fromhex("0274" "00000003" "00")  # cursor: topic "t", partition 3, tags
    frame += b"\x00"
    _, decoded = decode_request(frame)
    assert type(decoded) is cls
    assert (decoded.cursor is not None) == present
    if present:
        assert (decoded.cursor.topic_name, decoded.cursor.partition_index) == ("t", 3)


def test_negative_struct_markers_other_than_minus_one_are_refused(kio_unreachable: None) -> None:
    frame = header_v2(ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0) + bytes.fromhex("01" "000007d0" "fe" "0274" "00000003" "00" "00")
    assert "DescribeTopicPartitionsRequest.cursor: invalid presence marker -2" in refused(frame)


# --------------------------------------------------------------------------- lengths, varints, UTF-8


def test_lengths_and_varints(kio_unreachable: None) -> None:
    meta12 = header_v2(ApiKey.METADATA, 12)
    # a 6-byte varint as the topics count
    assert "varint is longer than 5 bytes" in refused(meta12 + bytes.fromhex("808080808001") + b"\x00\x00\x00")
    # one topic whose name claims 100 bytes
    assert "MetadataRequestTopic.name: needs 100 bytes" in refused(meta12 + b"\x02" + bytes(16) + b"\x65ab")
    # legacy string lengths below -1
    assert "negative length -2" in refused(header_v1(ApiKey.METADATA, 1) + bytes.fromhex("00000001" "fffe"))
    # client id claiming more than the frame holds
    assert "RequestHeader.client_id: needs 300 bytes" in refused(struct.pack(">hhih", 3, 1, 1, 300) + b"ab")
    # truncated inside the fixed fields
    assert "ListOffsetsRequest.isolation_level: needs" in refused(header_v2(ApiKey.LIST_OFFSETS, 7) + b"\xff\xff\xff\xff")
    # legacy bytes with a negative length (Produce v3 records)
    produce = header_v1(ApiKey.PRODUCE, 3) + bytes.fromhex("ffff" "ffff" "00007530" "00000001" "000174" "00000001" "00000000")
    assert "PartitionProduceData.records: negative length -2" in refused(produce + bytes.fromhex("fffffffe"))


def test_invalid_utf8_is_refused_naming_the_field() -> None:
    # kio refuses it (Rust from_utf8); the guard, asked to check UTF-8 then, names the field.
    frame = header_v2(ApiKey.METADATA, 12) + b"\x02" + bytes(16) + b"\x03\xc3\x28" + b"\x00\x00\x00\x00"
    assert refused(frame) == "malformed Metadata v12 request: string field MetadataRequestTopic.name is not valid UTF-8"
    assert "RequestHeader.client_id is not valid UTF-8" in refused(struct.pack(">hhih", 3, 1, 1, 2) + b"\xff\xfe" + bytes(4))
    cls = request_class(ApiKey.METADATA, 12)
    assert check_request(frame, cls, cls.__header_schema__) is frame  # the walk alone leaves UTF-8 to kio
    with pytest.raises(MalformedRequest, match="not valid UTF-8"):
        check_request(frame, cls, cls.__header_schema__, check_utf8=True)


@pytest.mark.parametrize(("api_key", "version"), ALL_VERSIONS, ids=ALL_IDS)
def test_utf8_checking_walk_accepts_valid_requests(api_key: int, version: int) -> None:
    cls = request_class(api_key, version)
    frame = body(encode_request(3, "clïent", sample(cls)))
    assert check_request(frame, cls, cls.__header_schema__, check_utf8=True) is frame


def test_compact_strings_over_0x7fff_bytes_are_refused(kio_unreachable: None) -> None:
    name = b"n" * (MAX_STRING_LENGTH + 1)
    frame = header_v2(ApiKey.METADATA, 12) + b"\x02" + bytes(16) + encode_uvarint(len(name) + 1) + name + bytes(4)
    assert f"string field MetadataRequestTopic.name had invalid length {MAX_STRING_LENGTH + 1}" in refused(frame)


def test_longest_string_is_accepted() -> None:
    cls = request_class(ApiKey.METADATA, 12)
    topic = nested(cls, "MetadataRequestTopic")(topic_id=None, name="n" * MAX_STRING_LENGTH)
    request = make(cls, topics=(topic,), allow_auto_topic_creation=True, include_topic_authorized_operations=False)
    assert decode_request(body(encode_request(1, "c", request)))[1] == request


def test_trailing_bytes_are_ignored_as_kafka_does() -> None:
    request = sample(request_class(ApiKey.FETCH, 12))
    frame = body(encode_request(1, "c", request))
    assert decode_request(frame + b"\x00\xff\x13")[1] == request


# --------------------------------------------------------------------------- tagged fields

UNKNOWN = encode_uvarint(4242) + encode_uvarint(3) + b"abc"  # tag 4242, 3 bytes


def _metadata_v12() -> tuple[Any, bytes]:
    cls = request_class(ApiKey.METADATA, 12)
    topic = nested(cls, "MetadataRequestTopic")(topic_id=uuid.UUID(int=7), name="orders")
    request = make(cls, topics=(topic,), allow_auto_topic_creation=True, include_topic_authorized_operations=False)
    return request, body(encode_request(5, "client", request))


def test_unknown_tag_in_the_header_is_skipped() -> None:
    request, frame = _metadata_v12()
    at = 10 + len(b"client")
    assert frame[at] == 0
    tagged = frame[:at] + b"\x01" + UNKNOWN + frame[at + 1 :]
    header, decoded = decode_request(tagged)
    assert decoded == request
    assert (header.correlation_id, header.client_id) == (5, "client")


def test_unknown_tags_in_the_body_and_a_nested_struct_are_skipped() -> None:
    request, frame = _metadata_v12()
    # body tail: ... topic{uuid, name "orders", tags 00}, allow 01, include 00, tags 00
    topic_tags = frame.rindex(b"\x07orders") + 7
    assert frame[topic_tags:] == b"\x00\x01\x00\x00"
    two_unknown = b"\x02" + UNKNOWN + encode_uvarint(7) + b"\x00"
    tagged = frame[:topic_tags] + two_unknown + b"\x01\x00" + b"\x01" + UNKNOWN
    assert decode_request(tagged)[1] == request
    stripped = check_request(tagged, request_class(ApiKey.METADATA, 12), request_class(ApiKey.METADATA, 12).__header_schema__)
    assert stripped == frame


def test_unknown_tag_next_to_a_known_one() -> None:
    cls = request_class(ApiKey.FETCH, 12)
    request = sample(cls)
    assert request.cluster_id is not None  # the sample sets the tagged cluster_id (tag 0)
    frame = body(encode_request(1, "c", request))
    raw = request.cluster_id.encode()
    value = encode_uvarint(len(raw) + 1) + raw
    tail = b"\x01\x00" + encode_uvarint(len(value)) + value
    assert frame.endswith(tail)
    tagged = frame[: -len(tail)] + b"\x02" + UNKNOWN + tail[1:]
    assert decode_request(tagged)[1] == request


def test_unknown_tag_inside_a_known_tagged_struct() -> None:
    """Fetch v15 replica_state (tag 1) is a struct with tags of its own; its declared size shrinks too."""
    cls = request_class(ApiKey.FETCH, 15)
    state_cls = nested(cls, "ReplicaState")
    request = make(cls, **{**_values(sample(cls)), "cluster_id": None, "replica_state": state_cls(replica_id=3, replica_epoch=9)})
    frame = body(encode_request(1, "c", request))
    state = _encode(state_cls, request.replica_state)
    tail = b"\x01\x01" + bytes([len(state)]) + state
    assert frame.endswith(tail)
    inner = state[:-1] + b"\x01" + UNKNOWN
    tagged = frame[: -len(tail)] + b"\x01\x01" + bytes([len(inner)]) + inner
    assert decode_request(tagged)[1] == request
    stripped = check_request(tagged, cls, cls.__header_schema__)
    assert stripped == frame


def test_null_for_a_tagged_field_whose_default_is_null() -> None:
    """Fetch cluster_id is nullable and tagged: Kafka reads null there, kio cannot; it means absent."""
    cls = request_class(ApiKey.FETCH, 12)
    request = make(cls, **{**_values(sample(cls)), "cluster_id": None})
    frame = body(encode_request(1, "c", request))
    assert frame.endswith(b"\x00")
    assert decode_request(frame[:-1] + b"\x01\x00\x01\x00")[1] == request


def test_known_tag_must_take_its_declared_size(kio_unreachable: None) -> None:
    cls = request_class(ApiKey.FETCH, 12)
    frame = body(encode_request(1, "c", make(cls, **{**_values(sample(cls)), "cluster_id": None})))
    # cluster_id "ab" (3 bytes) declared as 5 bytes, then 2 more bytes
    message = refused(frame[:-1] + b"\x01\x00\x05\x03ab\x00\x00")
    assert "tagged field FetchRequest.cluster_id (tag 0) declared 5 bytes but its value takes 3" in message
    # declared size past the end of the frame
    assert "FetchRequest tagged field 9: needs 100 bytes" in refused(frame[:-1] + b"\x01\x09\x64ab")
    # a tag count no frame could hold
    assert "FetchRequest tagged fields: tried to read 1000 elements" in refused(frame[:-1] + encode_uvarint(1000) + b"\x09\x00")


# --------------------------------------------------------------------------- every advertised API and version


@pytest.mark.parametrize(("api_key", "version"), ALL_VERSIONS, ids=ALL_IDS)
def test_valid_requests_decode_identically(api_key: int, version: int) -> None:
    cls = request_class(api_key, version)
    for nulls in (False, True):
        request = sample(cls, nulls=nulls)
        frame = body(encode_request(77, "rdkafka", request))
        assert check_request(frame, cls, cls.__header_schema__) is frame  # nothing copied
        view = memoryview(frame)
        assert check_request(view, cls, cls.__header_schema__) is view
        header, decoded = decode_request(view)
        assert decoded == request
        assert (header.api_key, header.api_version, header.correlation_id, header.client_id) == (
            api_key, version, 77, "rdkafka"
        )
        # and exactly what kio alone makes of it
        _, size = entity_reader(cls.__header_schema__)(frame, 0)
        assert entity_reader(cls)(frame, size)[0] == decoded


def test_decode_response_is_not_guarded(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(*args: Any) -> Any:
        raise AssertionError("guard called for a response")

    monkeypatch.setattr(apis, "check_request", boom)
    cls = response_class(ApiKey.FIND_COORDINATOR, 0)
    response = make(cls, error_code=ErrorCode.none, node_id=1, host="h", port=9092, throttle_time=datetime.timedelta(0))
    buffer = io.BytesIO()
    entity_writer(cls.__header_schema__)(buffer, cls.__header_schema__(correlation_id=1))
    entity_writer(cls)(buffer, response)
    assert decode_response(ApiKey.FIND_COORDINATOR, 0, buffer.getvalue()) == response


def test_guard_raises_only_malformed_request() -> None:
    cls = request_class(ApiKey.PRODUCE, 9)
    for frame in (b"", b"\x00", bytes(8), b"\xff" * 40):
        with pytest.raises(MalformedRequest):
            check_request(frame, cls, cls.__header_schema__)


# --------------------------------------------------------------------------- ApiVersions client software


def _api_versions_frame(version: int, name: str, software_version: str) -> bytes:
    cls = request_class(ApiKey.API_VERSIONS, version)
    return body(encode_request(1, "c", make(cls, client_software_name=name, client_software_version=software_version)))


@pytest.mark.parametrize(
    ("name", "software_version", "valid"),
    [
        ("librdkafka", "2.16.1", True),
        ("apache-kafka-java", "3.9.0", True),
        ("confluent-kafka-python", "2.16.1-rdkafka-2.16.1", True),
        ("a", "1", True),
        ("kafka.python", "3.0.12", True),
        ("", "1.0", False),
        ("librdkafka", "", False),
        ("-librdkafka", "1.0", False),
        ("librdkafka-", "1.0", False),
        ("librdkafka", "1.0.", False),
        ("lib rdkafka", "1.0", False),
        ("librdkafka", "1.0+local", False),
        ("lib_rdkafka", "1.0", False),
        ("clïent", "1.0", False),
        ("librdkafka\n", "1.0", False),
    ],
)
@pytest.mark.parametrize("version", [3, 4])
async def test_api_versions_client_software_rules(version: int, name: str, software_version: str, valid: bool) -> None:
    from shoal.server.handlers.api_versions import handle_api_versions

    header, request = decode_request(_api_versions_frame(version, name, software_version))
    response = await handle_api_versions(None, header, request)
    if valid:
        assert response.error_code == ErrorCode.none
        assert {a.api_key for a in response.api_keys} == set(SUPPORTED_APIS)
    else:
        # Kafka: ApiVersionsRequest.getErrorResponse(INVALID_REQUEST), no api_keys.
        assert response.error_code == ErrorCode.invalid_request == 42
        assert response.api_keys == ()
    frame = apis.encode_response(header, response)
    assert decode_response(ApiKey.API_VERSIONS, version, frame[4:]) == response


@pytest.mark.parametrize("version", [0, 1, 2])
async def test_api_versions_before_v3_has_no_software_fields_to_check(version: int) -> None:
    from shoal.server.handlers.api_versions import handle_api_versions

    header, request = decode_request(body(encode_request(1, "c", make(request_class(ApiKey.API_VERSIONS, version)))))
    assert (await handle_api_versions(None, header, request)).error_code == ErrorCode.none


# --------------------------------------------------------------------------- sample requests


def _values(entity: Any) -> dict[str, Any]:
    return {f.name: getattr(entity, f.name) for f in fields(entity)}


def _encode(cls: type, entity: Any) -> bytes:
    buffer = io.BytesIO()
    entity_writer(cls)(buffer, entity)
    return buffer.getvalue()


_SAMPLE_VALUES: dict[str, Any] = {
    "bool": True,
    "int8": -3,
    "uint8": 200,
    "int16": 1234,
    "uint16": 54321,
    "int32": 70000,
    "uint32": 3_000_000_000,
    "int64": 1 << 40,
    "uint64": 1 << 63,
    "float64": 2.5,
    "uuid": uuid.UUID("12345678-1234-5678-1234-567812345678"),
    "timedelta_i32": datetime.timedelta(milliseconds=1500),
    "timedelta_i64": datetime.timedelta(milliseconds=86_400_000),
    "datetime_i64": datetime.datetime(2024, 1, 2, 3, 4, 5, tzinfo=datetime.UTC),
    "error_code": ErrorCode.none,
    "records": b"\x00\x01records",
    "bytes": b"\x00\xffbytes",
}


def sample(cls: type, nulls: bool = False) -> Any:
    """A request (or nested entity) with every field set: arrays of two, strings named after their
    field; with ``nulls``, every nullable field null and every tagged field at its default."""
    values: dict[str, Any] = {}
    for field in fields(cls):
        if get_field_tag(field) is not None and nulls and field.default is not MISSING:
            continue
        kind = classify_field(field)
        if isinstance(kind, EntityField):
            values[field.name] = None if nulls and is_optional(field) else sample(kind.type_, nulls)
        elif isinstance(kind, EntityTupleField):
            values[field.name] = None if nulls and guard._nullable_top(field) else (sample(kind.type_, nulls),) * 2
        elif isinstance(kind, PrimitiveField):
            kafka_type = get_schema_field_type(field)
            values[field.name] = None if nulls and is_optional(field) else _sample_value(kafka_type, field.name)
        else:
            kafka_type = get_schema_field_type(field)
            one = _sample_value(kafka_type, field.name)
            values[field.name] = None if nulls and guard._nullable_top(field) else (one, one)
    return cls(**values)


def _sample_value(kafka_type: str, name: str) -> Any:
    if kafka_type == "string":
        return f"{name}-ü"
    return _SAMPLE_VALUES[kafka_type]
