"""Hostile load, the watchers: the broker's RSS and liveness, and a well-behaved probe client.

The sampler reads ``/proc/<pid>/status`` VmRSS on a thread; the probe does small round trips
(Metadata, then Produce + Fetch of one record) on its own connection, and reports the latency
and stalls of those that started in a window.
"""

from __future__ import annotations

import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

try:
    import shoal  # noqa: F401  (installed editable in the project venv)
except ImportError:  # run from a checkout without the package installed
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from hostile_wire import Wire, error_codes, fetch_request, metadata_request, produce

from shoal.records.codec import build_batch

# ---------------------------------------------------------------------------------------------
# Broker process: RSS sampling and liveness
# ---------------------------------------------------------------------------------------------


def read_status(pid: int) -> dict[str, str] | None:
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    return {k.strip(): v.strip() for k, _, v in (line.partition(":") for line in text.splitlines())}


def process_alive(pid: int) -> bool:
    status = read_status(pid)
    return status is not None and not status.get("State", "").startswith(("Z", "X"))


def rss_kib(pid: int) -> int | None:
    status = read_status(pid)
    if status is None or "VmRSS" not in status:
        return None
    return int(status["VmRSS"].split()[0])


def mib(kib: int | None) -> float | None:
    return None if kib is None else round(kib / 1024, 1)


class RssSampler(threading.Thread):
    """VmRSS of the broker every ``interval`` seconds, kept with monotonic timestamps."""

    def __init__(self, pid: int, interval: float = 0.05) -> None:
        super().__init__(name="rss-sampler", daemon=True)
        self.pid = pid
        self.interval = interval
        self.samples: list[tuple[float, int]] = []
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.is_set():
            value = rss_kib(self.pid)
            if value is not None:
                self.samples.append((time.monotonic(), value))
            self.stopping.wait(self.interval)

    def stop(self) -> None:
        self.stopping.set()
        self.join(2)

    def peak(self, start: float, end: float) -> int | None:
        values = [v for t, v in list(self.samples) if start <= t <= end]
        return max(values) if values else None


# ---------------------------------------------------------------------------------------------
# The probe: a well-behaved client doing small round trips on its own connection
# ---------------------------------------------------------------------------------------------


@dataclass
class ProbeSample:
    start: float
    end: float
    kind: str  # metadata | produce_fetch
    ok: bool
    error: str | None = None


class Probe(threading.Thread):
    def __init__(self, host: str, port: int, topic: str, interval: float, timeout: float = 10.0) -> None:
        super().__init__(name="probe", daemon=True)
        self.host, self.port, self.topic = host, port, topic
        self.interval = interval
        self.timeout = timeout
        self.samples: list[ProbeSample] = []
        self.stopping = threading.Event()
        self.wire: Wire | None = None
        self.value = b"probe-" + uuid.uuid4().hex.encode()

    def _step(self, kind: str, fn: Callable[[Wire], None]) -> bool:
        start = time.monotonic()
        try:
            if self.wire is None:
                self.wire = Wire(self.host, self.port, self.timeout)
            fn(self.wire)
        except Exception as exc:  # noqa: BLE001 - every failure is a data point
            if self.wire is not None:
                self.wire.close()
                self.wire = None
            self.samples.append(ProbeSample(start, time.monotonic(), kind, False, f"{exc.__class__.__name__}: {exc}"[:200]))
            return False
        self.samples.append(ProbeSample(start, time.monotonic(), kind, True))
        return True

    def _metadata(self, wire: Wire) -> None:
        response = wire.request(metadata_request([self.topic]))
        codes = error_codes(response)
        if any(codes):
            raise RuntimeError(f"metadata error codes {codes}")

    def _produce_fetch(self, wire: Wire) -> None:
        batch = build_batch([(None, self.value)])
        result = produce(wire, self.topic, 0, batch, acks=1)
        if result["error_code"]:
            raise RuntimeError(f"produce {result['error_name']}")
        response = wire.request(fetch_request(self.topic, 0, result["base_offset"], 65536))
        part = response.responses[0].partitions[0]
        if int(part.error_code) or self.value not in bytes(part.records or b""):
            raise RuntimeError(f"fetch error {int(part.error_code)} or record missing")

    def run(self) -> None:
        while not self.stopping.is_set():
            began = time.monotonic()
            if self._step("metadata", self._metadata):
                self._step("produce_fetch", self._produce_fetch)
            self.stopping.wait(max(0.0, self.interval - (time.monotonic() - began)))
        if self.wire is not None:
            self.wire.close()

    def stop(self) -> None:
        self.stopping.set()
        self.join(self.timeout + 2)

    def window(self, start: float, end: float) -> dict[str, Any]:
        """Latency and stalls of the round trips that started in [start, end]."""
        samples = [s for s in list(self.samples) if start <= s.start <= end]
        out: dict[str, Any] = {"round_trips": len(samples), "failures": sum(not s.ok for s in samples)}
        for kind in ("metadata", "produce_fetch"):
            lat = sorted((s.end - s.start) * 1000 for s in samples if s.kind == kind)
            out[f"{kind}_ms"] = latency_stats(lat)
        all_lat = sorted((s.end - s.start) * 1000 for s in samples)
        out["max_ms"] = round(all_lat[-1], 1) if all_lat else None
        out["p99_ms"] = percentile(all_lat, 99)
        # The longest time without a successful round trip ending (window edges included).
        ok_ends = sorted(s.end for s in samples if s.ok)
        edges = [start, *ok_ends, end]
        out["max_stall_ms"] = round(max(b - a for a, b in zip(edges, edges[1:], strict=False)) * 1000, 1)
        errors = [s.error for s in samples if s.error]
        if errors:
            out["first_error"] = errors[0]
        return out


def percentile(sorted_values: list[float], pct: float) -> float | None:
    if not sorted_values:
        return None
    index = min(len(sorted_values) - 1, max(0, int(round(pct / 100 * len(sorted_values) + 0.5)) - 1))
    return round(sorted_values[index], 1)


def latency_stats(sorted_values: list[float]) -> dict[str, Any]:
    return {
        "n": len(sorted_values),
        "p50": percentile(sorted_values, 50),
        "p99": percentile(sorted_values, 99),
        "max": round(sorted_values[-1], 1) if sorted_values else None,
    }
