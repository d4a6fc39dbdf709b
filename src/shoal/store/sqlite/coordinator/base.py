"""The connections every part of the SQLite Batch Coordinator works through.

Concurrency: every write runs on ONE writer connection under a ``threading.Lock``
inside ``BEGIN IMMEDIATE``, so offsets are assigned strictly serially (and SQLite's
write lock also serialises us against other processes on the file). Reads
(``find_batches``, ``list_offsets`` ...) take a connection from a small pool instead:
WAL mode lets them run in parallel with a commit that is waiting on fsync, so the
Fetch hot path never queues behind a producer's durable commit. Each read is a
single SELECT where consistency matters, which SQLite runs on one snapshot.
"""

from __future__ import annotations

import queue
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from shoal.store.sqlite.connection import apply_schema, open_sqlite
from shoal.store.sqlite.coordinator.schema import COMPONENT, MIGRATIONS


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class CoordinatorBase:
    """The writer connection, the reader pool and the clock; the concerns are mixins over it."""

    def __init__(self, path: str | Path, clock: Callable[[], int] = _wall_clock_ms) -> None:
        self._path = Path(path)
        self._clock = clock
        self._write_lock = threading.Lock()
        self._conn = open_sqlite(self._path)
        apply_schema(self._conn, COMPONENT, MIGRATIONS)
        self._readers: queue.SimpleQueue[sqlite3.Connection] = queue.SimpleQueue()
        self._all_readers: list[sqlite3.Connection] = []
        self._readers_lock = threading.Lock()
        self._closed = False

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("batch coordinator is closed")

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One serialised BEGIN IMMEDIATE transaction; committed (durably) on success."""
        with self._write_lock:
            self._check_open()
            conn = self._conn
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
                conn.execute("COMMIT")
            except BaseException:
                # SQLite may already have rolled back (e.g. on SQLITE_FULL); never leave a
                # transaction open on the shared connection, the next BEGIN would fail.
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise

    @contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        """A pooled read-only connection, so reads do not wait behind a commit's fsync."""
        self._check_open()
        try:
            conn = self._readers.get_nowait()
        except queue.Empty:
            conn = open_sqlite(self._path)
            conn.execute("PRAGMA query_only=ON")
            with self._readers_lock:
                self._all_readers.append(conn)
        try:
            yield conn
        finally:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            self._readers.put(conn)

    def close(self) -> None:
        """Close every connection; later calls raise RuntimeError."""
        with self._write_lock:
            if self._closed:
                return
            self._closed = True
            self._conn.close()
        with self._readers_lock:
            for conn in self._all_readers:
                conn.close()
            self._all_readers.clear()
