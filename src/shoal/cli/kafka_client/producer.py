"""A synchronous idempotent producer, enough for ``shoal produce`` and shaped like Kafka's.

What it keeps from Kafka's producer, because users rely on it:
- idempotence on by default with acks=all (producer id from InitProducerId, a sequence number
  per partition), so a retried batch is never written twice;
- Kafka's built-in partitioner: murmur2 of the key modulo the partition count for keyed
  records (the same partition Java, librdkafka's ``murmur2_random`` and kafka-python choose),
  a sticky partition for records without a key, switched whenever its batch is sent;
- batches closed at ``batch.size`` bytes or after ``linger.ms``; retries of retriable errors with
  fresh metadata until ``delivery.timeout.ms``; a record larger than ``max.request.size`` is
  refused before sending.

What it leaves out: one request in flight per broker (the console reads one stream of lines;
ordering then needs no sequence bookkeeping across requests) and no transactions.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from shoal.cli.kafka_client.client import KafkaClient
from shoal.cli.kafka_client.cluster import ClusterMetadata, TopicPartition
from shoal.cli.kafka_client.errors import (
    BrokerConnectionError,
    KafkaClientError,
    RetriableAnswer,
    error_message,
    error_name,
)
from shoal.cli.kafka_client.produce_apis import NO_PRODUCER_EPOCH, NO_PRODUCER_ID, ProduceAnswer
from shoal.protocol.errors import ErrorCode
from shoal.records.codec import NewRecord, build_batch

# Errors a producer retries (Kafka's RetriableException subclasses that Produce answers with).
RETRIABLE = frozenset(
    {
        ErrorCode.not_leader_or_follower,
        ErrorCode.leader_not_available,
        ErrorCode.unknown_topic_or_partition,
        ErrorCode.request_timed_out,
        ErrorCode.not_enough_replicas,
        ErrorCode.not_enough_replicas_after_append,
        ErrorCode.kafka_storage_error,
        ErrorCode.network_exception,
        ErrorCode.corrupt_message,
        ErrorCode.broker_not_available,
        ErrorCode.fenced_leader_epoch,
        ErrorCode.unknown_leader_epoch,
        ErrorCode.throttling_quota_exceeded,
        ErrorCode.concurrent_transactions,
    }
)
_RECORD_OVERHEAD = 70  # a v2 batch header (61) plus a record's varint framing, roughly


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2`` (signed 32-bit), the hash its partitioner applies to keys."""
    m, r = 0x5BD1E995, 24
    length = len(data)
    h = (0x9747B28C ^ length) & 0xFFFFFFFF
    for i in range(0, length - length % 4, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> r
        k = (k * m) & 0xFFFFFFFF
        h = ((h * m) & 0xFFFFFFFF) ^ k
    tail = length & ~3
    rest = length % 4
    if rest == 3:
        h ^= data[tail + 2] << 16
    if rest >= 2:
        h ^= data[tail + 1] << 8
    if rest >= 1:
        h ^= data[tail]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for_key(key: bytes, partitions: int) -> int:
    """Kafka's ``BuiltInPartitioner.partitionForKey``: toPositive(murmur2(key)) % partitions."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions


@dataclass
class _Batch:
    records: list[NewRecord] = field(default_factory=list)
    size: int = 0
    opened: float = field(default_factory=time.monotonic)
    built: bytes | None = None  # frozen at first send, so a retry resends the same sequence
    deadline: float = 0.0


@dataclass(frozen=True, slots=True)
class DeliveryFailure:
    topic_partition: TopicPartition
    records: tuple[NewRecord, ...]
    error: str


class Producer:
    """Buffers records per partition and sends them in batches; ``flush`` waits for all of them."""

    def __init__(
        self,
        client: KafkaClient,
        *,
        acks: int = -1,
        compression: int = 0,
        idempotent: bool = True,
        batch_size: int = 16_384,
        linger_ms: int = 5,
        max_request_size: int = 1_048_576,
        request_timeout_ms: int = 30_000,
        delivery_timeout_ms: int = 120_000,
        retry_backoff_ms: int = 100,
        on_failure: Callable[[DeliveryFailure], None] | None = None,
    ) -> None:
        if idempotent and acks != -1:
            raise KafkaClientError("Must set acks to all in order to use the idempotent producer.")
        self.client = client
        self.acks = acks
        self.compression = compression
        self.idempotent = idempotent
        self.batch_size = batch_size
        self.linger = linger_ms / 1000
        self.max_request_size = max_request_size
        self.request_timeout_ms = request_timeout_ms
        self.delivery_timeout = delivery_timeout_ms / 1000
        self.retry_backoff = retry_backoff_ms / 1000
        self.on_failure = on_failure
        self.sent = 0
        self.failed = 0
        self._pid, self._epoch = NO_PRODUCER_ID, NO_PRODUCER_EPOCH
        self._sequences: dict[TopicPartition, int] = {}
        self._batches: dict[TopicPartition, _Batch] = {}
        self._metadata: ClusterMetadata | None = None
        self._sticky: dict[str, int] = {}

    # -- records in ------------------------------------------------------------------------------
    def send(self, topic: str, key: bytes | None, value: bytes | None, headers: tuple = ()) -> None:
        """Queue one record; full batches (and ones past linger.ms) are sent before returning."""
        size = _RECORD_OVERHEAD + len(key or b"") + len(value or b"") + sum(
            len(k) + len(v or b"") + 2 for k, v in headers
        )
        if size > self.max_request_size:
            raise KafkaClientError(
                f"The message is {size} bytes when serialized which is larger than {self.max_request_size}, "
                "which is the value of the max.request.size configuration."
            )
        partition = self._partition(topic, key)
        tp = TopicPartition(topic, partition)
        batch = self._batches.get(tp)
        if batch is not None and (batch.built is not None or batch.size + size > self.batch_size):
            self._send(lambda b: b is batch)
            batch = self._batches.get(tp)
        if batch is None:
            batch = self._batches[tp] = _Batch()
        batch.records.append(NewRecord(key, value, headers, None))
        batch.size += size
        if batch.size >= self.batch_size:
            self._send(lambda b: b is batch)
        self.send_due()

    def next_due(self) -> float | None:
        """When the oldest open batch reaches linger.ms (monotonic seconds), or None."""
        return min((b.opened + self.linger for b in self._batches.values()), default=None)

    def send_due(self) -> None:
        """Send every batch that has waited linger.ms."""
        now = time.monotonic()
        if any(b.opened + self.linger <= now for b in self._batches.values()):
            self._send(lambda b: b.opened + self.linger <= now)

    def flush(self) -> None:
        """Send everything queued and wait for every answer (or final failure)."""
        while self._batches:
            self._send(lambda b: True)

    # -- partitions ------------------------------------------------------------------------------
    def _topic_partitions(self, topic: str) -> int:
        deadline = time.monotonic() + self.client.timeout
        while True:
            if self._metadata is None or topic not in self._metadata.topics:
                self._metadata = self.client.metadata([topic], auto_create=True)
            info = self._metadata.topics.get(topic)
            if info is not None and info.error == ErrorCode.none and info.partitions:
                return len(info.partitions)
            if info is not None and info.error not in (ErrorCode.none, ErrorCode.leader_not_available,
                                                       ErrorCode.unknown_topic_or_partition):
                raise KafkaClientError(f"Topic {topic}: {error_name(info.error)}")
            if time.monotonic() >= deadline:
                raise KafkaClientError(
                    f"Topic {topic} not present in metadata after {int(self.client.timeout * 1000)} ms."
                )
            self._metadata = None
            time.sleep(self.retry_backoff)

    def _partition(self, topic: str, key: bytes | None) -> int:
        count = self._topic_partitions(topic)
        if key is not None:
            return partition_for_key(key, count)
        sticky = self._sticky.get(topic)
        if sticky is None or sticky >= count:
            sticky = self._sticky[topic] = random.randrange(count)
        return sticky

    def _leader(self, tp: TopicPartition) -> int:
        info = self._metadata.topics.get(tp.topic) if self._metadata else None
        part = info.partitions.get(tp.partition) if info else None
        return part.leader if part is not None else -1

    # -- sending ---------------------------------------------------------------------------------
    def _ensure_producer_id(self) -> None:
        if self.idempotent and self._pid == NO_PRODUCER_ID:
            self._pid, self._epoch = self.client.init_producer_id()
            self._sequences.clear()

    def _freeze(self, tp: TopicPartition, batch: _Batch) -> bytes:
        if batch.built is None:
            self._ensure_producer_id()
            sequence = self._sequences.get(tp, 0) if self.idempotent else -1
            batch.built = build_batch(
                batch.records,
                compression=self.compression,
                producer_id=self._pid,
                producer_epoch=self._epoch,
                base_sequence=sequence,
            )
            batch.deadline = time.monotonic() + self.delivery_timeout
            if self._sticky.get(tp.topic) == tp.partition:
                del self._sticky[tp.topic]  # the sticky partition moves on once its batch is sent
        return batch.built

    def _send(self, chosen: Callable[[_Batch], bool]) -> None:
        """Send the chosen batches, one request per leader, until each is acknowledged or failed."""
        pending = {tp: b for tp, b in self._batches.items() if chosen(b)}
        while pending:
            by_leader: dict[int, dict[TopicPartition, bytes]] = {}
            for tp, batch in pending.items():
                by_leader.setdefault(self._leader(tp), {})[tp] = self._freeze(tp, batch)
            retry: set[TopicPartition] = set(by_leader.pop(-1, {}))
            for leader, batches in by_leader.items():
                try:
                    answers = self.client.produce_to(
                        leader, batches, acks=self.acks, timeout_ms=self.request_timeout_ms
                    )
                except (BrokerConnectionError, RetriableAnswer):
                    retry.update(batches)
                    continue
                for tp, answer in answers.items():
                    if tp not in pending:
                        continue
                    if answer.error in RETRIABLE:
                        retry.add(tp)
                    else:
                        self._complete(tp, pending[tp], answer)
            pending = {tp: b for tp, b in pending.items() if tp in retry}
            if not pending:
                return
            now = time.monotonic()
            for tp, batch in list(pending.items()):
                if now >= batch.deadline:
                    self._fail(tp, batch, f"Expiring {len(batch.records)} record(s) for {tp}: "
                               f"{int(self.delivery_timeout * 1000)} ms has passed since batch creation")
                    del pending[tp]
                    self._pid = NO_PRODUCER_ID  # the broker may have written it: start a new sequence
            time.sleep(self.retry_backoff)
            self._metadata = self.client.metadata(sorted({tp.topic for tp in pending}), auto_create=True)

    def _complete(self, tp: TopicPartition, batch: _Batch, answer: ProduceAnswer) -> None:
        if answer.error in (ErrorCode.none, ErrorCode.duplicate_sequence_number):
            del self._batches[tp]
            self.sent += len(batch.records)
            if self.idempotent:
                self._sequences[tp] = (self._sequences.get(tp, 0) + len(batch.records)) % (1 << 31)
            return
        self._fail(tp, batch, f"{error_name(answer.error)}: {answer.message or error_message(answer.error)}")

    def _fail(self, tp: TopicPartition, batch: _Batch, error: str) -> None:
        self._batches.pop(tp, None)
        self.failed += len(batch.records)
        if self.on_failure is not None:
            self.on_failure(DeliveryFailure(tp, tuple(batch.records), error))
