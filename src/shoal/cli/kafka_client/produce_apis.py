"""InitProducerId and Produce: the two calls an idempotent producer makes.

The batching, sequence numbers and retries are the producer's (``producer``); this module only
frames one request to one leader and reads its per-partition answers.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from dataclasses import dataclass

from shoal.cli.kafka_client.cluster import TopicPartition
from shoal.cli.kafka_client.connection import Api
from shoal.cli.kafka_client.errors import KafkaApiError, RetriableAnswer
from shoal.cli.kafka_client.router import BrokerRouter
from shoal.protocol.apis import request_class
from shoal.protocol.build import make, nested
from shoal.protocol.errors import ErrorCode

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1

_INIT_RETRY = frozenset(
    {ErrorCode.coordinator_load_in_progress, ErrorCode.coordinator_not_available, ErrorCode.not_coordinator,
     ErrorCode.concurrent_transactions}
)


@dataclass(frozen=True, slots=True)
class ProduceAnswer:
    """One partition's answer to a Produce request."""

    error: ErrorCode
    base_offset: int
    log_append_time: int
    message: str | None


class ProduceApis(BrokerRouter):
    """The produce operations of KafkaClient."""

    def init_producer_id(self) -> tuple[int, int]:
        """A producer id and epoch for an idempotent (non-transactional) producer, from any broker."""

        def once() -> tuple[int, int]:
            conn = self.any_connection()
            version = conn.version(Api.INIT_PRODUCER_ID)
            request = make(
                request_class(Api.INIT_PRODUCER_ID, version),
                transactional_id=None,
                transaction_timeout=datetime.timedelta(milliseconds=60_000),
                producer_id=NO_PRODUCER_ID,
                producer_epoch=NO_PRODUCER_EPOCH,
            )
            response = conn.request(Api.INIT_PRODUCER_ID, version, request)
            if response.error_code in _INIT_RETRY:
                raise RetriableAnswer(response.error_code)
            if response.error_code != ErrorCode.none:
                raise KafkaApiError(response.error_code, context="InitProducerId")
            return int(response.producer_id), int(response.producer_epoch)

        return self._retrying("InitProducerId", once)

    def produce_to(
        self, leader: int, batches: Mapping[TopicPartition, bytes], *, acks: int, timeout_ms: int
    ) -> dict[TopicPartition, ProduceAnswer]:
        """One Produce request to ``leader`` with one batch per partition.

        With acks=0 the broker sends no answer: every partition is reported as sent (offset -1),
        which is all a Kafka producer knows then too.
        """
        conn = self.node_connection(leader)
        version = conn.version(Api.PRODUCE)
        cls = request_class(Api.PRODUCE, version)
        topic_cls, partition_cls = nested(cls, "TopicProduceData"), nested(cls, "PartitionProduceData")
        by_topic: dict[str, list[tuple[int, bytes]]] = {}
        for tp, batch in batches.items():
            by_topic.setdefault(tp.topic, []).append((tp.partition, batch))
        request = make(
            cls,
            transactional_id=None,
            acks=acks,
            timeout=datetime.timedelta(milliseconds=timeout_ms),
            topic_data=tuple(
                make(topic_cls, name=topic, partition_data=tuple(make(partition_cls, index=p, records=b) for p, b in parts))
                for topic, parts in by_topic.items()
            ),
        )
        if acks == 0:
            conn.send_only(Api.PRODUCE, version, request)
            return {tp: ProduceAnswer(ErrorCode.none, -1, -1, None) for tp in batches}
        response = conn.request(Api.PRODUCE, version, request, timeout=self.timeout + timeout_ms / 1000)
        answers: dict[TopicPartition, ProduceAnswer] = {}
        for t in response.responses:
            for p in t.partition_responses:
                answers[TopicPartition(t.name, int(p.index))] = ProduceAnswer(
                    p.error_code,
                    int(p.base_offset),
                    _millis(getattr(p, "log_append_time", None)),
                    getattr(p, "error_message", None),
                )
        for tp in batches:
            answers.setdefault(tp, ProduceAnswer(ErrorCode.unknown_server_error, -1, -1, "no answer for the partition"))
        return answers


def _millis(when: datetime.datetime | None) -> int:
    """kio gives LogAppendTime as a datetime (None for CreateTime topics); Kafka reports -1 then."""
    return -1 if when is None else int(when.timestamp() * 1000)
