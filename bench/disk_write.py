#!/usr/bin/env python3
"""Raw sequential write of one file, then fsync: what the disk under a log dir can take.

A classic topic's produce throughput is bounded by the file system its log dir is on, so a
broker figure means little without this one from the same disk in the same run:
``bench/classic.py`` runs both. The file gets ``--bytes`` of random data in ``--block-size``
writes, fsynced once at the end (``--fsync-every`` adds intermediate fsyncs), and is removed
afterwards. Prints one JSON document on stdout.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
import time
import uuid
from pathlib import Path
from typing import Any

MB = 1_000_000
MIB = 1 << 20


def filesystem_of(path: Path) -> dict[str, Any]:
    """The mount holding ``path`` (device, type, options) from /proc/mounts, and its free space."""
    real = os.path.realpath(path)
    best: tuple[str, str, str, str] | None = None
    try:
        with open("/proc/mounts") as mounts:
            for line in mounts:
                device, mount_point, fs_type, options = line.split()[:4]
                mount_point = mount_point.replace("\\040", " ")
                inside = real == mount_point or real.startswith(mount_point.rstrip("/") + "/")
                if inside and (best is None or len(mount_point) > len(best[1])):
                    best = (device, mount_point, fs_type, options)
    except OSError:
        best = None
    st = os.statvfs(real)
    info: dict[str, Any] = {"total_bytes": st.f_blocks * st.f_frsize, "usable_bytes": st.f_bavail * st.f_frsize}
    if best is not None:
        info.update(device=best[0], mount_point=best[1], type=best[2], options=best[3])
    return info


def write_file(path: Path, total: int, block_size: int, fsync_every: int) -> dict[str, Any]:
    """Write ``total`` bytes sequentially with ``os.write`` and fsync; time the writes and the fsyncs apart."""
    block = os.urandom(block_size)  # incompressible, like the benchmark's records
    view = memoryview(block)
    fsyncs = 0
    fsync_s = 0.0
    written = 0
    since_sync = 0
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        start = time.perf_counter()
        while written < total:
            chunk = view[: min(block_size, total - written)]
            done = 0
            while done < len(chunk):
                done += os.write(fd, chunk[done:])
            written += len(chunk)
            since_sync += len(chunk)
            if fsync_every and since_sync >= fsync_every and written < total:
                t = time.perf_counter()
                os.fsync(fd)
                fsync_s += time.perf_counter() - t
                fsyncs += 1
                since_sync = 0
        t = time.perf_counter()
        os.fsync(fd)
        fsync_s += time.perf_counter() - t
        fsyncs += 1
        end = time.perf_counter()
    finally:
        os.close(fd)
    elapsed = end - start
    return {
        "bytes": written,
        "block_size": block_size,
        "fsync_every_bytes": fsync_every or None,
        "fsyncs": fsyncs,
        "write_s": round(elapsed - fsync_s, 3),
        "fsync_s": round(fsync_s, 3),
        "elapsed_s": round(elapsed, 3),
        "mb_per_s": round(written / MB / elapsed, 2) if elapsed else None,
        "mib_per_s": round(written / MIB / elapsed, 2) if elapsed else None,
    }


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dir", required=True, help="directory on the file system to measure (e.g. a broker log dir)")
    p.add_argument("--bytes", type=int, required=True, help="file size to write")
    p.add_argument("--block-size", type=int, default=MIB, help="bytes per write() call (default 1 MiB)")
    p.add_argument("--fsync-every", type=int, default=0, help="also fsync after this many bytes (0: once at the end)")
    p.add_argument("--keep", action="store_true", help="keep the file (default: remove it)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    directory = Path(args.dir)
    if not directory.is_dir():
        raise SystemExit(f"--dir {directory} is not a directory")
    if args.bytes < 1 or args.block_size < 1 or args.fsync_every < 0:
        raise SystemExit("--bytes and --block-size must be >= 1, --fsync-every >= 0")
    fs = filesystem_of(directory)
    if fs["usable_bytes"] < args.bytes * 1.1:
        raise SystemExit(f"not enough space in {directory}: {fs['usable_bytes']} bytes free, {args.bytes} needed")
    path = directory / f".disk-write-{uuid.uuid4().hex[:8]}.tmp"
    report: dict[str, Any] = {
        "benchmark": "bench/disk_write.py",
        "started_at": dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds"),
        "dir": str(directory.resolve()),
        "filesystem": fs,
        "load_avg_start": [round(x, 2) for x in os.getloadavg()],
    }
    try:
        report.update(write_file(path, args.bytes, args.block_size, args.fsync_every))
    finally:
        if not args.keep:
            path.unlink(missing_ok=True)
    report["load_avg_end"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(report, indent=2), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
