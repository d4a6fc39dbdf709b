"""KafkaClient: the routing and retries of BrokerRouter with every call the tools make."""

from __future__ import annotations

from shoal.cli.kafka_client.fetch_apis import FetchApis
from shoal.cli.kafka_client.member_apis import MemberApis
from shoal.cli.kafka_client.offset_apis import OffsetApis
from shoal.cli.kafka_client.produce_apis import ProduceApis
from shoal.cli.kafka_client.transaction_apis import TransactionApis


class KafkaClient(MemberApis, OffsetApis, ProduceApis, FetchApis, TransactionApis):
    """Routes requests to the right broker: any broker, a group's coordinator or a partition's leader.

    Each public operation gets ``timeout`` seconds in all, retries included.
    """
