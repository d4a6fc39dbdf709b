"""Cluster membership: fencing decided from the broker registry, placement on alive brokers
(group coordinators, diskless partitions, new replicas) and the controller's periodic duties."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from shoal.cluster.duties import ControllerDuties
from shoal.cluster.fencing import fencing_changes
from shoal.cluster.placement import (
    group_coordinator,
    group_partition,
    partition_owner,
    preferred_brokers,
)
from shoal.metadata.assignment import assign_replicas
from shoal.metadata.cache import MetadataCache
from shoal.metadata.image import BrokerImage, MetadataImage
from shoal.metadata.log import BrokerRegistration, MetadataStore
from shoal.metadata.records import (
    FenceBrokerRecord,
    MetadataRecord,
    RegisterBrokerRecord,
    UnfenceBrokerRecord,
)
from shoal.protocol.key_partitions import java_string_hash
from shoal.store.factory import open_metadata_store_at

SESSION_MS = 10_000
INC_1 = uuid.UUID(int=1)
INC_2 = uuid.UUID(int=2)


def image_of(*records: MetadataRecord) -> MetadataImage:
    return MetadataImage().apply(enumerate(records))


def registration(
    node_id: int,
    incarnation: uuid.UUID = INC_1,
    age_ms: int = 0,
    host: str = "h1",
    port: int = 9092,
    rack: str | None = None,
) -> BrokerRegistration:
    return BrokerRegistration(node_id, incarnation, host, port, rack, age_ms)


def alive(node_id: int, rack: str | None = None, incarnation: uuid.UUID = INC_1) -> RegisterBrokerRecord:
    return RegisterBrokerRecord(node_id, f"h{node_id}", 9092, rack, incarnation, fenced=False)


# --------------------------------------------------------------------------- fencing


def test_a_new_broker_is_registered_unfenced_when_it_heartbeats() -> None:
    changes = fencing_changes(MetadataImage(), [registration(1, age_ms=5, rack="az-1")], SESSION_MS)
    assert changes == [RegisterBrokerRecord(1, "h1", 9092, "az-1", INC_1, fenced=False)]


def test_a_new_broker_with_a_stale_heartbeat_is_registered_fenced() -> None:
    changes = fencing_changes(MetadataImage(), [registration(1, age_ms=SESSION_MS)], SESSION_MS)
    assert changes == [RegisterBrokerRecord(1, "h1", 9092, None, INC_1, fenced=True)]


@pytest.mark.parametrize(
    "moved",
    [
        registration(1, port=9093),
        registration(1, host="h1-new"),
        registration(1, rack="az-2"),
        registration(1, incarnation=INC_2),  # a restart on the same endpoint
    ],
    ids=["port", "host", "rack", "incarnation"],
)
def test_a_changed_endpoint_or_incarnation_registers_again(moved: BrokerRegistration) -> None:
    image = image_of(RegisterBrokerRecord(1, "h1", 9092, None, INC_1, fenced=False))
    changes = fencing_changes(image, [moved], SESSION_MS)
    assert changes == [
        RegisterBrokerRecord(1, moved.host, moved.port, moved.rack, moved.incarnation_id, False)
    ]
    # Applied, the image agrees with the registry: nothing more to do.
    assert fencing_changes(image.apply([(1, changes[0])]), [moved], SESSION_MS) == []


def test_a_stale_heartbeat_fences_and_a_fresh_one_unfences() -> None:
    image = image_of(RegisterBrokerRecord(1, "h1", 9092, None, INC_1, fenced=False))
    assert fencing_changes(image, [registration(1, age_ms=SESSION_MS - 1)], SESSION_MS) == []
    assert fencing_changes(image, [registration(1, age_ms=SESSION_MS)], SESSION_MS) == [FenceBrokerRecord(1)]
    fenced = image.apply([(1, FenceBrokerRecord(1))])
    assert fencing_changes(fenced, [registration(1, age_ms=SESSION_MS + 5)], SESSION_MS) == []
    assert fencing_changes(fenced, [registration(1, age_ms=3)], SESSION_MS) == [UnfenceBrokerRecord(1)]


def test_a_broker_gone_from_the_registry_is_fenced_once() -> None:
    image = image_of(alive(1), alive(2))
    assert fencing_changes(image, [registration(1, host="h1")], SESSION_MS) == [FenceBrokerRecord(2)]
    fenced = image.apply([(2, FenceBrokerRecord(2))])
    assert fencing_changes(fenced, [registration(1, host="h1")], SESSION_MS) == []
    assert fencing_changes(fenced, [], SESSION_MS) == [FenceBrokerRecord(1)]


def test_nothing_to_do_when_the_image_agrees_with_the_registry() -> None:
    image = image_of(
        alive(1, "az-1"), alive(2), RegisterBrokerRecord(3, "h3", 9092, None, INC_1, fenced=True)
    )
    registry = [
        registration(1, host="h1", rack="az-1", age_ms=10),
        registration(2, host="h2", age_ms=SESSION_MS - 1),
        registration(3, host="h3", age_ms=SESSION_MS * 3),
    ]
    assert fencing_changes(image, registry, SESSION_MS) == []
    assert fencing_changes(MetadataImage(), [], SESSION_MS) == []


def test_several_brokers_change_in_one_round() -> None:
    image = image_of(alive(1), alive(2), RegisterBrokerRecord(3, "h3", 9092, None, INC_1))
    registry = [
        registration(2, host="h2", age_ms=SESSION_MS * 2),  # stale
        registration(3, host="h3"),  # fenced, heartbeating again
        registration(4, host="h4"),  # new
    ]  # 1 left the registry
    assert fencing_changes(image, registry, SESSION_MS) == [
        FenceBrokerRecord(2),
        UnfenceBrokerRecord(3),
        RegisterBrokerRecord(4, "h4", 9092, None, INC_1, fenced=False),
        FenceBrokerRecord(1),
    ]


# --------------------------------------------------------------------------- group placement


def reference_hash(s: str) -> int:
    """String.hashCode as its javadoc defines it, s[0]*31^(n-1) + ... + s[n-1] over UTF-16 code
    units, summed exactly and only then wrapped to a Java int."""
    units: list[int] = []
    for ch in s:
        cp = ord(ch)
        if cp > 0xFFFF:
            cp -= 0x10000
            units += [0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF)]
        else:
            units.append(cp)
    n = len(units)
    total = sum(u * 31 ** (n - 1 - i) for i, u in enumerate(units)) % 2**32
    return total - 2**32 if total >= 2**31 else total


def kafka_abs(n: int) -> int:
    """Kafka's Utils.abs: Math.abs, except Integer.MIN_VALUE gives 0."""
    return 0 if n == -(2**31) else abs(n)


@pytest.mark.parametrize(
    ("value", "java_hash"),
    [
        ("", 0),
        ("hello", 99162322),  # Java: "hello".hashCode()
        ("Aa", 2112),
        ("BB", 2112),  # the classic collision
        ("Hello World", -862545276),  # negative
        ("polygenelubricants", -(2**31)),  # Integer.MIN_VALUE
        ("\U0001f600", 0xD83D * 31 + 0xDE00),  # outside the BMP: two UTF-16 units
    ],
)
def test_java_string_hash(value: str, java_hash: int) -> None:
    assert java_string_hash(value) == java_hash == reference_hash(value)


def test_group_partition_of_known_groups() -> None:
    assert group_partition("", 50) == 0
    assert group_partition("hello", 50) == 99162322 % 50 == 22
    assert group_partition("\U0001f600", 50) == (0xD83D * 31 + 0xDE00) % 50


def test_group_partition_of_a_negative_hash_is_kafkas_utils_abs() -> None:
    """Kafka: ``Utils.abs(groupId.hashCode()) % offsets.topic.num.partitions``, where Utils.abs is
    Math.abs with MIN_VALUE -> 0; not ``hash & 0x7fffffff`` (Utils.toPositive, the producer's
    partitioner), which differs for every negative hash but MIN_VALUE."""
    assert group_partition("Hello World", 50) == 862545276 % 50 == 26
    assert group_partition("polygenelubricants", 7) == 0


@pytest.mark.parametrize(
    "group_id",
    ["group-1", "console-consumer-12345", "connect-cluster", "ünïcödé", "组", "a\U0001f600b", "x" * 500],
)
def test_group_partition_agrees_with_the_reference(group_id: str) -> None:
    for partitions in (1, 3, 50, 1000):
        assert group_partition(group_id, partitions) == kafka_abs(reference_hash(group_id)) % partitions


def test_partition_owner_is_deterministic() -> None:
    owners = [partition_owner(p, [1, 2, 3], [1, 2, 3]) for p in range(50)]
    assert owners == [partition_owner(p, [3, 1, 2], [2, 3, 1]) for p in range(50)]  # any listing order
    assert partition_owner(0, [1], []) is None
    assert partition_owner(7, [4], [4]) == 4
    assert partition_owner(7, [], [4]) == 4  # registered but not yet in the image: stands in


@pytest.mark.parametrize("brokers", [[1, 2, 3], [1, 2, 3, 4, 5], [0, 1, 2], [10, 20, 30, 40]])
def test_partition_owner_spreads_partitions_evenly_over_every_broker(brokers: list[int]) -> None:
    """Every broker coordinates its share of the groups: n partitions split within one of equal."""
    owners = [partition_owner(p, brokers, brokers) for p in range(50)]
    counts = [owners.count(b) for b in brokers]
    assert max(counts) - min(counts) <= 1, counts


def test_only_the_partitions_of_a_fenced_broker_move_and_they_come_back() -> None:
    everyone = [1, 2, 3]
    before = {p: partition_owner(p, everyone, everyone) for p in range(300)}
    after = {p: partition_owner(p, everyone, [1, 2]) for p in range(300)}
    for p in range(300):
        if before[p] != 3:
            assert after[p] == before[p], p
        else:
            assert after[p] in (1, 2)
    moved = [after[p] for p in range(300) if before[p] == 3]
    assert 0.3 < moved.count(1) / len(moved) < 0.7  # the stand-ins share the load
    assert {p: partition_owner(p, everyone, everyone) for p in range(300)} == before  # 3 is back


def test_group_coordinator_is_an_alive_broker() -> None:
    image = image_of(alive(1), alive(2), RegisterBrokerRecord(3, "h3", 9092, None))  # 3 fenced
    coordinators = {group_coordinator(image, f"group-{i}", 50) for i in range(100)}
    assert coordinators == {1, 2}
    for i in range(20):
        group = f"g{i}"
        assert group_coordinator(image, group, 50) == partition_owner(group_partition(group, 50), [1, 2, 3], [1, 2])
    assert group_coordinator(image_of(RegisterBrokerRecord(1, "h1", 9092, None)), "g", 50) is None
    assert group_coordinator(MetadataImage(), "g", 50) is None


# --------------------------------------------------------------------------- diskless placement


def test_preferred_brokers_are_alive_ones_in_the_clients_rack() -> None:
    image = image_of(
        alive(1, "az-a"),
        alive(2, "az-b"),
        alive(3, "az-a"),
        RegisterBrokerRecord(4, "h4", 9092, "az-a"),  # fenced
        RegisterBrokerRecord(5, "h5", 9092, "az-c"),  # fenced: its rack has no alive broker
    )
    assert preferred_brokers(image, 0, "az-a") == [1, 3]
    assert preferred_brokers(image, 1, "az-a") == [3, 1]  # rotated by partition
    assert preferred_brokers(image, 2, "az-a") == [1, 3]
    assert preferred_brokers(image, 5, "az-b") == [2]
    # No alive broker in the client's rack, or no rack: every alive broker, rotated.
    assert preferred_brokers(image, 0, "az-c") == [1, 2, 3]
    assert preferred_brokers(image, 1, "az-z") == [2, 3, 1]
    assert preferred_brokers(image, 2, None) == [3, 1, 2]
    assert preferred_brokers(MetadataImage(), 0, "az-a") == []
    assert preferred_brokers(image_of(RegisterBrokerRecord(1, "h1", 9092, "az-a")), 0, "az-a") == []


def test_brokers_without_a_rack_do_not_match_a_rackless_client() -> None:
    image = image_of(alive(1), alive(2, "az-b"))
    assert preferred_brokers(image, 0, None) == [1, 2]


# --------------------------------------------------------------------------- replica assignment


def brokers(*racks: str | None, fenced: tuple[int, ...] = ()) -> list[BrokerImage]:
    return [BrokerImage(i, f"h{i}", 9092, rack, None, i in fenced) for i, rack in enumerate(racks, start=1)]


def test_assign_replicas_spreads_leaders_and_racks() -> None:
    racks = {1: "az-a", 2: "az-a", 3: "az-b", 4: "az-b", 5: "az-c", 6: "az-c"}
    placements = assign_replicas(brokers(*racks.values()), range(6), 3)
    assert sorted(replicas[0] for replicas in placements) == [1, 2, 3, 4, 5, 6]  # each broker leads one
    for replicas in placements:
        assert len(set(replicas)) == 3
        assert {racks[b] for b in replicas} == {"az-a", "az-b", "az-c"}
    # Broker load is even too.
    load = [b for replicas in placements for b in replicas]
    assert all(load.count(b) == 3 for b in racks)


def test_assign_replicas_with_uneven_racks_uses_as_many_racks_as_there_are() -> None:
    racks = {1: "az-a", 2: "az-a", 3: "az-a", 4: "az-b"}
    placements = assign_replicas(brokers(*racks.values()), range(8), 2)
    assert all(len(set(r)) == 2 for r in placements)
    assert sum(len({racks[b] for b in r}) == 2 for r in placements) >= 4
    assert {r[0] for r in placements} == {1, 2, 3, 4}


def test_assign_replicas_continues_the_rotation_from_the_first_partition() -> None:
    bs = brokers(None, None, None)
    assert assign_replicas(bs, range(4), 2) == [(1, 2), (2, 3), (3, 1), (1, 2)]
    assert assign_replicas(bs, range(4, 6), 2) == assign_replicas(bs, range(6), 2)[4:]


def test_only_alive_brokers_get_new_replicas() -> None:
    image = image_of(alive(1, "az-a"), RegisterBrokerRecord(2, "h2", 9092, "az-b"), alive(3, "az-c"))
    placements = assign_replicas(image.alive_brokers(), range(4), 2)
    assert {b for r in placements for b in r} == {1, 3}


# --------------------------------------------------------------------------- controller duties


async def run_blocking(fn: Any, *args: Any) -> Any:
    return await asyncio.to_thread(fn, *args)


@pytest.fixture
def store_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'shoal.db'}"


@pytest.fixture
def store(store_url: str) -> Iterator[MetadataStore]:
    s = open_metadata_store_at(store_url)
    yield s
    s.close()


def duties_for(store: MetadataStore, node_id: int) -> tuple[ControllerDuties, MetadataCache]:
    cache = MetadataCache(store)
    duties = ControllerDuties(
        store, run_blocking, cache.catch_up, node_id, heartbeat_interval_ms=50, session_timeout_ms=SESSION_MS
    )
    return duties, cache


async def test_one_tick_takes_the_lease_and_unfences_a_registered_broker(store: MetadataStore) -> None:
    duties, cache = duties_for(store, 1)
    store.register_broker(1, INC_1, "h1", 9092, "az-1", SESSION_MS)
    assert not duties.active
    await duties.tick()
    assert duties.active
    image = cache.catch_up()
    assert image.controller == (1, 1)
    assert image.brokers[1] == BrokerImage(1, "h1", 9092, "az-1", INC_1, fenced=False)
    assert [b.node_id for b in image.alive_brokers()] == [1]
    offset = image.offset

    await duties.tick()  # nothing changed: nothing appended
    assert duties.active and cache.catch_up().offset == offset

    # A broker leaving the registry (a clean shutdown) is fenced at the next tick.
    store.register_broker(2, INC_2, "h2", 9092, None, SESSION_MS)
    await duties.tick()
    assert [b.node_id for b in cache.catch_up().alive_brokers()] == [1, 2]
    store.unregister_broker(2, INC_2)
    await duties.tick()
    image = cache.catch_up()
    assert image.brokers[2].fenced and [b.node_id for b in image.alive_brokers()] == [1]
    await duties.stop()


async def test_a_standby_takes_over_when_the_active_controller_stops(
    store_url: str, store: MetadataStore
) -> None:
    first, _ = duties_for(store, 1)
    other_store = open_metadata_store_at(store_url)  # another broker on the same database
    try:
        second, second_cache = duties_for(other_store, 2)
        await first.tick()
        assert first.active
        store.register_broker(3, INC_1, "h3", 9092, None, SESSION_MS)
        await second.tick()
        assert not second.active
        assert 3 not in second_cache.catch_up().brokers  # the standby writes no fencing

        await first.stop()  # resigns the lease
        assert not first.active
        await second.tick()
        assert second.active
        image = second_cache.catch_up()
        assert not image.brokers[3].fenced  # and now does the duties
        assert image.controller is not None and image.controller[0] == 2  # announced in the log
        await first.tick()
        assert not first.active  # the old controller stays a standby while the lease is held
        await second.stop()
    finally:
        other_store.close()


async def test_periodic_rounds_run_until_stopped(store: MetadataStore) -> None:
    duties, cache = duties_for(store, 1)
    store.register_broker(1, INC_1, "h1", 9092, None, SESSION_MS)
    duties.start()
    try:
        for _ in range(200):
            if duties.active and 1 in cache.catch_up().brokers:
                break
            await asyncio.sleep(0.02)
        assert duties.active and not cache.image.brokers[1].fenced
    finally:
        await duties.stop()
    assert not duties.active
    assert store.acquire_lease(2, SESSION_MS) is not None  # resigned: free at once


async def test_fencing_elects_new_leaders_and_the_rebalance_brings_preferred_ones_back(store: MetadataStore) -> None:
    """The controller's round takes a fenced broker out of ISRs and elects the next ISR replica;
    once it is back in the ISR, the automatic rebalance (KRaft's) makes it leader again."""
    import uuid as uuid_

    from shoal.metadata.records import PartitionChangeRecord, PartitionRecord, TopicRecord

    now = [0.0]
    cache = MetadataCache(store)
    duties = ControllerDuties(
        store, run_blocking, cache.catch_up, 1, heartbeat_interval_ms=50, session_timeout_ms=SESSION_MS,
        leader_rebalance_interval_ms=300_000, clock=lambda: now[0],
    )
    for node, inc in ((1, INC_1), (2, INC_2)):
        store.register_broker(node, inc, f"h{node}", 9092, None, SESSION_MS)
    await duties.tick()
    topic_id = uuid_.uuid4()
    image = cache.catch_up()
    store.append([TopicRecord("t", topic_id), PartitionRecord(topic_id, 0, (2, 1), (2, 1), 2)], image.offset, 1)
    store.unregister_broker(2, INC_2)
    await duties.tick()
    p = cache.catch_up().topic("t").partitions[0]  # type: ignore[union-attr]
    assert (p.leader, p.isr, p.leader_epoch) == (1, (1,), 1)

    store.register_broker(2, INC_2, "h2", 9092, None, SESSION_MS)
    await duties.tick()  # unfenced
    image = cache.catch_up()
    store.append([PartitionChangeRecord(topic_id, 0, isr=(2, 1))], image.offset, 1)  # it caught up
    await duties.tick()
    assert cache.catch_up().topic("t").partitions[0].leader == 1  # type: ignore[union-attr]  # not due yet
    now[0] = 301.0
    await duties.tick()
    p = cache.catch_up().topic("t").partitions[0]  # type: ignore[union-attr]
    assert (p.leader, p.leader_epoch) == (2, 2)
    await duties.stop()
