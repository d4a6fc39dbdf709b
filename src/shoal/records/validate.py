"""Record-level validation of a produced batch, as Kafka's LogValidator does it.

``batch.validate_records`` checks batches at the batch level only (framing, magic, CRC,
count). ``scan_batch`` looks inside one such batch: it decompresses the records section
as a bounded stream (``compression.iter_decompress``) and feeds it to the C scanner
(``_scan.RecordScanner``), which checks every record exactly as Kafka's
DefaultRecord.readFrom and LogValidator do (lengths, varints, offset deltas, header
counts and keys) and collects what the broker needs afterwards: the records' smallest
and largest timestamps (LogValidator's timestamp range check, and the real maxTimestamp
when a producer's header lies) and the first record without a key (compacted topics).

Memory stays bounded whatever the batch claims: one piece of decompressed output
(``compression.DECOMPRESS_CHUNK``) at a time, nothing held across pieces but a few bytes
of scanner state, and the total output capped by ``max_uncompressed``.
"""

from __future__ import annotations

from dataclasses import dataclass

from shoal.protocol.errors import ErrorCode, KafkaError, RecordValidationError
from shoal.records import _scan
from shoal.records.batch import HEADER_SIZE, BatchHeader
from shoal.records.compression import (
    NONE,
    DecompressedSizeExceeded,
    codec_name,
    iter_decompress,
)

__all__ = [
    "DECOMPRESSION_RATIO_LIMIT",
    "BatchScan",
    "max_uncompressed_for",
    "scan_batch",
]

DECOMPRESSION_RATIO_LIMIT = 64
"""How many times a topic's ``max.message.bytes`` a batch may decompress to.

Kafka's broker has no such limit (it streams through any size); Shoal has one so that
a small produce cannot buy unbounded decompression work (a 1 MB gzip batch of zeros
inflates to 1 GiB). The bound is per batch, ``max.message.bytes x 64`` (64 MiB at the
default 1 MiB), and it is generous to every real producer:

- librdkafka (and confluent-kafka, kcat, the Go/.NET/Python clients built on it) closes
  a batch on its *uncompressed* size (``batch.size``, default 1,000,000, and at most
  ``message.max.bytes``), so its batches decompress to about ``max.message.bytes`` at
  most: a ratio near 1 against this limit.
- The Java producer closes a batch when its *estimated compressed* size reaches
  ``batch.size`` (default 16 KiB), the estimate starting at ratio 1.0 and improving by
  only 0.005 per batch. A default 16 KiB batch needs data compressing better than
  4096:1 to reach 64 MiB; a producer tuned to ``batch.size = max.message.bytes`` needs
  a sustained ratio above 64:1. Real payloads (JSON, logs, Avro, protobuf) compress 2:1
  to 15:1 with gzip/zstd; only degenerate data (runs of one byte) passes 64:1.
- A single record is checked by its producer on its uncompressed size against
  ``max.request.size``, so one record larger than the limit is never sent.

A lower value would start refusing tuned Java producers on very repetitive data; a much
higher one lets each refused bomb cost more CPU: refusing a gzip bomb means inflating
64 MiB first, about 130 ms of one core on the 2-core development VM (zstd and lz4 bombs of
zeros: under 10 ms), which is why the caller runs large batches in a worker thread.
"""


def max_uncompressed_for(max_message_bytes: int) -> int:
    """The decompressed-size bound of a topic's batches: ``max.message.bytes x DECOMPRESSION_RATIO_LIMIT``."""
    return max(max_message_bytes, 0) * DECOMPRESSION_RATIO_LIMIT


@dataclass(frozen=True, slots=True)
class BatchScan:
    """What the record scan of one valid batch found."""

    min_timestamp: int  # smallest baseTimestamp + timestampDelta (CreateTime of the records)
    max_timestamp: int  # largest; what maxTimestamp should say for a CreateTime batch
    first_null_key: int  # index of the first record without a key, -1 if all have one
    uncompressed_size: int  # bytes of the (decompressed) records section


def scan_batch(
    batch: bytes | bytearray | memoryview,
    header: BatchHeader,
    *,
    max_uncompressed: int,
    inline_limit: int | None = None,
) -> BatchScan | None:
    """Check every record of one batch the way Kafka's LogValidator does.

    ``batch`` is exactly one v2 batch that ``validate_records`` accepted (its CRC and
    count are right), ``header`` its header. Raises KafkaError:

    - CORRUPT_MESSAGE: the records section does not decompress (garbage, truncated,
      empty compressed payload);
    - INVALID_RECORD: a record Kafka would refuse (Kafka's InvalidRecordException
      messages; raised as ``RecordValidationError`` naming the record's index), or a
      batch that decompresses to more than ``max_uncompressed`` bytes.

    With ``inline_limit`` (the caller is an event loop), at most that many bytes are
    decompressed or scanned here: a batch whose records section is larger gives None,
    and the caller runs the call again without ``inline_limit`` in a worker thread. Both
    runs see the same bytes in the same order, so they reach the same verdict. The C
    scanner and the decompressors release the GIL on large buffers.
    """
    mv = batch if isinstance(batch, memoryview) else memoryview(batch)
    if mv.format != "B" or mv.ndim != 1:
        mv = mv.cast("B")
    body = mv[HEADER_SIZE : header.size]
    codec = header.compression
    count = header.records_count
    if codec == NONE:
        if inline_limit is not None and len(body) > inline_limit:
            return None
        try:
            min_ts, max_ts, first_null_key = _scan.scan(body, count, header.base_timestamp)
        except _scan.RecordError as exc:
            raise _record_error(exc) from None
        return BatchScan(min_ts, max_ts, first_null_key, len(body))

    inline = inline_limit is not None and inline_limit < max_uncompressed
    limit = inline_limit if inline else max_uncompressed
    scanner = _scan.RecordScanner(count, header.base_timestamp, compressed=True)
    try:
        for piece in iter_decompress(codec, body, limit):
            scanner.feed(piece)
        scanner.feed(b"", True)
    except DecompressedSizeExceeded:
        if inline:
            return None
        raise KafkaError(
            ErrorCode.invalid_record,
            f"The {codec_name(codec)} record batch decompresses to more than {max_uncompressed} bytes "
            f"(max.message.bytes x {DECOMPRESSION_RATIO_LIMIT})",
        ) from None
    except _scan.RecordError as exc:
        raise _record_error(exc) from None
    return BatchScan(scanner.min_timestamp, scanner.max_timestamp, scanner.first_null_key, scanner.scanned)


def _record_error(exc: _scan.RecordError) -> RecordValidationError:
    message, index = exc.args
    return RecordValidationError(ErrorCode.invalid_record, index, message)
