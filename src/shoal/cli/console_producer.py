"""``shoal produce``: lines from stdin to a topic, shaped like kafka-console-producer.sh.

Each line is one record. ``--property`` takes Kafka's LineMessageReader settings:
``parse.key`` with ``key.separator`` (default tab), ``parse.headers`` with
``headers.delimiter`` (tab), ``headers.separator`` (,) and ``headers.key.separator`` (:),
``null.marker`` (a key, value or header value equal to it is null) and ``ignore.error`` (a line
without a separator becomes a value with a null key instead of an error).

The producer is idempotent with acks=all by default, as Kafka's; ``--acks 0|1`` turns idempotence
off unless it is asked for. A record the broker refuses is reported on stderr with its error and
the tool ends with exit code 1 after sending the rest (Kafka's tool only logs them).
"""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import sys
import threading
import time
from dataclasses import dataclass
from typing import Annotated

import typer

from shoal.cli.client_properties import PRODUCER_PROPERTIES, PropertyError, client_options
from shoal.cli.kafka_client import DEFAULT_BOOTSTRAP, KafkaClient, KafkaClientError
from shoal.cli.kafka_client.producer import DeliveryFailure, Producer
from shoal.cli.options import BootstrapOpt, parse_key_values

CLIENT_ID = "console-producer"
READER_PROPERTIES = frozenset(
    {"parse.key", "key.separator", "parse.headers", "headers.delimiter", "headers.separator",
     "headers.key.separator", "null.marker", "ignore.error"}
)
_EOF = object()


class LineError(ValueError):
    """A line the reader's settings cannot split; the message is Kafka's."""


@dataclass(frozen=True, slots=True)
class LineRecord:
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]


class LineReader:
    """Kafka's LineMessageReader: one line, one record."""

    def __init__(self, props: dict[str, str]) -> None:
        unknown = sorted(set(props) - READER_PROPERTIES)
        if unknown:
            raise LineError(f"Unknown line reader properties: {', '.join(unknown)}")
        self.parse_key = props.get("parse.key", "false").strip().lower() == "true"
        self.key_separator = props.get("key.separator", "\t")
        self.parse_headers = props.get("parse.headers", "false").strip().lower() == "true"
        self.headers_delimiter = props.get("headers.delimiter", "\t")
        self.headers_separator = props.get("headers.separator", ",")
        self.header_key_separator = props.get("headers.key.separator", ":")
        self.ignore_error = props.get("ignore.error", "false").strip().lower() == "true"
        self.null_marker = props.get("null.marker")
        separators = {
            "key.separator": self.key_separator,
            "headers.delimiter": self.headers_delimiter,
            "headers.separator": self.headers_separator,
            "headers.key.separator": self.header_key_separator,
        }
        for name, separator in separators.items():
            if self.null_marker is not None and self.null_marker == separator:
                raise LineError(f"null.marker and {name} may not be equal")
        if self.parse_headers and self.headers_delimiter == self.headers_separator:
            raise LineError("headers.delimiter and headers.separator may not be equal")

    def _bytes(self, text: str) -> bytes | None:
        return None if text == self.null_marker else text.encode("utf-8", "surrogateescape")

    def read(self, line: str, number: int) -> LineRecord:
        headers: tuple[tuple[str, bytes | None], ...] = ()
        rest = line
        if self.parse_headers:
            head, sep, after = rest.partition(self.headers_delimiter)
            if not sep:
                if not self.ignore_error:
                    raise LineError(f"No headers delimiter found on line number {number}: '{line}'")
            else:
                headers = self._headers(head, number)
                rest = after
        key: bytes | None = None
        if self.parse_key:
            raw_key, sep, value = rest.partition(self.key_separator)
            if not sep:
                if not self.ignore_error:
                    raise LineError(f"No key separator found on line number {number}: '{line}'")
                return LineRecord(None, self._bytes(rest), headers)
            key = self._bytes(raw_key)
            rest = value
        return LineRecord(key, self._bytes(rest), headers)

    def _headers(self, text: str, number: int) -> tuple[tuple[str, bytes | None], ...]:
        if text == self.null_marker:
            return ()
        out: list[tuple[str, bytes | None]] = []
        for pair in text.split(self.headers_separator):
            if not pair:
                continue
            name, sep, value = pair.partition(self.header_key_separator)
            if not sep:
                raise LineError(f"No header key separator found in pair '{pair}' on line number {number}")
            if name == self.null_marker:
                raise LineError(f"Header keys should not be equal to the null marker '{self.null_marker}' as they "
                                "can't be null")
            out.append((name, self._bytes(value)))
        return tuple(out)


def _read_lines(lines: queue.Queue[object]) -> None:
    """Stdin reader thread: the main thread waits on the queue, so linger.ms can pass meanwhile.

    It reads the file descriptor itself, not ``sys.stdin.buffer``: a daemon thread blocked inside
    a buffered read holds the buffer's lock, and Python aborts when it exits meanwhile (the tool
    exits early on a bad line or Ctrl-C while stdin is still open)."""

    def put(raw: bytes) -> None:
        lines.put(raw.decode("utf-8", errors="surrogateescape").removesuffix("\r"))

    pending = b""
    try:
        while chunk := os.read(sys.stdin.fileno(), 1 << 16):
            pending += chunk
            *complete, pending = pending.split(b"\n")
            for raw in complete:
                put(raw)
        if pending:
            put(pending)
    except OSError:
        pass  # stdin closed under us: what was read is sent
    finally:
        lines.put(_EOF)


def _report(failure: DeliveryFailure) -> None:
    for record in failure.records:
        key = "null" if record.key is None else record.key.decode("utf-8", "replace")
        size = -1 if record.value is None else len(record.value)
        typer.echo(
            f"ERROR Error when sending message to topic {failure.topic_partition.topic} with key: {key}, "
            f"value: {size} bytes with error: {failure.error}",
            err=True,
        )


def produce(
    topic: Annotated[str, typer.Option("--topic", help="The topic to produce to.")],
    bootstrap_server: BootstrapOpt = DEFAULT_BOOTSTRAP,
    prop: Annotated[
        list[str] | None,
        typer.Option("--property", help="A line reader setting, key=value (repeatable): parse.key=true, "
                     "key.separator=:, parse.headers=true, null.marker=..."),
    ] = None,
    producer_property: Annotated[
        list[str] | None,
        typer.Option("--producer-property", help="A producer config, key=value (repeatable): acks, "
                     "compression.type, enable.idempotence, batch.size, linger.ms, max.request.size, "
                     "request.timeout.ms, delivery.timeout.ms, retry.backoff.ms, client.id."),
    ] = None,
    compression: Annotated[
        str | None,
        typer.Option("--compression", "--compression-codec", help="none, gzip, snappy, lz4 or zstd [default: none]."),
    ] = None,
    acks: Annotated[
        str | None, typer.Option("--acks", "--request-required-acks", help="all (-1), 1 or 0 [default: all].")
    ] = None,
    idempotence: Annotated[
        bool | None,
        typer.Option("--idempotence/--no-idempotence", help="Default: on when acks=all, as Kafka's producer."),
    ] = None,
    batch_size: Annotated[
        int | None, typer.Option("--batch-size", help="batch.size in bytes [default: 16384].", min=1)
    ] = None,
    linger_ms: Annotated[
        int | None,
        typer.Option("--timeout", "--linger-ms", help="linger.ms: how long a batch waits to fill [default: 1000].",
                     min=0),
    ] = None,
    max_request_size: Annotated[
        int | None, typer.Option("--max-request-size", help="max.request.size [default: 1048576].", min=1)
    ] = None,
    sync: Annotated[bool, typer.Option("--sync", help="Send each line and wait for its acknowledgement.")] = False,
) -> None:
    """Send lines from stdin to a topic (like kafka-console-producer.sh)."""
    settings = {"linger.ms": "1000", **parse_key_values(producer_property or [], "--producer-property")}
    flags = {"compression.type": compression, "acks": acks, "batch.size": batch_size, "linger.ms": linger_ms,
             "max.request.size": max_request_size,
             "enable.idempotence": None if idempotence is None else str(idempotence).lower()}
    settings.update({name: str(value) for name, value in flags.items() if value is not None})
    if sync:
        settings["linger.ms"] = "0"
    try:
        options = client_options(PRODUCER_PROPERTIES, settings, "--producer-property")
        reader = LineReader(parse_key_values(prop or [], "--property"))
    except (PropertyError, LineError) as exc:
        _usage(str(exc))
    client_id = options.pop("client_id", CLIENT_ID)
    options.setdefault("idempotent", options.get("acks", -1) == -1)
    if options["idempotent"] and options.get("acks", -1) != -1:
        _usage("Must set acks to all in order to use the idempotent producer. Otherwise we cannot guarantee "
               "idempotence.")
    stop = threading.Event()
    lines: queue.Queue[object] = queue.Queue(maxsize=10_000)
    _on_signals(stop, lines)
    threading.Thread(target=_read_lines, args=(lines,), daemon=True, name="stdin").start()
    try:
        with KafkaClient(bootstrap_server, client_id=client_id) as client:
            producer = Producer(client, on_failure=_report, **options)
            failed = _pump(lines, stop, reader, producer, topic, sync)
            producer.flush()
            failed = failed or producer.failed > 0
    except KafkaClientError as exc:
        typer.echo(f"ERROR {exc}", err=True)
        raise typer.Exit(1) from None
    if failed:
        raise typer.Exit(1)


def _pump(
    lines: queue.Queue[object], stop: threading.Event, reader: LineReader, producer: Producer, topic: str, sync: bool
) -> bool:
    """Read lines into the producer until EOF or a signal, sending batches as linger.ms passes;
    True when some line could not be sent. After a signal, the lines already read are still sent."""
    failed = False
    number = 0
    while True:
        last = stop.is_set()
        if last:
            pending = [lines.get_nowait() for _ in range(lines.qsize())]
            items = pending[: pending.index(_EOF)] if _EOF in pending else pending
        else:
            due = producer.next_due()
            try:
                items = [lines.get(timeout=None if due is None else max(0.0, due - time.monotonic()))]
            except queue.Empty:
                producer.send_due()
                continue
        for item in items:
            if item is _EOF:
                return failed
            number += 1
            try:
                record = reader.read(str(item), number)
            except LineError as exc:
                typer.echo(f"ERROR {exc}", err=True)
                return True
            try:
                producer.send(topic, record.key, record.value, record.headers)
            except KafkaClientError as exc:
                typer.echo(f"ERROR Error when sending message to topic {topic}: {exc}", err=True)
                failed = True
            if sync:
                producer.flush()
        if last:
            return failed


def _on_signals(stop: threading.Event, lines: queue.Queue[object]) -> None:
    """Ctrl-C or SIGTERM: stop reading, send what was read, exit (a second Ctrl-C exits at once)."""

    def handler(signum: int, frame: object) -> None:
        if stop.is_set():
            raise KeyboardInterrupt
        stop.set()
        with contextlib.suppress(queue.Full):
            lines.put_nowait(_EOF)

    signal.signal(signal.SIGINT, handler)
    signal.signal(signal.SIGTERM, handler)


def _usage(message: str) -> None:
    typer.echo(f"Error: {message}", err=True)
    raise typer.Exit(2)
