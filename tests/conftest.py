"""Make `tests.support` importable however pytest is invoked (the repo root is not always on sys.path),
and the fixtures shared by the unit and the integration tests."""

import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

_ROOT = str(Path(__file__).resolve().parents[1])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from tests.support.failfs import FailingDisk, FuseUnavailable  # noqa: E402 - needs the path above
from tests.support.postgres import PostgresServer  # noqa: E402 - needs the path above

# kio registers hypothesis strategies for its types whenever hypothesis is importable (it is in
# the test venv, not in a broker's), and hypothesis then caches data under `<cwd>/.hypothesis`:
# every shoal process a test starts would leave one wherever it runs. One place for the run.
os.environ.setdefault("HYPOTHESIS_STORAGE_DIRECTORY", tempfile.mkdtemp(prefix="shoal-tests-hypothesis-"))


@pytest.fixture
def failing_disk(tmp_path: Path) -> Iterator[FailingDisk]:
    """A mounted failfs disk (tests/support/failfs.py) that answers EIO from ``fail()`` on; unmounted
    at teardown, after whatever was put in its ``before_unmount``. Skipped only where FUSE is unavailable."""
    disk = FailingDisk(tmp_path / "failfs")
    try:
        disk.mount()
    except FuseUnavailable as exc:
        pytest.skip(str(exc))
    try:
        yield disk
    finally:
        disk.close()


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """One real PostgreSQL server for the session (Debian's postgresql, initdb in a temp dir, a
    loopback port). Not skipped when PostgreSQL is missing: the test command installs it."""
    server = PostgresServer()
    server.start()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def postgres_url(postgres_server: PostgresServer) -> str:
    """A fresh, empty database of the session's PostgreSQL server."""
    return postgres_server.create_database()


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The URL of an empty store of each backend, for the seams' conformance tests: the same test
    runs once on an SQLite file and once on a PostgreSQL database."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'store' / 'shoal.db'}"
    return request.getfixturevalue("postgres_url")
