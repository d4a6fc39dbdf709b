"""Run a ``ClusterPlan``'s brokers as child processes and supervise them (``shoal up --brokers N``).

Each broker is its own ``python -m shoal broker <its server.properties>`` process, exactly what
an operator runs on a separate host, so a cluster on one machine exercises what a real one
does (separate store connections, registrations, crashes), and the files can be reused as they
are. The supervisor is a single thread (a selector over the children's output, a signal flag),
so there is no thread to race with the fork of the next child or with a signal.

Stopping: SIGINT or SIGTERM sends SIGTERM to every broker, waits ``stop_timeout`` for their
clean shutdown (a second signal does not wait), SIGKILLs what is left and exits 0. A broker that
exits on its own stops the others and makes the exit code 1, naming it. The children are in a
process group of their own, so a Ctrl-C reaches only the supervisor, which stops them in order;
on Linux they also get SIGTERM if the supervisor itself dies (``PR_SET_PDEATHSIG``), so a
``kill -9`` of ``shoal up`` leaves no broker behind.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import shoal
from shoal.cli.cluster_plan import BrokerPlan, ClusterPlan, properties_text

log = logging.getLogger(__name__)

#: How long the brokers get for their clean shutdown before they are killed.
STOP_TIMEOUT_S = 30.0
#: How often the supervisor looks at the children when none of them writes anything.
_POLL_S = 0.2
#: How long the output of exited children is still read (a grandchild could hold a pipe open).
_DRAIN_S = 2.0
_PR_SET_PDEATHSIG = 1


@dataclass
class _Child:
    plan: BrokerPlan
    proc: subprocess.Popen[bytes]
    partial: bytes = field(default=b"")

    @property
    def prefix(self) -> bytes:
        return f"[{self.plan.name}] ".encode()


def write_plan(plan: ClusterPlan) -> None:
    """Each broker's directory and ``server.properties`` (the brokers create the rest)."""
    for broker in plan.brokers:
        broker.directory.mkdir(parents=True, exist_ok=True)
        broker.properties_path.write_text(properties_text(broker, len(plan.brokers)))


def broker_command(broker: BrokerPlan) -> list[str]:
    return [sys.executable, "-m", "shoal", "broker", str(broker.properties_path)]


def child_environment() -> dict[str, str]:
    """This environment, with this very ``shoal`` importable (also when run from a source tree)."""
    env = dict(os.environ)
    root = str(Path(shoal.__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _die_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn`` that has the kernel SIGTERM the child when the supervisor dies (Linux)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def preexec() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != parent:  # the supervisor died before prctl took effect
            os.kill(os.getpid(), signal.SIGTERM)

    return preexec


class ClusterSupervisor:
    """The brokers of one plan: started together, their output prefixed, stopped together."""

    def __init__(
        self,
        plan: ClusterPlan,
        *,
        stop_timeout: float = STOP_TIMEOUT_S,
        command: Callable[[BrokerPlan], list[str]] = broker_command,
    ) -> None:
        self.plan = plan
        self.stop_timeout = stop_timeout
        self.command = command
        self.children: list[_Child] = []
        self._selector = selectors.DefaultSelector()
        self._signals = 0
        self._out = getattr(sys.stderr, "buffer", None)

    def run(self) -> int:
        """Start every broker and supervise until a signal (exit code 0) or a broker's exit (1)."""
        previous = {sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
        failed: str | None = "shoal up"  # until the watch ends normally: whatever happens, stop them
        try:
            failed = self._start() or self._watch()
        finally:
            self._stop()
            self._drain()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            self._selector.close()
        if failed is None:
            log.info("All %d brokers stopped", len(self.children))
            return 0
        return 1

    # -- starting --------------------------------------------------------------------------------
    def _start(self) -> str | None:
        env, preexec = child_environment(), _die_with_parent()
        for broker in self.plan.brokers:
            if self._signals:
                return None
            command = self.command(broker)
            try:
                proc = subprocess.Popen(
                    command,
                    cwd=broker.directory,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    process_group=0,
                    preexec_fn=preexec,
                )
            except OSError as exc:
                log.error("Cannot start %s (%s): %s; stopping the other brokers", broker.name, " ".join(command), exc)
                return broker.name
            assert proc.stdout is not None
            child = _Child(broker, proc)
            self.children.append(child)
            os.set_blocking(proc.stdout.fileno(), False)
            self._selector.register(proc.stdout, selectors.EVENT_READ, child)
            log.info("Started %s (node %d, pid %d) on %s: %s", broker.name, broker.node_id, proc.pid,
                     broker.address, " ".join(command))
        return None

    # -- running ---------------------------------------------------------------------------------
    def _watch(self) -> str | None:
        """Relay output until a signal (None) or a broker exits on its own (the first one's name)."""
        while not self._signals:
            self._pump(_POLL_S)
            exited = [c for c in self.children if c.proc.poll() is not None]
            if exited and not self._signals:
                for child in exited:
                    log.error("%s (node %d) exited with code %d; stopping the other brokers",
                              child.plan.name, child.plan.node_id, child.proc.returncode)
                return exited[0].plan.name
        log.info("Stopping %d brokers", len(self.children))
        return None

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._signals += 1

    # -- stopping --------------------------------------------------------------------------------
    def _alive(self) -> list[_Child]:
        return [c for c in self.children if c.proc.poll() is None]

    def _stop(self) -> None:
        """SIGTERM every broker, wait for them (until the bound or a further signal), then SIGKILL."""
        signals_before = self._signals
        for child in self._alive():
            with contextlib.suppress(ProcessLookupError):
                child.proc.terminate()
        deadline = time.monotonic() + self.stop_timeout
        while self._alive() and time.monotonic() < deadline and self._signals == signals_before:
            self._pump(_POLL_S)
        for child in self._alive():
            log.warning("%s (pid %d) still runs after SIGTERM: killing it", child.plan.name, child.proc.pid)
            with contextlib.suppress(ProcessLookupError):
                child.proc.kill()
        for child in self.children:
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.proc.wait(_DRAIN_S)

    def _drain(self) -> None:
        deadline = time.monotonic() + _DRAIN_S
        while self._selector.get_map() and time.monotonic() < deadline:
            self._pump(_POLL_S)
        for child in self.children:
            self._flush_partial(child)

    # -- output ----------------------------------------------------------------------------------
    def _pump(self, timeout: float) -> None:
        """Copy what the children wrote to stderr, each whole line prefixed with ``[broker-i]``."""
        if not self._selector.get_map():
            time.sleep(timeout)
            return
        for key, _ in self._selector.select(timeout):
            child: _Child = key.data
            try:
                data = os.read(key.fd, 65536)
            except BlockingIOError:
                continue
            except OSError:
                data = b""
            if not data:
                self._selector.unregister(key.fileobj)
                self._flush_partial(child)
                continue
            lines = (child.partial + data).split(b"\n")
            child.partial = lines.pop()
            self._write(b"".join(child.prefix + line + b"\n" for line in lines))

    def _flush_partial(self, child: _Child) -> None:
        if child.partial:
            self._write(child.prefix + child.partial + b"\n")
            child.partial = b""

    def _write(self, data: bytes) -> None:
        """Relay to stderr; when stderr is gone, the brokers are still supervised (output dropped)."""
        if not data:
            return
        with contextlib.suppress(OSError, ValueError):
            if self._out is not None:
                self._out.write(data)
                self._out.flush()
            else:  # a text-only stderr (a test runner's capture)
                sys.stderr.write(data.decode("utf-8", "replace"))
                sys.stderr.flush()


def run_cluster(plan: ClusterPlan, **options: Any) -> int:
    """Write the brokers' files, say where the cluster is, run it; the exit code of ``shoal up``."""
    write_plan(plan)
    print(f"Starting {len(plan.brokers)} brokers; bootstrap servers: {plan.bootstrap_servers}", flush=True)
    return ClusterSupervisor(plan, **options).run()
