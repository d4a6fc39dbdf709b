"""The export job: incremental runs, and a rerun after a crash writes no duplicates and skips nothing.

A crash is simulated at the worst point of each format: Parquet after the run's files were
moved into the table but before its manifest exists; Delta after Spark wrote the run's files
but before the Delta commit. The next run must leave each record in the table exactly once.
The Delta rerun goes through the CLI (``shoal pipeline export``), in this process's session.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.pipeline.helpers import new_topic, rows_from_arrow, rows_from_consumer
from tests.support.broker import BrokerProcess
from tests.support.kafka_clients import confluent_consume, confluent_produce
from tests.support.workload import make_workload

pytest.importorskip("pyspark")

PARTITIONS = 2


def _options(broker: BrokerProcess) -> dict[str, str]:
    return {"shoal.metadata.path": str(broker.log_dir / "shoal.db"), "shoal.storage.url": broker.storage_url}


def _produce(broker: BrokerProcess, topic: str, n: int, first_seq: int) -> None:
    sent = make_workload(
        n,
        PARTITIONS,
        f"export-{first_seq}",
        seed=first_seq,
        base_timestamp=1_700_000_000_000 + first_seq,
        first_seq=first_seq,
    )
    confluent_produce(broker.bootstrap, topic, sent, config={"compression.type": "gzip"})


def _expected(broker: BrokerProcess, topic: str, n: int) -> list[Any]:
    return rows_from_consumer(confluent_consume(broker.bootstrap, topic, range(PARTITIONS), n, settle=0.3))


@pytest.mark.timeout(300)
def test_parquet_export_rerun_after_crash(
    spark: Any, pipeline_broker: BrokerProcess, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import pyarrow.parquet as pq

    from shoal.pipeline import parquet_table
    from shoal.pipeline.export import export_topic

    topic = new_topic(pipeline_broker, "export-pq", PARTITIONS)
    path = tmp_path / "table"
    _produce(pipeline_broker, topic, 300, 0)
    first = export_topic(spark, topic, "parquet", str(path), _options(pipeline_broker))
    assert first.committed and first.records == 300 and first.run == 1

    _produce(pipeline_broker, topic, 200, 300)

    def crash(*_: Any) -> None:
        raise OSError("simulated crash before the manifest")

    monkeypatch.setattr(parquet_table.os, "link", crash)
    with pytest.raises(OSError, match="simulated crash"):
        export_topic(spark, topic, "parquet", str(path), _options(pipeline_broker))
    monkeypatch.undo()
    moved = sorted(p.name for p in path.glob("part-0000000002-*.parquet"))
    assert moved, "the crashed run should have left its files in the table"
    assert not (path / "_shoal_offsets" / "0000000002.json").exists()

    second = export_topic(spark, topic, "parquet", str(path), _options(pipeline_broker))
    assert second.committed and second.run == 2 and second.records == 200
    assert set(moved) <= set(second.recovered)
    assert second.offsets == {"0": 250, "1": 250}

    nothing = export_topic(spark, topic, "parquet", str(path), _options(pipeline_broker))
    assert not nothing.committed and nothing.records == 0

    table = pq.read_table(path)
    assert sorted(p.name for p in path.glob("*.parquet")) == sorted(
        parquet_table.ParquetExportTable(str(path)).files()
    )
    assert rows_from_arrow(table) == _expected(pipeline_broker, topic, 500)


@pytest.mark.timeout(300)
def test_delta_export_cli_rerun_after_crash(
    spark: Any, pipeline_broker: BrokerProcess, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from deltalake import DeltaTable

    from shoal.pipeline.delta_table import DeltaExportTable, app_id
    from shoal.pipeline.export import export_topic

    topic = new_topic(pipeline_broker, "export-delta", PARTITIONS)
    path = tmp_path / "delta"
    _produce(pipeline_broker, topic, 300, 0)
    first = export_topic(spark, topic, "delta", str(path), _options(pipeline_broker))
    assert first.committed and first.records == 300

    _produce(pipeline_broker, topic, 200, 300)

    def crash(*_: Any, **__: Any) -> None:
        raise OSError("simulated crash before the Delta commit")

    monkeypatch.setattr(DeltaTable, "create_write_transaction", crash)
    with pytest.raises(OSError, match="simulated crash"):
        export_topic(spark, topic, "delta", str(path), _options(pipeline_broker))
    monkeypatch.undo()
    written = {str(p.relative_to(path)) for p in path.glob("shoal-export-*/part-*.parquet")}
    committed = set(DeltaExportTable(str(path)).files())
    assert committed < written  # the crashed run's files are on disk, not in the table

    from typer.testing import CliRunner

    from shoal.cli.pipeline import pipeline_app

    args = [
        "export", "--topic", topic, "--format", "delta", "--path", str(path),
        "--metadata-path", str(pipeline_broker.log_dir / "shoal.db"),
        "--storage-url", pipeline_broker.storage_url,
    ]  # fmt: skip
    done = CliRunner().invoke(pipeline_app, args)
    assert done.exit_code == 0, done.output
    result = json.loads(done.stdout)
    assert result["committed"] and result["records"] == 200
    assert result["offsets"] == {"0": 250, "1": 250}
    assert spark.sparkContext._jsc is not None  # the CLI left the session it did not create running

    table = DeltaTable(str(path))
    assert {p: table.transaction_version(app_id(topic, p)) for p in range(PARTITIONS)} == {0: 250, 1: 250}
    commit = table.history(1)[0]
    assert json.loads(commit["shoal.export"])["ranges"] == {"0": [150, 250], "1": [150, 250]}
    assert rows_from_arrow(table.to_pyarrow_table()) == _expected(pipeline_broker, topic, 500)
