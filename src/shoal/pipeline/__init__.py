"""Spark on Shoal: the ``shoal`` data source (read, readStream, write, writeStream) and batch jobs.

Importing this package needs no pyspark; ``register`` and the modules that talk to Spark
import it when used (pyspark, pyarrow and confluent-kafka come with the ``pipeline`` extra).
See docs/pipeline.md.
"""

from __future__ import annotations

from typing import Any

__all__ = ["register"]


def register(spark: Any) -> None:
    """Make ``format("shoal")`` available in ``spark`` (a SparkSession)."""
    from shoal.pipeline.source import ShoalDataSource

    spark.dataSource.register(ShoalDataSource)
