"""Fixtures of the Spark pipeline tests: one SparkSession and one broker for the whole run.

The tests need the ``pipeline`` extra (pyspark, pyarrow, deltalake); without it every test
here is skipped. They carry the ``pipeline`` marker (``-m "not pipeline"`` leaves them out).
Spark is kept small for a shared 2-core machine: ``local[2,3]`` (2 threads; a failed task
is retried, up to 3 attempts, which the write-retry test needs), no UI, loopback only.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.broker import BrokerProcess

HAVE_PIPELINE = all(
    importlib.util.find_spec(m) is not None for m in ("pyspark", "pyarrow", "deltalake", "confluent_kafka")
)
_HERE = Path(__file__).resolve().parent


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "pipeline: Spark pipeline tests (need the 'pipeline' extra)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    skip = pytest.mark.skip(reason="needs the 'pipeline' extra (pyspark, pyarrow, deltalake)")
    for item in items:
        if _HERE in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.pipeline)
            if not HAVE_PIPELINE:
                item.add_marker(skip)


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The one SparkSession of the run, with the shoal source registered."""
    if not HAVE_PIPELINE:
        pytest.skip("needs the 'pipeline' extra")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from shoal.pipeline import register

    scratch = tmp_path_factory.mktemp("spark")
    session = (
        SparkSession.builder.master("local[2,3]")
        .appName("shoal-pipeline-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.local.dir", str(scratch / "local"))
        .config("spark.sql.warehouse.dir", str(scratch / "warehouse"))
        .config("spark.driver.memory", "1g")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    yield session
    session.stop()


@pytest.fixture(scope="session")
def pipeline_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One broker (local object storage) shared by the pipeline tests; topics are per test."""
    broker = BrokerProcess(tmp_path_factory.mktemp("pipeline-broker"))
    broker.start()
    yield broker
    died = broker.proc is not None and broker.proc.poll() is not None and not broker.stopped_on_purpose
    broker.close()
    if died:
        pytest.fail(f"the broker died during the pipeline tests\n{broker.log_tail(60)}", pytrace=False)
