"""Metrics of tiered storage of classic topics (KIP-405), under Kafka's names (KIP-405, KIP-963).

=========================================================  =========================================================
Prometheus name (labels)                                   Kafka MBean (kafka.server:type=BrokerTopicMetrics,...)
=========================================================  =========================================================
kafka_server_brokertopicmetrics_remotecopybytes_total      name=RemoteCopyBytesPerSec,topic=<t>: bytes of segments
(topic)                                                    this broker copied to remote storage
kafka_server_brokertopicmetrics_remotefetchbytes_total     name=RemoteFetchBytesPerSec,topic=<t>: record bytes
(topic)                                                    consumers were sent from remote segments
kafka_server_brokertopicmetrics_remotecopyerrors_total     name=RemoteCopyErrorsPerSec: segment copies that failed
kafka_server_brokertopicmetrics_remotedeleteerrors_total   name=RemoteDeleteErrorsPerSec: remote segment deletions
                                                           that failed (retried next round)
kafka_server_brokertopicmetrics_remotefetcherrors_total    name=RemoteFetchErrorsPerSec: remote reads that failed
kafka_server_brokertopicmetrics_remotecopylagbytes         name=RemoteCopyLagBytes,topic=<t>: bytes of rolled
(topic)                                                    segments not yet copied, on partitions led here (0 with
                                                           remote.log.copy.disable)
kafka_server_brokertopicmetrics_remotelogsizebytes         name=RemoteLogSizeBytes,topic=<t>: bytes of copied
(topic)                                                    segments, on partitions led here
=========================================================  =========================================================

Kafka's meters are per topic and for all topics; here the error counters are for all topics
only (sum the others over ``topic``). The counters are the remote log manager's own, read at
scrape time; the two gauges are what its last measuring round (every
``remote.log.manager.task.interval.ms``) found, so a scrape never queries the metadata store.
A topic shows in the gauges only on the brokers leading some of its partitions.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Protocol

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

__all__ = ["RemoteLogView", "track_remote_log"]

_PREFIX = "kafka_server_brokertopicmetrics_"
_MBEAN = "kafka.server:type=BrokerTopicMetrics,name="


class RemoteLogView(Protocol):
    """What the remote log manager exposes; every member is read at scrape time, from the
    metrics server's thread, so each must be a plain read of values the manager keeps."""

    @property
    def copied_bytes(self) -> Mapping[str, int]: ...

    @property
    def copy_errors(self) -> int: ...

    @property
    def delete_errors(self) -> int: ...

    def fetched_bytes(self) -> Mapping[str, int]: ...

    def fetch_errors(self) -> int: ...

    @property
    def copy_lag_bytes(self) -> Mapping[str, int]: ...

    @property
    def remote_log_sizes(self) -> Mapping[str, int]: ...


def _by_topic(family: CounterMetricFamily | GaugeMetricFamily, values: Mapping[str, int]) -> None:
    # dict() copies in one step, so the manager adding a topic meanwhile cannot break the iteration.
    for topic, value in sorted(dict(values).items()):
        family.add_metric([topic], value)


class _RemoteLogCollector(Collector):
    def __init__(self, view: RemoteLogView) -> None:
        self._view = view

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        v = self._view
        copied = CounterMetricFamily(
            f"{_PREFIX}remotecopybytes", f"{_MBEAN}RemoteCopyBytesPerSec: bytes of segments copied to remote storage.",
            labels=["topic"],
        )
        _by_topic(copied, v.copied_bytes)
        yield copied
        fetched = CounterMetricFamily(
            f"{_PREFIX}remotefetchbytes",
            f"{_MBEAN}RemoteFetchBytesPerSec: record bytes read for consumers from remote segments.", labels=["topic"],
        )
        _by_topic(fetched, v.fetched_bytes())
        yield fetched
        for name, doc, value in (
            ("RemoteCopyErrors", "failed segment copies", v.copy_errors),
            ("RemoteDeleteErrors", "failed remote segment deletions", v.delete_errors),
            ("RemoteFetchErrors", "failed remote reads", v.fetch_errors()),
        ):
            yield CounterMetricFamily(f"{_PREFIX}{name.lower()}", f"{_MBEAN}{name}PerSec: {doc}.", value=value)
        lag = GaugeMetricFamily(
            f"{_PREFIX}remotecopylagbytes",
            f"{_MBEAN}RemoteCopyLagBytes: bytes of rolled segments not yet copied, on partitions led here.",
            labels=["topic"],
        )
        _by_topic(lag, v.copy_lag_bytes)
        yield lag
        size = GaugeMetricFamily(
            f"{_PREFIX}remotelogsizebytes",
            f"{_MBEAN}RemoteLogSizeBytes: bytes of copied segments, on partitions led here.", labels=["topic"],
        )
        _by_topic(size, v.remote_log_sizes)
        yield size


def track_remote_log(registry: CollectorRegistry, view: RemoteLogView) -> None:
    """Export the remote log manager's metrics (read at scrape time); once per broker."""
    registry.register(_RemoteLogCollector(view))
