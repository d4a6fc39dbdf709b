"""Broker metrics in Prometheus form, named after Kafka's MBeans and KIP-1163's Monitoring list.

Kafka exposes metrics as JMX MBeans; operators usually scrape them through the
Prometheus JMX exporter, whose common rule set (Strimzi's, Confluent's examples)
turns ``kafka.<domain>:type=<Type>,name=<Name>PerSec,<label>=<v>`` meters into
``kafka_<domain>_<type>_<name>_total{<label>="<v>"}`` counters. Shoal serves the same
names for what Kafka has, so existing dashboards and alerts read them; timings are
histograms in seconds (Prometheus' base unit) where Kafka has millisecond
percentile gauges. KIP-1163 asks for diskless metrics without naming them; they are
``kafka_diskless_*`` here. Rates are ``rate()`` over the counters.

=========================================================  =========================================================
Prometheus name (labels)                                   Kafka MBean / KIP-1163 Monitoring item
=========================================================  =========================================================
kafka_network_requestmetrics_requests_total                kafka.network:type=RequestMetrics,name=RequestsPerSec,
(request, version)                                         request=<api>,version=<v>
kafka_network_requestmetrics_totaltime_seconds (request)   kafka.network:type=RequestMetrics,name=TotalTimeMs,
                                                           request=<api> (histogram, seconds)
kafka_server_brokertopicmetrics_bytesin_total (topic)      kafka.server:type=BrokerTopicMetrics,name=BytesInPerSec,
                                                           topic=<t>
kafka_server_brokertopicmetrics_bytesout_total (topic)     ...name=BytesOutPerSec,topic=<t>
kafka_server_brokertopicmetrics_replicationbytesout_total  ...name=ReplicationBytesOutPerSec
kafka_server_brokertopicmetrics_messagesin_total (topic)   ...name=MessagesInPerSec,topic=<t>
kafka_diskless_object_uploads_total                        KIP-1163 1.1 object upload count and rate
kafka_diskless_object_size_bytes                           1.2 object size average and percentiles (histogram)
kafka_diskless_object_upload_bytes_total                   1.3 upload traffic
kafka_diskless_object_upload_time_seconds                  1.4 upload latency (histogram)
kafka_diskless_object_upload_errors_total                  1.5 upload errors
kafka_diskless_commits_total                               2.1 commit count and rate
kafka_diskless_committed_batches_total                     (batches those commits carried)
kafka_diskless_commit_time_seconds                         2.2 commit latency (histogram)
kafka_diskless_commit_errors_total                         2.3 commit errors
kafka_diskless_segment_stage_time_seconds (stage)          where a WAL segment's time goes, produce path in order:
                                                           fill (first batch in -> closed), build (closed -> upload
                                                           starts: an upload slot and the layout), upload,
                                                           commit_wait (uploaded -> its turn to commit), commit;
                                                           a batch's produce latency is their sum from its arrival
kafka_diskless_fetches_total                               3.1 read count and rate
kafka_diskless_object_gets_per_fetch                       3.2 GET requests per Fetch (histogram)
kafka_diskless_object_gets_total                           object GETs issued (hits of the range cache issue none)
kafka_diskless_object_get_bytes_total                      bytes those GETs returned
kafka_diskless_object_get_time_seconds                     GET latency (histogram)
kafka_diskless_object_get_errors_total                     failed GETs
kafka_diskless_cache_hits_total, ..._cache_misses_total    range cache lookups served from memory / needing a GET
kafka_diskless_objects_deleted_total                       KIP-1163 "Batch deletion": objects deleted after grace
kafka_diskless_orphan_objects_deleted_total                uploaded-but-never-committed objects collected
kafka_diskless_object_cleaner_errors_total (phase)         cleaner rounds skipped: phase = delete / orphans
kafka_diskless_retention_deleted_batches_total             batches deleted by time/size retention
kafka_diskless_retention_deleted_bytes_total               bytes of those batches
kafka_diskless_retention_errors_total                      retention rounds that failed
(diskless cache replicas)                                  see ``cache_metrics``
kafka_server_brokertopicmetrics_remote*                    tiered storage (RemoteCopyBytesPerSec, ...): see
                                                           ``remote_metrics``
kafka_controller_kafkacontroller_activecontrollercount     kafka.controller:type=KafkaController,
                                                           name=ActiveControllerCount (1 on the lease holder)
kafka_controller_kafkacontroller_activebrokercount         ...name=ActiveBrokerCount (unfenced brokers)
kafka_controller_kafkacontroller_fencedbrokercount         ...name=FencedBrokerCount
=========================================================  =========================================================

Every broker owns a ``BrokerMetrics`` with its own ``CollectorRegistry`` (never the
process-global default), so several brokers in one test process do not collide.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Protocol
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from shoal.observability.cache_metrics import CacheMetrics

__all__ = ["BrokerMetrics", "MetricsServer", "start_metrics_server"]

KiB = 1024
MiB = 1024 * KiB

_OBJECT_SIZE_BUCKETS = (4 * KiB, 16 * KiB, 64 * KiB, 256 * KiB, 512 * KiB, 1 * MiB, 2 * MiB, 4 * MiB, 8 * MiB,
                        16 * MiB, 64 * MiB)
_UPLOAD_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 2.0, 5.0, 10.0)
_COMMIT_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
_STAGE_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0)
#: The stages of ``kafka_diskless_segment_stage_time_seconds``, in the order a segment passes them.
SEGMENT_STAGES = ("fill", "build", "upload", "commit_wait", "commit")
_GET_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.5, 1.0, 2.5, 5.0)
_GETS_PER_FETCH_BUCKETS = (0, 1, 2, 3, 4, 6, 8, 12, 16, 32)
_REQUEST_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class CacheCounters(Protocol):
    """What the range cache exposes: lookups answered from memory and lookups that needed a GET."""

    hits: int
    misses: int


class _CacheCollector(Collector):
    """Reads the cache's own counters at scrape time, so the cache needs no metrics code."""

    def __init__(self, cache: CacheCounters) -> None:
        self._cache = cache

    def collect(self) -> Iterator[CounterMetricFamily]:
        yield CounterMetricFamily(
            "kafka_diskless_cache_hits", "Range cache lookups served from memory.", value=self._cache.hits
        )
        yield CounterMetricFamily(
            "kafka_diskless_cache_misses", "Range cache lookups that needed an object GET.", value=self._cache.misses
        )


class LogDirCounts(Protocol):
    """What the classic log manager exposes about failed log dirs (KIP-112)."""

    @property
    def offline_log_dir_count(self) -> int: ...

    @property
    def offline_replica_count(self) -> int: ...


class _LogDirCollector(Collector):
    """Kafka's two KIP-112 gauges, read from the log manager at scrape time."""

    def __init__(self, logs: LogDirCounts) -> None:
        self._logs = logs

    def collect(self) -> Iterator[GaugeMetricFamily]:
        yield GaugeMetricFamily(
            "kafka_log_logmanager_offlinelogdirectorycount",
            "kafka.log:type=LogManager,name=OfflineLogDirectoryCount: log dirs that failed.",
            value=self._logs.offline_log_dir_count,
        )
        yield GaugeMetricFamily(
            "kafka_server_replicamanager_offlinereplicacount",
            "kafka.server:type=ReplicaManager,name=OfflineReplicaCount: replicas on failed log dirs.",
            value=self._logs.offline_replica_count,
        )


class ClusterView(Protocol):
    """What the broker knows of the cluster, read at scrape time."""

    def is_controller(self) -> bool: ...

    def broker_counts(self) -> tuple[int, int]:
        """(unfenced, fenced) brokers in this broker's metadata image."""
        ...

    def unclean_elections(self) -> int:
        """Unclean leader elections this broker made (as controller, or for ElectLeaders)."""
        ...


class _ControllerCollector(Collector):
    """Kafka's controller gauges: summed over brokers, ActiveControllerCount is 1 in a healthy cluster."""

    def __init__(self, cluster: ClusterView) -> None:
        self._cluster = cluster

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        active, fenced = self._cluster.broker_counts()
        yield GaugeMetricFamily(
            "kafka_controller_kafkacontroller_activecontrollercount",
            "kafka.controller:type=KafkaController,name=ActiveControllerCount: 1 on the broker holding the "
            "controller lease.",
            value=int(self._cluster.is_controller()),
        )
        yield GaugeMetricFamily(
            "kafka_controller_kafkacontroller_activebrokercount",
            "kafka.controller:type=KafkaController,name=ActiveBrokerCount: unfenced brokers.",
            value=active,
        )
        yield CounterMetricFamily(
            "kafka_controller_controllerstats_uncleanleaderelections",
            "kafka.controller:type=ControllerStats,name=UncleanLeaderElectionsPerSec: leaders elected from "
            "outside the ISR (they may lose acknowledged records).",
            value=self._cluster.unclean_elections(),
        )
        yield GaugeMetricFamily(
            "kafka_controller_kafkacontroller_fencedbrokercount",
            "kafka.controller:type=KafkaController,name=FencedBrokerCount: registered brokers that are fenced.",
            value=fenced,
        )


class ReplicaView(Protocol):
    """What the classic replica manager exposes about replication, read at scrape time."""

    def replica_counts(self) -> Mapping[str, int]:
        """``leaders``, ``partitions``, ``under_replicated``, ``under_min_isr``, ``at_min_isr``,
        ``offline`` (partitions without a leader), ``isr_shrinks``, ``isr_expands``."""
        ...


class _ReplicaCollector(Collector):
    """Kafka's ReplicaManager gauges and ISR meters (as counters), and the controller's
    OfflinePartitionsCount (reported by the active controller only, as in Kafka)."""

    _GAUGES = (
        ("leaders", "leadercount", "LeaderCount: classic partitions this broker leads."),
        ("partitions", "partitioncount", "PartitionCount: classic replicas on this broker."),
        ("under_replicated", "underreplicatedpartitions",
         "UnderReplicatedPartitions: partitions this broker leads whose ISR is smaller than their replicas."),
        ("under_min_isr", "underminisrpartitioncount",
         "UnderMinIsrPartitionCount: partitions this broker leads whose ISR is below min.insync.replicas."),
        ("at_min_isr", "atminisrpartitioncount",
         "AtMinIsrPartitionCount: partitions this broker leads whose ISR is exactly min.insync.replicas."),
    )

    def __init__(self, replicas: ReplicaView, cluster: ClusterView | None) -> None:
        self._replicas = replicas
        self._cluster = cluster

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        counts = self._replicas.replica_counts()
        for key, name, doc in self._GAUGES:
            yield GaugeMetricFamily(
                f"kafka_server_replicamanager_{name}", f"kafka.server:type=ReplicaManager,name={doc}", value=counts[key]
            )
        yield CounterMetricFamily(
            "kafka_server_replicamanager_isrshrinks",
            "kafka.server:type=ReplicaManager,name=IsrShrinksPerSec: ISR shrinks of partitions this broker led.",
            value=counts["isr_shrinks"],
        )
        yield CounterMetricFamily(
            "kafka_server_replicamanager_isrexpands",
            "kafka.server:type=ReplicaManager,name=IsrExpandsPerSec: ISR expansions of partitions this broker led.",
            value=counts["isr_expands"],
        )
        active = self._cluster is None or self._cluster.is_controller()
        yield GaugeMetricFamily(
            "kafka_controller_kafkacontroller_offlinepartitionscount",
            "kafka.controller:type=KafkaController,name=OfflinePartitionsCount: classic partitions without a "
            "leader (on the active controller; 0 elsewhere).",
            value=counts["offline"] if active else 0,
        )


class BrokerMetrics:
    """One broker's metrics; the methods are the calls the broker makes where things happen."""

    def __init__(self, registry: CollectorRegistry | None = None, broker_rack: str | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        self._cluster: ClusterView | None = None
        r = self.registry
        # Requests (kafka.network:type=RequestMetrics)
        self._requests = Counter(
            "kafka_network_requestmetrics_requests", "Requests handled, by API and version.",
            ["request", "version"], registry=r,
        )
        self._request_time = Histogram(
            "kafka_network_requestmetrics_totaltime_seconds", "Time from a request's decoding to its response.",
            ["request"], buckets=_REQUEST_BUCKETS, registry=r,
        )
        # Topics (kafka.server:type=BrokerTopicMetrics)
        self._bytes_in = Counter(
            "kafka_server_brokertopicmetrics_bytesin", "Record batch bytes appended, by topic.", ["topic"], registry=r
        )
        self._messages_in = Counter(
            "kafka_server_brokertopicmetrics_messagesin", "Records appended, by topic.", ["topic"], registry=r
        )
        self._bytes_out = Counter(
            "kafka_server_brokertopicmetrics_bytesout", "Record batch bytes sent to consumers, by topic.", ["topic"],
            registry=r,
        )
        self._replication_bytes_out = Counter(
            "kafka_server_brokertopicmetrics_replicationbytesout",
            "ReplicationBytesOutPerSec: record batch bytes sent to follower brokers.", registry=r,
        )
        # Object uploads (KIP-1163 Monitoring 1)
        self._uploads = Counter("kafka_diskless_object_uploads", "WAL segment objects uploaded.", registry=r)
        self._upload_bytes = Counter(
            "kafka_diskless_object_upload_bytes", "Bytes of WAL segment objects uploaded.", registry=r
        )
        self._object_size = Histogram(
            "kafka_diskless_object_size_bytes", "Size of uploaded WAL segment objects.",
            buckets=_OBJECT_SIZE_BUCKETS, registry=r,
        )
        self._upload_time = Histogram(
            "kafka_diskless_object_upload_time_seconds", "Time to upload one WAL segment object.",
            buckets=_UPLOAD_BUCKETS, registry=r,
        )
        self._upload_errors = Counter(
            "kafka_diskless_object_upload_errors", "WAL segment uploads that failed.", registry=r
        )
        # Commits (KIP-1163 Monitoring 2)
        self._commits = Counter("kafka_diskless_commits", "Objects committed to the Batch Coordinator.", registry=r)
        self._committed_batches = Counter(
            "kafka_diskless_committed_batches", "Batches in the objects committed.", registry=r
        )
        self._commit_time = Histogram(
            "kafka_diskless_commit_time_seconds", "Time of one commit_file call to the Batch Coordinator.",
            buckets=_COMMIT_BUCKETS, registry=r,
        )
        self._commit_errors = Counter("kafka_diskless_commit_errors", "Commits that failed.", registry=r)
        stage_time = Histogram(
            "kafka_diskless_segment_stage_time_seconds",
            "Time a WAL segment spent in each stage of the produce path (fill, build, upload, commit_wait, commit).",
            ["stage"], buckets=_STAGE_BUCKETS, registry=r,
        )
        #: One child per stage, resolved once: ``segment_stage`` runs five times per segment.
        self._stage_time = {stage: stage_time.labels(stage) for stage in SEGMENT_STAGES}
        # Reads (KIP-1163 Monitoring 3)
        self._fetches = Counter("kafka_diskless_fetches", "Reads of diskless partitions.", registry=r)
        self._gets_per_fetch = Histogram(
            "kafka_diskless_object_gets_per_fetch", "Object GETs one read of diskless partitions needed.",
            buckets=_GETS_PER_FETCH_BUCKETS, registry=r,
        )
        self._gets = Counter("kafka_diskless_object_gets", "Object GET requests issued.", registry=r)
        self._get_bytes = Counter("kafka_diskless_object_get_bytes", "Bytes returned by object GETs.", registry=r)
        self._get_time = Histogram(
            "kafka_diskless_object_get_time_seconds", "Latency of one object GET.", buckets=_GET_BUCKETS, registry=r
        )
        self._get_errors = Counter("kafka_diskless_object_get_errors", "Object GETs that failed.", registry=r)
        # Data lifecycle (KIP-1163 Batch deletion, object GC)
        self._objects_deleted = Counter(
            "kafka_diskless_objects_deleted", "Objects marked for deletion and then deleted from storage.", registry=r
        )
        self._orphans_deleted = Counter(
            "kafka_diskless_orphan_objects_deleted", "Uploaded but never committed objects deleted.", registry=r
        )
        self._cleaner_errors = Counter(
            "kafka_diskless_object_cleaner_errors", "Object cleaner phases skipped after an error.", ["phase"],
            registry=r,
        )
        self._retention_batches = Counter(
            "kafka_diskless_retention_deleted_batches", "Batches deleted by time or size retention.", registry=r
        )
        self._retention_bytes = Counter(
            "kafka_diskless_retention_deleted_bytes", "Bytes of the batches deleted by retention.", registry=r
        )
        self._retention_errors = Counter(
            "kafka_diskless_retention_errors", "Retention rounds that failed.", registry=r
        )
        self._cache_collector: _CacheCollector | None = None
        #: Diskless cache replicas (``cache_metrics``).
        self.caches = CacheMetrics(r, broker_rack)

    # ------------------------------------------------------------------ requests and topics

    def request_done(self, api_name: str, api_version: int, seconds: float) -> None:
        """One request answered (or dropped, for acks=0) after ``seconds``; ``api_name`` as Kafka spells it."""
        self._requests.labels(api_name, str(api_version)).inc()
        self._request_time.labels(api_name).observe(seconds)

    def bytes_in(self, topic: str, size: int, records: int) -> None:
        """Batches of ``topic`` appended (committed): their bytes and record count."""
        self._bytes_in.labels(topic).inc(size)
        self._messages_in.labels(topic).inc(records)

    def bytes_out(self, topic: str, size: int, *, to_follower: bool = False) -> None:
        """Record bytes of ``topic`` put into a Fetch response (a consumer's, or a follower's:
        Kafka counts those apart, as ReplicationBytesOutPerSec)."""
        if to_follower:
            self._replication_bytes_out.inc(size)
        else:
            self._bytes_out.labels(topic).inc(size)

    def forget_topic(self, topic: str) -> None:
        """Drop a deleted topic's series, so deleted topics do not pile up in every scrape."""
        for metric in (self._bytes_in, self._messages_in, self._bytes_out):
            with contextlib.suppress(KeyError):
                metric.remove(topic)

    # ------------------------------------------------------------------ produce path

    def object_uploaded(self, size: int, seconds: float) -> None:
        """A WAL segment object of ``size`` bytes was uploaded in ``seconds``."""
        self._uploads.inc()
        self._upload_bytes.inc(size)
        self._object_size.observe(size)
        self._upload_time.observe(seconds)

    def segment_stage(self, stage: str, seconds: float) -> None:
        """A WAL segment spent ``seconds`` in ``stage`` (one of ``SEGMENT_STAGES``)."""
        self._stage_time[stage].observe(seconds)

    def object_upload_failed(self) -> None:
        """An upload raised: its batches were failed with KAFKA_STORAGE_ERROR."""
        self._upload_errors.inc()

    def file_committed(self, seconds: float, batches: int) -> None:
        """commit_file returned after ``seconds`` for an object of ``batches`` batches."""
        self._commits.inc()
        self._committed_batches.inc(batches)
        self._commit_time.observe(seconds)

    def commit_failed(self) -> None:
        """commit_file raised: the object is left for the orphan collector."""
        self._commit_errors.inc()

    # ------------------------------------------------------------------ fetch path

    def fetch_done(self, object_gets: int) -> None:
        """One read of diskless partitions finished, having issued ``object_gets`` GETs."""
        self._fetches.inc()
        self._gets_per_fetch.observe(object_gets)

    def cache_fill_done(self, object_gets: int) -> None:
        """One round filling cache replicas finished, having issued ``object_gets`` GETs."""
        self.caches.fill_done(object_gets)

    def object_get_done(self, size: int, seconds: float) -> None:
        """One ranged GET returned ``size`` bytes in ``seconds``."""
        self._gets.inc()
        self._get_bytes.inc(size)
        self._get_time.observe(seconds)

    def object_get_failed(self) -> None:
        """One GET raised."""
        self._gets.inc()
        self._get_errors.inc()

    def track_cache(self, cache: CacheCounters) -> None:
        """Export the range cache's hit and miss counters (read at scrape time); once per broker."""
        if self._cache_collector is not None:
            raise RuntimeError("a cache is already tracked")
        self._cache_collector = _CacheCollector(cache)
        self.registry.register(self._cache_collector)

    def track_log_dirs(self, logs: LogDirCounts) -> None:
        """Export OfflineLogDirectoryCount and OfflineReplicaCount (read at scrape time)."""
        self.registry.register(_LogDirCollector(logs))

    def track_cluster(self, cluster: ClusterView) -> None:
        """Export ActiveControllerCount, ActiveBrokerCount and FencedBrokerCount (read at scrape time)."""
        self._cluster = cluster
        self.registry.register(_ControllerCollector(cluster))

    def track_replicas(self, replicas: ReplicaView) -> None:
        """Export the replication gauges and ISR counters (read at scrape time)."""
        self.registry.register(_ReplicaCollector(replicas, self._cluster))

    # ------------------------------------------------------------------ lifecycle

    def objects_deleted(self, count: int) -> None:
        """``count`` objects marked for deletion were deleted from storage and forgotten."""
        self._objects_deleted.inc(count)

    def orphans_deleted(self, count: int) -> None:
        """``count`` never-committed objects were deleted."""
        self._orphans_deleted.inc(count)

    def cleaner_failed(self, phase: str) -> None:
        """A cleaner phase (``delete`` or ``orphans``) was skipped after an error."""
        self._cleaner_errors.labels(phase).inc()

    def retention_enforced(self, batches: int, size: int) -> None:
        """Retention deleted ``batches`` batches of ``size`` bytes."""
        self._retention_batches.inc(batches)
        self._retention_bytes.inc(size)

    def retention_failed(self) -> None:
        """A retention round (or part of one) failed and is retried at the next interval."""
        self._retention_errors.inc()


@dataclass(slots=True)
class MetricsServer:
    """A running ``/metrics`` HTTP endpoint; ``port`` is the bound one (useful with port 0)."""

    host: str
    port: int
    _server: WSGIServer
    _thread: threading.Thread

    def close(self) -> None:
        """Stop serving and release the port."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


def start_metrics_server(registry: CollectorRegistry, host: str = "127.0.0.1", port: int = 0) -> MetricsServer:
    """Serve ``registry`` as Prometheus text on ``http://host:port/metrics`` from a daemon thread.

    Loopback by default: metrics name topics, so exposing them is the operator's choice.
    Port 0 takes any free port (see ``MetricsServer.port``). An ``OSError`` (the port in use)
    names the address and the configs that set it.
    """
    try:
        server, thread = start_http_server(port, addr=host, registry=registry)
    except OSError as exc:
        raise OSError(
            exc.errno, f"cannot serve metrics on {host}:{port} (metrics.http.host, metrics.http.port): {exc.strerror}"
        ) from exc
    return MetricsServer(host, server.server_port, server, thread)
