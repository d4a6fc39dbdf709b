"""Kafka's record-batch compression codecs, byte-compatible with what clients write and read.

Only the cold path (tools, tests, the Spark pipeline) compresses or decompresses:
the broker stores and serves batches as the producer sent them.

Wire formats (attribute bits 0-2 of a v2 batch):
- 1 gzip: a standard gzip stream (several members are accepted, as Java's GZIPInputStream does).
- 2 snappy: Java producers write xerial-framed snappy (``\\x82SNAPPY\\x00``, version and
  compat int32s, then ``[int32 length][raw snappy block]*``); librdkafka writes a raw
  snappy block. Both decode; we write xerial framing, which every client reads.
- 3 lz4: the LZ4 frame format with independent 64 KiB blocks, as Kafka's
  Lz4BlockOutputStream writes (Java's reader cannot follow linked blocks).
- 4 zstd: standard zstd frames, possibly without a content size (zstd-jni streams), so
  decompression is streaming.
"""

from __future__ import annotations

import struct

import cramjam
import lz4.frame
import zstandard

from shoal.protocol.errors import ErrorCode, KafkaError

__all__ = [
    "CODEC_NAMES",
    "GZIP",
    "LZ4",
    "NONE",
    "SNAPPY",
    "ZSTD",
    "codec_name",
    "compress",
    "decompress",
]

NONE = 0
GZIP = 1
SNAPPY = 2
LZ4 = 3
ZSTD = 4
CODEC_NAMES = {NONE: "none", GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}

# Levels Kafka's producer uses by default (KIP-390): gzip 6 (Deflater default), zstd 3.
# lz4 uses the fast compressor here; Kafka's default 9 (HC) is much slower for a small gain.
_GZIP_LEVEL = 6
_ZSTD_LEVEL = 3

_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = _XERIAL_MAGIC + struct.pack(">ii", 1, 1)  # version 1, min compatible 1
_XERIAL_HEADER_SIZE = 16
_XERIAL_BLOCK = 32 * 1024  # xerial SnappyOutputStream's default block size
_I32 = struct.Struct(">i")


def codec_name(codec: int) -> str:
    """Human name of a codec id, for messages and tools."""
    return CODEC_NAMES.get(codec, f"unknown({codec})")


def _unsupported(codec: int) -> KafkaError:
    return KafkaError(ErrorCode.unsupported_compression_type, f"Unsupported compression codec {codec}")


def compress(codec: int, data: bytes | bytearray | memoryview, level: int | None = None) -> bytes:
    """Compress ``data`` (the records section of a batch) with Kafka codec ``codec``."""
    if codec == NONE:
        return bytes(data)
    if codec == GZIP:
        return bytes(cramjam.gzip.compress(data, level=_GZIP_LEVEL if level is None else level))
    if codec == SNAPPY:
        return _xerial_encode(data)
    if codec == LZ4:
        return lz4.frame.compress(
            data,
            compression_level=0 if level is None else level,
            block_size=lz4.frame.BLOCKSIZE_MAX64KB,
            block_linked=False,
            content_checksum=False,
            store_size=False,
        )
    if codec == ZSTD:
        return zstandard.ZstdCompressor(level=_ZSTD_LEVEL if level is None else level).compress(data)
    raise _unsupported(codec)


def decompress(codec: int, data: bytes | bytearray | memoryview) -> bytes:
    """Decompress a batch's records section; corrupt input raises KafkaError CORRUPT_MESSAGE."""
    if codec == NONE:
        return bytes(data)
    if codec not in CODEC_NAMES:
        raise _unsupported(codec)
    try:
        if codec == GZIP:
            return bytes(cramjam.gzip.decompress(data))
        if codec == SNAPPY:
            return _snappy_decode(data)
        if codec == LZ4:
            return lz4.frame.decompress(data)
        return _zstd_decode(data)
    except KafkaError:
        raise
    except Exception as exc:  # each library has its own error types; all mean corrupt input
        raise KafkaError(
            ErrorCode.corrupt_message, f"Cannot decompress {codec_name(codec)} record data: {exc}"
        ) from exc


def _xerial_encode(data: bytes | bytearray | memoryview) -> bytes:
    """Xerial-framed snappy, the stream Java's SnappyOutputStream writes."""
    mv = memoryview(data).cast("B") if isinstance(data, memoryview) else memoryview(data)
    parts = [_XERIAL_HEADER]
    for start in range(0, len(mv), _XERIAL_BLOCK):
        block = cramjam.snappy.compress_raw(mv[start : start + _XERIAL_BLOCK])
        parts.append(_I32.pack(len(block)))
        parts.append(bytes(block))
    return b"".join(parts)


def _snappy_decode(data: bytes | bytearray | memoryview) -> bytes:
    """Raw snappy (librdkafka) or xerial framing (Java), told apart by the xerial magic."""
    mv = memoryview(data).cast("B") if isinstance(data, memoryview) else memoryview(data)
    if len(mv) < _XERIAL_HEADER_SIZE or mv[:8] != _XERIAL_MAGIC:
        return bytes(cramjam.snappy.decompress_raw(mv))
    # Version/compat ints are ignored like the other clients do (some writers get them wrong).
    blocks = []
    pos = _XERIAL_HEADER_SIZE
    end = len(mv)
    while pos < end:
        if mv[pos : pos + 8] == _XERIAL_MAGIC:  # concatenated xerial streams (SnappyInputStream reads on)
            pos += _XERIAL_HEADER_SIZE
            continue
        if end - pos < 4:
            raise KafkaError(ErrorCode.corrupt_message, "Truncated xerial snappy block length")
        (length,) = _I32.unpack_from(mv, pos)
        pos += 4
        if length < 0 or pos + length > end:
            raise KafkaError(
                ErrorCode.corrupt_message,
                f"Xerial snappy block of {length} bytes at {pos} overruns the {end}-byte stream",
            )
        blocks.append(mv[pos : pos + length])
        pos += length
    sizes = [cramjam.snappy.decompress_raw_len(b) for b in blocks]
    out = bytearray(sum(sizes))
    ov = memoryview(out)
    at = 0
    for block, n in zip(blocks, sizes, strict=True):
        cramjam.snappy.decompress_raw_into(block, ov[at : at + n])
        at += n
    return bytes(out)


def _zstd_decode(data: bytes | bytearray | memoryview) -> bytes:
    """Streaming decode so frames without a content size work; follows concatenated frames."""
    dctx = zstandard.ZstdDecompressor()
    parts = []
    rest: bytes | bytearray | memoryview = data
    while rest:
        obj = dctx.decompressobj()
        parts.append(obj.decompress(rest))
        if not obj.eof:
            raise KafkaError(ErrorCode.corrupt_message, "Truncated zstd frame")
        rest = obj.unused_data
    return b"".join(parts)
