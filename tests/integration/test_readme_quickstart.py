"""The README's quickstart, run as written: ``shoal up`` in an empty directory, then every shell
line and Python block of the "Quickstart" section in order, from that directory, as a new user
would, each output checked."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.broker import wait_ready

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
BLOCK = re.compile(r"```(sh|python)\n(.*?)```", re.DOTALL)


def quickstart_blocks() -> list[tuple[str, str]]:
    text = README.read_text()
    section = text.split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    return BLOCK.findall(section)


def up_command() -> str:
    """The last step of the README's first command: how it starts Shoal."""
    first = BLOCK.search(README.read_text())
    assert first is not None and first.group(1) == "sh"
    return first.group(2).strip().split("&&")[-1].strip()


@pytest.fixture
def user_dir(tmp_path: Path) -> Iterator[Path]:
    """An empty directory with the project's virtualenv at ``.venv`` (the README's first command made it)."""
    (tmp_path / ".venv").symlink_to(Path(sys.prefix))
    with socket.socket() as s:
        if s.connect_ex(("127.0.0.1", 9092)) == 0:
            pytest.fail("127.0.0.1:9092 is taken: the quickstart runs Shoal on its default address")
    command = up_command()
    assert command == ".venv/bin/shoal up"
    log = open(tmp_path / "up.log", "wb")  # noqa: SIM115 - closed below, after the process
    proc = subprocess.Popen(command.split(), cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_ready(9092, proc=proc, describe=lambda: (tmp_path / "up.log").read_text()[-3000:])
        yield tmp_path
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


# What each README command must print: (a regex the command line matches, the check of its
# output). Every command of the quickstart needs one, so a new command comes with its check.
def _lines(text: str) -> set[str]:
    return {line.rstrip() for line in text.splitlines() if line.strip()}


def _check_group(out: str) -> None:
    rows = [line.split() for line in out.splitlines() if line.startswith("demo ")]
    assert sorted((r[1], r[2], r[3], r[5]) for r in rows) == [("events", str(p), "1", "0") for p in range(3)], out


CHECKS: list[tuple[str, Callable[[str], None]]] = [
    (r"topics create --topic events", lambda out: _assert_in("Created topic events.", out)),
    (r"\| \.venv/bin/shoal produce", lambda out: _assert_equal(out, "")),
    (r"consume --topic events --from-beginning --max-messages 3 --format",
     lambda out: _assert_equal(_lines(out), {"0/0 k2=world", "1/0 k3=again", "2/0 k1=hello"})),
    (r"consume --topic events --group demo",
     lambda out: _assert_equal(_lines(out), {"k1\thello", "k2\tworld", "k3\tagain"})),
    (r"groups describe --group demo", _check_group),
    (r"^python:", lambda out: _assert_in("clicks 0 0 b'user-1' b'/home' [('source', b'quickstart')]", out)),
    (r"diskless-metadata topic events", lambda out: _assert_in("Topic: events", out)),
    (r"dump-log --print-data", lambda out: _assert_in("payload: /home", out)),
    (r"pipeline export --topic events", lambda out: None),
    (r"topics alter --topic events --partitions 6", lambda out: None),
    (r"topics describe --topic events", lambda out: _assert_in("PartitionCount: 6", out)),
]


def _assert_in(expected: str, out: str) -> None:
    assert expected in out, f"{expected!r} not in:\n{out}"


def _assert_equal(got: object, expected: object) -> None:
    assert got == expected, f"got {got!r}, expected {expected!r}"


def quickstart_commands() -> list[str]:
    """Each shell line of the quickstart, and each Python block as one ``python:`` command."""
    commands: list[str] = []
    for kind, code in quickstart_blocks():
        if kind == "python":
            commands.append("python:" + code)
        else:
            commands += [line for line in code.splitlines() if line.strip() and not line.startswith("#")]
    return commands


@pytest.mark.timeout(300)
def test_the_quickstart_runs_as_written(user_dir: Path) -> None:
    commands = quickstart_commands()
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    for command in commands:
        checks = [check for pattern, check in CHECKS if re.search(pattern, command)]
        assert len(checks) == 1, f"README command without exactly one check in this test: {command}"
        if command.startswith("python:"):
            cmd = [str(user_dir / ".venv" / "bin" / "python"), "-c", command.removeprefix("python:")]
        else:
            cmd = ["bash", "-euo", "pipefail", "-c", command]
        done = subprocess.run(cmd, cwd=user_dir, env=env, capture_output=True, text=True, timeout=240)
        assert done.returncode == 0, f"failed ({done.returncode}): {command}\n{done.stdout}\n{done.stderr}"
        checks[0](done.stdout)
    assert len(commands) == len(CHECKS), "a check in this test matches no README command"
    assert list((user_dir / "events-parquet").glob("*.parquet")), "the export wrote no Parquet file"
