"""Time and size retention of diskless topics (KIP-1163 "Batch deletion").

Kafka's LogManager checks every log each ``log.retention.check.interval.ms`` and
deletes the segments that ``retention.ms`` / ``retention.bytes`` expire. A diskless
log lives in the Batch Coordinator, so this task does the walking: every interval it
takes the current MetadataImage, reads each diskless topic's effective retention
configs (topic override, else the broker default) and asks the coordinator to
enforce them, which deletes whole batches and marks emptied objects for deletion
(the ObjectCleaner deletes those later). Topics whose ``cleanup.policy`` lacks
``delete`` are left alone, as Kafka does, and so are topics whose data is being moved to tiered
storage: their batches leave the coordinator once copied, and the RemoteLogManager applies their
retention to the whole log (as Kafka deletes a tiered log's local segments only once copied).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from shoal.coordinator.api import (
    BatchCoordinator,
    EnforceRetentionRequest,
    EnforceRetentionResponse,
    TopicIdPartition,
)
from shoal.diskless.periodic import PeriodicTask
from shoal.metadata.image import MetadataImage, TopicImage
from shoal.metadata.tiered_state import ENABLED, copying
from shoal.observability.metrics import BrokerMetrics
from shoal.protocol.errors import ErrorCode

__all__ = ["PARTITIONS_PER_CALL", "RetentionResult", "RetentionTask", "retention_requests"]

log = logging.getLogger(__name__)

#: Partitions per enforce_retention call: each call is one write transaction, and
#: commits wait behind it, so a large cluster is done in several short ones.
PARTITIONS_PER_CALL = 64


@dataclass(frozen=True, slots=True)
class RetentionResult:
    """What one round did."""

    partitions: int = 0
    batches_deleted: int = 0
    bytes_deleted: int = 0
    failed_calls: int = 0


def _topic_value(topic: TopicImage, name: str, topic_default: Callable[[str], Any]) -> Any:
    """The topic's own value of config ``name`` (a string in the image), else the broker's default."""
    value = topic.configs.get(name)
    return topic_default(name) if value is None else value


def _deletes(cleanup_policy: Any) -> bool:
    policies = cleanup_policy if isinstance(cleanup_policy, list | tuple) else str(cleanup_policy).split(",")
    return "delete" in {p.strip() for p in policies}


def retention_requests(image: MetadataImage, topic_default: Callable[[str], Any]) -> list[EnforceRetentionRequest]:
    """One request per partition of every diskless topic that has retention to enforce."""
    requests: list[EnforceRetentionRequest] = []
    for topic in image.topics_by_name.values():
        if not topic.is_diskless or not _deletes(_topic_value(topic, "cleanup.policy", topic_default)):
            continue
        if copying(topic.configs) and topic.tiered_state in (None, ENABLED):
            continue
        retention_ms = int(_topic_value(topic, "retention.ms", topic_default))
        retention_bytes = int(_topic_value(topic, "retention.bytes", topic_default))
        if retention_ms < 0 and retention_bytes < 0:
            continue
        for partition in sorted(topic.partitions):
            requests.append(
                EnforceRetentionRequest(
                    TopicIdPartition(topic.topic_id, partition, topic.name), retention_bytes, retention_ms
                )
            )
    return requests


class RetentionTask(PeriodicTask):
    """Enforces retention on every diskless partition every ``interval_ms``.

    ``image`` returns the current MetadataImage; ``topic_default`` the broker's default
    of a topic config (``Config.topic_default``). The first round runs one interval
    after ``start``.
    """

    def __init__(
        self,
        coordinator: BatchCoordinator,
        run_blocking: Callable[..., Awaitable],
        image: Callable[[], MetadataImage],
        topic_default: Callable[[str], Any],
        *,
        interval_ms: int,
        metrics: BrokerMetrics | None = None,
    ) -> None:
        self._coordinator = coordinator
        self._run_blocking = run_blocking
        self._image = image
        self._topic_default = topic_default
        self._interval = interval_ms / 1000
        self._metrics = metrics
        self._name = "diskless-retention"

    async def round(self) -> None:
        await self.run_once()

    async def run_once(self) -> RetentionResult:
        """One pass over the diskless partitions of the current image."""
        requests = retention_requests(self._image(), self._topic_default)
        batches = size = failed = 0
        for start in range(0, len(requests), PARTITIONS_PER_CALL):
            chunk = requests[start : start + PARTITIONS_PER_CALL]
            try:
                responses: list[EnforceRetentionResponse] = await self._run_blocking(
                    self._coordinator.enforce_retention, chunk
                )
            except Exception as exc:
                # The next chunks may still succeed (e.g. a transient lock timeout); this one is
                # retried next round.
                failed += 1
                log.warning("enforcing retention on %d partitions failed: %s", len(chunk), exc)
                if self._metrics is not None:
                    self._metrics.retention_failed()
                continue
            for request, response in zip(chunk, responses, strict=True):
                if response.errors != ErrorCode.none:
                    # UNKNOWN_TOPIC_OR_PARTITION: the topic was deleted since the image was taken.
                    log.debug("retention on %s: %s", request.topic_id_partition, response.errors.name)
                    continue
                if response.batches_deleted:
                    tip = request.topic_id_partition
                    log.info(
                        "retention deleted %d batches (%d bytes) of %s-%d; log start offset now %d",
                        response.batches_deleted, response.bytes_deleted, tip.topic_name, tip.partition,
                        response.log_start_offset,
                    )
                batches += response.batches_deleted
                size += response.bytes_deleted
        if self._metrics is not None and batches:
            self._metrics.retention_enforced(batches, size)
        return RetentionResult(len(requests), batches, size, failed)
