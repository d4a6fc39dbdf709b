"""Leader election and ISR rules of classic and diskless partitions (``shoal.cluster.election``),
on images, and the diskless side of ``PartitionControl`` on a real SQLite metadata log."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from shoal.cluster.election import failover_changes, preferred_changes
from shoal.metadata.image import MetadataImage
from shoal.metadata.records import (
    ConfigRecord,
    FenceBrokerRecord,
    MetadataRecord,
    PartitionChangeRecord,
    PartitionRecord,
    RegisterBrokerRecord,
    TopicRecord,
    UnfenceBrokerRecord,
)
from shoal.protocol.errors import ErrorCode, KafkaError

TOPIC_ID = uuid.uuid4()


def image_with(
    replicas: tuple[int, ...], isr: tuple[int, ...], leader: int, fenced: tuple[int, ...] = (), *,
    diskless: bool = False, brokers: tuple[int, ...] = (1, 2, 3),
) -> MetadataImage:
    records: list[MetadataRecord] = [
        RegisterBrokerRecord(b, "h", 9000 + b, None, fenced=b in fenced) for b in brokers
    ]
    records.append(TopicRecord("t", TOPIC_ID))
    if diskless:
        records.append(ConfigRecord(ConfigRecord.TOPIC, "t", "diskless.enable", "true"))
    records.append(PartitionRecord(TOPIC_ID, 0, replicas, isr, leader))
    return MetadataImage().apply(enumerate(records))


def apply(image: MetadataImage, changes: list[PartitionChangeRecord]) -> MetadataImage:
    return image.apply((image.offset + 1 + i, c) for i, c in enumerate(changes))


def partition(image: MetadataImage):  # noqa: ANN201
    return image.topic("t").partitions[0]  # type: ignore[union-attr]


def test_a_fenced_leader_is_replaced_by_the_first_alive_isr_replica_and_leaves_the_isr() -> None:
    image = image_with((1, 2, 3), (1, 2, 3), 1)
    image = apply(image, [])
    fenced = image.apply([(image.offset + 1, FenceBrokerRecord(1))])
    after = apply(fenced, failover_changes(fenced, lambda t: False))
    p = partition(after)
    assert (p.leader, p.isr, p.leader_epoch, p.partition_epoch) == (2, (2, 3), 1, 1)


def test_the_last_isr_member_stays_and_the_partition_is_leaderless_until_it_returns() -> None:
    image = image_with((1, 2), (1,), 1, fenced=(1,))
    after = apply(image, failover_changes(image, lambda t: False))
    assert (partition(after).leader, partition(after).isr) == (-1, (1,))
    # broker 2 is alive but out of sync: only an unclean election may pick it
    unclean = apply(after, failover_changes(after, lambda t: True))
    assert (partition(unclean).leader, partition(unclean).isr) == (2, (2,))


def test_a_follower_fenced_leaves_the_isr_without_a_new_leader_epoch() -> None:
    image = image_with((1, 2, 3), (1, 2, 3), 1, fenced=(3,))
    after = apply(image, failover_changes(image, lambda t: False))
    p = partition(after)
    assert (p.leader, p.isr, p.leader_epoch) == (1, (1, 2), 0)
    assert failover_changes(after, lambda t: False) == []  # nothing more to do


def test_leaving_broker_hands_leadership_over_controlled_shutdown() -> None:
    image = image_with((1, 2, 3), (1, 2, 3), 1)
    after = apply(image, failover_changes(image, lambda t: False, leaving=(1,)))
    assert (partition(after).leader, partition(after).isr) == (2, (2, 3))


def test_offline_replica_cannot_lead() -> None:
    image = image_with((1, 2, 3), (1, 2, 3), 1)
    marked = apply(image, [PartitionChangeRecord(TOPIC_ID, 0, offline_replicas=(1,))])
    after = apply(marked, failover_changes(marked, lambda t: False))
    assert (partition(after).leader, partition(after).isr, partition(after).offline_replicas) == (2, (2, 3), (1,))


def test_preferred_election_moves_leadership_back_only_when_the_preferred_replica_is_in_sync() -> None:
    image = image_with((1, 2, 3), (2, 3), 2)
    changes, outcome = preferred_changes(image)
    assert changes == [] and "Failed to elect" in (outcome[("t", 0)] or "")
    image = apply(image, [PartitionChangeRecord(TOPIC_ID, 0, isr=(1, 2, 3))])
    changes, outcome = preferred_changes(image)
    assert outcome == {("t", 0): None}
    after = apply(image, changes)
    assert partition(after).leader == 1
    assert preferred_changes(after)[1] == {("t", 0): "ELECTION_NOT_NEEDED"}


def test_reassignment_adds_then_finishes_once_the_new_replicas_are_in_sync() -> None:
    from shoal.cluster.election import cancel_reassignment, reassignment_changes, start_reassignment

    image = image_with((1, 2, 3), (1, 2, 3), 1)
    image = image.apply([(image.offset + 1, RegisterBrokerRecord(4, "h", 9004, None, fenced=False))])
    topic = image.topic("t")
    assert topic is not None
    start = start_reassignment(image, topic, partition(image), (2, 3, 4))
    assert start is not None
    moving = apply(image, [start])
    p = partition(moving)
    assert (p.replicas, p.adding_replicas, p.removing_replicas, p.isr) == ((2, 3, 4, 1), (4,), (1,), (2, 3, 1))
    assert reassignment_changes(moving) == []  # broker 4 has not caught up
    caught_up = apply(moving, [PartitionChangeRecord(TOPIC_ID, 0, isr=(2, 3, 4, 1))])
    done = apply(caught_up, reassignment_changes(caught_up))
    p = partition(done)
    assert (p.replicas, p.isr, p.leader, p.adding_replicas, p.removing_replicas) == ((2, 3, 4), (2, 3, 4), 2, (), ())
    assert p.leader_epoch == 1  # the leader was removed: a new one, a new epoch
    # Cancelling goes back to the original replicas, in the merged list's order (as KRaft's revert).
    cancelled = cancel_reassignment(moving, moving.topic("t"), partition(moving))  # type: ignore[arg-type]
    assert cancelled is not None
    p = partition(apply(moving, [cancelled]))
    assert (p.replicas, p.isr, p.leader, p.adding_replicas) == ((2, 3, 1), (2, 3, 1), 1, ())


def test_the_automatic_rebalance_waits_for_the_imbalance_percentage() -> None:
    from shoal.cluster.election import imbalanced_partitions

    records: list[MetadataRecord] = [RegisterBrokerRecord(b, "h", 9000 + b, None, fenced=False) for b in (1, 2)]
    records.append(TopicRecord("t", TOPIC_ID))
    for p in range(20):  # broker 1 should lead all 20; broker 2 leads the first `moved`
        records.append(PartitionRecord(TOPIC_ID, p, (1, 2), (1, 2), 1))
    image = MetadataImage().apply(enumerate(records))

    def moved(n: int) -> MetadataImage:
        return apply(image, [PartitionChangeRecord(TOPIC_ID, p, leader=2) for p in range(n)])

    assert imbalanced_partitions(moved(2), 10) == []  # 10 %: not more than the percentage
    assert imbalanced_partitions(moved(3), 10) == [("t", 0), ("t", 1), ("t", 2)]
    assert imbalanced_partitions(moved(1), 0) == [("t", 0)]


# ---------------------------------------------------------------------------------- diskless
# A diskless replica is a cache: "in sync" is with the Batch Coordinator, the leader may be out of
# sync, any alive replica may lead (KIP-1163).


def fence(image: MetadataImage, *brokers: int) -> MetadataImage:
    return image.apply((image.offset + 1 + i, FenceBrokerRecord(b)) for i, b in enumerate(brokers))


def test_a_diskless_leader_fenced_is_replaced_by_the_first_alive_isr_replica() -> None:
    image = fence(image_with((1, 2, 3), (1, 3), 1, diskless=True), 1)
    after = apply(image, failover_changes(image, lambda t: False))
    p = partition(after)
    assert (p.leader, p.isr, p.leader_epoch) == (3, (3,), 1)  # 3 is in sync, 2 (first in order) is not


def test_a_diskless_isr_may_become_empty_and_any_alive_replica_leads_without_being_unclean() -> None:
    from shoal.cluster.election import unclean_elections

    image = image_with((1, 2), (1,), 1, fenced=(1,), diskless=True)
    changes = failover_changes(image, lambda t: False)  # unclean election disabled: irrelevant here
    after = apply(image, changes)
    assert (partition(after).leader, partition(after).isr) == (2, ())
    assert unclean_elections(image, changes) == []
    assert failover_changes(after, lambda t: False) == []


def test_a_diskless_leader_out_of_sync_keeps_leading() -> None:
    image = image_with((1, 2, 3), (2, 3), 1, diskless=True)
    assert failover_changes(image, lambda t: False) == []
    empty = image_with((1, 2, 3), (), 1, diskless=True)
    assert failover_changes(empty, lambda t: False) == []


def test_a_diskless_partition_without_alive_replicas_is_leaderless_until_one_returns() -> None:
    image = fence(image_with((1, 2), (1, 2), 1, diskless=True), 1, 2)
    after = apply(image, failover_changes(image, lambda t: True))
    assert (partition(after).leader, partition(after).isr) == (-1, ())
    back = after.apply([(after.offset + 1, UnfenceBrokerRecord(2))])
    led = apply(back, failover_changes(back, lambda t: False))
    assert (partition(led).leader, partition(led).isr, partition(led).leader_epoch) == (2, (), 2)


def test_a_diskless_leader_shutting_down_hands_leadership_over() -> None:
    image = image_with((1, 2, 3), (1, 2, 3), 1, diskless=True)
    after = apply(image, failover_changes(image, lambda t: False, leaving=(1,)))
    assert (partition(after).leader, partition(after).isr) == (2, (2, 3))
    offline = apply(image, [PartitionChangeRecord(TOPIC_ID, 0, isr=(1,), offline_replicas=(2,))])
    after = apply(offline, failover_changes(offline, lambda t: False, leaving=(1,)))
    assert (partition(after).leader, partition(after).isr) == (3, ())  # 2's log dir failed: 3 leads


def test_unclean_elections_ignore_diskless_partitions() -> None:
    from shoal.cluster.election import unclean_elections

    classic = image_with((1, 2), (1,), -1)
    change = [PartitionChangeRecord(TOPIC_ID, 0, leader=2, isr=(2,))]
    assert unclean_elections(classic, change) == [("t", 0, 2)]
    assert unclean_elections(image_with((1, 2), (1,), -1, diskless=True), change) == []


def test_a_diskless_preferred_replica_takes_leadership_back_when_alive_even_out_of_sync() -> None:
    image = image_with((1, 2, 3), (2, 3), 2, diskless=True)
    changes, outcome = preferred_changes(image)
    assert outcome == {("t", 0): None}
    after = apply(image, changes)
    assert (partition(after).leader, partition(after).isr) == (1, (2, 3))
    assert preferred_changes(after)[1] == {("t", 0): "ELECTION_NOT_NEEDED"}
    fenced = image_with((1, 2, 3), (1, 2, 3), 2, fenced=(1,), diskless=True)
    changes, outcome = preferred_changes(fenced)
    assert changes == [] and "Failed to elect" in (outcome[("t", 0)] or "")


def test_the_automatic_rebalance_counts_diskless_partitions() -> None:
    from shoal.cluster.election import imbalanced_partitions

    image = image_with((1, 2), (2,), 2, diskless=True)
    assert imbalanced_partitions(image, 10) == [("t", 0)]
    assert imbalanced_partitions(image_with((1, 2), (2,), 1, diskless=True), 10) == []


def test_a_diskless_reassignment_finishes_once_the_new_replicas_are_in_sync() -> None:
    from shoal.cluster.election import reassignment_changes, start_reassignment

    image = image_with((1, 2, 3), (2,), 1, diskless=True, brokers=(1, 2, 3, 4))
    topic = image.topic("t")
    assert topic is not None
    start = start_reassignment(image, topic, partition(image), (2, 4))
    assert start is not None
    moving = apply(image, [start])
    p = partition(moving)
    assert (p.replicas, p.adding_replicas, p.removing_replicas, p.isr, p.leader) == (
        (2, 4, 1, 3), (4,), (1, 3), (2,), 1
    )
    assert reassignment_changes(moving) == []  # broker 4 has not caught up with the coordinator
    caught_up = apply(moving, [PartitionChangeRecord(TOPIC_ID, 0, isr=(2, 4))])
    done = apply(caught_up, reassignment_changes(caught_up))
    p = partition(done)
    assert (p.replicas, p.isr, p.leader, p.adding_replicas, p.removing_replicas) == ((2, 4), (2, 4), 2, (), ())


def test_a_diskless_reassignment_may_leave_an_empty_isr_led_by_a_target_replica() -> None:
    from shoal.cluster.election import cancel_reassignment, start_reassignment

    image = image_with((1, 2, 3), (2,), 1, diskless=True)
    topic = image.topic("t")
    assert topic is not None
    # Nothing to add: it finishes at once. 1 leads no more (not a target replica), 3 leads out of
    # sync (no target replica is in the ISR), the ISR is empty.
    done = start_reassignment(image, topic, partition(image), (3,))
    assert done is not None
    p = partition(apply(image, [done]))
    assert (p.replicas, p.isr, p.leader) == ((3,), (), 3)
    # A cancelled reassignment whose added replica led: the leadership goes back to an original.
    image = image_with((4, 2), (), 4, diskless=True, brokers=(1, 2, 3, 4))
    moving = apply(image, [PartitionChangeRecord(TOPIC_ID, 0, replicas=(4, 2), adding_replicas=(4,))])
    cancelled = cancel_reassignment(moving, topic, partition(moving))
    assert cancelled is not None
    p = partition(apply(moving, [cancelled]))
    assert (p.replicas, p.isr, p.leader, p.adding_replicas) == ((2,), (), 2, ())


# ------------------------------------------------------------------- PartitionControl, diskless


@pytest.fixture
def control(tmp_path: Path):  # noqa: ANN201
    """A PartitionControl of node 1 over a SQLite metadata log holding a diskless partition
    (replicas 1, 2, 3 led by 1, ISR 1, 2, 3) and a classic one ``c`` alike."""
    from shoal.cluster.partition_control import PartitionControl
    from shoal.metadata.cache import MetadataCache
    from shoal.store.sqlite.metadata_log import SqliteMetadataStore

    store = SqliteMetadataStore(tmp_path / "meta" / "shoal.db")
    classic_id = uuid.uuid4()
    records: list[MetadataRecord] = [RegisterBrokerRecord(b, "h", 9000 + b, None, fenced=False) for b in (1, 2, 3)]
    records += [
        TopicRecord("t", TOPIC_ID), ConfigRecord(ConfigRecord.TOPIC, "t", "diskless.enable", "true"),
        PartitionRecord(TOPIC_ID, 0, (1, 2, 3), (1, 2, 3), 1),
        TopicRecord("c", classic_id), PartitionRecord(classic_id, 0, (1, 2, 3), (1, 2, 3), 1),
    ]
    store.append(records, -1, 1)
    cache = MetadataCache(store)
    yield PartitionControl(store, 1, cache.catch_up, lambda t: False), cache, store, classic_id
    store.close()


def test_alter_isr_of_a_diskless_partition_may_leave_the_leader_out_and_be_empty(control) -> None:  # noqa: ANN001
    ctl, cache, _, classic_id = control
    p = ctl.alter_isr(TOPIC_ID, 0, 0, 0, [2, 3])
    assert (p.isr, p.leader, p.partition_epoch) == ((2, 3), 1, 1)
    p = ctl.alter_isr(TOPIC_ID, 0, 0, 1, [])
    assert (p.isr, p.leader) == ((), 1)
    assert cache.catch_up().topic("t").partitions[0].isr == ()
    with pytest.raises(KafkaError) as refused:
        ctl.alter_isr(TOPIC_ID, 0, 0, 2, [2, 5])  # 5 is no replica
    assert refused.value.code == ErrorCode.invalid_request
    with pytest.raises(KafkaError) as classic:  # a classic ISR must still hold its leader
        ctl.alter_isr(classic_id, 0, 0, 0, [2, 3])
    assert classic.value.code == ErrorCode.invalid_request


def test_elections_and_reassignments_of_diskless_partitions_through_partition_control(control) -> None:  # noqa: ANN001
    from shoal.cluster.partition_control import reassignments_in_progress

    ctl, cache, store, _ = control

    def diskless():  # noqa: ANN202
        return cache.catch_up().topic("t").partitions[0]

    ctl.alter_isr(TOPIC_ID, 0, 0, 0, [2])
    assert ctl.elect_preferred({("t", 0)}) == {("t", 0): "ELECTION_NOT_NEEDED"}
    # Broker 1 shuts down: its leaderships move to broker 2 (the in-sync replica of ``t``).
    assert ctl.shut_down(1) == 2
    assert (diskless().leader, diskless().isr) == (2, (2,))
    # Preferred election: broker 1 (back, out of both ISRs) takes the diskless partition back,
    # not the classic one.
    outcome = ctl.elect_preferred()
    assert outcome[("t", 0)] is None and "Failed to elect" in (outcome[("c", 0)] or ""), outcome
    assert (diskless().leader, diskless().isr) == (1, (2,))
    # Leaderless with an empty ISR (as after every replica was fenced): the "unclean" election
    # picks the first alive replica, the ISR unchanged, not counted as unclean.
    store.append([PartitionChangeRecord(TOPIC_ID, 0, leader=-1, isr=())], cache.catch_up().offset, 1)
    assert ctl.elect_unclean({("t", 0)}) == {("t", 0): None}
    assert (diskless().leader, diskless().isr, ctl.unclean_elections) == (1, (), 0)
    # Reassignments of diskless partitions: one that adds nothing finishes at once.
    assert ctl.alter_reassignments({("t", 0): [2, 3]}) == {("t", 0): (ErrorCode.none, None)}
    assert (diskless().replicas, diskless().isr, diskless().leader) == ((2, 3), (), 2)
    # One that adds a replica is in progress until it is in sync; it can be cancelled.
    assert ctl.alter_reassignments({("t", 0): [2, 3, 1]}) == {("t", 0): (ErrorCode.none, None)}
    assert (diskless().replicas, diskless().adding_replicas) == ((2, 3, 1), (1,))
    assert [(n, i) for n, i, _ in reassignments_in_progress(cache.catch_up())] == [("t", 0)]
    assert ctl.alter_reassignments({("t", 0): None}) == {("t", 0): (ErrorCode.none, None)}
    assert (diskless().replicas, diskless().adding_replicas, diskless().leader) == ((2, 3), (), 2)
