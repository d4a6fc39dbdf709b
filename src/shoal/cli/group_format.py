"""What ``shoal groups`` prints, laid out as kafka-consumer-groups.sh prints it.

Tables are plain aligned text (Kafka's ``%-Ns`` columns, trailing blanks trimmed); errors and
notes about a group's state go to stderr, so scripts reading stdout only see the tables.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import typer

from shoal.cli.group_describe import (
    MISSING,
    REBALANCING_STATES,
    GroupListingView,
    OffsetRow,
    member_assignments,
)
from shoal.cli.kafka_client import GroupDescription, TopicPartition


def print_error(message: str) -> None:
    """Kafka's printError: a blank line, then ``Error: ...`` on stderr."""
    typer.echo(f"\nError: {message}", err=True)


def format_row(values: Sequence[object], widths: Sequence[int]) -> str:
    """Left-aligned columns separated by one blank, like Kafka's ``%-Ns`` formats; the last is unpadded."""
    cells = [f"{v!s:<{w}}" for v, w in zip(values, widths, strict=False)]
    cells.extend(str(v) for v in values[len(widths) :])
    return " ".join(cells).rstrip()


def print_table(header: Sequence[str], rows: Sequence[Sequence[object]], widths: Sequence[int]) -> None:
    typer.echo("")
    typer.echo(format_row(header, widths))
    for row in rows:
        typer.echo(format_row(row, widths))


def _show(value: int | None) -> str:
    return MISSING if value is None else str(value)


# ---------------------------------------------------------------------------------------- list


def print_group_states(listings: Sequence[GroupListingView]) -> None:
    """``list --state``: a GROUP/STATE table (no blank line before it, as Kafka prints it)."""
    width = max([15, *(len(v.group_id) for v in listings)]) + 10
    typer.echo(format_row(["GROUP", "STATE"], [width, 20]))
    for v in listings:
        typer.echo(format_row([v.group_id, v.state], [width, 20]))


# ------------------------------------------------------------------------------------ describe


def should_print(group_id: str, desc: GroupDescription | None, rows: int) -> bool:
    """Kafka's shouldPrintMemberState: say why nothing (or a partial picture) is shown."""
    if desc is None:
        print_error(f"Consumer group '{group_id}' does not exist.")
        return False
    if desc.state == "Empty":
        typer.echo(f"\nConsumer group '{group_id}' has no active members.", err=True)
    elif desc.state in REBALANCING_STATES:
        typer.echo(f"\nWarning: Consumer group '{group_id}' is rebalancing.", err=True)
    return rows > 0


def print_offsets(rows: Sequence[OffsetRow]) -> None:
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
    print_table(
        header,
        [
            [r.group, r.tp.topic, r.tp.partition, _show(r.current), _show(r.log_end), _show(r.lag), r.consumer_id,
             r.host, r.client_id]
            for r in rows
        ],
        widths,
    )


def print_members(desc: GroupDescription, verbose: bool) -> None:
    assignments = member_assignments(desc)
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
    print_table(header, rows, widths)


def print_state(desc: GroupDescription) -> None:
    node = desc.coordinator
    coordinator = f"{node.address} ({node.node_id})"
    widths = [max(25, len(desc.group_id)), max(25, len(coordinator)), 20, 15]
    print_table(
        ["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"],
        [[desc.group_id, coordinator, desc.protocol, desc.state, len(desc.members)]],
        widths,
    )


# ------------------------------------------------------------------------------- reset-offsets


def print_new_offsets(results: Mapping[str, Mapping[TopicPartition, int]]) -> None:
    """The GROUP/TOPIC/PARTITION/NEW-OFFSET table of ``reset-offsets`` (dry run or executed)."""
    rows = [[g, tp.topic, tp.partition, o] for g in sorted(results) for tp, o in sorted(results[g].items())]
    widths = [max([30, *(len(r[0]) for r in rows)]), max([30, *(len(str(r[1])) for r in rows)]), 10, 15]
    print_table(["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"], rows, widths)
