"""The same round trip with WAL objects on S3 (moto's server in a separate process, over HTTP)."""

from __future__ import annotations

import time
from typing import Any

import boto3
import pytest

from tests.support.broker import BrokerProcess
from tests.support.kafka_clients import confluent_consume, confluent_produce, create_diskless_topic
from tests.support.record_batches import split_wal_object
from tests.support.workload import check_records, make_workload


def _bucket_objects(broker: Any) -> dict[str, bytes]:
    s3 = boto3.client(
        "s3",
        endpoint_url=broker.s3_endpoint,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    out: dict[str, bytes] = {}
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=broker.s3_bucket):
        for obj in page.get("Contents", []):
            out[obj["Key"]] = s3.get_object(Bucket=broker.s3_bucket, Key=obj["Key"])["Body"].read()
    return out


@pytest.mark.timeout(240)
def test_s3_round_trip(s3_broker: BrokerProcess, topic_name: str) -> None:
    """20,000 records in two codecs through S3; every object in the bucket is a WAL object."""
    create_diskless_topic(s3_broker.bootstrap, topic_name, partitions=4)
    base_ts = int(time.time() * 1000) - 600_000
    sent_all = []
    for i, codec in enumerate(("zstd", "snappy")):
        sent = make_workload(
            10_000, 4, f"s3-{codec}", seed=50 + i, base_timestamp=base_ts + i * 100_000, first_seq=i * 10_000
        )
        confluent_produce(s3_broker.bootstrap, topic_name, sent, config={"compression.type": codec})
        sent_all += sent

    received = confluent_consume(s3_broker.bootstrap, topic_name, range(4), len(sent_all))
    check_records(received, sent_all)

    objects = _bucket_objects(s3_broker)
    wal = {k: v for k, v in objects.items() if k.startswith("wal/")}
    assert wal, f"no wal/ objects in bucket {s3_broker.s3_bucket}: {sorted(objects)[:20]}"  # type: ignore[attr-defined]
    for key, data in wal.items():
        assert data[:1] == b"\x00", f"{key} starts with {data[:1]!r}, not version 0"
        split_wal_object(data)
