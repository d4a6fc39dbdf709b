"""A real PostgreSQL server for the tests: Debian's ``postgresql`` binaries, ``initdb`` in a
temporary directory as the ``postgres`` user, listening on a loopback port.

One server serves a whole test session (starting one takes a few seconds); each test gets its
own database, so tests never see each other's rows. ``stop``/``start``/``kill`` let fault
tests take the server away under a running broker.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import uuid
from pathlib import Path

import psycopg

from tests.support.broker import free_port


def postgres_bindir() -> Path | None:
    """The newest installed PostgreSQL's bin directory (Debian layout), or None."""
    candidates = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"), key=lambda p: int(p.parent.parent.name))
    return candidates[-1].parent if candidates else None


class PostgresServer:
    """One PostgreSQL server in its own data directory, owned by the ``postgres`` user."""

    def __init__(self) -> None:
        bindir = postgres_bindir()
        if bindir is None:
            raise RuntimeError("PostgreSQL is not installed: apt-get install postgresql")
        self.bindir = bindir
        self.base = Path(tempfile.mkdtemp(prefix="shoal-pg-"))
        self.data = self.base / "data"
        self.log = self.base / "server.log"
        self.port = free_port()
        os.chmod(self.base, 0o755)
        shutil.chown(self.base, "postgres", "postgres")
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync")

    def _run(self, tool: str, *args: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [str(self.bindir / tool), *args], user="postgres", cwd=self.base, capture_output=True, text=True,
            timeout=120, check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"{tool} failed ({done.returncode}): {done.stdout}\n{done.stderr}\n{self.log_tail()}")
        return done

    def start(self) -> None:
        options = (
            f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.base} -c max_connections=300 "
            "-c fsync=on -c synchronous_commit=on"
        )
        self._run("pg_ctl", "-D", str(self.data), "-o", options, "-l", str(self.log), "-w", "-t", "60", "start")

    def stop(self) -> None:
        """A fast shutdown: open connections are closed, in-flight transactions roll back."""
        if (self.data / "postmaster.pid").exists():
            self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")

    def kill(self) -> None:
        """Crash the server (``pg_ctl stop -m immediate``: every process quits at once, no
        checkpoint; the next start recovers from the WAL), as a failed database host would.
        SIGKILL of the postmaster alone would leave its backends holding shared memory."""
        if (self.data / "postmaster.pid").exists():
            self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def create_database(self, name: str | None = None) -> str:
        """A new empty database; returns its URL."""
        name = name or f"t_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def close(self) -> None:
        try:
            self.stop()
        except Exception:
            self.kill()
        shutil.rmtree(self.base, ignore_errors=True)
