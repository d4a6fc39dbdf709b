"""Hostile load, the payloads: record batches Kafka refuses, decompression bombs, malformed frames.

Every batch carries a correct CRC32C, so only the record-level checks can refuse it. The frame
cases are complete requests (size prefix included) with what the broker is expected to do
with each (``judge_frame``).
"""

from __future__ import annotations

import random
import struct
import sys
import time
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

try:
    import shoal  # noqa: F401  (installed editable in the project venv)
except ImportError:  # run from a checkout without the package installed
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import zstandard
from crc32c import crc32c
from hostile_wire import (
    GIB,
    MIB,
    compact_string,
    frame,
    kio_body,
    legacy_string,
    metadata_request,
    request_header,
    tagged_fields,
    uvarint,
    zigzag,
)

from shoal.records.batch import ATTRIBUTES_OFFSET, CRC_OFFSET, HEADER_SIZE, HEADER_STRUCT, LOG_OVERHEAD

if TYPE_CHECKING:
    from hostile_load import Config

INVALID_REQUEST = 42
INT32_MAX = 2**31 - 1
HUGE_COMPACT_COUNT = b"\xff\xff\xff\xff\x0f"  # uvarint 0xffffffff: a compact array of 2^32-2 entries
# The 23-byte frame: Metadata v12 whose compact topics array claims 2^32-2 entries.
METADATA_V12_HUGE_ARRAY = bytes.fromhex("00000017" "0003" "000c" "00000c3e" "0004" "66757a7a" "00" "ffffffff0f" "000000")


# ---------------------------------------------------------------------------------------------
# Record batches, honest and not (always with a correct CRC32C)
# ---------------------------------------------------------------------------------------------


def rec_bytes(data: bytes | None, length: int | None = None) -> bytes:
    """A record key/value/header field: zigzag length (``length`` may lie) then the bytes."""
    if length is None:
        length = -1 if data is None else len(data)
    return zigzag(length) + (data or b"")


def raw_header(key: bytes, value: bytes | None, *, key_len: int | None = None, value_len: int | None = None) -> bytes:
    return rec_bytes(key, key_len) + rec_bytes(value, value_len)


def raw_record(
    *,
    offset_delta: int = 0,
    ts_delta: int = 0,
    key: bytes | None = b"k",
    value: bytes | None = b"hostile",
    key_len: int | None = None,
    value_len: int | None = None,
    headers: Iterable[bytes] = (),
    header_count: int | None = None,
    length: int | None = None,
) -> bytes:
    """One record (DefaultRecord layout) whose every length may be set to lie."""
    hs = list(headers)
    body = (
        b"\x00"
        + zigzag(ts_delta)
        + zigzag(offset_delta)
        + rec_bytes(key, key_len)
        + rec_bytes(value, value_len)
        + zigzag(len(hs) if header_count is None else header_count)
        + b"".join(hs)
    )
    return zigzag(len(body) if length is None else length) + body


def raw_batch(payload: bytes, *, count: int, last_offset_delta: int | None = None, codec: int = 0) -> bytes:
    """A v2 batch around ``payload`` (records, compressed or not) with the header fields given."""
    now = int(time.time() * 1000)
    out = bytearray(HEADER_SIZE + len(payload))
    lod = count - 1 if last_offset_delta is None else last_offset_delta
    HEADER_STRUCT.pack_into(out, 0, 0, len(out) - LOG_OVERHEAD, -1, 2, 0, codec, lod, now, now, -1, -1, -1, count)
    out[HEADER_SIZE:] = payload
    struct.pack_into(">I", out, CRC_OFFSET, crc32c(memoryview(out)[ATTRIBUTES_OFFSET:]))
    return bytes(out)


def hostile_batches() -> list[tuple[str, bytes]]:
    """(name, batch) of every batch the `batches` attack sends; Kafka refuses each one."""
    rnd = random.Random(1164)
    ok_header = raw_header(b"h", b"v")
    cases: list[tuple[str, bytes]] = [
        ("count_2^31-1_one_record", raw_batch(raw_record(), count=INT32_MAX, last_offset_delta=INT32_MAX - 1)),
        ("offset_delta_negative", raw_batch(raw_record(offset_delta=-1), count=1)),
        ("offset_deltas_0_7", raw_batch(raw_record(offset_delta=0) + raw_record(offset_delta=7), count=2)),
        ("offset_deltas_1_0", raw_batch(raw_record(offset_delta=1) + raw_record(offset_delta=0), count=2)),
        ("offset_deltas_0_0", raw_batch(raw_record(offset_delta=0) + raw_record(offset_delta=0), count=2)),
    ]
    lies = {"negative": -2, "int32_max": INT32_MAX, "past_batch_end": 10_000}
    for lie, n in lies.items():
        cases.append((f"record_length_{lie}", raw_batch(raw_record(length=-1 if lie == "negative" else n), count=1)))
        cases.append((f"key_length_{lie}", raw_batch(raw_record(key_len=n), count=1)))
        cases.append((f"value_length_{lie}", raw_batch(raw_record(value_len=n), count=1)))
        hk = -1 if lie == "negative" else n  # a header key is never null: -1 is a lie too
        cases.append((f"header_key_length_{lie}", raw_batch(raw_record(headers=[raw_header(b"h", b"v", key_len=hk)]), count=1)))
        cases.append((f"header_value_length_{lie}", raw_batch(raw_record(headers=[raw_header(b"h", b"v", value_len=n)]), count=1)))
    cases += [
        ("header_count_-3", raw_batch(raw_record(headers=[ok_header], header_count=-3), count=1)),
        ("header_key_invalid_utf8", raw_batch(raw_record(headers=[raw_header(b"\xff\xfe\xc3(", b"v")]), count=1)),
    ]
    for codec, name in ((1, "gzip"), (2, "snappy"), (3, "lz4"), (4, "zstd")):
        cases.append((f"{name}_garbage", raw_batch(rnd.randbytes(200), count=1, codec=codec)))
        cases.append((f"{name}_empty", raw_batch(b"", count=1, codec=codec)))
    return cases


def gzip_zeros(total: int) -> bytes:
    """A gzip stream of ``total`` zero bytes, compressed incrementally (never holds ``total``)."""
    comp = zlib.compressobj(9, zlib.DEFLATED, 31)
    chunk = memoryview(bytes(MIB))
    parts = []
    left = total
    while left > 0:
        n = min(left, len(chunk))
        parts.append(comp.compress(chunk[:n]))
        left -= n
    parts.append(comp.flush())
    return b"".join(parts)


def snappy_claiming(claimed: int) -> bytes:
    """An 18-byte raw snappy block whose preamble claims ``claimed`` bytes; it decodes to 204."""
    block = uvarint(claimed) + b"\x00\x00" + b"\xfe\x01\x00" * 3 + b"\x1d\x01"
    return block + b"\x00" * (18 - len(block)) if len(block) < 18 else block


def bomb_batches(bomb_bytes: int) -> list[tuple[str, bytes]]:
    xerial = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
    block = snappy_claiming(GIB)
    zstd_record = raw_record(key=None, value=b"", header_count=INT32_MAX, headers=[bytes(16 * MIB)])
    gz = gzip_zeros(bomb_bytes)
    return [
        (f"gzip_zeros_{bomb_bytes // MIB}MiB", raw_batch(gz, count=1, codec=1)),
        ("snappy_xerial_claims_1GiB", raw_batch(xerial + struct.pack(">i", len(block)) + block, count=1, codec=2)),
        ("snappy_raw_claims_1GiB", raw_batch(block, count=1, codec=2)),
        ("zstd_header_count_2^31-1_16MiB_zeros", raw_batch(zstandard.ZstdCompressor().compress(zstd_record), count=1, codec=4)),
    ]


# ---------------------------------------------------------------------------------------------
# Malformed frames
# ---------------------------------------------------------------------------------------------


@dataclass
class FrameCase:
    name: str
    api_key: int
    version: int
    payload: bytes  # complete frame including size prefix
    expect: str  # refused | answered | error_42


def frame_cases(cfg: Config) -> list[FrameCase]:
    cid = 0x0C3E
    topic = cfg.topic_classic

    def hdr(api_key: int, version: int, flexible: bool = True, tags: bytes = b"\x00") -> bytes:
        return request_header(api_key, version, cid, flexible=flexible, tags=tags)

    huge = HUGE_COMPACT_COUNT
    cases = [
        # Unknown tagged fields: a broker skips them and answers normally.
        FrameCase("metadata_v12_unknown_header_tag", 3, 12, frame(hdr(3, 12, tags=tagged_fields({4242: b"hostile"})) + kio_body(metadata_request([topic]))), "answered"),
        FrameCase("metadata_v12_unknown_body_tag", 3, 12, frame(hdr(3, 12) + kio_body(metadata_request([topic]))[:-1] + tagged_fields({77: b"\x00\x01\x02", 9000: b""})), "answered"),
        FrameCase("api_versions_v3_unknown_tags", 18, 3, frame(hdr(18, 3, tags=tagged_fields({1: b"x"})) + compact_string("hostile") + compact_string("1.0") + tagged_fields({5: b"yy"})), "answered"),
        # ApiVersions v3: ClientSoftwareName/Version must match [a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?
        FrameCase("api_versions_v3_empty_software_name", 18, 3, frame(hdr(18, 3) + compact_string("") + compact_string("1.0") + b"\x00"), "error_42"),
        FrameCase("api_versions_v3_invalid_software_name", 18, 3, frame(hdr(18, 3) + compact_string("bad name!") + compact_string("1.0") + b"\x00"), "error_42"),
        FrameCase("api_versions_v3_invalid_software_version", 18, 3, frame(hdr(18, 3) + compact_string("hostile") + compact_string("-1.0 ") + b"\x00"), "error_42"),
        # Null (compact 0 / legacy -1) where the array is not nullable.
        FrameCase("produce_v9_null_topic_data", 0, 9, frame(hdr(0, 9) + b"\x00" + struct.pack(">hi", -1, 10000) + b"\x00" + b"\x00"), "refused"),
        FrameCase("produce_v3_null_topic_data", 0, 3, frame(hdr(0, 3, False) + legacy_string(None) + struct.pack(">hii", -1, 10000, -1)), "refused"),
        FrameCase("fetch_v12_null_topics", 1, 12, frame(hdr(1, 12) + struct.pack(">iiiibii", -1, 0, 1, MIB, 0, 0, -1) + b"\x00" + b"\x01" + b"\x01" + b"\x00"), "refused"),
        FrameCase("fetch_v4_null_topics", 1, 4, frame(hdr(1, 4, False) + struct.pack(">iiiibi", -1, 0, 1, MIB, 0, -1)), "refused"),
        FrameCase("list_offsets_v7_null_topics", 2, 7, frame(hdr(2, 7) + struct.pack(">ib", -1, 0) + b"\x00" + b"\x00"), "refused"),
        FrameCase("list_offsets_v1_null_topics", 2, 1, frame(hdr(2, 1, False) + struct.pack(">ii", -1, -1)), "refused"),
        FrameCase("offset_commit_v8_null_topics", 8, 8, frame(hdr(8, 8) + compact_string("hostile-group") + struct.pack(">i", -1) + compact_string("") + b"\x00" + b"\x00" + b"\x00"), "refused"),
        FrameCase("offset_commit_v2_null_topics", 8, 2, frame(hdr(8, 2, False) + legacy_string("hostile-group") + struct.pack(">i", -1) + legacy_string("") + struct.pack(">qi", -1, -1)), "refused"),
        FrameCase("join_group_v6_null_protocols", 11, 6, frame(hdr(11, 6) + compact_string("hostile-group") + struct.pack(">ii", 10000, 10000) + compact_string("") + b"\x00" + compact_string("consumer") + b"\x00" + b"\x00"), "refused"),
        FrameCase("join_group_v0_null_protocols", 11, 0, frame(hdr(11, 0, False) + legacy_string("hostile-group") + struct.pack(">i", 10000) + legacy_string("") + legacy_string("consumer") + struct.pack(">i", -1)), "refused"),
        # Arrays that claim 2^32-2 (compact) or 2^31-1 (legacy) entries in a few bytes.
        FrameCase("metadata_v12_23_byte_frame", 3, 12, METADATA_V12_HUGE_ARRAY, "refused"),
        FrameCase("create_topics_v5_array_2^32-2", 19, 5, frame(hdr(19, 5) + huge + struct.pack(">ib", 30000, 0) + b"\x00"), "refused"),
        FrameCase("list_offsets_v7_array_2^32-2", 2, 7, frame(hdr(2, 7) + struct.pack(">ib", -1, 0) + huge + b"\x00"), "refused"),
        FrameCase("fetch_v12_array_2^32-2", 1, 12, frame(hdr(1, 12) + struct.pack(">iiiibii", -1, 0, 1, MIB, 0, 0, -1) + huge + b"\x01\x01\x00"), "refused"),
        FrameCase("find_coordinator_v4_array_2^32-2", 10, 4, frame(hdr(10, 4) + b"\x00" + huge + b"\x00"), "refused"),
        FrameCase("produce_v9_array_2^32-2", 0, 9, frame(hdr(0, 9) + b"\x00" + struct.pack(">hi", -1, 10000) + huge + b"\x00"), "refused"),
        FrameCase("metadata_v4_array_2^31-1", 3, 4, frame(hdr(3, 4, False) + struct.pack(">ib", INT32_MAX, 0)), "refused"),
    ]
    return cases


def judge_frame(expect: str, outcome: dict[str, Any]) -> bool:
    codes = outcome.get("error_codes")
    if expect == "answered":
        return outcome["answer"] == "response" and codes is not None and not any(codes)
    if expect == "error_42":
        return outcome["answer"] == "response" and codes is not None and INVALID_REQUEST in codes
    # refused: Kafka closes the connection on a request it cannot parse; an error reply is fine too.
    return outcome["answer"] == "closed" or (outcome["answer"] == "response" and bool(codes) and any(codes))
