"""Replication throttles (Kafka's ReplicationQuotaManager), used by reassignments so moving a
replica does not starve clients: a leader stops sending, and a follower stops asking for, the
throttled replicas' records once the bytes sent or fetched for them over the last
``WINDOW_SECONDS`` exceed ``leader.replication.throttled.rate`` /
``follower.replication.throttled.rate``. Which replicas are throttled is the topic configs
``leader.replication.throttled.replicas`` / ``follower.replication.throttled.replicas``:
``partition:broker`` items, or ``*``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

from shoal.config import Config
from shoal.metadata.image import MetadataImage

#: Kafka's replication.quota.window.num (11) samples of replication.quota.window.size.seconds (1).
WINDOW_SECONDS = 11


def is_throttled(configs: Mapping[str, str], config_name: str, partition: int, node_id: int) -> bool:
    """Whether the topic's ``config_name`` list names this broker's replica of ``partition``."""
    value = configs.get(config_name, "")
    items = [item.strip() for item in value.split(",") if item.strip()]
    return items == ["*"] or f"{partition}:{node_id}" in items


def dynamic_rate(config: Config, image: MetadataImage, node_id: int, name: str) -> int:
    """A throttle rate as set for this broker, else as the cluster default, else in server.properties."""
    for resource in (str(node_id), ""):
        value = image.broker_configs.get(resource, {}).get(name)
        if value is not None:
            return int(value)
    return int(config[name])


class ReplicationQuota:
    """A byte rate over a sliding window of one-second samples."""

    def __init__(self, bound: Callable[[], int], clock: Callable[[], float] = time.monotonic) -> None:
        self._bound = bound
        self._clock = clock
        self._samples: dict[int, int] = {}

    def record(self, size: int) -> None:
        if size:
            second = int(self._clock())
            self._samples[second] = self._samples.get(second, 0) + size

    def exceeded(self) -> bool:
        now = self._clock()
        oldest = int(now) - WINDOW_SECONDS + 1
        for second in [s for s in self._samples if s < oldest]:
            del self._samples[second]
        total = sum(self._samples.values())
        if not total:
            return False
        # Over the samples kept (as Kafka's Rate does), so a quiet spell allows no burst.
        elapsed = max(now - min(self._samples), 1.0)
        return total / elapsed > self._bound()
