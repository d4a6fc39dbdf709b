"""Every store-reading tool finds the stores one way: ``--config`` (plus ``--override``), else
``--data-dir``, else ``./shoal-data``; with none of them it exits 2 with one message naming the three.
Tools run as separate processes from a chosen working directory, as an operator runs them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from shoal.store.locate import NO_CONFIG_MESSAGE
from tests.support.broker import SRC_DIR, BrokerProcess
from tests.support.kafka_clients import confluent_produce
from tests.support.workload import make_workload

TOOLS = [
    ("diskless-metadata", "topic", "t"),
    ("diskless-metadata", "object", "wal/x"),
    ("pipeline", "export", "--topic", "t", "--format", "parquet", "--path", "out"),
    ("pipeline", "compact", "--dry-run"),
    ("log-dirs", "reset"),
    ("log-dirs", "reset", "--dir", "logs"),
]


def shoal(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(SRC_DIR), os.environ.get("PYTHONPATH", "")) if p)}
    return subprocess.run([sys.executable, "-m", "shoal", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=180, check=False)


@pytest.mark.parametrize("tool", TOOLS, ids=lambda t: " ".join(t[:2]))
def test_no_configuration_anywhere_exits_2_with_one_message(tmp_path: Path, tool: tuple[str, ...]) -> None:
    done = shoal(tmp_path, *tool)
    assert done.returncode == 2, done.stdout + done.stderr
    assert NO_CONFIG_MESSAGE in " ".join(done.stderr.split()), done.stderr
    assert not list(tmp_path.iterdir()), "a tool created files while failing"


def test_config_override_and_data_dir_find_the_same_stores(broker: BrokerProcess, tmp_path: Path) -> None:
    shoal(tmp_path, "topics", "create", "--bootstrap-server", broker.bootstrap, "--topic", "t", "--partitions", "2",
          "--diskless")
    confluent_produce(broker.bootstrap, "t", make_workload(20, 2, "lookup"))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()

    by_config = shoal(elsewhere, "diskless-metadata", "topic", "t", "--config", str(broker.properties_path))
    assert by_config.returncode == 0, by_config.stderr
    assert "HighWatermark: " in by_config.stdout and "Topic: t\t" in by_config.stdout

    # --override wins over the file: another metadata dir has no store, and the tool says so (exit 1).
    overridden = shoal(elsewhere, "diskless-metadata", "topic", "t", "--config", str(broker.properties_path),
                       "--override", f"metadata.log.dir={elsewhere}")
    assert overridden.returncode == 1 and "No metadata store at" in overridden.stderr, overridden.stderr
    assert not (elsewhere / "shoal.db").exists(), "a tool created an empty store"

    # The older spelling still works.
    by_metadata_dir = shoal(elsewhere, "diskless-metadata", "topic", "t", "--metadata-dir", str(broker.log_dir))
    assert by_metadata_dir.stdout == by_config.stdout, by_metadata_dir.stderr

    # --data-dir names the layout `shoal up --data-dir` makes: an empty one holds no store.
    by_data_dir = shoal(elsewhere, "diskless-metadata", "topic", "t", "--data-dir", str(elsewhere))
    assert by_data_dir.returncode == 1 and "No metadata store at" in by_data_dir.stderr, by_data_dir.stderr

    both = shoal(elsewhere, "diskless-metadata", "topic", "t", "--config", str(broker.properties_path),
                 "--data-dir", str(elsewhere))
    assert both.returncode == 2 and "not several" in both.stderr, both.stderr

    plan = shoal(elsewhere, "pipeline", "compact", "--dry-run", "--min-age-ms", "0",
                 "--config", str(broker.properties_path))
    assert plan.returncode == 0, plan.stderr
    assert '"dry_run": true' in plan.stdout
