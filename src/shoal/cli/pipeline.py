"""``shoal pipeline``: Spark jobs over Shoal topics (``export``, ``compact``).

pyspark comes with the ``pipeline`` extra and is imported only when a job runs, so the rest
of the CLI works without it. The module also runs under ``spark-submit`` (see docs/pipeline.md):
``spark-submit --master URL .../shoal/cli/pipeline.py export --topic T ...``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from shoal.cli.store_options import ConfigOpt, DataDirOpt, OverrideOpt, tool_config
from shoal.store.locate import DEFAULT_DATA_DIR, NO_CONFIG_MESSAGE

pipeline_app = typer.Typer(
    help="Spark jobs over Shoal topics (needs the 'pipeline' extra).", no_args_is_help=True
)


MetadataPathOpt = Annotated[
    str | None,
    typer.Option("--metadata-path", help="Older spelling: the brokers' shoal.db (or its folder); needs --storage-url."),
]
StorageUrlOpt = Annotated[
    str | None,
    typer.Option("--storage-url", help="Object storage, when not the configuration's diskless.storage.url."),
]


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
    config: ConfigOpt = None,
    data_dir: DataDirOpt = None,
    override: OverrideOpt = None,
    metadata_path: MetadataPathOpt = None,
    storage_url: StorageUrlOpt = None,
    bootstrap_servers: Annotated[
        str | None,
        typer.Option("--bootstrap-server", "--bootstrap-servers", help="Brokers, for topics that are not diskless."),
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
    stores = _store_options(config, data_dir, override, metadata_path, required=not bootstrap_servers)
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
    source.update(stores)
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
    config: ConfigOpt = None,
    data_dir: DataDirOpt = None,
    override: OverrideOpt = None,
    metadata_path: MetadataPathOpt = None,
    storage_url: StorageUrlOpt = None,
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
    from shoal.store.factory import object_storage_url

    if metadata_path is not None:
        if config is not None or data_dir is not None:
            raise typer.BadParameter("give --metadata-path or --config/--data-dir, not both")
        if not storage_url:
            raise typer.BadParameter("--metadata-path needs --storage-url (the brokers' diskless.storage.url)")
        store = tool_config(metadata_dir=Path(metadata_path), overrides=override)
    else:
        store = tool_config(config, data_dir, None, override)
    storage_url = storage_url or object_storage_url(store)
    options = CompactionOptions(
        target_bytes=target_bytes,
        min_age_ms=min_age_ms,
        max_object_bytes=max_object_bytes,
        max_objects=max_objects,
        max_replace_delay_ms=max_replace_delay_ms,
    )
    try:
        plan = plan_compaction(store, options)
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
        result = compact(spark, store, storage_url, options, dry_run=dry_run, plan=plan)
    except Exception as exc:  # outputs already swapped stay swapped; the rest is left as it was
        typer.echo(f"compaction failed: {type(exc).__name__}: {exc}", err=True)
        raise typer.Exit(1) from None
    finally:
        if spark is not None and owned:
            spark.stop()
    typer.echo(json.dumps(result.to_json(), indent=1))


def _store_options(
    config: Path | None, data_dir: Path | None, override: list[str] | None, metadata_path: str | None,
    *, required: bool,
) -> dict[str, str]:
    """The data source options that name Shoal's stores, found the way every tool finds them.
    Without any (and no ./shoal-data), topics are read through the brokers, or exit 2 when
    there are none to read through either."""
    given = [flag for flag, value in (("--config", config), ("--data-dir", data_dir),
                                      ("--metadata-path", metadata_path)) if value is not None]
    if len(given) > 1:
        raise typer.BadParameter(f"give one of {', '.join(given)}, not several")
    if config is not None or data_dir is not None:
        tool_config(config, data_dir, None, override)  # an unreadable configuration stops here (exit 2)
    out = {f"shoal.override.{k}": v for k, v in _pairs(override, "--override").items()}
    if config is not None:
        out["shoal.config"] = str(config.resolve())
    elif data_dir is not None:
        out["shoal.data.dir"] = str(data_dir.resolve())
    elif metadata_path is not None:
        out["shoal.metadata.path"] = str(Path(metadata_path).resolve())
    elif DEFAULT_DATA_DIR.is_dir():
        out["shoal.data.dir"] = str(DEFAULT_DATA_DIR.resolve())
    elif required:
        typer.echo(f"Error: {NO_CONFIG_MESSAGE}", err=True)
        raise typer.Exit(2)
    return out


if __name__ == "__main__":  # spark-submit .../shoal/cli/pipeline.py export ...
    pipeline_app(sys.argv[1:])
