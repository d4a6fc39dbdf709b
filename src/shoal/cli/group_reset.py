"""Planning ``shoal groups reset-offsets``: which partitions, and the new offset of each.

Kafka's prepareOffsetsToReset for the options shoal supports, with its checks and messages:
``--to-datetime``/``--by-duration`` parsed as Kafka (and Java's Duration) parse them, offsets
asked of the partitions' leaders, and out-of-range offsets clamped to the log with a warning.
"""

from __future__ import annotations

import datetime
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import typer

from shoal.cli.kafka_client import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    KafkaApiError,
    KafkaClient,
    TopicPartition,
    all_partitions,
    error_message,
    error_name,
)
from shoal.protocol.errors import ErrorCode

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


class ResetFailed(Exception):
    """The reset of one group cannot go on; the message is printed as Kafka's error."""


def _warn(message: str) -> None:
    typer.echo(f"WARN {message}", err=True)


def partitions_to_reset(
    client: KafkaClient, group_id: str, topics: Sequence[tuple[str, list[int] | None]], all_topics: bool
) -> list[TopicPartition]:
    """The partitions to reset: every one with a committed offset (--all-topics), else those named by
    --topic (a bare topic means all its partitions, and it must exist)."""
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
            raise ResetFailed(f"Error getting {what} offset of topic partition: {tp}{detail}")
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
            raise ResetFailed(f"Error getting offset by timestamp of topic partition: {failed[0]}")
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
                raise ResetFailed(
                    f"Cannot shift offset for partition {tp} since there is no current committed offset"
                )
        return _clamped(client, {tp: committed[tp] + spec.value for tp in partitions})
    raise ValueError(f"unknown reset kind {spec.kind}")


def reset_spec(
    kind: str, to_offset: int | None, to_datetime: str | None, by_duration: str | None, shift_by: int | None
) -> ResetSpec:
    """The ResetSpec of the one reset option given (``kind`` is its name without dashes); a value
    that does not parse is a usage error on that option."""
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
