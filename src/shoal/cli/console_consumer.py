"""``shoal consume``: print a topic's records, shaped like kafka-console-consumer.sh.

With ``--group`` the tool is a member of that consumer group (subscribe): it starts where the
group left off (``--from-beginning`` only matters when the group has no committed offset), and
commits as it goes and when it stops. Without ``--group`` it reads every partition of the
topic (or ``--partition``) from ``--offset`` / ``--from-beginning`` / the end, and commits
nothing; Kafka's tool joins a throwaway ``console-consumer-NNNNN`` group instead, which only
leaves an empty group behind.

It stops after ``--max-messages``, after ``--timeout-ms`` without a record, or on Ctrl-C /
SIGTERM, and prints ``Processed a total of N messages`` on stderr, as Kafka's does.
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from typing import Annotated, Any

import typer

from shoal.cli.client_properties import CONSUMER_PROPERTIES, PropertyError, client_options
from shoal.cli.kafka_client import DEFAULT_BOOTSTRAP, KafkaClient, KafkaClientError, TopicPartition
from shoal.cli.kafka_client.consumer import Consumer
from shoal.cli.options import BootstrapOpt, parse_key_values
from shoal.cli.record_format import FormatError, formatter_for
from shoal.protocol.errors import ErrorCode

CLIENT_ID = "console-consumer"


def consume(
    topic: Annotated[str, typer.Option("--topic", help="The topic to consume.")],
    bootstrap_server: BootstrapOpt = DEFAULT_BOOTSTRAP,
    group: Annotated[str | None, typer.Option("--group", help="Consume as a member of this consumer group.")] = None,
    from_beginning: Annotated[
        bool, typer.Option("--from-beginning", help="Start at the earliest offset when there is no committed one.")
    ] = False,
    partition: Annotated[
        int | None, typer.Option("--partition", help="Consume only this partition.", min=0)
    ] = None,
    offset: Annotated[
        str | None, typer.Option("--offset", help="With --partition: earliest, latest or an offset.")
    ] = None,
    max_messages: Annotated[
        int | None, typer.Option("--max-messages", help="Exit after this many records.", min=1)
    ] = None,
    timeout_ms: Annotated[
        int | None, typer.Option("--timeout-ms", help="Exit when no record arrives for this long.", min=0)
    ] = None,
    isolation_level: Annotated[
        str | None, typer.Option("--isolation-level", help="read_uncommitted or read_committed [default: "
                                 "read_uncommitted].")
    ] = None,
    output_format: Annotated[
        str | None,
        typer.Option("--format", help="'json', or a template as kcat's -f: %t %p %o %k %s %K %S %T %h, \\n \\t."),
    ] = None,
    prop: Annotated[
        list[str] | None,
        typer.Option("--property", help="Kafka's formatter settings (repeatable): print.key=true, "
                     "print.offset=true, print.partition=true, print.timestamp=true, print.headers=true, "
                     "key.separator=..."),
    ] = None,
    consumer_property: Annotated[
        list[str] | None,
        typer.Option("--consumer-property", help="A consumer config, key=value (repeatable): group.id, "
                     "auto.offset.reset, isolation.level, enable.auto.commit, auto.commit.interval.ms, "
                     "session.timeout.ms, heartbeat.interval.ms, max.poll.interval.ms, metadata.max.age.ms, "
                     "fetch.max.wait.ms, client.id."),
    ] = None,
) -> None:
    """Print records of a topic (like kafka-console-consumer.sh)."""
    settings = parse_key_values(consumer_property or [], "--consumer-property")
    if isolation_level is not None:
        settings["isolation.level"] = isolation_level
    try:
        options = client_options(CONSUMER_PROPERTIES, settings, "--consumer-property")
    except PropertyError as exc:
        _usage(str(exc))
    if group is not None and options.get("group_id", group) != group:
        _usage("The group ids provided in different places (directly using '--group', via '--consumer-property') "
               f"do not match. Detected group ids: '{group}', '{options['group_id']}'")
    group = options.pop("group_id", group)
    if from_beginning and options.get("auto_offset_reset", "earliest") != "earliest":
        _usage(f"Can't simultaneously specify --from-beginning and 'auto.offset.reset={options['auto_offset_reset']}'")
    if offset is not None and partition is None:
        _usage("The partition is required when offset is specified.")
    if offset is not None and from_beginning:
        _usage("Options from-beginning and offset cannot be specified together.")
    if group is not None and partition is not None:
        _usage("Options group and partition cannot be specified together.")
    start = _start_offset(offset, from_beginning)
    if isinstance(start, str):
        options.setdefault("auto_offset_reset", start)
    client_id = options.pop("client_id", CLIENT_ID)
    try:
        formatter = formatter_for(output_format, parse_key_values(prop or [], "--property"))
    except FormatError as exc:
        _usage(str(exc))
    stop = threading.Event()
    _on_signals(stop)
    out = sys.stdout.buffer
    count = 0
    try:
        with KafkaClient(bootstrap_server, client_id=client_id) as client:
            consumer = _consumer(client, topic, group, partition, start, options)
            idle_since = time.monotonic()
            try:
                while not stop.is_set() and (max_messages is None or count < max_messages):
                    records = consumer.poll(0.5)
                    for i, record in enumerate(records):
                        if max_messages is not None and count >= max_messages:
                            consumer.rewind(records[i:])  # commit what was printed, not what was fetched
                            break
                        out.write(formatter(record))
                        count += 1
                        idle_since = time.monotonic()
                    out.flush()
                    if timeout_ms is not None and time.monotonic() - idle_since >= timeout_ms / 1000:
                        break
            except BrokenPipeError:
                pass  # the reader went away (| head): stop as on Ctrl-C
            finally:
                consumer.close()
    except KafkaClientError as exc:
        typer.echo(f"ERROR Error processing message, terminating consumer process: {exc}", err=True)
        typer.echo(f"Processed a total of {count} messages", err=True)
        raise typer.Exit(1) from None
    typer.echo(f"Processed a total of {count} messages", err=True)


def _start_offset(offset: str | None, from_beginning: bool) -> int | None | str:
    if offset is None:
        return "earliest" if from_beginning else "latest"
    if offset in ("earliest", "latest"):
        return offset
    try:
        value = int(offset)
    except ValueError:
        _usage(f"The provided offset value '{offset}' is incorrect. Valid values are 'earliest', 'latest', "
               "or a non-negative long.")
    if value < 0:
        _usage(f"The provided offset value '{offset}' is incorrect. Valid values are 'earliest', 'latest', "
               "or a non-negative long.")
    return value


def _consumer(
    client: KafkaClient,
    topic: str,
    group: str | None,
    partition: int | None,
    start: int | None | str,
    options: dict[str, Any],
) -> Consumer:
    if group is not None:
        return Consumer(client, topics=[topic], group_id=group, **options)
    info = client.metadata([topic]).topics.get(topic)
    if info is None or info.error == ErrorCode.unknown_topic_or_partition or not info.partitions:
        raise KafkaClientError(f"Topic {topic} not present in metadata")
    if partition is not None and partition not in info.partitions:
        raise KafkaClientError(f"Partition {partition} of topic {topic} does not exist")
    partitions = [partition] if partition is not None else sorted(info.partitions)
    offset = start if isinstance(start, int) else None
    return Consumer(client, topics=[topic], assignment={TopicPartition(topic, p): offset for p in partitions},
                    **options)


def _on_signals(stop: threading.Event) -> None:
    """Ctrl-C or SIGTERM ends the loop after the current fetch, then commits and leaves the group;
    a second Ctrl-C exits at once."""

    def handler(signum: int, frame: object) -> None:
        if stop.is_set():
            raise KeyboardInterrupt
        stop.set()

    signal.signal(signal.SIGINT, handler)
    signal.signal(signal.SIGTERM, handler)


def _usage(message: str) -> None:
    typer.echo(f"Error: {message}", err=True)
    raise typer.Exit(2)
