"""Run a real Shoal broker as a child process, for integration tests.

Tests only ever reach the broker over TCP like any Kafka client does, so the same
suite checks whatever `python -m shoal broker` really does (no in-process shortcuts).
Also here: `run_shoal` (the `shoal` command as a process) and `wait_until` (bounded polling).
Beside it: `wire` (raw requests), `wire_requests` (one request, one answer), `record_batches`
(batch encoding, WAL objects), `classic_logs` (classic topics on disk), `workload` (the
sent-versus-read checks) and `kafka_clients` (confluent-kafka produce and consume).
"""

from __future__ import annotations

import os
import signal
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
SRC_DIR = REPO_ROOT / "src"
HOST = "127.0.0.1"
DEFAULT_START_TIMEOUT = 30.0


def support_module_env() -> dict[str, str]:
    """The environment of a helper process run as ``python -m tests.support.<module>``: the repo root
    importable, whatever the test run's working directory."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p)
    return env


_HANDED_OUT: set[int] = set()
"""Ports free_port() returned in this test run: a port picked but not yet bound (a cluster picks
all its ports before its first broker starts) is free again in the kernel's eyes, and it may hand
it out twice."""


def free_port() -> int:
    """A loopback port nobody listens on right now and that no earlier call returned (the kernel
    picks it, so parallel runs don't clash)."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((HOST, 0))
            port = int(s.getsockname()[1])
        if port not in _HANDED_OUT:
            _HANDED_OUT.add(port)
            return port


class BrokerError(RuntimeError):
    """The broker did not start, stop or stay up as expected; the message carries its log tail."""


def wait_ready(
    port: int,
    timeout: float = DEFAULT_START_TIMEOUT,
    *,
    host: str = HOST,
    proc: subprocess.Popen[bytes] | None = None,
    describe: Any = None,
) -> None:
    """Wait until the listener accepts TCP connections: the broker opens it last, so that means ready.

    Fails early when `proc` exits meanwhile, instead of waiting out the timeout.
    """
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            tail = describe() if callable(describe) else ""
            raise BrokerError(f"broker exited with code {proc.returncode} before listening\n{tail}")
        try:
            with socket.create_connection((host, port), timeout=1.0):
                return
        except OSError as exc:
            last_error = exc
            time.sleep(0.1)
    tail = describe() if callable(describe) else ""
    raise BrokerError(
        f"broker not accepting connections on {host}:{port} after {timeout}s ({last_error})\n{tail}"
    )


class BrokerProcess:
    """One `python -m shoal broker` node with its own data dir, port, objects and log file.

    The port is picked once at construction and kept across restarts, so clients and a
    restarted broker meet at the same address (like a real node after a reboot).
    """

    def __init__(
        self,
        data_dir: Path,
        *,
        storage_url: str | None = None,
        port: int | None = None,
        node_id: int = 1,
        overrides: Mapping[str, Any] | None = None,
        env: Mapping[str, str] | None = None,
        start_timeout: float = DEFAULT_START_TIMEOUT,
    ) -> None:
        self.data_dir = Path(data_dir)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.port = port if port is not None else free_port()
        self.node_id = node_id
        self.log_dir = self.data_dir / "kafka-logs"
        self.properties_path = self.data_dir / "server.properties"
        self.log_path = self.data_dir / "broker.log"
        self.objects_dir: Path | None = None
        if storage_url is None:
            self.objects_dir = self.data_dir / "objects"
            self.objects_dir.mkdir(parents=True, exist_ok=True)
            storage_url = f"file://{self.objects_dir}"
        self.storage_url = storage_url
        self.overrides: dict[str, str] = {k: str(v) for k, v in (overrides or {}).items()}
        self.extra_env = dict(env or {})
        self.start_timeout = start_timeout
        self.proc: subprocess.Popen[bytes] | None = None
        self._launched_at = 0.0
        self.starts = 0
        self.stopped_on_purpose = False

    # -- addresses -----------------------------------------------------------------------------
    @property
    def host(self) -> str:
        return HOST

    @property
    def bootstrap(self) -> str:
        return f"{HOST}:{self.port}"

    def __repr__(self) -> str:
        return f"BrokerProcess({self.bootstrap}, data_dir={self.data_dir})"

    # -- lifecycle -----------------------------------------------------------------------------
    def properties(self) -> dict[str, str]:
        """The server.properties content: Kafka's names, as an operator would write them."""
        props = {
            "node.id": str(self.node_id),
            "listeners": f"PLAINTEXT://{HOST}:{self.port}",
            "advertised.listeners": f"PLAINTEXT://{HOST}:{self.port}",
            "log.dirs": str(self.log_dir),
            "diskless.system.enable": "true",
            "diskless.storage.url": self.storage_url,
        }
        return props

    def command(self) -> list[str]:
        cmd = [sys.executable, "-m", "shoal", "broker", str(self.properties_path)]
        for key, value in self.overrides.items():
            cmd += ["--override", f"{key}={value}"]
        return cmd

    def environment(self) -> dict[str, str]:
        env = dict(os.environ)
        # The package may not be installed into the venv: make `-m shoal` importable from src/.
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(SRC_DIR), env.get("PYTHONPATH", "")) if p)
        env["PYTHONUNBUFFERED"] = "1"
        env.update(self.extra_env)
        return env

    def launch(self) -> BrokerProcess:
        """Write server.properties and start the process, without waiting for it to listen
        (``wait_started``): several brokers can start side by side."""
        if self.is_running():
            raise BrokerError(f"{self!r} already running")
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.properties_path.write_text("".join(f"{k}={v}\n" for k, v in self.properties().items()))
        self.starts += 1
        self.stopped_on_purpose = False
        with open(self.log_path, "ab") as log:
            log.write(f"\n===== test harness: start #{self.starts}: {' '.join(self.command())}\n".encode())
            log.flush()
            self.proc = subprocess.Popen(
                self.command(),
                cwd=self.data_dir,
                env=self.environment(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,  # a Ctrl-C on pytest must not hit the broker mid-test
            )
        self._launched_at = time.monotonic()
        return self

    def wait_started(self, timeout: float | None = None) -> BrokerProcess:
        """Wait until the launched process listens, at most `timeout` seconds from its launch
        (default: `start_timeout`); kill it and raise with the log tail if it does not."""
        if self.proc is None:
            raise BrokerError(f"{self!r} was never launched")
        limit = timeout if timeout is not None else self.start_timeout
        # Counted from the launch, so brokers launched together share their start time; always
        # at least a moment, so one that is ready by now is found ready.
        remaining = max(0.5, limit - (time.monotonic() - self._launched_at))
        try:
            wait_ready(self.port, remaining, proc=self.proc, describe=self.log_tail)
        except BrokerError:
            self.kill()
            raise
        return self

    def start(self, timeout: float | None = None) -> BrokerProcess:
        """Start the process and wait until it listens; raise with the log tail if it can't."""
        return self.launch().wait_started(timeout)

    def is_running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def returncode(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def stop(self, timeout: float = 30.0) -> int | None:
        """SIGTERM and wait: the clean shutdown. Raises if the broker does not exit in `timeout`."""
        if self.proc is None:
            return None
        self.stopped_on_purpose = True
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
                raise BrokerError(
                    f"broker ignored SIGTERM for {timeout}s (killed)\n{self.log_tail()}"
                ) from None
        return self.proc.returncode

    def terminate(self) -> None:
        """SIGTERM without waiting (``stop`` or ``close`` waits afterwards): several brokers then
        shut down side by side. Never raises."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.stopped_on_purpose = True
        self.proc.send_signal(signal.SIGTERM)  # a no-op if it has just exited

    def kill(self) -> int | None:
        """SIGKILL: a crash, nothing gets a chance to flush."""
        if self.proc is None:
            return None
        self.stopped_on_purpose = True
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)
        return self.proc.returncode

    def restart(self, *, clean: bool = True, timeout: float | None = None) -> BrokerProcess:
        """Stop (SIGTERM if clean else SIGKILL) and start again on the same port and directories."""
        if clean:
            self.stop()
        else:
            self.kill()
        return self.start(timeout)

    def close(self) -> None:
        """Teardown: try a clean stop, never raise, never leave a process behind."""
        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            self.stop(timeout=15.0)
        except BrokerError:
            pass
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait(10)

    def __enter__(self) -> BrokerProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- inspection ----------------------------------------------------------------------------
    def log_tail(self, lines: int = 80) -> str:
        """The last lines of the broker's stderr/stdout, to print when a test fails."""
        try:
            data = self.log_path.read_bytes()
        except FileNotFoundError:
            return "(no broker log)"
        text = data[-256 * 1024 :].decode("utf-8", "replace").splitlines()
        return f"--- broker log tail ({self.log_path}) ---\n" + "\n".join(text[-lines:])

    def wal_objects(self) -> list[Path]:
        """WAL segment objects (`wal/<uuid>`) in the local object directory, oldest first."""
        if self.objects_dir is None:
            raise BrokerError("broker does not store objects locally")
        wal = self.objects_dir / "wal"
        if not wal.is_dir():
            return []
        # The object cleaner deletes objects while we look: one gone between listing and stat is skipped.
        stamped: list[tuple[int, str, Path]] = []
        for p in wal.rglob("*"):
            try:
                st = p.stat()
            except FileNotFoundError:
                continue
            if stat.S_ISREG(st.st_mode):
                stamped.append((st.st_mtime_ns, p.name, p))
        return [p for _, _, p in sorted(stamped)]


def wait_until(what: str, check: Any, timeout: float, interval: float = 0.2) -> Any:
    """Poll ``check()`` until it returns something truthy, bounded by ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"{what}: not reached within {timeout}s (last: {last!r})")


def run_shoal(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """The ``shoal`` command as an operator runs it (a process, like the broker)."""
    env = dict(os.environ)
    src = str(SRC_DIR)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH", "")) if p)
    return subprocess.run(
        [sys.executable, "-m", "shoal", *args], capture_output=True, text=True, timeout=timeout, env=env
    )
