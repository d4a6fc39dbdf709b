"""``shoal up --brokers N`` started by a bench script on a fresh data dir: the supervisor, each
broker's pid, SIGSTOP/SIGCONT of one broker, and a clean stop (any broker that outlives its
supervisor is killed). Used by ``replication.py``, ``cache_replicas.py`` and ``tiered.py``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench_common import client_logger  # bench/ is on sys.path when a bench script runs
from cluster import free_base_port

ROOT = Path(__file__).resolve().parents[1]

#: ``shoal up``'s supervisor logs this line for each broker it starts.
_STARTED = re.compile(r"Started broker-\d+ \(node (\d+), pid (\d+)\)")


def log(msg: str) -> None:
    print(f"[cluster {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def admin_client(bootstrap: str) -> Any:
    """An AdminClient whose librdkafka log lines (a stopped broker makes it chatty) are capped."""
    from confluent_kafka.admin import AdminClient

    return AdminClient(
        {"bootstrap.servers": bootstrap, "client.id": "bench-cluster", "logger": client_logger("cluster-admin", 30)[0]}
    )


def _listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def _parent_pid(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[1])  # the field after the state, past "(comm)"


class Cluster:
    """``shoal up --brokers N`` on a fresh data dir: its supervisor, and each broker's pid."""

    def __init__(self, args: argparse.Namespace, up_args: list[str] | None = None) -> None:
        self.args = args
        self.up_args = list(up_args or [])  # more `shoal up` options, e.g. ["--racks", "a,b,c"]
        self.count = args.brokers
        base = free_base_port(self.count)
        self.ports = list(range(base, base + self.count))
        parent = Path(args.data_parent)
        parent.mkdir(parents=True, exist_ok=True)
        self.data_dir = Path(tempfile.mkdtemp(prefix="replication-bench-", dir=parent))
        self.log_path = self.data_dir / "up.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.broker_pids: dict[int, int] = {}
        self.stopped: set[int] = set()

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{p}" for p in self.ports)

    def address(self, node_id: int) -> str:
        return f"127.0.0.1:{self.ports[node_id - 1]}"

    def start(self) -> None:
        cmd = [
            sys.executable,
            "-m",
            "shoal",
            "up",
            "--data-dir",
            str(self.data_dir),
            "--brokers",
            str(self.count),
            "--override",
            f"listeners=PLAINTEXT://127.0.0.1:{self.ports[0]}",
        ]
        for item in self.args.broker_override:
            cmd += ["--override", item]
        cmd += self.up_args
        log(f"starting {' '.join(cmd[1:])}")
        with open(self.log_path, "wb") as out:
            self.proc = subprocess.Popen(cmd, cwd=ROOT, stdout=out, stderr=out, start_new_session=True)
        deadline = time.monotonic() + self.args.startup_timeout
        for port in self.ports:
            while not _listening(port):
                if self.proc.poll() is not None:
                    raise RuntimeError(f"shoal up exited with {self.proc.returncode} while starting")
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"broker on port {port} not listening after {self.args.startup_timeout}s"
                    )
                time.sleep(0.2)
        while len(self.broker_pids) < self.count:
            if self.proc.poll() is not None:
                raise RuntimeError(f"shoal up exited with {self.proc.returncode} while starting")
            for node, pid in _STARTED.findall(self.log_path.read_text(errors="replace")):
                if _parent_pid(int(pid)) == self.proc.pid:
                    self.broker_pids[int(node)] = int(pid)
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"found {len(self.broker_pids)} of {self.count} broker pids in {self.log_path}"
                )
            time.sleep(0.2)
        admin = admin_client(self.bootstrap)
        while True:  # every broker registered (and so listed in Metadata)
            with contextlib.suppress(Exception):
                if len(admin.list_topics(timeout=5).brokers) >= self.count:
                    break
            if time.monotonic() > deadline:
                raise RuntimeError(f"not every broker registered after {self.args.startup_timeout}s")
            time.sleep(0.5)
        log(f"cluster up on {self.bootstrap}: broker pids {self.broker_pids}, data dir {self.data_dir}")

    def log_tail(self, lines: int = 40) -> list[str]:
        """The last lines of ``shoal up``'s output (for the JSON when something went wrong)."""
        try:
            return self.log_path.read_text(errors="replace").splitlines()[-lines:]
        except OSError:
            return []

    def _ours(self, node_id: int) -> int:
        """The pid of broker ``node_id``, checked to still be a child of our ``shoal up``."""
        pid = self.broker_pids[node_id]
        if self.proc is None or _parent_pid(pid) != self.proc.pid:
            raise RuntimeError(f"broker {node_id} (pid {pid}) is no longer a child of shoal up")
        return pid

    def pause(self, node_id: int) -> None:
        os.kill(self._ours(node_id), signal.SIGSTOP)
        self.stopped.add(node_id)

    def resume(self, node_id: int) -> None:
        os.kill(self._ours(node_id), signal.SIGCONT)
        self.stopped.discard(node_id)

    def segment_bytes(self, node_id: int, topic: str) -> int:
        """Bytes of the ``.log`` segment files of ``topic`` in broker ``node_id``'s log dir."""
        logs = self.data_dir / f"broker-{node_id}" / "logs"
        return sum(f.stat().st_size for f in logs.glob(f"{_glob_escape(topic)}-*/*.log") if f.is_file())

    def _is_broker(self, node_id: int, pid: int) -> bool:
        """Whether ``pid`` still is broker ``node_id`` of this cluster (it runs in its own directory)."""
        try:
            cwd = os.readlink(f"/proc/{pid}/cwd")
        except OSError:
            return False
        return Path(cwd) == (self.data_dir / f"broker-{node_id}").resolve()

    def stop(self) -> None:
        """Resume any stopped broker, SIGTERM the supervisor (it stops the brokers), then clean up."""
        for node_id in list(self.stopped):
            with contextlib.suppress(Exception):
                self.resume(node_id)
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                log("shoal up still runs 60s after SIGTERM: killing it")
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        # The brokers get SIGTERM when their supervisor dies; kill any of ours still there after 30 s.
        deadline = time.monotonic() + 30
        for node_id, pid in self.broker_pids.items():
            while self._is_broker(node_id, pid) and time.monotonic() < deadline:
                time.sleep(0.2)
            if self._is_broker(node_id, pid):
                log(f"broker {node_id} (pid {pid}) outlived shoal up: killing it")
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        if not self.args.keep_data:
            shutil.rmtree(self.data_dir, ignore_errors=True)


def _glob_escape(text: str) -> str:
    return re.sub(r"([\[\]*?])", r"[\1]", text)
