"""Every topic config Kafka 4.x defines, through real admin clients against a real broker.

A classic topic created with every Kafka topic config set to a valid non-default value describes
each back (DYNAMIC_TOPIC_CONFIG) and takes records; an unset config describes Kafka's default
(DEFAULT_CONFIG, or STATIC_BROKER_CONFIG when the operator set its broker synonym); every invalid
value is refused with INVALID_CONFIG and Kafka's message, by CreateTopics and by
IncrementalAlterConfigs; so are the values that ask for what Shoal does not do yet. A diskless
topic takes the configs that apply to it, and the classic-only ones do not break its creation.

One broker serves the module (starting one per test would eat the time budget); its
``log.segment.delete.delay.ms`` is set so that a broker synonym shows as the source.
"""

from __future__ import annotations

import sys
import time
import uuid
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
    ResourceType,
)

from tests.support.broker import BrokerProcess
from tests.support.kafka_clients import admin_client, confluent_consume, confluent_produce, wait_for_topic
from tests.support.topic_configs import (
    INVALID,
    INVALID_TOGETHER,
    KAFKA_TOPIC_CONFIGS,
    REFUSED_BY_DESIGN,
    VALID_NON_DEFAULT,
)
from tests.support.wire import WireClient
from tests.support.workload import make_workload

BROKER_DELETE_DELAY_MS = "45000"  # log.segment.delete.delay.ms, the synonym of file.delete.delay.ms

# The configs that act on a diskless topic (KIP-1163: retention deletes batches, produce validation
# applies the size and timestamp rules), with a valid non-default value each.
DISKLESS_CONFIGS = {
    "retention.ms": "86400000",
    "retention.bytes": "1073741824",
    "cleanup.policy": "delete",
    "max.message.bytes": "2097152",
    "message.timestamp.type": "CreateTime",
    "message.timestamp.before.max.ms": "86400000",
    "message.timestamp.after.max.ms": "7200000",
    "min.insync.replicas": "2",
}
# The configs only classic logs act on: stored on a diskless topic, which has no local segments.
CLASSIC_ONLY = (
    "segment.bytes",
    "internal.segment.bytes",
    "segment.ms",
    "segment.jitter.ms",
    "segment.index.bytes",
    "index.interval.bytes",
    "flush.messages",
    "flush.ms",
    "file.delete.delay.ms",
)


@pytest.fixture(scope="module")
def config_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    broker = BrokerProcess(
        tmp_path_factory.mktemp("topic-configs") / "broker",
        overrides={"log.segment.delete.delay.ms": BROKER_DELETE_DELAY_MS},
    )
    broker.start()
    try:
        yield broker
    finally:
        died = broker.returncode is not None and not broker.stopped_on_purpose
        broker.close()
        if died:
            print(f"\nbroker died (exit {broker.returncode})\n{broker.log_tail(120)}", file=sys.stderr)


@pytest.fixture
def broker(config_broker: BrokerProcess, request: pytest.FixtureRequest) -> Iterator[BrokerProcess]:
    assert config_broker.is_running(), f"shared broker is down\n{config_broker.log_tail()}"
    yield config_broker
    if getattr(getattr(request.node, "rep_call", None), "failed", False):
        print(f"\n{config_broker!r}\n{config_broker.log_tail(80)}", file=sys.stderr)
    assert config_broker.is_running(), f"the broker died during the test (exit {config_broker.returncode})"


@pytest.fixture
def name(request: pytest.FixtureRequest) -> str:
    base = "".join(c if c.isalnum() else "-" for c in request.node.name)[:60].strip("-")
    return f"{base}-{uuid.uuid4().hex[:6]}"


def create(bootstrap: str, topic: str, configs: Mapping[str, str], partitions: int = 1) -> None:
    admin = admin_client(bootstrap)
    futures = admin.create_topics(
        [NewTopic(topic, num_partitions=partitions, replication_factor=1, config=dict(configs))],
        operation_timeout=30,
        request_timeout=30,
    )
    futures[topic].result(30)
    wait_for_topic(admin, topic, partitions)


def describe(bootstrap: str, topic: str) -> dict[str, ConfigEntry]:
    admin = admin_client(bootstrap)
    resource = ConfigResource(ResourceType.TOPIC, topic)
    return admin.describe_configs([resource], request_timeout=15)[resource].result(15)


def alter(bootstrap: str, topic: str, *changes: tuple[str, str | None, AlterConfigOpType]) -> None:
    admin = admin_client(bootstrap)
    resource = ConfigResource(
        ResourceType.TOPIC,
        topic,
        incremental_configs=[ConfigEntry(n, v, incremental_operation=op) for n, v, op in changes],
    )
    admin.incremental_alter_configs([resource], request_timeout=15)[resource].result(15)


def refusal(call: Any) -> KafkaError:
    """The error of an admin call that must fail."""
    with pytest.raises(KafkaException) as info:
        call()
    return info.value.args[0]


def source(entry: ConfigEntry) -> ConfigSource:
    return ConfigSource(entry.source)


def test_a_classic_topic_takes_every_kafka_topic_config(broker: BrokerProcess, name: str) -> None:
    """Every Kafka 4.x topic config Shoal takes a non-default value of, at once: each is described
    back as Kafka prints it, from DYNAMIC_TOPIC_CONFIG, and the topic takes records."""
    create(broker.bootstrap, name, {n: sent for n, (sent, _) in VALID_NON_DEFAULT.items()}, partitions=2)
    described = describe(broker.bootstrap, name)
    wrong = {
        n: (described[n].value, source(described[n]).name) if n in described else "missing"
        for n, (_, expected) in VALID_NON_DEFAULT.items()
        if n not in described
        or described[n].value != expected
        or source(described[n]) is not ConfigSource.DYNAMIC_TOPIC_CONFIG
    }
    assert not wrong, f"described differently from what was set: {wrong}"
    # The ones left unset are described too, with Kafka's defaults.
    assert (described["compression.type"].value, source(described["compression.type"])) == (
        "producer",
        ConfigSource.DEFAULT_CONFIG,
    )
    assert described["preallocate"].value == "false" and described["diskless.enable"].value == "false"

    # min.insync.replicas=2 on a single replica: Kafka caps it at the replication factor, so acks=all
    # produces succeed; LogAppendTime stamps the broker's time.
    before = int(time.time() * 1000)
    sent = make_workload(200, 2, "all-configs", seed=3)
    confluent_produce(broker.bootstrap, name, sent, config={"acks": "all"})
    received = confluent_consume(broker.bootstrap, name, range(2), len(sent))
    assert sorted(map(repr, (r.value for r in received))) == sorted(map(repr, (s.value for s in sent)))
    assert all(r.timestamp >= before for r in received), "LogAppendTime not applied"


def test_unset_configs_describe_kafkas_defaults_with_their_source(broker: BrokerProcess, name: str) -> None:
    """A topic without configs: each Kafka topic config (not the internal one) is described with
    Kafka's default, from DEFAULT_CONFIG, or from STATIC_BROKER_CONFIG where the operator set the
    broker synonym (``log.segment.delete.delay.ms`` here)."""
    create(broker.bootstrap, name, {})
    described = describe(broker.bootstrap, name)
    assert "internal.segment.bytes" not in described, "an internal config is listed only when set"
    for config, (_, default) in KAFKA_TOPIC_CONFIGS.items():
        if config == "internal.segment.bytes":
            continue
        entry = described[config]
        if config == "file.delete.delay.ms":
            assert (entry.value, source(entry)) == (BROKER_DELETE_DELAY_MS, ConfigSource.STATIC_BROKER_CONFIG)
            # Kafka's synonyms (the client keeps one entry per name: the last, the default).
            assert list(entry.synonyms) == ["log.segment.delete.delay.ms"], entry.synonyms
        else:
            assert (entry.value, source(entry)) == (default, ConfigSource.DEFAULT_CONFIG), config


def test_describe_configs_on_the_wire_types_docs_and_synonyms(broker: BrokerProcess, name: str) -> None:
    """DescribeConfigs v4 with synonyms and documentation, raw: Kafka's type ids (DOUBLE, LIST),
    Java's printing of a double and an empty list, and the synonyms Kafka lists (the topic's own
    value, the operator's broker value, the broker default), highest priority first."""
    from kio.schema.describe_configs.v4.request import DescribeConfigsRequest, DescribeConfigsResource
    from kio.schema.describe_configs.v4.response import DescribeConfigsResponse
    from kio.static.primitive import i8

    create(broker.bootstrap, name, {"retention.ms": "3600000"})
    keys = (
        "min.cleanable.dirty.ratio",
        "follower.replication.throttled.replicas",
        "file.delete.delay.ms",
        "retention.ms",
        "delete.retention.ms",
    )
    request = DescribeConfigsRequest(
        resources=(
            DescribeConfigsResource(resource_type=i8(2), resource_name=name, configuration_keys=keys),
        ),
        include_synonyms=True,
        include_documentation=True,
    )
    with WireClient(broker.port) as client:
        (result,) = client.request(request, DescribeConfigsResponse).results
    entries = {c.name: c for c in result.configs}
    assert set(entries) == set(keys)
    got = {n: (c.value, int(c.config_source), int(c.config_type)) for n, c in entries.items()}
    assert got == {
        "min.cleanable.dirty.ratio": ("0.5", 5, 6),
        "follower.replication.throttled.replicas": ("", 5, 7),
        "file.delete.delay.ms": (BROKER_DELETE_DELAY_MS, 4, 5),
        "retention.ms": ("3600000", 1, 5),
        "delete.retention.ms": ("86400000", 5, 5),
    }
    synonyms = {n: [(s.name, s.value, int(s.source)) for s in c.synonyms] for n, c in entries.items()}
    assert synonyms["file.delete.delay.ms"] == [
        ("log.segment.delete.delay.ms", BROKER_DELETE_DELAY_MS, 4),
        ("log.segment.delete.delay.ms", "60000", 5),
    ]
    assert synonyms["retention.ms"] == [("retention.ms", "3600000", 1), ("log.retention.ms", "604800000", 5)]
    # As in Kafka, the cleaner's topic configs have the log.cleaner.* broker configs as synonyms.
    assert synonyms["delete.retention.ms"] == [("log.cleaner.delete.retention.ms", "86400000", 5)]
    assert synonyms["min.cleanable.dirty.ratio"] == [("log.cleaner.min.cleanable.ratio", "0.5", 5)]
    assert all(c.documentation for c in entries.values())
    assert "compacted log" in entries["delete.retention.ms"].documentation


def test_incremental_alter_configs_sets_appends_deletes_and_refuses(broker: BrokerProcess, name: str) -> None:
    create(broker.bootstrap, name, {"delete.retention.ms": "1000"})
    alter(
        broker.bootstrap,
        name,
        ("min.cleanable.dirty.ratio", "0.75", AlterConfigOpType.SET),
        ("delete.retention.ms", "2000", AlterConfigOpType.SET),
        ("leader.replication.throttled.replicas", "0:1", AlterConfigOpType.APPEND),
        ("segment.index.bytes", "65536", AlterConfigOpType.SET),
    )
    alter(broker.bootstrap, name, ("leader.replication.throttled.replicas", "1:1", AlterConfigOpType.APPEND))
    described = describe(broker.bootstrap, name)
    for config, value in {
        "min.cleanable.dirty.ratio": "0.75",
        "delete.retention.ms": "2000",
        "leader.replication.throttled.replicas": "0:1,1:1",
        "segment.index.bytes": "65536",
    }.items():
        assert (described[config].value, source(described[config])) == (
            value,
            ConfigSource.DYNAMIC_TOPIC_CONFIG,
        )

    err = refusal(
        lambda: alter(broker.bootstrap, name, ("min.cleanable.dirty.ratio", "1.01", AlterConfigOpType.SET))
    )
    assert err.code() == KafkaError.INVALID_CONFIG
    assert (
        "Invalid value 1.01 for configuration min.cleanable.dirty.ratio: Value must be no more than 1"
        in err.str()
    )
    err = refusal(
        lambda: alter(
            broker.bootstrap,
            name,
            ("max.compaction.lag.ms", "500", AlterConfigOpType.SET),
            ("min.compaction.lag.ms", "600", AlterConfigOpType.SET),
        )
    )
    assert err.code() == KafkaError.INVALID_CONFIG
    assert (
        "conflict topic config setting min.compaction.lag.ms (600) > max.compaction.lag.ms (500)" in err.str()
    )
    assert describe(broker.bootstrap, name)["min.cleanable.dirty.ratio"].value == "0.75"

    alter(broker.bootstrap, name, ("min.cleanable.dirty.ratio", None, AlterConfigOpType.DELETE))
    entry = describe(broker.bootstrap, name)["min.cleanable.dirty.ratio"]
    assert (entry.value, source(entry)) == ("0.5", ConfigSource.DEFAULT_CONFIG)


REFUSALS = {**INVALID, **REFUSED_BY_DESIGN}


@pytest.mark.parametrize(("config", "value"), sorted(REFUSALS))
def test_an_invalid_value_is_refused_with_kafkas_message(
    broker: BrokerProcess, name: str, config: str, value: str
) -> None:
    """CreateTopics and IncrementalAlterConfigs answer INVALID_CONFIG with Kafka's message (or, for a
    value Shoal does not do yet, one that says so); nothing is created or changed."""
    message = REFUSALS[(config, value)]
    err = refusal(lambda: create(broker.bootstrap, name, {config: value}))
    assert err.code() == KafkaError.INVALID_CONFIG, err
    assert message in err.str(), err.str()
    assert name not in admin_client(broker.bootstrap).list_topics(timeout=10).topics

    existing = f"{name}-x"
    create(broker.bootstrap, existing, {})
    before = {n: e.value for n, e in describe(broker.bootstrap, existing).items()}
    err = refusal(lambda: alter(broker.bootstrap, existing, (config, value, AlterConfigOpType.SET)))
    assert err.code() == KafkaError.INVALID_CONFIG, err
    assert message in err.str(), err.str()
    assert {n: e.value for n, e in describe(broker.bootstrap, existing).items()} == before


@pytest.mark.parametrize(("configs", "message"), INVALID_TOGETHER)
def test_kafkas_cross_config_rules(
    broker: BrokerProcess, name: str, configs: dict[str, str], message: str
) -> None:
    err = refusal(lambda: create(broker.bootstrap, name, configs))
    assert err.code() == KafkaError.INVALID_CONFIG and message in err.str(), err


def test_a_diskless_topic_takes_the_configs_that_apply_to_it(broker: BrokerProcess, name: str) -> None:
    """The configs diskless topics act on are described back and the topic takes records; the
    classic-only configs (segments, indexes, flushing) are stored without breaking its creation."""
    create(broker.bootstrap, name, {"diskless.enable": "true", **DISKLESS_CONFIGS}, partitions=2)
    described = describe(broker.bootstrap, name)
    assert described["diskless.enable"].value == "true"
    for config, value in DISKLESS_CONFIGS.items():
        assert (described[config].value, source(described[config])) == (
            value,
            ConfigSource.DYNAMIC_TOPIC_CONFIG,
        )
    sent = make_workload(200, 2, "diskless-configs", seed=4, base_timestamp=int(time.time() * 1000) - 60_000)
    confluent_produce(broker.bootstrap, name, sent, config={"acks": "all"})
    received = confluent_consume(broker.bootstrap, name, range(2), len(sent))
    assert sorted(map(repr, (r.value for r in received))) == sorted(map(repr, (s.value for s in sent)))

    other = f"{name}-classic-only"
    classic_only = {c: VALID_NON_DEFAULT[c][0] for c in CLASSIC_ONLY}
    create(broker.bootstrap, other, {"diskless.enable": "true", **classic_only})
    described = describe(broker.bootstrap, other)
    assert {c: described[c].value for c in CLASSIC_ONLY} == {c: VALID_NON_DEFAULT[c][1] for c in CLASSIC_ONLY}


def test_kafka_python_creates_a_topic_with_delete_retention_ms(broker: BrokerProcess, name: str) -> None:
    """kafka-python's KafkaAdminClient: ``delete.retention.ms`` (which used to be an unknown topic
    config) is taken; an invalid value raises Kafka's InvalidConfigurationError with its message."""
    from kafka.admin import KafkaAdminClient
    from kafka.errors import InvalidConfigurationError

    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, client_id="topic-configs-test")
    try:
        admin.create_topics(
            {
                name: {
                    "num_partitions": 1,
                    "replication_factor": 1,
                    "configs": {"delete.retention.ms": "3600000"},
                }
            }
        )
        with pytest.raises(InvalidConfigurationError, match="Value must be at least 0"):
            admin.create_topics(
                {
                    f"{name}-bad": {
                        "num_partitions": 1,
                        "replication_factor": 1,
                        "configs": {"delete.retention.ms": "-1"},
                    }
                }
            )
    finally:
        admin.close()
    wait_for_topic(admin_client(broker.bootstrap), name, 1)
    entry = describe(broker.bootstrap, name)["delete.retention.ms"]
    assert (entry.value, source(entry)) == ("3600000", ConfigSource.DYNAMIC_TOPIC_CONFIG)
