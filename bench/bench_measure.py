"""What ``produce_consume.py`` measures beside the clients: latency percentiles and timelines,
a process tree's CPU and memory (Linux ``/proc``), and the objects a local object store gains.
"""

from __future__ import annotations

import array
import math
import os
import threading
from typing import Any

from bench_common import MB, MIB

# Names a local object store may use for files that are not (yet) objects.
_TEMP_SUFFIXES = (".tmp", ".part", ".partial", ".temp", "~")


def percentiles_ms(latencies_s: array.array) -> dict[str, float | int | None]:
    """Nearest-rank percentiles over every delivered record of every producer."""
    n = len(latencies_s)
    if n == 0:
        return {"count": 0, "p50": None, "p90": None, "p99": None, "p999": None, "max": None, "mean": None}
    data = sorted(latencies_s)

    def pct(q: float) -> float:
        return round(data[max(0, math.ceil(q * n) - 1)] * 1000, 3)

    return {
        "count": n,
        "p50": pct(0.50),
        "p90": pct(0.90),
        "p99": pct(0.99),
        "p999": pct(0.999),
        "max": round(data[-1] * 1000, 3),
        "mean": round(sum(data) / n * 1000, 3),
    }


def latency_timeline(
    latencies_s: array.array, delivered_at: array.array, start_ts: float
) -> list[dict[str, float | int | None]]:
    """Latency by second of sending: shows whether a backlog builds up during the phase."""
    buckets: dict[int, array.array] = {}
    for lat, at in zip(latencies_s, delivered_at, strict=True):
        sec = max(0, int(at - lat - start_ts))
        buckets.setdefault(sec, array.array("d")).append(lat)
    out: list[dict[str, float | int | None]] = []
    for sec in sorted(buckets):
        pct = percentiles_ms(buckets[sec])
        out.append({"second": sec, "records": pct["count"], "p50": pct["p50"], "p99": pct["p99"]})
    return out


def delivered_mb_by_tenth(delivered_at: array.array, start_ts: float, record_size: int) -> list[float]:
    """MB acknowledged in each 100 ms from the start: a stall or a slow tail (the last queued
    records draining at a few MB per 100 ms) shows here and hides in a 2-second average."""
    counts: list[int] = []
    for at in delivered_at:
        tenth = max(0, int((at - start_ts) * 10))
        if tenth >= len(counts):
            counts.extend([0] * (tenth + 1 - len(counts)))
        counts[tenth] += 1
    return [round(n * record_size / MB, 1) for n in counts]


def proc_tree(pid: int) -> dict[int, list[str]] | None:
    """A process and all its descendants (Linux /proc), each with its ``stat`` fields after the
    command name; None when it does not exist."""
    try:
        children: dict[int, list[int]] = {}
        stats: dict[int, list[str]] = {}
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            try:
                with open(f"/proc/{name}/stat") as f:
                    stat = f.read()
            except OSError:
                continue
            # The command name may contain spaces; fields after ')' are fixed.
            fields = stat[stat.rfind(")") + 2 :].split()
            stats[int(name)] = fields
            children.setdefault(int(fields[1]), []).append(int(name))
    except (OSError, ValueError):
        return None
    if pid not in stats:
        return None
    tree, todo = {}, [pid]
    while todo:
        p = todo.pop()
        tree[p] = stats[p]
        todo.extend(children.get(p, []))
    return tree


def proc_tree_cpu_s(pid: int) -> float | None:
    """CPU seconds used so far by a process and all its descendants (Linux /proc)."""
    tree = proc_tree(pid)
    if tree is None:
        return None
    return sum(int(fields[11]) + int(fields[12]) for fields in tree.values()) / os.sysconf("SC_CLK_TCK")


def proc_tree_rss_bytes(pid: int) -> int | None:
    """Resident memory of a process and all its descendants now (``VmRSS``, Linux /proc)."""
    tree = proc_tree(pid)
    if tree is None:
        return None
    total = 0
    for p in tree:
        try:
            with open(f"/proc/{p}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1]) * 1024
                        break
        except (OSError, ValueError):
            continue
    return total


class RssSampler:
    """Samples a broker's resident memory (process tree) every ``interval_s`` during a phase:
    the peak is what a memory limit must allow."""

    def __init__(self, pid: int, interval_s: float = 0.25) -> None:
        self._pid = pid
        self._interval = interval_s
        self._samples: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            rss = proc_tree_rss_bytes(self._pid)
            if rss is not None:
                self._samples.append(rss)
            self._stop.wait(self._interval)

    def start(self) -> RssSampler:
        self._thread.start()
        return self

    def stop(self) -> dict[str, Any]:
        """``broker_rss_peak_mib`` and ``broker_rss_mean_mib`` of the samples (MiB)."""
        self._stop.set()
        self._thread.join(5)
        if not self._samples:
            return {}
        return {
            "broker_rss_peak_mib": round(max(self._samples) / MIB, 1),
            "broker_rss_mean_mib": round(sum(self._samples) / len(self._samples) / MIB, 1),
        }


class ObjectWatcher:
    """Counts files created under a local object-store directory during a phase.

    A background thread rescans every second so objects that a garbage collector or
    compaction deletes within the phase are still counted.
    """

    def __init__(self, root: str, interval_s: float = 1.0) -> None:
        self.root = root
        self.interval_s = interval_s
        self._before: set[str] = set()
        self._seen: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _scan(self) -> dict[str, int]:
        found: dict[str, int] = {}
        for dirpath, dirnames, filenames in os.walk(self.root):
            dirnames[:] = [d for d in dirnames if not d.startswith(".")]
            for name in filenames:
                if name.startswith(".") or name.endswith(_TEMP_SUFFIXES):
                    continue
                path = os.path.join(dirpath, name)
                try:
                    found[path] = os.stat(path).st_size
                except OSError:
                    continue
        return found

    def start(self) -> None:
        self._before = set(self._scan())
        self._seen = {}
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="object-watcher", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._collect()

    def _collect(self) -> None:
        for path, size in self._scan().items():
            if path not in self._before:
                self._seen[path] = size

    def stop(self) -> dict[str, int]:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        self._collect()
        return {"objects_created": len(self._seen), "object_bytes": sum(self._seen.values())}
