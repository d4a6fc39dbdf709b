"""One request, one answer over the wire (Produce, Fetch, ListOffsets, Metadata), for tests that
check what a broker answers to exactly one request (classic topics, JBOD, replication)."""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from typing import Any

from kio.static.primitive import i8, i32, i64

from tests.support.record_batches import build_record_batch
from tests.support.wire import WireClient, metadata_v12, produce_request_v9

KAFKA_STORAGE_ERROR = 56


def wire_produce(
    port: int, topic: str, partition: int, records: Sequence[tuple[bytes | None, bytes | None]], acks: int = -1
) -> tuple[int, int]:
    """One uncompressed batch in one Produce v9 (acks=all unless said); returns (error code, base offset)."""
    from kio.schema.produce.v9 import response as resp

    with WireClient(port) as client:
        answer = client.request(
            produce_request_v9(topic, partition, build_record_batch(records), acks), resp.ProduceResponse
        )
    (part,) = answer.responses[0].partition_responses
    return int(part.error_code), int(part.base_offset)


def wire_fetch(port: int, topic: str, partition: int, offset: int) -> tuple[int, int, int]:
    """Fetch v12 at ``offset``; returns (error code, high watermark, log start offset)."""
    from kio.schema.fetch.v12 import request as req
    from kio.schema.fetch.v12 import response as resp

    with WireClient(port) as client:
        answer = client.request(
            req.FetchRequest(
                max_wait=datetime.timedelta(milliseconds=100),
                min_bytes=i32(1),
                isolation_level=i8(0),
                topics=(
                    req.FetchTopic(
                        topic=topic,
                        partitions=(
                            req.FetchPartition(
                                partition=i32(partition),
                                fetch_offset=i64(offset),
                                partition_max_bytes=i32(1 << 20),
                            ),
                        ),
                    ),
                ),
                forgotten_topics_data=(),
                rack_id="",
            ),
            resp.FetchResponse,
        )
    (part,) = answer.responses[0].partitions
    return int(part.error_code), int(part.high_watermark), int(part.log_start_offset)


def wire_list_offset(port: int, topic: str, partition: int, timestamp: int) -> tuple[int, int]:
    """ListOffsets v7 (-1 latest, -2 earliest); returns (error code, offset)."""
    from kio.schema.list_offsets.v7 import request as req
    from kio.schema.list_offsets.v7 import response as resp

    with WireClient(port) as client:
        answer = client.request(
            req.ListOffsetsRequest(
                replica_id=i32(-1),
                isolation_level=i8(0),
                topics=(
                    req.ListOffsetsTopic(
                        name=topic,
                        partitions=(
                            req.ListOffsetsPartition(
                                partition_index=i32(partition), timestamp=i64(timestamp)
                            ),
                        ),
                    ),
                ),
            ),
            resp.ListOffsetsResponse,
        )
    (part,) = answer.topics[0].partitions
    return int(part.error_code), int(part.offset)


def wire_metadata_topic(port: int, topic: str) -> Any:
    """Metadata v12 for ``topic`` as the broker on ``port`` itself answers it."""
    (found,) = metadata_v12(port, [topic]).topics
    return found


def wire_offline_replicas(port: int, topic: str) -> dict[int, tuple[int, ...]]:
    """Metadata v12: each partition's OfflineReplicas (KIP-112), for partitions that have any."""
    found = wire_metadata_topic(port, topic)
    assert int(found.error_code) == 0, found
    return {
        int(p.partition_index): tuple(int(b) for b in p.offline_replicas)
        for p in found.partitions
        if p.offline_replicas
    }
