"""``spark.readStream.format("shoal")``: offsets checkpointed by Spark, every record delivered once.

The sink is idempotent the way Spark's docs ask: ``foreachBatch`` writes one Parquet file per
micro-batch id (a re-run of a batch overwrites its file). A first query drains the topic with
``Trigger.AvailableNow`` and ``maxOffsetsPerTrigger`` and stops; more records arrive; a second
query on the same checkpoint, in its own process, is killed (SIGKILL) in the middle of a
micro-batch, after writing part of its output and before Spark commits the batch; a third
one restarts from the checkpoint, re-runs that batch and goes on. The files together must hold
every record exactly once.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.pipeline.helpers import new_topic, rows_from_consumer, source_options
from tests.support.broker import REPO_ROOT, SRC_DIR, BrokerProcess
from tests.support.kafka_clients import confluent_consume, confluent_produce
from tests.support.workload import make_workload

pytest.importorskip("pyspark")

PARTITIONS = 2
LIMIT = 250


class _BatchFiles:
    """foreachBatch sink: batch ``id`` -> ``<dir>/<id>.parquet``, replaced atomically."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.batch_ids: list[int] = []

    def __call__(self, df: Any, batch_id: int) -> None:
        import pyarrow.parquet as pq

        table = df.toArrow()
        self.batch_ids.append(batch_id)
        target = self.directory / f"{batch_id:05d}.parquet"
        tmp = target.with_suffix(".tmp")
        pq.write_table(table, tmp)
        tmp.replace(target)


def _options(broker: BrokerProcess, topic: str) -> dict[str, str]:
    return source_options(
        broker,
        subscribe=topic,
        includeHeaders="true",
        startingOffsets="earliest",
        maxOffsetsPerTrigger=str(LIMIT),
    )


def _run(spark: Any, broker: BrokerProcess, topic: str, checkpoint: Path, sink: _BatchFiles) -> Any:
    df = spark.readStream.format("shoal").options(**_options(broker, topic)).load()
    return (
        df.writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )


def _kill_mid_batch(
    broker: BrokerProcess, topic: str, checkpoint: Path, out: Path, ready: Path, batch: int
) -> None:
    """Run the query in a child process and SIGKILL it (and its JVM) while micro-batch ``batch`` is in the sink."""
    cfg = {
        "options": _options(broker, topic),
        "checkpoint": str(checkpoint),
        "out": str(out),
        "ready": str(ready),
        "die_in_batch": batch,
    }
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join(
            filter(None, [str(REPO_ROOT), str(SRC_DIR), os.environ.get("PYTHONPATH")])
        ),
    )
    log = ready.with_name("stream-child.log")
    with open(log, "wb") as output:
        child = subprocess.Popen(
            [sys.executable, "-m", "tests.pipeline.stream_child", json.dumps(cfg)],
            cwd=REPO_ROOT,
            env=env,
            stdout=output,
            stderr=output,
            start_new_session=True,  # its own process group: the JVM it launches dies with it
        )
    try:
        deadline = time.monotonic() + 180
        while not ready.exists():
            if child.poll() is not None:
                raise AssertionError(
                    f"the streaming child exited early ({child.returncode}):\n{log.read_text()[-3000:]}"
                )
            if time.monotonic() > deadline:
                raise AssertionError("the streaming child never reached the batch to die in")
            time.sleep(0.2)
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
        child.wait(30)


@pytest.mark.timeout(400)
def test_stream_restart_and_crash_deliver_each_record_once(
    spark: Any, pipeline_broker: BrokerProcess, tmp_path: Path
) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from tests.pipeline.helpers import rows_from_arrow

    topic = new_topic(pipeline_broker, "stream", PARTITIONS)
    out = tmp_path / "out"
    out.mkdir()
    checkpoint = tmp_path / "checkpoint"
    base = int(time.time() * 1000) - 60_000
    first = make_workload(600, PARTITIONS, "s1", seed=1, base_timestamp=base)
    confluent_produce(pipeline_broker.bootstrap, topic, first, config={"compression.type": "lz4"})

    sink1 = _BatchFiles(out)
    q = _run(spark, pipeline_broker, topic, checkpoint, sink1)
    q.awaitTermination(180)
    assert q.exception() is None, q.exception()
    assert sink1.batch_ids == [0, 1, 2]  # 600 records, at most 250 per trigger

    second = make_workload(400, PARTITIONS, "s2", seed=2, base_timestamp=base + 1000, first_seq=600)
    confluent_produce(pipeline_broker.bootstrap, topic, second, config={"compression.type": "snappy"})

    _kill_mid_batch(pipeline_broker, topic, checkpoint, out, tmp_path / "ready", batch=3)
    assert pq.read_table(out / "00003.parquet").num_rows < LIMIT  # the killed batch left half its output

    sink3 = _BatchFiles(out)
    q = _run(spark, pipeline_broker, topic, checkpoint, sink3)
    q.awaitTermination(180)
    assert q.exception() is None, q.exception()
    assert sink3.batch_ids[0] == 3  # the batch that died is re-run with the same id and offsets
    assert sink3.batch_ids == list(range(3, 3 + len(sink3.batch_ids)))

    tables = [pq.read_table(p) for p in sorted(out.glob("*.parquet"))]
    assert all(t.num_rows <= LIMIT for t in tables)
    got = rows_from_arrow(pa.concat_tables(tables))
    expected = rows_from_consumer(
        confluent_consume(
            pipeline_broker.bootstrap, topic, range(PARTITIONS), len(first) + len(second), settle=0.3
        )
    )
    assert len(got) == len(expected) == 1000
    assert got == expected
