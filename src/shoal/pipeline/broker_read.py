"""Read offset ranges through the brokers with a Kafka consumer (librdkafka), for any kind of topic.

This is the path for topics that are not diskless (and for every topic with
``shoal.readVia=broker``): a consumer with manual ``assign`` (no group is joined, nothing
is committed) reads from the range's start until it has passed the range's end. Offsets,
watermarks and timestamp lookups for such topics come from the same consumer.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator, Mapping
from typing import Any

from shoal.pipeline.isolation import READ_UNCOMMITTED
from shoal.pipeline.storage_read import DataLossError
from shoal.pipeline.stored_batches import StoredRecord
from shoal.pipeline.topics import PartitionSource

__all__ = ["BrokerRangeReader"]

_CONSUME_BATCH = 5000


class BrokerRangeReader:
    """One librdkafka consumer per task (or per driver lookup); ``close`` it after."""

    def __init__(
        self,
        bootstrap_servers: str,
        kafka_conf: Mapping[str, str],
        poll_timeout_ms: int = 120_000,
        isolation_level: str = READ_UNCOMMITTED,
    ) -> None:
        from confluent_kafka import Consumer

        conf: dict[str, Any] = {
            "bootstrap.servers": bootstrap_servers,
            # librdkafka wants a group id even for manual assignment; it is never joined.
            "group.id": f"shoal-spark-{uuid.uuid4().hex[:12]}",
            **kafka_conf,
            # Always explicit: Kafka's (and Spark's) default is read_uncommitted, librdkafka's own is
            # read_committed. With read_committed the broker skips aborted transactions, and the
            # watermark query answers the last stable offset as the high end (librdkafka >= 1.7.1),
            # so the planned ends never pass what this consumer can read.
            "isolation.level": isolation_level,
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "enable.partition.eof": True,
            "auto.offset.reset": "error",
        }
        self._consumer = Consumer(conf)
        self._timeout = poll_timeout_ms / 1000

    def close(self) -> None:
        self._consumer.close()

    def __enter__(self) -> BrokerRangeReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def partitions_of(self, topic: str) -> list[int] | None:
        """The topic's partitions, or None when it does not exist."""
        md = self._consumer.list_topics(topic=topic, timeout=self._timeout)
        info = md.topics.get(topic)
        if info is None or info.error is not None:
            return None
        return sorted(info.partitions)

    def bounds(self, src: PartitionSource) -> tuple[int, int]:
        """(low, high) watermarks, asked of the partition leader; with ``read_committed`` the high
        end is the last stable offset (ListOffsets with the consumer's isolation level)."""
        from confluent_kafka import TopicPartition

        low, high = self._consumer.get_watermark_offsets(
            TopicPartition(src.topic, src.partition), timeout=self._timeout, cached=False
        )
        return int(low), int(high)

    def offset_for_timestamp(self, src: PartitionSource, target: int) -> int | None:
        """ListOffsets by timestamp; None when no record has a timestamp >= ``target``."""
        from confluent_kafka import TopicPartition

        (found,) = self._consumer.offsets_for_times(
            [TopicPartition(src.topic, src.partition, target)], timeout=self._timeout
        )
        if found.error is not None:
            raise RuntimeError(f"ListOffsets by timestamp for {src.topic}-{src.partition}: {found.error}")
        return None if found.offset < 0 else int(found.offset)

    def read(
        self, src: PartitionSource, start: int, end: int, *, fail_on_data_loss: bool = True
    ) -> Iterator[list[StoredRecord]]:
        """Records with ``start <= offset < end`` in chunks; fails (or stops) when the log does not reach ``end``."""
        from confluent_kafka import KafkaError, TopicPartition

        if start >= end:
            return
        self._consumer.assign([TopicPartition(src.topic, src.partition, start)])
        position = start
        deadline = time.monotonic() + self._timeout
        try:
            while position < end:
                msgs = self._consumer.consume(num_messages=_CONSUME_BATCH, timeout=0.5)
                chunk: list[StoredRecord] = []
                for msg in msgs:
                    err = msg.error()
                    if err is not None:
                        if err.code() == KafkaError._PARTITION_EOF:
                            # The log ends before our range does: it was truncated or deleted.
                            if msg.offset() < end:
                                low, _ = self.bounds(src)
                                if fail_on_data_loss:
                                    raise DataLossError(
                                        f"{src.topic}-{src.partition} ends at {msg.offset()} before the planned end "
                                        f"{end} (log start {low}); set failOnDataLoss=false to go on"
                                    )
                            position = end  # at the end of the log, past any trailing control records
                            continue
                        if (
                            err.code() == KafkaError.OFFSET_OUT_OF_RANGE
                            or err.code() == KafkaError._AUTO_OFFSET_RESET
                        ):
                            low, _ = self.bounds(src)
                            if fail_on_data_loss or low <= position:
                                raise DataLossError(
                                    f"{src.topic}-{src.partition}: offset {position} is out of range (log start {low}); "
                                    "set failOnDataLoss=false to go on"
                                )
                            position = low
                            self._consumer.assign([TopicPartition(src.topic, src.partition, low)])
                            continue
                        if err.retriable() or not err.fatal():
                            continue
                        raise RuntimeError(f"consuming {src.topic}-{src.partition}: {err}")
                    offset = msg.offset()
                    if offset >= end:
                        position = end
                        break
                    if offset < position:
                        continue
                    ts_type, ts = msg.timestamp()
                    headers = msg.headers()
                    chunk.append(
                        (
                            offset,
                            ts,
                            ts_type - 1,  # librdkafka: 1 CreateTime, 2 LogAppendTime -> Kafka's 0/1
                            msg.key(),
                            msg.value(),
                            tuple((k, v) for k, v in headers) if headers else (),
                        )
                    )
                    position = offset + 1
                if chunk:
                    deadline = time.monotonic() + self._timeout
                    yield chunk
                elif time.monotonic() > deadline:
                    raise TimeoutError(
                        f"no record from {src.topic}-{src.partition} at offset {position} within "
                        f"kafkaConsumer.pollTimeoutMs={int(self._timeout * 1000)}"
                    )
        finally:
            self._consumer.unassign()
