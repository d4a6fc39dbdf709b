"""Tiered storage metrics: Kafka's BrokerTopicMetrics names read from the remote log manager at
scrape time, and the manager's measuring of RemoteLogSizeBytes and RemoteCopyLagBytes over the
partitions it leads."""

from __future__ import annotations

import uuid
from types import SimpleNamespace
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest

from shoal.observability.remote_metrics import track_remote_log
from shoal.remote_log.manager import RemoteLogManager


class FakeView:
    copied_bytes = {"orders": 3000, "events": 10}
    copy_errors = 1
    delete_errors = 2
    copy_lag_bytes = {"orders": 500}
    remote_log_sizes = {"orders": 2500}

    def fetched_bytes(self) -> dict[str, int]:
        return {"orders": 700}

    def fetch_errors(self) -> int:
        return 3


def test_kafka_names() -> None:
    registry = CollectorRegistry(auto_describe=True)
    track_remote_log(registry, FakeView())
    text = generate_latest(registry).decode()
    for line in (
        'kafka_server_brokertopicmetrics_remotecopybytes_total{topic="orders"} 3000.0',
        'kafka_server_brokertopicmetrics_remotecopybytes_total{topic="events"} 10.0',
        'kafka_server_brokertopicmetrics_remotefetchbytes_total{topic="orders"} 700.0',
        "kafka_server_brokertopicmetrics_remotecopyerrors_total 1.0",
        "kafka_server_brokertopicmetrics_remotedeleteerrors_total 2.0",
        "kafka_server_brokertopicmetrics_remotefetcherrors_total 3.0",
        'kafka_server_brokertopicmetrics_remotecopylagbytes{topic="orders"} 500.0',
        'kafka_server_brokertopicmetrics_remotelogsizebytes{topic="orders"} 2500.0',
    ):
        assert line in text, line


class FakeLog:
    def __init__(self, segments: list[tuple[int, int, int]], highest_in_remote: int) -> None:
        self.segments = segments  # (base, end, size)
        self.highest_offset_in_remote = highest_in_remote

    def rolled_segments(self, after: int = -1) -> list[Any]:
        return [SimpleNamespace(size=size) for _, end, size in self.segments if end > after]


async def test_measure_sums_the_partitions_led_here() -> None:
    def partition(p: int, leader: int) -> Any:
        return SimpleNamespace(partition=p, leader=leader, replicas=[1, 2])

    def topic(name: str, tiered: bool, **configs: str) -> Any:
        return SimpleNamespace(
            name=name, topic_id=uuid.uuid4(), is_diskless=False,
            configs={"remote.storage.enable": "true" if tiered else "false", **configs},
            partitions={0: partition(0, 1), 1: partition(1, 1), 2: partition(2, 2)},
        )

    retained = topic("retained", True, **{"remote.log.copy.disable": "true"})
    topics = {"orders": topic("orders", True), "plain": topic("plain", False), "retained": retained}
    image = SimpleNamespace(topics_by_name=topics)
    logs = {p: FakeLog([(0, 99, 1000), (100, 199, 1000), (200, 299, 400)], 99) for p in (0, 1, 2)}
    sizes = {0: 1000, 1: 0, 2: 5000}
    rlmm = SimpleNamespace(remote_log_size=lambda tp: sizes[tp.partition])

    async def run_blocking(fn: Any, *args: Any) -> Any:
        return fn(*args)

    manager = RemoteLogManager(
        1, 1000, lambda: image, lambda t, p: logs[p], None, rlmm, run_blocking  # type: ignore[arg-type]
    )
    await manager.measure()
    # Partitions 0 and 1 are led here; 2 is only a follower replica, "plain" is not tiered;
    # "retained" copies nothing on purpose (KIP-950's retain), so it lags by nothing.
    assert manager.remote_log_sizes == {"orders": 1000, "retained": 1000}
    assert manager.copy_lag_bytes == {"orders": 2 * 1400, "retained": 0}
