"""``df.write.format("shoal")`` and ``writeStream``: rows become records, each exactly once.

The retry test makes Spark's first attempt of one task fail after part of its rows were
produced and acknowledged; Spark retries the task (a new producer id, so the broker's
idempotence cannot help) and the write markers plus ``shoal.write.id`` headers keep the
retry from producing those rows again.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from tests.pipeline.helpers import new_topic, source_options
from tests.support.broker import BrokerProcess
from tests.support.kafka_clients import confluent_consume, confluent_produce
from tests.support.workload import make_workload

pytest.importorskip("pyspark")


def _write_options(broker: BrokerProcess, **extra: str) -> dict[str, str]:
    return {"kafka.bootstrap.servers": broker.bootstrap, "shoal.storage.url": broker.storage_url, **extra}


def _user_headers(headers: tuple[tuple[str, bytes | None], ...]) -> tuple[tuple[str, bytes | None], ...]:
    return tuple(h for h in headers if h[0] != "shoal.write.id")


@pytest.mark.timeout(300)
def test_batch_write_columns_like_spark_kafka_sink(spark: Any, pipeline_broker: BrokerProcess) -> None:
    from pyspark.sql.types import ArrayType, BinaryType, IntegerType, StringType, StructField, StructType

    a = new_topic(pipeline_broker, "wa", 3)
    b = new_topic(pipeline_broker, "wb", 2)
    header = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
    schema = StructType(
        [
            StructField("topic", StringType()),
            StructField("key", StringType()),
            StructField("value", BinaryType()),
            StructField("partition", IntegerType()),
            StructField("headers", ArrayType(header)),
            StructField("ignored", StringType()),
        ]
    )
    rows = []
    for i in range(300):
        headers = [("n", str(i).encode()), ("nil", None)] if i % 3 else None
        rows.append(
            (a if i % 2 else b, None if i % 10 == 0 else f"k{i}", f"v{i}".encode(), i % 2, headers, "x")
        )
    spark.createDataFrame(rows, schema).write.format("shoal").options(**_write_options(pipeline_broker)).mode(
        "append"
    ).save()

    for topic, parity, partitions in ((a, 1, 3), (b, 0, 2)):
        want = [r for i, r in enumerate(rows) if i % 2 == parity]
        got = confluent_consume(pipeline_broker.bootstrap, topic, range(partitions), len(want), settle=0.5)
        assert len(got) == len(want)
        by_value = {r.value: r for r in got}
        for _topic, key, value, partition, headers, _ in want:
            rec = by_value[value]
            assert rec.partition == partition
            assert rec.key == (key.encode() if key is not None else None)
            assert _user_headers(rec.headers) == tuple(headers or ())
            assert [h[0] for h in rec.headers].count("shoal.write.id") == 1


@pytest.mark.timeout(300)
def test_retried_task_does_not_duplicate_acknowledged_records(
    spark: Any, pipeline_broker: BrokerProcess, tmp_path: Path
) -> None:
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType

    topic = new_topic(pipeline_broker, "retry", 3)
    failed_at = tmp_path / "failed-at"

    def value(i: int) -> str:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        if ctx.partitionId() == 1 and ctx.attemptNumber() == 0 and i == 2500:
            time.sleep(2)  # the rows before this one are produced and acknowledged meanwhile
            failed_at.write_text(str(time.time_ns() // 1_000_000))
            raise RuntimeError("injected task failure")
        return f"row-{i}|" + "x" * 300

    markers = Path(str(pipeline_broker.objects_dir)) / "pipeline"
    markers_before = set(markers.rglob("*.json"))
    make_value = F.udf(
        lambda i: value(i), StringType()
    )  # a lambda: Spark would read the hints as a pandas UDF
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "50")
    try:
        df = spark.range(0, 3000, 1, 2).select(
            F.col("id").cast("string").alias("key"), make_value("id").alias("value")
        )
        df.write.format("shoal").options(**_write_options(pipeline_broker, topic=topic)).option(
            "shoal.write.retryGraceMs", "1000"
        ).mode("append").save()
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")

    assert failed_at.exists(), "the first attempt of task 1 did not fail"
    got = confluent_consume(pipeline_broker.bootstrap, topic, range(3), 3000, settle=1.0)
    values = [r.value for r in got]
    assert len(values) == 3000
    assert sorted(values) == sorted(f"row-{i}|".encode() + b"x" * 300 for i in range(3000))
    # The failing attempt did get some of its rows (1500..2499) acknowledged before it died.
    fail_ms = int(failed_at.read_text())
    early = [r for r in got if r.timestamp < fail_ms and int(r.value.split(b"|")[0][4:]) >= 1500]
    assert early, "the failed attempt acknowledged nothing: the test did not exercise the retry path"
    assert set(markers.rglob("*.json")) == markers_before, "the job's write markers were not deleted"


@pytest.mark.timeout(300)
def test_stream_copy_between_topics(spark: Any, pipeline_broker: BrokerProcess, tmp_path: Path) -> None:
    source = new_topic(pipeline_broker, "copy-src", 2)
    target = new_topic(pipeline_broker, "copy-dst", 2)
    sent = make_workload(500, 2, "copy", seed=3, nulls=False)
    confluent_produce(pipeline_broker.bootstrap, source, sent)
    df = (
        spark.readStream.format("shoal")
        .options(
            **source_options(
                pipeline_broker, subscribe=source, startingOffsets="earliest", includeHeaders="true"
            )
        )
        .option("maxOffsetsPerTrigger", "200")
        .load()
        .select("key", "value", "partition", "headers")
    )
    q = (
        df.writeStream.format("shoal")
        .options(**_write_options(pipeline_broker, topic=target))
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination(180)
    assert q.exception() is None, q.exception()
    got = confluent_consume(pipeline_broker.bootstrap, target, range(2), len(sent), settle=0.5)
    assert len(got) == len(sent)
    assert sorted((r.partition, r.key, r.value, _user_headers(r.headers)) for r in got) == sorted(
        (s.partition, s.key, s.value, s.headers) for s in sent
    )
