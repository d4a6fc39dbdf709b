"""What a producer sends, checked as Kafka's LogValidator checks it, for every partition kind.

Two levels, both before anything is stored:
- the batch level (``records.batch.validate_records``): framing, magic, CRC32C, sizes, the
  record count against ``lastOffsetDelta``, producer-id rules;
- the record level (``records.validate.scan_batch``, compiled): every record's framing, offset
  deltas, header counts and UTF-8 header keys, compressed payloads decompressed as a stream
  with a bound; then the topic's rules: timestamps within ``message.timestamp.before.max.ms`` /
  ``after.max.ms`` (CreateTime topics), a key on every record of a compacted topic.

The event loop scans at most ``INLINE_SCAN_BYTES`` of (decompressed) records per batch; a
larger batch, or a compressed one that inflates past that, is scanned on a worker thread
(the scanner and the decompressors release the GIL), so one client's large or hostile batch
delays others by at most the time to scan ``INLINE_SCAN_BYTES``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from shoal.config import Config
from shoal.metadata.image import TopicImage
from shoal.partitions.api import ValidatedRecords
from shoal.protocol.errors import ErrorCode, RecordValidationError
from shoal.records.batch import NO_TIMESTAMP, BatchHeader, set_max_timestamp, validate_records
from shoal.records.codec import decode_batch
from shoal.records.types import TimestampType
from shoal.records.validate import BatchScan, max_uncompressed_for, scan_batch

INLINE_SCAN_BYTES = 1 << 20
VALIDATION_THREADS = 2


@dataclass(frozen=True, slots=True)
class TopicRules:
    """The topic configs LogValidator applies, resolved once per request."""

    max_batch_bytes: int
    timestamp_type: TimestampType
    before_max_ms: int
    after_max_ms: int
    compacted: bool

    @classmethod
    def of(cls, topic: TopicImage, config: Config) -> TopicRules:
        def get(name: str) -> str:
            return str(topic.configs.get(name, config.topic_default(name)))

        policy = topic.configs.get("cleanup.policy")
        policies = policy.split(",") if isinstance(policy, str) else list(config.topic_default("cleanup.policy"))
        return cls(
            max_batch_bytes=int(get("max.message.bytes")),
            timestamp_type=TimestampType.from_config(get("message.timestamp.type")),
            before_max_ms=int(get("message.timestamp.before.max.ms")),
            after_max_ms=int(get("message.timestamp.after.max.ms")),
            compacted="compact" in (p.strip() for p in policies),
        )


class RecordValidator:
    """Validates one partition's records; the record scan of big batches runs on worker threads."""

    def __init__(self, config: Config) -> None:
        self._config = config
        self._workers = ThreadPoolExecutor(VALIDATION_THREADS, thread_name_prefix="shoal-validate")

    def close(self) -> None:
        self._workers.shutdown(wait=False, cancel_futures=True)

    def validate(
        self, topic: TopicImage, partition: int, records: bytes | memoryview | None, produce_version: int
    ) -> ValidatedRecords | Awaitable[ValidatedRecords]:
        """The validated records, or an awaitable of them when a worker must finish the scan.

        Raises KafkaError (per partition) for anything Kafka refuses."""
        rules = TopicRules.of(topic, self._config)
        view = memoryview(records or b"")
        batches = validate_records(view, rules.max_batch_bytes, produce_version=produce_version)
        limit = max_uncompressed_for(rules.max_batch_bytes)
        scans: list[BatchScan] = []
        for pos, header in batches:
            batch = view[pos : pos + header.size]
            scan = None
            if header.size <= INLINE_SCAN_BYTES:
                scan = scan_batch(batch, header, max_uncompressed=limit, inline_limit=INLINE_SCAN_BYTES)
            if scan is None:
                return self._finish_in_worker(topic, partition, rules, view, batches, limit)
            scans.append(scan)
        return _apply_rules(topic.name, partition, rules, view, batches, scans)

    async def _finish_in_worker(
        self,
        topic: TopicImage,
        partition: int,
        rules: TopicRules,
        view: memoryview,
        batches: list[tuple[int, BatchHeader]],
        limit: int,
    ) -> ValidatedRecords:
        def scan_all() -> list[BatchScan]:
            scans = []
            for pos, header in batches:
                scan = scan_batch(view[pos : pos + header.size], header, max_uncompressed=limit)
                assert scan is not None  # no inline limit: a scan always finishes or raises
                scans.append(scan)
            return scans

        scans = await asyncio.get_running_loop().run_in_executor(self._workers, scan_all)
        return _apply_rules(topic.name, partition, rules, view, batches, scans)


def _apply_rules(
    topic: str,
    partition: int,
    rules: TopicRules,
    view: memoryview,
    batches: list[tuple[int, BatchHeader]],
    scans: Sequence[BatchScan],
) -> ValidatedRecords:
    """The topic's rules on the scanned facts, then LogValidator's maxTimestamp correction."""
    now = int(time.time() * 1000)
    for (pos, header), scan in zip(batches, scans, strict=True):
        if rules.compacted and scan.first_null_key >= 0:
            raise RecordValidationError(
                ErrorCode.invalid_record,
                scan.first_null_key,
                f"Compacted topic cannot accept message without key in topic partition {topic}-{partition}.",
            )
        if rules.timestamp_type != TimestampType.CREATE_TIME:
            continue
        if header.timestamp_type == TimestampType.LOG_APPEND_TIME:
            raise RecordValidationError(
                ErrorCode.invalid_timestamp,
                0,
                "Invalid timestamp type in message. Producer should not set timestamp type to LogAppendTime.",
            )
        low, high = now - rules.before_max_ms, now + rules.after_max_ms
        if scan.min_timestamp < low or scan.max_timestamp > high:
            index, ts = _first_out_of_range(view[pos : pos + header.size], header, low, high)
            raise RecordValidationError(
                ErrorCode.invalid_timestamp,
                index,
                f"Timestamp {ts} of message with offset {index} is out of range. "
                f"The timestamp should be within [{low}, {high}]",
            )
    fixed = _fix_max_timestamps(view, batches, scans) if rules.timestamp_type == TimestampType.CREATE_TIME else view
    return ValidatedRecords(fixed, batches, rules.timestamp_type)


def _first_out_of_range(batch: memoryview, header: BatchHeader, low: int, high: int) -> tuple[int, int]:
    """The index and timestamp of the first record outside [low, high] (the error path only; the
    scan has already bounded what the batch decompresses to)."""
    _, records = decode_batch(batch, check_crc=False)
    for index, record in enumerate(records):
        if record.timestamp != NO_TIMESTAMP and not low <= record.timestamp <= high:
            return index, record.timestamp
    return 0, header.max_timestamp


def _fix_max_timestamps(
    view: memoryview, batches: list[tuple[int, BatchHeader]], scans: Sequence[BatchScan]
) -> memoryview:
    """Kafka rewrites a CreateTime batch's maxTimestamp when it disagrees with its records
    (``setMaxTimestamp``), so time indexes and retention never trust a producer's header."""
    for (pos, header), scan in zip(batches, scans, strict=True):
        if scan.max_timestamp != NO_TIMESTAMP and header.max_timestamp != scan.max_timestamp:
            if view.readonly:
                view = memoryview(bytearray(view))
            set_max_timestamp(view, pos, scan.max_timestamp)
            header.max_timestamp = scan.max_timestamp
    return view


