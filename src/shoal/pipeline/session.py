"""A SparkSession for Shoal's jobs: local by default, any cluster with ``--master``.

Local masters get the settings a shared single machine wants (loopback driver address, no
web UI, small shuffles); for a cluster only the master is set and everything else comes from
``spark-submit``/``spark-defaults.conf``. Executors run the driver's Python unless
``PYSPARK_PYTHON`` says otherwise, so they find ``shoal`` in the same environment.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import Any

__all__ = ["DEFAULT_MASTER", "build_session"]

DEFAULT_MASTER = "local[*]"

_LOCAL_DEFAULTS = {
    "spark.ui.enabled": "false",
    "spark.sql.shuffle.partitions": "4",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.driver.host": "127.0.0.1",
}


def build_session(master: str | None, app_name: str, conf: Mapping[str, str] | None = None) -> Any:
    """getOrCreate a session with the shoal source registered; ``conf`` wins over the local defaults.

    ``master`` None: spark-submit's master when run by it, else Spark's default ``local[*]``.
    """
    from pyspark.sql import SparkSession

    from shoal.pipeline import register

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name)
    if master:
        builder = builder.master(master)
    settings: dict[str, str] = {}
    # Under spark-submit (which sets PYSPARK_GATEWAY_PORT) the master comes from spark-submit.
    submitted = master is None and "PYSPARK_GATEWAY_PORT" in os.environ
    if not submitted and (master or DEFAULT_MASTER).startswith("local"):
        settings.update(_LOCAL_DEFAULTS)
    settings.update(conf or {})
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    register(spark)
    return spark
