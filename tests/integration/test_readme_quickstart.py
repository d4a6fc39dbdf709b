"""The README's quickstart, run as written: ``shoal up`` in an empty directory, then every shell and
Python block of the "Quickstart" section in order, from that directory, as a new user would."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
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


@pytest.mark.timeout(300)
def test_the_quickstart_runs_as_written(user_dir: Path) -> None:
    blocks = quickstart_blocks()
    assert any(kind == "python" for kind, _ in blocks) and any(kind == "sh" for kind, _ in blocks)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    outputs = []
    for kind, code in blocks:
        if kind == "sh":
            cmd = ["bash", "-euo", "pipefail", "-c", code]
        else:
            cmd = [str(user_dir / ".venv" / "bin" / "python"), "-c", code]
        done = subprocess.run(cmd, cwd=user_dir, env=env, capture_output=True, text=True, timeout=240)
        assert done.returncode == 0, f"{kind} block failed ({done.returncode}):\n{code}\n{done.stdout}\n{done.stderr}"
        outputs.append(done.stdout)
    everything = "\n".join(outputs)
    # What the reader is told to expect: the records, the group, the tools' views of the stores.
    for expected in ("hello", "world", "again", "demo", "Topic: events", "HighWatermark"):
        assert expected in everything, f"{expected!r} not in the quickstart's output:\n{everything}"
    assert list((user_dir / "events-parquet").glob("*.parquet")), "the export wrote no Parquet file"
