"""Tiered storage of classic topics (KIP-405) on a real broker, on the local-directory and moto S3
object storage: the leader copies rolled segments, local retention then deletes them locally,
and consumers of four clients read from offset 0 across remote and local data, byte for byte.
ListOffsets answers earliest (-2), earliest local (-4) and latest tiered (-5); AlterConfigs
refuses KIP-950's invalid combinations with Kafka's messages."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from shoal.protocol.apis import ApiKey, request_class, response_class
from shoal.protocol.build import make, nested
from shoal.protocol.errors import ErrorCode
from tests.support.broker import BrokerProcess, free_port
from tests.support.chaos_clients import wait_until
from tests.support.kafka_clients import admin_client, confluent_consume, wait_for_topic
from tests.support.metrics import metric, scrape
from tests.support.wire import WireClient

TIERED_BROKER = {
    "remote.log.storage.system.enable": "true",
    "remote.log.manager.task.interval.ms": 300,
    "log.retention.check.interval.ms": 300,
}
TIERED_TOPIC = {
    "remote.storage.enable": "true",
    "internal.segment.bytes": "16384",
    "local.retention.bytes": "40000",
}
RECORDS = 3000


def list_offset(port: int, topic: str, timestamp: int) -> tuple[int, int]:
    """(error, offset) of ListOffsets v9 for partition 0 at ``timestamp``."""
    request = request_class(ApiKey.LIST_OFFSETS, 9)
    partition = make(nested(request, "ListOffsetsPartition"), partition_index=0, current_leader_epoch=-1,
                     timestamp=timestamp, max_num_offsets=1)
    entity = make(request, replica_id=-1, isolation_level=0,
                  topics=(make(nested(request, "ListOffsetsTopic"), name=topic, partitions=(partition,)),))
    with WireClient(port) as client:
        answer = client.request(entity, response_class(ApiKey.LIST_OFFSETS, 9))
    p = answer.topics[0].partitions[0]
    return int(p.error_code), int(p.offset)


def create_tiered(broker: BrokerProcess, topic: str, **extra: str) -> None:
    from confluent_kafka.admin import NewTopic

    admin = admin_client(broker.bootstrap)
    admin.create_topics([NewTopic(topic, 1, 1, config={**TIERED_TOPIC, **extra})])[topic].result(30)
    wait_for_topic(admin, topic, 1)


def produce(bootstrap: str, topic: str) -> list[bytes]:
    from confluent_kafka import Producer

    values = [f"tiered-{i:06d}-".encode() + b"z" * 90 for i in range(RECORDS)]
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 2,
                         "batch.size": 4096})
    for v in values:
        producer.produce(topic, value=v, partition=0)
    assert producer.flush(60) == 0
    return values


def wait_tiered(broker: BrokerProcess, topic: str) -> tuple[int, int]:
    """Wait until local retention deleted copied segments: (earliest local, latest tiered)."""
    def moved() -> bool:
        return list_offset(broker.port, topic, -4)[1] > 0
    wait_until(moved, "local segments deleted after their copy", 60)
    return list_offset(broker.port, topic, -4)[1], list_offset(broker.port, topic, -5)[1]


def read_with_all_clients(broker: BrokerProcess, topic: str, values: list[bytes]) -> None:
    got = [r.value for r in confluent_consume(broker.bootstrap, topic, [0], len(values), timeout=60)]
    assert got == values, "confluent-kafka"

    from kafka import KafkaConsumer, TopicPartition

    kp = KafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False, consumer_timeout_ms=20000)
    kp.assign([TopicPartition(topic, 0)])
    kp.seek(TopicPartition(topic, 0), 0)
    got = []
    for m in kp:
        got.append(m.value)
        if len(got) == len(values):
            break
    kp.close()
    assert got == values, "kafka-python"

    async def aio() -> list[bytes]:
        from aiokafka import AIOKafkaConsumer
        from aiokafka.structs import TopicPartition as ATP

        c = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False)
        await c.start()
        try:
            c.assign([ATP(topic, 0)])
            c.seek(ATP(topic, 0), 0)
            out: list[bytes] = []
            deadline = time.monotonic() + 60
            while len(out) < len(values) and time.monotonic() < deadline:
                batch = await c.getmany(timeout_ms=1000)
                for msgs in batch.values():
                    out += [m.value for m in msgs]
            return out
        finally:
            await c.stop()

    assert asyncio.run(aio()) == values, "aiokafka"

    kcat = subprocess.run(
        ["kcat", "-C", "-b", broker.bootstrap, "-t", topic, "-p", "0", "-o", "beginning", "-c", str(len(values)),
         "-e", "-f", "%s\n"],
        capture_output=True, timeout=120, check=True,
    )
    assert kcat.stdout.split(b"\n")[:-1] == values, "kcat"


def check_tiered_topic(broker: BrokerProcess, topic: str) -> None:
    create_tiered(broker, topic)
    values = produce(broker.bootstrap, topic)
    local_start, tiered = wait_tiered(broker, topic)
    assert list_offset(broker.port, topic, -2) == (ErrorCode.none, 0)  # the whole log, remote included
    assert 0 < local_start <= tiered + 1 <= RECORDS, (local_start, tiered)
    assert list_offset(broker.port, topic, -1) == (ErrorCode.none, RECORDS)
    before = list_offset(broker.port, topic, -4)[1]
    line = next(x for x in describe(broker, topic).splitlines() if "Partition: 0" in x)
    after = list_offset(broker.port, topic, -4)[1]  # local retention may move it meanwhile
    described = int(line.split("LocalLogStartOffset: ")[1].split("\t")[0])
    assert "\tLogStartOffset: 0\t" in line and before <= described <= after, (line, before, after)
    read_with_all_clients(broker, topic, values)


@pytest.mark.timeout(300)
def test_tiered_topic_on_a_local_directory(broker_factory: Any, topic_name: str) -> None:
    port = free_port()
    broker = broker_factory(overrides={**TIERED_BROKER, "metrics.http.port": port})
    check_tiered_topic(broker, topic_name)
    assert broker.objects_dir is not None
    assert list((broker.objects_dir / "tiered").rglob("*.log")), "no remote segment in object storage"
    assert "baseOffset: 0 " in dump_remote_segment(broker, topic_name)

    # Kafka's tiered storage metrics (RemoteCopyBytesPerSec, RemoteFetchBytesPerSec, RemoteLogSizeBytes).
    wait_until(lambda: metric(scrape(port), "kafka_server_brokertopicmetrics_remotelogsizebytes", topic=topic_name) > 0,
               "RemoteLogSizeBytes measured", 30)
    samples = scrape(port)
    assert metric(samples, "kafka_server_brokertopicmetrics_remotecopybytes_total", topic=topic_name) > 0
    assert metric(samples, "kafka_server_brokertopicmetrics_remotefetchbytes_total", topic=topic_name) > 0
    assert metric(samples, "kafka_server_brokertopicmetrics_remotefetcherrors_total") == 0
    assert any(n == "kafka_server_brokertopicmetrics_remotecopylagbytes" and lab.get("topic") == topic_name
               for n, lab, _ in samples)


@pytest.mark.timeout(300)
def test_tiered_topic_on_s3(broker_factory: Any, moto_s3: Any, s3_bucket: str, topic_name: str) -> None:
    url = f"s3://{s3_bucket}?endpoint={moto_s3.url}&region=us-east-1"
    broker = broker_factory("s3-tiered", storage_url=url, env=moto_s3.client_env(), overrides=TIERED_BROKER)
    check_tiered_topic(broker, topic_name)
    import boto3

    s3 = boto3.client("s3", endpoint_url=moto_s3.url, region_name="us-east-1",
                      aws_access_key_id="testing", aws_secret_access_key="testing")
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=s3_bucket, Prefix="tiered/").get("Contents", [])]
    assert any(k.endswith(".log") for k in keys), keys
    assert "baseOffset: 0 " in dump_remote_segment(broker, topic_name, env=moto_s3.client_env())


@pytest.mark.timeout(120)
def test_kip_950_invalid_combinations_are_refused_with_kafkas_messages(broker_factory: Any, topic_name: str) -> None:
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

    plain = broker_factory("plain")
    admin = admin_client(plain.bootstrap)
    refused = admin.create_topics([NewTopic(topic_name, 1, 1, config={"remote.storage.enable": "true"})])[topic_name]
    with pytest.raises(Exception) as info:
        refused.result(30)
    assert "Tiered Storage functionality is disabled in the broker" in str(info.value)

    broker = broker_factory(overrides=TIERED_BROKER)
    create_tiered(broker, topic_name)
    admin = admin_client(broker.bootstrap)

    def alter(**configs: str) -> str:
        resource = ConfigResource("TOPIC", topic_name, incremental_configs=[
            ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in configs.items()
        ])
        try:
            admin.incremental_alter_configs([resource])[resource].result(30)
        except Exception as exc:  # noqa: BLE001 - the message is what is checked
            return str(exc)
        return ""

    assert "It is invalid to disable remote storage without deleting remote data" in alter(
        **{"remote.storage.enable": "false"})
    assert "must be set to the identical value" in alter(**{"remote.log.copy.disable": "true"})
    assert alter(**{"remote.log.copy.disable": "true", "local.retention.bytes": "-2", "local.retention.ms": "-2"}) == ""
    wait_until(lambda: tiered_state(broker, topic_name)[0] == "DISABLED", "retain finishing", 30)
    assert alter(**{"remote.storage.enable": "false", "remote.log.delete.on.disable": "true"}) == ""


def alter(broker: BrokerProcess, topic: str, **configs: str) -> str:
    """IncrementalAlterConfigs SET (a value of "-" deletes the config); the error text, "" when taken."""
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

    admin = admin_client(broker.bootstrap)
    resource = ConfigResource("TOPIC", topic, incremental_configs=[
        ConfigEntry(k, None if v == "-" else v,
                    incremental_operation=AlterConfigOpType.DELETE if v == "-" else AlterConfigOpType.SET)
        for k, v in configs.items()
    ])
    try:
        admin.incremental_alter_configs([resource])[resource].result(30)
    except Exception as exc:  # noqa: BLE001 - the message is what is checked
        return str(exc)
    return ""


def dump_remote_segment(broker: BrokerProcess, topic: str, env: dict[str, str] | None = None) -> str:
    """``shoal dump-log --remote-segment`` of offset 0, with the broker's server.properties."""
    import os

    return subprocess.run(
        [str(Path(sys.executable).parent / "shoal"), "dump-log", "--config", str(broker.properties_path),
         "--remote-segment", f"{topic}:0:0"],
        capture_output=True, text=True, timeout=60, check=True, env={**os.environ, **(env or {})},
    ).stdout


def describe(broker: BrokerProcess, topic: str) -> str:
    """What ``shoal topics describe --topic`` prints."""
    return subprocess.run(
        [str(Path(sys.executable).parent / "shoal"), "topics", "describe", "--bootstrap-server", broker.bootstrap,
         "--topic", topic], capture_output=True, text=True, timeout=60, check=True,
    ).stdout


def tiered_state(broker: BrokerProcess, topic: str) -> tuple[str, str]:
    """(TieredState, TieredEpoch) as ``shoal topics describe`` prints them."""
    line = next(x for x in describe(broker, topic).splitlines() if x.startswith("Topic:"))
    fields = dict(part.split(": ", 1) for part in line.split("\t") if ": " in part)
    return fields.get("TieredState", ""), fields.get("TieredEpoch", "")


def tiered_objects(broker: BrokerProcess, topic: str) -> list[Path]:
    assert broker.objects_dir is not None
    return [p for p in (broker.objects_dir / "tiered").glob(f"{topic}-*/*/*") if p.is_file()]


@pytest.mark.timeout(300)
def test_kip_950_retain_then_delete_then_enable_again(broker_factory: Any, topic_name: str) -> None:
    broker = broker_factory(overrides=TIERED_BROKER)
    create_tiered(broker, topic_name)
    assert tiered_state(broker, topic_name) == ("ENABLED", "0")
    values = produce(broker.bootstrap, topic_name)
    local_start, tiered = wait_tiered(broker, topic_name)

    # Retain: nothing new is copied, remote data stays readable and still expires.
    assert alter(broker, topic_name, **{"remote.log.copy.disable": "true", "local.retention.bytes": "-2"}) == ""
    wait_until(lambda: tiered_state(broker, topic_name) == ("DISABLED", "0"), "retain finishing", 30)
    time.sleep(1.0)  # a round that began before the change may still finish its copies
    tiered = list_offset(broker.port, topic_name, -5)[1]
    more = produce(broker.bootstrap, topic_name)
    time.sleep(1.5)  # several remote log manager rounds
    assert list_offset(broker.port, topic_name, -5)[1] == tiered, "a segment was copied with copies disabled"
    got = [r.value for r in confluent_consume(broker.bootstrap, topic_name, [0], 2 * RECORDS, timeout=60)]
    assert got == values + more
    assert alter(broker, topic_name, **{"retention.bytes": "150000"}) == ""
    wait_until(lambda: list_offset(broker.port, topic_name, -2)[1] > 0, "remote segments expiring", 30)

    # Delete: the remote data goes, directories included; the log starts at the local log start.
    assert alter(broker, topic_name, **{"remote.storage.enable": "false", "remote.log.delete.on.disable": "true",
                                       "remote.log.copy.disable": "-", "retention.bytes": "-"}) == ""
    assert broker.objects_dir is not None
    wait_until(lambda: tiered_state(broker, topic_name) == ("DISABLED", "0") and not tiered_objects(broker, topic_name),
               "delete finishing", 30)
    wait_until(lambda: not list((broker.objects_dir / "tiered").glob(f"{topic_name}-*")), "its directories going", 10)
    local = list_offset(broker.port, topic_name, -4)[1]
    assert list_offset(broker.port, topic_name, -2)[1] == local

    # Enabled again: a new tiered epoch, copying resumes.
    assert alter(broker, topic_name, **{"remote.storage.enable": "true", "remote.log.delete.on.disable": "-",
                                       "local.retention.bytes": "40000"}) == ""
    assert tiered_state(broker, topic_name) == ("ENABLED", "1")
    produce(broker.bootstrap, topic_name)
    wait_until(lambda: list_offset(broker.port, topic_name, -5)[1] > local, "copies resuming", 60)
    assert local_start > 0


@pytest.mark.timeout(120)
def test_a_second_disablement_while_disabling_is_refused(broker_factory: Any, topic_name: str) -> None:
    broker = broker_factory(overrides={**TIERED_BROKER, "remote.log.manager.task.interval.ms": 600_000})
    create_tiered(broker, topic_name, **{"local.retention.bytes": "-2"})
    assert alter(broker, topic_name, **{"remote.log.copy.disable": "true"}) == ""
    assert tiered_state(broker, topic_name) == ("DISABLING", "0")
    refused = alter(broker, topic_name, **{"remote.storage.enable": "false", "remote.log.delete.on.disable": "true"})
    assert "already being disabled" in refused
    assert "is being disabled" in alter(broker, topic_name, **{"remote.log.copy.disable": "false"})
