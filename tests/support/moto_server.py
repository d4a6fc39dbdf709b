"""Run moto's S3 server as a real separate process on a free 127.0.0.1 port.

Tests talk to it over HTTP exactly as the broker talks to AWS S3 or MinIO, so
the real client stack (obstore, signing, retries, timeouts) is exercised.

Usage::

    with moto_s3_server() as s3:
        s3.create_bucket("shoal")
        storage = open_object_storage(s3.storage_url("shoal", "wal"))

or, as a pytest fixture::

    @pytest.fixture(scope="module")
    def s3():
        with moto_s3_server() as server:
            yield server

Credentials: moto accepts any signature, but S3 clients refuse to run without
credentials (obstore would otherwise probe the EC2 metadata endpoint). Either
use ``storage_url()``, which embeds fake ones, or give the client process the
variables in ``FAKE_AWS_ENV`` (see ``client_env()``), e.g. when starting a
broker subprocess.

Each server keeps its state in memory, so stopping it loses all buckets;
``reset()`` empties it without a restart. ``pause()``/``resume()`` freeze the
process (SIGSTOP/SIGCONT) to simulate a store that accepts connections but
never answers.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from urllib.parse import quote, urlencode

from tests.support.broker import free_port

__all__ = ["FAKE_AWS_ENV", "MotoS3Server", "moto_s3_server"]

FAKE_AWS_ENV: dict[str, str] = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_REGION": "us-east-1",
}
"""Fake credentials a client of the moto server needs in its environment."""

_START_ATTEMPTS = 3


class MotoS3Server:
    """One moto server subprocess; ``start()`` returns once it answers HTTP."""

    def __init__(self, startup_timeout: float = 60.0) -> None:
        self._startup_timeout = startup_timeout
        self._process: subprocess.Popen[bytes] | None = None
        self._port: int | None = None
        self._log_path: Path | None = None
        self._paused = False

    # -- lifecycle --------------------------------------------------------------

    @property
    def running(self) -> bool:
        """Whether the subprocess is alive."""
        return self._process is not None and self._process.poll() is None

    @property
    def port(self) -> int:
        """The TCP port the server listens on (127.0.0.1)."""
        if self._port is None:
            raise RuntimeError("moto server is not started")
        return self._port

    @property
    def url(self) -> str:
        """The S3 endpoint, ``http://127.0.0.1:PORT``."""
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> MotoS3Server:
        """Spawn the server and wait until it serves requests."""
        if self.running:
            return self
        last_error = ""
        for _ in range(_START_ATTEMPTS):
            port = free_port()
            if self._spawn(port):
                atexit.register(self.stop)
                return self
            last_error = self._read_log()
            self._reap()
        raise RuntimeError(f"moto server failed to start after {_START_ATTEMPTS} attempts:\n{last_error}")

    def _spawn(self, port: int) -> bool:
        fd, log_name = tempfile.mkstemp(prefix="moto-s3-", suffix=".log")
        os.close(fd)
        self._log_path = Path(log_name)
        env = {**os.environ, **FAKE_AWS_ENV}
        with open(self._log_path, "wb") as log:
            self._process = subprocess.Popen(
                [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
            )
        self._port = port
        deadline = time.monotonic() + self._startup_timeout
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                return False
            try:
                with urllib.request.urlopen(f"{self.url}/", timeout=2) as response:
                    if response.status == 200:
                        return True
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
                time.sleep(0.1)
        return False

    def _read_log(self) -> str:
        if self._log_path is None:
            return ""
        try:
            return self._log_path.read_text(errors="replace")[-4000:]
        except OSError:
            return ""

    def _reap(self) -> None:
        """Terminate (then kill) our subprocess and remove its log."""
        process, self._process = self._process, None
        if process is not None:
            if self._paused:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(process.pid, signal.SIGCONT)
                self._paused = False
            if process.poll() is None:
                process.terminate()
                try:
                    process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait(timeout=10)
        if self._log_path is not None:
            with contextlib.suppress(OSError):
                self._log_path.unlink()
            self._log_path = None

    def stop(self) -> None:
        """Stop the server (idempotent); its port is then refused."""
        self._reap()
        atexit.unregister(self.stop)

    def pause(self) -> None:
        """Freeze the server: connections are accepted by the kernel but never answered."""
        if not self.running or self._process is None:
            raise RuntimeError("moto server is not running")
        os.kill(self._process.pid, signal.SIGSTOP)
        self._paused = True

    def resume(self) -> None:
        """Undo ``pause()``."""
        if self._process is not None and self._paused:
            os.kill(self._process.pid, signal.SIGCONT)
            self._paused = False

    def __enter__(self) -> MotoS3Server:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- helpers for tests ------------------------------------------------------

    def _request(self, method: str, path: str) -> int:
        request = urllib.request.Request(
            f"{self.url}{path}", method=method, data=b"" if method == "PUT" else None
        )
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return int(response.status)
        except urllib.error.HTTPError as e:
            raise RuntimeError(f"moto {method} {path} failed: HTTP {e.code} {e.read()[:500]!r}") from e

    def create_bucket(self, name: str) -> None:
        """Create a bucket with a plain (unsigned) PUT, which moto accepts."""
        self._request("PUT", f"/{quote(name)}")

    def reset(self) -> None:
        """Forget all buckets and objects (moto's reset API)."""
        self._request("POST", "/moto-api/reset")

    def client_env(self) -> dict[str, str]:
        """Environment for a client subprocess: fake credentials plus the endpoint."""
        return {**FAKE_AWS_ENV, "AWS_ENDPOINT_URL": self.url, "AWS_ALLOW_HTTP": "true"}

    def storage_url(self, bucket: str, prefix: str = "", **params: str) -> str:
        """An ``s3://`` URL for ``open_object_storage`` pointing at this server, credentials included."""
        query = {
            "endpoint": self.url,
            "region": FAKE_AWS_ENV["AWS_DEFAULT_REGION"],
            "access_key_id": FAKE_AWS_ENV["AWS_ACCESS_KEY_ID"],
            "secret_access_key": FAKE_AWS_ENV["AWS_SECRET_ACCESS_KEY"],
            **params,
        }
        path = f"/{prefix.strip('/')}" if prefix.strip("/") else ""
        return f"s3://{bucket}{path}?{urlencode(query)}"


@contextlib.contextmanager
def moto_s3_server(startup_timeout: float = 60.0) -> Iterator[MotoS3Server]:
    """A started moto S3 server, stopped on exit (for ``with`` or a pytest fixture)."""
    server = MotoS3Server(startup_timeout=startup_timeout)
    server.start()
    try:
        yield server
    finally:
        server.stop()
