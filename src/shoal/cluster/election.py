"""Leader election and ISR changes of replicated partitions, decided on a metadata image.

Kafka's rules for classic partitions (KRaft's PartitionChangeBuilder, before eligible leader
replicas):

- A broker that is fenced (stopped heartbeating), shutting down, or whose replica's log dir failed
  leaves every ISR it is in, unless it is the last member: the ISR then keeps it, so the
  partition remembers who has its data, and the partition is leaderless (leader -1) until that
  replica comes back.
- A leader is elected from the ISR, in the order of the replica list (the first is the
  preferred leader), skipping replicas that cannot lead now.
- Only with ``unclean.leader.election.enable`` may a replica outside the ISR be elected, when no
  ISR member can lead; the ISR becomes that replica alone, and what it lacked is lost.

Diskless partitions (KIP-1163) have replicas too, but as caches: their data is in object storage,
and "in sync" means in sync with the Batch Coordinator, not with the leader. So:

- a broker that cannot lead leaves a diskless ISR even when it is the last member (the ISR may
  be empty: nothing is lost, only cached data);
- the leader is just another replica and may be out of the ISR: it keeps leading while it can;
- a new leader is the first replica (replica order) of the ISR that can lead, else the first
  replica that can lead: any replica may lead, so this is no unclean election (never counted or
  refused as one); the ISR is left as it is;
- the preferred replica may take leadership back when it can lead, in sync or not;
- reassignments follow the classic flow (KIP-455): the added replicas join the ISR (caught up
  with the Batch Coordinator), then the removed ones leave.

These functions are pure: they return ``PartitionChangeRecord``s for the caller to append.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator

from shoal.metadata.image import MetadataImage, PartitionImage, TopicImage
from shoal.metadata.records import PartitionChangeRecord

NO_LEADER = -1


def unclean_election_enabled(topic: TopicImage, broker_default: bool) -> bool:
    """``unclean.leader.election.enable`` of the topic, else of the broker."""
    value = topic.configs.get("unclean.leader.election.enable")
    return broker_default if value is None else value == "true"


def can_lead(image: MetadataImage, partition: PartitionImage, broker: int, leaving: Collection[int] = ()) -> bool:
    """Whether ``broker``'s replica of the partition may lead now: its broker is alive (registered,
    unfenced, not leaving) and its log dir did not fail."""
    known = image.brokers.get(broker)
    return (
        known is not None
        and not known.fenced
        and broker not in leaving
        and broker not in partition.offline_replicas
    )


def elect(
    image: MetadataImage, partition: PartitionImage, isr: tuple[int, ...], *, unclean: bool,
    leaving: Collection[int] = (), diskless: bool = False, replicas: tuple[int, ...] | None = None,
) -> tuple[int, tuple[int, ...]]:
    """(leader, ISR) for ``partition`` given the ISR it should have: the first replica (in replica
    order) of the ISR that can lead; else, when ``diskless``, the first replica that can lead, the
    ISR unchanged; else, when ``unclean``, the first replica that can lead, alone in the ISR; else
    no leader, the ISR unchanged. ``replicas`` (default: the partition's) are the candidates, in
    order."""
    candidates = partition.replicas if replicas is None else replicas
    for broker in candidates:
        if broker in isr and can_lead(image, partition, broker, leaving):
            return broker, isr
    if unclean or diskless:
        for broker in candidates:
            if can_lead(image, partition, broker, leaving):
                return broker, isr if diskless else (broker,)
    return NO_LEADER, isr


def needs_leader(
    image: MetadataImage, topic: TopicImage, partition: PartitionImage, leader: int, isr: tuple[int, ...],
    replicas: tuple[int, ...] | None = None, leaving: Collection[int] = (),
) -> bool:
    """Whether ``partition``, with this ISR and ``replicas`` (default: its own), must elect another
    leader than ``leader``: it has none, or it cannot lead, or it is not among the replicas; for a
    classic partition also when it is not in the ISR (a diskless leader may be out of sync)."""
    candidates = partition.replicas if replicas is None else replicas
    return (
        leader not in candidates
        or not can_lead(image, partition, leader, leaving)
        or (not topic.is_diskless and leader not in isr)
    )


def without(isr: tuple[int, ...], gone: Collection[int], leader: int = NO_LEADER) -> tuple[int, ...]:
    """A classic ISR without ``gone``, but never empty: the last member stays, the leader when it
    was one (it has every acknowledged record; see the module docstring)."""
    kept = tuple(b for b in isr if b not in gone)
    if kept or not isr:
        return kept
    return (leader,) if leader in isr else (isr[-1],)


def replicated_partitions(image: MetadataImage) -> Iterator[tuple[TopicImage, PartitionImage]]:
    """Every partition with its topic: classic and diskless ones both have replicas, an ISR and a
    leader that the controller elects."""
    for topic in image.topics_by_name.values():
        yield from ((topic, p) for p in topic.partitions.values())


def change_for(
    topic: TopicImage, partition: PartitionImage, leader: int, isr: tuple[int, ...], **extra: object
) -> PartitionChangeRecord | None:
    """The record that gives ``partition`` this leader and ISR (None when nothing changes)."""
    if leader == partition.leader and isr == partition.isr and not extra:
        return None
    return PartitionChangeRecord(
        topic.topic_id,
        partition.partition,
        isr=isr if isr != partition.isr else None,
        leader=leader if leader != partition.leader else None,
        **extra,  # type: ignore[arg-type]
    )


def failover_changes(
    image: MetadataImage, unclean_for: Callable[[TopicImage], bool], leaving: Collection[int] = ()
) -> list[PartitionChangeRecord]:
    """The ISR removals and elections the image calls for: brokers that are fenced or ``leaving``
    (controlled shutdown) and replicas on failed log dirs leave ISRs (a classic ISR keeps its last
    member, a diskless one may become empty); partitions whose leader cannot lead, or that have
    none, get a leader when one is eligible (a classic leader must also be in the ISR; see the
    module docstring for the diskless rule). ``unclean_for`` applies to classic topics only."""
    changes: list[PartitionChangeRecord] = []
    for topic, p in replicated_partitions(image):
        gone = [b for b in p.isr if not can_lead(image, p, b, leaving)]
        diskless = topic.is_diskless
        isr = tuple(b for b in p.isr if b not in gone) if diskless else without(p.isr, gone, p.leader)
        leader = p.leader
        if needs_leader(image, topic, p, leader, isr, leaving=leaving):
            leader, isr = elect(
                image, p, isr, unclean=not diskless and unclean_for(topic), leaving=leaving, diskless=diskless
            )
        change = change_for(topic, p, leader, isr)
        if change is not None:
            changes.append(change)
    return changes


def unclean_elections(image: MetadataImage, changes: Iterable[object]) -> list[tuple[str, int, int]]:
    """(topic, partition, new leader) of the ``changes`` that elect a leader of a classic partition
    from outside the ISR ``image`` had: unclean elections, which may lose acknowledged records. A
    diskless partition's data is in object storage: any replica may lead, none of its elections is
    unclean."""
    found = []
    for change in changes:
        if not isinstance(change, PartitionChangeRecord) or change.leader is None or change.leader < 0:
            continue
        topic = image.topics_by_id.get(change.topic_id)
        p = topic.partitions.get(change.partition) if topic is not None else None
        if topic is not None and not topic.is_diskless and p is not None and change.leader not in p.isr:
            found.append((topic.name, change.partition, change.leader))
    return found


def preferred_changes(
    image: MetadataImage, partitions: Collection[tuple[str, int]] | None = None
) -> tuple[list[PartitionChangeRecord], dict[tuple[str, int], str | None]]:
    """Preferred leader election (ElectLeaders type 0, ``auto.leader.rebalance.enable``): move
    leadership to the first replica where it can lead and (for a classic partition) is in the ISR:
    a diskless replica out of sync may lead. Returns the changes and, per partition asked for, None
    or why it was not moved (Kafka's messages)."""
    changes: list[PartitionChangeRecord] = []
    outcome: dict[tuple[str, int], str | None] = {}
    for topic, p in replicated_partitions(image):
        key = (topic.name, p.partition)
        if partitions is not None and key not in partitions:
            continue
        preferred = p.replicas[0] if p.replicas else NO_LEADER
        if p.leader == preferred:
            outcome[key] = "ELECTION_NOT_NEEDED"
            continue
        if (preferred not in p.isr and not topic.is_diskless) or not can_lead(image, p, preferred):
            outcome[key] = f"Failed to elect leader for partition {topic.name}-{p.partition} under strategy PreferredReplicaPartitionLeaderElectionStrategy"
            continue
        change = change_for(topic, p, preferred, p.isr)
        assert change is not None
        changes.append(change)
        outcome[key] = None
    return changes, outcome


def imbalanced_partitions(image: MetadataImage, percentage: int) -> list[tuple[str, int]]:
    """The automatic rebalance's choice (Kafka's checkAndTriggerAutoLeaderRebalance): for each
    broker, the partitions it should lead (first replica) but does not, when they are more than
    ``percentage`` % of the partitions it should lead (``leader.imbalance.per.broker.percentage``)."""
    preferred_of: dict[int, list[tuple[str, int, bool]]] = {}
    for topic, p in replicated_partitions(image):
        if p.replicas:
            preferred_of.setdefault(p.replicas[0], []).append((topic.name, p.partition, p.leader == p.replicas[0]))
    chosen = []
    for entries in preferred_of.values():
        imbalanced = [(name, index) for name, index, leads in entries if not leads]
        if imbalanced and len(imbalanced) * 100 > percentage * len(entries):
            chosen += imbalanced
    return chosen


# ------------------------------------------------------------------------------- reassignment


def start_reassignment(
    image: MetadataImage, topic: TopicImage, partition: PartitionImage, target: tuple[int, ...]
) -> PartitionChangeRecord | None:
    """KIP-455 as KRaft does it: the replica list becomes the target followed by the replicas
    being removed; the added ones catch up (classic: as followers of the leader; diskless: with the
    Batch Coordinator) and join the ISR, then ``reassignment_changes`` finishes it. A target that
    adds nothing finishes at once. Replacing a reassignment in progress starts from its original
    replicas."""
    original = tuple(b for b in partition.replicas if b not in partition.adding_replicas)
    adding = tuple(b for b in target if b not in original)
    removing = tuple(b for b in original if b not in target)
    if not adding:
        return _finish(image, topic, partition, target)
    merged = target + removing
    isr = tuple(b for b in merged if b in partition.isr)
    return PartitionChangeRecord(
        topic.topic_id, partition.partition, isr=isr, replicas=merged, adding_replicas=adding, removing_replicas=removing
    )


def cancel_reassignment(
    image: MetadataImage, topic: TopicImage, partition: PartitionImage
) -> PartitionChangeRecord | None:
    """Back to the replicas before the reassignment: the added ones leave (their data is deleted)."""
    original = tuple(b for b in partition.replicas if b not in partition.adding_replicas)
    return _finish(image, topic, partition, original)


def _finish(
    image: MetadataImage, topic: TopicImage, partition: PartitionImage, target: tuple[int, ...]
) -> PartitionChangeRecord | None:
    """The change that makes ``target`` the replicas: the others leave the ISR (a classic ISR keeps
    a member, a diskless one may become empty) and a leader that is not in ``target``, or cannot
    lead (classic: or is out of the ISR), is replaced by ``elect``'s choice among ``target``."""
    diskless = topic.is_diskless
    isr = tuple(b for b in target if b in partition.isr)
    if not isr and not diskless:
        isr = target[:1]  # nothing of the target is in sync: keep a member, as an empty ISR cannot be
    leader = partition.leader
    if needs_leader(image, topic, partition, leader, isr, replicas=target):
        leader, isr = elect(image, partition, isr, unclean=False, diskless=diskless, replicas=target)
    if target == partition.replicas and isr == partition.isr and leader == partition.leader and not (
        partition.adding_replicas or partition.removing_replicas
    ):
        return None
    return PartitionChangeRecord(
        topic.topic_id, partition.partition, isr=isr, leader=leader if leader != partition.leader else None,
        replicas=target, adding_replicas=(), removing_replicas=(),
    )


def reassignment_changes(image: MetadataImage) -> list[PartitionChangeRecord]:
    """Reassignments whose added replicas are all in the ISR now finish: the removed replicas
    leave the replica list and the ISR, and leadership moves when the leader was one of them."""
    changes = []
    for topic, p in replicated_partitions(image):
        if p.adding_replicas and all(b in p.isr for b in p.adding_replicas):
            target = tuple(b for b in p.replicas if b not in p.removing_replicas)
            change = _finish(image, topic, p, target)
            if change is not None:
                changes.append(change)
    return changes
