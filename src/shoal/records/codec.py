"""Record-level encode/decode of v2 batches: the cold path (tools, tests, the Spark pipeline).

The broker itself never calls this on produce or fetch; see ``batch.py`` for that.
Record layout (DefaultRecord.java), integers as zigzag varints:
length, attributes int8, timestampDelta varlong, offsetDelta, key, value,
headers count, [header key (string), header value (nullable bytes)]*.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from crc32c import crc32c

from shoal.protocol.errors import ErrorCode, KafkaError
from shoal.records.batch import (
    ATTRIBUTES_OFFSET,
    CONTROL_FLAG,
    CRC_OFFSET,
    HEADER_SIZE,
    HEADER_STRUCT,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    MIN_BATCH_LENGTH,
    TIMESTAMP_TYPE_FLAG,
    TRANSACTIONAL_FLAG,
    BatchHeader,
    read_header,
)
from shoal.records.compression import compress, decompress

__all__ = [
    "CONTROL_ABORT",
    "CONTROL_COMMIT",
    "NewRecord",
    "Record",
    "build_batch",
    "build_control_batch",
    "control_record_type",
    "decode_batch",
    "decode_records",
    "encode_record",
    "iter_batches",
]

CONTROL_ABORT = 0
CONTROL_COMMIT = 1

Headers = tuple[tuple[str, bytes | None], ...]


@dataclass(frozen=True, slots=True)
class Record:
    """One decoded record with absolute offset and timestamp."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: Headers


class NewRecord(NamedTuple):
    """A record to put into ``build_batch``; a plain ``(key, value[, headers[, timestamp]])`` tuple works too."""

    key: bytes | None
    value: bytes | None
    headers: Sequence[tuple[str, bytes | None]] = ()
    timestamp: int | None = None  # ms; None means now


def _corrupt(message: str) -> KafkaError:
    return KafkaError(ErrorCode.corrupt_message, message)


def iter_batches(buf: bytes | bytearray | memoryview, pos: int = 0) -> Iterator[tuple[int, BatchHeader]]:
    """Yield ``(position, header)`` for each batch in a concatenation of v2 batches.

    Checks lengths only (no CRC). A partial trailing batch ends the iteration quietly,
    as Kafka's readers do: a Fetch response may end in one. A length too small for a
    v2 header raises CORRUPT_MESSAGE, another magic UNSUPPORTED_FOR_MESSAGE_FORMAT.
    """
    mv = buf if isinstance(buf, memoryview) else memoryview(buf)
    if mv.format != "B" or mv.ndim != 1:
        mv = mv.cast("B")
    end = len(mv)
    while end - pos > MAGIC_OFFSET:
        magic = mv[pos + MAGIC_OFFSET]
        if magic != 2:
            raise KafkaError(
                ErrorCode.unsupported_for_message_format,
                f"Record batch at position {pos} has magic {magic}; only magic 2 is supported",
            )
        if end - pos < HEADER_SIZE:
            return
        header = read_header(mv, pos)
        if header.batch_length < MIN_BATCH_LENGTH:
            raise _corrupt(
                f"Record batch at position {pos} has batchLength {header.batch_length}, "
                f"less than the {MIN_BATCH_LENGTH} of a v2 header"
            )
        size = header.batch_length + LOG_OVERHEAD
        if size > end - pos:
            return
        yield pos, header
        pos += size


def _read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    """Zigzag varint/varlong at ``pos``; returns (value, next position)."""
    b = buf[pos]
    pos += 1
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), pos
    result = b & 0x7F
    shift = 7
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7
        if shift > 63:
            raise _corrupt("Varint longer than 10 bytes in record data")


def decode_records(header: BatchHeader, data: bytes) -> list[Record]:
    """Decode the (already decompressed) records section of a batch with ``header``."""
    rv = _read_varint
    base_offset = header.base_offset
    base_ts = header.base_timestamp
    log_append = bool(header.attributes & TIMESTAMP_TYPE_FLAG)
    max_ts = header.max_timestamp
    out: list[Record] = []
    pos = 0
    end = len(data)
    try:
        for _ in range(header.records_count):
            length, pos = rv(data, pos)
            start = pos
            pos += 1  # record attributes: unused
            ts_delta, pos = rv(data, pos)
            offset_delta, pos = rv(data, pos)
            n, pos = rv(data, pos)
            if n >= 0:
                key = data[pos : pos + n]
                pos += n
            else:
                key = None
            n, pos = rv(data, pos)
            if n >= 0:
                value = data[pos : pos + n]
                pos += n
            else:
                value = None
            count, pos = rv(data, pos)
            if count < 0:
                raise _corrupt(f"Invalid header count {count} in record at offset delta {offset_delta}")
            headers: list[tuple[str, bytes | None]] = []
            for _h in range(count):
                n, pos = rv(data, pos)
                if n < 0:
                    raise _corrupt(f"Invalid header key length {n}")
                hkey = data[pos : pos + n].decode("utf-8")
                pos += n
                n, pos = rv(data, pos)
                if n >= 0:
                    hval: bytes | None = data[pos : pos + n]
                    pos += n
                else:
                    hval = None
                headers.append((hkey, hval))
            if pos - start != length or pos > end:
                raise _corrupt(
                    f"Invalid record size: expected {length} bytes in record payload, read {pos - start}"
                )
            out.append(
                Record(
                    base_offset + offset_delta,
                    max_ts if log_append else base_ts + ts_delta,
                    key,
                    value,
                    tuple(headers),
                )
            )
    except IndexError as exc:
        raise _corrupt(f"Record data ends early, after {len(out)} of {header.records_count} records") from exc
    except UnicodeDecodeError as exc:
        raise _corrupt(f"Record header key is not UTF-8: {exc}") from exc
    if pos != end:
        raise _corrupt(f"{end - pos} bytes left over after the batch's {header.records_count} records")
    return out


def decode_batch(
    buf: bytes | bytearray | memoryview, pos: int = 0, *, check_crc: bool = True
) -> tuple[BatchHeader, list[Record]]:
    """Decode the batch at ``pos``: header plus records with absolute offsets and timestamps.

    LogAppendTime batches report maxTimestamp for every record, as Kafka's consumer does.
    Control batches decode like any other (see ``control_record_type``).
    """
    header, data = records_section(buf, pos, check_crc=check_crc)
    return header, decode_records(header, data)


def records_section(
    buf: bytes | bytearray | memoryview, pos: int = 0, *, check_crc: bool = True
) -> tuple[BatchHeader, bytes]:
    """The header of the batch at ``pos`` and its records section, decompressed: what
    ``decode_records`` (or a columnar decoder) reads."""
    mv = buf if isinstance(buf, memoryview) else memoryview(buf)
    if mv.format != "B" or mv.ndim != 1:
        mv = mv.cast("B")
    if len(mv) - pos < HEADER_SIZE:
        raise _corrupt(f"Record batch at position {pos} is truncated: {len(mv) - pos} bytes")
    if mv[pos + MAGIC_OFFSET] != 2:
        raise KafkaError(
            ErrorCode.unsupported_for_message_format,
            f"Record batch at position {pos} has magic {mv[pos + MAGIC_OFFSET]}; only magic 2 is supported",
        )
    header = read_header(mv, pos)
    size = header.size
    if header.batch_length < MIN_BATCH_LENGTH or size > len(mv) - pos:
        raise _corrupt(f"Record batch at position {pos} has an invalid batchLength {header.batch_length}")
    if check_crc:
        computed = crc32c(mv[pos + ATTRIBUTES_OFFSET : pos + size])
        if computed != header.crc:
            raise _corrupt(
                f"Record batch at position {pos}: batch CRC {header.crc} does not match {computed}"
            )
    body = mv[pos + HEADER_SIZE : pos + size]
    return header, decompress(header.compression, body)


def control_record_type(record: Record) -> int:
    """Type of a control record (CONTROL_ABORT / CONTROL_COMMIT) from its key."""
    if record.key is None or len(record.key) < 4:
        raise _corrupt("Control record key is too short")
    _version, kind = struct.unpack_from(">hh", record.key)
    return kind


def _put_varint(out: bytearray, value: int) -> None:
    """Append ``value`` zigzag-encoded (64-bit)."""
    v = (value << 1) ^ (value >> 63)
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)


def encode_record(
    out: bytearray,
    offset_delta: int,
    ts_delta: int,
    key: bytes | None,
    value: bytes | None,
    headers: Iterable[tuple[str, bytes | None]],
) -> None:
    body = bytearray(b"\x00")  # attributes
    _put_varint(body, ts_delta)
    _put_varint(body, offset_delta)
    for field in (key, value):
        if field is None:
            body.append(1)  # zigzag(-1)
        else:
            _put_varint(body, len(field))
            body += field
    hs = list(headers)
    _put_varint(body, len(hs))
    for hkey, hval in hs:
        kb = hkey.encode("utf-8")
        _put_varint(body, len(kb))
        body += kb
        if hval is None:
            body.append(1)
        else:
            _put_varint(body, len(hval))
            body += hval
    _put_varint(out, len(body))
    out += body


def build_batch(
    records: Sequence[NewRecord | tuple],
    *,
    base_offset: int = 0,
    compression: int = 0,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    timestamp_type: int = 0,
    is_transactional: bool = False,
    is_control: bool = False,
    partition_leader_epoch: int = -1,
    max_timestamp: int | None = None,
) -> bytes:
    """Build one valid v2 batch (CRC included) from records given as NewRecord or tuples.

    Compression is always applied when asked, even if it does not shrink the data, so
    tests get the codec they request. ``max_timestamp`` overrides the computed maximum
    (a LogAppendTime batch carries the append time there).
    """
    if not records:
        raise ValueError("a record batch needs at least one record")
    recs = [r if isinstance(r, NewRecord) else NewRecord(*r) for r in records]
    now = int(time.time() * 1000)
    stamps = [now if r.timestamp is None else r.timestamp for r in recs]
    base_ts = stamps[0]
    body = bytearray()
    for i, (rec, ts) in enumerate(zip(recs, stamps, strict=True)):
        encode_record(body, i, ts - base_ts, rec.key, rec.value, rec.headers)
    payload = compress(compression, body) if compression else bytes(body)
    attributes = compression & 0x07
    if timestamp_type:
        attributes |= TIMESTAMP_TYPE_FLAG
    if is_transactional:
        attributes |= TRANSACTIONAL_FLAG
    if is_control:
        attributes |= CONTROL_FLAG
    out = bytearray(HEADER_SIZE + len(payload))
    HEADER_STRUCT.pack_into(
        out,
        0,
        base_offset,
        len(out) - LOG_OVERHEAD,
        partition_leader_epoch,
        2,
        0,
        attributes,
        len(recs) - 1,
        base_ts,
        max(stamps) if max_timestamp is None else max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        len(recs),
    )
    out[HEADER_SIZE:] = payload
    struct.pack_into(">I", out, CRC_OFFSET, crc32c(memoryview(out)[ATTRIBUTES_OFFSET:]))
    return bytes(out)


def build_control_batch(
    commit: bool,
    *,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int = 0,
    base_offset: int = 0,
    partition_leader_epoch: int = -1,
    timestamp: int | None = None,
) -> bytes:
    """An end-transaction marker batch (COMMIT or ABORT), as the broker writes for WriteTxnMarkers."""
    key = struct.pack(">hh", 0, CONTROL_COMMIT if commit else CONTROL_ABORT)
    value = struct.pack(">hi", 0, coordinator_epoch)
    return build_batch(
        [NewRecord(key, value, (), timestamp)],
        base_offset=base_offset,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        is_transactional=True,
        is_control=True,
        partition_leader_epoch=partition_leader_epoch,
    )
