"""What ``shoal cluster describe`` asks a broker: the cluster id, the controller and the brokers.

DescribeCluster (API 60) is what Kafka's ``Admin.describeCluster`` sends. Its v2 (KIP-1073)
takes ``IncludeFencedBrokers`` and answers each broker's ``IsFenced``: the only way to see a
registered broker that is fenced, since Metadata and DescribeCluster v0-1 list unfenced brokers
only (so the brokers they list are reported unfenced). A broker without DescribeCluster gets
Metadata instead, as Kafka's admin client did before DescribeCluster existed.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from shoal.cli.kafka_client import (
    Api,
    BrokerConnection,
    BrokerConnectionError,
    KafkaApiError,
    KafkaClient,
    KafkaClientError,
    UnsupportedApiError,
    negotiate_version,
)
from shoal.protocol.apis import request_class
from shoal.protocol.build import make
from shoal.protocol.errors import ErrorCode

DESCRIBE_CLUSTER = 60
#: DescribeCluster versions this tool builds: v2 adds IncludeFencedBrokers / IsFenced (KIP-1073).
DESCRIBE_CLUSTER_VERSIONS = (0, 2)
_BROKERS_ENDPOINT = 1  # DescribeCluster's EndpointType: 1 = brokers, 2 = controllers
_RETRY_BACKOFF_S = 0.1

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    node_id: int
    host: str
    port: int
    rack: str | None
    fenced: bool

    @property
    def address(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


@dataclass(frozen=True, slots=True)
class ClusterInfo:
    cluster_id: str | None
    controller_id: int | None
    brokers: tuple[BrokerInfo, ...]
    #: Whether fenced brokers are listed too (DescribeCluster v2); otherwise only unfenced ones are.
    includes_fenced: bool
    #: The request that answered, e.g. ``DescribeCluster v2`` or ``Metadata v12``.
    source: str


def describe_cluster(client: KafkaClient, timeout_s: float) -> ClusterInfo:
    """Ask any bootstrap broker, retrying connection failures until ``timeout_s`` has passed."""
    return _retrying(timeout_s, lambda: _describe_once(client.any_connection()))


def _describe_once(conn: BrokerConnection) -> ClusterInfo:
    try:
        version = negotiate_version(conn, DESCRIBE_CLUSTER, DESCRIBE_CLUSTER_VERSIONS, "DescribeCluster")
    except UnsupportedApiError:
        return via_metadata(conn)
    return via_describe_cluster(conn, version)


def via_describe_cluster(conn: BrokerConnection, version: int) -> ClusterInfo:
    cls = request_class(DESCRIBE_CLUSTER, version)
    request = make(
        cls,
        include_cluster_authorized_operations=False,
        endpoint_type=_BROKERS_ENDPOINT,
        include_fenced_brokers=True,
    )
    response = conn.request(DESCRIBE_CLUSTER, version, request)
    if response.error_code != ErrorCode.none:
        raise KafkaApiError(response.error_code, response.error_message, context=f"DescribeCluster from {conn.address}")
    brokers = (_broker(b.broker_id, b, bool(getattr(b, "is_fenced", False))) for b in response.brokers)
    return ClusterInfo(
        response.cluster_id,
        _controller(response.controller_id),
        _sorted(brokers),
        includes_fenced=version >= 2,
        source=f"DescribeCluster v{version}",
    )


def via_metadata(conn: BrokerConnection) -> ClusterInfo:
    """Metadata for no topic: its brokers (all unfenced), cluster id (v2+) and controller (v1+)."""
    version = conn.version(Api.METADATA)
    cls = request_class(Api.METADATA, version)
    request = make(
        cls,
        topics=(),  # v1+: no topic (the client speaks v1 and later only)
        allow_auto_topic_creation=False,
        include_cluster_authorized_operations=False,
        include_topic_authorized_operations=False,
    )
    response = conn.request(Api.METADATA, version, request)
    brokers = (_broker(b.node_id, b, False) for b in response.brokers)
    return ClusterInfo(
        getattr(response, "cluster_id", None),
        _controller(getattr(response, "controller_id", -1)),
        _sorted(brokers),
        includes_fenced=False,
        source=f"Metadata v{version}",
    )


def _broker(node_id: Any, b: Any, fenced: bool) -> BrokerInfo:
    return BrokerInfo(int(node_id), b.host, int(b.port), getattr(b, "rack", None), fenced)


def _sorted(brokers: Any) -> tuple[BrokerInfo, ...]:
    return tuple(sorted(brokers, key=lambda b: b.node_id))


def _controller(value: Any) -> int | None:
    return None if int(value) < 0 else int(value)


def _retrying(timeout_s: float, call: Callable[[], T]) -> T:
    """Kafka's admin client retries a broker it cannot reach until the call's timeout; so does this."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return call()
        except BrokerConnectionError as exc:
            if time.monotonic() + _RETRY_BACKOFF_S >= deadline:
                raise KafkaClientError(f"No broker reachable within {timeout_s:g}s: {exc}") from None
            time.sleep(_RETRY_BACKOFF_S)
