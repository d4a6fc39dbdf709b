"""One broker connection: the request/response framing and the ApiVersions negotiation.

Every tool's version choice goes through here, so a broker's advertised ranges are read once
per connection and a gap is reported the same way whichever tool hits it.
"""

from __future__ import annotations

import socket
import struct
from typing import Any

from shoal.cli.kafka_client.errors import (
    BrokerConnectionError,
    KafkaApiError,
    KafkaClientError,
    UnsupportedApiError,
)
from shoal.protocol.apis import decode_response, encode_request, request_class
from shoal.protocol.build import make
from shoal.protocol.errors import ErrorCode

DEFAULT_CLIENT_ID = "shoal-admin"


class Api:
    """API keys this client sends (Kafka's numbering)."""

    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    API_VERSIONS = 18
    INIT_PRODUCER_ID = 22
    ALTER_REPLICA_LOG_DIRS = 34
    DESCRIBE_LOG_DIRS = 35
    DELETE_GROUPS = 42
    INCREMENTAL_ALTER_CONFIGS = 44
    ALTER_PARTITION_REASSIGNMENTS = 45
    LIST_PARTITION_REASSIGNMENTS = 46


API_NAMES = {
    Api.PRODUCE: "Produce",
    Api.FETCH: "Fetch",
    Api.LIST_OFFSETS: "ListOffsets",
    Api.METADATA: "Metadata",
    Api.OFFSET_COMMIT: "OffsetCommit",
    Api.OFFSET_FETCH: "OffsetFetch",
    Api.FIND_COORDINATOR: "FindCoordinator",
    Api.JOIN_GROUP: "JoinGroup",
    Api.HEARTBEAT: "Heartbeat",
    Api.LEAVE_GROUP: "LeaveGroup",
    Api.SYNC_GROUP: "SyncGroup",
    Api.DESCRIBE_GROUPS: "DescribeGroups",
    Api.LIST_GROUPS: "ListGroups",
    Api.API_VERSIONS: "ApiVersions",
    Api.INIT_PRODUCER_ID: "InitProducerId",
    Api.ALTER_REPLICA_LOG_DIRS: "AlterReplicaLogDirs",
    Api.DESCRIBE_LOG_DIRS: "DescribeLogDirs",
    Api.DELETE_GROUPS: "DeleteGroups",
    Api.INCREMENTAL_ALTER_CONFIGS: "IncrementalAlterConfigs",
    Api.ALTER_PARTITION_REASSIGNMENTS: "AlterPartitionReassignments",
    Api.LIST_PARTITION_REASSIGNMENTS: "ListPartitionReassignments",
}

# The versions this client knows how to build and read. Upper bounds stop before versions that
# address topics by id only (Produce v13, Fetch v13, OffsetCommit/OffsetFetch v10) or that kio lacks.
CLIENT_VERSIONS: dict[int, tuple[int, int]] = {
    Api.PRODUCE: (3, 11),
    Api.FETCH: (4, 12),
    Api.LIST_OFFSETS: (1, 10),
    Api.METADATA: (1, 12),
    Api.OFFSET_COMMIT: (2, 9),
    Api.OFFSET_FETCH: (2, 9),
    Api.FIND_COORDINATOR: (0, 6),
    Api.JOIN_GROUP: (2, 9),
    Api.HEARTBEAT: (0, 4),
    Api.LEAVE_GROUP: (0, 5),
    Api.SYNC_GROUP: (0, 5),
    Api.DESCRIBE_GROUPS: (0, 6),
    Api.LIST_GROUPS: (0, 5),
    Api.API_VERSIONS: (0, 3),
    Api.INIT_PRODUCER_ID: (0, 5),
    Api.ALTER_REPLICA_LOG_DIRS: (1, 2),
    Api.DESCRIBE_LOG_DIRS: (1, 4),
    Api.DELETE_GROUPS: (0, 2),
    Api.INCREMENTAL_ALTER_CONFIGS: (0, 1),
    Api.ALTER_PARTITION_REASSIGNMENTS: (0, 1),  # v1: AllowReplicationFactorChange (KIP-860)
    Api.LIST_PARTITION_REASSIGNMENTS: (0, 0),
}


def negotiate_version(conn: BrokerConnection, api_key: int, supported: tuple[int, int], name: str) -> int:
    """The highest version both sides speak; Kafka's NodeApiVersions wording when there is none."""
    lo, hi = supported
    broker = conn.api_versions.get(api_key)
    if broker is None:
        raise UnsupportedApiError(f"The node does not support {name}")
    best = min(hi, broker[1])
    if best < max(lo, broker[0]):
        raise UnsupportedApiError(
            f"The node does not support {name} with version in range [{lo},{hi}]. "
            f"The supported range is [{broker[0]},{broker[1]}]."
        )
    return best


def _client_version() -> str:
    try:
        from importlib.metadata import version

        return version("shoal")
    except Exception:  # not installed (run from src/): any valid software version will do
        return "0.0.0"


class BrokerConnection:
    """One blocking TCP connection to one broker, with the API versions that broker advertised."""

    def __init__(self, host: str, port: int, *, client_id: str = DEFAULT_CLIENT_ID, timeout: float = 30.0) -> None:
        self.host = host
        self.port = port
        self.address = f"{host}:{port}"
        self.client_id = client_id
        self._correlation = 0
        try:
            self._sock: socket.socket | None = socket.create_connection((host, port), timeout=timeout)
        except OSError as exc:
            raise BrokerConnectionError(f"Cannot connect to {self.address}: {exc}") from None
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            self.api_versions = self._negotiate()
        except KafkaClientError:
            self.close()
            raise

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    @property
    def closed(self) -> bool:
        return self._sock is None

    def version(self, api_key: int) -> int:
        """The highest version both this client and the broker speak, or an error naming the gap."""
        lo, hi = CLIENT_VERSIONS[api_key]
        name = API_NAMES.get(api_key, str(api_key))
        broker = self.api_versions.get(api_key)
        if broker is None:
            raise KafkaClientError(f"The broker at {self.address} does not support {name} (API key {api_key})")
        best = min(hi, broker[1])
        if best < max(lo, broker[0]):
            raise KafkaClientError(
                f"No common version of {name}: broker {self.address} has {broker[0]}-{broker[1]}, "
                f"this client {lo}-{hi}"
            )
        return best

    def request(self, api_key: int, version: int, request_obj: Any, *, timeout: float | None = None) -> Any:
        """Send one kio request object and return the decoded kio response object.

        ``timeout`` replaces the connection's socket timeout for this request: a JoinGroup may be
        parked at the coordinator for as long as the group's rebalance takes.
        """
        cls = type(request_obj)
        if int(cls.__api_key__) != api_key or int(cls.__version__) != version:
            raise ValueError(
                f"{cls.__name__} is API {cls.__api_key__} v{cls.__version__}, not API {api_key} v{version}"
            )
        if timeout is None or self._sock is None:
            frame = self._round_trip(request_obj)
        else:
            previous = self._sock.gettimeout()
            self._sock.settimeout(timeout)
            try:
                frame = self._round_trip(request_obj)
            finally:
                if self._sock is not None:
                    self._sock.settimeout(previous)
        try:
            return decode_response(api_key, version, frame)
        except Exception as exc:  # kio raises assorted errors on bytes it cannot parse
            raise KafkaClientError(
                f"Malformed {API_NAMES.get(api_key, api_key)} v{version} response from {self.address}: {exc}"
            ) from None

    def send_only(self, api_key: int, version: int, request_obj: Any) -> None:
        """Send a request the broker does not answer (Produce with acks=0)."""
        if self._sock is None:
            raise BrokerConnectionError(f"Connection to {self.address} is closed")
        self._correlation += 1
        try:
            self._sock.sendall(encode_request(self._correlation, self.client_id, request_obj))
        except OSError as exc:
            self.close()
            raise BrokerConnectionError(f"Connection to {self.address} failed: {exc}") from None

    def _round_trip(self, request_obj: Any) -> bytes:
        if self._sock is None:
            raise BrokerConnectionError(f"Connection to {self.address} is closed")
        self._correlation += 1
        correlation_id = self._correlation
        try:
            self._sock.sendall(encode_request(correlation_id, self.client_id, request_obj))
            (size,) = struct.unpack(">i", self._recv_exact(4))
            if size < 4:
                raise BrokerConnectionError(f"Invalid response size {size} from {self.address}")
            frame = self._recv_exact(size)
        except OSError as exc:
            self.close()
            raise BrokerConnectionError(f"Connection to {self.address} failed: {exc}") from None
        except BrokerConnectionError:
            self.close()
            raise
        (got,) = struct.unpack_from(">i", frame, 0)
        if got != correlation_id:
            self.close()
            raise BrokerConnectionError(
                f"Correlation id mismatch from {self.address}: sent {correlation_id}, got {got}"
            )
        return frame

    def _recv_exact(self, n: int) -> bytes:
        assert self._sock is not None
        buf = bytearray()
        while len(buf) < n:
            chunk = self._sock.recv(n - len(buf))
            if not chunk:
                raise BrokerConnectionError(f"Connection to {self.address} closed by the broker")
            buf += chunk
        return bytes(buf)

    def _negotiate(self) -> dict[int, tuple[int, int]]:
        """ApiVersions at our highest version; a broker that does not know it answers in v0 format."""
        version = CLIENT_VERSIONS[Api.API_VERSIONS][1]
        req = make(
            request_class(Api.API_VERSIONS, version),
            client_software_name="shoal-cli",
            client_software_version=_client_version(),
        )
        frame = self._round_trip(req)
        response: Any = None
        try:
            response = decode_response(Api.API_VERSIONS, version, frame)
        except Exception:
            response = None
        if response is None or response.error_code == ErrorCode.unsupported_version:
            try:
                response = decode_response(Api.API_VERSIONS, 0, frame)
            except Exception as exc:
                raise KafkaClientError(f"Malformed ApiVersions response from {self.address}: {exc}") from None
        if response.error_code not in (ErrorCode.none, ErrorCode.unsupported_version):
            raise KafkaApiError(response.error_code, context=f"ApiVersions from {self.address}")
        return {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in response.api_keys}
