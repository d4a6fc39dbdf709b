"""The options every store-reading tool takes, and the one way they find the configuration.

``--config server.properties`` (plus ``--override key=value``), else ``--data-dir DIR`` (what
``shoal up --data-dir DIR`` uses), else ``./shoal-data`` when it exists; ``--metadata-dir DIR``
(the broker's ``metadata.log.dir``) stays as the older spelling. Nothing found: exit 2 with one
message naming the three ways.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from shoal.config import Config, ConfigError
from shoal.store.locate import NoConfigError, metadata_dir_config, resolve_config

ConfigOpt = Annotated[
    Path | None,
    typer.Option("--config", help="The broker's server.properties: its stores are used, as the broker does."),
]
DataDirOpt = Annotated[
    Path | None,
    typer.Option("--data-dir", help="The directory `shoal up --data-dir` uses (default: ./shoal-data when it exists)."),
]
MetadataDirOpt = Annotated[
    Path | None,
    typer.Option("--metadata-dir", help="The broker's metadata.log.dir (older spelling; prefer --config or --data-dir)."),
]
OverrideOpt = Annotated[
    list[str] | None,
    typer.Option("--override", help="Set a config, key=value (repeatable), over --config or --data-dir."),
]


def tool_config(
    config_file: Path | None = None,
    data_dir: Path | None = None,
    metadata_dir: Path | None = None,
    overrides: list[str] | None = None,
) -> Config:
    """The configuration a tool works with; usage problems end the command with exit code 2."""
    given = [name for name, value in (("--config", config_file), ("--data-dir", data_dir),
                                      ("--metadata-dir", metadata_dir)) if value is not None]
    if len(given) > 1:
        _usage(f"Give one of {', '.join(given)}, not several.")
    try:
        if metadata_dir is not None:
            return metadata_dir_config(metadata_dir, overrides or [])
        return resolve_config(config_file, data_dir, overrides or [])
    except NoConfigError as exc:
        _usage(str(exc))
    except ConfigError as exc:
        _usage(f"Invalid configuration: {exc}")
    raise AssertionError("unreachable")


def _usage(message: str) -> None:
    typer.echo(f"Error: {message}", err=True)
    raise typer.Exit(2)
