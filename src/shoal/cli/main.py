"""The ``shoal`` command: ``broker``, ``up`` and the operator tools shaped like Kafka's."""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from pathlib import Path
from typing import Annotated, NoReturn

import typer
import uvloop

from shoal.aio import wait_for
from shoal.cli.cluster import cluster_app
from shoal.cli.cluster_plan import PlanError, parse_racks, plan_cluster
from shoal.cli.cluster_up import run_cluster
from shoal.cli.console_consumer import consume
from shoal.cli.console_producer import produce
from shoal.cli.diskless_metadata import diskless_metadata_app
from shoal.cli.dump_log import dump_log
from shoal.cli.groups import groups_app
from shoal.cli.log_dirs import log_dirs_app
from shoal.cli.pipeline import pipeline_app
from shoal.cli.process_exit import exit_without_finalizing
from shoal.cli.reassign import reassign_partitions
from shoal.cli.topics import topics_app
from shoal.cli.transactions import transactions_app
from shoal.config import Config, ConfigError
from shoal.metadata.log import DuplicateBrokerError
from shoal.properties import parse_overrides, parse_properties
from shoal.store.factory import StoreUnavailableError
from shoal.store.locate import DEFAULT_DATA_DIR, embedded_config

app = typer.Typer(help="Shoal: a Kafka-compatible broker with diskless topics on object storage.", no_args_is_help=True)
app.add_typer(cluster_app, name="cluster")
app.add_typer(groups_app, name="groups")
app.add_typer(pipeline_app, name="pipeline")
app.add_typer(topics_app, name="topics")
app.add_typer(transactions_app, name="transactions")
app.command("dump-log")(dump_log)
app.add_typer(diskless_metadata_app, name="diskless-metadata")
app.add_typer(log_dirs_app, name="log-dirs")
app.command("reassign-partitions")(reassign_partitions)
app.command("produce")(produce)
app.command("consume")(consume)

Overrides = Annotated[
    list[str] | None, typer.Option("--override", help="Set a config, key=value (repeatable), as kafka-server-start does.")
]


#: How long a broker whose startup failed gets to stop what it had started.
STARTUP_FAILURE_STOP_S = 30.0


def _setup_logging() -> None:
    logging.basicConfig(
        level=logging.INFO,
        format="[%(asctime)s] %(levelname)s %(message)s (%(name)s)",
        stream=sys.stderr,
    )


def _run(raw: dict[str, str]) -> NoReturn:
    _setup_logging()
    try:
        config = Config.from_raw(raw)
    except ConfigError as exc:
        typer.echo(f"Invalid configuration: {exc}", err=True)
        raise typer.Exit(2) from None
    code = 0
    try:
        uvloop.run(_serve(config))
    except (StoreUnavailableError, DuplicateBrokerError) as exc:
        logging.getLogger("shoal.server.broker").error("%s", exc)
        code = 1
    except SystemExit as exc:  # a fatal error stopped the broker
        code = exc.code if isinstance(exc.code, int) else 1
    except OSError as exc:  # while serving; one during startup is reported by _serve
        logging.getLogger("shoal.server.broker").error("fatal error: %s", exc)
        code = 1
    # The broker used obstore: end without the interpreter's shutdown (``process_exit``).
    exit_without_finalizing(code)


async def _serve(config: Config) -> None:
    from shoal.server.broker import Broker  # the CLI is the only place that builds a broker

    broker = Broker(config)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await broker.start()
    except BaseException as exc:
        if isinstance(exc, OSError):  # e.g. a port in use: Kafka's "Fatal error during KafkaServer startup"
            logging.getLogger("shoal.server.broker").error("fatal error during broker startup: %s", exc)
        # What started (its registration, heartbeats, background tasks, threads) is stopped before
        # the error ends the process: left behind, those tasks kept the event loop from closing.
        await wait_for(broker.stop(), STARTUP_FAILURE_STOP_S)
        if isinstance(exc, OSError):
            raise SystemExit(1) from None
        raise
    stopped = asyncio.ensure_future(stop.wait())
    fatal = asyncio.ensure_future(broker.fatal.wait())
    await asyncio.wait([stopped, fatal], return_when=asyncio.FIRST_COMPLETED)
    await broker.stop()
    if broker.fatal.is_set():
        raise SystemExit(1)


@app.command()
def broker(
    config_file: Annotated[Path, typer.Argument(help="server.properties with Kafka config names")],
    override: Overrides = None,
) -> None:
    """Start a broker from a server.properties file."""
    try:
        raw = parse_properties(config_file.read_text())
        raw.update(parse_overrides(override or []))
    except (OSError, ConfigError) as exc:
        typer.echo(f"Cannot read configuration: {exc}", err=True)
        raise typer.Exit(2) from None
    _run(raw)


@app.command()
def up(
    data_dir: Annotated[Path, typer.Option("--data-dir", help="Where all state lives.")] = DEFAULT_DATA_DIR,
    override: Overrides = None,
    brokers: Annotated[
        int,
        typer.Option(
            "--brokers",
            min=1,
            help="How many brokers: more than 1 runs each as a child process (node ids 1..N, consecutive "
            "ports from the first listener's, state under DIR/broker-<i>/), sharing one metadata store and "
            "object storage.",
        ),
    ] = 1,
    racks: Annotated[
        str | None, typer.Option("--racks", help="Racks to assign the brokers round-robin (broker.rack), e.g. a,b,c.")
    ] = None,
) -> None:
    """Start a single node on embedded defaults: SQLite metadata, local-directory objects, 127.0.0.1:9092.

    With --brokers N, a cluster of N brokers on this host (Ctrl-C stops them all)."""
    try:
        overrides = parse_overrides(override or [])
        rack_names = parse_racks(racks)
        if rack_names and "broker.rack" in overrides:
            raise PlanError("--override broker.rack cannot be used with --racks")
        plan = plan_cluster(data_dir, brokers, rack_names, overrides) if brokers > 1 else None
    except (ConfigError, PlanError) as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(2) from None
    if plan is None:
        raw = embedded_config(data_dir)
        raw.update(overrides)
        if rack_names:
            raw["broker.rack"] = rack_names[0]
        _run(raw)
        return
    _setup_logging()
    code = run_cluster(plan)
    if code:
        raise typer.Exit(code)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
