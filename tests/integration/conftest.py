"""Fixtures that start real Shoal brokers (local objects or moto S3) for the client tests.

Every broker is a separate process; on failure its log tail is printed so a report says
what the broker did, not just what the client saw.
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.broker import BrokerProcess
from tests.support.kafka_clients import create_diskless_topic

BrokerFactory = Callable[..., BrokerProcess]


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """Remember each phase's report on the item so fixtures can tell whether the test failed."""
    report = yield
    setattr(item, f"rep_{report.when}", report)
    return report


def _test_failed(request: pytest.FixtureRequest) -> bool:
    return any(
        getattr(getattr(request.node, f"rep_{when}", None), "failed", False) for when in ("setup", "call")
    )


@pytest.fixture
def broker_factory(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[BrokerFactory]:
    """Make (and by default start) brokers in this test's tmp dir; all are stopped at teardown.

    A broker that died without the test stopping it fails the test: the broker must survive
    whatever a client sends.
    """
    brokers: list[BrokerProcess] = []

    def make(
        name: str = "broker",
        *,
        storage_url: str | None = None,
        overrides: dict[str, Any] | None = None,
        env: dict[str, str] | None = None,
        start: bool = True,
    ) -> BrokerProcess:
        b = BrokerProcess(tmp_path / name, storage_url=storage_url, overrides=overrides, env=env)
        brokers.append(b)
        if start:
            b.start()
        return b

    yield make

    died = [
        b for b in brokers if b.proc is not None and b.proc.poll() is not None and not b.stopped_on_purpose
    ]
    for b in brokers:
        b.close()
    if _test_failed(request) or died:
        for b in brokers:
            print(f"\n{b!r} (exit code {b.returncode})\n{b.log_tail(120)}", file=sys.stderr)
    if died:
        codes = ", ".join(f"{b.bootstrap} exited {b.returncode}" for b in died)
        pytest.fail(f"broker died during the test: {codes}\n{died[0].log_tail(60)}", pytrace=False)


@pytest.fixture
def broker(broker_factory: BrokerFactory) -> BrokerProcess:
    """A fresh single-node broker storing WAL objects in a local directory."""
    return broker_factory()


@pytest.fixture(scope="session")
def moto_s3() -> Iterator[Any]:
    """One moto S3 server process for the whole run (buckets are per test)."""
    from tests.support.moto_server import moto_s3_server

    with moto_s3_server() as server:
        yield server


@pytest.fixture
def s3_bucket(moto_s3: Any) -> str:
    name = f"shoal-it-{uuid.uuid4().hex[:12]}"
    moto_s3.create_bucket(name)
    return name


@pytest.fixture
def s3_broker(broker_factory: BrokerFactory, moto_s3: Any, s3_bucket: str) -> BrokerProcess:
    """A broker whose diskless storage is a bucket on the moto S3 server, with fake credentials."""
    url = f"s3://{s3_bucket}?endpoint={moto_s3.url}&region=us-east-1"
    b = broker_factory("s3-broker", storage_url=url, env=moto_s3.client_env(), start=False)
    b.s3_bucket = s3_bucket  # type: ignore[attr-defined]
    b.s3_endpoint = moto_s3.url  # type: ignore[attr-defined]
    return b.start()


@pytest.fixture
def topic_name(request: pytest.FixtureRequest) -> str:
    """A topic name unique to this test (readable in broker logs)."""
    base = "".join(c if c.isalnum() else "-" for c in request.node.name)[:60].strip("-")
    return f"{base}-{uuid.uuid4().hex[:6]}"


@pytest.fixture
def diskless_topic(broker: BrokerProcess, topic_name: str) -> str:
    """A 4-partition diskless topic on `broker`."""
    create_diskless_topic(broker.bootstrap, topic_name, partitions=4)
    return topic_name
