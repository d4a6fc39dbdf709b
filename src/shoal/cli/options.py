"""Options every broker-talking tool spells the same way, as Kafka's tools spell them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated

import typer

BootstrapOpt = Annotated[
    str, typer.Option("--bootstrap-server", help="The broker(s) to connect to: HOST:PORT[,HOST:PORT].")
]
TimeoutOpt = Annotated[
    int, typer.Option("--timeout", help="Milliseconds each broker operation may take, retries included.", min=1)
]


def parse_key_values(values: Sequence[str], option: str) -> dict[str, str]:
    """``key=value`` items of a repeatable option (``--property``); a malformed one is a usage error."""
    parsed: dict[str, str] = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            typer.echo(f"Error: {option} takes key=value, not '{item}'", err=True)
            raise typer.Exit(2)
        parsed[key.strip()] = value
    return parsed
