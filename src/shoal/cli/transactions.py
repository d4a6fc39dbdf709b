"""``shoal transactions``: list, describe and abort transactions, and find hanging ones.

Shaped like Kafka's ``kafka-transactions.sh`` (TransactionsCommand): the same sub-commands
(``list``, ``describe``, ``describe-producers``, ``abort``, ``find-hanging``), options, table
columns and messages. ``--bootstrap-server`` and ``--command-config`` may come before the
sub-command, as Kafka's tool takes them, or after it, as Shoal's other tools do; the
bootstrap defaults to 127.0.0.1:9092 like theirs. ``--command-config`` is a client properties
file; this client takes ``client.id``, ``default.api.timeout.ms``, ``request.timeout.ms``,
``retry.backoff.ms`` and ``security.protocol=PLAINTEXT`` (``bootstrap.servers`` is overridden by
``--bootstrap-server``, as in Kafka) and refuses any other name rather than ignore it.

Errors go to stderr and exit 1 (Kafka's ``printErrorAndExit``); option combinations Kafka
refuses exit 2 with Kafka's message, as Shoal's other tools exit on usage errors. Tables and the
abort / find-hanging decisions are in ``transaction_format``, the requests in
``kafka_client.transaction_apis``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, NoReturn, TypeVar

import typer

from shoal.cli.client_properties import PropertyError, client_options
from shoal.cli.kafka_client import (
    DEFAULT_BOOTSTRAP,
    KafkaApiError,
    KafkaClient,
    KafkaClientError,
    TopicPartition,
)
from shoal.cli.kafka_client.transaction_apis import ProducerState, TransactionDescription
from shoal.cli.transaction_format import (
    DESCRIBE_HEADERS,
    HANGING_HEADERS,
    LIST_HEADERS,
    PRODUCERS_HEADERS,
    AbortSpec,
    OpenTransaction,
    abort_spec_at,
    describe_row,
    explicit_abort_spec,
    hanging_rows,
    hanging_transactions,
    list_rows,
    open_transactions,
    pretty_table,
    producer_rows,
)
from shoal.config import ConfigError
from shoal.properties import parse_properties
from shoal.protocol.errors import ErrorCode

transactions_app = typer.Typer(
    help="This tool is used to analyze the transactional state of producers in the cluster. It can be used to "
    "detect and recover from hanging transactions (like kafka-transactions.sh).",
    no_args_is_help=True,
)

T = TypeVar("T")

CLIENT_ID = "shoal-transactions"
DEFAULT_TIMEOUT_MS = 30_000  # Kafka's request.timeout.ms
MAX_BATCH_SIZE = 500  # find-hanging asks about this many topics or partitions per request, as Kafka's tool

BootstrapOpt = Annotated[
    str | None,
    typer.Option("--bootstrap-server", help="The broker(s) to connect to: HOST:PORT[,HOST:PORT].", show_default=False),
]
CommandConfigOpt = Annotated[
    Path | None,
    typer.Option("--command-config", metavar="FILE", help="Property file containing configs to be passed to the admin client."),
]
TopicOpt = Annotated[str, typer.Option("--topic", help="Topic name.")]
PartitionOpt = Annotated[int, typer.Option("--partition", help="Partition number.")]


# ------------------------------------------------------------------------------------ plumbing


def _plaintext(name: str, raw: str) -> str:
    if raw.strip().upper() != "PLAINTEXT":
        raise PropertyError(f"{name}={raw} is not supported by this tool: it connects with PLAINTEXT only")
    return "PLAINTEXT"


def _millis(name: str, raw: str) -> int:
    try:
        value = int(raw.strip())
    except ValueError:
        raise PropertyError(f"Invalid value {raw} for configuration {name}: Not a number of type INT") from None
    if value < 0:
        raise PropertyError(f"Invalid value {raw} for configuration {name}: Value must be at least 0")
    return value


_ADMIN_PROPERTIES = {
    "client.id": ("client_id", lambda name, raw: raw),
    "default.api.timeout.ms": ("timeout_ms", _millis),
    "request.timeout.ms": ("request_timeout_ms", _millis),
    "retry.backoff.ms": ("retry_backoff_ms", _millis),
    "security.protocol": ("security_protocol", _plaintext),
    "bootstrap.servers": ("bootstrap_servers", lambda name, raw: raw),
}


@dataclass(frozen=True, slots=True)
class Connect:
    """Where and how to connect: the options given before the sub-command, then after it."""

    bootstrap: str | None = None
    command_config: Path | None = None

    def merged(self, bootstrap: str | None, command_config: Path | None) -> Connect:
        return Connect(bootstrap or self.bootstrap, command_config or self.command_config)


def _fail(message: str, code: int = 1) -> NoReturn:
    typer.echo(message, err=True)
    raise typer.Exit(code)


def _client_settings(connect: Connect) -> dict[str, object]:
    """KafkaClient's keywords from the options and the command config file."""
    props: dict[str, object] = {}
    if connect.command_config is not None:
        try:
            raw = parse_properties(connect.command_config.read_text())
        except (OSError, ConfigError) as exc:
            _fail(f"Failed to load admin client properties: {exc}")
        try:
            props = client_options(_ADMIN_PROPERTIES, raw, "--command-config")
        except PropertyError as exc:
            _fail(f"Error: {exc}", 2)
    timeout_ms = props.get("timeout_ms", props.get("request_timeout_ms", DEFAULT_TIMEOUT_MS))
    assert isinstance(timeout_ms, int)
    settings: dict[str, object] = {
        "bootstrap": connect.bootstrap or DEFAULT_BOOTSTRAP,
        "client_id": props.get("client_id", CLIENT_ID),
        "timeout": max(timeout_ms, 1) / 1000,
    }
    if "retry_backoff_ms" in props:
        backoff = props["retry_backoff_ms"]
        assert isinstance(backoff, int)
        settings["retry_backoff"] = backoff / 1000
    return settings


def open_client(settings: dict[str, object]) -> KafkaClient:
    """The client a command talks through (tests put a fake one here)."""
    return KafkaClient(**settings)  # type: ignore[arg-type]


def now_ms() -> int:
    return time.time_ns() // 1_000_000


@contextmanager
def _session(ctx: typer.Context, bootstrap: str | None, command_config: Path | None) -> Iterator[KafkaClient]:
    """One client for a command, from the options given before and after the sub-command."""
    connect = (ctx.obj if isinstance(ctx.obj, Connect) else Connect()).merged(bootstrap, command_config)
    settings = _client_settings(connect)
    client = _attempt("Failed to create the admin client", lambda: open_client(settings))
    with client:
        yield client


def _attempt(failure: str, call: Callable[[], T]) -> T:
    """Run one step; its failure prints ``failure: why`` and exits 1, as Kafka's printErrorAndExit."""
    try:
        return call()
    except KafkaClientError as exc:
        _fail(f"{failure}: {exc}")


@transactions_app.callback()
def _options(ctx: typer.Context, bootstrap_server: BootstrapOpt = None, command_config: CommandConfigOpt = None) -> None:
    """Analyze the transactional state of producers; detect and recover from hanging transactions."""
    ctx.obj = Connect(bootstrap_server, command_config)


# ---------------------------------------------------------------------------------------- list


@transactions_app.command("list")
def list_transactions(
    ctx: typer.Context,
    duration_filter: Annotated[
        int | None,
        typer.Option(
            "--duration-filter",
            help="Duration (in millis) to filter by: if < 0, all transactions will be returned; otherwise, only "
            "transactions running longer than this duration will be returned.",
        ),
    ] = None,
    transactional_id_pattern: Annotated[
        str | None,
        typer.Option("--transactional-id-pattern", help="Only transactional ids matching this regular expression."),
    ] = None,
    bootstrap_server: BootstrapOpt = None,
    command_config: CommandConfigOpt = None,
) -> None:
    """List transactions (ListTransactions on every broker)."""
    with _session(ctx, bootstrap_server, command_config) as client:
        found = _attempt(
            "Failed to list transactions",
            lambda: client.list_transactions(
                duration_ms=-1 if duration_filter is None else duration_filter,
                transactional_id_pattern=transactional_id_pattern,
            ),
        )
    typer.echo(pretty_table(LIST_HEADERS, list_rows(found)))


# ------------------------------------------------------------------------------------ describe


@transactions_app.command("describe")
def describe(
    ctx: typer.Context,
    transactional_id: Annotated[str, typer.Option("--transactional-id", help="Transactional id.")],
    bootstrap_server: BootstrapOpt = None,
    command_config: CommandConfigOpt = None,
) -> None:
    """Describe the state of an active transactional-id."""
    failure = f"Failed to describe transaction state of transactional-id `{transactional_id}`"
    with _session(ctx, bootstrap_server, command_config) as client:
        description = _attempt(failure, lambda: client.describe_transaction(transactional_id))
    typer.echo(pretty_table(DESCRIBE_HEADERS, [describe_row(description, now_ms())]))


# -------------------------------------------------------------------------- describe-producers


@transactions_app.command("describe-producers")
def describe_producers(
    ctx: typer.Context,
    topic: TopicOpt,
    partition: PartitionOpt,
    broker_id: Annotated[
        int | None,
        typer.Option("--broker-id", help="Optional broker id to describe the producer state on a specific replica."),
    ] = None,
    bootstrap_server: BootstrapOpt = None,
    command_config: CommandConfigOpt = None,
) -> None:
    """Describe the states of active producers for a topic partition."""
    tp = TopicPartition(topic, partition)
    where = "leader" if broker_id is None else f"broker {broker_id}"
    with _session(ctx, bootstrap_server, command_config) as client:
        found = _attempt(f"Failed to describe producers for partition {tp} on {where}",
                         lambda: client.describe_producers([tp], broker_id))
    producers = found[tp]
    typer.echo(pretty_table(PRODUCERS_HEADERS, producer_rows(producers)))


# --------------------------------------------------------------------------------------- abort


@transactions_app.command("abort")
def abort(
    ctx: typer.Context,
    topic: TopicOpt,
    partition: PartitionOpt,
    start_offset: Annotated[
        int | None, typer.Option("--start-offset", help="Start offset of the transaction to abort (brokers on 3.0+).")
    ] = None,
    producer_id: Annotated[int | None, typer.Option("--producer-id", help="Producer id (older brokers).")] = None,
    producer_epoch: Annotated[int | None, typer.Option("--producer-epoch", help="Producer epoch (older brokers).")] = None,
    coordinator_epoch: Annotated[
        int | None, typer.Option("--coordinator-epoch", help="Coordinator epoch (older brokers).")
    ] = None,
    bootstrap_server: BootstrapOpt = None,
    command_config: CommandConfigOpt = None,
) -> None:
    """Abort a hanging transaction (requires administrative privileges): a WriteTxnMarkers ABORT to the leader."""
    tp = TopicPartition(topic, partition)
    if start_offset is None and producer_id is None:
        _fail(
            "The transaction to abort must be identified either with --start-offset (for brokers on 3.0 or above) "
            "or with --producer-id, --producer-epoch, and --coordinator-epoch (for older brokers)",
            2,
        )
    spec: AbortSpec | None = None
    if start_offset is None:
        assert producer_id is not None
        if producer_epoch is None:
            _fail("Missing required argument --producer-epoch", 2)
        if coordinator_epoch is None:
            _fail("Missing required argument --coordinator-epoch", 2)
        spec = explicit_abort_spec(tp, producer_id, producer_epoch, coordinator_epoch)
    with _session(ctx, bootstrap_server, command_config) as client:
        if spec is None:
            assert start_offset is not None
            found = _attempt(f"Failed to validate producer state for partition {tp}",
                             lambda: client.describe_producers([tp]))
            spec = abort_spec_at(tp, found[tp], start_offset)
            if spec is None:
                _fail(f"Could not find any open transactions starting at offset {start_offset} on partition {tp}")
        chosen = spec
        _attempt(
            f"Failed to abort transaction {chosen}",
            lambda: client.abort_transaction(
                chosen.partition, chosen.producer_id, chosen.producer_epoch, chosen.coordinator_epoch
            ),
        )


# -------------------------------------------------------------------------------- find-hanging


@transactions_app.command("find-hanging")
def find_hanging(
    ctx: typer.Context,
    broker_id: Annotated[int | None, typer.Option("--broker-id", help="Broker id to search for hanging transactions.")] = None,
    max_transaction_timeout: Annotated[
        int,
        typer.Option(
            "--max-transaction-timeout",
            help="Maximum transaction timeout in minutes to limit the scope of the search (15 minutes by default).",
        ),
    ] = 15,
    topic: Annotated[
        str | None, typer.Option("--topic", help="Topic name to limit search to (required if --partition is specified).")
    ] = None,
    partition: Annotated[int | None, typer.Option("--partition", help="Partition number.")] = None,
    bootstrap_server: BootstrapOpt = None,
    command_config: CommandConfigOpt = None,
) -> None:
    """Find hanging transactions: open for longer than any transaction may last, and unknown to their coordinator."""
    if topic is None and broker_id is None:
        _fail("The `find-hanging` command requires either --topic or --broker-id to limit the scope of the search", 2)
    if partition is not None and topic is None:
        _fail("The --partition argument requires --topic to be provided", 2)
    timeout_ms = max_transaction_timeout * 60_000
    with _session(ctx, bootstrap_server, command_config) as client:
        if topic is not None and partition is not None:
            partitions = [TopicPartition(topic, partition)]
        else:
            topics = [topic] if topic is not None else None
            failure = "Failed to list topics" if topics is None else "Failed to describe 1 topics"
            replicas = _attempt(failure, lambda: client.partition_replicas(topics))
            partitions = sorted(tp for tp, nodes in replicas.items() if broker_id is None or broker_id in nodes)
        producers: dict[TopicPartition, Sequence[ProducerState]] = {}
        where = f"broker {broker_id}" if broker_id is not None else "their leaders"
        for chunk in _chunks(partitions, MAX_BATCH_SIZE):
            producers.update(
                _attempt(f"Failed to describe producers for {len(chunk)} partitions on {where}",
                         lambda chunk=chunk: client.describe_producers(chunk, broker_id))
            )
        now = now_ms()
        candidates = open_transactions(producers, now, timeout_ms)
        hanging: list[OpenTransaction] = []
        if candidates:
            pids = sorted({c.producer.producer_id for c in candidates})
            listed = _attempt(f"Failed to list transactions for {len(pids)} producers",
                              lambda: client.list_transactions(producer_ids=pids))
            ids = {t.producer_id: t.transactional_id for ts in listed.values() for t in ts if t.producer_id in pids}
            wanted = sorted(set(ids.values()))
            descriptions = _attempt(f"Failed to describe {len(wanted)} transactions",
                                    lambda: _describe_all(client, wanted))
            hanging = hanging_transactions(candidates, ids, descriptions)
    typer.echo(pretty_table(HANGING_HEADERS, hanging_rows(hanging, now)))


def _describe_all(client: KafkaClient, transactional_ids: Sequence[str]) -> dict[str, TransactionDescription | None]:
    """Each id's description, None for one the coordinator does not know (it hangs then)."""
    found: dict[str, TransactionDescription | None] = {}
    for transactional_id in transactional_ids:
        try:
            found[transactional_id] = client.describe_transaction(transactional_id)
        except KafkaApiError as exc:
            if exc.code != ErrorCode.transactional_id_not_found:
                raise
            found[transactional_id] = None
    return found


def _chunks(items: Sequence[TopicPartition], size: int) -> list[Sequence[TopicPartition]]:
    """Kafka's ``consumeInBatches``: requests of at most ``size`` partitions."""
    return [items[i : i + size] for i in range(0, len(items), size)]
