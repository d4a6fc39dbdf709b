"""``shoal groups``: list, describe, reset offsets of and delete consumer groups.

Shaped like Kafka's ``kafka-consumer-groups.sh`` (same checks, messages and column layout),
so operators and their scripts can move between the two. Tables are plain aligned text as
Kafka prints them (trailing blanks trimmed); errors go to stderr and make the exit code 1,
usage errors 2.
"""

from __future__ import annotations

import datetime
import re
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Annotated

import typer

from shoal.cli.consumer_protocol import PROTOCOL_TYPE, ConsumerProtocolError, decode_assignment
from shoal.cli.kafka_client import (
    DEFAULT_BOOTSTRAP,
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    UNKNOWN_OFFSET,
    GroupDescription,
    KafkaApiError,
    KafkaClient,
    KafkaClientError,
    TopicPartition,
    all_partitions,
    error_message,
    error_name,
)
from shoal.protocol.errors import ErrorCode

groups_app = typer.Typer(
    help="List, describe, reset the offsets of and delete consumer groups (like kafka-consumer-groups.sh).",
    no_args_is_help=True,
)

MISSING = "-"
CLIENT_ID = "shoal-consumer-groups"

# Kafka's ConsumerGroupState names, in Kafka's order (the "Valid states" message lists them so).
GROUP_STATES = ("PreparingRebalance", "CompletingRebalance", "Stable", "Dead", "Empty", "Assigning", "Reconciling")
_REBALANCING = frozenset({"PreparingRebalance", "CompletingRebalance", "Assigning", "Reconciling"})
_INACTIVE = frozenset({"Empty", "Dead"})

BootstrapOpt = Annotated[
    str, typer.Option("--bootstrap-server", help="The broker(s) to connect to: HOST:PORT[,HOST:PORT].")
]
TimeoutOpt = Annotated[
    int,
    typer.Option("--timeout", help="Milliseconds each broker operation may take, retries included.", min=1),
]
GroupOpt = Annotated[list[str] | None, typer.Option("--group", help="A consumer group (repeatable).")]
AllGroupsOpt = Annotated[bool, typer.Option("--all-groups", help="Apply to all consumer groups.")]
DEFAULT_TIMEOUT_MS = 5_000  # kafka-consumer-groups.sh --timeout default


# ------------------------------------------------------------------------------------ plumbing


def _error(message: str) -> None:
    """Kafka's printError: a blank line, then ``Error: ...`` on stderr."""
    typer.echo(f"\nError: {message}", err=True)


def _usage(message: str) -> typer.Exit:
    typer.echo(f"Error: {message}", err=True)
    return typer.Exit(2)


@contextmanager
def _client(bootstrap: str, timeout_ms: int) -> Iterator[KafkaClient]:
    """A client for one command; any client failure ends the command as Kafka's tool does (exit 1)."""
    try:
        with KafkaClient(bootstrap, client_id=CLIENT_ID, timeout=timeout_ms / 1000) as client:
            yield client
    except KafkaClientError as exc:
        _error(f"Executing consumer group command failed due to {exc}")
        raise typer.Exit(1) from None


def _line(values: Sequence[object], widths: Sequence[int]) -> str:
    """Left-aligned columns separated by one blank, like Kafka's ``%-Ns`` formats; the last is unpadded."""
    cells = [f"{v!s:<{w}}" for v, w in zip(values, widths, strict=False)]
    cells.extend(str(v) for v in values[len(widths) :])
    return " ".join(cells).rstrip()


def _print_table(header: Sequence[str], rows: Sequence[Sequence[object]], widths: Sequence[int]) -> None:
    typer.echo("")
    typer.echo(_line(header, widths))
    for row in rows:
        typer.echo(_line(row, widths))


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


def _group_ids(client: KafkaClient, named: Sequence[str], all_groups: bool) -> list[str]:
    if all_groups and named:
        raise _usage("Option --all-groups cannot be used together with --group.")
    if all_groups:
        return sorted(g.group_id for g in _consumer_group_listings(client))
    if not named:
        raise _usage("One of --group or --all-groups is required.")
    return list(dict.fromkeys(named))


def _consumer_group_listings(client: KafkaClient, states: Sequence[str] = ()) -> list[GroupListingView]:
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


@dataclass(frozen=True, slots=True)
class GroupListingView:
    group_id: str
    state: str


def _describe(client: KafkaClient, group_id: str) -> GroupDescription | None:
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


def _assignments(desc: GroupDescription) -> dict[str, list[TopicPartition]]:
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


def _should_print(group_id: str, desc: GroupDescription | None, rows: int) -> bool:
    """Kafka's shouldPrintMemberState: say why nothing (or a partial picture) is shown."""
    if desc is None:
        _error(f"Consumer group '{group_id}' does not exist.")
        return False
    if desc.state == "Empty":
        typer.echo(f"\nConsumer group '{group_id}' has no active members.", err=True)
    elif desc.state in _REBALANCING:
        typer.echo(f"\nWarning: Consumer group '{group_id}' is rebalancing.", err=True)
    return rows > 0


# ---------------------------------------------------------------------------------------- list


@groups_app.command("list")
def list_groups(
    state: Annotated[
        str | None,
        typer.Option(
            "--state",
            help="Only groups in these states (comma-separated, case-insensitive, e.g. Stable,Empty); "
            "prints each group's state.",
        ),
    ] = None,
    bootstrap_server: BootstrapOpt = DEFAULT_BOOTSTRAP,
    timeout: TimeoutOpt = DEFAULT_TIMEOUT_MS,
) -> None:
    """List consumer groups (--list); with --state, as a GROUP/STATE table."""
    states = parse_states(state) if state is not None else []
    with _client(bootstrap_server, timeout) as client:
        listings = _consumer_group_listings(client, states)
    if state is None:
        for listing in listings:
            typer.echo(listing.group_id)
        return
    width = max([15, *(len(v.group_id) for v in listings)]) + 10
    typer.echo(_line(["GROUP", "STATE"], [width, 20]))
    for v in listings:
        typer.echo(_line([v.group_id, v.state], [width, 20]))


# ------------------------------------------------------------------------------------ describe


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


def _show(value: int | None) -> str:
    return MISSING if value is None else str(value)


def offset_rows(client: KafkaClient, desc: GroupDescription) -> list[OffsetRow]:
    """Kafka's rows: assigned partitions by member (most partitions first), then committed but unassigned."""
    committed = client.fetch_offsets(desc.group_id)
    assignments = _assignments(desc)
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


def _print_offsets(rows: Sequence[OffsetRow]) -> None:
    widths = [
        max([15, *(len(r.group) for r in rows)]),
        max([15, *(len(r.tp.topic) for r in rows)]),
        10,
        15,
        15,
        15,
        max([15, *(len(r.consumer_id) for r in rows)]),
        max([15, *(len(r.host) for r in rows)]),
    ]
    header = ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST", "CLIENT-ID"]
    _print_table(
        header,
        [
            [r.group, r.tp.topic, r.tp.partition, _show(r.current), _show(r.log_end), _show(r.lag), r.consumer_id,
             r.host, r.client_id]
            for r in rows
        ],
        widths,
    )


def _print_members(desc: GroupDescription, verbose: bool) -> None:
    assignments = _assignments(desc)
    with_instance = any(m.group_instance_id for m in desc.members)
    rows = []
    for m in desc.members:
        tps = assignments[m.member_id]
        row: list[object] = [desc.group_id, m.member_id]
        if with_instance:
            row.append(m.group_instance_id or "")
        row += [m.host, m.client_id, len(tps)]
        if verbose:
            by_topic: dict[str, list[int]] = {}
            for tp in tps:
                by_topic.setdefault(tp.topic, []).append(tp.partition)
            row.append(
                ", ".join(sorted(f"{t}({','.join(map(str, sorted(ps)))})" for t, ps in by_topic.items())) or MISSING
            )
        rows.append(row)
    header = ["GROUP", "CONSUMER-ID"] + (["GROUP-INSTANCE-ID"] if with_instance else [])
    header += ["HOST", "CLIENT-ID", "#PARTITIONS"] + (["ASSIGNMENT"] if verbose else [])
    widths = [
        max([15, len(desc.group_id)]),
        max([15, *(len(m.member_id) for m in desc.members)]),
    ]
    if with_instance:
        widths.append(max([17, *(len(m.group_instance_id or "") for m in desc.members)]))
    widths += [max([15, *(len(m.host) for m in desc.members)]), max([15, *(len(m.client_id) for m in desc.members)])]
    if verbose:
        widths.append(15)
    _print_table(header, rows, widths)


def _print_state(desc: GroupDescription) -> None:
    node = desc.coordinator
    coordinator = f"{node.address} ({node.node_id})"
    widths = [max(25, len(desc.group_id)), max(25, len(coordinator)), 20, 15]
    _print_table(
        ["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"],
        [[desc.group_id, coordinator, desc.protocol, desc.state, len(desc.members)]],
        widths,
    )


@groups_app.command("describe")
def describe(
    groups: Annotated[list[str] | None, typer.Argument(help="The consumer group(s) to describe.", show_default=False)] = None,
    group: GroupOpt = None,
    all_groups: AllGroupsOpt = False,
    members: Annotated[bool, typer.Option("--members", help="Describe members: CONSUMER-ID HOST CLIENT-ID #PARTITIONS.")] = False,
    offsets: Annotated[bool, typer.Option("--offsets", help="Describe committed offsets and lag (the default).")] = False,
    state: Annotated[bool, typer.Option("--state", help="Describe coordinator, assignment strategy, state, #members.")] = False,
    verbose: Annotated[bool, typer.Option("--verbose", help="With --members: also each member's ASSIGNMENT.")] = False,
    bootstrap_server: BootstrapOpt = DEFAULT_BOOTSTRAP,
    timeout: TimeoutOpt = DEFAULT_TIMEOUT_MS,
) -> None:
    """Describe consumer groups: offsets and lag per partition, or --members, or --state."""
    if sum([members, offsets, state]) > 1:
        raise _usage("Option describe takes at most one of these options: --members, --offsets, --state")
    failed = False
    with _client(bootstrap_server, timeout) as client:
        for group_id in sorted(_group_ids(client, [*(groups or []), *(group or [])], all_groups)):
            try:
                desc = _describe(client, group_id)
                if state:
                    if _should_print(group_id, desc, 1):
                        assert desc is not None
                        _print_state(desc)
                elif members:
                    if _should_print(group_id, desc, len(desc.members) if desc else 0):
                        assert desc is not None
                        _print_members(desc, verbose)
                else:
                    rows = offset_rows(client, desc) if desc is not None else []
                    if _should_print(group_id, desc, len(rows)):
                        _print_offsets(rows)
                failed = failed or desc is None
            except KafkaClientError as exc:
                _error(f"Executing consumer group command failed due to {exc}")
                failed = True
    if failed:
        raise typer.Exit(1)


# ------------------------------------------------------------------------------- reset-offsets

_DATETIME = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})\.(\d{3})(Z|[+-]\d{2}(?::?\d{2})?)?", re.ASCII
)
_DURATION = re.compile(
    r"([-+]?)P(?:([-+]?\d+)D)?(T(?:([-+]?\d+)H)?(?:([-+]?\d+)M)?(?:([-+]?\d+)(?:[.,](\d{0,9}))?S)?)?",
    re.ASCII | re.IGNORECASE,
)
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
_MS = datetime.timedelta(milliseconds=1)


def parse_datetime_ms(text: str) -> int:
    """Kafka's Utils.getDateTime: ``YYYY-MM-DDTHH:mm:SS.sss`` with ``Z``/``±hh[:mm]``, UTC when no zone."""
    m = _DATETIME.fullmatch(text.strip())
    bad = f'Unparseable date: "{text}" (expected YYYY-MM-DDTHH:mm:SS.sss, optionally followed by Z or ±hh:mm)'
    if m is None:
        raise ValueError(bad)
    year, month, day, hour, minute, second, millis, zone = m.groups()
    tz = datetime.UTC
    if zone not in (None, "Z"):
        digits = zone[1:].replace(":", "")
        hours, minutes = int(digits[:2]), int(digits[2:] or 0)
        if hours > 18 or minutes > 59:
            raise ValueError(bad)
        offset = datetime.timedelta(hours=hours, minutes=minutes)
        tz = datetime.timezone(offset if zone[0] == "+" else -offset)
    try:
        moment = datetime.datetime(
            int(year), int(month), int(day), int(hour), int(minute), int(second), int(millis) * 1000, tzinfo=tz
        )
    except ValueError:
        raise ValueError(bad) from None
    return (moment - _EPOCH) // _MS


def parse_duration_ms(text: str) -> int:
    """Java's Duration.parse (``PnDTnHnMn.nS``, signs allowed), in milliseconds."""
    m = _DURATION.fullmatch(text.strip())
    if m is None or m.group(3) == "T" or not any(m.group(i) for i in (2, 4, 5, 6)):
        raise ValueError(f'Text cannot be parsed to a Duration: "{text}" (expected PnDTnHnMnS)')
    sign, days, _, hours, minutes, seconds, fraction = m.groups()
    sec = int(seconds or 0)
    nanos = int((fraction or "").ljust(9, "0")) * (-1 if seconds and seconds.startswith("-") else 1)
    total = datetime.timedelta(
        days=int(days or 0), hours=int(hours or 0), minutes=int(minutes or 0), seconds=sec, microseconds=nanos / 1000
    )
    ms = total // _MS
    return -ms if sign == "-" else ms


def parse_topic_specs(specs: Sequence[str]) -> list[tuple[str, list[int] | None]]:
    """``--topic`` values: ``TOPIC`` (all its partitions) or ``TOPIC:P[,P...]``."""
    parsed: list[tuple[str, list[int] | None]] = []
    for spec in specs:
        topic, sep, parts = spec.partition(":")
        if not topic:
            raise typer.BadParameter(f"Invalid topic '{spec}'", param_hint="--topic")
        if not sep:
            parsed.append((topic, None))
            continue
        try:
            partitions = [int(p) for p in parts.split(",") if p.strip()]
        except ValueError:
            raise typer.BadParameter(f"Invalid partition list in '{spec}'", param_hint="--topic") from None
        if not partitions or any(p < 0 for p in partitions):
            raise typer.BadParameter(f"Invalid partition list in '{spec}'", param_hint="--topic")
        parsed.append((topic, partitions))
    return parsed


@dataclass(frozen=True, slots=True)
class ResetSpec:
    """Which new offset each partition gets: one of Kafka's reset options."""

    kind: str  # earliest | latest | current | offset | datetime | duration | shift
    value: int = 0


class _ResetFailed(Exception):
    """The reset of one group cannot go on; the message is printed as Kafka's error."""


def _warn(message: str) -> None:
    typer.echo(f"WARN {message}", err=True)


def _partitions_to_reset(
    client: KafkaClient, group_id: str, topics: Sequence[tuple[str, list[int] | None]], all_topics: bool
) -> list[TopicPartition]:
    if all_topics:
        return sorted(client.fetch_offsets(group_id))
    out = [TopicPartition(t, p) for t, parts in topics if parts is not None for p in parts]
    whole = [t for t, parts in topics if parts is None]
    if whole:
        cluster = client.metadata(whole)
        for name in whole:
            info = cluster.topics.get(name)
            if info is None or info.error != ErrorCode.none:
                code = info.error if info is not None else ErrorCode.unknown_topic_or_partition
                raise KafkaApiError(code, context=f"Topic '{name}'")
        out.extend(all_partitions(cluster, whole))
    return sorted(set(out))


def _listed(client: KafkaClient, partitions: Sequence[TopicPartition], timestamp: int, what: str) -> dict[TopicPartition, int]:
    """ListOffsets for every partition; any failure ends the reset like Kafka's printUsageAndExit."""
    answers = client.list_offsets({tp: timestamp for tp in partitions})
    out = {}
    for tp in partitions:
        answer = answers[tp]
        if answer.error != ErrorCode.none or answer.offset < 0:
            detail = f" ({error_name(answer.error)}: {error_message(answer.error)})" if answer.error != ErrorCode.none else ""
            raise _ResetFailed(f"Error getting {what} offset of topic partition: {tp}{detail}")
        out[tp] = answer.offset
    return out


def _clamped(client: KafkaClient, requested: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
    """Kafka's checkOffsetsRange: above the log end goes to the log end, below the start to the start."""
    parts = sorted(requested)
    starts = client.list_offsets({tp: EARLIEST_TIMESTAMP for tp in parts})
    ends = client.list_offsets({tp: LATEST_TIMESTAMP for tp in parts})
    out = {}
    for tp in parts:
        offset = requested[tp]
        end, start = ends[tp], starts[tp]
        if end.error == ErrorCode.none and end.offset >= 0 and offset > end.offset:
            _warn(f"New offset ({offset}) is higher than latest offset for topic partition {tp}. "
                  f"Value will be set to {end.offset}")
            offset = end.offset
        elif start.error == ErrorCode.none and start.offset >= 0 and offset < start.offset:
            _warn(f"New offset ({offset}) is lower than earliest offset for topic partition {tp}. "
                  f"Value will be set to {start.offset}")
            offset = start.offset
        out[tp] = offset
    return out


def prepare_offsets(
    client: KafkaClient, group_id: str, partitions: Sequence[TopicPartition], spec: ResetSpec
) -> dict[TopicPartition, int]:
    """Kafka's prepareOffsetsToReset for the options shoal supports."""
    if not partitions:
        return {}
    if spec.kind == "offset":
        return _clamped(client, {tp: spec.value for tp in partitions})
    if spec.kind == "earliest":
        return _listed(client, partitions, EARLIEST_TIMESTAMP, "starting")
    if spec.kind == "latest":
        return _listed(client, partitions, LATEST_TIMESTAMP, "ending")
    if spec.kind in ("datetime", "duration"):
        timestamp = spec.value if spec.kind == "datetime" else int(time.time() * 1000) - spec.value
        answers = client.list_offsets({tp: timestamp for tp in partitions})
        found = {tp: a.offset for tp, a in answers.items() if a.error == ErrorCode.none and a.offset >= 0}
        failed = [tp for tp in partitions if answers[tp].error != ErrorCode.none]
        if failed:
            raise _ResetFailed(f"Error getting offset by timestamp of topic partition: {failed[0]}")
        # No record at or after the timestamp: the log end, as Kafka does.
        missing = [tp for tp in partitions if tp not in found]
        found.update(_listed(client, missing, LATEST_TIMESTAMP, "ending") if missing else {})
        return {tp: found[tp] for tp in partitions}
    committed = client.fetch_offsets(group_id)
    if spec.kind == "current":
        result = {tp: committed[tp] for tp in partitions if tp in committed}
        missing = [tp for tp in partitions if tp not in committed]
        result.update(_listed(client, missing, LATEST_TIMESTAMP, "ending") if missing else {})
        return {tp: result[tp] for tp in partitions}
    if spec.kind == "shift":
        for tp in partitions:
            if tp not in committed:
                raise _ResetFailed(
                    f"Cannot shift offset for partition {tp} since there is no current committed offset"
                )
        return _clamped(client, {tp: committed[tp] + spec.value for tp in partitions})
    raise ValueError(f"unknown reset kind {spec.kind}")


@groups_app.command("reset-offsets")
def reset_offsets(
    group: GroupOpt = None,
    all_groups: AllGroupsOpt = False,
    topic: Annotated[
        list[str] | None, typer.Option("--topic", help="TOPIC or TOPIC:P[,P...] to reset (repeatable).")
    ] = None,
    all_topics: Annotated[bool, typer.Option("--all-topics", help="Every topic the group has committed offsets for.")] = False,
    to_earliest: Annotated[bool, typer.Option("--to-earliest", help="Reset to the earliest offset.")] = False,
    to_latest: Annotated[bool, typer.Option("--to-latest", help="Reset to the latest offset (log end).")] = False,
    to_current: Annotated[bool, typer.Option("--to-current", help="Reset to the committed offset (log end if none).")] = False,
    to_offset: Annotated[int | None, typer.Option("--to-offset", help="Reset to this offset (clamped to the log).")] = None,
    to_datetime: Annotated[
        str | None,
        typer.Option("--to-datetime", help="Reset to the first offset at or after YYYY-MM-DDTHH:mm:SS.sss[Z|±hh:mm] (UTC without a zone)."),
    ] = None,
    by_duration: Annotated[
        str | None, typer.Option("--by-duration", help="Reset to the first offset at or after now minus PnDTnHnMnS.")
    ] = None,
    shift_by: Annotated[int | None, typer.Option("--shift-by", help="Move the committed offset by N (may be negative).")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Only show the new offsets (the default).")] = False,
    execute: Annotated[bool, typer.Option("--execute", help="Commit the new offsets.")] = False,
    bootstrap_server: BootstrapOpt = DEFAULT_BOOTSTRAP,
    timeout: TimeoutOpt = DEFAULT_TIMEOUT_MS,
) -> None:
    """Reset a group's committed offsets (only while it has no active members); dry run unless --execute."""
    if dry_run and execute:
        raise _usage("Option reset-offsets takes only one of --dry-run and --execute.")
    chosen = [
        (name, value)
        for name, value in [
            ("to-earliest", to_earliest or None),
            ("to-latest", to_latest or None),
            ("to-current", to_current or None),
            ("to-offset", to_offset),
            ("to-datetime", to_datetime),
            ("by-duration", by_duration),
            ("shift-by", shift_by),
        ]
        if value is not None
    ]
    if len(chosen) != 1:
        raise _usage(
            "Option reset-offsets takes exactly one of these options: --to-earliest, --to-latest, --to-current, "
            "--to-offset, --to-datetime, --by-duration, --shift-by"
        )
    if bool(topic) == all_topics:
        raise _usage("One of the reset scopes should be defined: --all-topics, --topic.")
    spec = _reset_spec(chosen[0][0], to_offset, to_datetime, by_duration, shift_by)
    topics = parse_topic_specs(topic or [])
    failed = False
    results: dict[str, dict[TopicPartition, int]] = {}
    with _client(bootstrap_server, timeout) as client:
        for group_id in _group_ids(client, group or [], all_groups):
            desc = client.describe_group(group_id)
            state = "Dead" if desc.error == ErrorCode.group_id_not_found else desc.state
            if desc.error not in (ErrorCode.none, ErrorCode.group_id_not_found):
                raise KafkaApiError(desc.error, desc.error_message, context=f"Describing group '{group_id}'")
            if state not in _INACTIVE:
                _error(
                    f"Assignments can only be reset if the group '{group_id}' is inactive, "
                    f"but the current state is {state}."
                )
                results[group_id] = {}
                failed = True
                continue
            try:
                partitions = _partitions_to_reset(client, group_id, topics, all_topics)
                new_offsets = prepare_offsets(client, group_id, partitions, spec)
            except _ResetFailed as exc:
                _error(str(exc))
                failed = True
                continue
            if execute and new_offsets:
                errors = {tp: code for tp, code in client.commit_offsets(group_id, new_offsets).items() if code}
                if errors:
                    for tp, code in sorted(errors.items()):
                        _error(
                            f"Failed to reset the offset of group '{group_id}' for {tp}: "
                            f"{error_name(code)}: {error_message(code)}"
                        )
                    failed = True
                    continue
            results[group_id] = new_offsets
    if results:
        rows = [[g, tp.topic, tp.partition, o] for g in sorted(results) for tp, o in sorted(results[g].items())]
        widths = [max([30, *(len(r[0]) for r in rows)]), max([30, *(len(str(r[1])) for r in rows)]), 10, 15]
        _print_table(["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"], rows, widths)
    if failed:
        raise typer.Exit(1)


def _reset_spec(
    kind: str, to_offset: int | None, to_datetime: str | None, by_duration: str | None, shift_by: int | None
) -> ResetSpec:
    try:
        if kind == "to-offset":
            return ResetSpec("offset", int(to_offset or 0))
        if kind == "to-datetime":
            return ResetSpec("datetime", parse_datetime_ms(to_datetime or ""))
        if kind == "by-duration":
            return ResetSpec("duration", parse_duration_ms(by_duration or ""))
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint=f"--{kind}") from None
    if kind == "shift-by":
        return ResetSpec("shift", int(shift_by or 0))
    return ResetSpec(kind.removeprefix("to-"))


# -------------------------------------------------------------------------------------- delete


@groups_app.command("delete")
def delete(
    group: GroupOpt = None,
    all_groups: AllGroupsOpt = False,
    bootstrap_server: BootstrapOpt = DEFAULT_BOOTSTRAP,
    timeout: TimeoutOpt = DEFAULT_TIMEOUT_MS,
) -> None:
    """Delete consumer groups and their committed offsets (only groups without active members)."""
    with _client(bootstrap_server, timeout) as client:
        group_ids = _group_ids(client, group or [], all_groups)
        outcome = {group_id: client.delete_group(group_id) for group_id in group_ids}
    succeeded = [g for g, code in outcome.items() if code == ErrorCode.none]
    failed = {g: code for g, code in outcome.items() if code != ErrorCode.none}
    if not failed:
        typer.echo(f"Deletion of requested consumer groups ({_quoted(succeeded)}) was successful.")
        return
    _error("Deletion of some consumer groups failed:")
    for group_id, code in failed.items():
        typer.echo(f"* Group '{group_id}' could not be deleted due to: {error_name(code)}: {error_message(code)}")
    if succeeded:
        typer.echo(f"\nThese other groups were deleted successfully: {_quoted(succeeded)}")
    raise typer.Exit(1)


def _quoted(names: Sequence[str]) -> str:
    """Kafka's list of group ids: ``'a', 'b'``."""
    return "'" + "', '".join(names) + "'"
