"""What the fake clusters of the CLI tool tests share (test_reassign_cli.py through
fake_reassign_cluster.py, test_cli_transactions.py): each request the tool sends goes through the
wire encoding and back (so it is one a broker can decode) and is recorded, and Metadata is
answered from a plain ``{topic: {partition: replicas}}`` map."""

from __future__ import annotations

import datetime
import io
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from kio.serial import entity_reader, entity_writer

from shoal.cli.kafka_client import CLIENT_VERSIONS, BrokerConnection
from shoal.protocol.apis import encode_request
from shoal.protocol.build import make, nested
from shoal.protocol.errors import ErrorCode

#: Broker N of a fake cluster listens at ``h:PORT_BASE + N``.
PORT_BASE = 19000


@dataclass
class Sent:
    node: int
    api_key: int
    version: int
    request: Any


def round_trip_request(request: Any, client_id: str) -> Any:
    """Encode as the tool's connection does and decode as a broker would."""
    frame = encode_request(7, client_id, request)[4:]
    cls = type(request)
    header, offset = entity_reader(cls.__header_schema__)(frame, 0)
    assert header.client_id == client_id
    body, _ = entity_reader(cls)(frame, offset)
    return body


def round_trip_response(response: Any) -> Any:
    buffer = io.BytesIO()
    entity_writer(type(response))(buffer, response)
    body, _ = entity_reader(type(response))(buffer.getvalue(), 0)
    return body


class FakeBrokers(Protocol):
    missing_apis: set[int]

    def handle(self, node: int, api_key: int, version: int, req: Any) -> Any: ...


class FakeConnection:
    """The tool's connection to broker ``node`` of a fake cluster: requests go to
    ``cluster.handle`` after the wire round trip, answers come back through it."""

    def __init__(
        self,
        cluster: FakeBrokers,
        node: int,
        client_id: str,
        versions: Mapping[int, tuple[int, int]] = CLIENT_VERSIONS,
    ) -> None:
        self.cluster = cluster
        self.node = node
        self.client_id = client_id
        self.address = f"h:{PORT_BASE + node}"
        self.closed = False
        self.api_versions = {k: v for k, v in versions.items() if k not in cluster.missing_apis}

    def version(self, api_key: int) -> int:
        return BrokerConnection.version(self, api_key)  # type: ignore[arg-type]

    def request(self, api_key: int, version: int, request_obj: Any, *, timeout: float | None = None) -> Any:
        assert int(type(request_obj).__api_key__) == api_key and int(type(request_obj).__version__) == version
        decoded = round_trip_request(request_obj, self.client_id)
        return round_trip_response(self.cluster.handle(self.node, api_key, version, decoded))

    def close(self) -> None:
        self.closed = True


def metadata_response(
    cls: type,
    req: Any,
    topics: Mapping[str, Mapping[int, list[int]]],
    brokers: Mapping[int, str | None],
    controller: int,
) -> Any:
    """Metadata for ``req``: the first replica leads, every replica is in sync; ``brokers`` maps
    each broker to its rack."""
    broker_cls, topic_cls, part_cls = (
        nested(cls, "MetadataResponseBroker"), nested(cls, "MetadataResponseTopic"),
        nested(cls, "MetadataResponsePartition"),
    )
    names = list(topics) if req.topics is None else [t.name for t in req.topics]
    answered = []
    for name in names:
        parts = topics.get(name)
        code = ErrorCode.none if parts is not None else ErrorCode.unknown_topic_or_partition
        answered.append(make(
            topic_cls, error_code=code, name=name, topic_id=None, is_internal=False,
            topic_authorized_operations=-2147483648,
            partitions=tuple(
                make(part_cls, error_code=ErrorCode.none, partition_index=p, leader_id=r[0], leader_epoch=0,
                     replica_nodes=tuple(r), isr_nodes=tuple(r), offline_replicas=())
                for p, r in sorted((parts or {}).items())
            ),
        ))
    return make(
        cls, throttle_time=datetime.timedelta(0), cluster_id="fake", controller_id=controller,
        brokers=tuple(make(broker_cls, node_id=b, host="h", port=PORT_BASE + b, rack=rack)
                      for b, rack in brokers.items()),
        topics=tuple(answered), cluster_authorized_operations=-2147483648,
    )
