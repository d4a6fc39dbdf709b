"""``shoal cluster describe``: the cluster id, the controller and every broker with its rack.

Kafka has no one tool for this (``kafka-cluster.sh cluster-id`` prints the id only); operators of
a multi-broker Shoal need to see at a glance which brokers are registered, where clients reach
them, which rack each is in (what rack-aware clients are steered by) and whether one is fenced.
The table is for people; ``--format json`` is for scripts. Errors go to stderr as one line
with exit code 1, usage errors exit 2.
"""

from __future__ import annotations

import json
import sys
from enum import StrEnum
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from shoal.cli.cluster_info import ClusterInfo, describe_cluster
from shoal.cli.kafka_client import DEFAULT_BOOTSTRAP, KafkaClient, KafkaClientError
from shoal.cli.options import BootstrapOpt, TimeoutOpt

cluster_app = typer.Typer(help="Describe the cluster: its id, controller and brokers.", no_args_is_help=True)

CLIENT_ID = "shoal-cluster"
DEFAULT_TIMEOUT_MS = 5_000  # as `shoal groups`: an unreachable cluster is reported within seconds


class OutputFormat(StrEnum):
    table = "table"
    json = "json"


FormatOpt = Annotated[OutputFormat, typer.Option("--format", help="A table for people, or json for scripts.")]


def cluster_json(info: ClusterInfo) -> str:
    """One JSON document, with Kafka's camelCase names (as ``shoal log-dirs describe`` prints)."""
    doc = {
        "clusterId": info.cluster_id,
        "controllerId": info.controller_id,
        "brokers": [
            {"id": b.node_id, "host": b.host, "port": b.port, "rack": b.rack, "fenced": b.fenced}
            for b in info.brokers
        ],
        "includesFencedBrokers": info.includes_fenced,
        "source": info.source,
    }
    return json.dumps(doc, separators=(",", ":"))


def print_cluster(info: ClusterInfo, console: Console) -> None:
    console.print(f"Cluster ID: {info.cluster_id or '-'}")
    console.print(f"Controller: {'none' if info.controller_id is None else info.controller_id}")
    table = Table(box=None, pad_edge=False, header_style="bold")
    for column in ("BROKER", "ADDRESS", "RACK", "FENCED"):
        table.add_column(column, no_wrap=True)
    for b in info.brokers:
        table.add_row(str(b.node_id), b.address, b.rack or "-", "[red]yes[/red]" if b.fenced else "no")
    console.print(table)


@cluster_app.command("describe")
def describe(
    bootstrap_server: BootstrapOpt = DEFAULT_BOOTSTRAP,
    timeout: TimeoutOpt = DEFAULT_TIMEOUT_MS,
    output: FormatOpt = OutputFormat.table,
) -> None:
    """The cluster id, the controller, and each broker: id, host:port, rack, fenced (DescribeCluster)."""
    try:
        with KafkaClient(bootstrap_server, client_id=CLIENT_ID, timeout=timeout / 1000) as client:
            info = describe_cluster(client, timeout / 1000)
    except KafkaClientError as exc:
        typer.echo(f"Error: cannot describe the cluster at {bootstrap_server}: {exc}", err=True)
        raise typer.Exit(1) from None
    if output is OutputFormat.json:
        typer.echo(cluster_json(info))
        return
    # Wide enough never to wrap a row when piped (rich assumes 80 columns off a terminal).
    console = Console(highlight=False, width=None if sys.stdout.isatty() else 1000)
    with console.capture() as captured:
        print_cluster(info, console)
    typer.echo("\n".join(line.rstrip() for line in captured.get().splitlines()))
    if not info.includes_fenced:
        typer.echo(
            f"Note: the broker answered {info.source}, which lists unfenced brokers only "
            "(fenced ones need DescribeCluster v2).",
            err=True,
        )
