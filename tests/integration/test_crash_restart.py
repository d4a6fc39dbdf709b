"""Durability across a SIGKILL and across a clean restart.

Every acknowledged record must survive a crash (acks mean: uploaded and committed), and an
idempotent producer that retries across the crash must not create a single duplicate.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicCollection, TopicPartition
from confluent_kafka.admin import ConfigResource, ResourceType

from tests.support.acked_producer import AckedProducer, check_acked_ids, consume_all, id_records, watermarks
from tests.support.broker import BrokerProcess
from tests.support.kafka_clients import (
    admin_client,
    confluent_consume,
    confluent_produce,
    create_diskless_topic,
)
from tests.support.workload import check_records, make_workload

KILL_CYCLES = 3


@pytest.mark.timeout(300)
def test_sigkill_loses_no_acknowledged_record_and_creates_no_duplicate(
    broker: BrokerProcess, topic_name: str, tmp_path: Path
) -> None:
    """An idempotent producer in its own process keeps producing while the broker is SIGKILLed
    and restarted three times; afterwards every acknowledged id is there exactly once."""
    partitions = 4
    create_diskless_topic(broker.bootstrap, topic_name, partitions=partitions)
    producer = AckedProducer(tmp_path / "producer", broker.bootstrap, topic_name, partitions, max_seconds=150,
                             max_records=2_000_000, label="crash", value_size=75)
    acked_at_kills: list[int] = []
    try:
        producer.expect_acks(3000, 60, "before the kill")
        for _cycle in range(KILL_CYCLES):
            broker.kill()
            acked_at_kills.append(len(producer.acked()))
            time.sleep(0.5)
            broker.start()
            producer.expect_acks(acked_at_kills[-1] + 3000, 90,
                                 f"no progress after restart #{len(acked_at_kills)} ({acked_at_kills[-1]} at the kill)")
        time.sleep(2.0)
        summary = producer.stop(check=False)
    finally:
        producer.kill()
    assert summary["rc"] == 0, f"producer exited {summary['rc']}: {summary}\nstderr: {producer.stderr_tail()}"
    acked = producer.acked()

    admin = admin_client(broker.bootstrap)
    md = admin.list_topics(topic=topic_name, timeout=10)
    assert len(md.topics[topic_name].partitions) == partitions
    highs = [high for _, high in watermarks(broker.bootstrap, topic_name, range(partitions)).values()]
    received = consume_all(broker.bootstrap, topic_name, range(partitions), settle=2.0)

    check = check_acked_ids(id_records(received), acked, range(partitions))
    print(f"{check} (at the kills: {acked_at_kills}); producer: {summary}")
    assert not check.problems, (
        f"{check} (at the kills: {acked_at_kills}), high watermarks {highs}; producer: {summary}\n  "
        + "\n  ".join(check.problems)
    )


@pytest.mark.timeout(180)
def test_sigkill_after_flush_keeps_every_record(broker: BrokerProcess, topic_name: str) -> None:
    """Records acknowledged before a SIGKILL are all there after the restart, and offsets continue."""
    create_diskless_topic(broker.bootstrap, topic_name, partitions=3)
    first = make_workload(6_000, 3, "kill-1", seed=61, base_timestamp=int(time.time() * 1000) - 100_000)
    confluent_produce(broker.bootstrap, topic_name, first, config={"compression.type": "gzip"})
    broker.kill()
    broker.start()
    second = make_workload(3_000, 3, "kill-2", seed=62, first_seq=len(first))
    confluent_produce(broker.bootstrap, topic_name, second)
    received = confluent_consume(broker.bootstrap, topic_name, range(3), len(first) + len(second))
    check_records(received, first + second)


def _topic_state(bootstrap: str, topic: str) -> tuple[str, int, dict[str, str]]:
    admin = admin_client(bootstrap)
    desc = admin.describe_topics(TopicCollection([topic]), request_timeout=15)[topic].result(15)
    resource = ConfigResource(ResourceType.TOPIC, topic)
    configs = admin.describe_configs([resource], request_timeout=15)[resource].result(15)
    return str(desc.topic_id), len(desc.partitions), {name: entry.value for name, entry in configs.items()}


@pytest.mark.timeout(180)
def test_clean_restart_keeps_records_topic_id_and_configs(broker: BrokerProcess, topic_name: str) -> None:
    """SIGTERM, start again on the same dirs: records, topic id and configs are all unchanged."""
    create_diskless_topic(broker.bootstrap, topic_name, partitions=4, config={"retention.ms": "86400000"})
    first = make_workload(8_000, 4, "restart-1", seed=71, base_timestamp=int(time.time() * 1000) - 100_000)
    confluent_produce(broker.bootstrap, topic_name, first, config={"compression.type": "zstd"})
    topic_id, nparts, configs = _topic_state(broker.bootstrap, topic_name)
    assert configs.get("diskless.enable") == "true", f"diskless.enable not described: {configs}"
    assert configs.get("retention.ms") == "86400000", f"retention.ms not kept: {configs.get('retention.ms')}"

    rc = broker.stop()
    # 0 (or the JVM convention 143) is a handled shutdown; -15 means the default handler killed it.
    assert rc in (0, 143), f"SIGTERM did not shut down cleanly: exit code {rc}\n{broker.log_tail()}"
    broker.start()

    assert _topic_state(broker.bootstrap, topic_name) == (topic_id, nparts, configs)
    second = make_workload(2_000, 4, "restart-2", seed=72, first_seq=len(first))
    confluent_produce(broker.bootstrap, topic_name, second)
    received = confluent_consume(broker.bootstrap, topic_name, range(4), len(first) + len(second))
    check_records(received, first + second)


def test_diskless_enable_cannot_be_changed_after_creation(broker: BrokerProcess, topic_name: str) -> None:
    """`diskless.enable` is fixed at creation: altering it fails with INVALID_CONFIG."""
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry

    create_diskless_topic(broker.bootstrap, topic_name, partitions=1)
    admin = admin_client(broker.bootstrap)
    resource = ConfigResource(
        ResourceType.TOPIC,
        topic_name,
        incremental_configs=[
            ConfigEntry("diskless.enable", "false", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    try:
        admin.incremental_alter_configs([resource], request_timeout=15)[resource].result(15)
    except KafkaException as exc:
        code = exc.args[0].code()
        if code in (KafkaError._UNSUPPORTED_FEATURE, KafkaError.UNSUPPORTED_VERSION):
            pytest.skip(f"IncrementalAlterConfigs not served by the broker yet: {exc}")
        assert code == KafkaError.INVALID_CONFIG, f"unexpected error altering diskless.enable: {exc}"
    else:
        pytest.fail("altering diskless.enable after creation was accepted")
    assert _topic_state(broker.bootstrap, topic_name)[2].get("diskless.enable") == "true"


def test_topic_configs_can_be_altered_and_survive_restart(broker: BrokerProcess, topic_name: str) -> None:
    """IncrementalAlterConfigs SET/DELETE on a topic, seen by DescribeConfigs, kept across a restart."""
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry

    create_diskless_topic(broker.bootstrap, topic_name, partitions=1)
    admin = admin_client(broker.bootstrap)
    resource = ConfigResource(
        ResourceType.TOPIC,
        topic_name,
        incremental_configs=[
            ConfigEntry("retention.ms", "3600000", incremental_operation=AlterConfigOpType.SET),
            ConfigEntry(
                "message.timestamp.type", "LogAppendTime", incremental_operation=AlterConfigOpType.SET
            ),
        ],
    )
    admin.incremental_alter_configs([resource], request_timeout=15)[resource].result(15)
    bad = ConfigResource(
        ResourceType.TOPIC,
        topic_name,
        incremental_configs=[
            ConfigEntry("retention.ms", "soon", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    with pytest.raises(KafkaException) as refused:
        admin.incremental_alter_configs([bad], request_timeout=15)[bad].result(15)
    assert refused.value.args[0].code() == KafkaError.INVALID_CONFIG
    broker.restart()
    configs = _topic_state(broker.bootstrap, topic_name)[2]
    assert configs["retention.ms"] == "3600000"
    assert configs["message.timestamp.type"] == "LogAppendTime"
    # With LogAppendTime the broker's append time replaces the producer's timestamp.
    from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME, Consumer, Producer

    before = int(time.time() * 1000)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    producer.produce(topic_name, value=b"stamped", timestamp=1_000)
    assert producer.flush(30) == 0
    consumer = Consumer(
        {"bootstrap.servers": broker.bootstrap, "group.id": "lat", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(topic_name, 0, 0)])
    message = None
    deadline = time.time() + 30
    while message is None and time.time() < deadline:
        message = consumer.poll(1)
    consumer.close()
    assert message is not None and message.error() is None
    timestamp_type, timestamp = message.timestamp()
    assert timestamp_type == TIMESTAMP_LOG_APPEND_TIME
    assert timestamp >= before
