"""The API registry: which Kafka APIs and versions Shoal speaks, and their schemas.

Schemas come from kio (generated from Kafka's JSON message definitions); the few
that Kafka does not have yet (Metadata v14 of KIP-1163) live in ``schemas/``.
Only implemented APIs are advertised: librdkafka calls whatever is advertised.
"""

from __future__ import annotations

import io
import struct
from dataclasses import dataclass
from functools import cache
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer

from shoal.protocol.errors import ErrorCode, KafkaError
from shoal.protocol.guard import MalformedRequest, check_request
from shoal.protocol.produce_request import read_produce_request
from shoal.protocol.schemas import metadata_v14_request, metadata_v14_response


@dataclass(frozen=True, slots=True)
class ApiSpec:
    key: int
    name: str
    min_version: int
    max_version: int
    # What ApiVersions advertises as the minimum. Produce says 0 although only v3+
    # (magic 2) is accepted: librdkafka's compressed produce breaks otherwise (KAFKA-18659).
    advertised_min: int | None = None

    @property
    def advertised_min_version(self) -> int:
        return self.min_version if self.advertised_min is None else self.advertised_min


class ApiKey:
    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    DELETE_RECORDS = 21
    INIT_PRODUCER_ID = 22
    OFFSET_FOR_LEADER_EPOCH = 23
    ADD_PARTITIONS_TO_TXN = 24
    ADD_OFFSETS_TO_TXN = 25
    END_TXN = 26
    WRITE_TXN_MARKERS = 27
    TXN_OFFSET_COMMIT = 28
    DESCRIBE_CONFIGS = 32
    ALTER_REPLICA_LOG_DIRS = 34
    DESCRIBE_LOG_DIRS = 35
    ALTER_CONFIGS = 33
    CREATE_PARTITIONS = 37
    DELETE_GROUPS = 42
    ELECT_LEADERS = 43
    ALTER_PARTITION_REASSIGNMENTS = 45
    LIST_PARTITION_REASSIGNMENTS = 46
    INCREMENTAL_ALTER_CONFIGS = 44
    OFFSET_DELETE = 47
    DESCRIBE_CLUSTER = 60
    DESCRIBE_PRODUCERS = 61
    DESCRIBE_TRANSACTIONS = 65
    LIST_TRANSACTIONS = 66
    DESCRIBE_TOPIC_PARTITIONS = 75


SUPPORTED_APIS: dict[int, ApiSpec] = {
    spec.key: spec
    for spec in [
        ApiSpec(ApiKey.PRODUCE, "Produce", 3, 11, advertised_min=0),
        ApiSpec(ApiKey.FETCH, "Fetch", 4, 16),
        ApiSpec(ApiKey.LIST_OFFSETS, "ListOffsets", 1, 10),
        ApiSpec(ApiKey.METADATA, "Metadata", 0, 14),
        # Kafka 4 removed OffsetCommit v0-1 and OffsetFetch v0 (KIP-896); v10 of both name topics by id.
        ApiSpec(ApiKey.OFFSET_COMMIT, "OffsetCommit", 2, 10),
        ApiSpec(ApiKey.OFFSET_FETCH, "OffsetFetch", 1, 10),
        ApiSpec(ApiKey.FIND_COORDINATOR, "FindCoordinator", 0, 6),
        ApiSpec(ApiKey.JOIN_GROUP, "JoinGroup", 0, 9),
        ApiSpec(ApiKey.HEARTBEAT, "Heartbeat", 0, 4),
        ApiSpec(ApiKey.LEAVE_GROUP, "LeaveGroup", 0, 5),
        ApiSpec(ApiKey.SYNC_GROUP, "SyncGroup", 0, 5),
        ApiSpec(ApiKey.DESCRIBE_GROUPS, "DescribeGroups", 0, 6),
        ApiSpec(ApiKey.LIST_GROUPS, "ListGroups", 0, 5),
        ApiSpec(ApiKey.API_VERSIONS, "ApiVersions", 0, 4),
        ApiSpec(ApiKey.CREATE_TOPICS, "CreateTopics", 2, 7),
        ApiSpec(ApiKey.DELETE_TOPICS, "DeleteTopics", 1, 6),
        ApiSpec(ApiKey.DELETE_RECORDS, "DeleteRecords", 0, 2),
        ApiSpec(ApiKey.INIT_PRODUCER_ID, "InitProducerId", 0, 5),
        # Kafka 4 removed v0-1 (KIP-896).
        ApiSpec(ApiKey.OFFSET_FOR_LEADER_EPOCH, "OffsetForLeaderEpoch", 2, 4),
        # Transactions (KIP-98). v4+ of AddPartitionsToTxn is the brokers' batched form (KIP-890's
        # verify_only); v5 of it and of EndTxn come with transaction version 2, which Shoal does
        # not finalize, so clients run versions 0-1 with them.
        ApiSpec(ApiKey.ADD_PARTITIONS_TO_TXN, "AddPartitionsToTxn", 0, 5),
        ApiSpec(ApiKey.ADD_OFFSETS_TO_TXN, "AddOffsetsToTxn", 0, 4),
        ApiSpec(ApiKey.END_TXN, "EndTxn", 0, 5),
        # Broker to broker (the transaction coordinator); Kafka 4 removed v0 (KIP-896), v2 adds
        # the transaction version.
        ApiSpec(ApiKey.WRITE_TXN_MARKERS, "WriteTxnMarkers", 1, 2),
        ApiSpec(ApiKey.TXN_OFFSET_COMMIT, "TxnOffsetCommit", 0, 5),
        ApiSpec(ApiKey.DESCRIBE_CONFIGS, "DescribeConfigs", 1, 4),
        ApiSpec(ApiKey.ALTER_REPLICA_LOG_DIRS, "AlterReplicaLogDirs", 1, 2),
        ApiSpec(ApiKey.DESCRIBE_LOG_DIRS, "DescribeLogDirs", 1, 4),
        ApiSpec(ApiKey.ALTER_CONFIGS, "AlterConfigs", 0, 2),
        ApiSpec(ApiKey.CREATE_PARTITIONS, "CreatePartitions", 0, 3),
        ApiSpec(ApiKey.DELETE_GROUPS, "DeleteGroups", 0, 2),
        ApiSpec(ApiKey.ELECT_LEADERS, "ElectLeaders", 0, 2),
        ApiSpec(ApiKey.ALTER_PARTITION_REASSIGNMENTS, "AlterPartitionReassignments", 0, 1),
        ApiSpec(ApiKey.LIST_PARTITION_REASSIGNMENTS, "ListPartitionReassignments", 0, 0),
        ApiSpec(ApiKey.INCREMENTAL_ALTER_CONFIGS, "IncrementalAlterConfigs", 0, 1),
        ApiSpec(ApiKey.OFFSET_DELETE, "OffsetDelete", 0, 0),
        ApiSpec(ApiKey.DESCRIBE_CLUSTER, "DescribeCluster", 0, 2),
        ApiSpec(ApiKey.DESCRIBE_PRODUCERS, "DescribeProducers", 0, 0),
        ApiSpec(ApiKey.DESCRIBE_TRANSACTIONS, "DescribeTransactions", 0, 0),
        ApiSpec(ApiKey.LIST_TRANSACTIONS, "ListTransactions", 0, 2),
        ApiSpec(ApiKey.DESCRIBE_TOPIC_PARTITIONS, "DescribeTopicPartitions", 0, 0),
    ]
}

_OWN_SCHEMAS: dict[tuple[int, int], tuple[type, type]] = {
    (ApiKey.METADATA, 14): (metadata_v14_request.MetadataRequest, metadata_v14_response.MetadataResponse),
}


@cache
def request_class(api_key: int, version: int) -> type:
    own = _OWN_SCHEMAS.get((api_key, version))
    return own[0] if own else load_request_schema(api_key, version)


@cache
def response_class(api_key: int, version: int) -> type:
    own = _OWN_SCHEMAS.get((api_key, version))
    return own[1] if own else load_response_schema(api_key, version)


@cache
def _reader(cls: type) -> Any:
    return entity_reader(cls)


@cache
def _writer(cls: type) -> Any:
    return entity_writer(cls)


@dataclass(slots=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    # The client's address as Kafka prints it ("/127.0.0.1"); group members report it in DescribeGroups.
    client_host: str = ""


class UnsupportedVersion(Exception):
    """A request for an API version we do not serve; ApiVersions answers it specially."""

    def __init__(self, header: RequestHeader) -> None:
        super().__init__(f"api {header.api_key} version {header.api_version} is not supported")
        self.header = header


_HEADER_PREFIX = struct.Struct(">hhi")


def peek_header(frame: bytes | memoryview) -> RequestHeader:
    """Read api key, version and correlation id without knowing the schema (for error replies)."""
    if len(frame) < _HEADER_PREFIX.size:
        raise KafkaError(ErrorCode.invalid_request, f"request frame of {len(frame)} bytes is too short")
    api_key, api_version, correlation_id = _HEADER_PREFIX.unpack_from(frame, 0)
    return RequestHeader(api_key, api_version, correlation_id, None)


def decode_request(frame: bytes | memoryview) -> tuple[RequestHeader, Any]:
    """Decode a request frame (without its length prefix) into header and kio request object.

    Raises UnsupportedVersion for a known API at a version we do not serve, and
    KafkaError(INVALID_REQUEST) for unknown APIs and malformed bytes.
    """
    peeked = peek_header(frame)
    spec = SUPPORTED_APIS.get(peeked.api_key)
    if spec is None:
        raise KafkaError(ErrorCode.invalid_request, f"unsupported api key {peeked.api_key}")
    if not spec.min_version <= peeked.api_version <= spec.max_version:
        raise UnsupportedVersion(peeked)
    cls = request_class(peeked.api_key, peeked.api_version)
    try:
        # kio trusts the counts and lengths in the frame (and aborts the process on an absurd
        # one), lets null through where the schema has none and raises on unknown tags: the
        # guard checks the frame first, and drops the tagged fields kio cannot read.
        frame = check_request(frame, cls, cls.__header_schema__)
    except MalformedRequest as exc:
        raise KafkaError(
            ErrorCode.invalid_request, f"malformed {spec.name} v{peeked.api_version} request: {exc.message}"
        ) from None
    try:
        kio_header, header_size = _reader(cls.__header_schema__)(frame, 0)
        if peeked.api_key == ApiKey.PRODUCE and isinstance(frame, memoryview):
            body, _ = read_produce_request(frame, header_size, cls)  # records as views, not copies
        else:
            body, _ = _reader(cls)(frame, header_size)
    except Exception as exc:  # kio raises a variety of errors on malformed input
        detail = f"{exc.__class__.__name__}: {exc}"
        try:  # the guard leaves UTF-8 to kio; asked to check it too, it names the field
            check_request(frame, cls, cls.__header_schema__, check_utf8=True)
        except MalformedRequest as refused:
            detail = refused.message
        raise KafkaError(
            ErrorCode.invalid_request, f"malformed {spec.name} v{peeked.api_version} request: {detail}"
        ) from None
    return RequestHeader(peeked.api_key, peeked.api_version, peeked.correlation_id, kio_header.client_id), body


def encode_response(header: RequestHeader, response: Any) -> bytes:
    """Encode a response with its header and 4-byte size prefix."""
    buffer = io.BytesIO()
    buffer.write(b"\0\0\0\0")
    header_cls = response.__header_schema__
    _writer(header_cls)(buffer, header_cls(correlation_id=header.correlation_id))
    _writer(type(response))(buffer, response)
    data = buffer.getbuffer()
    struct.pack_into(">i", data, 0, len(data) - 4)
    return bytes(data)


def encode_request(correlation_id: int, client_id: str | None, request: Any) -> bytes:
    """Encode a request frame (used by tools and tests that speak to brokers directly)."""
    buffer = io.BytesIO()
    buffer.write(b"\0\0\0\0")
    header_cls = request.__header_schema__
    header = header_cls(
        request_api_key=request.__api_key__,
        request_api_version=request.__version__,
        correlation_id=correlation_id,
        client_id=client_id,
    )
    _writer(header_cls)(buffer, header)
    _writer(type(request))(buffer, request)
    data = buffer.getbuffer()
    struct.pack_into(">i", data, 0, len(data) - 4)
    return bytes(data)


def decode_response(api_key: int, version: int, frame: bytes | memoryview) -> Any:
    """Decode a response frame (without size prefix) of the given API version."""
    cls = response_class(api_key, version)
    _, header_size = _reader(cls.__header_schema__)(frame, 0)
    body, _ = _reader(cls)(frame, header_size)
    return body
