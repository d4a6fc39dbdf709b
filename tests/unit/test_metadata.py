"""Metadata records, the image and the controller's logic.

The controller runs on a real SQLite file in tmp_path. The metadata store's contract (log, lease,
cluster id, the cache tailing it, fencing across reopen) is in test_metadata_store_conformance.py,
run on every backend.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from shoal.config import Config
from shoal.metadata.cache import MetadataCache
from shoal.metadata.controller import (
    Controller,
    NewTopic,
    validate_topic_name,
)
from shoal.metadata.image import MetadataImage
from shoal.metadata.log import MetadataConflictError
from shoal.metadata.records import (
    ConfigRecord,
    FenceBrokerRecord,
    PartitionChangeRecord,
    PartitionRecord,
    ProducerIdsRecord,
    RegisterBrokerRecord,
    RemoveTopicRecord,
    TopicRecord,
    UnfenceBrokerRecord,
    decode_record,
    encode_record,
)
from shoal.protocol.errors import ErrorCode, KafkaError
from shoal.store.sqlite.metadata_log import SqliteMetadataStore

TOPIC_ID = uuid.UUID("11111111-2222-3333-4444-555555555555")
OTHER_ID = uuid.UUID("66666666-7777-8888-9999-000000000000")
DISKLESS = {"diskless.enable": "true"}


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "meta" / "shoal.db"


@pytest.fixture
def store(db: Path):
    s = SqliteMetadataStore(db)
    yield s
    s.close()


def add_broker(
    store: SqliteMetadataStore, node_id: int, rack: str | None = None, fenced: bool = False
) -> int:
    """Put a broker in the image as the controller's fencing would (right after the log's end)."""
    last = MetadataCache(store).catch_up().offset
    return store.append(
        [RegisterBrokerRecord(node_id, f"host{node_id}", 9092, rack, fenced=fenced)], last, node_id
    )


def make_controller(
    store: SqliteMetadataStore, brokers: tuple[int, ...] = (1,), **raw: str
) -> tuple[Controller, MetadataCache]:
    config = Config.from_raw({"node.id": "1", "diskless.system.enable": "true", **raw})
    cache = MetadataCache(store)
    for node in brokers:
        add_broker(store, node)
    cache.catch_up()
    return Controller(store, config, cache.catch_up), cache


@contextmanager
def kafka_error(code: ErrorCode, match: str | None = None) -> Iterator[pytest.ExceptionInfo[KafkaError]]:
    """pytest.raises for a KafkaError with the given code (and message pattern)."""
    with pytest.raises(KafkaError, match=match) as info:
        yield info
    assert info.value.code == code, (info.value.code, info.value.message)


# --------------------------------------------------------------------------- records

ALL_RECORDS = [
    TopicRecord("orders", TOPIC_ID),
    PartitionRecord(TOPIC_ID, 3, (1, 2, 3), (1, 2), 1, leader_epoch=4, partition_epoch=7),
    PartitionChangeRecord(TOPIC_ID, 3, isr=(1,), leader=1, offline_replicas=(2,)),
    PartitionChangeRecord(TOPIC_ID, 3, replicas=(1, 2, 4), adding_replicas=(4,), removing_replicas=(3,)),
    RemoveTopicRecord(TOPIC_ID),
    ConfigRecord(ConfigRecord.TOPIC, "orders", "retention.ms", "1000"),
    ConfigRecord(ConfigRecord.BROKER, "1", "log.retention.ms", None),
    RegisterBrokerRecord(1, "broker-1.local", 9092, "az-1", uuid.UUID(int=42)),
    RegisterBrokerRecord(2, "broker-2.local", 19092, None),
    RegisterBrokerRecord(3, "broker-3.local", 9092, None, fenced=False),
    FenceBrokerRecord(3),
    UnfenceBrokerRecord(3),
    ProducerIdsRecord(1, 5000),
]


@pytest.mark.parametrize("record", ALL_RECORDS, ids=lambda r: type(r).__name__)
def test_record_round_trip(record) -> None:
    type_name, payload = encode_record(record)
    assert type_name == type(record).__name__
    json.loads(payload)  # plain JSON in the log table
    decoded = decode_record(type_name, payload)
    assert decoded == record
    assert type(decoded) is type(record)


def test_decode_fills_defaults_for_fields_missing_from_old_payloads() -> None:
    payload = json.dumps(
        {"topic_id": str(TOPIC_ID), "partition": 0, "replicas": [1], "isr": [1], "leader": 1}
    )
    record = decode_record("PartitionRecord", payload)
    assert record == PartitionRecord(TOPIC_ID, 0, (1,), (1,), 1, 0, 0)
    assert isinstance(record.replicas, tuple)


def test_a_broker_registered_by_an_older_version_starts_fenced() -> None:
    """Payloads written before fencing existed lack ``fenced``: such a broker is fenced, as a new
    registration is, until the controller sees it heartbeat."""
    payload = json.dumps(
        {"node_id": 1, "host": "h", "port": 9092, "rack": None, "incarnation_id": str(TOPIC_ID)}
    )
    assert decode_record("RegisterBrokerRecord", payload) == RegisterBrokerRecord(
        1, "h", 9092, None, TOPIC_ID, True
    )


# The metadata store's contract (log, lease, cluster id) runs on every backend in
# test_metadata_store_conformance.py.


# --------------------------------------------------------------------------- image


def test_image_applies_topic_partitions_and_configs() -> None:
    image = MetadataImage().apply(
        [
            (0, TopicRecord("orders", TOPIC_ID)),
            (1, PartitionRecord(TOPIC_ID, 0, (1, 2), (1,), 1)),
            (2, PartitionRecord(TOPIC_ID, 1, (2, 1), (2, 1), 2, leader_epoch=3, partition_epoch=5)),
            (3, ConfigRecord(ConfigRecord.TOPIC, "orders", "diskless.enable", "true")),
            (4, ConfigRecord(ConfigRecord.TOPIC, "orders", "retention.ms", "1000")),
        ]
    )
    assert image.offset == 4
    topic = image.topic("orders")
    assert topic is not None and image.topics_by_id[TOPIC_ID] is topic
    assert topic.topic_id == TOPIC_ID
    assert sorted(topic.partitions) == [0, 1]
    p1 = topic.partitions[1]
    assert (p1.replicas, p1.isr, p1.leader, p1.leader_epoch, p1.partition_epoch) == ((2, 1), (2, 1), 2, 3, 5)
    assert topic.partitions[0].isr == (1,)
    assert dict(topic.configs) == {"diskless.enable": "true", "retention.ms": "1000"}
    assert topic.is_diskless

    # A later config change and deletion (value None) apply to the existing topic.
    image2 = image.apply(
        [
            (5, ConfigRecord(ConfigRecord.TOPIC, "orders", "retention.ms", None)),
            (6, ConfigRecord(ConfigRecord.TOPIC, "orders", "cleanup.policy", "delete")),
        ]
    )
    assert dict(image2.topic("orders").configs) == {"diskless.enable": "true", "cleanup.policy": "delete"}
    assert image2.topic("orders").partitions == topic.partitions
    # The previous image is untouched (copy on write) and read-only.
    assert dict(image.topic("orders").configs) == {"diskless.enable": "true", "retention.ms": "1000"}
    with pytest.raises(TypeError):
        image2.topics_by_name["x"] = topic  # type: ignore[index]
    with pytest.raises(TypeError):
        image2.topic("orders").configs["x"] = "y"  # type: ignore[index]


def test_image_topic_without_diskless_config_is_classic() -> None:
    image = MetadataImage().apply([(0, TopicRecord("plain", TOPIC_ID))])
    assert not image.topic("plain").is_diskless
    assert image.topic("plain").partitions == {}


def test_image_remove_topic_and_records_for_unknown_topics() -> None:
    image = MetadataImage().apply(
        [
            (0, TopicRecord("a", TOPIC_ID)),
            (1, PartitionRecord(TOPIC_ID, 0, (1,), (1,), 1)),
            (2, TopicRecord("b", OTHER_ID)),
        ]
    )
    image = image.apply(
        [
            (3, RemoveTopicRecord(TOPIC_ID)),
            (4, PartitionRecord(TOPIC_ID, 1, (1,), (1,), 1)),  # topic gone: ignored
            (5, ConfigRecord(ConfigRecord.TOPIC, "a", "retention.ms", "1")),  # ignored
            (6, RemoveTopicRecord(uuid.uuid4())),  # unknown: ignored
        ]
    )
    assert image.offset == 6
    assert image.topic("a") is None and TOPIC_ID not in image.topics_by_id
    assert set(image.topics_by_name) == {"b"} and set(image.topics_by_id) == {OTHER_ID}


def test_image_topic_recreated_in_one_batch_gets_the_new_id() -> None:
    new_id = uuid.uuid4()
    image = MetadataImage().apply(
        [
            (0, TopicRecord("a", TOPIC_ID)),
            (1, PartitionRecord(TOPIC_ID, 0, (1,), (1,), 1)),
            (2, PartitionRecord(TOPIC_ID, 1, (1,), (1,), 1)),
            (3, RemoveTopicRecord(TOPIC_ID)),
            (4, TopicRecord("a", new_id)),
            (5, PartitionRecord(new_id, 0, (1,), (1,), 1)),
        ]
    )
    topic = image.topic("a")
    assert topic.topic_id == new_id and list(topic.partitions) == [0]
    assert set(image.topics_by_id) == {new_id}


def test_image_brokers_broker_configs_and_producer_ids() -> None:
    image = MetadataImage().apply(
        [
            (0, RegisterBrokerRecord(1, "h1", 9092, None)),
            (1, RegisterBrokerRecord(2, "h2", 9093, "az-b")),
            (2, ProducerIdsRecord(1, 2000)),
            (3, ProducerIdsRecord(1, 1000)),  # never goes backwards
            (4, ConfigRecord(ConfigRecord.BROKER, "1", "log.retention.ms", "5")),
        ]
    )
    assert image.next_producer_id == 2000
    assert (image.brokers[2].host, image.brokers[2].port, image.brokers[2].rack) == ("h2", 9093, "az-b")
    assert dict(image.broker_configs["1"]) == {"log.retention.ms": "5"}
    image = image.apply(
        [
            (5, RegisterBrokerRecord(1, "h1-moved", 9192, "az-a")),
            (6, ConfigRecord(ConfigRecord.BROKER, "1", "log.retention.ms", None)),
            (7, ProducerIdsRecord(2, 3000)),
        ]
    )
    assert (image.brokers[1].host, image.brokers[1].port, image.brokers[1].rack) == ("h1-moved", 9192, "az-a")
    assert dict(image.broker_configs["1"]) == {}
    assert image.next_producer_id == 3000
    assert image.apply([]).offset == 7


def test_image_fences_and_unfences_brokers() -> None:
    inc = uuid.UUID(int=7)
    image = MetadataImage().apply(
        [
            (0, RegisterBrokerRecord(1, "h1", 9092, "az-a", inc)),  # registered fenced by default
            (1, RegisterBrokerRecord(2, "h2", 9092, None, fenced=False)),
            (2, RegisterBrokerRecord(3, "h3", 9092, None, fenced=False)),
        ]
    )
    assert image.brokers[1].fenced and image.brokers[1].incarnation_id == inc
    assert [b.node_id for b in image.alive_brokers()] == [2, 3]
    image = image.apply([(3, UnfenceBrokerRecord(1)), (4, FenceBrokerRecord(3)), (5, FenceBrokerRecord(9))])
    assert [b.node_id for b in image.alive_brokers()] == [1, 2]
    assert image.brokers[3].fenced and 9 not in image.brokers  # fencing an unknown broker is ignored
    assert (image.brokers[1].host, image.brokers[1].rack, image.brokers[1].incarnation_id) == (
        "h1",
        "az-a",
        inc,
    )
    # A new registration replaces the broker, fenced again until it heartbeats.
    image = image.apply([(6, RegisterBrokerRecord(1, "h1", 9092, "az-a"))])
    assert image.brokers[1].fenced and image.brokers[1].incarnation_id != inc
    assert [b.node_id for b in image.alive_brokers()] == [2]


# --------------------------------------------------------------------------- controller


def test_create_topic(store: SqliteMetadataStore) -> None:
    controller, cache = make_controller(store, **{"num.partitions": "3"})
    created, offset = controller.create_topic(NewTopic("orders", configs={"diskless.enable": "TRUE"}))
    assert created.name == "orders" and created.num_partitions == 3 and created.replication_factor == 1
    assert created.is_diskless and dict(created.configs) == {"diskless.enable": "true"}
    image = cache.catch_up()
    assert image.offset == offset
    topic = image.topic("orders")
    assert topic.topic_id == created.topic_id and topic.is_diskless
    assert {p: (t.replicas, t.isr, t.leader) for p, t in topic.partitions.items()} == {
        0: ((1,), (1,), 1),
        1: ((1,), (1,), 1),
        2: ((1,), (1,), 1),
    }


def test_create_topic_with_explicit_partitions_and_replication(store: SqliteMetadataStore) -> None:
    controller, cache = make_controller(store, brokers=(1, 2, 3))
    created, _ = controller.create_topic(NewTopic("t", 4, 2, configs=DISKLESS))
    assert (created.num_partitions, created.replication_factor) == (4, 2)
    partitions = cache.catch_up().topic("t").partitions
    assert [partitions[p].replicas for p in range(4)] == [(1, 2), (2, 3), (3, 1), (1, 2)]
    assert [partitions[p].leader for p in range(4)] == [1, 2, 3, 1]


@pytest.mark.parametrize(
    "name",
    ["", ".", "..", "x" * 250, "has space", "slash/name", "tab\tname", "ünïcode", "star*", "colon:x"],
)
def test_create_topic_rejects_illegal_names(store: SqliteMetadataStore, name: str) -> None:
    controller, cache = make_controller(store)
    with kafka_error(ErrorCode.invalid_topic_exception):
        controller.create_topic(NewTopic(name, configs=DISKLESS))
    assert cache.catch_up().topics_by_name == {}


def test_legal_topic_names() -> None:
    for name in ["a", "x" * 249, "A-Za-z0-9._-", "...", "_internal"]:
        validate_topic_name(name)


def test_topic_name_with_trailing_newline_is_illegal() -> None:
    with kafka_error(ErrorCode.invalid_topic_exception):
        validate_topic_name("orders\n")


def test_create_topic_rejects_duplicates(store: SqliteMetadataStore) -> None:
    controller, cache = make_controller(store)
    controller.create_topic(NewTopic("orders", configs=DISKLESS))
    before = cache.catch_up().offset
    with kafka_error(ErrorCode.topic_already_exists, "Topic 'orders' already exists."):
        controller.create_topic(NewTopic("orders", configs=DISKLESS))
    assert cache.catch_up().offset == before


def test_create_topic_rejects_names_colliding_on_dot_and_underscore(store: SqliteMetadataStore) -> None:
    controller, _ = make_controller(store)
    controller.create_topic(NewTopic("metrics.eu", configs=DISKLESS))
    with kafka_error(ErrorCode.invalid_topic_exception, "collides"):
        controller.create_topic(NewTopic("metrics_eu", configs=DISKLESS))


@pytest.mark.parametrize(
    ("configs", "message"),
    [
        (
            {**DISKLESS, "retention.ms": "soon"},
            "Invalid value soon for configuration retention.ms: Not a number of type LONG",
        ),
        ({**DISKLESS, "cleanup.policy": "forever"}, "String must be one of: compact, delete"),
        ({**DISKLESS, "max.message.bytes": "-5"}, "Value must be at least 0"),
        ({**DISKLESS, "no.such.config": "1"}, "Unknown topic config name: no.such.config"),
        ({**DISKLESS, "retention.ms": None}, "value must not be null"),
        ({"diskless.enable": "maybe"}, "Expected value to be either true or false"),
        # Values asking for what Shoal does not do yet are refused, not accepted and ignored.
        ({**DISKLESS, "compression.type": "zstd"}, "only compression.type=producer is supported"),
    ],
)
def test_create_topic_rejects_invalid_configs(store: SqliteMetadataStore, configs, message: str) -> None:
    controller, cache = make_controller(store)
    with kafka_error(ErrorCode.invalid_config) as info:
        controller.create_topic(NewTopic("t", configs=configs))
    assert message in info.value.message
    assert cache.catch_up().topic("t") is None


@pytest.mark.parametrize("configs", [{}, {"diskless.enable": "false"}, {"retention.ms": "100"}])
def test_classic_is_the_default_kind(store: SqliteMetadataStore, configs) -> None:
    controller, cache = make_controller(store)
    created, _ = controller.create_topic(NewTopic("classic", configs=configs))
    assert not created.is_diskless
    topic = cache.catch_up().topic("classic")
    assert topic is not None and not topic.is_diskless


def test_diskless_topic_refused_when_diskless_is_disabled(store: SqliteMetadataStore) -> None:
    controller, cache = make_controller(store, **{"diskless.system.enable": "false"})
    with kafka_error(ErrorCode.invalid_config, "diskless.system.enable=true"):
        controller.create_topic(NewTopic("t", configs=DISKLESS))
    assert cache.catch_up().topic("t") is None


@pytest.mark.parametrize("partitions", [0, -2])
def test_non_positive_partition_count_is_refused(store: SqliteMetadataStore, partitions: int) -> None:
    controller, _ = make_controller(store)
    with kafka_error(ErrorCode.invalid_partitions):
        controller.create_topic(NewTopic("t", partitions, configs=DISKLESS))


@pytest.mark.parametrize("replication", [0, -3, 2])
def test_bad_replication_factor_is_refused(store: SqliteMetadataStore, replication: int) -> None:
    controller, cache = make_controller(store)  # one registered broker
    with kafka_error(ErrorCode.invalid_replication_factor):
        controller.create_topic(NewTopic("t", 1, replication, configs=DISKLESS))
    assert cache.catch_up().topic("t") is None


def test_replication_factor_above_broker_count_message(store: SqliteMetadataStore) -> None:
    controller, _ = make_controller(store, brokers=(1, 2))
    with kafka_error(ErrorCode.invalid_replication_factor, "only 2 broker\\(s\\) are registered"):
        controller.create_topic(NewTopic("t", 1, 3, configs=DISKLESS))


def test_manual_assignments(store: SqliteMetadataStore) -> None:
    controller, cache = make_controller(store, brokers=(1, 2))
    created, _ = controller.create_topic(NewTopic("t", assignments={1: [1, 2], 0: [2, 1]}, configs=DISKLESS))
    assert (created.num_partitions, created.replication_factor) == (2, 2)
    partitions = cache.catch_up().topic("t").partitions
    assert (partitions[0].replicas, partitions[0].leader) == ((2, 1), 2)
    assert (partitions[1].replicas, partitions[1].leader) == ((1, 2), 1)


@pytest.mark.parametrize(
    ("topic", "code"),
    [
        (NewTopic("t", num_partitions=1, assignments={0: [1]}, configs=DISKLESS), ErrorCode.invalid_request),
        (
            NewTopic("t", replication_factor=1, assignments={0: [1]}, configs=DISKLESS),
            ErrorCode.invalid_request,
        ),
        (NewTopic("t", assignments={0: [1], 2: [1]}, configs=DISKLESS), ErrorCode.invalid_replica_assignment),
        (NewTopic("t", assignments={1: [1]}, configs=DISKLESS), ErrorCode.invalid_replica_assignment),
        (NewTopic("t", assignments={0: [1, 1]}, configs=DISKLESS), ErrorCode.invalid_replica_assignment),
        (NewTopic("t", assignments={0: []}, configs=DISKLESS), ErrorCode.invalid_replica_assignment),
        (NewTopic("t", assignments={0: [1], 1: [7]}, configs=DISKLESS), ErrorCode.invalid_replica_assignment),
    ],
    ids=[
        "with-partitions",
        "with-replication",
        "gap",
        "not-from-zero",
        "duplicate",
        "empty",
        "unknown-broker",
    ],
)
def test_bad_manual_assignments(store: SqliteMetadataStore, topic: NewTopic, code: ErrorCode) -> None:
    controller, cache = make_controller(store, brokers=(1, 2))
    with kafka_error(code):
        controller.create_topic(topic)
    assert cache.catch_up().topic("t") is None


def test_manual_assignments_must_have_one_replica_count(store: SqliteMetadataStore) -> None:
    controller, _ = make_controller(store, brokers=(1, 2))
    with kafka_error(ErrorCode.invalid_replica_assignment):
        controller.create_topic(NewTopic("t", assignments={0: [1], 1: [1, 2]}, configs=DISKLESS))


def test_delete_topic(store: SqliteMetadataStore) -> None:
    controller, cache = make_controller(store)
    created, _ = controller.create_topic(NewTopic("t", 2, configs=DISKLESS))
    controller.delete_topic(created.topic_id)
    image = cache.catch_up()
    assert image.topic("t") is None and created.topic_id not in image.topics_by_id
    with kafka_error(ErrorCode.unknown_topic_id):
        controller.delete_topic(created.topic_id)
    again, _ = controller.create_topic(NewTopic("t", 1, configs=DISKLESS))
    assert again.topic_id != created.topic_id
    assert list(cache.catch_up().topic("t").partitions) == [0]


def test_fenced_brokers_get_no_new_replicas(store: SqliteMetadataStore) -> None:
    controller, cache = make_controller(store, brokers=(1, 2))
    add_broker(store, 3, fenced=True)
    with kafka_error(ErrorCode.invalid_replication_factor, "only 2 broker\\(s\\) are registered"):
        controller.create_topic(NewTopic("t", 1, 3, configs=DISKLESS))
    controller.create_topic(NewTopic("t", 4, 2, configs=DISKLESS))
    partitions = cache.catch_up().topic("t").partitions
    assert [partitions[p].replicas for p in range(4)] == [(1, 2), (2, 1), (1, 2), (2, 1)]
    new, _ = controller.create_partitions("t", 6, None, validate_only=False)
    assert new == [4, 5]
    partitions = cache.catch_up().topic("t").partitions
    assert {b for p in partitions.values() for b in p.replicas} == {1, 2}


def test_replicated_classic_topics_start_with_every_alive_replica_in_sync(store: SqliteMetadataStore) -> None:
    controller, cache = make_controller(store, brokers=(1, 2, 3))
    controller.create_topic(NewTopic("c", 3, 3))
    for p in cache.catch_up().topic("c").partitions.values():
        assert sorted(p.replicas) == [1, 2, 3] and p.isr == p.replicas and p.leader == p.replicas[0]
    store.append([FenceBrokerRecord(2)], cache.catch_up().offset, 1)
    controller.create_topic(NewTopic("m", assignments={0: [2, 3]}))
    (p,) = cache.catch_up().topic("m").partitions.values()
    assert (p.replicas, p.isr, p.leader) == ((2, 3), (3,), 3)  # a fenced replica is not in sync


def test_two_brokers_deciding_changes_on_one_store(store: SqliteMetadataStore) -> None:
    """Any broker decides topic changes: the second to append after the same image is refused
    (compare-and-append) and decides again on the newer image."""
    first, first_cache = make_controller(store, brokers=(1, 2))
    second_cache = MetadataCache(store)
    race: list[NewTopic] = []

    def second_image() -> MetadataImage:
        """Broker 2 catches up, and broker 1 appends while broker 2 is still deciding."""
        image = second_cache.catch_up()
        if race:
            first.create_topic(race.pop())
        return image

    config = Config.from_raw({"node.id": "2", "diskless.system.enable": "true"})
    second = Controller(store, config, second_image)

    # Both create topics, one after the other.
    first.create_topic(NewTopic("a", 1))
    second.create_topic(NewTopic("b", 1))
    assert set(first_cache.catch_up().topics_by_name) == {"a", "b"}

    # Broker 1 appends between broker 2's catch-up and its append: broker 2 wrote nothing.
    race.append(NewTopic("c", 1))
    before = store.read(0)
    with pytest.raises(MetadataConflictError):
        second.create_topic(NewTopic("d", 2))
    after = store.read(0)
    assert after[: len(before)] == before
    assert {r.name for _, r in after[len(before) :] if isinstance(r, TopicRecord)} == {"c"}
    created, offset = second.create_topic(NewTopic("d", 2))  # the retry decides on the newer image
    assert (
        offset == first_cache.catch_up().offset and first_cache.image.topic("d").topic_id == created.topic_id
    )

    # Both decide to create "e" on the same image: one wins, the other's retry finds it exists.
    race.append(NewTopic("e", 1))
    with pytest.raises(MetadataConflictError):
        second.create_topic(NewTopic("e", 3))
    with kafka_error(ErrorCode.topic_already_exists, "Topic 'e' already exists."):
        second.create_topic(NewTopic("e", 3))
    image = first_cache.catch_up()
    assert sorted(image.topics_by_name) == ["a", "b", "c", "d", "e"]
    assert len(image.topic("e").partitions) == 1  # broker 1's topic, not broker 2's
    with kafka_error(ErrorCode.topic_already_exists):
        first.create_topic(NewTopic("d", 1))
