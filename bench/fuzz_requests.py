#!/usr/bin/env python3
"""Fuzz Shoal's request decoding: every advertised API at every advertised version.

``decode_request`` (the guard in ``shoal/protocol/guard.py``, then kio's native reader)
sees bytes straight from the network, so whatever they are it must return a request or
raise KafkaError (UnsupportedVersion for a version outside our range) — never another
exception, never a crash. This builds a corpus of valid requests from kio's schemas
(random values of each field's type, nullable fields sometimes null, tagged fields
sometimes set, some frames carrying unknown tagged fields), mutates them (bit flips, byte
inserts and deletes, truncation, 0xff / 0x7f / 0x80 runs, boundary integers, splices
from other frames) and decodes the results. What decodes must also be sane: no None in a
field the schema does not make nullable, and it must encode again to an equal request.

The fuzzing runs in a child process, so an abort inside kio (the failure this exists to
catch) is reported instead of taking the reporter with it: the child writes every input
to a shared file before decoding it, and a child that dies leaves its last input there.
``--atheris`` drives the same mutations with atheris (libFuzzer, coverage of the guard's
Python code) instead of a seeded random generator.

Prints one JSON document on stdout (requests tried, per-API counts, failures with a hex
reproducer: ``decode_request(bytes.fromhex(...))``); progress goes to stderr. Exit status 0
when nothing was found, 1 otherwise.
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
from pathlib import Path
from typing import Any

from fuzz_inputs import (
    FILL_BYTES,
    INTERESTING32,
    MAX_FRAME,
    equal_but_for_float_ms,
    insane,
    mutate,
    random_entity,
    with_unknown_tags,
)

MAX_FAILURES = 50  # failures kept in the report (all are counted)
_LEN = struct.Struct(">I")


# --------------------------------------------------------------------------- the worker (child process)


class Target:
    __slots__ = ("name", "key", "version", "cls", "frames")

    def __init__(self, name: str, key: int, version: int, cls: type, frames: list[bytes]) -> None:
        self.name = name
        self.key = key
        self.version = version
        self.cls = cls
        self.frames = frames


class Worker:
    """Decodes inputs, classifies the outcome, and keeps the report up to date on disk."""

    def __init__(self, args: argparse.Namespace) -> None:
        from shoal.protocol import apis

        self.apis = apis
        self.args = args
        self.started = time.monotonic()
        self.tried = 0
        self.per_api: dict[str, dict[str, int]] = {}
        self.failures: list[dict[str, Any]] = []
        self.failure_count = 0
        # Decoded requests that encode 1 ms off: kio writes timedelta_i64 through a float
        # (round(total_seconds() * 1000)), exact only up to 2^53 ms. A writer matter, not decoding.
        self.kio_writer_imprecision = 0
        self.last_write = 0.0
        self.targets: list[Target] = []
        self.all_frames: list[bytes] = []
        fd = os.open(args.current, os.O_RDWR)
        self.current = mmap.mmap(fd, 4 + MAX_FRAME)
        os.close(fd)
        self.targets = self._corpus(random.Random(args.seed), args.corpus_per_version)
        self.all_frames = [frame for target in self.targets for frame in target.frames]

    def _corpus(self, rng: random.Random, per_version: int) -> list[Target]:
        targets = []
        for spec in self.apis.SUPPORTED_APIS.values():
            for version in range(spec.min_version, spec.max_version + 1):
                cls = self.apis.request_class(spec.key, version)
                target = Target(spec.name, spec.key, version, cls, [])
                for index in range(per_version):
                    request = random_entity(cls, rng)
                    client_id = rng.choice(("rdkafka", None, "", "client-ü"))
                    frame = self.apis.encode_request(rng.randint(0, 1 << 31), client_id, request)[4:]
                    self.check_valid(target, frame, request)
                    target.frames.append(frame)
                    if index % 2 == 0:
                        tagged = with_unknown_tags(frame, request, rng)
                        if tagged is not None:
                            self.check_valid(target, tagged, request)
                            target.frames.append(tagged)
                targets.append(target)
        return targets

    def check_valid(self, target: Target, frame: bytes, request: Any) -> None:
        """A valid frame must decode to the request it was encoded from."""
        self.remember(frame)
        try:
            _, decoded = self.apis.decode_request(memoryview(frame).toreadonly())  # as the broker passes it
        except Exception as exc:
            self.fail(target, "valid-request-refused", frame, f"{exc.__class__.__name__}: {exc}")
            return
        if decoded != request:
            self.fail(target, "valid-request-changed", frame, f"decoded {decoded!r}")

    def remember(self, frame: bytes) -> None:
        """Put the input where the parent finds it if this process dies decoding it."""
        size = min(len(frame), MAX_FRAME)
        _LEN.pack_into(self.current, 0, size)
        self.current[4 : 4 + size] = frame[:size]

    def fail(self, target: Target | None, kind: str, frame: bytes, error: str) -> None:
        self.failure_count += 1
        if len(self.failures) < MAX_FAILURES:
            self.failures.append(
                {
                    "kind": kind,
                    "api": target.name if target else None,
                    "version": target.version if target else None,
                    "error": error,
                    "frame_hex": frame.hex(),
                }
            )
        self.write_report(force=True)

    def decode(self, target: Target, frame: bytes) -> None:
        apis = self.apis
        counts = self.per_api.setdefault(target.name, {"tried": 0, "decoded": 0, "refused": 0, "unsupported_version": 0})
        counts["tried"] += 1
        self.tried += 1
        self.remember(frame)
        if self.tried == self.args.crash_after:
            os.abort()  # --crash-after: proves a dying child is reported, with its input
        try:
            header, request = apis.decode_request(memoryview(frame).toreadonly())  # as the broker passes it
        except apis.UnsupportedVersion:
            counts["unsupported_version"] += 1
        except apis.KafkaError as exc:
            counts["refused"] += 1
            if "guard internal error" in exc.message:
                self.fail(target, "guard-internal-error", frame, exc.message)
        except Exception as exc:
            self.fail(target, "exception", frame, "".join(traceback.format_exception_only(exc)).strip())
        else:
            counts["decoded"] += 1
            self.check_decoded(target, frame, header, request)
        if self.tried % 256 == 0:
            self.write_report()

    def check_decoded(self, target: Target, frame: bytes, header: Any, request: Any) -> None:
        cls = self.apis.request_class(header.api_key, header.api_version)
        problem = insane(request, cls)
        if problem:
            self.fail(target, "null-in-non-nullable", frame, problem)
            return
        try:
            again = self.apis.encode_request(header.correlation_id, header.client_id, request)[4:]
            _, redecoded = self.apis.decode_request(again)
        except Exception as exc:
            self.fail(target, "reencode", frame, f"{exc.__class__.__name__}: {exc}")
            return
        if redecoded != request:
            if equal_but_for_float_ms(request, redecoded):
                self.kio_writer_imprecision += 1
                return
            self.fail(target, "reencode-changed", frame, f"{request!r} != {redecoded!r}")

    def report(self) -> dict[str, Any]:
        return {
            "mode": "atheris" if self.args.atheris else "random",
            "seed": self.args.seed,
            "elapsed_s": round(time.monotonic() - self.started, 2),
            "targets": len(self.targets),
            "corpus_frames": len(self.all_frames),
            "requests_tried": self.tried,
            "per_api": dict(sorted(self.per_api.items())),
            "kio_writer_timedelta_imprecision": self.kio_writer_imprecision,
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

    # ---- the two drivers

    def run_random(self) -> None:
        rng = random.Random(self.args.seed ^ 0x5EED)
        deadline = self.started + self.args.seconds
        targets = self.targets
        index = 0
        while self.tried < self.args.max_requests:
            if index % 64 == 0 and time.monotonic() >= deadline:
                break
            target = targets[index % len(targets)]
            index += 1
            self.decode(target, mutate(rng.choice(target.frames), rng, self.all_frames))
        self.write_report(force=True)

    def run_atheris(self) -> None:
        import atheris

        targets = self.targets

        def one_input(data: bytes) -> None:
            fdp = atheris.FuzzedDataProvider(data)
            target = targets[fdp.ConsumeIntInRange(0, len(targets) - 1)]
            frame = bytearray(target.frames[fdp.ConsumeIntInRange(0, len(target.frames) - 1)])
            for _ in range(fdp.ConsumeIntInRange(0, 6)):
                op = fdp.ConsumeIntInRange(0, 6)
                at = fdp.ConsumeIntInRange(4, max(4, len(frame)))
                if op == 0 and at < len(frame):
                    frame[at] ^= 1 << fdp.ConsumeIntInRange(0, 7)
                elif op == 1:
                    frame[at:at] = fdp.ConsumeBytes(fdp.ConsumeIntInRange(1, 6))
                elif op == 2:
                    del frame[at : at + fdp.ConsumeIntInRange(1, 4)]
                elif op == 3:
                    del frame[at:]
                elif op == 4:
                    frame[at : at + 5] = bytes([FILL_BYTES[fdp.ConsumeIntInRange(0, len(FILL_BYTES) - 1)]]) * 5
                elif op == 5:
                    frame[at : at + 4] = struct.pack(">I", INTERESTING32[fdp.ConsumeIntInRange(0, 6)])
                else:
                    frame[at:] = fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 64))
            self.decode(target, bytes(frame))
            if self.tried >= self.args.max_requests:
                self.write_report(force=True)
                os._exit(0)

        argv = [
            sys.argv[0],
            f"-max_total_time={max(1, int(self.args.seconds - (time.monotonic() - self.started)))}",
            f"-seed={self.args.seed & 0x7FFFFFFF or 1}",
            "-timeout=30",
            "-rss_limit_mb=4096",
        ]
        atheris.Setup(argv, one_input)
        import atexit

        atexit.register(self.write_report, True)
        atheris.Fuzz()


def worker_main(args: argparse.Namespace) -> int:
    if args.atheris:
        import atheris

        with atheris.instrument_imports(include=["shoal.protocol"]):
            import shoal.protocol.apis  # noqa: F401
    worker = Worker(args)
    worker.write_report(force=True)
    print(f"fuzz_requests: corpus of {len(worker.all_frames)} frames over {len(worker.targets)} API versions",
          file=sys.stderr)
    if args.atheris:
        worker.run_atheris()
    else:
        worker.run_random()
    return 0


# --------------------------------------------------------------------------- the parent


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Run the worker in a child process and gather its report, crash or not."""
    with tempfile.TemporaryDirectory(prefix="fuzz-requests-") as tmp:
        current = Path(tmp) / "current"
        result = Path(tmp) / "result.json"
        current.write_bytes(bytes(4 + MAX_FRAME))
        cmd = [
            sys.executable, str(Path(__file__).resolve()), "--worker",
            "--seconds", str(args.seconds), "--seed", str(args.seed),
            "--max-requests", str(args.max_requests), "--corpus-per-version", str(args.corpus_per_version),
            "--current", str(current), "--result", str(result), "--crash-after", str(args.crash_after),
        ]
        if args.atheris:
            cmd.append("--atheris")
        started = time.monotonic()
        timed_out = False
        # The corpus takes a few seconds to build; past the budget plus a margin the child is stuck.
        proc = subprocess.Popen(cmd, stdout=sys.stderr, stderr=None)
        try:
            returncode = proc.wait(timeout=args.seconds + 120)
        except subprocess.TimeoutExpired:
            timed_out = True
            proc.kill()
            returncode = proc.wait()
        report: dict[str, Any] = json.loads(result.read_text()) if result.exists() else {"failures": [], "failure_count": 0}
        report["wall_s"] = round(time.monotonic() - started, 2)
        report["child_exit"] = returncode
        if timed_out or returncode != 0:
            data = current.read_bytes()
            size = _LEN.unpack_from(data)[0]
            report["failure_count"] = report.get("failure_count", 0) + 1
            report["failures"].append(
                {
                    "kind": "timeout" if timed_out else "crash",
                    "error": "child stuck past its time budget" if timed_out else f"child exited with {returncode}",
                    "frame_hex": data[4 : 4 + size].hex(),
                }
            )
        report["ok"] = report["failure_count"] == 0
        return report


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seconds", type=float, default=60, help="time budget of the fuzzing (default 60)")
    p.add_argument("--seed", type=int, default=1, help="seed of the corpus and the mutations (default 1)")
    p.add_argument("--max-requests", type=int, default=1 << 62, help="stop after this many inputs (default: no limit)")
    p.add_argument("--corpus-per-version", type=int, default=6, help="valid requests built per API version (default 6)")
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
