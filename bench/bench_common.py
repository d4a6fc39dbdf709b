"""What every part of ``produce_consume.py`` shares: progress lines, timestamps, the machine's
load, ``k=v`` options, a quiet librdkafka logger and the payload buffer records are cut from.

Other bench scripts import these too (``bench/`` is on ``sys.path`` when a bench script runs).
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import random
import resource
import sys
import time

MB = 1_000_000
MIB = 1 << 20


class BenchError(Exception):
    """The run cannot go on (no broker, no topic): reported in the JSON, exit status 1."""


def log(msg: str) -> None:
    """Progress goes to stderr so stdout stays one clean JSON document."""
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def utc_now() -> str:
    """ISO-8601 UTC timestamps, so runs on different machines line up."""
    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds")


def iso(ts: float | None) -> str | None:
    """Wall-clock seconds (as measured in a worker) to ISO-8601 UTC."""
    if ts is None:
        return None
    return dt.datetime.fromtimestamp(ts, dt.UTC).isoformat(timespec="milliseconds")


def load_avg() -> dict[str, float]:
    """The machine is shared: a high load average means the figures are suspect."""
    one, five, fifteen = os.getloadavg()
    return {"1m": round(one, 2), "5m": round(five, 2), "15m": round(fifteen, 2)}


def cpu_seconds_self() -> float:
    """User+system CPU of this process, librdkafka's threads included."""
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def parse_kv(items: list[str], what: str) -> dict[str, str]:
    """``k=v`` options (topic configs, client overrides) into a dict."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise SystemExit(f"{what} expects key=value, got {item!r}")
        out[key.strip()] = value.strip()
    return out


class _FirstN(logging.Filter):
    """Lets the first ``limit`` records through, then counts: a dead broker makes librdkafka
    log every reconnect attempt, which would bury the progress lines."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit = limit
        self.suppressed = 0
        self._passed = 0

    def filter(self, record: logging.LogRecord) -> bool:
        if self._passed < self.limit:
            self._passed += 1
            return True
        self.suppressed += 1
        return False


def client_logger(name: str, limit: int = 10) -> tuple[logging.Logger, _FirstN]:
    """A logger for librdkafka's ``logger`` setting that prints at most ``limit`` lines."""
    logger = logging.getLogger(f"bench.{name}")
    logger.propagate = False
    if not logger.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter(f"[{name}] %(message)s"))
        logger.addHandler(handler)
    limiter = _FirstN(limit)
    for old in list(logger.filters):
        logger.removeFilter(old)
    logger.addFilter(limiter)
    return logger, limiter


# --------------------------------------------------------------------------------------
# Payloads
# --------------------------------------------------------------------------------------


def payload_buffer(record_size: int, kind: str, seed: int) -> bytes:
    """A buffer that record values are sliced from.

    Slicing consecutive windows of one big buffer costs far less than generating each
    value, and the buffer is larger than any batch so a compressor cannot find whole
    repeated records inside a batch (unlike a single fixed payload, which would make
    ``--compression`` look unrealistically good).
    """
    span = max(8 * MIB, record_size * 64)
    if kind == "random":
        return os.urandom(span + record_size)
    rnd = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyz"
    vocab = ["".join(rnd.choices(letters, k=rnd.randint(2, 10))) for _ in range(4000)]
    parts: list[str] = []
    size = 0
    while size < span + record_size:
        word = rnd.choice(vocab)
        parts.append(word)
        size += len(word) + 1
    return " ".join(parts).encode()[: span + record_size]

