"""Leader election and ISR rules of classic partitions (``shoal.cluster.election``), on images."""

from __future__ import annotations

import uuid

from shoal.cluster.election import failover_changes, preferred_changes
from shoal.metadata.image import MetadataImage
from shoal.metadata.records import (
    FenceBrokerRecord,
    MetadataRecord,
    PartitionChangeRecord,
    PartitionRecord,
    RegisterBrokerRecord,
    TopicRecord,
)

TOPIC_ID = uuid.uuid4()


def image_with(replicas: tuple[int, ...], isr: tuple[int, ...], leader: int, fenced: tuple[int, ...] = ()) -> MetadataImage:
    records: list[MetadataRecord] = [
        RegisterBrokerRecord(b, "h", 9000 + b, None, fenced=b in fenced) for b in (1, 2, 3)
    ]
    records += [TopicRecord("t", TOPIC_ID), PartitionRecord(TOPIC_ID, 0, replicas, isr, leader)]
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
