"""``shoal pipeline``: Spark jobs over Shoal topics (``export`` for now).

pyspark comes with the ``pipeline`` extra and is imported only when a job runs, so the rest
of the CLI works without it. The module also runs under ``spark-submit`` (see docs/pipeline.md):
``spark-submit --master URL .../shoal/cli/pipeline.py export --topic T ...``.
"""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer

pipeline_app = typer.Typer(
    help="Spark jobs over Shoal topics (needs the 'pipeline' extra).", no_args_is_help=True
)


@pipeline_app.callback()
def _pipeline() -> None:
    """Spark jobs over Shoal topics (needs the 'pipeline' extra)."""


def _pairs(items: list[str] | None, what: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise typer.BadParameter(f"{what} expects key=value, got {item!r}")
        out[key.strip()] = value.strip()
    return out


@pipeline_app.command()
def export(
    topic: Annotated[str, typer.Option("--topic", help="The topic to export.")],
    fmt: Annotated[str, typer.Option("--format", help="parquet or delta.")],
    path: Annotated[
        str, typer.Option("--path", help="The Parquet directory or Delta table (local or mounted path).")
    ],
    metadata_path: Annotated[
        str | None,
        typer.Option(
            "--metadata-path",
            help="shoal.db (or its folder): read diskless topics straight from object storage.",
        ),
    ] = None,
    storage_url: Annotated[
        str | None, typer.Option("--storage-url", help="The brokers' diskless.storage.url.")
    ] = None,
    bootstrap_servers: Annotated[
        str | None, typer.Option("--bootstrap-servers", help="Brokers, for topics that are not diskless.")
    ] = None,
    master: Annotated[
        str | None,
        typer.Option("--master", help="Spark master URL; default local[*] (or spark-submit's master)."),
    ] = None,
    option: Annotated[
        list[str] | None,
        typer.Option("--option", help="Another shoal source option, key=value (repeatable)."),
    ] = None,
    conf: Annotated[
        list[str] | None, typer.Option("--conf", help="A Spark setting, key=value (repeatable).")
    ] = None,
) -> None:
    """Export a topic incrementally to Parquet or Delta: each run continues where the last commit ended."""
    if fmt not in ("parquet", "delta"):
        raise typer.BadParameter("--format must be parquet or delta")
    if not metadata_path and not bootstrap_servers:
        raise typer.BadParameter("give --metadata-path (with --storage-url) and/or --bootstrap-servers")
    try:
        from pyspark.sql import SparkSession

        from shoal.pipeline.export import export_topic
        from shoal.pipeline.session import build_session
    except ImportError as exc:
        typer.echo(
            f"the pipeline needs pyspark, pyarrow and deltalake (the 'pipeline' extra): {exc}", err=True
        )
        raise typer.Exit(2) from None
    source = _pairs(option, "--option")
    if metadata_path:
        source["shoal.metadata.path"] = metadata_path
    if storage_url:
        source["shoal.storage.url"] = storage_url
    if bootstrap_servers:
        source["kafka.bootstrap.servers"] = bootstrap_servers
    # Embedded in a process that already has a session (a notebook, a test), use it and leave it running.
    owned = SparkSession.getActiveSession() is None
    spark = build_session(master, f"shoal-export-{topic}", _pairs(conf, "--conf"))
    try:
        result = export_topic(spark, topic, fmt, path, source)
    except Exception as exc:  # the job's own errors (bad options, data loss, commit race) end the run
        typer.echo(f"export failed: {type(exc).__name__}: {exc}", err=True)
        raise typer.Exit(1) from None
    finally:
        if owned:
            spark.stop()
    typer.echo(json.dumps(result.to_json(), indent=1))


if __name__ == "__main__":  # spark-submit .../shoal/cli/pipeline.py export ...
    pipeline_app(sys.argv[1:])
