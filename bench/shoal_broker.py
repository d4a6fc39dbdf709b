"""One Shoal broker (``shoal up``) on a fresh data dir, as a subprocess, for the benches that start
their own (``transactions.py``, ``tiered.py``, ``log_compaction.py``).

``ShoalBroker(data_parent, prefix, overrides, ports=N)`` finds N consecutive free loopback ports
(the first is the listener; the others are the caller's, e.g. ``metrics.http.port``), makes
``<data_parent>/<prefix>XXXX`` and starts ``python -m shoal up --data-dir <it> --override
listeners=PLAINTEXT://127.0.0.1:<port> --override ...`` (the overrides in order; the list may be
extended before ``start``) with its output in ``<data dir>/up.log``; ``start`` returns once the
listener accepts connections. ``stop`` sends SIGTERM to the process group (SIGKILL after 60 s) and
removes the data dir unless ``keep_data``.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

from cluster import _wait_listening, free_base_port  # bench/ is on sys.path when a bench script runs

ROOT = Path(__file__).resolve().parent.parent


class ShoalBroker:
    """``shoal up`` (one broker) on a fresh data dir."""

    def __init__(
        self,
        data_parent: str | Path,
        prefix: str,
        overrides: Iterable[str] = (),
        *,
        ports: int = 1,
        startup_timeout: float = 60.0,
        keep_data: bool = False,
        log: Callable[[str], None] | None = None,
    ) -> None:
        self.port = free_base_port(ports)
        self.ports = list(range(self.port, self.port + ports))
        Path(data_parent).mkdir(parents=True, exist_ok=True)
        self.data_dir = Path(tempfile.mkdtemp(prefix=prefix, dir=data_parent))
        self.overrides = [f"listeners=PLAINTEXT://127.0.0.1:{self.port}", *overrides]
        self.startup_timeout = startup_timeout
        self.keep_data = keep_data
        self.log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        cmd = [sys.executable, "-m", "shoal", "up", "--data-dir", str(self.data_dir)]
        for item in self.overrides:
            cmd += ["--override", item]
        self.log(f"starting {' '.join(cmd[1:])}")
        with open(self.data_dir / "up.log", "wb") as out:
            self.proc = subprocess.Popen(cmd, cwd=ROOT, stdout=out, stderr=out, start_new_session=True)
        _wait_listening([self.port], self.startup_timeout)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        if not self.keep_data:
            shutil.rmtree(self.data_dir, ignore_errors=True)
