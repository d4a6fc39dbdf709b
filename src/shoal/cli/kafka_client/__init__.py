"""A small synchronous Kafka wire client for command-line tools (``shoal groups``).

Tools must send exactly what Kafka's own admin tools send (an OffsetCommit with generation -1
and an empty member id, DescribeGroups to the group's coordinator, ListOffsets to each
partition's leader) and must work against any Kafka-compatible cluster, so this client speaks
the protocol directly with the broker's own kio schemas instead of depending on a client
library. It negotiates versions with ApiVersions, learns brokers and leaders from Metadata,
finds group coordinators with FindCoordinator, and retries what Kafka's admin client retries
(coordinator moved or loading, leader changed) until the operation's deadline.

Modules: ``errors`` (exceptions, Kafka's error names and messages), ``cluster`` (addresses and
Metadata results), ``connection`` (one broker: framing and version negotiation), ``router``
(which broker, retries, Metadata), the per-API calls (``group_apis``, ``member_apis``,
``offset_apis``, ``produce_apis``, ``fetch_apis``), ``client`` (KafkaClient, all of them
together), ``reassign_apis`` (ReassignmentClient: the reassign-partitions tool's controller,
config and log-dir calls), and on top of it the console tools' ``producer`` (idempotent,
Kafka's partitioner) and ``consumer`` (a classic group member with the range assignor, or fixed partitions).
Tools import from the package.
"""

from shoal.cli.kafka_client.client import KafkaClient
from shoal.cli.kafka_client.cluster import (
    DEFAULT_BOOTSTRAP,
    ClusterMetadata,
    Node,
    PartitionInfo,
    TopicInfo,
    TopicPartition,
    all_partitions,
    parse_bootstrap,
)
from shoal.cli.kafka_client.connection import (
    API_NAMES,
    CLIENT_VERSIONS,
    DEFAULT_CLIENT_ID,
    Api,
    BrokerConnection,
    negotiate_version,
)
from shoal.cli.kafka_client.errors import (
    BrokerConnectionError,
    KafkaApiError,
    KafkaClientError,
    UnsupportedApiError,
    error_message,
    error_name,
)
from shoal.cli.kafka_client.group_apis import GroupDescription, GroupListing, MemberDescription
from shoal.cli.kafka_client.offset_apis import (
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    UNKNOWN_OFFSET,
    ListedOffset,
)
from shoal.cli.kafka_client.reassign_apis import (
    ConfigChange,
    PartitionReassignment,
    ReassignmentClient,
    ReplicaLogDir,
)

__all__ = [
    "API_NAMES",
    "CLIENT_VERSIONS",
    "DEFAULT_BOOTSTRAP",
    "DEFAULT_CLIENT_ID",
    "EARLIEST_LOCAL_TIMESTAMP",
    "EARLIEST_TIMESTAMP",
    "LATEST_TIMESTAMP",
    "UNKNOWN_OFFSET",
    "Api",
    "BrokerConnection",
    "BrokerConnectionError",
    "ClusterMetadata",
    "ConfigChange",
    "GroupDescription",
    "GroupListing",
    "KafkaApiError",
    "KafkaClient",
    "KafkaClientError",
    "ListedOffset",
    "MemberDescription",
    "Node",
    "PartitionInfo",
    "PartitionReassignment",
    "ReassignmentClient",
    "ReplicaLogDir",
    "TopicInfo",
    "TopicPartition",
    "UnsupportedApiError",
    "all_partitions",
    "error_message",
    "error_name",
    "negotiate_version",
    "parse_bootstrap",
]
