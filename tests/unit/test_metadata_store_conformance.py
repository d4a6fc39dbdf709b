"""The metadata store contract (log, controller lease, cluster id), run unchanged on every backend.

Each test runs once on an SQLite file and once on a fresh PostgreSQL database (the ``store_url``
fixture), through the factory's ``open_metadata_store_at``: what the broker opens.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator

import pytest

from shoal.config import Config
from shoal.metadata.cache import MetadataCache
from shoal.metadata.controller import PRODUCER_ID_BLOCK_SIZE, Controller
from shoal.metadata.log import FencedControllerError, MetadataStore
from shoal.metadata.records import (
    ConfigRecord,
    PartitionRecord,
    ProducerIdsRecord,
    RegisterBrokerRecord,
    RemoveTopicRecord,
    TopicRecord,
)
from shoal.store.factory import open_metadata_store_at

TOPIC_ID = uuid.UUID("11111111-2222-3333-4444-555555555555")

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


@pytest.fixture
def store(store_url: str) -> Iterator[MetadataStore]:
    s = open_metadata_store_at(store_url)
    yield s
    s.close()


@pytest.fixture
def other_store_url(store_url: str, request: pytest.FixtureRequest) -> str:
    """A second, empty store of the same backend as ``store_url``."""
    if store_url.startswith("sqlite:"):
        return store_url.replace("shoal.db", "other.db")
    return request.getfixturevalue("postgres_server").create_database()


def make_controller(store: MetadataStore) -> tuple[Controller, MetadataCache]:
    config = Config.from_raw({"node.id": "1", "diskless.system.enable": "true"})
    cache = MetadataCache(store)
    controller = Controller(store, config, cache.catch_up)
    controller.register_broker(1, "host1", 9092, None)
    cache.catch_up()
    return controller, cache


# --------------------------------------------------------------------------- log


def test_append_and_read_in_order(store: MetadataStore) -> None:
    epoch = store.acquire_lease(1, 30_000)
    assert epoch is not None
    assert store.read(0) == []
    assert store.append(ALL_RECORDS[:3], epoch) == 2
    assert store.append(ALL_RECORDS[3:], epoch) == len(ALL_RECORDS) - 1
    assert store.read(0) == list(enumerate(ALL_RECORDS))
    assert store.read(4) == list(enumerate(ALL_RECORDS))[4:]
    assert store.read(0, limit=2) == list(enumerate(ALL_RECORDS))[:2]
    assert store.read(len(ALL_RECORDS)) == []


def test_appending_nothing_returns_the_last_offset(store: MetadataStore) -> None:
    epoch = store.acquire_lease(1, 30_000)
    assert epoch is not None
    assert store.append([], epoch) == -1
    store.append(ALL_RECORDS[:2], epoch)
    assert store.append([], epoch) == 1
    assert store.read(0) == list(enumerate(ALL_RECORDS[:2]))


def test_lease_is_exclusive_and_reacquiring_bumps_the_epoch(store: MetadataStore) -> None:
    assert store.acquire_lease(1, 30_000) == 1
    assert store.acquire_lease(2, 30_000) is None  # node 1's lease is still valid
    assert store.acquire_lease(1, 30_000) == 2  # a restart of node 1 fences its old epoch
    assert store.renew_lease(1, 2, 30_000)
    assert not store.renew_lease(1, 1, 30_000)
    assert not store.renew_lease(2, 2, 30_000)


def test_expired_lease_can_be_taken_over(store: MetadataStore) -> None:
    assert store.acquire_lease(1, -1_000) == 1  # already expired
    assert store.acquire_lease(2, 30_000) == 2
    assert not store.renew_lease(1, 1, 30_000)
    assert store.acquire_lease(1, 30_000) is None


def test_renewing_keeps_a_lease_from_expiring(store: MetadataStore) -> None:
    assert store.acquire_lease(1, -1_000) == 1  # expired...
    assert store.renew_lease(1, 1, 30_000)  # ...but renewed before anyone took it
    assert store.acquire_lease(2, 30_000) is None
    assert store.renew_lease(1, 1, -1_000)  # renewed into the past: expired again
    assert store.acquire_lease(2, 30_000) == 2


def test_append_under_stale_epoch_is_fenced_and_writes_nothing(store: MetadataStore) -> None:
    with pytest.raises(FencedControllerError):
        store.append([ProducerIdsRecord(1, 1000)], 1)  # no lease at all yet
    old = store.acquire_lease(1, 30_000)
    assert old is not None
    store.append([ProducerIdsRecord(1, 1000)], old)
    new = store.acquire_lease(1, 30_000)
    assert new == old + 1
    with pytest.raises(FencedControllerError, match="fenced"):
        store.append([ProducerIdsRecord(1, 2000), ProducerIdsRecord(1, 3000)], old)
    with pytest.raises(FencedControllerError):
        store.append([ProducerIdsRecord(1, 2000)], new + 1)  # a future epoch is not the active one either
    assert store.read(0) == [(0, ProducerIdsRecord(1, 1000))]
    assert store.append([ProducerIdsRecord(1, 2000)], new) == 1


def test_cluster_id_is_created_once_and_survives_reopen(store_url: str, other_store_url: str) -> None:
    first = open_metadata_store_at(store_url)
    cluster_id = first.cluster_id()
    assert re.fullmatch(r"[A-Za-z0-9_-]{22}", cluster_id)
    assert first.cluster_id() == cluster_id
    first.close()
    second = open_metadata_store_at(store_url)
    try:
        assert second.cluster_id() == cluster_id
    finally:
        second.close()
    other = open_metadata_store_at(other_store_url)
    try:
        assert other.cluster_id() != cluster_id
    finally:
        other.close()


def test_log_and_lease_survive_reopen(store_url: str) -> None:
    first = open_metadata_store_at(store_url)
    epoch = first.acquire_lease(1, 30_000)
    assert epoch is not None
    first.append([TopicRecord("t", TOPIC_ID)], epoch)
    first.close()
    second = open_metadata_store_at(store_url)
    try:
        assert second.read(0) == [(0, TopicRecord("t", TOPIC_ID))]
        assert second.acquire_lease(2, 30_000) is None
        assert second.acquire_lease(1, 30_000) == epoch + 1
    finally:
        second.close()


def test_record_payloads_round_trip_unusual_strings(store: MetadataStore) -> None:
    epoch = store.acquire_lease(1, 30_000)
    assert epoch is not None
    odd = [
        ConfigRecord(ConfigRecord.TOPIC, "ünïcode-☃", "retention.ms", "quote ' and \" and \\ and \x00 and 😀"),
        RegisterBrokerRecord(7, "h" * 300, 1, ""),
    ]
    store.append(odd, epoch)
    assert store.read(0) == list(enumerate(odd))


# --------------------------------------------------------------------------- cache


def test_cache_catch_up_follows_the_log(store: MetadataStore, store_url: str) -> None:
    cache = MetadataCache(store)
    assert cache.catch_up().offset == -1
    epoch = store.acquire_lease(1, 30_000)
    assert epoch is not None
    store.append([TopicRecord("a", TOPIC_ID), PartitionRecord(TOPIC_ID, 0, (1,), (1,), 1)], epoch)
    image = cache.catch_up()
    assert image is cache.image and image.offset == 1 and list(image.topic("a").partitions) == [0]
    assert cache.catch_up() is image  # nothing new: same image

    # Another broker tailing the same store sees the same records.
    other_store = open_metadata_store_at(store_url)
    try:
        other = MetadataCache(other_store)
        store.append([RemoveTopicRecord(TOPIC_ID)], epoch)
        assert other.catch_up().topic("a") is None
        assert other.image.offset == cache.catch_up().offset == 2
    finally:
        other_store.close()


def test_cache_catch_up_reads_past_one_page(store: MetadataStore) -> None:
    epoch = store.acquire_lease(1, 30_000)
    assert epoch is not None
    store.append([ProducerIdsRecord(1, i) for i in range(1, 10_006)], epoch)  # read() pages by 10000
    image = MetadataCache(store).catch_up()
    assert image.offset == 10_004
    assert image.next_producer_id == 10_005


# --------------------------------------------------------------------------- controller on the store


def test_producer_id_blocks_are_disjoint_across_calls_and_reopen(store_url: str) -> None:
    first_store = open_metadata_store_at(store_url)
    first, _ = make_controller(first_store)
    blocks = [first.allocate_producer_ids() for _ in range(3)]
    assert blocks == [(i * PRODUCER_ID_BLOCK_SIZE, PRODUCER_ID_BLOCK_SIZE) for i in range(3)]

    # The broker restarts: a new store on the same database and a new controller (new epoch).
    second_store = open_metadata_store_at(store_url)
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
