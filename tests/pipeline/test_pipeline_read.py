"""``spark.read.format("shoal")`` returns exactly what a Kafka consumer reads, byte for byte.

Records are produced by librdkafka (confluent-kafka) with every codec into one diskless topic
on a real broker; Spark reads them straight from object storage (and, forced, through the
broker) and the rows are compared with what a confluent consumer gets: partition, offset,
key, value, headers (order, nulls), timestamp and timestamp type.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from tests.pipeline.helpers import new_topic, rows_from_arrow, rows_from_consumer, source_options
from tests.support.broker import BrokerProcess
from tests.support.kafka_clients import confluent_consume, confluent_produce
from tests.support.record_batches import CODEC_IDS, wal_codec_counts
from tests.support.workload import make_workload

pytest.importorskip("pyspark")

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
PER_CODEC = 800
PARTITIONS = 3


@pytest.fixture(scope="module")
def codec_topic(pipeline_broker: BrokerProcess) -> tuple[str, list[Any]]:
    """A diskless topic holding batches of every codec; returns (name, what a consumer reads)."""
    topic = new_topic(pipeline_broker, "codecs", PARTITIONS)
    base_ts = int(time.time() * 1000) - 3_600_000
    sent = make_workload(PER_CODEC * len(CODECS), PARTITIONS, "spark-read", seed=5, base_timestamp=base_ts)
    for i, codec in enumerate(CODECS):
        chunk = sent[i * PER_CODEC : (i + 1) * PER_CODEC]
        confluent_produce(
            pipeline_broker.bootstrap, topic, chunk, config={"compression.type": codec, "linger.ms": 20}
        )
    consumed = confluent_consume(pipeline_broker.bootstrap, topic, range(PARTITIONS), len(sent), settle=0.3)
    return topic, rows_from_consumer(consumed)


def _read(spark: Any, broker: BrokerProcess, **options: str) -> Any:
    return spark.read.format("shoal").options(**source_options(broker, **options)).load()


@pytest.mark.timeout(300)
def test_read_from_storage_matches_consumer_every_codec(
    spark: Any, pipeline_broker: BrokerProcess, codec_topic: Any
) -> None:
    topic, expected = codec_topic
    counts = wal_codec_counts(pipeline_broker)
    assert all(counts.get(CODEC_IDS[c], 0) > 0 for c in CODECS), counts
    # Small input partitions: the ranges are cut at batch boundaries by the coordinator's sizes.
    df = _read(
        spark,
        pipeline_broker,
        subscribe=topic,
        includeHeaders="true",
        **{"shoal.maxBytesPerPartition": "40000"},
    )
    assert df.columns == [
        "key",
        "value",
        "topic",
        "partition",
        "offset",
        "timestamp",
        "timestampType",
        "headers",
    ]
    assert df.rdd.getNumPartitions() > PARTITIONS
    table = df.toArrow()
    assert set(table.column("topic").to_pylist()) == {topic}
    got = rows_from_arrow(table)
    assert len(got) == len(expected)
    assert got == expected


@pytest.mark.timeout(300)
def test_read_through_broker_is_the_same(
    spark: Any, pipeline_broker: BrokerProcess, codec_topic: Any
) -> None:
    topic, expected = codec_topic
    df = _read(
        spark,
        pipeline_broker,
        subscribe=topic,
        includeHeaders="true",
        minPartitions="5",
        **{"shoal.readVia": "broker"},
    )
    assert df.rdd.getNumPartitions() == 5
    assert rows_from_arrow(df.toArrow()) == expected
    # Only brokers known (no metadata path): topics come from Metadata, every read goes through a broker.
    only_brokers = {
        "kafka.bootstrap.servers": pipeline_broker.bootstrap,
        "subscribe": topic,
        "includeHeaders": "true",
    }
    assert rows_from_arrow(spark.read.format("shoal").options(**only_brokers).load().toArrow()) == expected


@pytest.mark.timeout(300)
def test_offset_options_select_exact_ranges(
    spark: Any, pipeline_broker: BrokerProcess, codec_topic: Any
) -> None:
    topic, expected = codec_topic
    by_tp = {(r[0], r[1]): r for r in expected}
    high = {p: max(o for q, o in by_tp if q == p) + 1 for p in range(PARTITIONS)}

    df = _read(
        spark,
        pipeline_broker,
        assign=json.dumps({topic: [0, 2]}),
        startingOffsets=json.dumps({topic: {"0": 10, "2": -2}}),
        endingOffsets=json.dumps({topic: {"0": 25, "2": -1}}),
    )
    assert "headers" not in df.columns  # Spark's Kafka source adds headers only with includeHeaders
    got = sorted((r.partition, r.offset) for r in df.select("partition", "offset").collect())
    assert got == [(0, o) for o in range(10, 25)] + [(2, o) for o in range(high[2])]

    # startingTimestamp: the first record at or after the timestamp, per partition (Kafka's rule).
    stamps = sorted(r[5] for r in expected)
    cut = stamps[len(stamps) // 2]
    df = _read(
        spark, pipeline_broker, subscribePattern=f"{topic[:6]}.*{topic[-8:]}", startingTimestamp=str(cut)
    )
    got_rows = sorted((r.partition, r.offset) for r in df.select("partition", "offset").collect())
    want = []
    for p in range(PARTITIONS):
        first = min((o for (q, o), r in by_tp.items() if q == p and r[5] >= cut), default=high[p])
        want += [(p, o) for o in range(first, high[p])]
    assert got_rows == sorted(want)


@pytest.mark.timeout(300)
def test_log_append_time_topic(spark: Any, pipeline_broker: BrokerProcess) -> None:
    topic = new_topic(pipeline_broker, "lat", 2, {"message.timestamp.type": "LogAppendTime"})
    sent = make_workload(600, 2, "lat", seed=9, base_timestamp=1_000_000)
    confluent_produce(pipeline_broker.bootstrap, topic, sent, config={"compression.type": "zstd"})
    expected = rows_from_consumer(
        confluent_consume(pipeline_broker.bootstrap, topic, range(2), len(sent), settle=0.3)
    )
    assert {r[6] for r in expected} == {1}
    got = rows_from_arrow(_read(spark, pipeline_broker, subscribe=topic, includeHeaders="true").toArrow())
    assert got == expected


def test_arrow_schema_is_what_spark_expects() -> None:
    from pyspark.sql.pandas.types import to_arrow_schema

    from shoal.pipeline.rows import arrow_schema
    from shoal.pipeline.source import spark_schema

    for headers in (False, True):
        assert arrow_schema(headers).equals(to_arrow_schema(spark_schema(headers), timezone="UTC"))


@pytest.mark.timeout(120)
def test_bad_options_fail_the_read(spark: Any, pipeline_broker: BrokerProcess, codec_topic: Any) -> None:
    from py4j.protocol import Py4JJavaError
    from pyspark.errors import PySparkException

    topic, _ = codec_topic
    for options, message in [
        ({"subscribe": topic, "startingOffsets": "latest"}, "can't be latest"),
        ({"subscribe": "no-such-topic-xyz"}, "do not exist"),
        (
            {"assign": json.dumps({topic: [0]}), "startingOffsets": json.dumps({topic: {"1": 0}})},
            "every partition",
        ),
    ]:
        with pytest.raises((PySparkException, Py4JJavaError)) as info:
            _read(spark, pipeline_broker, **options).collect()
        assert message in str(info.value)
