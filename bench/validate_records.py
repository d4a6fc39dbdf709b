#!/usr/bin/env python3
"""Cost of record-level validation on produce: ``scan_batch`` next to ``validate_records``.

``validate_records`` is the batch-level check every produce already pays (framing, magic,
CRC32C over the batch, count); ``scan_batch`` (records/validate.py) decompresses the records
section as a bounded stream and checks every record in C. For 16 KiB and 1 MiB batches
(uncompressed records section) of 100-byte and 1 KiB records, with every codec, it reports
microseconds per batch of each and MB/s of scan_batch, and prints one JSON document on
stdout (progress on stderr). Nothing else runs: no broker, no client.

Example::

    .venv/bin/python bench/validate_records.py
    .venv/bin/python bench/validate_records.py --min-time 0.5 --output bench/results/validate-$(date +%H%M%S).json
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import random
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from shoal.records.batch import HEADER_SIZE, validate_records
from shoal.records.codec import NewRecord, build_batch
from shoal.records.compression import CODEC_NAMES, decompress
from shoal.records.validate import max_uncompressed_for, scan_batch

MB = 1_000_000
KIB = 1 << 10
MIB = 1 << 20
MAX_BATCH = 64 * MIB
WORDS = [
    b"kafka", b"broker", b"record", b"batch", b"offset", b"topic", b"partition", b"leader",
    b"replica", b"consumer", b"producer", b"commit", b"segment", b"object", b"storage", b"value",
    b"user", b"order", b"event", b"id", b"status", b"ok", b"error", b"latency", b"region",
]  # fmt: skip


def log(msg: str) -> None:
    print(f"[validate-bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def payload(rng: random.Random, size: int) -> bytes:
    """JSON-ish text with a random number in it: compresses about 3-5x, like real event data."""
    out = bytearray()
    while len(out) < size:
        out += b'"%s":%d,' % (rng.choice(WORDS), rng.randrange(1_000_000))
    return bytes(out[:size])


def make_batch(
    section_bytes: int, record_size: int, codec: int, rng: random.Random
) -> tuple[bytes, int, int]:
    """A batch whose uncompressed records section is about ``section_bytes``; (batch, records, section size)."""
    per_record = record_size + 20  # key, varints, attributes
    count = max(1, section_bytes // per_record)
    now = 1_700_000_000_000
    recs = [NewRecord(b"key-%08d" % i, payload(rng, record_size), (), now + i) for i in range(count)]
    raw = build_batch(recs, compression=codec)
    section = len(decompress(codec, memoryview(raw)[HEADER_SIZE:]))
    return raw, count, section


def per_call_us(fn: Callable[[], object], min_time: float, repeats: int) -> dict[str, float]:
    """Median and best of ``repeats`` timings, each of enough calls to last ``min_time`` / repeats."""
    fn()  # warm up
    n = 1
    while True:
        start = time.perf_counter()
        for _ in range(n):
            fn()
        took = time.perf_counter() - start
        if took >= min_time / repeats / 4 or n >= 1 << 20:
            break
        n *= 4
    loops = max(1, int(n * (min_time / repeats) / max(took, 1e-9)))
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(loops):
            fn()
        samples.append((time.perf_counter() - start) / loops * 1e6)
    return {"median": statistics.median(samples), "best": min(samples), "calls": loops * repeats}


def run_case(section_bytes: int, record_size: int, codec: int, args: argparse.Namespace) -> dict[str, Any]:
    rng = random.Random(f"{section_bytes}-{record_size}-{codec}")
    raw, count, section = make_batch(section_bytes, record_size, codec, rng)
    view = memoryview(raw)
    [(_, header)] = validate_records(raw, MAX_BATCH)
    limit = max_uncompressed_for(MAX_BATCH)
    check = per_call_us(lambda: validate_records(raw, MAX_BATCH), args.min_time, args.repeats)
    scan = per_call_us(lambda: scan_batch(view, header, max_uncompressed=limit), args.min_time, args.repeats)
    result = {
        "batch": f"{section_bytes // KIB} KiB" if section_bytes < MIB else f"{section_bytes // MIB} MiB",
        "record_size": record_size,
        "codec": CODEC_NAMES[codec],
        "records": count,
        "section_bytes": section,
        "batch_bytes": len(raw),
        "validate_records_us": round(check["median"], 2),
        "scan_batch_us": round(scan["median"], 2),
        "scan_batch_best_us": round(scan["best"], 2),
        "scan_batch_mb_per_s": round(section / scan["median"], 1),  # bytes/us == MB/s
        "scan_batch_us_per_record": round(scan["median"] / count, 4),
        "scan_vs_validate": round(scan["median"] / check["median"], 2),
    }
    log(
        f"{result['batch']:>7} x {record_size:>4} B {result['codec']:>6}: validate_records "
        f"{result['validate_records_us']:>9.1f} us, scan_batch {result['scan_batch_us']:>9.1f} us "
        f"({result['scan_batch_mb_per_s']:.0f} MB/s)"
    )
    return result


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--min-time", type=float, default=0.3, help="seconds of timing per measurement")
    parser.add_argument("--repeats", type=int, default=5, help="timings per measurement (median reported)")
    parser.add_argument("--codecs", default="none,gzip,snappy,lz4,zstd")
    parser.add_argument("--output", help="also write the JSON to this file")
    args = parser.parse_args()
    codec_ids = {name: cid for cid, name in CODEC_NAMES.items()}
    codecs = [codec_ids[c.strip()] for c in args.codecs.split(",") if c.strip()]
    started = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    load_start = os.getloadavg()
    cases = [
        run_case(size, record_size, codec, args)
        for size in (16 * KIB, MIB)
        for record_size in (100, 1024)
        for codec in codecs
    ]
    doc = {
        "benchmark": "validate_records",
        "started_at": started,
        "host": {
            "hostname": platform.node(),
            "platform": platform.platform(),
            "python": platform.python_version(),
        },
        "cpu_count": os.cpu_count(),
        "load_avg": {
            "start": [round(x, 2) for x in load_start],
            "end": [round(x, 2) for x in os.getloadavg()],
        },
        "config": {"min_time_s": args.min_time, "repeats": args.repeats},
        "cases": cases,
    }
    text = json.dumps(doc, indent=2)
    print(text)
    if args.output:
        with open(args.output, "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
