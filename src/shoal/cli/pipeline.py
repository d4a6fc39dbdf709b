"""``shoal pipeline``: Spark jobs over Shoal topics (``export``, ``compact``).

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


@pipeline_app.command()
def compact(
    metadata_path: Annotated[
        str,
        typer.Option("--metadata-path", help="The brokers' shoal.db (or its folder): the Batch Coordinator."),
    ],
    storage_url: Annotated[str, typer.Option("--storage-url", help="The brokers' diskless.storage.url.")],
    master: Annotated[
        str | None,
        typer.Option("--master", help="Spark master URL; default local[*] (or spark-submit's master)."),
    ] = None,
    target_bytes: Annotated[
        int, typer.Option("--target-bytes", min=1024, help="Size of the objects written (one task each).")
    ] = 64 * 1024 * 1024,
    min_age_ms: Annotated[
        int,
        typer.Option("--min-age-ms", min=0, help="Leave objects committed less than this long ago alone."),
    ] = 5 * 60 * 1000,
    max_object_bytes: Annotated[
        int | None,
        typer.Option(
            "--max-object-bytes",
            min=1,
            help="Objects up to this size are rewritten (default: half the target); "
            "larger ones only when at most half used.",
        ),
    ] = None,
    max_objects: Annotated[
        int,
        typer.Option("--max-objects", min=1, help="At most this many objects per run (the oldest first)."),
    ] = 10_000,
    max_replace_delay_ms: Annotated[
        int,
        typer.Option(
            "--max-replace-delay-ms",
            min=1,
            help="Drop an upload whose coordinate swap would start later than this; keep it well below "
            "diskless.object.orphan.min.age.ms.",
        ),
    ] = 20_000,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Only plan: print what a run would rewrite.")
    ] = False,
    conf: Annotated[
        list[str] | None, typer.Option("--conf", help="A Spark setting, key=value (repeatable).")
    ] = None,
) -> None:
    """Merge small WAL objects into fewer, larger ones laid out per partition, while the brokers run."""
    try:
        from shoal.pipeline.compact import CompactionOptions, compact, plan_compaction
    except ImportError as exc:
        typer.echo(f"the pipeline needs pyspark (the 'pipeline' extra): {exc}", err=True)
        raise typer.Exit(2) from None
    options = CompactionOptions(
        target_bytes=target_bytes,
        min_age_ms=min_age_ms,
        max_object_bytes=max_object_bytes,
        max_objects=max_objects,
        max_replace_delay_ms=max_replace_delay_ms,
    )
    try:
        plan = plan_compaction(metadata_path, options)
    except Exception as exc:  # a missing database, a bad target: nothing was done
        typer.echo(f"compaction failed: {type(exc).__name__}: {exc}", err=True)
        raise typer.Exit(1) from None
    spark = owned = None
    if not dry_run and plan.outputs:  # Spark only when there is work
        try:
            from pyspark.sql import SparkSession

            from shoal.pipeline.session import build_session
        except ImportError as exc:
            typer.echo(f"the pipeline needs pyspark (the 'pipeline' extra): {exc}", err=True)
            raise typer.Exit(2) from None
        owned = SparkSession.getActiveSession() is None
        spark = build_session(master, "shoal-compaction", _pairs(conf, "--conf"))
    try:
        result = compact(spark, metadata_path, storage_url, options, dry_run=dry_run, plan=plan)
    except Exception as exc:  # outputs already swapped stay swapped; the rest is left as it was
        typer.echo(f"compaction failed: {type(exc).__name__}: {exc}", err=True)
        raise typer.Exit(1) from None
    finally:
        if spark is not None and owned:
            spark.stop()
    typer.echo(json.dumps(result.to_json(), indent=1))


if __name__ == "__main__":  # spark-submit .../shoal/cli/pipeline.py export ...
    pipeline_app(sys.argv[1:])
