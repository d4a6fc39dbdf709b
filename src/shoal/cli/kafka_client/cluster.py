"""Where things live in a cluster: broker addresses, partitions, and what Metadata says of them."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import NamedTuple

from shoal.cli.kafka_client.errors import KafkaClientError
from shoal.protocol.errors import ErrorCode

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"


class TopicPartition(NamedTuple):
    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


@dataclass(frozen=True, slots=True)
class Node:
    node_id: int
    host: str
    port: int
    rack: str | None = None

    @property
    def address(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def parse_bootstrap(value: str) -> list[tuple[str, int]]:
    """``host:port[,host:port...]`` (IPv6 as ``[addr]:port``) as Kafka's bootstrap.servers."""
    servers: list[tuple[str, int]] = []
    for raw in value.split(","):
        item = raw.strip()
        if not item:
            continue
        if item.startswith("["):
            host, sep, rest = item[1:].partition("]")
            if not sep or not rest.startswith(":"):
                raise KafkaClientError(f"Invalid url in bootstrap.servers: {item}")
            port_text = rest[1:]
        else:
            host, sep, port_text = item.rpartition(":")
            if not sep or not host:
                raise KafkaClientError(f"Invalid url in bootstrap.servers: {item}")
        try:
            port = int(port_text)
        except ValueError:
            raise KafkaClientError(f"Invalid port in bootstrap.servers: {item}") from None
        if not 0 < port < 65536:
            raise KafkaClientError(f"Invalid port in bootstrap.servers: {item}")
        servers.append((host, port))
    if not servers:
        raise KafkaClientError("No resolvable bootstrap urls given in bootstrap.servers")
    return servers


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    partition: int
    leader: int
    error: ErrorCode


@dataclass(frozen=True, slots=True)
class TopicInfo:
    name: str
    error: ErrorCode
    partitions: dict[int, PartitionInfo]


@dataclass(frozen=True, slots=True)
class ClusterMetadata:
    brokers: dict[int, Node]
    controller_id: int
    topics: dict[str, TopicInfo]


def all_partitions(cluster: ClusterMetadata, topics: Iterable[str]) -> list[TopicPartition]:
    """Every partition of the given topics that the metadata knows, sorted."""
    out: list[TopicPartition] = []
    for name in topics:
        info = cluster.topics.get(name)
        if info is not None:
            out.extend(TopicPartition(name, p) for p in info.partitions)
    return sorted(out)
