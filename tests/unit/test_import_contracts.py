"""The import direction of docs/architecture.md is checked, not just described: ``lint-imports``
runs over the package with the contracts in pyproject.toml, and an upward import fails it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def lint_imports(config: Path, cwd: Path, pythonpath: Path) -> subprocess.CompletedProcess[str]:
    if not LINT_IMPORTS.exists():
        pytest.fail(f"lint-imports is not installed beside {sys.executable}: install the 'test' extra")
    env = {**os.environ, "PYTHONPATH": str(pythonpath)}
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", "--no-logo", str(config)],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=300,
    )


def test_the_package_keeps_every_contract() -> None:
    result = lint_imports(ROOT / "pyproject.toml", ROOT, ROOT / "src")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


@pytest.mark.parametrize(
    ("module", "upward_import", "broken"),
    [
        ("server/handlers/produce.py", "import shoal.diskless.append", "Handlers never name a storage kind"),
        ("store/factory.py", "import shoal.partitions.manager", "Layers"),
        ("classic/log.py", "import shoal.coordinator.api", "Classic topics do not depend on the Batch Coordinator"),
        ("pipeline/scan.py", "import shoal.diskless.read", "Layers"),
        ("cli/topics.py", "import shoal.store.sqlite.coordinator", "Nothing but the store factory names a backend"),
    ],
)
def test_an_upward_import_breaks_the_build(tmp_path: Path, module: str, upward_import: str, broken: str) -> None:
    copy = tmp_path / "src"
    shutil.copytree(ROOT / "src" / "shoal", copy / "shoal", ignore=shutil.ignore_patterns("__pycache__"))
    target = copy / "shoal" / module
    target.write_text(target.read_text() + f"\n{upward_import}  # an import against the layering\n")
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    result = lint_imports(tmp_path / "pyproject.toml", tmp_path, copy)
    assert result.returncode != 0, result.stdout
    assert f"{broken}" in result.stdout and "BROKEN" in result.stdout, result.stdout
