"""What ``shoal groups`` reads about consumer groups: listings, descriptions, each member's
assigned partitions and the per-partition lag, as Kafka's ConsumerGroupCommand computes them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import typer

from shoal.cli.consumer_protocol import PROTOCOL_TYPE, ConsumerProtocolError, decode_assignment
from shoal.cli.kafka_client import (
    LATEST_TIMESTAMP,
    UNKNOWN_OFFSET,
    GroupDescription,
    KafkaApiError,
    KafkaClient,
    KafkaClientError,
    TopicPartition,
)
from shoal.protocol.errors import ErrorCode

MISSING = "-"

# Kafka's ConsumerGroupState names, in Kafka's order (the "Valid states" message lists them so).
GROUP_STATES = ("PreparingRebalance", "CompletingRebalance", "Stable", "Dead", "Empty", "Assigning", "Reconciling")
REBALANCING_STATES = frozenset({"PreparingRebalance", "CompletingRebalance", "Assigning", "Reconciling"})
INACTIVE_STATES = frozenset({"Empty", "Dead"})


def parse_states(text: str) -> list[str]:
    """A comma-separated, case-insensitive state list in Kafka's canonical spelling."""
    by_lower = {s.lower(): s for s in GROUP_STATES}
    parsed: list[str] = []
    for raw in text.split(","):
        name = by_lower.get(raw.strip().lower())
        if name is None:
            raise typer.BadParameter(f"Invalid state list '{text}'. Valid states are: {', '.join(GROUP_STATES)}")
        if name not in parsed:
            parsed.append(name)
    return parsed


# ------------------------------------------------------------------------------------ listings


@dataclass(frozen=True, slots=True)
class GroupListingView:
    group_id: str
    state: str


def consumer_group_listings(client: KafkaClient, states: Sequence[str] = ()) -> list[GroupListingView]:
    """Consumer groups (protocol type 'consumer' or none yet), as Kafka's admin lists them."""
    views = []
    for listing in client.list_groups(states):
        if listing.protocol_type not in (PROTOCOL_TYPE, ""):
            continue
        state = listing.state
        if state is None and states:  # a broker without ListGroups v4 cannot filter: ask the group
            state = client.describe_group(listing.group_id).state
        views.append(GroupListingView(listing.group_id, state or "Unknown"))
    if states:
        views = [v for v in views if v.state in states]
    return sorted(views, key=lambda v: v.group_id)


# ---------------------------------------------------------------------------------- descriptions


def describe_consumer_group(client: KafkaClient, group_id: str) -> GroupDescription | None:
    """The group's description, or None when it does not exist (state Dead or GROUP_ID_NOT_FOUND)."""
    desc = client.describe_group(group_id)
    if desc.error == ErrorCode.group_id_not_found:
        return None
    if desc.error != ErrorCode.none:
        raise KafkaApiError(desc.error, desc.error_message, context=f"Describing group '{group_id}'")
    if desc.protocol_type not in (PROTOCOL_TYPE, ""):
        raise KafkaClientError(f"GroupId {group_id} is not a consumer group ({desc.protocol_type}).")
    if desc.state == "Dead":
        return None
    return desc


def member_assignments(desc: GroupDescription) -> dict[str, list[TopicPartition]]:
    """Each member's assigned partitions, decoded from its ConsumerProtocol assignment bytes."""
    out: dict[str, list[TopicPartition]] = {}
    for m in desc.members:
        try:
            assignment = decode_assignment(m.assignment)
        except ConsumerProtocolError as exc:
            raise KafkaClientError(
                f"Group '{desc.group_id}': member {m.member_id} has an undecodable assignment: {exc}"
            ) from None
        out[m.member_id] = sorted(TopicPartition(t, p) for t, p in assignment.topic_partitions())
    return out


# ------------------------------------------------------------------------------------- offsets


@dataclass(frozen=True, slots=True)
class OffsetRow:
    group: str
    tp: TopicPartition
    current: int | None
    log_end: int | None
    consumer_id: str
    host: str
    client_id: str

    @property
    def lag(self) -> int | None:
        if self.current is None or self.current == UNKNOWN_OFFSET or self.log_end is None:
            return None
        return self.log_end - self.current


def offset_rows(client: KafkaClient, desc: GroupDescription) -> list[OffsetRow]:
    """Kafka's rows: assigned partitions by member (most partitions first), then committed but unassigned."""
    committed = client.fetch_offsets(desc.group_id)
    assignments = member_assignments(desc)
    members = sorted(
        (m for m in desc.members if assignments[m.member_id]),
        key=lambda m: (-len(assignments[m.member_id]), m.member_id),
    )
    planned: list[tuple[TopicPartition, str, str, str]] = []
    assigned: set[TopicPartition] = set()
    for m in members:
        for tp in assignments[m.member_id]:
            planned.append((tp, m.member_id, m.host, m.client_id))
            assigned.add(tp)
    for tp in sorted(set(committed) - assigned):
        planned.append((tp, MISSING, MISSING, MISSING))
    ends = client.list_offsets({tp: LATEST_TIMESTAMP for tp, *_ in planned}) if planned else {}
    rows = []
    for tp, consumer_id, host, client_id in planned:
        end = ends.get(tp)
        log_end = end.offset if end is not None and end.error == ErrorCode.none and end.offset >= 0 else None
        rows.append(OffsetRow(desc.group_id, tp, committed.get(tp), log_end, consumer_id, host, client_id))
    return rows
