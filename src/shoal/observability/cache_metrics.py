"""Metrics of diskless cache replicas (KIP-1163 "Replicas" and "Consume path").

=========================================================  =========================================================
Prometheus name (labels)                                   Meaning
=========================================================  =========================================================
kafka_diskless_fetch_bytes_total (source, client_rack)     record bytes sent to consumers of diskless partitions:
                                                           source = cache (a local cache log) / direct (object
                                                           storage); client_rack = the consumer's client.rack
kafka_diskless_cross_rack_fetch_bytes_total (client_rack)  of those, bytes sent to a consumer whose client.rack is
                                                           not this broker's broker.rack (both set)
kafka_diskless_cache_fill_rounds_total                     coordinator tail reads that fill cache logs
kafka_diskless_cache_fill_object_gets_total                object GETs those rounds issued
kafka_diskless_cache_download_bytes_total                  bytes appended to cache logs
kafka_diskless_cache_bytes                                 bytes in this broker's cache logs
kafka_diskless_cache_replica_lag_offsets (topic, partition) offsets a cache is behind the coordinator's high watermark
                                                           as its last fill round learnt it
kafka_diskless_cache_replica_lag_ms (topic, partition)     ms since the cache last caught up (-1: never)
kafka_diskless_cache_replica_in_sync (topic, partition)    1 while the cache is in sync with the coordinator
=========================================================  =========================================================

The cache hit ratio is ``source="cache"`` over both sources.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Protocol

from prometheus_client import CollectorRegistry, Counter
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector


class CacheReplicaView(Protocol):
    """What the cache replicas expose, read at scrape time."""

    def lags(self) -> Mapping[tuple[str, int], tuple[int, int, bool]]: ...

    def cache_bytes(self) -> int: ...

    def filled_bytes(self) -> int: ...


class _CacheReplicaCollector(Collector):
    def __init__(self, view: CacheReplicaView) -> None:
        self._view = view

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        lag_offsets = GaugeMetricFamily(
            "kafka_diskless_cache_replica_lag_offsets",
            "Offsets a cache replica is behind the Batch Coordinator's high watermark (as of its last fill round).",
            labels=["topic", "partition"],
        )
        lag_ms = GaugeMetricFamily(
            "kafka_diskless_cache_replica_lag_ms",
            "Milliseconds since a cache replica last caught up with the coordinator (-1: never).",
            labels=["topic", "partition"],
        )
        in_sync = GaugeMetricFamily(
            "kafka_diskless_cache_replica_in_sync", "1 while a cache replica is in sync with the coordinator.",
            labels=["topic", "partition"],
        )
        for (topic, partition), (offsets, ms, synced) in sorted(self._view.lags().items()):
            labels = [topic, str(partition)]
            lag_offsets.add_metric(labels, offsets)
            lag_ms.add_metric(labels, ms)
            in_sync.add_metric(labels, 1 if synced else 0)
        yield lag_offsets
        yield lag_ms
        yield in_sync
        yield GaugeMetricFamily("kafka_diskless_cache_bytes", "Bytes in this broker's cache logs.",
                                value=self._view.cache_bytes())
        yield CounterMetricFamily("kafka_diskless_cache_download_bytes", "Bytes appended to cache logs.",
                                  value=self._view.filled_bytes())


class CacheMetrics:
    """The counters the fetch path increments, and the scrape-time view of the caches."""

    def __init__(self, registry: CollectorRegistry, broker_rack: str | None) -> None:
        self._registry = registry
        self._broker_rack = broker_rack
        self._fetch_bytes = Counter(
            "kafka_diskless_fetch_bytes", "Record bytes sent to consumers of diskless partitions, by source.",
            ["source", "client_rack"], registry=registry,
        )
        self._cross_rack = Counter(
            "kafka_diskless_cross_rack_fetch_bytes",
            "Record bytes of diskless partitions sent to consumers in another rack than this broker's.",
            ["client_rack"], registry=registry,
        )
        self._fill_rounds = Counter(
            "kafka_diskless_cache_fill_rounds", "Coordinator tail reads that fill cache logs.", registry=registry
        )
        self._fill_gets = Counter(
            "kafka_diskless_cache_fill_object_gets", "Object GETs issued to fill cache logs.", registry=registry
        )
        self._tracked = False

    def fetched(self, size: int, from_cache: bool, client_rack: str | None) -> None:
        rack = client_rack or ""
        self._fetch_bytes.labels("cache" if from_cache else "direct", rack).inc(size)
        if client_rack and self._broker_rack and client_rack != self._broker_rack:
            self._cross_rack.labels(rack).inc(size)

    def fill_done(self, object_gets: int) -> None:
        self._fill_rounds.inc()
        self._fill_gets.inc(object_gets)

    def track(self, view: CacheReplicaView) -> None:
        if self._tracked:
            raise RuntimeError("cache replicas are already tracked")
        self._tracked = True
        self._registry.register(_CacheReplicaCollector(view))
