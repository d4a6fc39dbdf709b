"""SQLite plumbing shared by the metadata log and the Batch Coordinator.

One database file (WAL mode) holds both. ``synchronous=FULL`` because a commit
that returns is an acknowledgement to a producer: it must survive power loss.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from pathlib import Path


def open_sqlite(path: str | Path) -> sqlite3.Connection:
    """Open (creating if needed) a database file ready for concurrent, durable use.

    The connection may be used from any single thread at a time (callers serialise).
    Transactions are explicit: ``isolation_level=None`` and ``BEGIN IMMEDIATE``.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False, timeout=30.0)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute("PRAGMA foreign_keys=ON")
    conn.execute("PRAGMA busy_timeout=30000")
    return conn


def apply_schema(conn: sqlite3.Connection, component: str, migrations: Sequence[str]) -> None:
    """Apply the not-yet-applied migrations of one component, each in its own transaction.

    ``migrations[i]`` is a script that brings ``component`` from version i to i+1.
    """
    conn.execute(
        "CREATE TABLE IF NOT EXISTS schema_versions (component TEXT PRIMARY KEY, version INTEGER NOT NULL)"
    )
    row = conn.execute("SELECT version FROM schema_versions WHERE component = ?", (component,)).fetchone()
    current = row[0] if row else 0
    for version in range(current, len(migrations)):
        conn.execute("BEGIN IMMEDIATE")
        try:
            # Re-read under the write lock: another process sharing the file (brokers started
            # together) may have applied this migration since the read above.
            row = conn.execute("SELECT version FROM schema_versions WHERE component = ?", (component,)).fetchone()
            if (row[0] if row else 0) > version:
                conn.execute("COMMIT")
                continue
            for statement in migrations[version].split(";\n"):
                if statement.strip():
                    conn.execute(statement)
            conn.execute(
                "INSERT INTO schema_versions (component, version) VALUES (?, ?) "
                "ON CONFLICT(component) DO UPDATE SET version = excluded.version",
                (component, version + 1),
            )
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
