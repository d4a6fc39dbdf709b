"""The topic's rules of LogValidator applied on produce (partitions/validation.py): timestamps
against message.timestamp.before/after.max.ms, keys on compacted topics, the maxTimestamp a
producer's header claims, and big batches finished on a worker in the same way."""

from __future__ import annotations

import inspect
import time
import uuid

import pytest

from shoal.config import Config
from shoal.metadata.image import TopicImage
from shoal.partitions.api import ValidatedRecords
from shoal.partitions.validation import INLINE_SCAN_BYTES, RecordValidator
from shoal.protocol.errors import ErrorCode, KafkaError, RecordValidationError
from shoal.records.batch import MAX_TIMESTAMP_OFFSET, read_header, set_max_timestamp
from shoal.records.codec import NewRecord, build_batch
from shoal.records.types import TimestampType


def topic(**configs: str) -> TopicImage:
    return TopicImage("t", uuid.uuid4(), {}, configs)


async def validate(t: TopicImage, records: bytes) -> ValidatedRecords:
    validator = RecordValidator(Config.from_raw({}))
    try:
        result = validator.validate(t, 0, records, 9)
        return result if isinstance(result, ValidatedRecords) else await result
    finally:
        validator.close()


def batch(timestamps: list[int], keys: list[bytes | None] | None = None, value_size: int = 10) -> bytes:
    keys = keys or [b"k"] * len(timestamps)
    return build_batch([NewRecord(k, b"v" * value_size, (), ts) for k, ts in zip(keys, timestamps, strict=True)])


async def test_timestamps_within_bounds_pass_and_outside_are_refused_naming_the_record() -> None:
    now = int(time.time() * 1000)
    assert (await validate(topic(), batch([now - 10**9, now + 60_000]))).count == 2
    with pytest.raises(RecordValidationError) as info:
        await validate(topic(), batch([now, now + 2 * 3_600_000]))  # after.max.ms: one hour by default
    assert info.value.code == ErrorCode.invalid_timestamp
    assert info.value.record_errors[0][0] == 1
    assert f"Timestamp {now + 2 * 3_600_000} of message with offset 1 is out of range" in info.value.message
    with pytest.raises(RecordValidationError) as info:
        await validate(topic(**{"message.timestamp.before.max.ms": "1000"}), batch([now - 60_000, now]))
    assert info.value.code == ErrorCode.invalid_timestamp and info.value.record_errors[0][0] == 0
    # LogAppendTime topics stamp their own time: the producer's timestamps are not checked.
    stamped = await validate(topic(**{"message.timestamp.type": "LogAppendTime"}), batch([0, now + 10**10]))
    assert stamped.timestamp_type == TimestampType.LOG_APPEND_TIME


async def test_compacted_topics_need_a_key_on_every_record() -> None:
    records = batch([1, 2, 3], keys=[b"a", None, b"c"])
    assert (await validate(topic(), records)).count == 3
    with pytest.raises(RecordValidationError) as info:
        await validate(topic(**{"cleanup.policy": "compact,delete"}), records)
    assert info.value.code == ErrorCode.invalid_record and info.value.record_errors[0][0] == 1
    assert info.value.message == "Compacted topic cannot accept message without key in topic partition t-0."


async def test_a_lying_max_timestamp_is_corrected_as_kafka_does() -> None:
    now = int(time.time() * 1000)
    raw = bytearray(batch([now - 5, now - 1, now - 3]))
    set_max_timestamp(raw, 0, now - 1000)  # a header that lies, with a CRC that matches it
    validated = await validate(topic(), bytes(raw))
    assert read_header(validated.records, 0).max_timestamp == now - 1
    assert int.from_bytes(validated.records[MAX_TIMESTAMP_OFFSET : MAX_TIMESTAMP_OFFSET + 8], "big") == now - 1


async def test_a_big_batch_is_finished_on_a_worker_with_the_same_verdict() -> None:
    now = int(time.time() * 1000)
    count = INLINE_SCAN_BYTES // 1000 + 50
    big = batch([now] * count, value_size=1000)
    validator = RecordValidator(Config.from_raw({}))
    try:
        pending = validator.validate(topic(**{"max.message.bytes": "4000000"}), 0, big, 9)
        assert inspect.isawaitable(pending)
        assert (await pending).count == count
        bad = batch([now] * (count - 1) + [now + 10**9], value_size=1000)
        pending = validator.validate(topic(**{"max.message.bytes": "4000000"}), 0, bad, 9)
        assert inspect.isawaitable(pending)
        with pytest.raises(KafkaError) as info:
            await pending
        assert info.value.code == ErrorCode.invalid_timestamp
    finally:
        validator.close()
