#!/usr/bin/env python3
"""Fuzz Shoal's record-level validation: ``scan_batch`` over mutated batches of every codec.

``scan_batch`` (``shoal/records/validate.py``) decompresses a client's batch and feeds it to
a hand-written C scanner (``shoal/records/_scan.c``); both see bytes a producer chose. Whatever
they are, once ``validate_records`` accepted the batch (framing, CRC, count), the only allowed
outcomes are: accepted, and then the reference decoder (``codec.decode_batch``) agrees on the
count, the smallest and largest timestamp, the first null key and offsets 0..n-1; or a
KafkaError CORRUPT_MESSAGE or INVALID_RECORD. Anything else is a finding: another exception,
another error code, a disagreement, a crash of the process (the C code is the reason this
exists), a case that does not finish.

Inputs are valid batches (records with null, empty and binary keys and values, headers with
null values and non-ASCII keys) whose records section is mutated and compressed again, or
whose compressed payload is mutated (codecs 1-4). A mutated section is also fed to the C
scanner in random-sized chunks, which must reach scan_batch's verdict (the same record index
for an error). The fuzzing runs in a child process that writes every batch to a shared file
before scanning it, so a crash or a hang is reported with its input. ``--atheris`` lets
atheris (libFuzzer, coverage of ``shoal.records``' Python code) drive the mutations.

Prints one JSON document on stdout, progress on stderr. Exit status 0 when nothing was found.
"""

from __future__ import annotations

import argparse
import json
import mmap
import os
import random
import struct
import subprocess
import sys
import tempfile
import time
import traceback
import types
from pathlib import Path
from typing import Any, NamedTuple

from shoal.protocol.errors import ErrorCode, KafkaError, RecordValidationError
from shoal.records import _scan
from shoal.records import compression as C
from shoal.records.batch import CRC_OFFSET, HEADER_SIZE, HEADER_STRUCT, crc_of, validate_records
from shoal.records.codec import NewRecord, build_batch, decode_batch
from shoal.records.validate import scan_batch

TS = 1_700_000_000_000
MiB = 1 << 20
CODECS = (0, 1, 2, 3, 4)
MAX_INPUT = 4 * MiB  # largest batch written to the shared "current input" file
MAX_FAILURES = 50  # failures kept in the report (all are counted)
_CURRENT = struct.Struct(">QI")  # cases started, length of the input that follows
_ALLOWED = (ErrorCode.corrupt_message, ErrorCode.invalid_record)
_BASE_TS = (2**63 - 1, -(2**63), 0, -1)
_BYTES = (0x00, 0x01, 0x7F, 0x80, 0xFF, 0xFE, 0xC0, 0xED, 0xF4)
_INSERTS = (b"\xff", b"\x80\x80\x80\x80\x0f", b"\x01", b"\xfe\xff\xff\xff\x0f")
_VALUES = (-1, -2, -3, 2**31 - 1, -(2**31), 0, 1, 127)

# --------------------------------------------------------------------------- batches


def zz(value: int) -> bytes:
    """Zigzag varlong (also a valid varint for 32-bit values), as Kafka writes them."""
    u = ((value << 1) ^ (value >> 63)) & ((1 << 64) - 1)
    out = bytearray()
    while u >= 0x80:
        out.append((u & 0x7F) | 0x80)
        u >>= 7
    out.append(u)
    return bytes(out)


def make_batch(
    section: bytes, count: int, codec: int = 0, *, payload: bytes | None = None, base_ts: int = TS
) -> bytes:
    """A v2 batch around any records section (compressed with ``codec``) or raw ``payload``; CRC fixed."""
    if payload is None:
        payload = C.compress(codec, section) if codec else section
    out = bytearray(HEADER_SIZE + len(payload))
    HEADER_STRUCT.pack_into(
        out, 0, 0, len(out) - 12, -1, 2, 0, codec, count - 1, base_ts, base_ts, -1, -1, -1, count
    )
    out[HEADER_SIZE:] = payload
    struct.pack_into(">I", out, CRC_OFFSET, crc_of(out, 0, len(out)))
    return bytes(out)


def sample_records(n: int = 6) -> list[NewRecord]:
    """Null key and value, empty key and value, headers with a null value and a non-ASCII key,
    timestamps out of order (the smallest is not the first)."""
    recs = []
    for i in range(n):
        key = None if i == 1 else (b"" if i == 4 else f"key-{i}".encode())
        value = None if i == 2 else (b"" if i == 3 else (b"value-%d-" % i) * 30)
        headers = [("h", b"1"), ("null", None), ("clé-😀", b"")] if i % 2 == 0 else []
        recs.append(NewRecord(key, value, headers, TS + i * 7 - (50 if i == 3 else 0)))
    return recs


def _corpus_batches() -> list[tuple[list[NewRecord], int]]:
    return [(sample_records(n), codec) for n in (1, 3, 12) for codec in CODECS]


class Seed(NamedTuple):
    count: int
    codec: int
    section: bytes  # the uncompressed records section
    payload: bytes  # what the batch carries after its header


def build_corpus() -> list[Seed]:
    out = []
    for recs, codec in _corpus_batches():
        raw = build_batch(recs, compression=codec)
        payload = bytes(raw[HEADER_SIZE:])
        out.append(Seed(len(recs), codec, C.decompress(codec, payload), payload))
    return out


# --------------------------------------------------------------------------- mutations


def _mutate(rng: random.Random, data: bytes, others: tuple[bytes, ...] = ()) -> bytes:
    """1-8 byte-level mutations: bit flips, boundary bytes and varints, varint continuation runs,
    deletes, truncation, and (given ``others``) duplicated or spliced pieces."""
    out = bytearray(data)
    for _ in range(rng.choice((1, 1, 1, 2, 3, 8))):
        op = rng.randrange(8 if others else 6)
        pos = rng.randrange(len(out) + 1)
        if op == 0 and out and pos < len(out):
            out[pos] ^= 1 << rng.randrange(8)
        elif op == 1 and pos < len(out):
            out[pos] = rng.choice(_BYTES)
        elif op == 2:
            out[pos:pos] = rng.choice(_INSERTS)
        elif op == 3 and out:
            del out[pos : pos + rng.randrange(1, 5)]
        elif op == 4 and pos < len(out):
            out[pos : pos + 5] = zz(rng.choice(_VALUES))
        elif op == 6 and out:  # a repeated piece (a record twice, a header twice)
            out[pos:pos] = out[pos : pos + rng.randrange(1, 64)]
        elif op == 7:
            other = rng.choice(others)
            at = rng.randrange(len(other) + 1)
            out[pos : pos + rng.randrange(0, 16)] = other[at : at + rng.randrange(1, 64)]
        else:
            out = out[: rng.randrange(len(out) + 1)]
    return bytes(out)


class Case(NamedTuple):
    codec: int
    batch: bytes
    section: bytes | None  # the records section when it is known (mutated before compressing)
    count: int
    base_ts: int


def payload_case(seed: Seed, payload: bytes) -> Case:
    """A batch of the seed's codec carrying ``payload`` as its compressed records."""
    return Case(seed.codec, make_batch(b"", seed.count, seed.codec, payload=payload), None, seed.count, TS)


def section_case(seed: Seed, section: bytes, count: int, base_ts: int) -> Case:
    """A batch whose records section is ``section``, compressed with the seed's codec."""
    return Case(seed.codec, make_batch(section, count, seed.codec, base_ts=base_ts), section, count, base_ts)


def random_case(rng: random.Random, seed: Seed, others: tuple[bytes, ...]) -> Case:
    """A mutated section compressed with the seed's codec, or (30% of compressed seeds) a mutated payload."""
    if seed.codec and rng.random() < 0.3:
        return payload_case(seed, _mutate(rng, seed.payload))
    count = seed.count if rng.random() < 0.95 else max(1, seed.count + rng.choice((-1, 1, 1000)))
    base_ts = TS if rng.random() < 0.9 else rng.choice(_BASE_TS)
    return section_case(seed, _mutate(rng, seed.section, others), count, base_ts)


# --------------------------------------------------------------------------- checking one case


def _wrap(ts: int) -> int:
    """Java long arithmetic: what baseTimestamp + timestampDelta is on the broker."""
    return ((ts + 2**63) % 2**64) - 2**63


def _chunked(case: Case, rng: random.Random) -> tuple[Any, ...]:
    """The C scanner's verdict on the case's section fed in random-sized chunks (varints cut anywhere)."""
    section = case.section or b""
    s = _scan.RecordScanner(case.count, case.base_ts, bool(case.codec))
    try:
        pos = 0
        while pos < len(section):
            n = rng.choice((1, 1, 2, 3, 5, 9, 10, 11, rng.randrange(1, 512)))
            s.feed(section[pos : pos + n])
            pos += n
        s.feed(b"", True)
    except _scan.RecordError as exc:
        return ("error", exc.args[1])
    return ("ok", s.min_timestamp, s.max_timestamp, s.first_null_key)


def check_case(case: Case, rng: random.Random) -> tuple[str, str | None]:
    """Scan one batch: (outcome, None) when allowed, (kind, detail) for a finding."""
    try:
        [(_, header)] = validate_records(case.batch, 1 << 31)
    except KafkaError as exc:  # make_batch always writes a batch-level valid batch
        return "batch-refused", exc.message
    try:
        got = scan_batch(memoryview(case.batch), header, max_uncompressed=MiB)
    except KafkaError as exc:
        if exc.code not in _ALLOWED:
            return "unexpected-error-code", f"{exc.code.name}: {exc.message}"
        if case.section is not None and isinstance(exc, RecordValidationError):
            index, chunked = exc.record_errors[0][0], _chunked(case, rng)
            if chunked != ("error", index):
                return "chunked-disagreement", f"scan_batch refused record {index}, chunked {chunked}"
        return exc.code.name, None
    except Exception as exc:
        return "exception", "".join(traceback.format_exception_only(exc)).strip()
    if got is None:
        return "exception", "scan_batch returned None without an inline limit"
    try:
        _, decoded = decode_batch(case.batch)
    except Exception as exc:
        return "disagreement", f"accepted, but the reference decoder says {exc.__class__.__name__}: {exc}"
    stamps = [_wrap(r.timestamp) for r in decoded]
    want = (len(decoded), min(stamps, default=None), max(stamps, default=None),
            next((j for j, r in enumerate(decoded) if r.key is None), -1), [r.offset for r in decoded])  # fmt: skip
    have = (header.records_count, got.min_timestamp, got.max_timestamp, got.first_null_key,
            list(range(header.records_count)))  # fmt: skip
    if want != have:
        return "disagreement", f"scan_batch {have[:4]} vs decode_batch {want[:4]} (offsets {want[4][:20]})"
    if case.section is not None:
        chunked = _chunked(case, rng)
        if chunked != ("ok", *have[1:4]):
            return "chunked-disagreement", f"scan_batch accepted {have[1:4]}, chunked {chunked}"
    return "accepted", None


def failure(case: Case, kind: str, detail: str) -> dict[str, Any]:
    """A finding as the report lists it; ``batch_hex`` is the whole batch (header included)."""
    return {"kind": kind, "codec": case.codec, "error": detail, "batch_hex": case.batch.hex()}


def run_mutation_corpus(cases: int, seed: int) -> dict[str, Any]:
    """``cases`` seeded random cases in this process: outcome counts and failures."""
    rng = random.Random(seed)
    corpus = build_corpus()
    others = tuple(s.section for s in corpus)
    stats = {"accepted": 0, "corrupt_message": 0, "invalid_record": 0}
    failures: list[dict[str, Any]] = []
    for i in range(cases):
        case = random_case(rng, corpus[i % len(corpus)], others)
        outcome, detail = check_case(case, rng)
        if detail is None:
            stats[outcome] += 1
        else:
            failures.append(failure(case, outcome, detail))
    return {"outcomes": stats, "failures": failures}


# --------------------------------------------------------------------------- the worker (child process)


class Worker:
    """Runs cases, classifies outcomes, keeps the report up to date on disk."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.started = time.monotonic()
        self.cases = 0
        self.outcomes = {"accepted": 0, "corrupt_message": 0, "invalid_record": 0}
        self.per_codec = {C.codec_name(c): {"cases": 0, **self.outcomes} for c in CODECS}
        self.failures: list[dict[str, Any]] = []
        self.failure_count = 0
        self.last_write = 0.0
        self.corpus = build_corpus()
        self.others = tuple(s.section for s in self.corpus)
        fd = os.open(args.current, os.O_RDWR)
        self.current = mmap.mmap(fd, _CURRENT.size + MAX_INPUT)
        os.close(fd)

    def run_case(self, case: Case, rng: random.Random) -> None:
        size = min(len(case.batch), MAX_INPUT)
        self.current[_CURRENT.size : _CURRENT.size + size] = case.batch[:size]
        self.cases += 1
        _CURRENT.pack_into(self.current, 0, self.cases, size)  # the parent watches this counter
        if self.cases == self.args.crash_after:
            os.abort()  # --crash-after: proves a dying child is reported, with its input
        outcome, detail = check_case(case, rng)
        codec = self.per_codec[C.codec_name(case.codec)]
        codec["cases"] += 1
        if detail is None:
            self.outcomes[outcome] += 1
            codec[outcome] += 1
        else:
            self.failure_count += 1
            if len(self.failures) < MAX_FAILURES:
                self.failures.append(failure(case, outcome, detail))
            self.write_report(force=True)
        if self.cases % 256 == 0:
            self.write_report()

    def report(self) -> dict[str, Any]:
        return {
            "mode": "atheris" if self.args.atheris else "random",
            "seed": self.args.seed,
            "elapsed_s": round(time.monotonic() - self.started, 2),
            "corpus_batches": len(self.corpus),
            "cases": self.cases,
            "outcomes": self.outcomes,
            "per_codec": self.per_codec,
            "failure_count": self.failure_count,
            "failures": self.failures,
        }

    def write_report(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self.last_write < 1.0:
            return
        self.last_write = now
        tmp = self.args.result + ".tmp"
        with open(tmp, "w") as out:
            json.dump(self.report(), out)
        os.replace(tmp, self.args.result)

    def run_random(self) -> None:
        rng = random.Random(self.args.seed)
        deadline = self.started + self.args.seconds
        while self.cases < self.args.max_cases:
            if self.cases % 64 == 0 and time.monotonic() >= deadline:
                break
            self.run_case(random_case(rng, self.corpus[self.cases % len(self.corpus)], self.others), rng)
        self.write_report(force=True)

    def run_atheris(self) -> None:
        import atexit

        import atheris

        corpus, rng = self.corpus, random.Random(self.args.seed)

        def one_input(data: bytes) -> None:
            fdp = atheris.FuzzedDataProvider(data)
            seed = corpus[fdp.ConsumeIntInRange(0, len(corpus) - 1)]
            on_payload = seed.codec != 0 and fdp.ConsumeBool()
            out = bytearray(seed.payload if on_payload else seed.section)
            for _ in range(fdp.ConsumeIntInRange(0, 8)):
                op, at = fdp.ConsumeIntInRange(0, 6), fdp.ConsumeIntInRange(0, len(out))
                if op == 0 and at < len(out):
                    out[at] ^= 1 << fdp.ConsumeIntInRange(0, 7)
                elif op == 1:
                    out[at:at] = fdp.ConsumeBytes(fdp.ConsumeIntInRange(1, 6))
                elif op == 2:
                    del out[at : at + fdp.ConsumeIntInRange(1, 4)]
                elif op == 3:
                    del out[at:]
                elif op == 4:
                    out[at : at + 5] = zz(_VALUES[fdp.ConsumeIntInRange(0, len(_VALUES) - 1)])
                elif op == 5:
                    out[at:at] = out[at : at + fdp.ConsumeIntInRange(1, 64)]
                else:
                    out[at:] = fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 64))
            if on_payload:
                case = payload_case(seed, bytes(out))
            else:
                base_ts = _BASE_TS[fdp.ConsumeIntInRange(0, 3)] if fdp.ConsumeIntInRange(0, 9) == 0 else TS
                case = section_case(seed, bytes(out), seed.count, base_ts)
            self.run_case(case, rng)
            if self.cases >= self.args.max_cases:
                self.write_report(force=True)
                os._exit(0)

        remaining = max(1, int(self.args.seconds - (time.monotonic() - self.started)))
        argv = [sys.argv[0], f"-max_total_time={remaining}", f"-seed={self.args.seed & 0x7FFFFFFF or 1}",
                "-timeout=30", "-rss_limit_mb=4096"]  # fmt: skip
        atheris.Setup(argv, one_input)
        atexit.register(self.write_report, True)
        atheris.Fuzz()


def _instrument(prefix: str) -> int:
    """Atheris coverage for the functions (and methods) of the already imported ``prefix`` modules."""
    import atheris

    count = 0
    for name, module in list(sys.modules.items()):
        if name == prefix or name.startswith(prefix + "."):
            for obj in list(vars(module).values()):
                members = vars(obj).values() if isinstance(obj, type) else (obj,)
                for f in members:
                    if isinstance(f, types.FunctionType) and f.__module__ == name:
                        atheris.instrument_func(f)  # patches f.__code__ in place
                        count += 1
    return count


def worker_main(args: argparse.Namespace) -> int:
    if args.atheris:  # imported above already, so instrument_imports() would not see them
        print(f"fuzz_records: {_instrument('shoal.records')} functions instrumented", file=sys.stderr)
    worker = Worker(args)
    worker.write_report(force=True)
    print(f"fuzz_records: corpus of {len(worker.corpus)} batches", file=sys.stderr)
    if args.atheris:
        worker.run_atheris()
    else:
        worker.run_random()
    return 0


# --------------------------------------------------------------------------- the parent


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Run the worker in a child process; report its findings, and its input if it dies or hangs."""
    with tempfile.TemporaryDirectory(prefix="fuzz-records-") as tmp:
        current, result = Path(tmp) / "current", Path(tmp) / "result.json"
        current.write_bytes(bytes(_CURRENT.size + MAX_INPUT))
        cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", "--seconds", str(args.seconds),
               "--seed", str(args.seed), "--max-cases", str(args.max_cases), "--current", str(current),
               "--result", str(result), "--crash-after", str(args.crash_after)]  # fmt: skip
        if args.atheris:
            cmd.append("--atheris")
        started = time.monotonic()
        proc = subprocess.Popen(cmd, stdout=sys.stderr, stderr=None)
        hung: str | None = None
        with open(current, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as shared:
            seen, since = -1, started
            while proc.poll() is None:
                time.sleep(0.2)
                now = time.monotonic()
                cases = _CURRENT.unpack_from(shared)[0]
                if cases != seen:
                    seen, since = cases, now
                elif cases and now - since > args.case_timeout:
                    hung = f"case {cases} did not finish in {args.case_timeout} s"
                if now - started > args.seconds + 120:
                    hung = "child stuck past its time budget"
                if hung:
                    proc.kill()
                    break
            returncode = proc.wait()
            cases, size = _CURRENT.unpack_from(shared)
            last = bytes(shared[_CURRENT.size : _CURRENT.size + size])
        report: dict[str, Any] = {"failures": [], "failure_count": 0}
        if result.exists():
            report = json.loads(result.read_text())
        report["cases"] = cases  # started, the one that crashed or hung included
        report["wall_s"] = round(time.monotonic() - started, 2)
        report["child_exit"] = returncode
        if hung or returncode != 0:
            report["failure_count"] = report.get("failure_count", 0) + 1
            report["failures"].append({
                "kind": "timeout" if hung else "crash",
                "error": hung or f"child exited with {returncode} during case {cases}",
                "batch_hex": last.hex(),
            })  # fmt: skip
        report["ok"] = report["failure_count"] == 0
        return report


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seconds", type=float, default=60, help="time budget of the fuzzing (default 60)")
    p.add_argument("--seed", type=int, default=1, help="seed of the mutations (default 1)")
    p.add_argument(
        "--max-cases", type=int, default=1 << 62, help="stop after this many batches (default: none)"
    )
    p.add_argument("--case-timeout", type=float, default=20, help="a slower case is a finding (default 20 s)")
    p.add_argument("--atheris", action="store_true", help="let atheris (libFuzzer) drive the mutations")
    p.add_argument("--output", help="also write the JSON to this file")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--crash-after", type=int, default=-1, help=argparse.SUPPRESS)
    p.add_argument("--current", help=argparse.SUPPRESS)
    p.add_argument("--result", help=argparse.SUPPRESS)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.worker:
        return worker_main(args)
    report = run(args)
    text = json.dumps(report, indent=2)
    print(text, flush=True)
    if args.output:
        Path(args.output).write_text(text + "\n")
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
