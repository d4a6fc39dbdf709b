"""A small synchronous Kafka wire client for command-line tools (``shoal groups``).

Tools must send exactly what Kafka's own admin tools send (an OffsetCommit with generation -1
and an empty member id, DescribeGroups to the group's coordinator, ListOffsets to each
partition's leader) and must work against any Kafka-compatible cluster, so this client speaks
the protocol directly with the broker's own kio schemas instead of depending on a client
library. It negotiates versions with ApiVersions, learns brokers and leaders from Metadata,
finds group coordinators with FindCoordinator, and retries what Kafka's admin client retries
(coordinator moved or loading, leader changed) until the operation's deadline.
"""

from __future__ import annotations

import ast
import datetime
import inspect
import socket
import struct
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any, NamedTuple, TypeVar

from kio.schema import errors as kio_errors

from shoal.protocol.apis import decode_response, encode_request, request_class
from shoal.protocol.build import make, nested
from shoal.protocol.errors import ErrorCode

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
DEFAULT_CLIENT_ID = "shoal-admin"

T = TypeVar("T")


class Api:
    """API keys this client sends (Kafka's numbering)."""

    LIST_OFFSETS = 2
    METADATA = 3
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    API_VERSIONS = 18
    DELETE_GROUPS = 42


API_NAMES = {
    Api.LIST_OFFSETS: "ListOffsets",
    Api.METADATA: "Metadata",
    Api.OFFSET_COMMIT: "OffsetCommit",
    Api.OFFSET_FETCH: "OffsetFetch",
    Api.FIND_COORDINATOR: "FindCoordinator",
    Api.DESCRIBE_GROUPS: "DescribeGroups",
    Api.LIST_GROUPS: "ListGroups",
    Api.API_VERSIONS: "ApiVersions",
    Api.DELETE_GROUPS: "DeleteGroups",
}

# The versions this client knows how to build and read. Upper bounds stop before versions that
# address topics by id only (OffsetCommit/OffsetFetch v10) or that kio lacks.
CLIENT_VERSIONS: dict[int, tuple[int, int]] = {
    Api.LIST_OFFSETS: (1, 10),
    Api.METADATA: (1, 12),
    Api.OFFSET_COMMIT: (2, 9),
    Api.OFFSET_FETCH: (2, 9),
    Api.FIND_COORDINATOR: (0, 6),
    Api.DESCRIBE_GROUPS: (0, 6),
    Api.LIST_GROUPS: (0, 5),
    Api.API_VERSIONS: (0, 3),
    Api.DELETE_GROUPS: (0, 2),
}

LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
UNKNOWN_OFFSET = -1

_COORDINATOR_KEY_GROUP = 0
_COORDINATOR_MOVED = frozenset({ErrorCode.not_coordinator, ErrorCode.coordinator_not_available})
_COORDINATOR_BUSY = frozenset({ErrorCode.coordinator_load_in_progress, ErrorCode.unstable_offset_commit})
_LEADER_RETRY = frozenset(
    {
        ErrorCode.not_leader_or_follower,
        ErrorCode.leader_not_available,
        ErrorCode.unknown_topic_or_partition,
        ErrorCode.fenced_leader_epoch,
        ErrorCode.unknown_leader_epoch,
        ErrorCode.offset_not_available,
        ErrorCode.request_timed_out,
        ErrorCode.broker_not_available,
        ErrorCode.replica_not_available,
    }
)


# --------------------------------------------------------------------------------------- errors


@cache
def _error_docs() -> dict[str, str]:
    """Kafka's message for each error code, read from the docstrings kio generated from Errors.java."""
    try:
        tree = ast.parse(inspect.getsource(kio_errors))
    except (OSError, TypeError, SyntaxError):
        return {}
    docs: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == "ErrorCode":
            body = node.body
            for stmt, following in zip(body, body[1:], strict=False):
                if (
                    isinstance(stmt, ast.Assign)
                    and len(stmt.targets) == 1
                    and isinstance(stmt.targets[0], ast.Name)
                    and isinstance(following, ast.Expr)
                    and isinstance(following.value, ast.Constant)
                    and isinstance(following.value.value, str)
                ):
                    docs[stmt.targets[0].id] = " ".join(following.value.value.split())
    return docs


def error_message(code: ErrorCode) -> str:
    """Kafka's human message for an error code (e.g. NON_EMPTY_GROUP: 'The group is not empty.')."""
    return _error_docs().get(code.name, code.name.upper())


def error_name(code: ErrorCode) -> str:
    """Kafka's constant name for an error code, e.g. ``NON_EMPTY_GROUP``."""
    return code.name.upper()


class KafkaClientError(Exception):
    """The operation failed (connection, negotiation, protocol or a broker error); tools print it."""


class BrokerConnectionError(KafkaClientError):
    """The TCP connection failed or broke; the request may be retried on a fresh connection."""


class KafkaApiError(KafkaClientError):
    """A broker answered with an error code that the caller should see."""

    def __init__(self, code: ErrorCode, message: str | None = None, context: str = "") -> None:
        self.code = code
        self.message = message or error_message(code)
        prefix = f"{context}: " if context else ""
        super().__init__(f"{prefix}{error_name(code)}: {self.message}")


class _Retry(Exception):
    """A retriable answer from a coordinator or leader; carries the code for the final error."""

    def __init__(self, code: ErrorCode, message: str | None = None) -> None:
        super().__init__(error_name(code))
        self.code = code
        self.message = message


class UnsupportedApiError(KafkaClientError):
    """The broker does not serve an API (or no version the tool speaks)."""


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


def _check_coordinator_error(code: ErrorCode, message: str | None = None) -> None:
    if code in _COORDINATOR_MOVED or code in _COORDINATOR_BUSY:
        raise _Retry(code, message)


# ------------------------------------------------------------------------------------- addresses


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


# ------------------------------------------------------------------------------------ connection


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

    def request(self, api_key: int, version: int, request_obj: Any) -> Any:
        """Send one kio request object and return the decoded kio response object."""
        cls = type(request_obj)
        if int(cls.__api_key__) != api_key or int(cls.__version__) != version:
            raise ValueError(
                f"{cls.__name__} is API {cls.__api_key__} v{cls.__version__}, not API {api_key} v{version}"
            )
        frame = self._round_trip(request_obj)
        try:
            return decode_response(api_key, version, frame)
        except Exception as exc:  # kio raises assorted errors on bytes it cannot parse
            raise KafkaClientError(
                f"Malformed {API_NAMES.get(api_key, api_key)} v{version} response from {self.address}: {exc}"
            ) from None

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


# --------------------------------------------------------------------------------------- results


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


@dataclass(frozen=True, slots=True)
class ListedOffset:
    """A ListOffsets answer: offset -1 with no error means 'no such offset' (e.g. a future timestamp)."""

    offset: int
    timestamp: int
    error: ErrorCode


@dataclass(frozen=True, slots=True)
class GroupListing:
    group_id: str
    protocol_type: str
    state: str | None  # None when the broker's ListGroups is older than v4


@dataclass(frozen=True, slots=True)
class MemberDescription:
    member_id: str
    group_instance_id: str | None
    client_id: str
    host: str
    metadata: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupDescription:
    group_id: str
    error: ErrorCode
    error_message: str | None
    state: str
    protocol_type: str
    protocol: str
    members: tuple[MemberDescription, ...]
    coordinator: Node


# ---------------------------------------------------------------------------------------- client


class KafkaClient:
    """Routes requests to the right broker: any broker, a group's coordinator or a partition's leader.

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
        self._coordinators: dict[str, Node] = {}

    def close(self) -> None:
        for conn in self._connections.values():
            conn.close()
        self._connections.clear()

    def __enter__(self) -> KafkaClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- plumbing --------------------------------------------------------------------------------
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
            raise _Retry(ErrorCode.leader_not_available, f"broker {node_id} is not in the metadata")
        return self.connection(node.host, node.port)

    def request(self, api_key: int, version: int, request_obj: Any, *, node_id: int | None = None) -> Any:
        """Send a request to one broker (by node id) or to any broker."""
        conn = self.any_connection() if node_id is None else self.node_connection(node_id)
        return conn.request(api_key, version, request_obj)

    def _deadline(self) -> float:
        return time.monotonic() + self.timeout

    def _backoff(self, deadline: float, what: str, last: Exception) -> None:
        if time.monotonic() + self.retry_backoff >= deadline:
            detail = (
                f"{error_name(last.code)}: {last.message or error_message(last.code)}"
                if isinstance(last, _Retry)
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
            except (_Retry, BrokerConnectionError) as exc:
                self._backoff(deadline, what, exc)

    # -- metadata ---------------------------------------------------------------------------------
    def metadata(self, topics: Sequence[str] | None) -> ClusterMetadata:
        """Metadata for some topics (None: all topics, []: brokers only), never creating topics."""
        return self._retrying("Metadata", lambda: self._metadata_once(topics))

    def _metadata_once(self, topics: Sequence[str] | None) -> ClusterMetadata:
        conn = self.any_connection()
        version = conn.version(Api.METADATA)
        cls = request_class(Api.METADATA, version)
        topic_cls = nested(cls, "MetadataRequestTopic")
        request = make(
            cls,
            topics=None if topics is None else tuple(make(topic_cls, name=t, topic_id=None) for t in topics),
            allow_auto_topic_creation=False,
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

    # -- coordinators ----------------------------------------------------------------------------
    def find_coordinator(self, group_id: str, deadline: float | None = None) -> Node:
        """The broker coordinating ``group_id`` (cached until it says it no longer is)."""
        cached = self._coordinators.get(group_id)
        if cached is not None:
            return cached
        node = self._retrying(
            f"FindCoordinator for group '{group_id}'", lambda: self._find_coordinator_once(group_id), deadline
        )
        self._coordinators[group_id] = node
        return node

    def _find_coordinator_once(self, group_id: str) -> Node:
        conn = self.any_connection()
        version = conn.version(Api.FIND_COORDINATOR)
        cls = request_class(Api.FIND_COORDINATOR, version)
        if version >= 4:
            request = make(cls, key_type=_COORDINATOR_KEY_GROUP, coordinator_keys=(group_id,))
            response = conn.request(Api.FIND_COORDINATOR, version, request)
            matches = [c for c in response.coordinators if c.key == group_id]
            if not matches:
                raise KafkaClientError(f"FindCoordinator from {conn.address} did not answer for group '{group_id}'")
            answer = matches[0]
        else:
            request = make(cls, key=group_id, key_type=_COORDINATOR_KEY_GROUP)
            answer = conn.request(Api.FIND_COORDINATOR, version, request)
        code = answer.error_code
        message = getattr(answer, "error_message", None)
        if code in _COORDINATOR_MOVED or code in _COORDINATOR_BUSY:
            raise _Retry(code, message)
        if code != ErrorCode.none:
            raise KafkaApiError(code, message, context=f"FindCoordinator for group '{group_id}'")
        return Node(int(answer.node_id), answer.host, int(answer.port))

    def _with_coordinator(self, group_id: str, what: str, call: Callable[[BrokerConnection, Node], T]) -> T:
        """Run ``call`` against the group's coordinator, following it when it moves."""
        deadline = self._deadline()
        while True:
            try:
                node = self.find_coordinator(group_id, deadline)
                return call(self.connection(node.host, node.port), node)
            except (_Retry, BrokerConnectionError) as exc:
                if not isinstance(exc, _Retry) or exc.code in _COORDINATOR_MOVED:
                    self._coordinators.pop(group_id, None)
                self._backoff(deadline, what, exc)

    # -- groups ------------------------------------------------------------------------------------
    def list_groups(self, states: Sequence[str] = ()) -> list[GroupListing]:
        """ListGroups on every broker (each knows only the groups it coordinates), merged."""
        brokers = self.metadata([]).brokers
        found: dict[str, GroupListing] = {}
        for node in sorted(brokers.values(), key=lambda n: n.node_id):
            what = f"ListGroups on broker {node.node_id} ({node.address})"
            listings = self._retrying(what, lambda node=node, what=what: self._list_groups_once(node, states, what))
            for listing in listings:
                found.setdefault(listing.group_id, listing)
        return list(found.values())

    def _list_groups_once(self, node: Node, states: Sequence[str], what: str) -> list[GroupListing]:
        conn = self.connection(node.host, node.port)
        version = conn.version(Api.LIST_GROUPS)
        request = make(request_class(Api.LIST_GROUPS, version), states_filter=tuple(states), types_filter=())
        response = conn.request(Api.LIST_GROUPS, version, request)
        if response.error_code in _COORDINATOR_BUSY or response.error_code in _COORDINATOR_MOVED:
            raise _Retry(response.error_code)
        if response.error_code != ErrorCode.none:
            raise KafkaApiError(response.error_code, context=what)
        return [GroupListing(g.group_id, g.protocol_type, getattr(g, "group_state", None)) for g in response.groups]

    def describe_group(self, group_id: str) -> GroupDescription:
        """DescribeGroups at the coordinator; a missing group comes back as state Dead or GROUP_ID_NOT_FOUND."""

        def call(conn: BrokerConnection, node: Node) -> GroupDescription:
            version = conn.version(Api.DESCRIBE_GROUPS)
            request = make(
                request_class(Api.DESCRIBE_GROUPS, version), groups=(group_id,), include_authorized_operations=False
            )
            response = conn.request(Api.DESCRIBE_GROUPS, version, request)
            matches = [g for g in response.groups if g.group_id == group_id]
            if not matches:
                raise KafkaClientError(f"DescribeGroups from {conn.address} did not answer for group '{group_id}'")
            g = matches[0]
            message = getattr(g, "error_message", None)
            _check_coordinator_error(g.error_code, message)
            members = tuple(
                MemberDescription(
                    member_id=m.member_id,
                    group_instance_id=getattr(m, "group_instance_id", None),
                    client_id=m.client_id,
                    host=m.client_host,
                    metadata=bytes(m.member_metadata),
                    assignment=bytes(m.member_assignment),
                )
                for m in g.members
            )
            return GroupDescription(
                group_id=g.group_id,
                error=g.error_code,
                error_message=message,
                state=g.group_state,
                protocol_type=g.protocol_type,
                protocol=g.protocol_data,
                members=members,
                coordinator=node,
            )

        return self._with_coordinator(group_id, f"DescribeGroups for group '{group_id}'", call)

    def fetch_offsets(self, group_id: str) -> dict[TopicPartition, int]:
        """The group's committed offsets (OffsetFetch for all topics); partitions without one are left out."""
        what = f"OffsetFetch for group '{group_id}'"

        def call(conn: BrokerConnection, node: Node) -> dict[TopicPartition, int]:
            version = conn.version(Api.OFFSET_FETCH)
            cls = request_class(Api.OFFSET_FETCH, version)
            if version >= 8:
                group = make(nested(cls, "OffsetFetchRequestGroup"), group_id=group_id, member_id=None,
                             member_epoch=-1, topics=None)
                request = make(cls, groups=(group,), require_stable=False)
            else:
                request = make(cls, group_id=group_id, topics=None, require_stable=False)
            response = conn.request(Api.OFFSET_FETCH, version, request)
            if version >= 8:
                matches = [g for g in response.groups if g.group_id == group_id]
                if not matches:
                    raise KafkaClientError(f"OffsetFetch from {conn.address} did not answer for group '{group_id}'")
                group_error, topics = matches[0].error_code, matches[0].topics
            else:
                group_error, topics = getattr(response, "error_code", ErrorCode.none), response.topics
            _check_coordinator_error(group_error)
            if group_error == ErrorCode.group_id_not_found:
                return {}
            if group_error != ErrorCode.none:
                raise KafkaApiError(group_error, context=what)
            offsets: dict[TopicPartition, int] = {}
            for t in topics:
                for p in t.partitions:
                    _check_coordinator_error(p.error_code)
                    if p.error_code == ErrorCode.unknown_topic_or_partition:
                        continue
                    if p.error_code != ErrorCode.none:
                        raise KafkaApiError(p.error_code, context=f"{what}, {t.name}-{p.partition_index}")
                    if p.committed_offset >= 0:
                        offsets[TopicPartition(t.name, int(p.partition_index))] = int(p.committed_offset)
            return offsets

        return self._with_coordinator(group_id, what, call)

    def commit_offsets(self, group_id: str, offsets: Mapping[TopicPartition, int]) -> dict[TopicPartition, ErrorCode]:
        """OffsetCommit as an admin does (generation -1, no member): the coordinator only accepts it
        for a group without active members. Returns each partition's error code."""
        by_topic: dict[str, list[tuple[int, int]]] = {}
        for tp, offset in sorted(offsets.items()):
            by_topic.setdefault(tp.topic, []).append((tp.partition, offset))

        def call(conn: BrokerConnection, node: Node) -> dict[TopicPartition, ErrorCode]:
            version = conn.version(Api.OFFSET_COMMIT)
            cls = request_class(Api.OFFSET_COMMIT, version)
            topic_cls, partition_cls = nested(cls, "OffsetCommitRequestTopic"), nested(cls, "OffsetCommitRequestPartition")
            topics = tuple(
                make(
                    topic_cls,
                    name=topic,
                    partitions=tuple(
                        make(partition_cls, partition_index=p, committed_offset=o, committed_leader_epoch=-1,
                             committed_metadata="")
                        for p, o in parts
                    ),
                )
                for topic, parts in by_topic.items()
            )
            request = make(cls, group_id=group_id, generation_id_or_member_epoch=-1, member_id="",
                           group_instance_id=None, topics=topics)
            response = conn.request(Api.OFFSET_COMMIT, version, request)
            results = {
                TopicPartition(t.name, int(p.partition_index)): p.error_code for t in response.topics for p in t.partitions
            }
            for code in results.values():
                _check_coordinator_error(code)
            return results

        return self._with_coordinator(group_id, f"OffsetCommit for group '{group_id}'", call)

    def delete_group(self, group_id: str) -> ErrorCode:
        """DeleteGroups for one group at its coordinator; returns the group's error code."""

        def call(conn: BrokerConnection, node: Node) -> ErrorCode:
            version = conn.version(Api.DELETE_GROUPS)
            request = make(request_class(Api.DELETE_GROUPS, version), groups_names=(group_id,))
            response = conn.request(Api.DELETE_GROUPS, version, request)
            matches = [r for r in response.results if r.group_id == group_id]
            if not matches:
                raise KafkaClientError(f"DeleteGroups from {conn.address} did not answer for group '{group_id}'")
            _check_coordinator_error(matches[0].error_code)
            return ErrorCode(matches[0].error_code)

        self._coordinators.pop(group_id, None)  # a deleted group may come back elsewhere
        try:
            return self._with_coordinator(group_id, f"DeleteGroups for group '{group_id}'", call)
        finally:
            self._coordinators.pop(group_id, None)

    # -- offsets -----------------------------------------------------------------------------------
    def list_offsets(self, specs: Mapping[TopicPartition, int]) -> dict[TopicPartition, ListedOffset]:
        """ListOffsets at each partition's leader: timestamp -1 latest, -2 earliest, else by time.

        Unknown topics/partitions answer UNKNOWN_TOPIC_OR_PARTITION at once; leader changes are
        retried with fresh metadata until the deadline.
        """
        deadline = self._deadline()
        pending = dict(specs)
        results: dict[TopicPartition, ListedOffset] = {}
        last_codes: dict[TopicPartition, ErrorCode] = {}
        while pending:
            try:
                cluster = self.metadata(sorted({tp.topic for tp in pending}))
                by_leader: dict[int, dict[TopicPartition, int]] = {}
                for tp, ts in pending.items():
                    topic = cluster.topics.get(tp.topic)
                    info = topic.partitions.get(tp.partition) if topic is not None else None
                    if topic is None or info is None or topic.error == ErrorCode.unknown_topic_or_partition:
                        results[tp] = ListedOffset(UNKNOWN_OFFSET, -1, ErrorCode.unknown_topic_or_partition)
                    elif info.leader < 0 or info.leader not in cluster.brokers:
                        last_codes[tp] = ErrorCode.leader_not_available
                    else:
                        by_leader.setdefault(info.leader, {})[tp] = ts
                for leader, part in by_leader.items():
                    for tp, answer in self._list_offsets_at(leader, part).items():
                        if answer.error in _LEADER_RETRY:
                            last_codes[tp] = answer.error
                        else:
                            results[tp] = answer
            except BrokerConnectionError:
                pass
            pending = {tp: ts for tp, ts in pending.items() if tp not in results}
            if pending and time.monotonic() + self.retry_backoff >= deadline:
                for tp in pending:
                    code = last_codes.get(tp, ErrorCode.request_timed_out)
                    results[tp] = ListedOffset(UNKNOWN_OFFSET, -1, code)
                break
            if pending:
                time.sleep(self.retry_backoff)
        return results

    def _list_offsets_at(self, leader: int, specs: Mapping[TopicPartition, int]) -> dict[TopicPartition, ListedOffset]:
        try:
            conn = self.node_connection(leader)
        except _Retry as exc:
            return {tp: ListedOffset(UNKNOWN_OFFSET, -1, exc.code) for tp in specs}
        version = conn.version(Api.LIST_OFFSETS)
        cls = request_class(Api.LIST_OFFSETS, version)
        topic_cls, partition_cls = nested(cls, "ListOffsetsTopic"), nested(cls, "ListOffsetsPartition")
        by_topic: dict[str, list[tuple[int, int]]] = {}
        for tp, ts in sorted(specs.items()):
            by_topic.setdefault(tp.topic, []).append((tp.partition, ts))
        request = make(
            cls,
            replica_id=-1,
            isolation_level=0,  # READ_UNCOMMITTED, as Kafka's consumer-groups tool asks
            topics=tuple(
                make(
                    topic_cls,
                    name=topic,
                    partitions=tuple(
                        make(partition_cls, partition_index=p, current_leader_epoch=-1, timestamp=ts) for p, ts in parts
                    ),
                )
                for topic, parts in by_topic.items()
            ),
            timeout=datetime.timedelta(seconds=self.timeout),
        )
        response = conn.request(Api.LIST_OFFSETS, version, request)
        answers: dict[TopicPartition, ListedOffset] = {}
        for t in response.topics:
            for p in t.partitions:
                tp = TopicPartition(t.name, int(p.partition_index))
                if tp in specs:
                    answers[tp] = ListedOffset(int(p.offset), int(p.timestamp), p.error_code)
        for tp in specs:
            answers.setdefault(tp, ListedOffset(UNKNOWN_OFFSET, -1, ErrorCode.unknown_topic_or_partition))
        return answers


def all_partitions(cluster: ClusterMetadata, topics: Iterable[str]) -> list[TopicPartition]:
    """Every partition of the given topics that the metadata knows, sorted."""
    out: list[TopicPartition] = []
    for name in topics:
        info = cluster.topics.get(name)
        if info is not None:
            out.extend(TopicPartition(name, p) for p in info.partitions)
    return sorted(out)
