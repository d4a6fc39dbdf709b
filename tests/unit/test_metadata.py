"""Metadata records, the SQLite metadata log and lease, the image, the cache and the controller.

Everything runs against real SQLite files in tmp_path.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from shoal.config import Config
from shoal.metadata.cache import MetadataCache
from shoal.metadata.controller import (
    PRODUCER_ID_BLOCK_SIZE,
    Controller,
    NewTopic,
    validate_topic_name,
)
from shoal.metadata.image import MetadataImage
from shoal.metadata.log import FencedControllerError
from shoal.metadata.records import (
    ConfigRecord,
    PartitionRecord,
    ProducerIdsRecord,
    RegisterBrokerRecord,
    RemoveTopicRecord,
    TopicRecord,
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


def make_controller(
    store: SqliteMetadataStore, brokers: tuple[int, ...] = (1,), **raw: str
) -> tuple[Controller, MetadataCache]:
    config = Config.from_raw({"node.id": "1", "diskless.system.enable": "true", **raw})
    cache = MetadataCache(store)
    controller = Controller(store, config, cache.catch_up)
    for node in brokers:
        controller.register_broker(node, f"host{node}", 9092, None)
    cache.catch_up()
    return controller, cache


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
    RemoveTopicRecord(TOPIC_ID),
    ConfigRecord(ConfigRecord.TOPIC, "orders", "retention.ms", "1000"),
    ConfigRecord(ConfigRecord.BROKER, "1", "log.retention.ms", None),
    RegisterBrokerRecord(1, "broker-1.local", 9092, "az-1", uuid.UUID(int=42)),
    RegisterBrokerRecord(2, "broker-2.local", 19092, None),
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


# --------------------------------------------------------------------------- log


def test_append_and_read_in_order(store: SqliteMetadataStore) -> None:
    epoch = store.acquire_lease(1, 30_000)
    assert store.read(0) == []
    assert store.append(ALL_RECORDS[:3], epoch) == 2
    assert store.append(ALL_RECORDS[3:], epoch) == len(ALL_RECORDS) - 1
    assert store.read(0) == list(enumerate(ALL_RECORDS))
    assert store.read(4) == list(enumerate(ALL_RECORDS))[4:]
    assert store.read(0, limit=2) == list(enumerate(ALL_RECORDS))[:2]
    assert store.read(len(ALL_RECORDS)) == []


def test_lease_is_exclusive_and_reacquiring_bumps_the_epoch(store: SqliteMetadataStore) -> None:
    assert store.acquire_lease(1, 30_000) == 1
    assert store.acquire_lease(2, 30_000) is None  # node 1's lease is still valid
    assert store.acquire_lease(1, 30_000) == 2  # a restart of node 1 fences its old epoch
    assert store.renew_lease(1, 2, 30_000)
    assert not store.renew_lease(1, 1, 30_000)
    assert not store.renew_lease(2, 2, 30_000)


def test_expired_lease_can_be_taken_over(store: SqliteMetadataStore) -> None:
    assert store.acquire_lease(1, -1_000) == 1  # already expired
    assert store.acquire_lease(2, 30_000) == 2
    assert not store.renew_lease(1, 1, 30_000)
    assert store.acquire_lease(1, 30_000) is None


def test_append_under_stale_epoch_is_fenced_and_writes_nothing(store: SqliteMetadataStore) -> None:
    with pytest.raises(FencedControllerError):
        store.append([ProducerIdsRecord(1, 1000)], 1)  # no lease at all yet
    old = store.acquire_lease(1, 30_000)
    store.append([ProducerIdsRecord(1, 1000)], old)
    new = store.acquire_lease(1, 30_000)
    assert new == old + 1
    with pytest.raises(FencedControllerError, match="fenced"):
        store.append([ProducerIdsRecord(1, 2000), ProducerIdsRecord(1, 3000)], old)
    assert store.read(0) == [(0, ProducerIdsRecord(1, 1000))]
    assert store.append([ProducerIdsRecord(1, 2000)], new) == 1


def test_cluster_id_is_created_once_and_survives_reopen(db: Path) -> None:
    first = SqliteMetadataStore(db)
    cluster_id = first.cluster_id()
    assert re.fullmatch(r"[A-Za-z0-9_-]{22}", cluster_id)
    assert first.cluster_id() == cluster_id
    first.close()
    second = SqliteMetadataStore(db)
    try:
        assert second.cluster_id() == cluster_id
    finally:
        second.close()
    other = SqliteMetadataStore(db.parent / "other.db")
    try:
        assert other.cluster_id() != cluster_id
    finally:
        other.close()


def test_log_and_lease_survive_reopen(db: Path) -> None:
    first = SqliteMetadataStore(db)
    epoch = first.acquire_lease(1, 30_000)
    first.append([TopicRecord("t", TOPIC_ID)], epoch)
    first.close()
    second = SqliteMetadataStore(db)
    try:
        assert second.read(0) == [(0, TopicRecord("t", TOPIC_ID))]
        assert second.acquire_lease(2, 30_000) is None
        assert second.acquire_lease(1, 30_000) == epoch + 1
    finally:
        second.close()


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


# --------------------------------------------------------------------------- cache


def test_cache_catch_up_follows_the_log(store: SqliteMetadataStore, db: Path) -> None:
    cache = MetadataCache(store)
    assert cache.catch_up().offset == -1
    epoch = store.acquire_lease(1, 30_000)
    store.append([TopicRecord("a", TOPIC_ID), PartitionRecord(TOPIC_ID, 0, (1,), (1,), 1)], epoch)
    image = cache.catch_up()
    assert image is cache.image and image.offset == 1 and list(image.topic("a").partitions) == [0]
    assert cache.catch_up() is image  # nothing new: same image

    # Another process tailing the same database file sees the same records.
    other_store = SqliteMetadataStore(db)
    try:
        other = MetadataCache(other_store)
        store.append([RemoveTopicRecord(TOPIC_ID)], epoch)
        assert other.catch_up().topic("a") is None
        assert other.image.offset == cache.catch_up().offset == 2
    finally:
        other_store.close()


def test_cache_catch_up_reads_past_one_page(store: SqliteMetadataStore) -> None:
    epoch = store.acquire_lease(1, 30_000)
    store.append([ProducerIdsRecord(1, i) for i in range(1, 10_006)], epoch)  # read() pages by 10000
    image = MetadataCache(store).catch_up()
    assert image.offset == 10_004
    assert image.next_producer_id == 10_005


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
        ({"cleanup.policy": "compact"}, "compacted topics are not supported by this Shoal version yet"),
        ({"cleanup.policy": "delete,compact"}, "compacted topics are not supported"),
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


def test_second_node_cannot_become_controller_while_lease_is_held(store: SqliteMetadataStore) -> None:
    make_controller(store)
    with pytest.raises(RuntimeError, match="lease"):
        Controller(store, Config.from_raw({"node.id": "2"}), MetadataCache(store).catch_up)


def test_producer_id_blocks_are_disjoint_across_calls_and_reopen(db: Path) -> None:
    first_store = SqliteMetadataStore(db)
    first, _ = make_controller(first_store)
    blocks = [first.allocate_producer_ids() for _ in range(3)]
    assert blocks == [(i * PRODUCER_ID_BLOCK_SIZE, PRODUCER_ID_BLOCK_SIZE) for i in range(3)]

    # The broker restarts: a new store on the same file and a new controller (new epoch).
    second_store = SqliteMetadataStore(db)
    try:
        second, _ = make_controller(second_store)
        assert second.epoch == first.epoch + 1
        blocks.append(second.allocate_producer_ids())
        # The old controller instance is fenced: it can no longer hand out (overlapping) blocks.
        with pytest.raises(FencedControllerError):
            first.allocate_producer_ids()
        blocks.append(second.allocate_producer_ids())
    finally:
        first_store.close()
        second_store.close()
    ids = [set(range(start, start + size)) for start, size in blocks]
    assert sum(len(s) for s in ids) == len(set().union(*ids)) == 5 * PRODUCER_ID_BLOCK_SIZE
