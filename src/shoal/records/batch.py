"""RecordBatch v2 header access for the broker's hot path.

The broker never decodes records on produce or fetch: it reads the fixed 61-byte
header, checks the CRC32C and patches offsets in place. Everything here works on
memoryviews with ``struct.unpack_from`` so no batch bytes are copied.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from crc32c import crc32c

from shoal.protocol.errors import ErrorCode, KafkaError

__all__ = [
    "ATTRIBUTES_OFFSET",
    "BASE_OFFSET_OFFSET",
    "BASE_SEQUENCE_OFFSET",
    "BASE_TIMESTAMP_OFFSET",
    "BATCH_LENGTH_OFFSET",
    "BatchHeader",
    "COMPRESSION_MASK",
    "CONTROL_FLAG",
    "CRC_OFFSET",
    "DELETE_HORIZON_FLAG",
    "HEADER_SIZE",
    "HEADER_STRUCT",
    "LAST_OFFSET_DELTA_OFFSET",
    "LOG_OVERHEAD",
    "MAGIC_OFFSET",
    "MAX_TIMESTAMP_OFFSET",
    "MIN_BATCH_LENGTH",
    "NO_PARTITION_LEADER_EPOCH",
    "NO_PRODUCER_EPOCH",
    "NO_PRODUCER_ID",
    "NO_SEQUENCE",
    "NO_TIMESTAMP",
    "PARTITION_LEADER_EPOCH_OFFSET",
    "PRODUCER_EPOCH_OFFSET",
    "PRODUCER_ID_OFFSET",
    "RECORDS_COUNT_OFFSET",
    "TIMESTAMP_TYPE_FLAG",
    "TRANSACTIONAL_FLAG",
    "crc_of",
    "read_header",
    "set_max_timestamp",
    "stamp_batch",
    "validate_records",
]

# Field offsets inside a v2 batch (DefaultRecordBatch.java).
BASE_OFFSET_OFFSET = 0  # int64
BATCH_LENGTH_OFFSET = 8  # int32: bytes after this field
PARTITION_LEADER_EPOCH_OFFSET = 12  # int32, outside the CRC
MAGIC_OFFSET = 16  # int8, at the same place in every message format
CRC_OFFSET = 17  # uint32, CRC32C of attributes..end
ATTRIBUTES_OFFSET = 21  # int16
LAST_OFFSET_DELTA_OFFSET = 23  # int32
BASE_TIMESTAMP_OFFSET = 27  # int64
MAX_TIMESTAMP_OFFSET = 35  # int64
PRODUCER_ID_OFFSET = 43  # int64
PRODUCER_EPOCH_OFFSET = 51  # int16
BASE_SEQUENCE_OFFSET = 53  # int32
RECORDS_COUNT_OFFSET = 57  # int32
HEADER_SIZE = 61
LOG_OVERHEAD = 12  # baseOffset + batchLength: total size = batchLength + LOG_OVERHEAD
MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD  # 49

# Attribute bits.
COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_FLAG = 0x08  # 0 CreateTime, 1 LogAppendTime
TRANSACTIONAL_FLAG = 0x10
CONTROL_FLAG = 0x20
DELETE_HORIZON_FLAG = 0x40  # KIP-534: baseTimestamp holds the delete horizon

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1
NO_TIMESTAMP = -1
MAX_COMPRESSION_CODEC = 4  # zstd
_INT32_MAX = 2**31 - 1

HEADER_STRUCT = struct.Struct(">qiibIhiqqqhii")
_unpack_header = HEADER_STRUCT.unpack_from
_I64 = struct.Struct(">q")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_I16 = struct.Struct(">h")
_unpack_i32 = _I32.unpack_from


@dataclass(slots=True)
class BatchHeader:
    """The 61-byte v2 batch header, field by field, as the broker needs it."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def compression(self) -> int:
        """Codec id: 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd."""
        return self.attributes & COMPRESSION_MASK

    @property
    def timestamp_type(self) -> int:
        """0 CreateTime, 1 LogAppendTime (set by the broker for LogAppendTime topics)."""
        return (self.attributes & TIMESTAMP_TYPE_FLAG) >> 3

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_FLAG)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_FLAG)

    @property
    def has_delete_horizon(self) -> bool:
        return bool(self.attributes & DELETE_HORIZON_FLAG)

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id > NO_PRODUCER_ID

    @property
    def size(self) -> int:
        """Total bytes of the batch, including baseOffset and batchLength."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def last_sequence(self) -> int:
        """Sequence of the last record; wraps past INT32_MAX to 0 as Kafka's producer does."""
        base = self.base_sequence
        if base == NO_SEQUENCE:
            return NO_SEQUENCE
        delta = self.last_offset_delta
        if base > _INT32_MAX - delta:
            return delta - (_INT32_MAX - base) - 1
        return base + delta


def read_header(buf: bytes | bytearray | memoryview, pos: int = 0) -> BatchHeader:
    """Unpack the header at ``pos``; no checks (``struct.error`` if fewer than 61 bytes remain)."""
    return BatchHeader(*_unpack_header(buf, pos))


def crc_of(buf: bytes | bytearray | memoryview, pos: int, size: int) -> int:
    """CRC32C of the batch of ``size`` bytes at ``pos``: attributes to the end, as stored in the header."""
    return crc32c(memoryview(buf)[pos + ATTRIBUTES_OFFSET : pos + size])


def _corrupt(message: str) -> KafkaError:
    return KafkaError(ErrorCode.corrupt_message, message)


def _invalid(message: str) -> KafkaError:
    return KafkaError(ErrorCode.invalid_record, message)


def validate_records(
    records: bytes | bytearray | memoryview | None,
    max_batch_bytes: int,
    *,
    produce_version: int | None = None,
    from_client: bool = True,
) -> list[tuple[int, BatchHeader]]:
    """Split a Produce partition's records into batches, validating them the way Kafka's broker does.

    Returns ``(position, header)`` for each batch, positions relative to ``records``.
    Checks, in Kafka's order: framing and magic (CORRUPT_MESSAGE; magic 0/1 is a
    format we do not take), Produce v3+ rules when ``produce_version`` is given
    (exactly one v2 batch, INVALID_RECORD; zstd needs v7+), client rules when
    ``from_client`` (baseOffset 0, no control batches, a sequence with a producer
    id, the record count against lastOffsetDelta: INVALID_RECORD), batch size against
    ``max_batch_bytes`` (MESSAGE_TOO_LARGE), CRC32C (CORRUPT_MESSAGE) and codec
    (UNSUPPORTED_COMPRESSION_TYPE). Records themselves are not decoded.
    """
    if not records:
        if produce_version is not None and produce_version >= 3:
            raise _invalid(
                f"Produce requests with version {produce_version} must have at least one record batch"
            )
        raise _invalid("Produce request has no record batch for the partition")
    mv = records if isinstance(records, memoryview) else memoryview(records)
    if mv.format != "B" or mv.ndim != 1:
        mv = mv.cast("B")
    end = len(mv)
    strict_produce = produce_version is not None and produce_version >= 3
    out: list[tuple[int, BatchHeader]] = []
    pos = 0
    while pos < end:
        remaining = end - pos
        if remaining <= MAGIC_OFFSET:
            raise _corrupt(
                f"Record batch at position {pos} is truncated: {remaining} bytes left, "
                f"a v2 batch header needs {HEADER_SIZE}"
            )
        magic = mv[pos + MAGIC_OFFSET]
        if magic != 2:
            if magic > 2:
                raise _corrupt(f"Invalid magic {magic} in record batch at position {pos}")
            if strict_produce:
                raise _invalid(
                    f"Produce requests with version {produce_version} are only allowed to contain "
                    f"record batches with magic version 2 (got magic {magic})"
                )
            raise KafkaError(
                ErrorCode.unsupported_for_message_format,
                f"Record batch at position {pos} has magic {magic}; this broker accepts only "
                "magic 2 (Kafka 0.11+ clients, Produce v3+)",
            )
        if remaining < HEADER_SIZE:
            raise _corrupt(
                f"Record batch at position {pos} is truncated: {remaining} bytes left, "
                f"a v2 batch header needs {HEADER_SIZE}"
            )
        h = BatchHeader(*_unpack_header(mv, pos))
        if h.batch_length < MIN_BATCH_LENGTH:
            raise _corrupt(
                f"Record batch at position {pos} is corrupt: batchLength {h.batch_length} is smaller "
                f"than the minimum {MIN_BATCH_LENGTH} of a v2 header"
            )
        size = h.batch_length + LOG_OVERHEAD
        if size > remaining:
            raise _corrupt(
                f"Record batch at position {pos} is truncated: it declares {size} bytes "
                f"but only {remaining} are left"
            )
        if strict_produce and out:
            raise _invalid(
                f"Produce requests with version {produce_version} are only allowed to contain "
                "exactly one record batch"
            )
        if from_client and h.base_offset != 0:
            raise _invalid(f"The baseOffset of the record batch should be 0, but it is {h.base_offset}")
        if size > max_batch_bytes:
            raise KafkaError(
                ErrorCode.message_too_large,
                f"The record batch at position {pos} is {size} bytes, larger than the maximum "
                f"allowed batch size {max_batch_bytes}",
            )
        computed = crc32c(mv[pos + ATTRIBUTES_OFFSET : pos + size])
        if computed != h.crc:
            raise _corrupt(
                f"Record batch at position {pos} is corrupt: batch CRC {h.crc} does not match "
                f"the computed CRC32C {computed}"
            )
        codec = h.attributes & COMPRESSION_MASK
        if codec > MAX_COMPRESSION_CODEC:
            raise KafkaError(
                ErrorCode.unsupported_compression_type,
                f"Record batch at position {pos} uses unknown compression codec {codec}",
            )
        if codec == 4 and produce_version is not None and produce_version < 7:
            raise KafkaError(
                ErrorCode.unsupported_compression_type,
                f"Produce requests with version {produce_version} are not allowed to use ZStandard compression",
            )
        count = h.records_count
        if h.last_offset_delta < 0:
            raise _invalid(f"Batch has an invalid offset range: lastOffsetDelta {h.last_offset_delta}")
        if from_client:
            # A leader's batches may have fewer records than offsets, even none: log compaction
            # keeps a batch's offset range when it removes records (Kafka checks this on produce only).
            if count <= 0:
                raise _invalid(f"Invalid reported count for record batch: {count}")
            if count != h.last_offset_delta + 1:
                raise _invalid(
                    f"Inconsistent batch offset range [0, {h.last_offset_delta}] and count of records {count}"
                )
            if h.attributes & CONTROL_FLAG:
                raise _invalid("Clients are not allowed to write control records")
            if h.producer_id >= 0 and h.base_sequence < 0:
                raise _invalid(
                    f"Invalid sequence number {h.base_sequence} in record batch with producerId {h.producer_id}"
                )
        out.append((pos, h))
        pos += size
    return out


def stamp_batch(
    buf: bytearray | memoryview,
    pos: int,
    base_offset: int,
    partition_leader_epoch: int = 0,
    log_append_time: int | None = None,
) -> None:
    """Patch the batch at ``pos`` in place with its assigned offset and leader epoch.

    Those two fields lie outside the CRC. With ``log_append_time`` (a LogAppendTime
    topic) the timestamp-type bit and maxTimestamp change too, so the CRC is
    recomputed, as Kafka's ``setMaxTimestamp`` does; it is skipped when nothing changes.
    """
    _I64.pack_into(buf, pos + BASE_OFFSET_OFFSET, base_offset)
    _I32.pack_into(buf, pos + PARTITION_LEADER_EPOCH_OFFSET, partition_leader_epoch)
    if log_append_time is None:
        return
    (attributes,) = _I16.unpack_from(buf, pos + ATTRIBUTES_OFFSET)
    (max_ts,) = _I64.unpack_from(buf, pos + MAX_TIMESTAMP_OFFSET)
    if attributes & TIMESTAMP_TYPE_FLAG and max_ts == log_append_time:
        return
    _I16.pack_into(buf, pos + ATTRIBUTES_OFFSET, attributes | TIMESTAMP_TYPE_FLAG)
    set_max_timestamp(buf, pos, log_append_time)


def set_max_timestamp(buf: bytearray | memoryview, pos: int, max_timestamp: int) -> None:
    """Write the batch's maxTimestamp and recompute its CRC (Kafka's ``setMaxTimestamp``)."""
    _I64.pack_into(buf, pos + MAX_TIMESTAMP_OFFSET, max_timestamp)
    size = _unpack_i32(buf, pos + BATCH_LENGTH_OFFSET)[0] + LOG_OVERHEAD
    _U32.pack_into(buf, pos + CRC_OFFSET, crc32c(memoryview(buf)[pos + ATTRIBUTES_OFFSET : pos + size]))
