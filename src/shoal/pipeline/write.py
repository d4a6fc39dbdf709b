"""``df.write.format("shoal")`` and ``writeStream``: produce rows through the brokers, once per task.

Columns are those of Spark's Kafka sink: ``topic`` (or the ``topic`` option, which wins),
``value`` (required), ``key``, ``partition``, ``headers``; strings are written as UTF-8.
Every task uses an idempotent producer (``enable.idempotence=true``, ``acks=all``,
Java's murmur2 partitioner for keyed rows), which removes the duplicates of the producer's
own retries. A task that Spark retries, though, gets a new producer id, and the broker cannot
tell its records from those of the attempt that failed. So, unless ``shoal.write.dedup=false``:

1. every record carries a header ``shoal.write.id`` = 8-byte task tag (hash of write id,
   micro-batch id and Spark partition id) + 8-byte hash of the row (topic, partition, key,
   value, headers) + 4-byte occurrence number of that row content within the task;
2. before producing, a task lists the write markers of its tag (``markers``) and uploads
   its own: the first attempt finds none and just produces;
3. an attempt that finds markers waits ``shoal.write.retryGraceMs`` (so that produce
   requests a dead attempt left in flight are committed or failed by then), reads every
   partition of each topic it writes to from the first offset whose timestamp is at or after
   the earliest marker's start (minus ``shoal.write.clockSkewMs``) up to the high watermark,
   collects the ids carrying its tag, and skips the rows already there.

The write id is a fresh UUID per ``df.write`` job, and for streaming the query id (stable
across restarts from the checkpoint) plus the micro-batch id, so a micro-batch re-run after
a restart is recognised as well. See docs/pipeline.md for the exact guarantee.
"""

from __future__ import annotations

import hashlib
import struct
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import ArrayType, BinaryType, IntegerType, StringType, StructType

from shoal.pipeline.broker_read import BrokerRangeReader
from shoal.pipeline.markers import Marker, MarkerStore
from shoal.pipeline.options import OptionError, WriteOptions
from shoal.pipeline.topics import BROKER, PartitionSource

__all__ = [
    "WRITE_ID_HEADER",
    "ShoalBatchWriter",
    "ShoalStreamWriter",
    "TaskWriteResult",
    "check_write_schema",
]

WRITE_ID_HEADER = "shoal.write.id"
_TAG_BYTES = 8
_OCCURRENCE = struct.Struct(">I")
_LEN = struct.Struct(">i")

# Spark sets these local properties on the tasks of a streaming micro-batch.
_QUERY_ID_PROPERTY = "sql.streaming.queryId"
_BATCH_ID_PROPERTY = "streaming.sql.batchId"


@dataclass
class TaskWriteResult(WriterCommitMessage):
    """What one task attempt did, for the driver's commit (and for tests and logs)."""

    write_key: str
    batch_id: int
    partition_id: int
    attempt: int
    produced: int
    skipped: int
    retry: bool


def check_write_schema(schema: StructType, opts: WriteOptions) -> None:
    """Spark's Kafka sink rules for the input columns; other columns are ignored."""
    fields = {f.name: f.dataType for f in schema.fields}
    if "topic" in fields:
        if not isinstance(fields["topic"], StringType):
            raise OptionError(f"topic attribute type must be a string, got {fields['topic'].simpleString()}")
    elif opts.topic is None:
        raise OptionError("topic option required when no 'topic' attribute is present")
    if "value" not in fields:
        raise OptionError("required attribute 'value' not found")
    for name in ("key", "value"):
        if name in fields and not isinstance(fields[name], StringType | BinaryType):
            raise OptionError(
                f"{name} attribute type must be a string or binary, got {fields[name].simpleString()}"
            )
    if "partition" in fields and not isinstance(fields["partition"], IntegerType):
        raise OptionError(
            f"partition attribute type must be an int, got {fields['partition'].simpleString()}"
        )
    if "headers" in fields:
        headers = fields["headers"]
        ok = (
            isinstance(headers, ArrayType)
            and isinstance(headers.elementType, StructType)
            and [f.name for f in headers.elementType.fields] == ["key", "value"]
            and isinstance(headers.elementType.fields[0].dataType, StringType)
            and isinstance(headers.elementType.fields[1].dataType, BinaryType)
        )
        if not ok:
            raise OptionError(
                f"headers attribute type must be array<struct<key:string,value:binary>>, got {headers.simpleString()}"
            )


def _bytes(value: Any) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    return bytes(value)


def _content_hash(
    topic: str, partition: int | None, key: bytes | None, value: bytes | None, headers: list
) -> bytes:
    h = hashlib.blake2b(digest_size=8)
    raw_topic = topic.encode("utf-8")
    h.update(_LEN.pack(len(raw_topic)) + raw_topic + _LEN.pack(-1 if partition is None else partition))
    for part in (key, value):
        h.update(_LEN.pack(-1) if part is None else _LEN.pack(len(part)) + part)
    h.update(_LEN.pack(len(headers)))
    for hkey, hval in headers:
        raw = hkey.encode("utf-8")
        h.update(_LEN.pack(len(raw)) + raw)
        h.update(_LEN.pack(-1) if hval is None else _LEN.pack(len(hval)) + hval)
    return h.digest()


def task_tag(write_key: str, batch_id: int, partition_id: int) -> bytes:
    return hashlib.blake2b(f"{write_key}/{batch_id}/{partition_id}".encode(), digest_size=_TAG_BYTES).digest()


def _written_by_earlier_attempts(opts: WriteOptions, topic: str, tag: bytes, since_ms: int) -> set[bytes]:
    """Ids (row hash + occurrence) with our tag already in ``topic``, in records from ``since_ms`` on."""
    found: set[bytes] = set()
    with BrokerRangeReader(opts.bootstrap_servers, opts.kafka_conf) as reader:
        partitions = reader.partitions_of(topic)
        for partition in partitions or ():  # a topic that does not exist yet holds nothing of ours
            src = PartitionSource(topic, partition, None, BROKER)
            _, high = reader.bounds(src)
            start = reader.offset_for_timestamp(src, max(0, since_ms))
            if start is None or start >= high:
                continue
            for chunk in reader.read(src, start, high, fail_on_data_loss=False):
                for record in chunk:
                    for hkey, hval in record[5]:
                        if hkey == WRITE_ID_HEADER and hval is not None and hval[:_TAG_BYTES] == tag:
                            found.add(hval[_TAG_BYTES:])
    return found


class _Delivery:
    """Counts delivery reports; keeps the first errors."""

    def __init__(self) -> None:
        self.delivered = 0
        self.errors: list[str] = []

    def __call__(self, err: Any, msg: Any) -> None:
        if err is None:
            self.delivered += 1
        elif len(self.errors) < 5:
            self.errors.append(f"{msg.topic()}-{msg.partition()}: {err}")


def _producer(opts: WriteOptions) -> Any:
    from confluent_kafka import Producer

    conf: dict[str, Any] = {
        "bootstrap.servers": opts.bootstrap_servers,
        "linger.ms": 5,
        # Java's partitioner for keyed records, so rows land where Spark's Kafka sink puts them.
        "partitioner": "murmur2_random",
        **opts.kafka_conf,
        "enable.idempotence": True,
        "acks": "all",
    }
    return Producer(conf)


def write_task(
    opts: WriteOptions, batches: Iterator[pa.RecordBatch], write_key: str | None
) -> TaskWriteResult:
    """Produce one Spark partition's rows (see the module docstring for the retry protocol)."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    assert ctx is not None, "write_task runs inside a Spark task"
    partition_id = ctx.partitionId()
    if write_key is None:  # streaming: the query id survives restarts, the batch id tells micro-batches apart
        write_key = ctx.getLocalProperty(_QUERY_ID_PROPERTY) or ""
        batch_id = int(ctx.getLocalProperty(_BATCH_ID_PROPERTY) or "0")
        if not write_key:
            raise RuntimeError("streaming write without a query id in the task's local properties")
    else:
        batch_id = 0
    tag = task_tag(write_key, batch_id, partition_id)
    earlier: list[Marker] = []
    if opts.dedup:
        assert opts.marker_url is not None
        markers = MarkerStore(opts.marker_url)
        earlier = markers.previous(write_key, batch_id, partition_id)
        markers.record(
            write_key,
            batch_id,
            partition_id,
            Marker(time.time_ns() // 1_000_000, ctx.taskAttemptId(), ctx.attemptNumber()),
        )
        if earlier:
            time.sleep(opts.retry_grace_ms / 1000)
    since_ms = min((m.started_ms for m in earlier), default=0) - opts.clock_skew_ms
    already: dict[str, set[bytes]] = {}
    occurrences: dict[bytes, int] = {}
    delivery = _Delivery()
    producer = _producer(opts)
    produced = skipped = 0
    try:
        for batch in batches:
            names = batch.schema.names
            n = batch.num_rows
            col = {
                name: batch.column(name).to_pylist()
                for name in ("topic", "key", "value", "partition", "headers")
                if name in names
            }
            topics = [opts.topic] * n if opts.topic is not None else col["topic"]
            keys = col.get("key", [None] * n)
            values = col["value"]
            partitions = col.get("partition", [None] * n)
            headers_col = col.get("headers", [None] * n)
            for i in range(n):
                topic = topics[i]
                if topic is None:
                    raise ValueError(
                        "null topic present in the data; use the topic option or fill the topic column"
                    )
                key = _bytes(keys[i])
                value = _bytes(values[i])
                partition = partitions[i]
                headers = [(h["key"], _bytes(h["value"])) for h in headers_col[i]] if headers_col[i] else []
                if opts.dedup:
                    content = _content_hash(topic, partition, key, value, headers)
                    occurrence = occurrences.get(content, 0)
                    occurrences[content] = occurrence + 1
                    ident = content + _OCCURRENCE.pack(occurrence)
                    if earlier:
                        if topic not in already:
                            already[topic] = _written_by_earlier_attempts(opts, topic, tag, since_ms)
                        if ident in already[topic]:
                            skipped += 1
                            continue
                    headers.append((WRITE_ID_HEADER, tag + ident))
                kwargs: dict[str, Any] = {"key": key, "value": value, "on_delivery": delivery}
                if headers:
                    kwargs["headers"] = headers
                if partition is not None:
                    kwargs["partition"] = partition
                while True:
                    try:
                        producer.produce(topic, **kwargs)
                        break
                    except BufferError:
                        producer.poll(0.05)
                produced += 1
                if produced % 1000 == 0:
                    producer.poll(0)
    finally:
        # Always settle what is in flight, so a retry that follows sees all this attempt got acknowledged.
        remaining = producer.flush(opts.flush_timeout_ms / 1000)
    if remaining:
        raise RuntimeError(f"{remaining} records not acknowledged within shoal.write.flushTimeoutMs")
    if delivery.errors:
        raise RuntimeError(f"produce failed: {'; '.join(delivery.errors)}")
    return TaskWriteResult(
        write_key, batch_id, partition_id, ctx.attemptNumber(), produced, skipped, bool(earlier)
    )


class ShoalBatchWriter(DataSourceArrowWriter):
    """``df.write``: one write id for the job, shared by all its tasks and their retries."""

    def __init__(self, opts: WriteOptions) -> None:
        self._opts = opts
        self._write_key = uuid.uuid4().hex

    def write(self, iterator: Iterator[pa.RecordBatch]) -> TaskWriteResult:
        return write_task(self._opts, iterator, self._write_key)

    def _forget(self) -> None:
        if self._opts.dedup and self._opts.marker_url:
            MarkerStore(self._opts.marker_url).delete(self._write_key)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        self._forget()

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        # A failed df.write is not retried by Spark; running it again is a new write.
        self._forget()


class ShoalStreamWriter(DataSourceStreamArrowWriter):
    """``writeStream``: the write id is the query id; a micro-batch's markers go once the next one commits."""

    def __init__(self, opts: WriteOptions) -> None:
        self._opts = opts

    def write(self, iterator: Iterator[pa.RecordBatch]) -> TaskWriteResult:
        return write_task(self._opts, iterator, None)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        # Batch N-1 is in Spark's commit log once batch N runs, so it is never re-run: its
        # markers can go. Batch N's stay: a crash before Spark logs this commit re-runs it.
        keys = {m.write_key for m in messages if isinstance(m, TaskWriteResult)}
        if self._opts.dedup and self._opts.marker_url:
            store = MarkerStore(self._opts.marker_url)
            for key in keys:
                store.delete(key, below_batch=batchId)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Keep the markers: the re-run of this micro-batch needs them."""
