"""KafkaClient: the routing and retries of BrokerRouter with every call the tools make."""

from __future__ import annotations

from shoal.cli.kafka_client.group_apis import GroupApis
from shoal.cli.kafka_client.offset_apis import OffsetApis


class KafkaClient(GroupApis, OffsetApis):
    """Routes requests to the right broker: any broker, a group's coordinator or a partition's leader.

    Each public operation gets ``timeout`` seconds in all, retries included.
    """
