"""The API registry and frame codec: request/response round trips, version checks, bad input."""

from __future__ import annotations

import datetime
import struct
import uuid
from typing import Any

import pytest

from shoal.protocol.apis import (
    SUPPORTED_APIS,
    ApiKey,
    RequestHeader,
    UnsupportedVersion,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    request_class,
    response_class,
)
from shoal.protocol.build import has_field, make, nested
from shoal.protocol.errors import ErrorCode, KafkaError
from shoal.protocol.schemas import metadata_v14_request, metadata_v14_response
from shoal.records.codec import build_batch
from shoal.server.handlers.api_versions import handle_api_versions, unsupported_version_response

TOPIC_ID = uuid.UUID("12345678-1234-5678-1234-567812345678")
MS = datetime.timedelta(milliseconds=1)
RECORDS = build_batch([(b"k", b"v", (), 1_000)])


def body(frame: bytes) -> bytes:
    """The frame without its 4-byte size prefix, after checking the prefix."""
    assert struct.unpack_from(">i", frame)[0] == len(frame) - 4
    return frame[4:]


# --------------------------------------------------------------------------- requests


def metadata_request(version: int) -> Any:
    cls = request_class(ApiKey.METADATA, version)
    topic = make(nested(cls, "MetadataRequestTopic"), name="orders", topic_id=TOPIC_ID)
    return make(
        cls,
        topics=(topic,),
        allow_auto_topic_creation=False,
        include_cluster_authorized_operations=False,
        include_topic_authorized_operations=True,
        rack_id="az-1",
    )


def produce_request(version: int) -> Any:
    cls = request_class(ApiKey.PRODUCE, version)
    partition = make(nested(cls, "PartitionProduceData"), index=2, records=RECORDS)
    topic = make(nested(cls, "TopicProduceData"), name="orders", partition_data=(partition,))
    return make(cls, transactional_id=None, acks=-1, timeout=1500 * MS, topic_data=(topic,))


def fetch_request(version: int) -> Any:
    cls = request_class(ApiKey.FETCH, version)
    partition = make(
        nested(cls, "FetchPartition"),
        partition=0,
        current_leader_epoch=-1,
        fetch_offset=42,
        last_fetched_epoch=-1,
        log_start_offset=-1,
        partition_max_bytes=1 << 20,
    )
    topic = make(nested(cls, "FetchTopic"), topic="orders", topic_id=TOPIC_ID, partitions=(partition,))
    return make(
        cls,
        max_wait=500 * MS,
        min_bytes=1,
        max_bytes=50 << 20,
        topics=(topic,),
        forgotten_topics_data=(),
        rack_id="az-1",
    )


def create_topics_request(version: int) -> Any:
    cls = request_class(ApiKey.CREATE_TOPICS, version)
    config = make(nested(cls, "CreatableTopicConfig"), name="diskless.enable", value="true")
    topic = make(
        nested(cls, "CreatableTopic"), name="orders", num_partitions=3, replication_factor=1,
        assignments=(), configs=(config,),
    )
    return make(cls, topics=(topic,), timeout=30_000 * MS, validate_only=True)


def api_versions_request(version: int) -> Any:
    return make(
        request_class(ApiKey.API_VERSIONS, version), client_software_name="shoal-tests", client_software_version="1.0"
    )


def init_producer_id_request(version: int) -> Any:
    return make(
        request_class(ApiKey.INIT_PRODUCER_ID, version),
        transactional_id=None,
        transaction_timeout=60_000 * MS,
        producer_id=-1,
        producer_epoch=-1,
    )


REQUESTS = [
    (metadata_request, ApiKey.METADATA, [0, 1, 9, 12, 13, 14]),
    (produce_request, ApiKey.PRODUCE, [3, 9, 11]),
    (fetch_request, ApiKey.FETCH, [4, 12, 16]),
    (create_topics_request, ApiKey.CREATE_TOPICS, [2, 5, 7]),
    (api_versions_request, ApiKey.API_VERSIONS, [0, 3, 4]),
    (init_producer_id_request, ApiKey.INIT_PRODUCER_ID, [0, 4, 5]),
]


@pytest.mark.parametrize(
    ("build", "api_key", "version"),
    [(build, key, v) for build, key, versions in REQUESTS for v in versions],
    ids=[f"{build.__name__}-v{v}" for build, _, versions in REQUESTS for v in versions],
)
@pytest.mark.parametrize("client_id", ["rdkafka", None])
def test_request_round_trip(build, api_key: int, version: int, client_id: str | None) -> None:
    request = build(version)
    header, decoded = decode_request(body(encode_request(1234, client_id, request)))
    assert (header.api_key, header.api_version, header.correlation_id) == (api_key, version, 1234)
    assert header.client_id == client_id
    assert type(decoded) is type(request)
    assert decoded == request


def test_metadata_v14_comes_from_our_schemas() -> None:
    assert request_class(ApiKey.METADATA, 14) is metadata_v14_request.MetadataRequest
    assert response_class(ApiKey.METADATA, 14) is metadata_v14_response.MetadataResponse
    assert request_class(ApiKey.METADATA, 13).__module__.startswith("kio.")
    request = metadata_request(14)
    assert request.rack_id == "az-1" and request.topics[0].topic_id == TOPIC_ID
    _, decoded = decode_request(body(encode_request(1, "c", request)))
    assert decoded.rack_id == "az-1" and decoded.topics[0].name == "orders"


def test_metadata_v14_request_without_topics_means_all() -> None:
    request = metadata_v14_request.MetadataRequest(topics=None, include_topic_authorized_operations=False)
    _, decoded = decode_request(body(encode_request(5, None, request)))
    assert decoded.topics is None and decoded.rack_id == "" and decoded.allow_auto_topic_creation


# --------------------------------------------------------------------------- responses


def metadata_response(version: int) -> Any:
    cls = response_class(ApiKey.METADATA, version)
    broker = make(nested(cls, "MetadataResponseBroker"), node_id=1, host="broker-1", port=9092, rack="az-1")
    partition = make(
        nested(cls, "MetadataResponsePartition"),
        error_code=ErrorCode.none,
        partition_index=0,
        leader_id=1,
        leader_epoch=3,
        replica_nodes=(1, 2),
        isr_nodes=(1, 2),
        offline_replicas=(),
        preferred_produce_brokers=(2, 1),
    )
    topic = make(
        nested(cls, "MetadataResponseTopic"),
        error_code=ErrorCode.none,
        name="orders",
        topic_id=TOPIC_ID,
        is_internal=False,
        partitions=(partition,),
        is_diskless=True,
    )
    return make(
        cls,
        throttle_time=datetime.timedelta(0),
        brokers=(broker,),
        cluster_id="cluster-1",
        controller_id=1,
        topics=(topic,),
        error_code=ErrorCode.none,
    )


def produce_response(version: int) -> Any:
    cls = response_class(ApiKey.PRODUCE, version)
    partition = make(
        nested(cls, "PartitionProduceResponse"),
        index=2,
        error_code=ErrorCode.none,
        base_offset=77,
        log_append_time=None,
        log_start_offset=0,
        record_errors=(),
        error_message=None,
    )
    topic = make(nested(cls, "TopicProduceResponse"), name="orders", partition_responses=(partition,))
    return make(cls, responses=(topic,), throttle_time=datetime.timedelta(0))


def api_versions_response(version: int) -> Any:
    cls = response_class(ApiKey.API_VERSIONS, version)
    api = make(nested(cls, "ApiVersion"), api_key=3, min_version=0, max_version=14)
    return make(cls, error_code=ErrorCode.none, api_keys=(api,), throttle_time=datetime.timedelta(0))


RESPONSES = [
    (metadata_response, ApiKey.METADATA, [0, 1, 9, 13, 14]),
    (produce_response, ApiKey.PRODUCE, [3, 9, 11]),
    (api_versions_response, ApiKey.API_VERSIONS, [0, 3, 4]),
]


@pytest.mark.parametrize(
    ("build", "api_key", "version"),
    [(build, key, v) for build, key, versions in RESPONSES for v in versions],
    ids=[f"{build.__name__}-v{v}" for build, _, versions in RESPONSES for v in versions],
)
def test_response_round_trip(build, api_key: int, version: int) -> None:
    response = build(version)
    frame = encode_response(RequestHeader(api_key, version, 987654, "client"), response)
    assert struct.unpack_from(">i", frame, 4)[0] == 987654  # correlation id leads every response header
    assert decode_response(api_key, version, body(frame)) == response


def test_metadata_v14_response_carries_the_diskless_fields() -> None:
    frame = encode_response(RequestHeader(ApiKey.METADATA, 14, 1, None), metadata_response(14))
    decoded = decode_response(ApiKey.METADATA, 14, body(frame))
    topic = decoded.topics[0]
    assert topic.is_diskless is True
    assert topic.partitions[0].preferred_produce_brokers == (2, 1)
    assert decoded.brokers[0].rack == "az-1" and decoded.cluster_id == "cluster-1"
    # v13 has neither field; v14 is v13 plus them on the wire.
    v13 = encode_response(RequestHeader(ApiKey.METADATA, 13, 1, None), metadata_response(13))
    assert len(frame) - len(v13) == 1 + (1 + 2 * 4)  # is_diskless (bool) + a compact array of two int32
    assert not has_field(nested(response_class(ApiKey.METADATA, 13), "MetadataResponseTopic"), "is_diskless")


# --------------------------------------------------------------------------- errors


def frame_prefix(api_key: int, version: int, correlation_id: int = 99) -> bytes:
    return struct.pack(">hhi", api_key, version, correlation_id)


@pytest.mark.parametrize(
    ("api_key", "version"),
    [
        (ApiKey.PRODUCE, 2),  # magic 0/1 produce
        (ApiKey.PRODUCE, 12),  # newer than we serve (kio knows it)
        (ApiKey.METADATA, 15),
        (ApiKey.FETCH, 3),
        (ApiKey.FETCH, 17),
        (ApiKey.API_VERSIONS, 5),
        (ApiKey.CREATE_TOPICS, 1),
        (ApiKey.DESCRIBE_TOPIC_PARTITIONS, 1),
        (ApiKey.METADATA, -1),
    ],
)
def test_out_of_range_versions_raise_unsupported_version(api_key: int, version: int) -> None:
    with pytest.raises(UnsupportedVersion) as info:
        decode_request(frame_prefix(api_key, version, 4242) + b"\x00\x00")
    header = info.value.header
    assert (header.api_key, header.api_version, header.correlation_id) == (api_key, version, 4242)


@pytest.mark.parametrize("api_key", [4, 5, 38, 9999, -1])  # LeaderAndIsr, StopReplica, CreateDelegationToken...
def test_unknown_api_keys_are_invalid_requests(api_key: int) -> None:
    with pytest.raises(KafkaError) as info:
        decode_request(frame_prefix(api_key, 0) + b"\x00\x00")
    assert info.value.code == ErrorCode.invalid_request
    assert str(api_key) in info.value.message


def test_too_short_frame_is_an_invalid_request() -> None:
    for frame in (b"", b"\x00\x03\x00", frame_prefix(3, 1)[:7]):
        with pytest.raises(KafkaError) as info:
            decode_request(frame)
        assert info.value.code == ErrorCode.invalid_request


@pytest.mark.parametrize(
    "frame",
    [
        body(encode_request(1, "c", produce_request(9)))[:-20],  # truncated in the records
        body(encode_request(1, "c", metadata_request(12)))[:14],  # truncated in the header
        frame_prefix(ApiKey.METADATA, 9) + b"\x00\x01c\x00" + b"\xff" * 6,  # absurd array length
        frame_prefix(ApiKey.CREATE_TOPICS, 5) + b"\x00\x00\x00" + bytes(range(200, 256)),
    ],
    ids=["truncated-produce", "truncated-header", "absurd-length", "garbage"],
)
def test_malformed_bytes_are_invalid_requests(frame: bytes) -> None:
    with pytest.raises(KafkaError) as info:
        decode_request(frame)
    assert info.value.code == ErrorCode.invalid_request
    assert "malformed" in info.value.message


# --------------------------------------------------------------------------- ApiVersions


def advertised() -> dict[int, tuple[int, int]]:
    return {spec.key: (spec.advertised_min_version, spec.max_version) for spec in SUPPORTED_APIS.values()}


def test_unsupported_api_versions_version_gets_a_v0_answer() -> None:
    header = RequestHeader(ApiKey.API_VERSIONS, 9, 31337, "new-client")
    frame = unsupported_version_response(header)
    assert struct.unpack_from(">i", frame, 4)[0] == 31337
    response = decode_response(ApiKey.API_VERSIONS, 0, body(frame))
    assert response.error_code == ErrorCode.unsupported_version == 35
    assert {a.api_key: (a.min_version, a.max_version) for a in response.api_keys} == advertised()
    assert advertised()[ApiKey.PRODUCE] == (0, 11)  # KAFKA-18659: Produce advertised from 0


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
async def test_api_versions_handler_advertises_our_ranges(version: int) -> None:
    header, request = decode_request(body(encode_request(1, "c", api_versions_request(version))))
    response = await handle_api_versions(None, header, request)  # the handler needs no broker state
    assert response.error_code == ErrorCode.none
    assert {a.api_key: (a.min_version, a.max_version) for a in response.api_keys} == advertised()
    frame = encode_response(header, response)
    assert decode_response(ApiKey.API_VERSIONS, version, body(frame)) == response


# --------------------------------------------------------------------------- build.make


def test_make_drops_fields_the_version_lacks() -> None:
    v0 = response_class(ApiKey.METADATA, 0)
    everything = dict(
        throttle_time=datetime.timedelta(0), brokers=(), cluster_id="c", controller_id=1, topics=(), error_code=0
    )
    with pytest.raises(TypeError):
        v0(**everything)
    response = make(v0, **everything)
    assert (response.brokers, response.topics) == ((), ())
    assert not hasattr(response, "cluster_id") and not has_field(v0, "cluster_id")
    v14 = make(response_class(ApiKey.METADATA, 14), **everything)
    assert (v14.cluster_id, v14.controller_id) == ("c", 1)
    assert has_field(type(v14), "cluster_id")


def test_make_on_nested_classes_and_missing_ones() -> None:
    v0, v14 = response_class(ApiKey.METADATA, 0), response_class(ApiKey.METADATA, 14)
    assert nested(v14, "MetadataResponsePartition") is metadata_v14_response.MetadataResponsePartition
    assert nested(v0, "NoSuchEntity") is None
    values = dict(error_code=ErrorCode.none, partition_index=0, leader_id=1, leader_epoch=5, preferred_produce_brokers=(1,))
    old = make(nested(v0, "MetadataResponsePartition"), **values)
    assert not hasattr(old, "leader_epoch") and not hasattr(old, "preferred_produce_brokers")
    new = make(nested(v14, "MetadataResponsePartition"), **values)
    assert (new.leader_epoch, new.preferred_produce_brokers) == (5, (1,))
    with pytest.raises(TypeError):  # required fields are still required
        make(nested(v14, "MetadataResponsePartition"), partition_index=0)
