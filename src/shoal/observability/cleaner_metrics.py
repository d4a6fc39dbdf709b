"""Log cleaner metrics (compacted topics) under Kafka's names.

=============================================================  ======================================================
Prometheus name (labels)                                       Kafka MBean
=============================================================  ======================================================
kafka_log_logcleanermanager_max_dirty_percent                  kafka.log:type=LogCleanerManager,name=max-dirty-percent
kafka_log_logcleanermanager_time_since_last_run_ms             ...,name=time-since-last-run-ms
kafka_log_logcleanermanager_uncleanable_partitions_count       ...,name=uncleanable-partitions-count,logDirectory=<d>
(logDirectory)                                                 (diskless partitions: logDirectory="diskless")
kafka_log_logcleaner_cleaner_recopy_percent                    kafka.log:type=LogCleaner,name=cleaner-recopy-percent
kafka_log_logcleaner_max_clean_time_secs                       ...,name=max-clean-time-secs
kafka_log_logcleaner_max_buffer_utilization_percent            ...,name=max-buffer-utilization-percent
kafka_log_logcleaner_max_compaction_delay_secs                 ...,name=max-compaction-delay-secs
kafka_log_logcleaner_bytes_read_total, ..._bytes_written_total  what the cleaner read and wrote (Kafka logs these)
=============================================================  ======================================================

A broker has two cleaners, one for its classic logs and one for the diskless partitions it
compacts; the gauges are the larger of the two (Kafka's are maxima over its threads), the counts
and totals their sum.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

__all__ = ["CleanerGauges", "CleanerView", "track_cleaners"]


@dataclass(slots=True)
class CleanerGauges:
    """The figures both cleaners keep for these gauges; each adds how it counts uncleanable partitions."""

    max_dirty_percent: float = 0.0
    recopy_percent: float = 0.0
    max_clean_time_secs: float = 0.0
    max_buffer_utilization_percent: float = 0.0
    max_compaction_delay_secs: float = 0.0
    last_run_ms: int = 0
    passes: int = 0
    bytes_read: int = 0
    bytes_written: int = 0

    def pass_done(self, read: int, written: int, elapsed_s: float, utilization: float) -> None:
        """A cleaning pass read ``read`` bytes and wrote ``written`` of them back."""
        self.passes += 1
        self.bytes_written += written
        if read:
            self.recopy_percent = 100 * written / read
        self.max_clean_time_secs = max(self.max_clean_time_secs, elapsed_s)
        self.max_buffer_utilization_percent = 100 * utilization


class CleanerView(Protocol):
    """What a cleaner exposes; plain reads, from the metrics server's thread."""

    max_dirty_percent: float
    recopy_percent: float
    max_clean_time_secs: float
    max_buffer_utilization_percent: float
    max_compaction_delay_secs: float
    last_run_ms: int
    bytes_read: int
    bytes_written: int

    def uncleanable_counts(self) -> Mapping[str, int]: ...


class _CleanerCollector(Collector):
    def __init__(self, cleaners: Sequence[CleanerView]) -> None:
        self._cleaners = cleaners

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        cs = self._cleaners
        manager, cleaner = "kafka_log_logcleanermanager_", "kafka_log_logcleaner_"
        for prefix, name, mbean, value in (
            (manager, "max_dirty_percent", "LogCleanerManager,name=max-dirty-percent",
             max(c.max_dirty_percent for c in cs)),
            (manager, "time_since_last_run_ms", "LogCleanerManager,name=time-since-last-run-ms",
             min(time.time() * 1000 - c.last_run_ms for c in cs)),
            (cleaner, "cleaner_recopy_percent", "LogCleaner,name=cleaner-recopy-percent",
             max(c.recopy_percent for c in cs)),
            (cleaner, "max_clean_time_secs", "LogCleaner,name=max-clean-time-secs",
             max(c.max_clean_time_secs for c in cs)),
            (cleaner, "max_buffer_utilization_percent", "LogCleaner,name=max-buffer-utilization-percent",
             max(c.max_buffer_utilization_percent for c in cs)),
            (cleaner, "max_compaction_delay_secs", "LogCleaner,name=max-compaction-delay-secs",
             max(c.max_compaction_delay_secs for c in cs)),
        ):
            yield GaugeMetricFamily(prefix + name, f"kafka.log:type={mbean}", value=value)
        uncleanable = GaugeMetricFamily(
            manager + "uncleanable_partitions_count",
            "kafka.log:type=LogCleanerManager,name=uncleanable-partitions-count: partitions whose cleaning failed",
            labels=["logDirectory"],
        )
        counts: dict[str, int] = {}
        for c in cs:
            for directory, count in c.uncleanable_counts().items():
                counts[directory] = counts.get(directory, 0) + count
        for directory, count in sorted(counts.items()):
            uncleanable.add_metric([directory], count)
        yield uncleanable
        yield CounterMetricFamily(
            cleaner + "bytes_read", "Bytes the log cleaner read.", value=sum(c.bytes_read for c in cs)
        )
        yield CounterMetricFamily(
            cleaner + "bytes_written", "Bytes the log cleaner wrote.", value=sum(c.bytes_written for c in cs)
        )


def track_cleaners(registry: CollectorRegistry, cleaners: Sequence[CleanerView]) -> None:
    """Export the cleaners' gauges (read at scrape time); once per broker."""
    registry.register(_CleanerCollector(list(cleaners)))
