"""A streaming query in its own process, for the test that kills one in the middle of a micro-batch.

``python -m tests.pipeline.stream_child '<json>'`` runs the same query as the test (shoal source,
``foreachBatch`` sink writing ``<out>/<batch id>.parquet``) on the given checkpoint. When the
sink reaches micro-batch ``die_in_batch`` it writes half of that batch's rows, creates the file
``ready`` and waits to be killed (SIGKILL, so nothing gets to clean up or commit).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any


def main(argv: list[str]) -> int:
    cfg = json.loads(argv[0])
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from shoal.pipeline import register

    spark = (
        SparkSession.builder.master("local[1]")
        .appName("shoal-stream-child")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.memory", "512m")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    out = Path(cfg["out"])

    def sink(df: Any, batch_id: int) -> None:
        import pyarrow.parquet as pq

        table = df.toArrow()
        target = out / f"{batch_id:05d}.parquet"
        if batch_id == cfg["die_in_batch"]:
            pq.write_table(table.slice(0, table.num_rows // 2), target)
            Path(cfg["ready"]).write_text(str(os.getpid()))
            time.sleep(600)  # killed here
        pq.write_table(table, target)

    query = (
        spark.readStream.format("shoal")
        .options(**cfg["options"])
        .load()
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", cfg["checkpoint"])
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(600)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
