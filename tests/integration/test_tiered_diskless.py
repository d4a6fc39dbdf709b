"""Diskless topics moved to tiered storage (KIP-1163 "Moving to Tiered Storage") on a real broker,
on the local-directory and moto S3 object storage: the partition leader builds Kafka segments from
the Batch Coordinator's batches and copies them; the coordinator then drops those batches, so WAL
objects empty out and are deleted while data keeps flowing. Consumers of four clients read from
offset 0 across tiered segments and the coordinator's batches, byte for byte; ListOffsets answers
earliest (-2), earliest local (-4: the first batch the coordinator holds) and latest tiered (-5)."""

from __future__ import annotations

import re
import time
from typing import Any

import pytest

from shoal.protocol.errors import ErrorCode
from tests.integration.test_lifecycle import shoal_cli
from tests.integration.test_tiered_storage import (
    TIERED_BROKER,
    alter,
    dump_remote_segment,
    list_offset,
    read_with_all_clients,
    tiered_objects,
    tiered_state,
)
from tests.support.broker import BrokerProcess, free_port
from tests.support.chaos_clients import wait_until
from tests.support.kafka_clients import confluent_consume, create_diskless_topic
from tests.support.metrics import metric, scrape

DISKLESS_TIERED_BROKER = {
    **TIERED_BROKER,
    "diskless.object.cleaner.interval.ms": 300,
    "diskless.object.delete.grace.ms": 500,
    # Acknowledgements come at commits: producing each round waits on the commit interval (default 250 ms).
    "diskless.append.commit.interval.ms": 50,
}
#: Small segments; the cache replica keeps only the last 40 kB (local retention), so reads of older
#: offsets go to the tiered segments.
TOPIC = {"remote.storage.enable": "true", "internal.segment.bytes": "16384", "local.retention.bytes": "40000"}
SEGMENT = 16384


def produce(bootstrap: str, topic: str, first: int, count: int) -> list[bytes]:
    from confluent_kafka import Producer

    values = [f"diskless-tiered-{i:06d}-".encode() + b"q" * 80 for i in range(first, first + count)]
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5,
                         "batch.size": 4096})
    for v in values:
        producer.produce(topic, value=v, partition=0)
    assert producer.flush(60) == 0
    return values


def coordinator_bytes(broker: BrokerProcess, topic: str) -> int:
    """What ``shoal diskless-metadata topic`` says the coordinator still holds of the topic."""
    out = shoal_cli("diskless-metadata", "topic", topic, "--metadata-dir", str(broker.log_dir))
    found = re.search(r"^Size on object storage: (\d+) bytes", out, re.M)
    assert found, out
    return int(found[1])


def wait_tiered_up_to(broker: BrokerProcess, topic: str, end: int) -> None:
    """Wait until the coordinator holds less than two segments' worth below ``end``."""
    def moved() -> bool:
        return list_offset(broker.port, topic, -4)[1] >= end - 2 * SEGMENT // 100
    wait_until(moved, f"batches of {topic} below about {end} moved to tiered storage", 90)


@pytest.mark.timeout(420)
def test_diskless_topic_tiered_on_a_local_directory(broker_factory: Any, topic_name: str) -> None:
    port = free_port()
    broker = broker_factory(overrides={**DISKLESS_TIERED_BROKER, "metrics.http.port": port})
    create_diskless_topic(broker.bootstrap, topic_name, 1, config=TOPIC)

    # Rounds of records: each round's batches go to tiered segments and their WAL objects are
    # deleted, so the WAL object count and the coordinator's bytes stay bounded as data keeps flowing.
    values: list[bytes] = []
    held: list[tuple[int, int]] = []
    for _ in range(4):
        values += produce(broker.bootstrap, topic_name, len(values), 1500)
        wait_tiered_up_to(broker, topic_name, len(values))
        wait_until(lambda: len(broker.wal_objects()) <= 8, "WAL objects of tiered batches deleted", 60)
        held.append((len(broker.wal_objects()), coordinator_bytes(broker, topic_name)))
    total = sum(len(v) for v in values)
    assert all(objects <= 8 and size < total / 4 for objects, size in held), (held, total)

    local_start, tiered = list_offset(broker.port, topic_name, -4)[1], list_offset(broker.port, topic_name, -5)[1]
    assert list_offset(broker.port, topic_name, -2) == (ErrorCode.none, 0)  # the whole log, tiered data included
    assert list_offset(broker.port, topic_name, -1) == (ErrorCode.none, len(values))
    assert 0 < local_start <= tiered + 1 <= len(values), (local_start, tiered)
    read_with_all_clients(broker, topic_name, values)

    assert broker.objects_dir is not None
    assert list((broker.objects_dir / "tiered").rglob("*.log")), "no tiered segment in object storage"
    assert "baseOffset: 0 " in dump_remote_segment(broker, topic_name)
    samples = scrape(port)
    assert metric(samples, "kafka_server_brokertopicmetrics_remotecopybytes_total", topic=topic_name) > 0
    assert metric(samples, "kafka_server_brokertopicmetrics_remotefetchbytes_total", topic=topic_name) > 0

    # Total retention applies to the tiered segments and moves the log start clients see.
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

    from tests.support.kafka_clients import admin_client

    admin = admin_client(broker.bootstrap)
    resource = ConfigResource("TOPIC", topic_name, incremental_configs=[
        ConfigEntry("retention.bytes", str(4 * SEGMENT), incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([resource], request_timeout=15)[resource].result(15)
    wait_until(lambda: list_offset(broker.port, topic_name, -2)[1] > 0, "tiered segments expired", 60)
    start = list_offset(broker.port, topic_name, -2)[1]
    got = [r.value for r in confluent_consume(broker.bootstrap, topic_name, [0], len(values) - start, timeout=60)]
    assert got == values[start:]  # from the beginning: the new log start


@pytest.mark.timeout(300)
def test_diskless_topic_tiered_on_s3(broker_factory: Any, moto_s3: Any, s3_bucket: str, topic_name: str) -> None:
    url = f"s3://{s3_bucket}?endpoint={moto_s3.url}&region=us-east-1"
    broker = broker_factory("s3-diskless-tiered", storage_url=url, env=moto_s3.client_env(),
                            overrides=DISKLESS_TIERED_BROKER)
    create_diskless_topic(broker.bootstrap, topic_name, 1, config=TOPIC)
    values = produce(broker.bootstrap, topic_name, 0, 3000)
    wait_tiered_up_to(broker, topic_name, len(values))
    assert list_offset(broker.port, topic_name, -2) == (ErrorCode.none, 0)
    read_with_all_clients(broker, topic_name, values)
    import boto3

    s3 = boto3.client("s3", endpoint_url=moto_s3.url, region_name="us-east-1",
                      aws_access_key_id="testing", aws_secret_access_key="testing")
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=s3_bucket, Prefix="tiered/").get("Contents", [])]
    assert any(k.endswith(".log") for k in keys), keys


@pytest.mark.timeout(300)
def test_diskless_kip_950_retain_then_delete_then_enable_again(broker_factory: Any, topic_name: str) -> None:
    """KIP-950 on a tiered diskless topic: retain (copies stop, tiered data stays readable, the
    coordinator's own retention takes over), delete (tiered data deleted, the log start moves to the
    coordinator's first batch), enabled again (tiered epoch 1, copies resume)."""
    broker = broker_factory(overrides=DISKLESS_TIERED_BROKER)
    create_diskless_topic(broker.bootstrap, topic_name, 1, config=TOPIC)
    assert tiered_state(broker, topic_name) == ("ENABLED", "0")
    values = produce(broker.bootstrap, topic_name, 0, 2000)
    wait_tiered_up_to(broker, topic_name, len(values))

    assert alter(broker, topic_name, **{"remote.log.copy.disable": "true", "local.retention.bytes": "-2"}) == ""
    wait_until(lambda: tiered_state(broker, topic_name) == ("DISABLED", "0"), "retain finishing", 30)
    time.sleep(1.0)  # a round that began before the change may still finish its copies
    tiered = list_offset(broker.port, topic_name, -5)[1]
    local = list_offset(broker.port, topic_name, -4)[1]
    values += produce(broker.bootstrap, topic_name, len(values), 1000)
    time.sleep(1.5)  # several remote log manager rounds
    assert list_offset(broker.port, topic_name, -5)[1] == tiered, "a segment was copied with copies disabled"
    assert list_offset(broker.port, topic_name, -4)[1] == local, "batches left the coordinator with copies disabled"
    got = [r.value for r in confluent_consume(broker.bootstrap, topic_name, [0], len(values), timeout=60)]
    assert got == values

    assert alter(broker, topic_name, **{"remote.storage.enable": "false", "remote.log.delete.on.disable": "true",
                                       "remote.log.copy.disable": "-"}) == ""
    wait_until(lambda: tiered_state(broker, topic_name) == ("DISABLED", "0") and not tiered_objects(broker, topic_name),
               "delete finishing", 30)
    assert list_offset(broker.port, topic_name, -2) == (ErrorCode.none, local)  # the coordinator's first batch
    got = [r.value for r in confluent_consume(broker.bootstrap, topic_name, [0], len(values) - local, timeout=60)]
    assert got == values[local:]

    assert alter(broker, topic_name, **{"remote.storage.enable": "true", "remote.log.delete.on.disable": "-",
                                       "local.retention.bytes": "40000"}) == ""
    assert tiered_state(broker, topic_name) == ("ENABLED", "1")
    values += produce(broker.bootstrap, topic_name, len(values), 1000)
    wait_until(lambda: list_offset(broker.port, topic_name, -5)[1] >= local, "copies resuming", 60)
    wait_until(lambda: list_offset(broker.port, topic_name, -4)[1] > local, "batches tiered again", 60)
    got = [r.value for r in confluent_consume(broker.bootstrap, topic_name, [0], len(values) - local, timeout=60)]
    assert got == values[local:]
