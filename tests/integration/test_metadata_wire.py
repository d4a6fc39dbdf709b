"""Metadata across versions, including KIP-1163's v14 (RackId in, IsDiskless and
PreferredProduceBrokers out), decoded strictly: a single stray byte fails the test."""

from __future__ import annotations

import dataclasses
import importlib
import uuid

import pytest
from confluent_kafka import KafkaError, KafkaException
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.api_versions.v3.response import ApiVersionsResponse

from tests.support.broker import BrokerProcess
from tests.support.kafka_clients import admin_client
from tests.support.wire import Reader, WireClient

NULL_UUID = b"\x00" * 16


def compact_string(value: str) -> bytes:
    raw = value.encode()
    assert len(raw) < 127
    return bytes([len(raw) + 1]) + raw


def metadata_v14_request(topics: list[str] | None, rack_id: str = "") -> bytes:
    """MetadataRequest v14 body, by hand (kio stops at v13)."""
    out = bytearray()
    if topics is None:
        out.append(0)  # null compact array: all topics
    else:
        out.append(len(topics) + 1)
        for name in topics:
            out += NULL_UUID + compact_string(name) + b"\x00"
    out += b"\x00"  # AllowAutoTopicCreation
    out += b"\x00"  # IncludeTopicAuthorizedOperations
    out += compact_string(rack_id)  # RackId (v14+)
    out += b"\x00"  # tagged fields
    return bytes(out)


def parse_metadata_v14(r: Reader) -> dict:
    """MetadataResponse v14 body."""
    resp: dict = {"throttle": r.int32(), "brokers": []}
    for _ in range(r.compact_array_len()):
        resp["brokers"].append(
            {"node_id": r.int32(), "host": r.compact_string(), "port": r.int32(), "rack": r.compact_string()}
        )
        r.tagged_fields()
    resp["cluster_id"] = r.compact_string()
    resp["controller_id"] = r.int32()
    resp["topics"] = []
    for _ in range(r.compact_array_len()):
        topic = {
            "error_code": r.int16(),
            "name": r.compact_string(),
            "topic_id": r.uuid(),
            "is_internal": r.bool(),
        }
        topic["partitions"] = []
        for _ in range(r.compact_array_len()):
            part = {
                "error_code": r.int16(),
                "partition_index": r.int32(),
                "leader_id": r.int32(),
                "leader_epoch": r.int32(),
                "replica_nodes": r.compact_int32_array(),
                "isr_nodes": r.compact_int32_array(),
                "offline_replicas": r.compact_int32_array(),
                "preferred_produce_brokers": r.compact_int32_array(),
            }
            part["tags"] = r.tagged_fields()
            topic["partitions"].append(part)
        topic["topic_authorized_operations"] = r.int32()
        topic["is_diskless"] = r.bool()
        topic["tags"] = r.tagged_fields()
        resp["topics"].append(topic)
    resp["error_code"] = r.int16()
    resp["tags"] = r.tagged_fields()
    return resp


def metadata_v14(broker: BrokerProcess, topics: list[str] | None, rack_id: str = "") -> dict:
    with WireClient(broker.port) as client:
        cid = client.send_request(3, 14, metadata_v14_request(topics, rack_id), flexible=True)
        reader = client.recv_response(cid, flexible_header=True)
        resp = parse_metadata_v14(reader)
        assert reader.remaining() == 0, f"{reader.remaining()} bytes left after a v14 response: {resp}"
        return resp


def test_api_versions_advertises_metadata_v14(broker: BrokerProcess) -> None:
    with WireClient(broker.port) as client:
        resp = client.request(
            ApiVersionsRequest(client_software_name="shoal-it", client_software_version="1.0"),
            ApiVersionsResponse,
        )
    ranges = {int(a.api_key): (int(a.min_version), int(a.max_version)) for a in resp.api_keys}
    assert ranges.get(3, (0, 0))[1] >= 14, f"Metadata range {ranges.get(3)}"


@pytest.mark.parametrize("rack_id", ["", "rack-a"])
def test_metadata_v14_marks_diskless_topic(broker: BrokerProcess, diskless_topic: str, rack_id: str) -> None:
    resp = metadata_v14(broker, [diskless_topic], rack_id)
    assert int(resp["error_code"]) == 0
    assert [(b["node_id"], b["host"], b["port"]) for b in resp["brokers"]] == [(1, "127.0.0.1", broker.port)]
    (topic,) = resp["topics"]
    assert topic["error_code"] == 0 and topic["name"] == diskless_topic
    assert topic["topic_id"] != NULL_UUID
    assert topic["is_diskless"] is True, f"IsDiskless false for a diskless topic: {topic}"
    assert sorted(p["partition_index"] for p in topic["partitions"]) == [0, 1, 2, 3]
    for p in topic["partitions"]:
        assert p["error_code"] == 0 and p["leader_id"] == 1, p
        assert p["replica_nodes"] == p["isr_nodes"] == [1], p  # its true replicas: one, on broker 1
        assert p["preferred_produce_brokers"] == [1], (
            f"PreferredProduceBrokers {p['preferred_produce_brokers']}"
        )


def test_metadata_v14_all_topics_and_unknown_topic(broker: BrokerProcess, diskless_topic: str) -> None:
    all_topics = metadata_v14(broker, None)
    assert diskless_topic in {t["name"] for t in all_topics["topics"]}
    missing = f"missing-{uuid.uuid4().hex[:6]}"
    (topic,) = metadata_v14(broker, [missing])["topics"]
    assert topic["error_code"] == 3, f"unknown topic answered {topic}"


def _metadata_request(version: int, topic: str):  # noqa: ANN202 - kio types vary per version
    req_mod = importlib.import_module(f"kio.schema.metadata.v{version}.request")
    resp_mod = importlib.import_module(f"kio.schema.metadata.v{version}.response")
    topic_fields = {f.name for f in dataclasses.fields(req_mod.MetadataRequestTopic)}
    t = req_mod.MetadataRequestTopic(name=topic, **({"topic_id": None} if "topic_id" in topic_fields else {}))
    kwargs: dict = {"topics": (t,)}
    for f in dataclasses.fields(req_mod.MetadataRequest):
        if f.name != "topics":
            kwargs[f.name] = False
    return req_mod.MetadataRequest(**kwargs), resp_mod.MetadataResponse


@pytest.mark.parametrize("version", [0, 1, 4, 5, 7, 9, 10, 12, 13])
def test_metadata_older_versions_decode_exactly(
    broker: BrokerProcess, diskless_topic: str, version: int
) -> None:
    """Each version carries exactly its own fields (v14 additions never leak into v0-13)."""
    request, response_type = _metadata_request(version, diskless_topic)
    with WireClient(broker.port) as client:
        resp = client.request(request, response_type)
    (topic,) = resp.topics
    assert int(topic.error_code) == 0 and topic.name == diskless_topic
    assert len(topic.partitions) == 4
    assert all(int(p.leader_id) == 1 for p in topic.partitions)
    assert [int(b.port) for b in resp.brokers] == [broker.port]


def test_describe_cluster_and_topic_partitions(broker: BrokerProcess, diskless_topic: str) -> None:
    """DescribeCluster and DescribeTopicPartitions through AdminClient."""
    from confluent_kafka import TopicCollection

    admin = admin_client(broker.bootstrap)
    cluster = admin.describe_cluster(request_timeout=15).result(15)
    assert [n.id for n in cluster.nodes] == [1]
    assert cluster.nodes[0].port == broker.port
    desc = admin.describe_topics(TopicCollection([diskless_topic]), request_timeout=15)[
        diskless_topic
    ].result(15)
    assert [p.id for p in desc.partitions] == [0, 1, 2, 3]
    assert all(p.leader is not None and p.leader.id == 1 for p in desc.partitions)


def test_delete_topic(broker: BrokerProcess, topic_name: str) -> None:
    from tests.support.kafka_clients import create_diskless_topic

    create_diskless_topic(broker.bootstrap, topic_name, partitions=2)
    admin = admin_client(broker.bootstrap)
    admin.delete_topics([topic_name], operation_timeout=15, request_timeout=15)[topic_name].result(20)
    resp = metadata_v14(broker, [topic_name])
    assert resp["topics"][0]["error_code"] == 3, f"deleted topic still described: {resp['topics'][0]}"
    with pytest.raises(KafkaException) as info:
        admin.delete_topics([topic_name], request_timeout=15)[topic_name].result(20)
    assert info.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_describe_topic_partitions_raw(broker: BrokerProcess, diskless_topic: str) -> None:
    """DescribeTopicPartitions v0 (KIP-966), decoded strictly; unknown topics answer error 3."""
    from kio.schema.describe_topic_partitions.v0.request import DescribeTopicPartitionsRequest, TopicRequest
    from kio.schema.describe_topic_partitions.v0.response import DescribeTopicPartitionsResponse
    from kio.static.primitive import i32

    missing = f"missing-{uuid.uuid4().hex[:6]}"
    request = DescribeTopicPartitionsRequest(
        topics=(TopicRequest(name=diskless_topic), TopicRequest(name=missing)),
        response_partition_limit=i32(2000),
    )
    with WireClient(broker.port) as client:
        resp = client.request(request, DescribeTopicPartitionsResponse)
    topics = {t.name: t for t in resp.topics}
    assert int(topics[diskless_topic].error_code) == 0
    assert [int(p.partition_index) for p in topics[diskless_topic].partitions] == [0, 1, 2, 3]
    assert all(int(p.leader_id) == 1 for p in topics[diskless_topic].partitions)
    assert int(topics[missing].error_code) == 3, topics[missing]
