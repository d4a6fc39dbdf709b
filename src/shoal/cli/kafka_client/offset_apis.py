"""ListOffsets, sent to each partition's leader and retried while leadership moves."""

from __future__ import annotations

import datetime
import time
from collections.abc import Mapping
from dataclasses import dataclass

from shoal.cli.kafka_client.cluster import TopicPartition
from shoal.cli.kafka_client.connection import Api
from shoal.cli.kafka_client.errors import BrokerConnectionError, RetriableAnswer
from shoal.cli.kafka_client.router import BrokerRouter
from shoal.protocol.apis import request_class
from shoal.protocol.build import make, nested
from shoal.protocol.errors import ErrorCode

LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
EARLIEST_LOCAL_TIMESTAMP = -4  # KIP-405: the first offset still on the leader's disk
UNKNOWN_OFFSET = -1

_LEADER_RETRY = frozenset(
    {
        ErrorCode.not_leader_or_follower,
        ErrorCode.leader_not_available,
        ErrorCode.unknown_topic_or_partition,
        ErrorCode.fenced_leader_epoch,
        ErrorCode.unknown_leader_epoch,
        ErrorCode.offset_not_available,
        ErrorCode.request_timed_out,
        ErrorCode.broker_not_available,
        ErrorCode.replica_not_available,
    }
)


@dataclass(frozen=True, slots=True)
class ListedOffset:
    """A ListOffsets answer: offset -1 with no error means 'no such offset' (e.g. a future timestamp)."""

    offset: int
    timestamp: int
    error: ErrorCode


class OffsetApis(BrokerRouter):
    """The partition offset operations of KafkaClient."""

    def list_offsets(self, specs: Mapping[TopicPartition, int]) -> dict[TopicPartition, ListedOffset]:
        """ListOffsets at each partition's leader: timestamp -1 latest, -2 earliest, else by time.

        Unknown topics/partitions answer UNKNOWN_TOPIC_OR_PARTITION at once; leader changes are
        retried with fresh metadata until the deadline.
        """
        deadline = self._deadline()
        pending = dict(specs)
        results: dict[TopicPartition, ListedOffset] = {}
        last_codes: dict[TopicPartition, ErrorCode] = {}
        while pending:
            try:
                cluster = self.metadata(sorted({tp.topic for tp in pending}))
                by_leader: dict[int, dict[TopicPartition, int]] = {}
                for tp, ts in pending.items():
                    topic = cluster.topics.get(tp.topic)
                    info = topic.partitions.get(tp.partition) if topic is not None else None
                    if topic is None or info is None or topic.error == ErrorCode.unknown_topic_or_partition:
                        results[tp] = ListedOffset(UNKNOWN_OFFSET, -1, ErrorCode.unknown_topic_or_partition)
                    elif info.leader < 0 or info.leader not in cluster.brokers:
                        last_codes[tp] = ErrorCode.leader_not_available
                    else:
                        by_leader.setdefault(info.leader, {})[tp] = ts
                for leader, part in by_leader.items():
                    for tp, answer in self._list_offsets_at(leader, part).items():
                        if answer.error in _LEADER_RETRY:
                            last_codes[tp] = answer.error
                        else:
                            results[tp] = answer
            except BrokerConnectionError:
                pass
            pending = {tp: ts for tp, ts in pending.items() if tp not in results}
            if pending and time.monotonic() + self.retry_backoff >= deadline:
                for tp in pending:
                    code = last_codes.get(tp, ErrorCode.request_timed_out)
                    results[tp] = ListedOffset(UNKNOWN_OFFSET, -1, code)
                break
            if pending:
                time.sleep(self.retry_backoff)
        return results

    def _list_offsets_at(self, leader: int, specs: Mapping[TopicPartition, int]) -> dict[TopicPartition, ListedOffset]:
        try:
            conn = self.node_connection(leader)
        except RetriableAnswer as exc:
            return {tp: ListedOffset(UNKNOWN_OFFSET, -1, exc.code) for tp in specs}
        version = conn.version(Api.LIST_OFFSETS)
        cls = request_class(Api.LIST_OFFSETS, version)
        topic_cls, partition_cls = nested(cls, "ListOffsetsTopic"), nested(cls, "ListOffsetsPartition")
        by_topic: dict[str, list[tuple[int, int]]] = {}
        for tp, ts in sorted(specs.items()):
            by_topic.setdefault(tp.topic, []).append((tp.partition, ts))
        request = make(
            cls,
            replica_id=-1,
            isolation_level=0,  # READ_UNCOMMITTED, as Kafka's consumer-groups tool asks
            topics=tuple(
                make(
                    topic_cls,
                    name=topic,
                    partitions=tuple(
                        make(partition_cls, partition_index=p, current_leader_epoch=-1, timestamp=ts) for p, ts in parts
                    ),
                )
                for topic, parts in by_topic.items()
            ),
            timeout=datetime.timedelta(seconds=self.timeout),
        )
        response = conn.request(Api.LIST_OFFSETS, version, request)
        answers: dict[TopicPartition, ListedOffset] = {}
        for t in response.topics:
            for p in t.partitions:
                tp = TopicPartition(t.name, int(p.partition_index))
                if tp in specs:
                    answers[tp] = ListedOffset(int(p.offset), int(p.timestamp), p.error_code)
        for tp in specs:
            answers.setdefault(tp, ListedOffset(UNKNOWN_OFFSET, -1, ErrorCode.unknown_topic_or_partition))
        return answers
