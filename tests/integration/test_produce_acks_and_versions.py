"""Produce with acks 0/1/all, and the oldest supported Produce/Fetch versions on the raw wire."""

from __future__ import annotations

import datetime
import importlib
import io
import time

import pytest
from confluent_kafka import TopicPartition
from kafka.record import MemoryRecords
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.serial import entity_writer
from kio.static.primitive import i8, i16, i32, i64

from tests.support.broker import BrokerProcess
from tests.support.kafka_clients import (
    confluent_consume,
    confluent_consumer,
    confluent_produce,
    create_diskless_topic,
)
from tests.support.record_batches import build_record_batch
from tests.support.wire import WireClient
from tests.support.workload import check_records, make_workload


@pytest.mark.parametrize("acks", ["0", "1", "all"])
def test_confluent_acks(broker: BrokerProcess, topic_name: str, acks: str) -> None:
    """Every acks level stores every record (on loopback nothing is lost even with acks=0)."""
    create_diskless_topic(broker.bootstrap, topic_name, partitions=3)
    sent = make_workload(5_000, 3, f"acks-{acks}", seed=80, base_timestamp=int(time.time() * 1000) - 50_000)
    confluent_produce(
        broker.bootstrap,
        topic_name,
        sent,
        config={"acks": acks, "enable.idempotence": acks == "all", "compression.type": "lz4"},
    )
    check_records(confluent_consume(broker.bootstrap, topic_name, range(3), len(sent)), sent)


def test_raw_acks_zero_gets_no_response(broker: BrokerProcess, topic_name: str) -> None:
    """Kafka never answers an acks=0 Produce: the next response on the connection is the next request's."""
    create_diskless_topic(broker.bootstrap, topic_name, partitions=1)
    mod = importlib.import_module("kio.schema.produce.v9.request")
    request = mod.ProduceRequest(
        transactional_id=None,
        acks=i16(0),
        timeout=datetime.timedelta(seconds=30),
        topic_data=(
            mod.TopicProduceData(
                name=topic_name,
                partition_data=(
                    mod.PartitionProduceData(index=i32(0), records=build_record_batch([(b"k", b"acks0")])),
                ),
            ),
        ),
    )
    buf = io.BytesIO()
    entity_writer(mod.ProduceRequest)(buf, request)
    with WireClient(broker.port) as client:
        produce_cid = client.send_request(0, 9, buf.getvalue(), flexible=True)
        api = ApiVersionsRequest(client_software_name="shoal-it", client_software_version="1.0")
        buf = io.BytesIO()
        entity_writer(ApiVersionsRequest)(buf, api)
        api_cid = client.send_request(18, 3, buf.getvalue(), flexible=True)
        frame = client.recv_frame()
        got = int.from_bytes(frame[:4], "big", signed=True)
        assert got == api_cid, f"first response has correlation id {got} (acks=0 produce was {produce_cid})"

    consumer = confluent_consumer(broker.bootstrap)
    try:
        deadline = time.monotonic() + 15
        high = 0
        while time.monotonic() < deadline and high < 1:
            high = consumer.get_watermark_offsets(TopicPartition(topic_name, 0), timeout=10, cached=False)[1]
            time.sleep(0.2)
    finally:
        consumer.close()
    assert high == 1, f"acks=0 record not stored (high watermark {high})"


@pytest.mark.parametrize(("produce_version", "fetch_version"), [(3, 4), (7, 11), (9, 12)])
def test_raw_produce_fetch_versions(
    broker: BrokerProcess, topic_name: str, produce_version: int, fetch_version: int
) -> None:
    """Produce then Fetch at the given versions (v3/v4 are the oldest the broker accepts)."""
    create_diskless_topic(broker.bootstrap, topic_name, partitions=2)
    pmod_req = importlib.import_module(f"kio.schema.produce.v{produce_version}.request")
    pmod_resp = importlib.import_module(f"kio.schema.produce.v{produce_version}.response")
    fmod_req = importlib.import_module(f"kio.schema.fetch.v{fetch_version}.request")
    fmod_resp = importlib.import_module(f"kio.schema.fetch.v{fetch_version}.response")
    records = [(b"k0", b"v0"), (None, b"v1"), (b"k2", None)]
    ts = int(time.time() * 1000) - 5_000
    with WireClient(broker.port) as client:
        for expected_base in (0, 3):
            produced = client.request(
                pmod_req.ProduceRequest(
                    transactional_id=None,
                    acks=i16(-1),
                    timeout=datetime.timedelta(seconds=30),
                    topic_data=(
                        pmod_req.TopicProduceData(
                            name=topic_name,
                            partition_data=(
                                pmod_req.PartitionProduceData(
                                    index=i32(1), records=build_record_batch(records, base_timestamp=ts)
                                ),
                            ),
                        ),
                    ),
                ),
                pmod_resp.ProduceResponse,
            )
            (part,) = produced.responses[0].partition_responses
            assert int(part.error_code) == 0, part
            assert int(part.base_offset) == expected_base, part

        fetch_kwargs = {
            "max_wait": datetime.timedelta(milliseconds=500),
            "min_bytes": i32(1),
            "isolation_level": i8(0),
            "topics": (
                fmod_req.FetchTopic(
                    topic=topic_name,
                    partitions=(
                        fmod_req.FetchPartition(
                            partition=i32(1), fetch_offset=i64(0), partition_max_bytes=i32(1 << 20)
                        ),
                    ),
                ),
            ),
        }
        if fetch_version >= 7:
            fetch_kwargs["forgotten_topics_data"] = ()
        fetched = client.request(fmod_req.FetchRequest(**fetch_kwargs), fmod_resp.FetchResponse)
    (part,) = fetched.responses[0].partitions
    assert int(part.error_code) == 0 and int(part.high_watermark) == 6, part
    got = []
    mr = MemoryRecords(bytes(part.records or b""))
    while (batch := mr.next_batch()) is not None:
        got += [(r.offset, r.key, r.value, r.timestamp) for r in batch]
    expected = [(i, k, v, ts) for i, (k, v) in enumerate(records * 2)]
    assert got == expected
