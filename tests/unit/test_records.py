"""RecordBatch v2: hot-path validation and stamping, codecs, and interop with real client libraries."""

from __future__ import annotations

import os
import struct

import cramjam
import pytest
import zstandard
from crc32c import crc32c

from shoal.protocol.errors import ErrorCode, KafkaError
from shoal.records import batch as B
from shoal.records.batch import BatchHeader, crc_of, read_header, stamp_batch, validate_records
from shoal.records.codec import (
    CONTROL_COMMIT,
    NewRecord,
    Record,
    build_batch,
    build_control_batch,
    control_record_type,
    decode_batch,
    iter_batches,
)
from shoal.records.compression import compress, decompress

CODECS = [0, 1, 2, 3, 4]
MAX = 1 << 20
TS = 1_700_000_000_000


def sample_records(n: int = 5) -> list[NewRecord]:
    """Compressible records with the awkward cases: null key/value, headers, a null header value."""
    recs = []
    for i in range(n):
        key = None if i == 1 else f"key-{i}".encode()
        value = None if i == 2 else (b"value-%d-" % i) * 40
        headers = [("h", b"1"), ("null", None)] if i % 2 == 0 else []
        recs.append(NewRecord(key, value, headers, TS + i * 7 - (3 if i == 3 else 0)))
    return recs


def expected(recs: list[NewRecord], base_offset: int = 0) -> list[Record]:
    return [
        Record(base_offset + i, r.timestamp, r.key, r.value, tuple(r.headers))  # type: ignore[arg-type]
        for i, r in enumerate(recs)
    ]


def patch(buf: bytes, fmt: str, offset: int, value: int, fix_crc: bool = True) -> bytes:
    """Overwrite one header field, then (optionally) make the CRC valid again."""
    out = bytearray(buf)
    struct.pack_into(fmt, out, offset, value)
    if fix_crc:
        struct.pack_into(">I", out, B.CRC_OFFSET, crc_of(out, 0, len(out)))
    return bytes(out)


def error_of(records: bytes, **kwargs: object) -> KafkaError:
    with pytest.raises(KafkaError) as info:
        validate_records(records, MAX, **kwargs)  # type: ignore[arg-type]
    return info.value


@pytest.fixture
def kp_snappy(monkeypatch: pytest.MonkeyPatch) -> None:
    """kafka-python needs python-snappy for snappy; give it cramjam's raw snappy instead."""
    import kafka.codec

    class _Snappy:
        compress = staticmethod(lambda b: bytes(cramjam.snappy.compress_raw(b)))
        decompress = staticmethod(lambda b: bytes(cramjam.snappy.decompress_raw(b)))

    monkeypatch.setattr(kafka.codec, "snappy", _Snappy)


# --- header layout and properties -------------------------------------------------------------


def test_header_layout_matches_kafka() -> None:
    assert B.HEADER_STRUCT.size == B.HEADER_SIZE == 61
    assert struct.calcsize(">qii") == B.MAGIC_OFFSET
    assert struct.calcsize(">qiibI") == B.ATTRIBUTES_OFFSET
    assert struct.calcsize(">qiibIhiqqqhi") == B.RECORDS_COUNT_OFFSET
    assert B.MIN_BATCH_LENGTH == 49


def test_header_properties() -> None:
    h = BatchHeader(10, 100, 3, 2, 0, 0x08 | 0x10 | 0x20 | 3, 4, TS, TS, 7, 1, 2**31 - 2, 5)
    assert h.compression == 3
    assert h.timestamp_type == 1
    assert h.is_transactional and h.is_control and h.has_producer_id
    assert h.size == 112
    assert h.last_offset == 14
    assert h.next_offset == 15
    assert h.last_sequence == 2  # MAX-1, MAX, 0, 1, 2: wraps like Kafka's producer
    h.base_sequence = 5
    assert h.last_sequence == 9
    h.base_sequence = -1
    assert h.last_sequence == -1
    plain = BatchHeader(0, 49, -1, 2, 0, 0, 0, 0, 0, -1, -1, -1, 1)
    assert plain.compression == 0 and plain.timestamp_type == 0
    assert not (plain.is_transactional or plain.is_control or plain.has_producer_id)


# --- round trips ------------------------------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS)
def test_roundtrip_every_codec(codec: int) -> None:
    recs = sample_records()
    raw = build_batch(
        recs,
        compression=codec,
        producer_id=42,
        producer_epoch=3,
        base_sequence=17,
        is_transactional=True,
    )
    [(pos, h)] = validate_records(raw, MAX)
    assert pos == 0
    assert (h.magic, h.compression, h.records_count, h.last_offset_delta) == (2, codec, 5, 4)
    assert (h.producer_id, h.producer_epoch, h.base_sequence, h.last_sequence) == (42, 3, 17, 21)
    assert h.is_transactional and not h.is_control
    assert h.base_timestamp == TS and h.max_timestamp == max(r.timestamp for r in recs)
    assert h.crc == crc_of(raw, 0, len(raw)) and h.size == len(raw)
    header, decoded = decode_batch(memoryview(raw))
    assert header == h
    assert decoded == expected(recs)


def test_several_batches_split_and_iterate() -> None:
    parts = [build_batch(sample_records(i + 1), compression=i % 5) for i in range(4)]
    blob = b"".join(parts)
    found = validate_records(memoryview(blob), MAX)
    positions = [sum(len(p) for p in parts[:i]) for i in range(4)]
    assert [p for p, _ in found] == positions
    assert [(p, h) for p, h in iter_batches(blob)] == found
    for (p, _), recs in zip(found, [sample_records(i + 1) for i in range(4)], strict=True):
        assert decode_batch(blob, p)[1] == expected(recs)


def test_iter_batches_stops_at_partial_tail() -> None:
    one = build_batch(sample_records(2))
    blob = one + one[:30]
    assert [p for p, _ in iter_batches(blob)] == [0]
    assert [p for p, _ in iter_batches(one + one[:-1])] == [0]


def test_validate_accepts_sliced_and_char_memoryviews() -> None:
    one = build_batch(sample_records(2))
    buf = bytearray(b"junk" + one)
    [(pos, h)] = validate_records(memoryview(buf)[4:], MAX)
    assert pos == 0 and h.records_count == 2
    assert validate_records(memoryview(one).cast("c"), MAX)[0][1].records_count == 2
    assert [p for p, _ in iter_batches(memoryview(one).cast("c"))] == [0]


# --- stamping ---------------------------------------------------------------------------------


@pytest.mark.parametrize("codec", [0, 3])
def test_stamp_offsets_keeps_crc(codec: int) -> None:
    recs = sample_records()
    raw = build_batch(recs, compression=codec)
    buf = bytearray(b"\xff" * 9 + raw)
    stamp_batch(memoryview(buf), 9, 1000, partition_leader_epoch=7)
    stamped = bytes(buf[9:])
    assert stamped[B.CRC_OFFSET : B.CRC_OFFSET + 4] == raw[B.CRC_OFFSET : B.CRC_OFFSET + 4]
    [(_, h)] = validate_records(stamped, MAX, from_client=False)
    assert (h.base_offset, h.partition_leader_epoch, h.last_offset) == (1000, 7, 1004)
    assert h.timestamp_type == 0
    assert decode_batch(stamped)[1] == expected(recs, 1000)


@pytest.mark.parametrize("codec", [0, 4])
def test_stamp_log_append_time_recomputes_crc(codec: int) -> None:
    recs = sample_records()
    raw = build_batch(recs, compression=codec, producer_id=5, producer_epoch=0, base_sequence=0)
    buf = bytearray(raw)
    lat = TS + 99_999
    stamp_batch(buf, 0, 50, 2, log_append_time=lat)
    [(_, h)] = validate_records(bytes(buf), MAX, from_client=False)
    assert h.timestamp_type == 1 and h.max_timestamp == lat and h.base_timestamp == TS
    assert h.crc != read_header(raw).crc
    assert h.attributes & ~B.TIMESTAMP_TYPE_FLAG == read_header(raw).attributes
    _, decoded = decode_batch(bytes(buf))
    assert [r.timestamp for r in decoded] == [lat] * len(recs)
    assert [r.offset for r in decoded] == list(range(50, 55))
    # Stamping again with the same time changes nothing (Kafka skips the CRC then).
    before = bytes(buf)
    stamp_batch(buf, 0, 50, 2, log_append_time=lat)
    assert bytes(buf) == before


# --- validation errors ------------------------------------------------------------------------


def test_crc_corruption_detected() -> None:
    raw = build_batch(sample_records())
    for where in (B.ATTRIBUTES_OFFSET + 1, B.PRODUCER_ID_OFFSET, len(raw) - 1, 100):
        bad = bytearray(raw)
        bad[where] ^= 0x01
        err = error_of(bytes(bad))
        assert err.code == ErrorCode.corrupt_message
        assert "does not match" in err.message and "CRC" in err.message
    # The leader epoch is outside the CRC: patching it is fine.
    assert validate_records(patch(raw, ">i", B.PARTITION_LEADER_EPOCH_OFFSET, 9, fix_crc=False), MAX)


def test_old_magic_is_rejected() -> None:
    raw = patch(build_batch(sample_records()), ">b", B.MAGIC_OFFSET, 1, fix_crc=False)
    err = error_of(raw)
    assert err.code == ErrorCode.unsupported_for_message_format and "magic 1" in err.message
    err = error_of(raw, produce_version=3)
    assert err.code == ErrorCode.invalid_record and "magic version 2" in err.message
    assert error_of(patch(raw, ">b", B.MAGIC_OFFSET, 9, fix_crc=False)).code == ErrorCode.corrupt_message
    with pytest.raises(KafkaError) as info:
        list(iter_batches(raw))
    assert info.value.code == ErrorCode.unsupported_for_message_format


def test_truncated_and_inconsistent_lengths() -> None:
    raw = build_batch(sample_records())
    for cut in (raw[:-1], raw[:40], raw[:10], raw + raw[:16], raw + raw[:60]):
        err = error_of(cut)
        assert err.code == ErrorCode.corrupt_message and "truncated" in err.message
    err = error_of(patch(raw, ">i", B.BATCH_LENGTH_OFFSET, 48, fix_crc=False))
    assert err.code == ErrorCode.corrupt_message and "minimum 49" in err.message
    err = error_of(patch(raw, ">i", B.BATCH_LENGTH_OFFSET, -5, fix_crc=False))
    assert err.code == ErrorCode.corrupt_message


def test_empty_records() -> None:
    assert error_of(b"").code == ErrorCode.invalid_record
    err = error_of(b"", produce_version=9)
    assert err.code == ErrorCode.invalid_record and "at least one record batch" in err.message


def test_too_large() -> None:
    raw = build_batch(sample_records())
    with pytest.raises(KafkaError) as info:
        validate_records(raw, len(raw) - 1)
    assert info.value.code == ErrorCode.message_too_large and str(len(raw)) in info.value.message
    assert validate_records(raw, len(raw))


def test_bad_counts() -> None:
    raw = build_batch(sample_records())
    err = error_of(patch(raw, ">i", B.RECORDS_COUNT_OFFSET, 4))
    assert err.code == ErrorCode.invalid_record and "Inconsistent" in err.message
    err = error_of(patch(patch(raw, ">i", B.RECORDS_COUNT_OFFSET, 0), ">i", B.LAST_OFFSET_DELTA_OFFSET, -1))
    assert err.code == ErrorCode.invalid_record
    err = error_of(patch(raw, ">i", B.RECORDS_COUNT_OFFSET, 0))
    assert err.code == ErrorCode.invalid_record and "count" in err.message


def test_unknown_codec_and_zstd_needs_produce_v7() -> None:
    raw = build_batch(sample_records())
    err = error_of(patch(raw, ">h", B.ATTRIBUTES_OFFSET, 5))
    assert err.code == ErrorCode.unsupported_compression_type
    zstd = build_batch(sample_records(), compression=4)
    assert error_of(zstd, produce_version=6).code == ErrorCode.unsupported_compression_type
    assert validate_records(zstd, MAX, produce_version=7)


def test_client_rules() -> None:
    raw = build_batch(sample_records())
    err = error_of(patch(raw, ">q", B.BASE_OFFSET_OFFSET, 3, fix_crc=False))
    assert err.code == ErrorCode.invalid_record and "baseOffset" in err.message
    assert validate_records(patch(raw, ">q", 0, 3, fix_crc=False), MAX, from_client=False)
    err = error_of(build_batch(sample_records(), producer_id=8, producer_epoch=0))
    assert err.code == ErrorCode.invalid_record and "sequence" in err.message
    err = error_of(raw + raw, produce_version=3)
    assert err.code == ErrorCode.invalid_record and "exactly one" in err.message
    assert len(validate_records(raw + raw, MAX)) == 2


def test_control_batch() -> None:
    raw = build_control_batch(True, producer_id=9, producer_epoch=2, coordinator_epoch=4, base_offset=30)
    assert error_of(raw).code == ErrorCode.invalid_record  # baseOffset, then control: both client errors
    [(_, h)] = validate_records(raw, MAX, from_client=False)
    assert h.is_control and h.is_transactional and h.producer_id == 9
    header, [rec] = decode_batch(raw)
    assert control_record_type(rec) == CONTROL_COMMIT and rec.offset == 30
    assert struct.unpack(">hi", rec.value or b"") == (0, 4)
    err = error_of(patch(raw, ">q", 0, 0, fix_crc=False))
    assert err.code == ErrorCode.invalid_record and "control records" in err.message


def test_decode_rejects_bad_record_data() -> None:
    raw = bytearray(build_batch([(b"k", b"v")]))
    raw[B.HEADER_SIZE] += 2  # record length varint now overstates the record
    struct.pack_into(">I", raw, B.CRC_OFFSET, crc_of(raw, 0, len(raw)))
    with pytest.raises(KafkaError) as info:
        decode_batch(bytes(raw))
    assert info.value.code == ErrorCode.corrupt_message
    good = build_batch([(b"k", b"v")])
    bad = patch(good, ">i", B.RECORDS_COUNT_OFFSET, 2)
    with pytest.raises(KafkaError):
        decode_batch(bad)
    flipped = bytearray(good)
    flipped[-1] ^= 1
    with pytest.raises(KafkaError, match="does not match"):
        decode_batch(bytes(flipped))


# --- compression ------------------------------------------------------------------------------


def test_compression_formats() -> None:
    data = (b"kafka record data " * 5000) + os.urandom(3000)
    for codec in CODECS:
        assert decompress(codec, memoryview(compress(codec, data))) == data
    xerial = compress(2, data)
    assert xerial[:16] == b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
    assert decompress(2, bytes(cramjam.snappy.compress_raw(data))) == data  # librdkafka style
    assert decompress(2, xerial + xerial[16:]) == data + data  # extra blocks
    assert decompress(2, xerial + xerial) == data + data  # concatenated streams
    lz4 = compress(3, data)
    assert lz4[:4] == b"\x04\x22\x4d\x18" and lz4[4] & 0x20  # frame magic, independent blocks
    cobj = zstandard.ZstdCompressor(write_content_size=False).compressobj()
    no_size = cobj.compress(data) + cobj.flush()
    assert decompress(4, no_size) == data
    assert compress(1, data)[:2] == b"\x1f\x8b"


def test_compression_errors() -> None:
    with pytest.raises(KafkaError) as info:
        compress(5, b"x")
    assert info.value.code == ErrorCode.unsupported_compression_type
    with pytest.raises(KafkaError) as info:
        decompress(6, b"x")
    assert info.value.code == ErrorCode.unsupported_compression_type
    for codec in (1, 2, 3, 4):
        with pytest.raises(KafkaError) as info:
            decompress(codec, compress(codec, b"abc" * 1000)[:-7])
        assert info.value.code == ErrorCode.corrupt_message


# --- interop with kafka-python and aiokafka ---------------------------------------------------


def _kp_build(cls: type, codec: int, recs: list[NewRecord]) -> bytes:
    builder = cls(magic=2, compression_type=codec, is_transactional=0, producer_id=-1,
                  producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)  # fmt: skip
    for i, r in enumerate(recs):
        assert builder.append(i, timestamp=r.timestamp, key=r.key, value=r.value, headers=list(r.headers))
    return bytes(builder.build())


def _their_records(batch: object) -> list[Record]:
    return [
        Record(r.offset, r.timestamp, r.key, r.value, tuple(tuple(h) for h in r.headers))  # type: ignore[attr-defined]
        for r in batch  # type: ignore[attr-defined]
    ]


@pytest.mark.parametrize("codec", CODECS)
def test_kafka_python_batches_decode(codec: int, kp_snappy: None) -> None:
    from kafka.record.default_records import DefaultRecordBatchBuilder

    recs = sample_records(20)
    raw = _kp_build(DefaultRecordBatchBuilder, codec, recs)
    [(_, h)] = validate_records(raw, MAX, produce_version=9)
    assert h.compression == codec
    assert decode_batch(raw)[1] == expected(recs)


@pytest.mark.parametrize("codec", CODECS)
def test_kafka_python_reads_our_batches(codec: int, kp_snappy: None) -> None:
    from kafka.record.default_records import DefaultRecordBatch

    recs = sample_records(20)
    buf = bytearray(build_batch(recs, compression=codec, producer_id=4, producer_epoch=1, base_sequence=0))
    stamp_batch(buf, 0, 100, 3)
    theirs = DefaultRecordBatch(bytes(buf))
    assert theirs.validate_crc()
    assert (theirs.compression_type, theirs.base_offset, theirs.records_count) == (codec, 100, 20)
    assert (theirs.producer_id, theirs.last_sequence) == (4, 19)
    assert _their_records(theirs) == expected(recs, 100)
    stamp_batch(buf, 0, 100, 3, log_append_time=TS + 5)
    theirs = DefaultRecordBatch(bytes(buf))
    assert theirs.validate_crc() and theirs.timestamp_type == 1
    assert {r.timestamp for r in theirs} == {TS + 5}


@pytest.mark.parametrize("codec", [2, 3])
def test_aiokafka_interop(codec: int) -> None:
    from aiokafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

    recs = sample_records(20)
    raw = _kp_build(DefaultRecordBatchBuilder, codec, recs)
    [(_, h)] = validate_records(raw, MAX)
    assert h.compression == codec and decode_batch(raw)[1] == expected(recs)
    ours = build_batch(recs, compression=codec, base_offset=7)
    theirs = DefaultRecordBatch(ours)
    assert theirs.validate_crc() and theirs.compression_type == codec
    assert _their_records(theirs) == expected(recs, 7)


def test_crc_helper_matches_library() -> None:
    raw = build_batch(sample_records())
    assert crc_of(raw, 0, len(raw)) == crc32c(raw[B.ATTRIBUTES_OFFSET :]) == read_header(raw).crc
