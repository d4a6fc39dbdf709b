"""Record-level validation on produce (records/validate.py, records/_scan.c): what Kafka's
LogValidator refuses inside a batch whose header and CRC are fine, every codec, bombs, and
bounded memory. Hostile batches are built by byte surgery with a recomputed CRC, so the
batch-level check (validate_records) passes and scan_batch has to catch them."""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import re
import struct
import subprocess
import sys
import textwrap
import zlib
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType

import cramjam
import lz4.frame
import pytest
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shoal.protocol.errors import ErrorCode, KafkaError, RecordValidationError
from shoal.records import _scan
from shoal.records import compression as C
from shoal.records.batch import HEADER_SIZE, read_header, validate_records
from shoal.records.codec import NewRecord, build_batch, decode_batch
from shoal.records.validate import (
    DECOMPRESSION_RATIO_LIMIT,
    BatchScan,
    max_uncompressed_for,
    scan_batch,
)

CODECS = [0, 1, 2, 3, 4]
TS = 1_700_000_000_000
MiB = 1 << 20
GiB = 1 << 30
LIMIT = max_uncompressed_for(MiB)  # 64 MiB: a topic with the default max.message.bytes
FUZZ_RECORDS = Path(__file__).resolve().parents[2] / "bench" / "fuzz_records.py"


def load_fuzz_records() -> ModuleType:
    """bench/ is not a package: load bench/fuzz_records.py (the mutation fuzzer) by path."""
    spec = importlib.util.spec_from_file_location("fuzz_records", FUZZ_RECORDS)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


_fuzz_records = load_fuzz_records()
zz = _fuzz_records.zz  # zigzag varlong, as Kafka writes them
make_batch = _fuzz_records.make_batch  # a v2 batch around any records section or payload, CRC fixed
sample_records = _fuzz_records.sample_records  # null/empty keys and values, headers, unordered timestamps


# --- building batches by hand -------------------------------------------------------------------


def field(data: bytes | None) -> bytes:
    return zz(-1) if data is None else zz(len(data)) + data


def record(
    index: int,
    *,
    key: bytes | None = b"k",
    value: bytes | None = b"v",
    headers: Sequence[tuple[bytes, bytes | None] | bytes] = (),
    ts_delta: int = 0,
    raw_ts: bytes | None = None,
    raw_offset: bytes | None = None,
    raw_key: bytes | None = None,
    raw_value: bytes | None = None,
    raw_header_count: bytes | None = None,
    length: int | None = None,
    length_delta: int = 0,
    tail: bytes = b"",
) -> bytes:
    """One record (DefaultRecord layout); any field can be replaced by raw bytes, the length lied about."""
    body = b"\x00"
    body += zz(ts_delta) if raw_ts is None else raw_ts
    body += zz(index) if raw_offset is None else raw_offset
    body += field(key) if raw_key is None else raw_key
    body += field(value) if raw_value is None else raw_value
    body += zz(len(headers)) if raw_header_count is None else raw_header_count
    for h in headers:
        body += h if isinstance(h, bytes) else field(h[0]) + field(h[1])
    body += tail
    size = len(body) + length_delta if length is None else length
    return zz(size) + body


def scan(raw: bytes, max_uncompressed: int = LIMIT, inline_limit: int | None = None) -> BatchScan | None:
    [(pos, header)] = validate_records(raw, 1 << 31)  # the batch-level check must pass
    assert pos == 0
    return scan_batch(memoryview(raw), header, max_uncompressed=max_uncompressed, inline_limit=inline_limit)


def refused(raw: bytes, **kwargs: int) -> KafkaError:
    with pytest.raises(KafkaError) as info:
        scan(raw, **kwargs)
    return info.value


def expected_scan(recs: Sequence[NewRecord], raw: bytes) -> BatchScan:
    header, _ = decode_batch(raw)
    section = C.decompress(header.compression, memoryview(raw)[HEADER_SIZE:])
    stamps = [r.timestamp for r in recs]
    nulls = [i for i, r in enumerate(recs) if r.key is None]
    return BatchScan(min(stamps), max(stamps), nulls[0] if nulls else -1, len(section))  # type: ignore[type-var]


# --- valid batches ------------------------------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS)
def test_valid_batches_accepted(codec: int) -> None:
    for recs in (sample_records(), sample_records(1), sample_records(2000)):
        raw = build_batch(recs, compression=codec)
        assert scan(raw) == expected_scan(recs, raw)
    keyed = [NewRecord(b"k%d" % i, b"v", (), TS - i) for i in range(10)]
    raw = build_batch(keyed, compression=codec)
    assert scan(raw) == BatchScan(TS - 9, TS, -1, expected_scan(keyed, raw).uncompressed_size)


@pytest.mark.parametrize("codec", CODECS)
def test_kafka_python_batches_accepted(codec: int) -> None:
    from kafka.record.default_records import DefaultRecordBatchBuilder

    recs = sample_records(50)
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=codec, is_transactional=0, producer_id=-1,
        producer_epoch=-1, base_sequence=-1, batch_size=1 << 20,
    )  # fmt: skip
    for i, r in enumerate(recs):
        headers = [(k, v) for k, v in r.headers]
        assert builder.append(i, timestamp=r.timestamp, key=r.key, value=r.value, headers=headers)
    raw = bytes(builder.build())
    assert read_header(raw).compression == codec
    assert scan(raw) == expected_scan(recs, raw)


def test_codec_variants_accepted() -> None:
    """What real producers write besides our own compress(): every framing Kafka's clients read."""
    recs = sample_records(300)
    section = bytes(memoryview(build_batch(recs))[HEADER_SIZE:])
    half = len(section) // 2
    want = expected_scan(recs, build_batch(recs))

    def ok(codec: int, payload: bytes) -> None:
        assert scan(make_batch(b"", len(recs), codec, payload=payload, base_ts=TS)) == want

    gz = zlib.compressobj(6, zlib.DEFLATED, 31)
    ok(1, gz.compress(section) + gz.flush())
    ok(1, bytes(cramjam.gzip.compress(section[:half])) + bytes(cramjam.gzip.compress(section[half:])))
    ok(1, bytes(cramjam.gzip.compress(section)) + b"\x00\x00trailing")  # GZIPInputStream ignores it
    ok(2, bytes(cramjam.snappy.compress_raw(section)))  # librdkafka: one raw block
    xerial = C.compress(2, section)
    ok(2, xerial)
    ok(2, C.compress(2, section[:half]) + C.compress(2, section[half:]))  # concatenated streams
    ok(2, C._XERIAL_HEADER + b"".join(  # 2 KiB blocks, like snappy-java in Kafka's producer
        struct.pack(">i", len(b)) + b
        for b in (bytes(cramjam.snappy.compress_raw(section[i : i + 2048])) for i in range(0, len(section), 2048))
    ))  # fmt: skip
    ok(3, lz4.frame.compress(section))  # content size, checksum, 4 MiB blocks
    ok(3, lz4.frame.compress(section, block_linked=True, content_checksum=True, store_size=True))
    ok(3, C.compress(3, section))
    ok(4, zstandard.ZstdCompressor(level=19).compress(section))
    cobj = zstandard.ZstdCompressor(write_content_size=False, write_checksum=True).compressobj()
    ok(4, cobj.compress(section) + cobj.flush())  # zstd-jni streams: no content size
    two = zstandard.ZstdCompressor()
    ok(4, two.compress(section[:half]) + two.compress(section[half:]))  # two frames
    skippable = struct.pack("<II", 0x184D2A5A, 3) + b"abc"
    ok(4, skippable + two.compress(section))


def test_timestamps_across_the_range() -> None:
    """min/max are base + delta in Java long arithmetic (deltas of either sign, wrap included)."""
    section = record(0, ts_delta=0) + record(1, ts_delta=-5) + record(2, ts_delta=2**40)
    assert scan(make_batch(section, 3)) == BatchScan(TS - 5, TS + 2**40, -1, len(section))
    section = record(0, ts_delta=1)
    assert scan(make_batch(section, 1, base_ts=2**63 - 1)) == BatchScan(-(2**63), -(2**63), -1, len(section))
    section = record(0, key=None) + record(1, key=None)
    assert scan(make_batch(section, 2, 4)).first_null_key == 0  # type: ignore[union-attr]


# --- hostile records ----------------------------------------------------------------------------

GOOD = record(0)
# fmt: off
HOSTILE: list[tuple[str, bytes, int, str, int]] = [
    # name, records section, declared count, message (regex), index of the failing record
    ("negative length", zz(-5) + GOOD[1:], 1, r"record payload size -5 is negative", 0),
    ("length 2^31-1", zz(2**31 - 1) + GOOD[1:], 1, r"Invalid record size: expected (to read )?2147483647 bytes", 0),
    ("length past the batch", record(0, length_delta=10), 1, r"Invalid record size: expected (to read )?1[0-9] bytes", 0),
    ("length past the batch, 2nd", GOOD + record(1, length_delta=3), 2, r"Invalid record size", 1),
    ("length too short", record(0, length_delta=-2), 1, r"Found invalid record structure", 0),
    ("length too long", GOOD + record(1, tail=b"xy"), 2, r"expected to read 10 bytes in record payload, but instead read 8$", 1),
    ("length zero", zz(0), 1, r"payload of 0 bytes ends inside its attributes", 0),
    ("key length -2", record(0, raw_key=zz(-2) + b"k"), 1, r"key size -2 is negative", 0),
    ("key length 2^31-1", record(0, raw_key=zz(2**31 - 1) + b"k"), 1, r"key size 2147483647 is larger than", 0),
    ("value length -3", record(0, raw_value=zz(-3)), 1, r"value size -3 is negative", 0),
    ("value length past record", record(0, raw_value=zz(50) + b"v"), 1, r"value size 50 is larger than the 2 bytes left", 0),
    ("header count -3", record(0, raw_header_count=zz(-3)), 1, r"^Found invalid number of record headers -3$", 0),
    ("header count 2^31-1", record(0, raw_header_count=zz(2**31 - 1)), 1,
     r"^Found invalid number of record headers\. 2147483647 is larger than the remaining size of the buffer$", 0),
    ("header count > headers", record(0, raw_header_count=zz(2), headers=[(b"a", b"b")]), 1,
     r"Found invalid record structure: the record payload of \d+ bytes ends inside its header key size", 0),
    ("header key length -1", record(0, headers=[zz(-1) + field(b"v")]), 1, r"^Invalid negative header key size -1$", 0),
    ("header key length past record", record(0, headers=[zz(100) + b"abc"]), 1, r"header key size 100 is larger", 0),
    ("header key overlong NUL", record(0, headers=[(b"a\xc0\x80", b"v")]), 1, r"header 0 is not valid UTF-8", 0),
    ("header key surrogate", record(0, headers=[(b"ok", b""), (b"\xed\xa0\x80", b"v")]), 1, r"header 1 is not valid UTF-8", 0),
    ("header key > U+10FFFF", record(0, headers=[(b"\xf4\x90\x80\x80", None)]), 1, r"not valid UTF-8", 0),
    ("header key cut sequence", record(0, headers=[(b"\xe2\x82", None)]), 1, r"not valid UTF-8", 0),
    ("header key lone continuation", record(0, headers=[(b"\x80", None)]), 1, r"not valid UTF-8", 0),
    ("header key overlong 3 bytes", record(0, headers=[(b"\xe0\x80\xaf", None)]), 1, r"not valid UTF-8", 0),
    ("header value length -2", record(0, headers=[field(b"h") + zz(-2)]), 1, r"header value size -2 is negative", 0),
    ("header value past record", record(0, headers=[field(b"h") + zz(9)]), 1, r"header value size 9 is larger", 0),
    ("offset delta skips", GOOD + record(2), 2, r"does not have incremental offsets, expected offset is 1$", 1),
    ("offset delta starts at 1", record(1) + record(2), 2, r"DefaultRecord\(offset=1, .*expected offset is 0$", 0),
    ("offset delta repeats", GOOD + record(0), 2, r"expected offset is 1$", 1),
    ("varint too long", record(0, raw_offset=b"\x80\x80\x80\x80\x80\x01"), 1, r"Varint is too long, the most significant bit in the 5th byte is set", 0),
    ("varlong too long", record(0, raw_ts=b"\x80" * 10 + b"\x01"), 1, r"Varlong is too long, most significant bit in the 10th byte is set", 0),
    ("length varint too long", b"\xff\xff\xff\xff\xff\x01" + GOOD, 1, r"^Varint is too long", 0),
    ("count above records", GOOD + record(1), 3, r"^Incorrect declared batch size, premature EOF reached$", 2),
    ("count below records", GOOD + record(1), 1, r"^Incorrect declared batch size, records still remaining in file$", 0),
    ("trailing byte", GOOD + b"\x00", 1, r"records still remaining in file", 0),
    ("empty section", b"", 1, r"premature EOF reached", 0),
    ("cut in a length varint", GOOD + b"\x80", 2, r"premature EOF reached", 1),
]
# fmt: on


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize(
    ("name", "section", "count", "message", "index"), HOSTILE, ids=[h[0] for h in HOSTILE]
)
def test_hostile_records_refused(
    name: str, section: bytes, count: int, message: str, index: int, codec: int
) -> None:
    err = refused(make_batch(section, count, codec))
    assert err.code == ErrorCode.invalid_record, err.message
    assert re.search(message, err.message), err.message
    assert isinstance(err, RecordValidationError) and err.record_errors == ((index, err.message),)


def test_kafka_messages_for_uncompressed_and_streamed_data() -> None:
    """A record longer than what is left: Kafka's ByteBuffer message when the whole section is at
    hand (uncompressed), the stream's when it is read as it decompresses."""
    section = record(0, length=40)
    assert refused(make_batch(section, 1)).message == (
        "Invalid record size: expected 40 bytes in record payload, but instead the buffer has only 8 remaining bytes."
    )
    section = record(0, raw_value=zz(100) + bytes(50), length=200)
    assert refused(make_batch(section, 1, 1)).message == (
        "Invalid record size: expected 200 bytes in record payload, but the record payload reached EOF."
    )
    section = record(0, length=40, tail=bytes(30))  # the fields end before the declared length
    assert refused(make_batch(section, 1, 1)).message == (
        "Invalid record size: expected to read 40 bytes in record payload, but instead read 8"
    )
    off = refused(make_batch(GOOD + record(2), 2, 4)).message
    assert off.startswith(
        f"Inner record DefaultRecord(offset=2, timestamp={TS}, key=1 bytes, value=1 bytes) "
        "inside the compressed record batch"
    )


# --- compressed payloads that do not decompress ---------------------------------------------------

GARBAGE = b"this is not compressed record data at all, just garbage bytes"


@pytest.mark.parametrize("codec", [1, 2, 3, 4])
def test_garbage_compressed_payloads_are_corrupt(codec: int) -> None:
    section = b"".join(record(i) for i in range(200))
    good = C.compress(codec, section)
    payloads = [b"", GARBAGE, good[: len(good) // 2], good[:-7], good[:5]]
    if codec == 2:
        payloads += [
            C._XERIAL_HEADER + struct.pack(">i", 100) + b"x" * 10,
            bytes(cramjam.snappy.compress_raw(section))[:-3],
        ]
    if codec == 4:
        payloads += [
            good + b"\x00\x00\x00\x00",
            good[:4] + bytes([good[4] | 0x08]) + good[5:],
        ]  # trailing, reserved bit
    for payload in payloads:
        err = refused(make_batch(b"", 200, codec, payload=payload))
        assert err.code == ErrorCode.corrupt_message, (payload[:20], err.message)
        assert "record data" in err.message or "snappy" in err.message.lower()


# --- bombs ----------------------------------------------------------------------------------------

BOMB_PREFIX = zz(2**31 - 1) + b"\x00" + zz(0) + zz(0) + zz(-1) + zz(2**31 - 100)
"""The start of a record that claims a 2 GiB value: every byte after it is value, so the scanner accepts the
zeros that follow and only the size bound stops the stream."""


def _zeros_stream(
    compressor: Callable[[bytes], bytes], flush: Callable[[], bytes], total: int, prefix: bytes
) -> bytes:
    zero = bytes(MiB)
    parts = [compressor(prefix)]
    parts += [compressor(zero) for _ in range(total // MiB)]
    parts.append(flush())
    return b"".join(parts)


@functools.lru_cache(maxsize=2)
def _gzip_zeros(total: int) -> bytes:
    c = zlib.compressobj(6, zlib.DEFLATED, 31)
    return _zeros_stream(c.compress, c.flush, total, b"")


def gzip_bomb(prefix: bytes = b"", total: int = GiB) -> bytes:
    """One gzip member of ``total`` zeros (~1 MB for 1 GiB), after a member holding ``prefix``."""
    return (bytes(cramjam.gzip.compress(prefix)) if prefix else b"") + _gzip_zeros(total)


def zstd_bomb(prefix: bytes = b"", total: int = GiB) -> bytes:
    c = zstandard.ZstdCompressor(level=3).compressobj()
    return _zeros_stream(c.compress, c.flush, total, prefix)


def lz4_bomb(prefix: bytes = b"", total: int = 256 * MiB) -> bytes:
    c = lz4.frame.LZ4FrameCompressor(block_size=lz4.frame.BLOCKSIZE_MAX64KB, block_linked=False)
    return c.begin() + _zeros_stream(c.compress, c.flush, total, prefix)


def xerial_block_bomb() -> bytes:
    """An 18-byte snappy block that claims 1 GiB (length preamble, then a literal and copies)."""
    block = b"\x80\x80\x80\x80\x04" + b"\x00\x00" + b"\xfe\x01\x00" * 3 + b"\x00\x00"
    assert len(block) == 18 and C._snappy_length(memoryview(block))[0] == GiB
    return C._XERIAL_HEADER + struct.pack(">i", len(block)) + block


def zstd_header_count_bomb() -> bytes:
    """The 549-byte-class zstd batch: a record claiming 2^31-1 headers, then 16 MiB of zeros."""
    rec = zz(16 * MiB + 16) + b"\x00" + zz(0) + zz(0) + zz(-1) + zz(-1) + zz(2**31 - 1) + bytes(16 * MiB)
    return make_batch(b"", 1, 4, payload=zstandard.ZstdCompressor(level=19).compress(rec))


@pytest.fixture(scope="module")
def bombs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Each bomb as a file of batch bytes, with the error it must get: (code, message regex)."""
    out = {}
    cases = {
        "gzip zeros 1 GiB": (make_batch(b"", 1, 1, payload=gzip_bomb()), "invalid_record", "ends inside its attributes"),
        "gzip value 1 GiB": (make_batch(b"", 1, 1, payload=gzip_bomb(BOMB_PREFIX)), "invalid_record", "decompresses to more than 67108864 bytes"),
        "zstd value 1 GiB": (make_batch(b"", 1, 4, payload=zstd_bomb(BOMB_PREFIX)), "invalid_record", "decompresses to more than"),
        "lz4 value 256 MiB": (make_batch(b"", 1, 3, payload=lz4_bomb(BOMB_PREFIX)), "invalid_record", "decompresses to more than"),
        "xerial 18-byte block": (make_batch(b"", 1, 2, payload=xerial_block_bomb()), "corrupt_message", "claims 1073741824 uncompressed bytes"),
        "zstd header count": (zstd_header_count_bomb(), "invalid_record", "2147483647 is larger than the remaining size"),
    }  # fmt: skip
    root = tmp_path_factory.mktemp("bombs")
    for i, (name, (raw, code, message)) in enumerate(cases.items()):
        path = root / f"bomb{i}.bin"
        path.write_bytes(raw)
        (root / f"bomb{i}.json").write_text(json.dumps({"name": name, "code": code, "message": message}))
        out[name] = path
    return out


def test_bombs_are_small(bombs: dict[str, Path]) -> None:
    sizes = {name: path.stat().st_size for name, path in bombs.items()}
    assert 1_000_000 < sizes["gzip zeros 1 GiB"] < 1.1 * MiB
    assert sizes["xerial 18-byte block"] == HEADER_SIZE + 16 + 4 + 18
    assert sizes["zstd header count"] < 1024


_BOMB_CHILD = textwrap.dedent(
    """
    import json, sys, tracemalloc
    from pathlib import Path
    from shoal.protocol.errors import KafkaError
    from shoal.records.batch import validate_records
    from shoal.records.validate import max_uncompressed_for, scan_batch

    def peak_kib():  # VmHWM: this process's own peak (ru_maxrss starts from the parent's at fork)
        status = Path("/proc/self/status").read_text()
        return int(status.split("VmHWM:")[1].split()[0])

    results = []
    batches = []
    for path in sys.argv[1:]:
        raw = Path(path).read_bytes()
        batches.append((path, raw, validate_records(raw, 1 << 31)[0][1]))
    tracemalloc.start()
    before = peak_kib()
    for path, raw, header in batches:
        tracemalloc.reset_peak()
        try:
            scan_batch(memoryview(raw), header, max_uncompressed=max_uncompressed_for(1 << 20))
            outcome = (None, "accepted")
        except KafkaError as exc:
            outcome = (exc.code.name, exc.message)
        results.append((path, *outcome, tracemalloc.get_traced_memory()[1]))
    after = peak_kib()
    control = bytearray(96 << 20)  # the measure sees a real allocation of that size
    control[::4096] = b"x" * len(control[::4096])
    print(json.dumps({"growth_kib": after - before, "control_kib": peak_kib() - after, "results": results}))
    """
)


def test_bombs_refused_with_bounded_memory(bombs: dict[str, Path]) -> None:
    """All bombs in one fresh process: its peak RSS grows by less than 64 MiB over them all, and
    Python-side allocations (decompressed pieces) peak at a few hundred KiB per bomb."""
    paths = [str(p) for p in bombs.values()]
    proc = subprocess.run(
        [sys.executable, "-c", _BOMB_CHILD, *paths], capture_output=True, text=True, timeout=300, check=False
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    for path, code, message, traced_peak in report["results"]:
        want = json.loads(Path(path).with_suffix(".json").read_text())
        assert code == want["code"], (want["name"], message)
        assert re.search(want["message"], message), (want["name"], message)
        assert traced_peak < 2 * MiB, (want["name"], traced_peak)
    assert report["growth_kib"] < 64 * 1024, report
    assert report["control_kib"] > 64 * 1024, report


def test_snappy_block_checked_before_decoding(monkeypatch: pytest.MonkeyPatch) -> None:
    """A real raw snappy block bigger than what is left of the bound is refused before cramjam runs."""
    block = bytes(cramjam.snappy.compress_raw(bytes(4 * MiB)))  # ~190 KB, plausible
    raw = make_batch(b"", 1, 2, payload=block)

    def boom(*args: object) -> None:
        raise AssertionError("decompress_raw called")

    monkeypatch.setattr(cramjam.snappy, "decompress_raw", boom)
    err = refused(raw, max_uncompressed=MiB)
    assert err.code == ErrorCode.invalid_record and "decompresses to more than 1048576 bytes" in err.message
    with pytest.raises(C.DecompressedSizeExceeded):
        C.decompress(2, block, max_size=MiB)


def test_decompression_ratio_limit() -> None:
    assert DECOMPRESSION_RATIO_LIMIT == 64
    assert max_uncompressed_for(1048588) == 1048588 * 64
    section = b"".join(record(i, value=bytes(1000)) for i in range(100))  # ~100 KB, very compressible
    for codec in CODECS:
        raw = make_batch(section, 100, codec)
        assert scan(raw, max_uncompressed=len(section)).uncompressed_size == len(section)  # type: ignore[union-attr]
        if codec:
            err = refused(raw, max_uncompressed=len(section) - 1)
            assert err.code == ErrorCode.invalid_record
            assert err.message.endswith(
                f"decompresses to more than {len(section) - 1} bytes (max.message.bytes x 64)"
            )


# --- inline_limit ---------------------------------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS)
def test_inline_limit(codec: int) -> None:
    recs = sample_records(500)
    raw = build_batch(recs, compression=codec)
    full = scan(raw)
    assert full is not None and full.uncompressed_size > 100_000
    assert scan(raw, inline_limit=full.uncompressed_size) == full
    assert scan(raw, inline_limit=full.uncompressed_size - 1) is None  # the caller retries in a thread
    assert scan(raw, inline_limit=1000) is None
    # an error within the inline limit is raised inline; past it, the worker run finds it
    # (a snappy block is all or nothing: one larger than what is left gives None too)
    bad = make_batch(record(1) + bytes(200_000), 2, codec)
    assert "expected offset is 0" in refused(bad).message
    if codec:
        assert "expected offset is 0" in refused(bad, inline_limit=40_000).message
    else:  # an uncompressed section over the limit is not even looked at
        assert scan(bad, inline_limit=40_000) is None
    late = make_batch(b"".join(record(i, value=bytes(1000)) for i in range(200)) + b"\x00", 200, codec)
    assert scan(late, inline_limit=10_000) is None
    assert "records still remaining" in refused(late).message
    if codec:  # over max_uncompressed: refused whatever the inline limit
        assert refused(raw, max_uncompressed=1000, inline_limit=5000).code == ErrorCode.invalid_record
        assert scan(raw, max_uncompressed=full.uncompressed_size, inline_limit=1000) is None


# --- compression.decompress with a bound ----------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS)
def test_bounded_decompress(codec: int) -> None:
    data = b"".join(b"record %d payload " % i for i in range(50_000))
    packed = C.compress(codec, data)
    assert C.decompress(codec, packed) == C.decompress(codec, packed, max_size=len(data)) == data
    with pytest.raises(C.DecompressedSizeExceeded) as info:
        C.decompress(codec, packed, max_size=len(data) - 1)
    assert info.value.code == ErrorCode.invalid_record and info.value.max_size == len(data) - 1
    pieces = list(C.iter_decompress(codec, packed, chunk_size=10_000))
    assert b"".join(pieces) == data and all(0 < len(p) <= 10_000 for p in pieces)


def test_bounded_decompress_of_bombs() -> None:
    bomb = zstd_bomb(total=256 * MiB)
    with pytest.raises(C.DecompressedSizeExceeded):
        C.decompress(4, bomb, max_size=MiB)
    with pytest.raises(C.DecompressedSizeExceeded):
        C.decompress(1, gzip_bomb(total=64 * MiB), max_size=MiB)
    with pytest.raises(KafkaError) as info:
        C.decompress(2, xerial_block_bomb())
    assert info.value.code == ErrorCode.corrupt_message
    with pytest.raises(KafkaError) as info:
        C.decompress(9, b"x")
    assert info.value.code == ErrorCode.unsupported_compression_type


# --- the C scanner itself -------------------------------------------------------------------------


def test_scanner_resumes_anywhere() -> None:
    """Fed one byte at a time (varints cut everywhere), the scanner reaches the same verdicts."""
    recs = sample_records(8)
    section = bytes(memoryview(build_batch(recs))[HEADER_SIZE:])
    s = _scan.RecordScanner(8, recs[0].timestamp)
    for i in range(len(section)):
        s.feed(section[i : i + 1])
        assert not s.complete or i == len(section) - 1
    s.feed(b"", True)
    want = expected_scan(recs, build_batch(recs))
    assert (s.min_timestamp, s.max_timestamp, s.first_null_key, s.scanned) == (
        want.min_timestamp, want.max_timestamp, want.first_null_key, want.uncompressed_size,
    )  # fmt: skip
    assert s.complete and s.records_done == 8
    for name, bad, count, _message, index in HOSTILE:
        s = _scan.RecordScanner(count, TS)
        with pytest.raises(_scan.RecordError) as info:
            for i in range(len(bad)):
                s.feed(bad[i : i + 1])
            s.feed(b"", True)
        assert info.value.args[1] == index, name
        with pytest.raises(_scan.RecordError):  # a failed scanner stays failed
            s.feed(b"")


def test_scanner_api() -> None:
    assert _scan.scan(memoryview(bytearray(GOOD)), 1, TS) == (TS, TS, -1)
    s = _scan.RecordScanner(1, TS)
    assert (s.min_timestamp, s.max_timestamp, s.records_done, s.complete) == (None, None, 0, False)
    with pytest.raises(ValueError):
        _scan.RecordScanner(-1, 0)
    with pytest.raises(TypeError):
        _scan.scan("text", 1, 0)
    with pytest.raises(BufferError):
        _scan.scan(memoryview(b"abcd")[::2], 1, 0)
    assert issubclass(_scan.RecordError, ValueError)
    big = b"".join(record(i, value=bytes(100)) for i in range(2000))  # > GIL_RELEASE_MIN
    assert len(big) > _scan.GIL_RELEASE_MIN
    assert _scan.scan(big, 2000, TS) == (TS, TS, -1)


def test_zstd_frame_walk() -> None:
    data = os.urandom(5000) + bytes(300_000)
    for level in (1, 3, 19):
        for kw in ({}, {"write_checksum": True}, {"write_content_size": False}):
            frame = zstandard.ZstdCompressor(level=level, **kw).compress(data)
            assert _scan.zstd_frames(frame) == 1
            assert _scan.zstd_frames(frame + frame) == 2
            for cut in (1, 4, 6, len(frame) // 2, len(frame) - 1):
                with pytest.raises(ValueError):
                    _scan.zstd_frames(frame[:cut])
    assert _scan.zstd_frames(zstandard.ZstdCompressor().compress(b"")) == 1
    with pytest.raises(ValueError, match="empty"):
        _scan.zstd_frames(b"")


def test_utf8_validator_exhaustive_short_sequences() -> None:
    def python_ok(b: bytes) -> bool:
        try:
            b.decode("utf-8")
        except UnicodeDecodeError:
            return False
        return True

    for a in range(256):
        one = bytes([a])
        assert _scan.utf8_valid(one) == python_ok(one), one
        for b in range(256):
            two = bytes([a, b])
            assert _scan.utf8_valid(two) == python_ok(two), two
    conts = range(0x70, 0xC6)
    for lead in range(0xE0, 0xF6):
        for b in conts:
            for c in conts:
                three = bytes([lead, b, c])
                assert _scan.utf8_valid(three) == python_ok(three), three
                four = three + b"\x80"
                assert _scan.utf8_valid(four) == python_ok(four), four


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=24) | st.text(max_size=12).map(lambda s: s.encode("utf-8", "surrogatepass")))
def test_utf8_validator_matches_python(data: bytes) -> None:
    try:
        data.decode("utf-8")
        ok = True
    except UnicodeDecodeError:
        ok = False
    assert _scan.utf8_valid(data) == ok
    assert _scan.utf8_valid(b"abcdefghij" + data + b"klmnopqrstu") == ok  # ASCII fast path around it


# --- property tests -----------------------------------------------------------------------------

_records = st.lists(
    st.builds(
        NewRecord,
        st.none() | st.binary(max_size=20),
        st.none() | st.binary(max_size=60),
        st.lists(st.tuples(st.text(max_size=8), st.none() | st.binary(max_size=8)), max_size=3),
        st.integers(min_value=-(2**42), max_value=2**42),
    ),
    min_size=1,
    max_size=40,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_records, st.sampled_from(CODECS), st.lists(st.integers(min_value=1, max_value=200), max_size=30))
def test_valid_records_round_trip(recs: list[NewRecord], codec: int, cuts: list[int]) -> None:
    raw = build_batch(recs, compression=codec)
    want = expected_scan(recs, raw)
    assert scan(raw) == want
    # the same section, fed in arbitrary pieces
    section = C.decompress(codec, memoryview(raw)[HEADER_SIZE:])
    s = _scan.RecordScanner(len(recs), recs[0].timestamp, compressed=bool(codec))  # type: ignore[arg-type]
    pos = 0
    for n in cuts:
        s.feed(section[pos : pos + n])
        pos += n
    s.feed(section[pos:], True)
    assert (s.min_timestamp, s.max_timestamp, s.first_null_key, s.scanned) == (
        want.min_timestamp, want.max_timestamp, want.first_null_key, want.uncompressed_size,
    )  # fmt: skip


# --- mutation corpus (bench/fuzz_records.py), in a child process so that a crash fails the test ---


def test_mutation_corpus_in_child_process() -> None:
    proc = subprocess.run(
        [sys.executable, str(FUZZ_RECORDS), "--max-cases", "4000", "--seed", "20260501", "--seconds", "500"],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert proc.stdout, f"no report; child exited {proc.returncode}\n{proc.stderr[-3000:]}"
    report = json.loads(proc.stdout)
    assert report["ok"] and proc.returncode == 0, (report["failures"][:3], proc.stderr[-3000:])
    stats = report["outcomes"]
    assert report["cases"] == sum(stats.values()) == 4000
    assert stats["accepted"] > 100 and stats["invalid_record"] > 1000 and stats["corrupt_message"] > 100, (
        stats
    )
