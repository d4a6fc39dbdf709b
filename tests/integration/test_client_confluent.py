"""confluent-kafka (librdkafka 2.16) round trip through diskless topics, one codec per test.

Together the four codecs make the issue's 100,000 records for this client.
"""

from __future__ import annotations

import time

import pytest

from tests.support.broker import BrokerProcess
from tests.support.kafka_clients import confluent_consume, confluent_produce, create_diskless_topic
from tests.support.record_batches import CODEC_IDS, wal_codec_counts
from tests.support.workload import check_records, make_workload

CODECS = ["gzip", "snappy", "lz4", "zstd"]
RECORDS_PER_CODEC = 25_000
PARTITIONS = 4


@pytest.mark.timeout(240)
@pytest.mark.parametrize("codec", CODECS)
def test_confluent_round_trip(broker: BrokerProcess, topic_name: str, codec: str) -> None:
    """Keys, values, headers and CreateTime come back unchanged, in order, offsets gapless."""
    create_diskless_topic(broker.bootstrap, topic_name, partitions=PARTITIONS)
    base_ts = int(time.time() * 1000) - 600_000
    sent = make_workload(RECORDS_PER_CODEC, PARTITIONS, f"confluent-{codec}", seed=11, base_timestamp=base_ts)

    confluent_produce(broker.bootstrap, topic_name, sent, config={"compression.type": codec})
    received = confluent_consume(broker.bootstrap, topic_name, range(PARTITIONS), len(sent))

    check_records(received, sent)
    # The broker stores the producer's batches as they came (the hot path never recompresses).
    counts = wal_codec_counts(broker)
    assert counts.get(CODEC_IDS[codec], 0) > 0, f"no {codec} batch in the WAL objects: codec counts {counts}"
