"""``shoal groups``: list, describe, reset offsets of and delete consumer groups.

Shaped like Kafka's ``kafka-consumer-groups.sh`` (same checks, messages and column layout),
so operators and their scripts can move between the two. Tables are plain aligned text as
Kafka prints them (trailing blanks trimmed); errors go to stderr and make the exit code 1,
usage errors 2.

The group reads and lag are in group_describe, the reset planning in group_reset and the tables
and messages in group_format; this module holds the commands and their option checks.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Annotated

import typer

from shoal.cli.group_describe import (
    INACTIVE_STATES,
    consumer_group_listings,
    describe_consumer_group,
    offset_rows,
    parse_states,
)
from shoal.cli.group_format import (
    print_error,
    print_group_states,
    print_members,
    print_new_offsets,
    print_offsets,
    print_state,
    should_print,
)
from shoal.cli.group_reset import (
    ResetFailed,
    parse_topic_specs,
    partitions_to_reset,
    prepare_offsets,
    reset_spec,
)
from shoal.cli.kafka_client import (
    DEFAULT_BOOTSTRAP,
    KafkaApiError,
    KafkaClient,
    KafkaClientError,
    TopicPartition,
    error_message,
    error_name,
)
from shoal.cli.options import BootstrapOpt, TimeoutOpt
from shoal.protocol.errors import ErrorCode

groups_app = typer.Typer(
    help="List, describe, reset the offsets of and delete consumer groups (like kafka-consumer-groups.sh).",
    no_args_is_help=True,
)

CLIENT_ID = "shoal-consumer-groups"

GroupOpt = Annotated[list[str] | None, typer.Option("--group", help="A consumer group (repeatable).")]
AllGroupsOpt = Annotated[bool, typer.Option("--all-groups", help="Apply to all consumer groups.")]
DEFAULT_TIMEOUT_MS = 5_000  # kafka-consumer-groups.sh --timeout default


# ------------------------------------------------------------------------------------ plumbing


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
        print_error(f"Executing consumer group command failed due to {exc}")
        raise typer.Exit(1) from None


def _group_ids(client: KafkaClient, named: Sequence[str], all_groups: bool) -> list[str]:
    if all_groups and named:
        raise _usage("Option --all-groups cannot be used together with --group.")
    if all_groups:
        return sorted(g.group_id for g in consumer_group_listings(client))
    if not named:
        raise _usage("One of --group or --all-groups is required.")
    return list(dict.fromkeys(named))


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
        listings = consumer_group_listings(client, states)
    if state is None:
        for listing in listings:
            typer.echo(listing.group_id)
        return
    print_group_states(listings)


# ------------------------------------------------------------------------------------ describe


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
                desc = describe_consumer_group(client, group_id)
                if state:
                    if should_print(group_id, desc, 1):
                        assert desc is not None
                        print_state(desc)
                elif members:
                    if should_print(group_id, desc, len(desc.members) if desc else 0):
                        assert desc is not None
                        print_members(desc, verbose)
                else:
                    rows = offset_rows(client, desc) if desc is not None else []
                    if should_print(group_id, desc, len(rows)):
                        print_offsets(rows)
                failed = failed or desc is None
            except KafkaClientError as exc:
                print_error(f"Executing consumer group command failed due to {exc}")
                failed = True
    if failed:
        raise typer.Exit(1)


# ------------------------------------------------------------------------------- reset-offsets


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
    spec = reset_spec(chosen[0][0], to_offset, to_datetime, by_duration, shift_by)
    topics = parse_topic_specs(topic or [])
    failed = False
    results: dict[str, dict[TopicPartition, int]] = {}
    with _client(bootstrap_server, timeout) as client:
        for group_id in _group_ids(client, group or [], all_groups):
            desc = client.describe_group(group_id)
            state = "Dead" if desc.error == ErrorCode.group_id_not_found else desc.state
            if desc.error not in (ErrorCode.none, ErrorCode.group_id_not_found):
                raise KafkaApiError(desc.error, desc.error_message, context=f"Describing group '{group_id}'")
            if state not in INACTIVE_STATES:
                print_error(
                    f"Assignments can only be reset if the group '{group_id}' is inactive, "
                    f"but the current state is {state}."
                )
                results[group_id] = {}
                failed = True
                continue
            try:
                partitions = partitions_to_reset(client, group_id, topics, all_topics)
                new_offsets = prepare_offsets(client, group_id, partitions, spec)
            except ResetFailed as exc:
                print_error(str(exc))
                failed = True
                continue
            if execute and new_offsets:
                errors = {tp: code for tp, code in client.commit_offsets(group_id, new_offsets).items() if code}
                if errors:
                    for tp, code in sorted(errors.items()):
                        print_error(
                            f"Failed to reset the offset of group '{group_id}' for {tp}: "
                            f"{error_name(code)}: {error_message(code)}"
                        )
                    failed = True
                    continue
            results[group_id] = new_offsets
    if results:
        print_new_offsets(results)
    if failed:
        raise typer.Exit(1)


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
    print_error("Deletion of some consumer groups failed:")
    for group_id, code in failed.items():
        typer.echo(f"* Group '{group_id}' could not be deleted due to: {error_name(code)}: {error_message(code)}")
    if succeeded:
        typer.echo(f"\nThese other groups were deleted successfully: {_quoted(succeeded)}")
    raise typer.Exit(1)


def _quoted(names: Sequence[str]) -> str:
    """Kafka's list of group ids: ``'a', 'b'``."""
    return "'" + "', '".join(names) + "'"
