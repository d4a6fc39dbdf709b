"""The metadata store contract (log, compare-and-append, controller lease, broker registry,
cluster id), run unchanged on every backend.

Each test runs once on an SQLite file and once on a fresh PostgreSQL database (the ``store_url``
fixture), through the factory's ``open_metadata_store_at``: what the broker opens.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Iterator

import pytest

from shoal.config import Config
from shoal.metadata.cache import MetadataCache
from shoal.metadata.controller import PRODUCER_ID_BLOCK_SIZE, Controller
from shoal.metadata.log import BrokerRegistration, DuplicateBrokerError, MetadataConflictError, MetadataStore
from shoal.metadata.records import (
    ConfigRecord,
    ControllerChangeRecord,
    FenceBrokerRecord,
    PartitionRecord,
    ProducerIdsRecord,
    RegisterBrokerRecord,
    RemoveTopicRecord,
    TopicRecord,
    UnfenceBrokerRecord,
)
from shoal.store.factory import open_metadata_store_at

TOPIC_ID = uuid.UUID("11111111-2222-3333-4444-555555555555")
INC_A = uuid.UUID(int=0xA)
INC_B = uuid.UUID(int=0xB)
#: A session timeout no test outlives: a registration is fresh for all of it.
LONG_SESSION_MS = 60_000

ALL_RECORDS = [
    TopicRecord("orders", TOPIC_ID),
    PartitionRecord(TOPIC_ID, 3, (1, 2, 3), (1, 2), 1, leader_epoch=4, partition_epoch=7),
    RemoveTopicRecord(TOPIC_ID),
    ConfigRecord(ConfigRecord.TOPIC, "orders", "retention.ms", "1000"),
    ConfigRecord(ConfigRecord.BROKER, "1", "log.retention.ms", None),
    RegisterBrokerRecord(1, "broker-1.local", 9092, "az-1", uuid.UUID(int=42)),
    RegisterBrokerRecord(2, "broker-2.local", 19092, None, fenced=False),
    FenceBrokerRecord(2),
    UnfenceBrokerRecord(2),
    ProducerIdsRecord(1, 5000),
    ControllerChangeRecord(3, 7),
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


def add_broker(store: MetadataStore, node_id: int, host: str = "host1", port: int = 9092) -> int:
    """Put an unfenced broker in the image, as the controller's fencing would (right after the
    log's end); returns its offset."""
    last = MetadataCache(store).catch_up().offset
    return store.append([RegisterBrokerRecord(node_id, host, port, None, fenced=False)], last, node_id)


def make_controller(store: MetadataStore, node_id: int = 1) -> tuple[Controller, MetadataCache]:
    config = Config.from_raw({"node.id": str(node_id), "diskless.system.enable": "true"})
    cache = MetadataCache(store)
    if node_id not in cache.catch_up().brokers:
        add_broker(store, node_id, f"host{node_id}")
    cache.catch_up()
    return Controller(store, config, cache.catch_up), cache


# --------------------------------------------------------------------------- log


def test_append_and_read_in_order(store: MetadataStore) -> None:
    assert store.read(0) == []
    assert store.append(ALL_RECORDS[:3], -1, 1) == 2
    assert store.append(ALL_RECORDS[3:], 2, 2) == len(ALL_RECORDS) - 1
    assert store.read(0) == list(enumerate(ALL_RECORDS))
    assert store.read(4) == list(enumerate(ALL_RECORDS))[4:]
    assert store.read(0, limit=2) == list(enumerate(ALL_RECORDS))[:2]
    assert store.read(len(ALL_RECORDS)) == []


def test_appending_nothing_returns_the_last_offset(store: MetadataStore) -> None:
    assert store.append([], -1, 1) == -1
    store.append(ALL_RECORDS[:2], -1, 1)
    assert store.append([], 1, 1) == 1
    with pytest.raises(MetadataConflictError):  # still a compare: a stale offset is refused
        store.append([], 0, 1)
    assert store.read(0) == list(enumerate(ALL_RECORDS[:2]))


def test_append_after_a_stale_offset_conflicts_and_writes_nothing(store: MetadataStore) -> None:
    with pytest.raises(MetadataConflictError):
        store.append([ProducerIdsRecord(1, 1000)], 0, 1)  # the log is empty: only -1 is current
    assert store.append([ProducerIdsRecord(1, 1000)], -1, 1) == 0
    # Node 2 decided on the empty log too, but node 1 appended first.
    with pytest.raises(MetadataConflictError):
        store.append([ProducerIdsRecord(2, 2000), ProducerIdsRecord(2, 3000)], -1, 2)
    with pytest.raises(MetadataConflictError):
        store.append([ProducerIdsRecord(2, 2000)], 5, 2)  # an offset the log never reached
    assert store.read(0) == [(0, ProducerIdsRecord(1, 1000))]
    # Caught up to offset 0, node 2's append lands right after it.
    assert store.append([ProducerIdsRecord(2, 2000), ProducerIdsRecord(2, 3000)], 0, 2) == 2
    assert store.read(0) == list(
        enumerate([ProducerIdsRecord(1, 1000), ProducerIdsRecord(2, 2000), ProducerIdsRecord(2, 3000)])
    )


def test_a_controller_write_under_a_stale_lease_epoch_is_refused(store: MetadataStore) -> None:
    """The controller's own writes carry its lease epoch: once another node (or its own restart)
    took the lease, they are refused and write nothing."""
    old = store.acquire_lease(1, LONG_SESSION_MS)
    assert old is not None
    assert store.append([ProducerIdsRecord(1, 1000)], -1, 1, lease_epoch=old) == 0
    new = store.acquire_lease(1, LONG_SESSION_MS)  # a restart of node 1 takes a new epoch
    assert new is not None and new != old
    with pytest.raises(MetadataConflictError, match="stale"):
        store.append([ProducerIdsRecord(1, 2000)], 0, 1, lease_epoch=old)
    assert store.append([ProducerIdsRecord(1, 2000)], 0, 1, lease_epoch=new) == 1
    assert [r for _, r in store.read(0)] == [ProducerIdsRecord(1, 1000), ProducerIdsRecord(1, 2000)]


def test_the_lease_does_not_fence_appends(store: MetadataStore) -> None:
    """The lease only elects who runs the periodic duties: any node appends, holder or not."""
    assert store.acquire_lease(1, LONG_SESSION_MS) == 1
    assert store.append([ProducerIdsRecord(2, 1000)], -1, 2) == 0
    assert store.acquire_lease(1, LONG_SESSION_MS) == 2
    assert store.append([ProducerIdsRecord(3, 2000)], 0, 3) == 1


# --------------------------------------------------------------------------- lease


def test_lease_is_exclusive_and_reacquiring_bumps_the_epoch(store: MetadataStore) -> None:
    assert store.acquire_lease(1, 30_000) == 1
    assert store.acquire_lease(2, 30_000) is None  # node 1's lease is still valid
    assert store.acquire_lease(1, 30_000) == 2  # a restart of node 1 ends its old epoch
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


def test_resigning_by_renewing_to_expire_now_frees_the_lease(store: MetadataStore) -> None:
    """What ControllerDuties.stop does: a standby takes over at once, not after the ttl."""
    assert store.acquire_lease(1, LONG_SESSION_MS) == 1
    assert store.renew_lease(1, 1, 0)
    assert store.acquire_lease(2, LONG_SESSION_MS) == 2


# --------------------------------------------------------------------------- cluster id and reopen


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


def test_log_lease_and_registry_survive_reopen(store_url: str) -> None:
    first = open_metadata_store_at(store_url)
    epoch = first.acquire_lease(1, 30_000)
    assert epoch is not None
    first.append([TopicRecord("t", TOPIC_ID)], -1, 1)
    first.register_broker(1, INC_A, "h1", 9092, "az-1", LONG_SESSION_MS)
    first.close()
    second = open_metadata_store_at(store_url)
    try:
        assert second.read(0) == [(0, TopicRecord("t", TOPIC_ID))]
        assert second.acquire_lease(2, 30_000) is None
        assert second.acquire_lease(1, 30_000) == epoch + 1
        assert [(r.node_id, r.incarnation_id, r.host, r.port, r.rack) for r in second.broker_registrations()] == [
            (1, INC_A, "h1", 9092, "az-1")
        ]
        with pytest.raises(MetadataConflictError):
            second.append([TopicRecord("u", uuid.uuid4())], -1, 2)
        assert second.append([RemoveTopicRecord(TOPIC_ID)], 0, 2) == 1
    finally:
        second.close()


def test_record_payloads_round_trip_unusual_strings(store: MetadataStore) -> None:
    odd = [
        ConfigRecord(ConfigRecord.TOPIC, "ünïcode-☃", "retention.ms", "quote ' and \" and \\ and \x00 and 😀"),
        RegisterBrokerRecord(7, "h" * 300, 1, ""),
    ]
    store.append(odd, -1, 1)
    assert store.read(0) == list(enumerate(odd))


# --------------------------------------------------------------------------- broker registry


def test_register_heartbeat_and_list_brokers(store: MetadataStore, store_url: str) -> None:
    assert store.broker_registrations() == []
    store.register_broker(2, INC_B, "h2", 19092, None, LONG_SESSION_MS)
    store.register_broker(1, INC_A, "h1", 9092, "az-1", LONG_SESSION_MS)
    registrations = store.broker_registrations()
    assert [(r.node_id, r.incarnation_id, r.host, r.port, r.rack) for r in registrations] == [
        (1, INC_A, "h1", 9092, "az-1"),
        (2, INC_B, "h2", 19092, None),
    ]
    assert all(isinstance(r, BrokerRegistration) and 0 <= r.heartbeat_age_ms < 5_000 for r in registrations)

    # The age grows on the store's clock until the next heartbeat resets it.
    time.sleep(0.2)
    (aged, _) = store.broker_registrations()
    assert aged.heartbeat_age_ms >= 190
    started = time.monotonic()
    assert store.heartbeat_broker(1, INC_A)
    (fresh, other) = store.broker_registrations()
    assert fresh.heartbeat_age_ms <= (time.monotonic() - started) * 1000 + 5
    assert other.heartbeat_age_ms >= 190  # only node 1's row was touched

    # Registering the same incarnation again is not a takeover (a retried registration).
    store.register_broker(1, INC_A, "h1", 9092, "az-1", LONG_SESSION_MS)
    # Another broker on the same store sees the same registry.
    other_store = open_metadata_store_at(store_url)
    try:
        assert [(r.node_id, r.incarnation_id) for r in other_store.broker_registrations()] == [(1, INC_A), (2, INC_B)]
    finally:
        other_store.close()


def test_a_live_incarnation_at_another_endpoint_is_not_replaced(store: MetadataStore) -> None:
    store.register_broker(1, INC_A, "h1", 9092, None, LONG_SESSION_MS)
    with pytest.raises(DuplicateBrokerError, match="node id 1"):
        store.register_broker(1, INC_B, "h2", 9092, None, LONG_SESSION_MS)
    with pytest.raises(DuplicateBrokerError):
        store.register_broker(1, INC_B, "h1", 9093, None, LONG_SESSION_MS)  # same host, other port
    (registration,) = store.broker_registrations()
    assert (registration.incarnation_id, registration.host, registration.port) == (INC_A, "h1", 9092)
    assert store.heartbeat_broker(1, INC_A)
    assert not store.heartbeat_broker(1, INC_B)


def test_an_expired_incarnation_is_replaced(store: MetadataStore) -> None:
    store.register_broker(1, INC_A, "h1", 9092, None, LONG_SESSION_MS)
    # A session timeout of 0: every registration is already expired, whatever the clock says.
    store.register_broker(1, INC_B, "h2", 9192, "az-2", 0)
    (registration,) = store.broker_registrations()
    assert (registration.incarnation_id, registration.host, registration.port, registration.rack) == (
        INC_B, "h2", 9192, "az-2"
    )
    assert not store.heartbeat_broker(1, INC_A)  # the replaced incarnation learns it lost the node id
    assert store.heartbeat_broker(1, INC_B)


def test_a_new_incarnation_at_the_same_endpoint_takes_over_at_once(store: MetadataStore) -> None:
    """A broker restarted after a crash holds its old host:port bound: the old incarnation is gone."""
    store.register_broker(1, INC_A, "h1", 9092, None, LONG_SESSION_MS)
    store.register_broker(1, INC_B, "h1", 9092, "az-1", LONG_SESSION_MS)
    (registration,) = store.broker_registrations()
    assert (registration.incarnation_id, registration.rack) == (INC_B, "az-1")
    assert not store.heartbeat_broker(1, INC_A)
    assert store.heartbeat_broker(1, INC_B)


def test_unregister_removes_only_the_matching_incarnation(store: MetadataStore) -> None:
    store.register_broker(1, INC_A, "h1", 9092, None, LONG_SESSION_MS)
    store.register_broker(2, INC_A, "h2", 9092, None, LONG_SESSION_MS)
    store.register_broker(1, INC_B, "h1", 9092, None, LONG_SESSION_MS)  # node 1 restarted
    store.unregister_broker(1, INC_A)  # the old incarnation's late clean shutdown: a no-op
    store.unregister_broker(3, INC_A)  # never registered: a no-op
    assert [(r.node_id, r.incarnation_id) for r in store.broker_registrations()] == [(1, INC_B), (2, INC_A)]
    store.unregister_broker(1, INC_B)
    assert [(r.node_id, r.incarnation_id) for r in store.broker_registrations()] == [(2, INC_A)]
    assert not store.heartbeat_broker(1, INC_B)
    # Gone from the registry, the node id is free for anyone at once.
    store.register_broker(1, INC_A, "elsewhere", 1, None, LONG_SESSION_MS)
    assert [(r.node_id, r.host) for r in store.broker_registrations()] == [(1, "elsewhere"), (2, "h2")]


def test_heartbeat_of_an_unknown_broker_is_refused(store: MetadataStore) -> None:
    assert not store.heartbeat_broker(1, INC_A)
    assert store.broker_registrations() == []


# --------------------------------------------------------------------------- cache


def test_cache_catch_up_follows_the_log(store: MetadataStore, store_url: str) -> None:
    cache = MetadataCache(store)
    assert cache.catch_up().offset == -1
    store.append([TopicRecord("a", TOPIC_ID), PartitionRecord(TOPIC_ID, 0, (1,), (1,), 1)], -1, 1)
    image = cache.catch_up()
    assert image is cache.image and image.offset == 1 and list(image.topic("a").partitions) == [0]
    assert cache.catch_up() is image  # nothing new: same image

    # Another broker tailing the same store sees the same records.
    other_store = open_metadata_store_at(store_url)
    try:
        other = MetadataCache(other_store)
        store.append([RemoveTopicRecord(TOPIC_ID)], 1, 1)
        assert other.catch_up().topic("a") is None
        assert other.image.offset == cache.catch_up().offset == 2
    finally:
        other_store.close()


def test_cache_catch_up_reads_past_one_page(store: MetadataStore) -> None:
    store.append([ProducerIdsRecord(1, i) for i in range(1, 10_006)], -1, 1)  # read() pages by 10000
    image = MetadataCache(store).catch_up()
    assert image.offset == 10_004
    assert image.next_producer_id == 10_005


# --------------------------------------------------------------------------- controller on the store


def test_producer_id_blocks_are_disjoint_across_brokers_and_reopen(store_url: str) -> None:
    first_store = open_metadata_store_at(store_url)
    first, _ = make_controller(first_store, 1)
    blocks = [first.allocate_producer_ids() for _ in range(3)]
    assert blocks == [(i * PRODUCER_ID_BLOCK_SIZE, PRODUCER_ID_BLOCK_SIZE) for i in range(3)]

    # A second broker on the same database, then a restart of the first: blocks never overlap.
    second_store = open_metadata_store_at(store_url)
    restarted_store = open_metadata_store_at(store_url)
    try:
        second, _ = make_controller(second_store, 2)
        blocks.append(second.allocate_producer_ids())
        blocks.append(first.allocate_producer_ids())
        blocks.append(second.allocate_producer_ids())
        restarted, _ = make_controller(restarted_store, 1)
        blocks.append(restarted.allocate_producer_ids())
    finally:
        first_store.close()
        second_store.close()
        restarted_store.close()
    ids = [set(range(start, start + size)) for start, size in blocks]
    assert sum(len(s) for s in ids) == len(set().union(*ids)) == 7 * PRODUCER_ID_BLOCK_SIZE


def test_a_producer_id_block_decided_on_a_stale_image_is_refused(store: MetadataStore) -> None:
    controller, cache = make_controller(store, 1)
    stale = cache.catch_up()
    first, size = controller.allocate_producer_ids()
    config = Config.from_raw({"node.id": "2", "diskless.system.enable": "true"})
    behind = Controller(store, config, lambda: stale)  # a broker that has not caught up
    before = store.read(0)
    with pytest.raises(MetadataConflictError):
        behind.allocate_producer_ids()  # would hand out [first, first + size) a second time
    assert store.read(0) == before
    again, _ = Controller(store, config, cache.catch_up).allocate_producer_ids()
    assert again == first + size
