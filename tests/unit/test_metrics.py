"""Broker metrics: Kafka-style names served over HTTP from a per-broker registry."""

from __future__ import annotations

import urllib.request

import pytest

from shoal.observability import BrokerMetrics, start_metrics_server


class FakeCache:
    hits = 7
    misses = 2


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        assert response.status == 200
        return response.read().decode()


def test_endpoint_serves_kafka_style_names() -> None:
    metrics = BrokerMetrics()
    metrics.request_done("Produce", 9, 0.3)
    metrics.bytes_in("orders", 1000, 10)
    metrics.bytes_out("orders", 400)
    metrics.object_uploaded(4096, 0.12)
    metrics.object_upload_failed()
    metrics.file_committed(0.01, 3)
    metrics.commit_failed()
    metrics.fetch_done(object_gets=2)
    metrics.object_get_done(1000, 0.05)
    metrics.object_get_failed()
    metrics.objects_deleted(2)
    metrics.orphans_deleted(1)
    metrics.cleaner_failed("orphans")
    metrics.retention_enforced(5, 500)
    metrics.retention_failed()
    metrics.track_cache(FakeCache())
    server = start_metrics_server(metrics.registry)
    try:
        assert server.host == "127.0.0.1" and server.port > 0
        text = scrape(server.port)
    finally:
        server.close()
    for line in [
        'kafka_network_requestmetrics_requests_total{request="Produce",version="9"} 1.0',
        'kafka_network_requestmetrics_totaltime_seconds_count{request="Produce"} 1.0',
        'kafka_server_brokertopicmetrics_bytesin_total{topic="orders"} 1000.0',
        'kafka_server_brokertopicmetrics_messagesin_total{topic="orders"} 10.0',
        'kafka_server_brokertopicmetrics_bytesout_total{topic="orders"} 400.0',
        "kafka_diskless_object_uploads_total 1.0",
        "kafka_diskless_object_upload_bytes_total 4096.0",
        'kafka_diskless_object_size_bytes_bucket{le="4096.0"} 1.0',
        "kafka_diskless_object_upload_time_seconds_count 1.0",
        "kafka_diskless_object_upload_errors_total 1.0",
        "kafka_diskless_commits_total 1.0",
        "kafka_diskless_committed_batches_total 3.0",
        "kafka_diskless_commit_time_seconds_count 1.0",
        "kafka_diskless_commit_errors_total 1.0",
        "kafka_diskless_fetches_total 1.0",
        "kafka_diskless_object_gets_per_fetch_sum 2.0",
        "kafka_diskless_object_gets_total 2.0",
        "kafka_diskless_object_get_bytes_total 1000.0",
        "kafka_diskless_object_get_errors_total 1.0",
        "kafka_diskless_cache_hits_total 7.0",
        "kafka_diskless_cache_misses_total 2.0",
        "kafka_diskless_objects_deleted_total 2.0",
        "kafka_diskless_orphan_objects_deleted_total 1.0",
        'kafka_diskless_object_cleaner_errors_total{phase="orphans"} 1.0',
        "kafka_diskless_retention_deleted_batches_total 5.0",
        "kafka_diskless_retention_deleted_bytes_total 500.0",
        "kafka_diskless_retention_errors_total 1.0",
    ]:
        assert line in text.splitlines(), line


def test_brokers_in_one_process_have_separate_registries() -> None:
    first, second = BrokerMetrics(), BrokerMetrics()
    first.request_done("Fetch", 16, 0.01)
    assert first.registry.get_sample_value(
        "kafka_network_requestmetrics_requests_total", {"request": "Fetch", "version": "16"}
    ) == 1
    assert second.registry.get_sample_value(
        "kafka_network_requestmetrics_requests_total", {"request": "Fetch", "version": "16"}
    ) is None
    servers = [start_metrics_server(m.registry) for m in (first, second)]
    try:
        assert servers[0].port != servers[1].port
        assert "Fetch" in scrape(servers[0].port)
        assert "Fetch" not in scrape(servers[1].port)
    finally:
        for server in servers:
            server.close()


def test_forget_topic_and_single_cache() -> None:
    metrics = BrokerMetrics()
    metrics.bytes_in("gone", 10, 1)
    metrics.forget_topic("gone")
    metrics.forget_topic("never-seen")
    assert metrics.registry.get_sample_value("kafka_server_brokertopicmetrics_bytesin_total", {"topic": "gone"}) is None
    metrics.track_cache(FakeCache())
    with pytest.raises(RuntimeError):
        metrics.track_cache(FakeCache())
