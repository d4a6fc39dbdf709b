"""The connection pool every part of the PostgreSQL Batch Coordinator works through.

Concurrency: several brokers (and several threads of each) call the same database at once.
Every write is ONE transaction at PostgreSQL's default READ COMMITTED level that first locks
the ``diskless_logs`` rows it works on, in log_id order (``logs.lock_logs``): offsets of a
partition are assigned strictly serially, transactions on different partitions run in
parallel, and the fixed lock order means they never deadlock. Should one still fail with a
serialization failure or a deadlock, the whole transaction runs again (``_transaction``).

Round trips: connections run in pipeline mode, so statements whose results are not needed
before the next one is sent travel together (BEGIN with the first reads, the writes with
COMMIT); a commit of any number of batches is three round trips (the pool's liveness check
of the connection, the locked reads, the writes).

Outages: every PostgreSQL error that means "unreachable" (``UNAVAILABLE_ERRORS``: a refused or
lost connection, the server shutting down, no connection within ``connect_timeout_s``) is
raised as ``CoordinatorUnavailableError``. The pool replaces dead connections by itself, so
once the server is back the next calls work again without reopening the coordinator. When a
call finds dead connections (the server restarted or failed over), every idle connection of the
pool is checked at once, and the call runs again if nothing of it can have reached the server
(a read; a write whose connection was never handed out): the first call after a restart
neither fails nor leaves the next ones to trip over the other dead connections.
"""

from __future__ import annotations

import random
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

import psycopg

from shoal.coordinator.api import CoordinatorUnavailableError
from shoal.store.postgres.connection import (
    RETRIABLE_ERRORS,
    UNAVAILABLE_ERRORS,
    apply_schema,
    open_pool,
    redact,
)
from shoal.store.postgres.coordinator.schema import COMPONENT, MIGRATIONS

T = TypeVar("T")

#: Attempts of one write transaction that keeps failing with serialization failures or deadlocks.
_ATTEMPTS = 8


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class CoordinatorBase:
    """The pool, the clock and the transaction runner; the concerns are mixins over it."""

    def __init__(
        self,
        url: str,
        clock: Callable[[], int] = _wall_clock_ms,
        *,
        connect_timeout_s: float = 10.0,
        pool_size: int = 8,
    ) -> None:
        """Connect to ``url`` (a ``postgresql://`` URL) and create or upgrade the tables.

        ``connect_timeout_s`` bounds how long a call waits for a connection (so how long a call
        takes to raise CoordinatorUnavailableError while the server is down), how long opening
        waits for the first connection, and how long a transaction waits for a lock another one
        holds (``lock_timeout``). The server also ends a session left idle inside a transaction
        that long (``idle_in_transaction_session_timeout``), so a broker that hangs mid-commit
        cannot hold partitions locked. Raises CoordinatorUnavailableError when the server cannot
        be reached.
        """
        self._url = url
        self._where = redact(url)
        self._clock = clock
        self._closed = False
        self._close_lock = threading.Lock()
        self._lost_seen = 0  # dead connections the pool had found when a call last failed
        self._timeout_ms = max(1, int(connect_timeout_s * 1000))
        self._configured: weakref.WeakSet[psycopg.Connection] = weakref.WeakSet()
        try:
            self._pool = open_pool(
                url, name="shoal-diskless-coordinator", max_size=pool_size, timeout=connect_timeout_s
            )
        except UNAVAILABLE_ERRORS as exc:
            raise CoordinatorUnavailableError(f"Batch Coordinator at {self._where}: {exc}") from exc
        try:
            apply_schema(self._pool, COMPONENT, MIGRATIONS)
        except BaseException as exc:
            self._pool.close()
            if isinstance(exc, UNAVAILABLE_ERRORS):
                raise CoordinatorUnavailableError(f"Batch Coordinator at {self._where}: {exc}") from exc
            raise

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("batch coordinator is closed")

    def _unavailable(self, what: str, exc: BaseException) -> CoordinatorUnavailableError:
        return CoordinatorUnavailableError(f"{what}: Batch Coordinator at {self._where} unavailable: {exc}")

    def _transaction(self, what: str, work: Callable[[psycopg.Connection], T]) -> T:
        """Run ``work(conn)`` in one read-write transaction, committed on return.

        The connection is in pipeline mode: ``conn.execute`` queues a statement and fetching
        a result sends everything queued. On a serialization failure or a deadlock the whole
        transaction is rolled back and ``work`` runs again from scratch (it must not keep
        state between attempts). Any other error rolls back and propagates, unavailability as
        CoordinatorUnavailableError (a lost COMMIT answer leaves the outcome unknown).
        """
        return self._run(what, work, write=True)

    def _read(self, what: str, work: Callable[[psycopg.Connection], T], *, snapshot: bool = False) -> T:
        """Run ``work(conn)`` on a pooled autocommit connection in pipeline mode.

        Each statement sees its own snapshot, unless ``snapshot``: then they all run in one
        REPEATABLE READ READ ONLY transaction (sent with the first statement, no extra trip).
        """
        return self._run(what, work, write=False, snapshot=snapshot)

    def _run(
        self, what: str, work: Callable[[psycopg.Connection], T], *, write: bool, snapshot: bool = False
    ) -> T:
        self._check_open()
        conflicts = 0
        outage_retried = False
        while True:
            handed_out = False
            try:
                with self._pool.connection() as conn:
                    self._configure(conn)
                    handed_out = True
                    with conn.pipeline():
                        if write:
                            with conn.transaction():
                                return work(conn)
                        if snapshot:
                            with _read_only_snapshot(conn):
                                return work(conn)
                        return work(conn)
            except RETRIABLE_ERRORS as exc:
                conflicts += 1
                if conflicts >= _ATTEMPTS:
                    raise self._unavailable(what, exc) from exc
                time.sleep(random.uniform(0.001, 0.005) * 2**conflicts)
            except UNAVAILABLE_ERRORS as exc:
                if self._closed:
                    raise RuntimeError("batch coordinator is closed") from exc
                # Dead connections met: drop every other dead one now, not one per later call.
                self._pool.check()
                lost = int(self._pool.get_stats().get("connections_lost", 0))
                restarted, self._lost_seen = lost > self._lost_seen, lost
                if restarted and not outage_retried and not (write and handed_out):
                    outage_retried = True  # nothing of this call reached the server: run it again
                    continue
                raise self._unavailable(what, exc) from exc

    def _configure(self, conn: psycopg.Connection) -> None:
        """Session settings, once per connection (the pool keeps them: it never resets sessions)."""
        if conn not in self._configured:
            conn.execute(
                f"SET lock_timeout = {self._timeout_ms}; "
                f"SET idle_in_transaction_session_timeout = {self._timeout_ms}"
            )
            self._configured.add(conn)

    def close(self) -> None:
        """Close the pool; later calls raise RuntimeError."""
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        self._pool.close()


@contextmanager
def _read_only_snapshot(conn: psycopg.Connection) -> Iterator[None]:
    conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
    try:
        yield
    finally:
        conn.execute("ROLLBACK")  # nothing to commit: it only read
