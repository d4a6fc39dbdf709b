"""Bad input gets Kafka's error code (or a closed connection), and the broker keeps serving.

One broker serves the whole module, so each test also proves the broker survived the ones
before it; after each bad request a normal client must still produce and consume.
"""

from __future__ import annotations

import datetime
import random
import struct
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import NewTopic
from kio.schema.api_versions.v0.request import ApiVersionsRequest as ApiVersionsRequestV0
from kio.schema.api_versions.v0.response import ApiVersionsResponse as ApiVersionsResponseV0
from kio.schema.api_versions.v3.request import ApiVersionsRequest as ApiVersionsRequestV3
from kio.schema.api_versions.v3.response import ApiVersionsResponse as ApiVersionsResponseV3
from kio.schema.create_topics.v5.request import CreatableTopic, CreatableTopicConfig, CreateTopicsRequest
from kio.schema.create_topics.v5.response import CreateTopicsResponse
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.fetch.v12.response import FetchResponse
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData
from kio.schema.produce.v9.response import ProduceResponse
from kio.static.primitive import i8, i16, i32, i64

from tests.support.broker import BrokerProcess
from tests.support.kafka_clients import admin_client, confluent_consumer, create_diskless_topic
from tests.support.record_batches import build_record_batch, corrupt_batch
from tests.support.wire import WireClient

SOCKET_REQUEST_MAX = 1_048_576
MESSAGE_MAX = 10_000
OVERRIDES = {
    "socket.request.max.bytes": SOCKET_REQUEST_MAX,
    "message.max.bytes": MESSAGE_MAX,
    "auto.create.topics.enable": "false",
}


@pytest.fixture(scope="module")
def module_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(Path(tmp_path_factory.mktemp("bad-input")) / "broker", overrides=OVERRIDES)
    b.start()
    try:
        yield b
    finally:
        b.close()


@pytest.fixture
def bad_broker(module_broker: BrokerProcess, request: pytest.FixtureRequest) -> Iterator[BrokerProcess]:
    """The shared broker, checked alive after every test (and restarted for the next if it died)."""
    if not module_broker.is_running():
        module_broker.start()
    yield module_broker
    if not module_broker.is_running():
        tail = module_broker.log_tail(80)
        pytest.fail(
            f"broker died during {request.node.name} (exit {module_broker.returncode})\n{tail}", pytrace=False
        )
    failed = getattr(getattr(request.node, "rep_call", None), "failed", False)
    if failed:
        print(module_broker.log_tail(60))


@pytest.fixture(scope="module")
def good_topic(module_broker: BrokerProcess) -> str:
    name = f"bad-input-good-{uuid.uuid4().hex[:6]}"
    create_diskless_topic(module_broker.bootstrap, name, partitions=2)
    return name


def assert_client_works(broker: BrokerProcess, topic: str) -> None:
    """A real client still produces and reads back one record on the same broker."""
    marker = f"still-alive-{uuid.uuid4().hex}".encode()
    delivered: list[Any] = []
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 0})
    producer.produce(
        topic, value=marker, partition=0, on_delivery=lambda err, msg: delivered.append((err, msg))
    )
    assert producer.flush(30) == 0, f"record not delivered after bad input\n{broker.log_tail(40)}"
    err, msg = delivered[0]
    assert err is None, f"delivery failed after bad input: {err}"
    consumer = confluent_consumer(broker.bootstrap)
    try:
        consumer.assign([TopicPartition(topic, 0, msg.offset())])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            m = consumer.poll(0.5)
            if m is not None and not m.error() and m.value() == marker:
                return
        pytest.fail(f"record produced at offset {msg.offset()} not fetched back after bad input")
    finally:
        consumer.close()


def produce_raw(client: WireClient, topic: str, partitions: dict[int, bytes]) -> ProduceResponse:
    request = ProduceRequest(
        transactional_id=None,
        acks=i16(-1),
        timeout=datetime.timedelta(seconds=30),
        topic_data=(
            TopicProduceData(
                name=topic,
                partition_data=tuple(
                    PartitionProduceData(index=i32(p), records=b) for p, b in partitions.items()
                ),
            ),
        ),
    )
    return client.request(request, ProduceResponse)


def partition_results(response: Any, topic: str) -> dict[int, Any]:
    out = {}
    for t in response.responses:
        assert t.name == topic, f"response for unexpected topic {t.name}"
        for p in t.partition_responses:
            out[int(p.index)] = p
    return out


# -- framing -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "payload",
    [
        pytest.param(b"\xff\xff", id="shorter-than-a-header"),
        pytest.param(random.Random(1).randbytes(64), id="random-bytes"),
        pytest.param(struct.pack(">hhi", 999, 0, 1) + struct.pack(">h", 1) + b"x", id="unknown-api-key"),
        pytest.param(
            struct.pack(">hhi", 3, 12, 7) + struct.pack(">h", 200) + b"short", id="truncated-client-id"
        ),
    ],
)
def test_garbage_frame_closes_connection(bad_broker: BrokerProcess, good_topic: str, payload: bytes) -> None:
    with WireClient(bad_broker.port) as client:
        client.send_frame(payload)
        assert client.closed_by_peer(15), "broker kept the connection open after a garbage frame"
    assert_client_works(bad_broker, good_topic)


@pytest.mark.parametrize(
    "size", [SOCKET_REQUEST_MAX + 1, 2**31 - 1, -1], ids=["limit-plus-one", "int32-max", "negative"]
)
def test_oversized_frame_closes_connection(bad_broker: BrokerProcess, good_topic: str, size: int) -> None:
    """A size prefix over socket.request.max.bytes is refused before any allocation: connection closed."""
    with WireClient(bad_broker.port) as client:
        client.send_raw(struct.pack(">i", size) + b"\x00" * 64)
        assert client.closed_by_peer(15), f"broker kept the connection open after a {size}-byte frame header"
    assert_client_works(bad_broker, good_topic)


# -- produce / fetch ---------------------------------------------------------------------------


def test_produce_bad_crc_is_corrupt_message(bad_broker: BrokerProcess, good_topic: str) -> None:
    """A batch whose CRC doesn't match gets CORRUPT_MESSAGE for its partition only."""
    good = build_record_batch([(b"k", b"good-record")])
    bad = corrupt_batch(build_record_batch([(b"k", b"bad-record")]))
    consumer = confluent_consumer(bad_broker.bootstrap)
    try:
        high_before = consumer.get_watermark_offsets(TopicPartition(good_topic, 1), timeout=10, cached=False)[
            1
        ]
    finally:
        consumer.close()
    with WireClient(bad_broker.port) as client:
        results = partition_results(produce_raw(client, good_topic, {0: good, 1: bad}), good_topic)
    assert int(results[1].error_code) == 2, f"bad CRC answered {results[1]}"
    assert int(results[0].error_code) == 0, f"the good batch in the same request failed: {results[0]}"
    consumer = confluent_consumer(bad_broker.bootstrap)
    try:
        high_after = consumer.get_watermark_offsets(TopicPartition(good_topic, 1), timeout=10, cached=False)[
            1
        ]
    finally:
        consumer.close()
    assert high_after == high_before, "the corrupt batch was appended"
    assert_client_works(bad_broker, good_topic)


def test_produce_oversized_batch_is_message_too_large(bad_broker: BrokerProcess, good_topic: str) -> None:
    """A batch over message.max.bytes gets MESSAGE_TOO_LARGE, raw and through librdkafka."""
    big = build_record_batch([(b"k", b"x" * (MESSAGE_MAX * 2))])
    with WireClient(bad_broker.port) as client:
        results = partition_results(produce_raw(client, good_topic, {0: big}), good_topic)
    assert int(results[0].error_code) == 10, f"oversized batch answered {results[0]}"

    errors: list[Any] = []
    producer = Producer({"bootstrap.servers": bad_broker.bootstrap, "linger.ms": 0})
    producer.produce(
        good_topic,
        value=b"y" * (MESSAGE_MAX * 2),
        partition=1,
        on_delivery=lambda err, msg: errors.append(err),
    )
    assert producer.flush(30) == 0
    assert errors and errors[0] is not None and errors[0].code() == KafkaError.MSG_SIZE_TOO_LARGE, errors
    assert_client_works(bad_broker, good_topic)


@pytest.mark.parametrize("where", ["unknown-topic", "unknown-partition"])
def test_produce_and_fetch_unknown_topic_or_partition(
    bad_broker: BrokerProcess, good_topic: str, where: str
) -> None:
    topic, partition = (
        (f"no-such-topic-{uuid.uuid4().hex[:6]}", 0) if where == "unknown-topic" else (good_topic, 99)
    )
    with WireClient(bad_broker.port) as client:
        results = partition_results(
            produce_raw(client, topic, {partition: build_record_batch([(None, b"v")])}), topic
        )
        assert int(results[partition].error_code) == 3, f"produce to {where} answered {results[partition]}"

        fetch = FetchRequest(
            max_wait=datetime.timedelta(milliseconds=100),
            min_bytes=i32(1),
            isolation_level=i8(0),
            topics=(
                FetchTopic(
                    topic=topic,
                    partitions=(
                        FetchPartition(
                            partition=i32(partition), fetch_offset=i64(0), partition_max_bytes=i32(1 << 20)
                        ),
                    ),
                ),
            ),
            forgotten_topics_data=(),
        )
        response = client.request(fetch, FetchResponse)
    parts = [p for t in response.responses for p in t.partitions]
    assert parts and all(int(p.error_code) == 3 for p in parts), f"fetch from {where} answered {response}"
    admin = admin_client(bad_broker.bootstrap)
    assert topic == good_topic or topic not in admin.list_topics(timeout=10).topics, (
        "unknown topic got created"
    )
    assert_client_works(bad_broker, good_topic)


# -- CreateTopics ------------------------------------------------------------------------------

INVALID_CONFIGS = {
    "retention-ms-not-a-number": {"diskless.enable": "true", "retention.ms": "abc"},
    "unknown-config": {"diskless.enable": "true", "no.such.config": "1"},
    "diskless-enable-maybe": {"diskless.enable": "maybe"},
    "segment-bytes-too-small": {"segment.bytes": "1"},
    "cleanup-policy-unknown": {"cleanup.policy": "shred"},
    "dirty-ratio-out-of-range": {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "1.5"},
}


@pytest.mark.parametrize("case", sorted(INVALID_CONFIGS))
def test_create_topic_invalid_config(bad_broker: BrokerProcess, good_topic: str, case: str) -> None:
    """INVALID_CONFIG with a message, through AdminClient and raw; the topic is not created."""
    configs = INVALID_CONFIGS[case]
    name = f"invalid-{case}-{uuid.uuid4().hex[:6]}"
    admin = admin_client(bad_broker.bootstrap)
    future = admin.create_topics([NewTopic(name, 2, 1, config=configs)], request_timeout=15)[name]
    with pytest.raises(KafkaException) as info:
        future.result(20)
    err = info.value.args[0]
    assert err.code() == KafkaError.INVALID_CONFIG, f"{case}: {err}"

    with WireClient(bad_broker.port) as client:
        raw = client.request(
            CreateTopicsRequest(
                topics=(
                    CreatableTopic(
                        name=name,
                        num_partitions=i32(2),
                        replication_factor=i16(1),
                        assignments=(),
                        configs=tuple(CreatableTopicConfig(name=k, value=v) for k, v in configs.items()),
                    ),
                ),
                timeout=datetime.timedelta(seconds=15),
            ),
            CreateTopicsResponse,
        )
    (result,) = raw.topics
    assert int(result.error_code) == 40, f"{case}: raw CreateTopics answered {result}"
    assert result.error_message, f"{case}: INVALID_CONFIG without an error message"
    assert name not in admin.list_topics(timeout=10).topics, f"{case}: topic was created anyway"
    assert_client_works(bad_broker, good_topic)


def test_create_duplicate_topic(bad_broker: BrokerProcess, good_topic: str) -> None:
    admin = admin_client(bad_broker.bootstrap)
    future = admin.create_topics(
        [NewTopic(good_topic, 2, 1, config={"diskless.enable": "true"})], request_timeout=15
    )[good_topic]
    with pytest.raises(KafkaException) as info:
        future.result(20)
    assert info.value.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS, str(info.value)
    assert_client_works(bad_broker, good_topic)


# -- ApiVersions -------------------------------------------------------------------------------


def test_api_versions_unsupported_version(bad_broker: BrokerProcess, good_topic: str) -> None:
    """v99 gets UNSUPPORTED_VERSION in the v0 format with the full ranges; the same connection
    then works at a supported version (this is how clients negotiate)."""
    with WireClient(bad_broker.port) as client:
        body = bytearray()
        for s in (b"shoal-it", b"1.0"):
            body += bytes([len(s) + 1]) + s
        body.append(0)
        cid = client.send_request(18, 99, bytes(body), flexible=True)
        reader = client.recv_response(cid, flexible_header=False)
        from kio.serial import entity_reader

        response, size = entity_reader(ApiVersionsResponseV0)(reader.data, reader.pos)
        assert reader.pos + size == len(reader.data), (
            f"v99 answer is not exactly the v0 format ({len(reader.data) - reader.pos - size} bytes left over)"
        )
        assert int(response.error_code) == 35, f"v99 answered {response.error_code}"
        ranges = {int(a.api_key): (int(a.min_version), int(a.max_version)) for a in response.api_keys}
        assert 18 in ranges and ranges[18][0] == 0 and ranges[18][1] >= 3, (
            f"ApiVersions range {ranges.get(18)}"
        )
        assert 0 in ranges and 1 in ranges and 3 in ranges, f"Produce/Fetch/Metadata missing: {ranges}"

        v3 = client.request(
            ApiVersionsRequestV3(client_software_name="shoal-it", client_software_version="1.0"),
            ApiVersionsResponseV3,
        )
        assert int(v3.error_code) == 0
        assert {int(a.api_key) for a in v3.api_keys} == set(ranges), "v3 and the v99 fallback list differ"
        v0 = client.request(ApiVersionsRequestV0(), ApiVersionsResponseV0)
        assert int(v0.error_code) == 0
    assert_client_works(bad_broker, good_topic)
