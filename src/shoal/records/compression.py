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

Decompression is streaming and bounded for every codec (``iter_decompress``): output comes
in pieces of at most ``chunk_size`` bytes, input is handed to the decoders in small pieces,
and a ``max_size`` stops a stream as soon as it would produce more than that, before
anything proportional to a size the input merely claims is allocated. ``decompress`` joins
those pieces; the broker's record validation (``validate.py``) scans them one at a time.
Every decoder used here releases the GIL while it works.
"""

from __future__ import annotations

import struct
import sys
import zlib
from collections.abc import Iterator

import cramjam
import lz4.frame
import zstandard

from shoal.protocol.errors import ErrorCode, KafkaError
from shoal.records import _scan

__all__ = [
    "CODEC_NAMES",
    "DECOMPRESS_CHUNK",
    "DecompressedSizeExceeded",
    "GZIP",
    "LZ4",
    "NONE",
    "SNAPPY",
    "ZSTD",
    "codec_name",
    "compress",
    "decompress",
    "iter_decompress",
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

# Streaming decode: pieces of output handed out at a time, and of input handed to a decoder
# at a time (zlib and lz4 copy the input they have not consumed yet on every call).
DECOMPRESS_CHUNK = 256 * 1024
_INPUT_PIECE = 64 * 1024
_JOIN_CHUNK = 1024 * 1024  # decompress(): fewer, larger pieces, joined at the end
_GZIP_MAGIC = b"\x1f\x8b"
# A raw snappy block of n bytes cannot hold more than 64/3 * n bytes (a 3-byte copy emits
# at most 64): a larger claimed length is corrupt, whatever the size bound.
_SNAPPY_MAX_RATIO = 22


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


class DecompressedSizeExceeded(KafkaError):
    """The data decompresses to more than the ``max_size`` asked for (INVALID_RECORD).

    Raised before more than ``max_size`` bytes (plus at most one piece) were produced.
    """

    def __init__(self, codec: int, max_size: int) -> None:
        super().__init__(
            ErrorCode.invalid_record,
            f"{codec_name(codec)} record data decompresses to more than {max_size} bytes",
        )
        self.codec = codec
        self.max_size = max_size


def decompress(codec: int, data: bytes | bytearray | memoryview, max_size: int | None = None) -> bytes:
    """Decompress a batch's records section; corrupt input raises KafkaError CORRUPT_MESSAGE.

    With ``max_size``, data that would decompress to more raises DecompressedSizeExceeded
    (INVALID_RECORD) after producing at most ``max_size`` bytes: use it on anything a
    client sent. Unknown codecs raise UNSUPPORTED_COMPRESSION_TYPE.
    """
    if codec == NONE:
        if max_size is not None and len(data) > max_size:
            raise DecompressedSizeExceeded(codec, max_size)
        return bytes(data)
    return b"".join(iter_decompress(codec, data, max_size, _JOIN_CHUNK))


def iter_decompress(
    codec: int,
    data: bytes | bytearray | memoryview,
    max_size: int | None = None,
    chunk_size: int = DECOMPRESS_CHUNK,
) -> Iterator[bytes | memoryview]:
    """Decompress ``data`` as a stream of non-empty pieces of at most ``chunk_size`` bytes.

    Never holds more than one piece of output (a raw snappy block, at most 22 times its
    compressed size, is the exception) and never allocates what the input only claims.
    Raises KafkaError CORRUPT_MESSAGE for input that does not decompress (garbage,
    truncated, empty), DecompressedSizeExceeded when the output would pass ``max_size``,
    UNSUPPORTED_COMPRESSION_TYPE for an unknown codec. Pieces may be memoryviews that are
    only valid until the next one is asked for.
    """
    mv = _byte_view(data)
    if codec == NONE:
        if max_size is not None and len(mv) > max_size:
            raise DecompressedSizeExceeded(codec, max_size)
        for start in range(0, len(mv), chunk_size):
            yield mv[start : start + chunk_size]
        return
    decoder = _DECODERS.get(codec)
    if decoder is None:
        raise _unsupported(codec)
    if chunk_size <= 0:
        raise ValueError("chunk_size must be positive")
    budget = _Budget(codec, max_size)
    pieces = decoder(mv, budget, chunk_size)
    while True:
        try:
            piece = next(pieces)
        except StopIteration:
            return
        except KafkaError:
            raise
        except _CODEC_ERRORS as exc:  # each library has its own error types; all mean corrupt input
            raise _corrupt(f"Cannot decompress {codec_name(codec)} record data: {exc}") from exc
        budget.left -= len(piece)
        if budget.left < 0:  # hand out what fits first, so errors in it come first
            keep = len(piece) + budget.left
            if keep:
                yield memoryview(piece)[:keep]
            raise DecompressedSizeExceeded(codec, budget.limit)
        yield piece


def _corrupt(message: str) -> KafkaError:
    return KafkaError(ErrorCode.corrupt_message, message)


def _byte_view(data: bytes | bytearray | memoryview) -> memoryview:
    mv = data if isinstance(data, memoryview) else memoryview(data)
    if mv.format != "B" or mv.ndim != 1:
        mv = mv.cast("B")
    return mv


class _Budget:
    """What is left of ``max_size``, kept by ``iter_decompress``; decoders ask for no more than ``want()``."""

    __slots__ = ("codec", "left", "limit")

    def __init__(self, codec: int, max_size: int | None) -> None:
        self.codec = codec
        self.limit = sys.maxsize if max_size is None else max_size
        self.left = self.limit

    def want(self, chunk_size: int) -> int:
        """Output to ask for: a piece, or one byte more than is left (to see an overrun)."""
        return chunk_size if chunk_size <= self.left else self.left + 1

    def claim(self, n: int) -> None:
        """A block that says it holds ``n`` bytes: refuse it before decoding if they do not fit."""
        if n > self.left:
            raise DecompressedSizeExceeded(self.codec, self.limit)


def _gzip_stream(mv: memoryview, budget: _Budget, chunk_size: int) -> Iterator[bytes]:
    """One or more gzip members, as Java's GZIPInputStream reads them.

    After a member, another one starts if the next bytes are the gzip magic; anything else
    after a member is ignored, as GZIPInputStream does. A member that does not end is corrupt.
    """
    end = len(mv)
    if not end:
        raise _corrupt("Cannot decompress gzip record data: empty payload")
    pos = 0
    d = zlib.decompressobj(wbits=31)
    tail: bytes | memoryview = b""
    while True:
        if not tail and pos < end:
            tail = mv[pos : pos + _INPUT_PIECE]
            pos += len(tail)
        out = d.decompress(tail, budget.want(chunk_size))
        tail = d.unconsumed_tail
        if out:
            yield out
        if d.eof:
            rest = d.unused_data
            head = rest[:2] if len(rest) >= 2 else rest + bytes(mv[pos : pos + 2 - len(rest)])
            if head != _GZIP_MAGIC:
                return
            d = zlib.decompressobj(wbits=31)
            tail = rest
        elif not out and not tail and pos >= end:
            raise _corrupt("Cannot decompress gzip record data: truncated gzip stream")


def _zstd_stream(mv: memoryview, budget: _Budget, chunk_size: int) -> Iterator[bytes]:
    """Concatenated zstd frames (with or without a content size; skippable frames skipped).

    The frame structure is walked first (``_scan.zstd_frames``: headers and block sizes, no
    decoding), because the stream reader ends quietly on a truncated frame.
    """
    _scan.zstd_frames(mv)
    reader = zstandard.ZstdDecompressor().stream_reader(mv, read_size=_INPUT_PIECE, read_across_frames=True)
    with reader:
        while True:
            out = reader.read(budget.want(chunk_size))
            if not out:
                return
            yield out


def _lz4_stream(mv: memoryview, budget: _Budget, chunk_size: int) -> Iterator[bytes]:
    """One LZ4 frame, as Kafka's Lz4BlockInputStream reads it (what follows it is ignored)."""
    end = len(mv)
    if not end:
        raise _corrupt("Cannot decompress lz4 record data: empty payload")
    pos = 0
    d = lz4.frame.LZ4FrameDecompressor()
    while not d.eof:
        if d.needs_input:
            if pos >= end:
                raise _corrupt("Cannot decompress lz4 record data: truncated lz4 frame")
            piece: bytes | memoryview = mv[pos : pos + _INPUT_PIECE]
            pos += len(piece)
        else:
            piece = b""
        out = d.decompress(piece, max_length=budget.want(chunk_size))
        if out:
            yield out


def _snappy_stream(mv: memoryview, budget: _Budget, chunk_size: int) -> Iterator[memoryview]:
    """Raw snappy (librdkafka) or xerial framing (Java), told apart by the xerial magic."""
    if len(mv) < _XERIAL_HEADER_SIZE or mv[:8] != _XERIAL_MAGIC:
        yield from _snappy_block(mv, budget, chunk_size)
        return
    # Version/compat ints are ignored like the other clients do (some writers get them wrong).
    pos = _XERIAL_HEADER_SIZE
    end = len(mv)
    while pos < end:
        if mv[pos : pos + 8] == _XERIAL_MAGIC:  # concatenated xerial streams (SnappyInputStream reads on)
            pos += _XERIAL_HEADER_SIZE
            continue
        if end - pos < 4:
            raise _corrupt("Truncated xerial snappy block length")
        (length,) = _I32.unpack_from(mv, pos)
        pos += 4
        if length < 0 or pos + length > end:
            raise _corrupt(f"Xerial snappy block of {length} bytes at {pos} overruns the {end}-byte stream")
        yield from _snappy_block(mv[pos : pos + length], budget, chunk_size)
        pos += length


def _snappy_block(block: memoryview, budget: _Budget, chunk_size: int) -> Iterator[memoryview]:
    """One raw snappy block: its length preamble is checked before anything is allocated."""
    claimed, _ = _snappy_length(block)
    if claimed > _SNAPPY_MAX_RATIO * len(block):
        raise _corrupt(
            f"Snappy block of {len(block)} bytes claims {claimed} uncompressed bytes, "
            "more than snappy can encode in it"
        )
    budget.claim(claimed)
    out = memoryview(cramjam.snappy.decompress_raw(block))
    if len(out) != claimed:  # cramjam checks this too
        raise _corrupt(f"Snappy block decoded to {len(out)} bytes, not the {claimed} it claims")
    for start in range(0, claimed, chunk_size):
        yield out[start : start + chunk_size]


def _snappy_length(block: memoryview) -> tuple[int, int]:
    """The uncompressed-length preamble of a raw snappy block (unsigned varint, <= 2^32-1)."""
    value = 0
    for i in range(min(5, len(block))):
        b = block[i]
        value |= (b & 0x7F) << (7 * i)
        if b < 0x80:
            if value > 0xFFFFFFFF:
                break
            return value, i + 1
    raise _corrupt("Cannot decompress snappy record data: bad uncompressed-length preamble")


_DECODERS = {GZIP: _gzip_stream, SNAPPY: _snappy_stream, LZ4: _lz4_stream, ZSTD: _zstd_stream}
_CODEC_ERRORS = (zlib.error, zstandard.ZstdError, cramjam.DecompressionError, RuntimeError, ValueError)


def _xerial_encode(data: bytes | bytearray | memoryview) -> bytes:
    """Xerial-framed snappy, the stream Java's SnappyOutputStream writes."""
    mv = memoryview(data).cast("B") if isinstance(data, memoryview) else memoryview(data)
    parts = [_XERIAL_HEADER]
    for start in range(0, len(mv), _XERIAL_BLOCK):
        block = cramjam.snappy.compress_raw(mv[start : start + _XERIAL_BLOCK])
        parts.append(_I32.pack(len(block)))
        parts.append(bytes(block))
    return b"".join(parts)
