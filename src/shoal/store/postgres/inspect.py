"""Read-only questions tools ask a PostgreSQL store before opening it (nothing is created)."""

from __future__ import annotations

import psycopg


def schema_components(url: str) -> set[str]:
    """The components whose tables the database holds (empty when Shoal never ran there)."""
    with psycopg.connect(url, connect_timeout=10, autocommit=True) as conn:
        exists = conn.execute("SELECT to_regclass('schema_versions') IS NOT NULL").fetchone()
        if not exists or not exists[0]:
            return set()
        return {row[0] for row in conn.execute("SELECT component FROM schema_versions")}
