"""PostgreSQL plumbing shared by the metadata log, the Batch Coordinator and the group store.

Connections come from a psycopg-pool ``ConnectionPool`` that checks each connection as it is
handed out, so a server that restarted or failed over is reconnected to without the caller
noticing (the first call after the outage may still fail, as ``unavailable`` says). Every
transaction commits with PostgreSQL's default ``synchronous_commit=on``: a commit that returns
is on the server's disk, which is what an acknowledgement to a producer needs.

Schemas are versioned per component in ``schema_versions``, as in the SQLite backend; the
migrations of a component are applied in one transaction under an advisory lock, so brokers
starting at the same moment apply each migration exactly once.
"""

from __future__ import annotations

import random
import time
import weakref
import zlib
from collections.abc import Callable, Sequence
from typing import TypeVar
from urllib.parse import urlsplit

import psycopg
import psycopg_pool

#: Errors that mean "the database could not be reached or dropped us", not "the SQL is wrong".
UNAVAILABLE_ERRORS: tuple[type[BaseException], ...] = (psycopg.OperationalError, psycopg_pool.PoolTimeout)
#: Errors after which the same transaction may simply be run again.
RETRIABLE_ERRORS: tuple[type[BaseException], ...] = (
    psycopg.errors.SerializationFailure,
    psycopg.errors.DeadlockDetected,
)


def is_postgres_url(url: str) -> bool:
    return urlsplit(url).scheme in ("postgresql", "postgres")


def redact(url: str) -> str:
    """The URL without its password, for logs and messages."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
    return parts._replace(netloc=netloc).geturl()


def open_pool(
    url: str, *, name: str, max_size: int = 8, timeout: float = 30.0
) -> psycopg_pool.ConnectionPool:
    """A pool of connections to ``url``; waits up to ``timeout`` seconds for the first one.

    After an outage the pool tries to reconnect for ``timeout`` seconds at a time (psycopg-pool's
    default backs off for minutes), so a store is usable again about a second after the server is.
    """
    pool = psycopg_pool.ConnectionPool(
        url,
        min_size=1,
        max_size=max_size,
        name=name,
        timeout=timeout,
        check=psycopg_pool.ConnectionPool.check_connection,
        kwargs={
            "autocommit": True,
            "connect_timeout": max(1, int(timeout)),
            # A server that vanished without closing the connection (host down, network cut) is
            # noticed within about ``timeout`` instead of TCP's many minutes: keepalive probes on
            # an idle connection, and a bound on unacknowledged sends while a request is out.
            "keepalives": 1,
            "keepalives_idle": max(1, int(timeout / 2)),
            "keepalives_interval": max(1, int(timeout / 6)),
            "keepalives_count": 3,
            "tcp_user_timeout": max(1000, int(timeout * 1000)),
        },
        reconnect_timeout=timeout,
        open=False,
    )
    try:
        pool.open(wait=True, timeout=timeout)
    except psycopg_pool.PoolTimeout:
        pool.close()
        raise psycopg.OperationalError(
            f"cannot connect to PostgreSQL at {redact(url)} within {timeout:g}s"
        ) from None
    return pool


def apply_schema(pool: psycopg_pool.ConnectionPool, component: str, migrations: Sequence[str]) -> None:
    """Apply the not-yet-applied migrations of one component, all in one transaction.

    ``migrations[i]`` is SQL (several statements allowed) that brings ``component`` from version
    i to i+1. Concurrent callers serialise on one advisory lock for every component: brokers
    starting at once on an empty database would otherwise race to create ``schema_versions``.
    """
    lock_id = zlib.crc32(b"shoal-schema")
    with pool.connection() as conn, conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (lock_id,))
        conn.execute(
            "CREATE TABLE IF NOT EXISTS schema_versions (component TEXT PRIMARY KEY, version INTEGER NOT NULL)"
        )
        row = conn.execute(
            "SELECT version FROM schema_versions WHERE component = %s", (component,)
        ).fetchone()
        current = row[0] if row else 0
        if current > len(migrations):
            raise RuntimeError(
                f"the {component} tables are at schema version {current}, newer than this Shoal "
                f"version knows ({len(migrations)}): upgrade Shoal"
            )
        for version in range(current, len(migrations)):
            conn.execute(migrations[version])  # type: ignore[arg-type] - trusted SQL from this package
            conn.execute(
                "INSERT INTO schema_versions (component, version) VALUES (%s, %s) "
                "ON CONFLICT (component) DO UPDATE SET version = excluded.version",
                (component, version + 1),
            )


T = TypeVar("T")


class PooledStore:
    """What the metadata and group stores do with their pool, written once: open it and apply the
    schema; bound lock waits on every connection, and let the server end a transaction whose
    client vanished mid-way (it would otherwise hold its row locks, the controller lease row
    among them, until TCP noticed); run work again after a deadlock or serialisation failure;
    and name the store when the server cannot be reached (``psycopg.OperationalError``).

    ``timeout`` (seconds) bounds the wait for a connection, each connection attempt and each
    lock wait. Thread-safe: each call uses its own pooled connection.
    """

    RETRIES = 5

    def __init__(
        self,
        url: str,
        *,
        what: str,
        component: str,
        migrations: Sequence[str],
        timeout: float,
        max_connections: int,
    ) -> None:
        self._what = what
        self._where = redact(url)
        self._timeout_ms = max(1, int(timeout * 1000))
        self._prepared: weakref.WeakSet[psycopg.Connection] = weakref.WeakSet()
        try:
            self._pool = open_pool(url, name=f"shoal-{component}", max_size=max_connections, timeout=timeout)
        except UNAVAILABLE_ERRORS as exc:
            raise psycopg.OperationalError(f"the {what} at {self._where} is unavailable: {exc}") from exc
        try:
            apply_schema(self._pool, component, migrations)
        except UNAVAILABLE_ERRORS as exc:
            self._pool.close()
            raise psycopg.OperationalError(f"the {what} at {self._where} is unavailable: {exc}") from exc
        except BaseException:
            self._pool.close()
            raise

    def close(self) -> None:
        self._pool.close()

    def _run(self, doing: str, work: Callable[[psycopg.Connection], T]) -> T:
        """``work`` on a pooled connection; retries deadlocks, names the store on unavailability."""
        for attempt in range(self.RETRIES + 1):
            try:
                with self._pool.connection() as conn:
                    self._prepare(conn)
                    return work(conn)
            except RETRIABLE_ERRORS:
                if attempt == self.RETRIES:
                    raise
                time.sleep(random.uniform(0.005, 0.05) * (attempt + 1))
            except UNAVAILABLE_ERRORS as exc:
                raise psycopg.OperationalError(
                    f"the {self._what} at {self._where} is unavailable ({doing}): {exc}"
                ) from exc
        raise AssertionError("unreachable")  # pragma: no cover

    def _prepare(self, conn: psycopg.Connection) -> None:
        if conn in self._prepared:
            return
        conn.execute(
            f"SET lock_timeout = {self._timeout_ms}; SET idle_in_transaction_session_timeout = {self._timeout_ms}"
        )
        self._prepared.add(conn)
