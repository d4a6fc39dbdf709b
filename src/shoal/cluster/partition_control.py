"""Changes of partitions' leadership and ISR that brokers ask for, decided on the metadata image
and appended by compare-and-append (as every broker decides topic changes). Classic and diskless
partitions both have replicas; a diskless ISR is the replicas in sync with the Batch Coordinator,
which need not include the leader (``shoal.cluster.election`` has the rules).

- ``alter_isr``: a leader shrinks or expands its ISR (Kafka's AlterPartition): refused unless the
  leader and partition epochs it saw are still current, so a deposed leader changes nothing.
- ``shut_down``: controlled shutdown moves a broker's leaderships to other replicas and
  takes it out of ISRs before it stops.
- ``replicas_offline``: a broker whose log dir failed reports the replicas on it (KIP-112): they
  leave ISRs, their leaderships move, Metadata lists them as offline; ``replicas_online`` undoes
  it once the dir is repaired.
- ``elect_preferred``: ElectLeaders (preferred) and the automatic leader rebalance;
  ``elect_unclean``: ElectLeaders (unclean).
- ``alter_reassignments``: AlterPartitionReassignments (KIP-455), of classic and diskless replicas.

Methods block (they read and append the metadata store): call them off the event loop.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import TypeVar

from shoal.cluster.election import (
    NO_LEADER,
    can_lead,
    cancel_reassignment,
    change_for,
    elect,
    failover_changes,
    preferred_changes,
    replicated_partitions,
    start_reassignment,
)
from shoal.metadata.image import MetadataImage, PartitionImage, TopicImage
from shoal.metadata.log import MetadataConflictError, MetadataStore
from shoal.metadata.records import MetadataRecord, PartitionChangeRecord
from shoal.protocol.errors import ErrorCode, KafkaError

log = logging.getLogger(__name__)

CONFLICT_RETRIES = 20
T = TypeVar("T")
#: An unclean election's outcome per partition, and the classic partitions it elected.
_Elected = tuple[dict[tuple[str, int], str | None], list[tuple[str, int]]]


class PartitionControl:
    def __init__(
        self,
        store: MetadataStore,
        node_id: int,
        catch_up: Callable[[], MetadataImage],
        unclean_for: Callable[[TopicImage], bool],
    ) -> None:
        self._store = store
        self._node_id = node_id
        self._catch_up = catch_up
        self._unclean_for = unclean_for
        #: Unclean elections ElectLeaders asked this broker for (Kafka's UncleanLeaderElectionsPerSec).
        self.unclean_elections = 0

    def _decide(self, decide: Callable[[MetadataImage], tuple[list[MetadataRecord], T]]) -> T:
        """Run ``decide`` on the newest image and append what it returns right after that image,
        again on a newer image when another broker appended first."""
        for _ in range(CONFLICT_RETRIES):
            image = self._catch_up()
            records, answer = decide(image)
            if not records:
                return answer
            try:
                self._store.append(records, image.offset, self._node_id)
            except MetadataConflictError:
                continue
            self._catch_up()
            return answer
        raise KafkaError(ErrorCode.request_timed_out, "the metadata log kept moving; try again")

    # ------------------------------------------------------------------------------ ISR changes

    def alter_isr(
        self, topic_id: uuid.UUID, partition: int, leader_epoch: int, partition_epoch: int, isr: Sequence[int]
    ) -> PartitionImage:
        """The leader's new ISR (AlterPartition). Returns the partition as changed; KafkaError with
        AlterPartition's codes when the leader is stale or the ISR not allowed. A classic ISR must
        include the leader; a diskless one (in sync with the Batch Coordinator) may leave it out,
        and may be empty."""

        def decide(image: MetadataImage) -> tuple[list[MetadataRecord], PartitionImage]:
            topic = image.topics_by_id.get(topic_id)
            if topic is None:
                raise KafkaError(ErrorCode.unknown_topic_id, f"topic id {topic_id} does not exist")
            p = topic.partitions.get(partition)
            if p is None:
                raise KafkaError(ErrorCode.unknown_topic_or_partition, f"{topic.name}-{partition} does not exist")
            name = f"{topic.name}-{partition}"
            if p.leader != self._node_id:
                raise KafkaError(ErrorCode.not_leader_or_follower, f"node {self._node_id} no longer leads {name}")
            if leader_epoch != p.leader_epoch:
                raise KafkaError(
                    ErrorCode.fenced_leader_epoch, f"leader epoch {leader_epoch} of {name} is not {p.leader_epoch}"
                )
            if partition_epoch != p.partition_epoch:
                raise KafkaError(
                    ErrorCode.invalid_update_version,
                    f"partition epoch {partition_epoch} of {name} is not {p.partition_epoch}",
                )
            wanted = tuple(b for b in p.replicas if b in isr)
            if len(wanted) != len(set(isr)):
                raise KafkaError(ErrorCode.invalid_request, f"ISR {list(isr)} of {name} is not a set of its replicas")
            if not topic.is_diskless and self._node_id not in wanted:
                raise KafkaError(ErrorCode.invalid_request, f"ISR {list(isr)} of {name} is not a set of its replicas with the leader")
            added = [b for b in wanted if b not in p.isr]
            if any(not can_lead(image, p, b) for b in added):
                raise KafkaError(ErrorCode.ineligible_replica, f"ISR {list(isr)} of {name} names a fenced or offline replica")
            if wanted == p.isr:
                return [], p
            change = PartitionChangeRecord(topic_id, partition, isr=wanted)
            return [change], p.changed(change)

        return self._decide(decide)

    # ------------------------------------------------------------------------ broker departures

    def shut_down(self, node_id: int) -> int:
        """Controlled shutdown: ``node_id`` leaves every ISR (a classic one only when it is not its
        last member), and its leaderships move to the first eligible replica (``failover_changes``).
        Returns how many partitions changed."""

        def decide(image: MetadataImage) -> tuple[list[MetadataRecord], int]:
            changes: list[MetadataRecord] = list(failover_changes(image, self._unclean_for, leaving=(node_id,)))
            return changes, len(changes)

        return self._decide(decide)

    def replicas_offline(self, node_id: int, partitions: Collection[tuple[str, int]], offline: bool = True) -> int:
        """A log dir of ``node_id`` failed (``offline``) or was repaired: its replicas of
        ``partitions`` are marked offline (they leave ISRs, leaderships move) or online again."""

        def decide(image: MetadataImage) -> tuple[list[MetadataRecord], int]:
            changes: list[MetadataRecord] = []
            for name, index in partitions:
                topic = image.topic(name)
                p = topic.partitions.get(index) if topic is not None else None
                if topic is None or p is None or node_id not in p.replicas:
                    continue
                marked = node_id in p.offline_replicas
                if marked == offline:
                    continue
                now = (
                    tuple(sorted({*p.offline_replicas, node_id}))
                    if offline
                    else tuple(b for b in p.offline_replicas if b != node_id)
                )
                change = change_for(topic, p, p.leader, p.isr, offline_replicas=now)
                assert change is not None
                changes.append(change)
            if not changes:
                return [], 0
            marked_image = image.apply((image.offset + 1 + i, c) for i, c in enumerate(changes))  # type: ignore[misc]
            changes += failover_changes(marked_image, self._unclean_for)
            return changes, len(changes)

        return self._decide(decide)

    # ------------------------------------------------------------------------ preferred leaders

    def elect_preferred(
        self, partitions: Collection[tuple[str, int]] | None = None
    ) -> dict[tuple[str, int], str | None]:
        """Preferred leader election of ``partitions`` (all when None): per partition, None when
        elected, else Kafka's reason (``ELECTION_NOT_NEEDED`` or why the preferred one cannot lead)."""

        def decide(image: MetadataImage) -> tuple[list[MetadataRecord], dict[tuple[str, int], str | None]]:
            changes, outcome = preferred_changes(image, partitions)
            return list(changes), outcome

        return self._decide(decide)

    def elect_unclean(
        self, partitions: Collection[tuple[str, int]] | None = None
    ) -> dict[tuple[str, int], str | None]:
        """Unclean leader election (ElectLeaders type 1) of leaderless ``partitions`` (all when
        None): the first alive replica leads, alone in the ISR. A diskless partition elects as
        failover does (an ISR replica first, else any; the ISR unchanged), which loses nothing:
        it is not counted or logged as unclean. Per partition, None when elected,
        ``ELECTION_NOT_NEEDED`` when it has a leader, else why none could be elected."""

        def decide(image: MetadataImage) -> tuple[list[MetadataRecord], _Elected]:
            changes: list[MetadataRecord] = []
            outcome: dict[tuple[str, int], str | None] = {}
            unclean: list[tuple[str, int]] = []  # the classic partitions elected
            for topic, p in replicated_partitions(image):
                key = (topic.name, p.partition)
                if partitions is not None and key not in partitions:
                    continue
                if p.leader != NO_LEADER:
                    outcome[key] = "ELECTION_NOT_NEEDED"
                    continue
                leader, isr = elect(image, p, p.isr, unclean=True, diskless=topic.is_diskless)
                if leader == NO_LEADER:
                    outcome[key] = f"Failed to elect leader for partition {topic.name}-{p.partition} under strategy UncleanPartitionLeaderElectionStrategy"
                    continue
                change = change_for(topic, p, leader, isr)
                assert change is not None
                changes.append(change)
                outcome[key] = None
                if not topic.is_diskless:
                    unclean.append(key)
            return changes, (outcome, unclean)

        outcome, unclean = self._decide(decide)
        self.unclean_elections += len(unclean)
        for topic, partition in unclean:
            log.warning("unclean leader election of %s-%d (ElectLeaders): records only the old ISR had are lost",
                        topic, partition)
        return outcome

    # ------------------------------------------------------------------------------ reassignment

    def alter_reassignments(
        self, wanted: Mapping[tuple[str, int], Sequence[int] | None]
    ) -> dict[tuple[str, int], tuple[ErrorCode, str | None]]:
        """AlterPartitionReassignments: per partition, start (or replace) a reassignment to the
        given replicas, or cancel the one in progress (None). Answers Kafka's codes and messages."""

        def decide(image: MetadataImage) -> tuple[list[MetadataRecord], dict[tuple[str, int], tuple[ErrorCode, str | None]]]:
            changes: list[MetadataRecord] = []
            outcome: dict[tuple[str, int], tuple[ErrorCode, str | None]] = {}
            for (name, index), target in wanted.items():
                topic = image.topic(name)
                p = topic.partitions.get(index) if topic is not None else None
                if topic is None or p is None:
                    outcome[(name, index)] = (ErrorCode.unknown_topic_or_partition, f"Unable to find partition {name}-{index}.")
                    continue
                try:
                    if target is None:
                        if not p.adding_replicas and not p.removing_replicas:
                            raise KafkaError(
                                ErrorCode.no_reassignment_in_progress,
                                f"Unable to cancel reassignment for {name}-{index}: there is no reassignment in progress.",
                            )
                        change = cancel_reassignment(image, topic, p)
                    else:
                        check_replica_assignment(image, tuple(target))
                        change = start_reassignment(image, topic, p, tuple(target))
                except KafkaError as exc:
                    outcome[(name, index)] = (exc.code, exc.message)
                    continue
                if change is not None:
                    changes.append(change)
                outcome[(name, index)] = (ErrorCode.none, None)
            return changes, outcome

        return self._decide(decide)


def check_replica_assignment(image: MetadataImage, replicas: tuple[int, ...]) -> None:
    """Kafka's checks of a reassignment's target replicas, with its messages."""
    if not replicas:
        raise KafkaError(ErrorCode.invalid_replica_assignment, "The manual partition assignment includes an empty replica list.")
    if len(set(replicas)) != len(replicas):
        raise KafkaError(
            ErrorCode.invalid_replica_assignment, f"The manual partition assignment includes duplicate replicas {list(replicas)}."
        )
    for b in replicas:
        if b not in image.brokers:
            raise KafkaError(
                ErrorCode.invalid_replica_assignment,
                f"The manual partition assignment includes broker {b}, but no such broker is registered.",
            )


def reassignments_in_progress(
    image: MetadataImage, partitions: Collection[tuple[str, int]] | None = None
) -> list[tuple[str, int, PartitionImage]]:
    """ListPartitionReassignments: the partitions (classic and diskless) with a reassignment going on."""
    found = []
    for topic, p in replicated_partitions(image):
        if (partitions is None or (topic.name, p.partition) in partitions) and (p.adding_replicas or p.removing_replicas):
            found.append((topic.name, p.partition, p))
    return found
