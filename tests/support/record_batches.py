"""RecordBatch v2 (magic 2) encoding and WAL-object parsing for integration tests: batches real
clients never send, and what a broker's WAL objects hold.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Iterable, Sequence

from tests.support.broker import BrokerProcess
from tests.support.wire import write_varint

# ---------------------------------------------------------------------------------------------
# RecordBatch v2 (magic 2) encoding, uncompressed: enough to send batches real clients never would
# ---------------------------------------------------------------------------------------------


def encode_record(
    offset_delta: int,
    timestamp_delta: int,
    key: bytes | None,
    value: bytes | None,
    headers: Sequence[tuple[str, bytes | None]] = (),
) -> bytes:
    body = bytearray([0])  # attributes
    write_varint(body, timestamp_delta)
    write_varint(body, offset_delta)
    for field in (key, value):
        if field is None:
            write_varint(body, -1)
        else:
            write_varint(body, len(field))
            body += field
    write_varint(body, len(headers))
    for name, hval in headers:
        raw = name.encode()
        write_varint(body, len(raw))
        body += raw
        if hval is None:
            write_varint(body, -1)
        else:
            write_varint(body, len(hval))
            body += hval
    out = bytearray()
    write_varint(out, len(body))
    return bytes(out + body)


def build_record_batch(
    records: Iterable[tuple[bytes | None, bytes | None]],
    *,
    base_timestamp: int | None = None,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
) -> bytes:
    """A valid uncompressed RecordBatch v2 with CreateTime timestamps and a correct CRC32C."""
    import crc32c

    ts = int(time.time() * 1000) if base_timestamp is None else base_timestamp
    encoded = [encode_record(i, 0, k, v) for i, (k, v) in enumerate(records)]
    count = len(encoded)
    # attributes .. end: attributes(2) lastOffsetDelta(4) baseTs(8) maxTs(8) pid(8) epoch(2) seq(4) count(4)
    after_crc = struct.pack(
        ">hiqqqhii", 0, count - 1, ts, ts, producer_id, producer_epoch, base_sequence, count
    ) + b"".join(encoded)
    crc = crc32c.crc32c(after_crc)
    # batchLength counts from partitionLeaderEpoch to the end.
    batch_length = 4 + 1 + 4 + len(after_crc)
    return struct.pack(">qiibI", 0, batch_length, -1, 2, crc) + after_crc


def corrupt_batch(batch: bytes) -> bytes:
    """Flip one byte of the last record, leaving the stored CRC stale."""
    data = bytearray(batch)
    data[-1] ^= 0xFF
    return bytes(data)


def split_wal_object(data: bytes) -> list[bytes]:
    """Split a WAL object (version byte 0 + concatenated RecordBatches) into its batches.

    Raises ValueError when the bytes don't parse that way, which the caller reports.
    """
    if not data or data[0] != 0:
        raise ValueError(f"WAL object does not start with version byte 0: {data[:1]!r}")
    batches = []
    pos = 1
    while pos < len(data):
        if pos + 17 > len(data):
            raise ValueError(f"truncated batch header at {pos} of {len(data)}")
        (batch_length,) = struct.unpack_from(">i", data, pos + 8)
        magic = data[pos + 16]
        end = pos + 12 + batch_length
        if magic != 2 or batch_length < 49 or end > len(data):
            raise ValueError(f"not a RecordBatch v2 at {pos}: length {batch_length}, magic {magic}")
        batches.append(data[pos:end])
        pos = end
    return batches


CODEC_IDS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def batch_codec(batch: bytes) -> int:
    """Compression codec id from a RecordBatch's attributes (bits 0-2)."""
    (attributes,) = struct.unpack_from(">h", batch, 21)
    return int(attributes) & 0x7


def wal_codec_counts(broker: BrokerProcess) -> dict[int, int]:
    """How many batches of each codec the broker's local WAL objects hold (they must parse)."""
    counts: dict[int, int] = {}
    for path in broker.wal_objects():
        for batch in split_wal_object(path.read_bytes()):
            codec = batch_codec(batch)
            counts[codec] = counts.get(codec, 0) + 1
    return counts
