"""Which broker gets a request, and retrying until the operation's deadline.

The per-API calls (group_apis, offset_apis) build on this: they pick a broker through it and
wrap their one attempt in its retry loop, so every operation shares one timeout policy.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any, Self, TypeVar

from shoal.cli.kafka_client.cluster import (
    DEFAULT_BOOTSTRAP,
    ClusterMetadata,
    Node,
    PartitionInfo,
    TopicInfo,
    parse_bootstrap,
)
from shoal.cli.kafka_client.connection import DEFAULT_CLIENT_ID, Api, BrokerConnection
from shoal.cli.kafka_client.errors import (
    BrokerConnectionError,
    KafkaClientError,
    RetriableAnswer,
    error_message,
    error_name,
)
from shoal.protocol.apis import request_class
from shoal.protocol.build import make, nested
from shoal.protocol.errors import ErrorCode

T = TypeVar("T")


class BrokerRouter:
    """Routes requests to the right broker: any broker, or a node by id (learnt from Metadata).

    Each public operation gets ``timeout`` seconds in all, retries included.
    """

    def __init__(
        self,
        bootstrap: str = DEFAULT_BOOTSTRAP,
        *,
        client_id: str = DEFAULT_CLIENT_ID,
        timeout: float = 30.0,
        retry_backoff: float = 0.1,
    ) -> None:
        self.bootstrap = parse_bootstrap(bootstrap)
        self.client_id = client_id
        self.timeout = timeout
        self.retry_backoff = retry_backoff
        self._connections: dict[tuple[str, int], BrokerConnection] = {}
        self._brokers: dict[int, Node] = {}
        self._coordinators: dict[str, Node] = {}  # group id -> coordinator, kept by GroupApis

    def close(self) -> None:
        for conn in self._connections.values():
            conn.close()
        self._connections.clear()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- connections -------------------------------------------------------------------------------
    def connection(self, host: str, port: int) -> BrokerConnection:
        """A (cached) connection to one broker address."""
        key = (host, port)
        conn = self._connections.get(key)
        if conn is None or conn.closed:
            conn = BrokerConnection(host, port, client_id=self.client_id, timeout=self.timeout)
            self._connections[key] = conn
        return conn

    def any_connection(self) -> BrokerConnection:
        """A connection to any reachable broker: open ones first, then known brokers, then bootstrap."""
        for conn in self._connections.values():
            if not conn.closed:
                return conn
        candidates = [(n.host, n.port) for n in self._brokers.values()] + self.bootstrap
        errors: list[str] = []
        for host, port in dict.fromkeys(candidates):
            try:
                return self.connection(host, port)
            except BrokerConnectionError as exc:
                errors.append(str(exc))
        raise BrokerConnectionError("; ".join(errors) or "No broker to connect to")

    def node_connection(self, node_id: int) -> BrokerConnection:
        node = self._brokers.get(node_id)
        if node is None:
            self.metadata([])
            node = self._brokers.get(node_id)
        if node is None:
            raise RetriableAnswer(ErrorCode.leader_not_available, f"broker {node_id} is not in the metadata")
        return self.connection(node.host, node.port)

    def request(self, api_key: int, version: int, request_obj: Any, *, node_id: int | None = None) -> Any:
        """Send a request to one broker (by node id) or to any broker."""
        conn = self.any_connection() if node_id is None else self.node_connection(node_id)
        return conn.request(api_key, version, request_obj)

    # -- retries -----------------------------------------------------------------------------------
    def _deadline(self) -> float:
        return time.monotonic() + self.timeout

    def _backoff(self, deadline: float, what: str, last: Exception) -> None:
        if time.monotonic() + self.retry_backoff >= deadline:
            detail = (
                f"{error_name(last.code)}: {last.message or error_message(last.code)}"
                if isinstance(last, RetriableAnswer)
                else str(last)
            )
            raise KafkaClientError(f"{what} timed out after {self.timeout:g}s: {detail}")
        time.sleep(self.retry_backoff)

    def _retrying(self, what: str, call: Callable[[], T], deadline: float | None = None) -> T:
        """Run ``call`` until it stops raising retriable errors, within the deadline."""
        deadline = deadline or self._deadline()
        while True:
            try:
                return call()
            except (RetriableAnswer, BrokerConnectionError) as exc:
                self._backoff(deadline, what, exc)

    # -- metadata ----------------------------------------------------------------------------------
    def metadata(self, topics: Sequence[str] | None, *, auto_create: bool = False) -> ClusterMetadata:
        """Metadata for some topics (None: all topics, []: brokers only).

        ``auto_create`` asks the broker to create missing topics, as a producer's Metadata does
        (the broker decides, by ``auto.create.topics.enable``); admin tools never do."""
        return self._retrying("Metadata", lambda: self._metadata_once(topics, auto_create))

    def _metadata_once(self, topics: Sequence[str] | None, auto_create: bool = False) -> ClusterMetadata:
        conn = self.any_connection()
        version = conn.version(Api.METADATA)
        cls = request_class(Api.METADATA, version)
        topic_cls = nested(cls, "MetadataRequestTopic")
        request = make(
            cls,
            topics=None if topics is None else tuple(make(topic_cls, name=t, topic_id=None) for t in topics),
            allow_auto_topic_creation=auto_create,
            include_cluster_authorized_operations=False,
            include_topic_authorized_operations=False,
        )
        response = conn.request(Api.METADATA, version, request)
        brokers = {
            int(b.node_id): Node(int(b.node_id), b.host, int(b.port), getattr(b, "rack", None))
            for b in response.brokers
        }
        if brokers:
            self._brokers = brokers
        infos: dict[str, TopicInfo] = {}
        for t in response.topics:
            if t.name is None:
                continue
            parts = {
                int(p.partition_index): PartitionInfo(int(p.partition_index), int(p.leader_id), p.error_code)
                for p in t.partitions
            }
            infos[t.name] = TopicInfo(t.name, t.error_code, parts)
        return ClusterMetadata(brokers, int(getattr(response, "controller_id", -1)), infos)
