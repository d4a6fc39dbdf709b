"""Fetch: one request to one leader for the partitions it leads, as a consumer sends it.

No fetch sessions (KIP-227): every request is a full fetch (session id 0, epoch -1), which every
broker serves; a console consumer's few partitions do not need incremental fetches.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from dataclasses import dataclass

from shoal.cli.kafka_client.cluster import TopicPartition
from shoal.cli.kafka_client.connection import Api
from shoal.cli.kafka_client.router import BrokerRouter
from shoal.protocol.apis import request_class
from shoal.protocol.build import make, nested
from shoal.protocol.errors import ErrorCode

READ_UNCOMMITTED = 0
READ_COMMITTED = 1

_FULL_FETCH_SESSION = 0
_NO_SESSION_EPOCH = -1  # FINAL_EPOCH: no session is created


@dataclass(frozen=True, slots=True)
class FetchedPartition:
    """One partition of a Fetch answer: raw record batches plus what read_committed needs."""

    error: ErrorCode
    high_watermark: int
    last_stable_offset: int
    aborted: tuple[tuple[int, int], ...]  # (producer id, first offset) of aborted transactions
    records: bytes


class FetchApis(BrokerRouter):
    """The fetch operation of KafkaClient."""

    def fetch_from(
        self,
        leader: int,
        positions: Mapping[TopicPartition, int],
        *,
        isolation_level: int = READ_UNCOMMITTED,
        max_wait_ms: int = 500,
        max_bytes: int = 52_428_800,
        partition_max_bytes: int = 1_048_576,
    ) -> dict[TopicPartition, FetchedPartition]:
        """Fetch from ``leader`` at the given positions (Kafka's consumer defaults for the sizes)."""
        conn = self.node_connection(leader)
        version = conn.version(Api.FETCH)
        cls = request_class(Api.FETCH, version)
        topic_cls, partition_cls = nested(cls, "FetchTopic"), nested(cls, "FetchPartition")
        by_topic: dict[str, list[tuple[int, int]]] = {}
        for tp, offset in sorted(positions.items()):
            by_topic.setdefault(tp.topic, []).append((tp.partition, offset))
        request = make(
            cls,
            cluster_id=None,
            replica_id=-1,
            max_wait=datetime.timedelta(milliseconds=max_wait_ms),
            min_bytes=1,
            max_bytes=max_bytes,
            isolation_level=isolation_level,
            session_id=_FULL_FETCH_SESSION,
            session_epoch=_NO_SESSION_EPOCH,
            topics=tuple(
                make(
                    topic_cls,
                    topic=topic,
                    partitions=tuple(
                        make(
                            partition_cls,
                            partition=p,
                            current_leader_epoch=-1,
                            fetch_offset=offset,
                            last_fetched_epoch=-1,
                            log_start_offset=-1,
                            partition_max_bytes=partition_max_bytes,
                        )
                        for p, offset in parts
                    ),
                )
                for topic, parts in by_topic.items()
            ),
            forgotten_topics_data=(),
            rack_id="",
        )
        response = conn.request(Api.FETCH, version, request, timeout=self.timeout + max_wait_ms / 1000)
        top_error = getattr(response, "error_code", ErrorCode.none)
        answers: dict[TopicPartition, FetchedPartition] = {}
        for t in response.responses:
            for p in t.partitions:
                tp = TopicPartition(t.topic, int(p.partition_index))
                answers[tp] = FetchedPartition(
                    p.error_code,
                    int(p.high_watermark),
                    int(p.last_stable_offset),
                    tuple((int(a.producer_id), int(a.first_offset)) for a in (p.aborted_transactions or ())),
                    bytes(p.records or b""),
                )
        for tp in positions:
            answers.setdefault(
                tp,
                FetchedPartition(top_error if top_error != ErrorCode.none else ErrorCode.unknown_server_error,
                                 -1, -1, (), b""),
            )
        return answers
