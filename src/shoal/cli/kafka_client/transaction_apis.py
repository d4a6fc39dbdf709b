"""Transaction calls, as Kafka's admin client sends them for ``kafka-transactions.sh``.

ListTransactions goes to every broker (each lists what its transaction coordinator holds),
DescribeTransactions to the transactional id's coordinator (FindCoordinator key type 1),
DescribeProducers to each partition's leader or to one named broker, and an abort is a
WriteTxnMarkers ABORT to the partition's leader (Kafka's ``AbortTransactionHandler``). Errors are
retried or final as Kafka's handlers decide.

No ``from __future__ import annotations`` here: kio reads field types from the dataclass fields,
and ``_DescribeTransactionsResponse`` below must carry real types, not strings.
"""

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import ClassVar

from kio.schema.describe_transactions.v0.response import TopicData
from kio.schema.errors import ErrorCode as KioErrorCode
from kio.schema.response_header.v1.header import ResponseHeader
from kio.serial import entity_reader
from kio.static.constants import EntityType
from kio.static.primitive import i16, i32, i32Timedelta, i64

from shoal.cli.kafka_client.cluster import Node, TopicPartition
from shoal.cli.kafka_client.connection import Api, BrokerConnection, negotiate_version
from shoal.cli.kafka_client.errors import (
    BrokerConnectionError,
    KafkaApiError,
    KafkaClientError,
    RetriableAnswer,
    UnsupportedApiError,
)
from shoal.cli.kafka_client.router import BrokerRouter
from shoal.protocol.apis import request_class
from shoal.protocol.build import make, nested
from shoal.protocol.errors import ErrorCode

WRITE_TXN_MARKERS = 27
DESCRIBE_PRODUCERS = 61
DESCRIBE_TRANSACTIONS = 65
LIST_TRANSACTIONS = 66
#: The versions this client builds and reads (not in ``CLIENT_VERSIONS``: negotiated here).
TXN_VERSIONS: dict[int, tuple[int, int, str]] = {
    WRITE_TXN_MARKERS: (1, 2, "WriteTxnMarkers"),
    DESCRIBE_PRODUCERS: (0, 0, "DescribeProducers"),
    DESCRIBE_TRANSACTIONS: (0, 0, "DescribeTransactions"),
    LIST_TRANSACTIONS: (0, 2, "ListTransactions"),
}
_COORDINATOR_KEY_TRANSACTION = 1
_COORDINATOR_MOVED = frozenset({ErrorCode.not_coordinator, ErrorCode.coordinator_not_available})
#: Kafka's AbortTransactionHandler finds the leader again on these.
_LEADER_MOVED = frozenset(
    {
        ErrorCode.not_leader_or_follower,
        ErrorCode.replica_not_available,
        ErrorCode.broker_not_available,
        ErrorCode.unknown_topic_or_partition,
    }
)
#: ``kafka-transactions.sh`` prints the admin client's TransactionState, which maps unknown names to Unknown.
KNOWN_STATES = frozenset(
    {"Ongoing", "PrepareAbort", "PrepareCommit", "CompleteAbort", "CompleteCommit", "Empty", "PrepareEpochFence"}
)


def state_name(wire: str) -> str:
    return wire if wire in KNOWN_STATES else "Unknown"


@dataclass(frozen=True, slots=True)
class TransactionListing:
    transactional_id: str
    producer_id: int
    state: str


@dataclass(frozen=True, slots=True)
class TransactionDescription:
    coordinator_id: int
    transactional_id: str
    producer_id: int
    producer_epoch: int
    state: str
    timeout_ms: int
    #: None when no transaction is running (the broker's -1).
    start_time_ms: int | None
    partitions: tuple[TopicPartition, ...]


@dataclass(frozen=True, slots=True)
class ProducerState:
    """One active producer of a partition (Kafka's admin ``ProducerState``; -1: none)."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: int
    current_txn_start_offset: int


# DescribeTransactions v0 as kio generates it, but with the start time as a plain int64: kio reads
# ``datetime_i64`` fields as datetimes and refuses -1, which is what brokers send when no
# transaction is running (Empty, CompleteCommit...).
@dataclass(frozen=True, slots=True, kw_only=True)
class _TransactionState:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(DESCRIBE_TRANSACTIONS)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    error_code: KioErrorCode = field(metadata={"kafka_type": "error_code"})
    transactional_id: str = field(metadata={"kafka_type": "string"})
    transaction_state: str = field(metadata={"kafka_type": "string"})
    transaction_timeout: i32 = field(metadata={"kafka_type": "int32"})
    transaction_start_time: i64 = field(metadata={"kafka_type": "int64"})
    producer_id: i64 = field(metadata={"kafka_type": "int64"})
    producer_epoch: i16 = field(metadata={"kafka_type": "int16"})
    topics: tuple[TopicData, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class _DescribeTransactionsResponse:
    __type__: ClassVar = EntityType.response
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(DESCRIBE_TRANSACTIONS)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    throttle_time: i32Timedelta = field(metadata={"kafka_type": "timedelta_i32"})
    transaction_states: tuple[_TransactionState, ...]


_read_describe_transactions = entity_reader(_DescribeTransactionsResponse)
_read_response_header = entity_reader(ResponseHeader)


def decode_describe_transactions(frame: bytes) -> _DescribeTransactionsResponse:
    """A DescribeTransactions v0 response frame (without its size), start times as int64."""
    _, header_size = _read_response_header(frame, 0)
    body, _ = _read_describe_transactions(frame, header_size)
    return body


def _version(conn: BrokerConnection, api_key: int) -> int:
    lo, hi, name = TXN_VERSIONS[api_key]
    return negotiate_version(conn, api_key, (lo, hi), name)


class TransactionApis(BrokerRouter):
    """The transaction operations of KafkaClient."""

    # -- ListTransactions --------------------------------------------------------------------------
    def list_transactions(
        self,
        *,
        states: Sequence[str] = (),
        producer_ids: Sequence[int] = (),
        duration_ms: int = -1,
        transactional_id_pattern: str | None = None,
    ) -> dict[int, list[TransactionListing]]:
        """ListTransactions on every broker, by broker id (Kafka's ``allByBrokerId``). A broker whose
        coordinator is loading is asked again; any other error fails the whole listing."""
        brokers = self.metadata([]).brokers
        found: dict[int, list[TransactionListing]] = {}
        for node in sorted(brokers.values(), key=lambda n: n.node_id):
            what = f"ListTransactions on broker {node.node_id} ({node.address})"
            found[node.node_id] = self._retrying(
                what,
                lambda node=node, what=what: self._list_transactions_once(
                    node, states, producer_ids, duration_ms, transactional_id_pattern, what
                ),
            )
        return found

    def _list_transactions_once(
        self,
        node: Node,
        states: Sequence[str],
        producer_ids: Sequence[int],
        duration_ms: int,
        pattern: str | None,
        what: str,
    ) -> list[TransactionListing]:
        conn = self.connection(node.host, node.port)
        version = _version(conn, LIST_TRANSACTIONS)
        if duration_ms >= 0 and version < 1:
            raise UnsupportedApiError(
                "Duration filter can be set only when using API version 1 or higher. If client is connected to "
                "an older broker, do not specify duration filter or set duration filter to -1."
            )
        if pattern and version < 2:
            raise UnsupportedApiError(
                "Transactional ID pattern filter can be set only when using API version 2 or higher. If client "
                "is connected to an older broker, do not specify the pattern filter."
            )
        request = make(
            request_class(LIST_TRANSACTIONS, version),
            state_filters=tuple(states),
            producer_id_filters=tuple(producer_ids),
            duration_filter=duration_ms,
            transactional_id_pattern=pattern,
        )
        response = conn.request(LIST_TRANSACTIONS, version, request)
        if response.error_code == ErrorCode.coordinator_load_in_progress:
            raise RetriableAnswer(response.error_code)
        if response.error_code == ErrorCode.coordinator_not_available:
            raise KafkaApiError(
                response.error_code,
                f"ListTransactions request sent to broker {node.node_id} failed because the coordinator is "
                "shutting down",
            )
        if response.error_code != ErrorCode.none:
            raise KafkaApiError(response.error_code, context=what)
        return [
            TransactionListing(t.transactional_id, int(t.producer_id), state_name(t.transaction_state))
            for t in response.transaction_states
        ]

    # -- DescribeTransactions ----------------------------------------------------------------------
    def find_transaction_coordinator(self, transactional_id: str, deadline: float | None = None) -> Node:
        """The broker coordinating ``transactional_id`` (FindCoordinator with key type 1)."""
        return self._retrying(
            f"FindCoordinator for transactional id '{transactional_id}'",
            lambda: self._find_txn_coordinator_once(transactional_id),
            deadline,
        )

    def _find_txn_coordinator_once(self, transactional_id: str) -> Node:
        conn = self.any_connection()
        version = conn.version(Api.FIND_COORDINATOR)
        if version < 1:
            raise UnsupportedApiError(f"The broker at {conn.address} cannot find transaction coordinators")
        cls = request_class(Api.FIND_COORDINATOR, version)
        if version >= 4:
            request = make(cls, key_type=_COORDINATOR_KEY_TRANSACTION, coordinator_keys=(transactional_id,))
            response = conn.request(Api.FIND_COORDINATOR, version, request)
            matches = [c for c in response.coordinators if c.key == transactional_id]
            if not matches:
                raise KafkaClientError(
                    f"FindCoordinator from {conn.address} did not answer for transactional id '{transactional_id}'"
                )
            answer = matches[0]
        else:
            request = make(cls, key=transactional_id, key_type=_COORDINATOR_KEY_TRANSACTION)
            answer = conn.request(Api.FIND_COORDINATOR, version, request)
        code, message = answer.error_code, getattr(answer, "error_message", None)
        if code in _COORDINATOR_MOVED or code == ErrorCode.coordinator_load_in_progress:
            raise RetriableAnswer(code, message)
        if code != ErrorCode.none:
            raise KafkaApiError(code, message, context=f"FindCoordinator for transactional id '{transactional_id}'")
        return Node(int(answer.node_id), answer.host, int(answer.port))

    def describe_transaction(self, transactional_id: str) -> TransactionDescription:
        """DescribeTransactions at the id's coordinator, following it when it moves; an unknown id
        raises KafkaApiError(TRANSACTIONAL_ID_NOT_FOUND), as Kafka's handler fails it."""
        deadline = self._deadline()
        what = f"DescribeTransactions for transactional id '{transactional_id}'"
        while True:
            try:
                node = self.find_transaction_coordinator(transactional_id, deadline)
                return self._describe_once(node, transactional_id)
            except (RetriableAnswer, BrokerConnectionError) as exc:
                self._backoff(deadline, what, exc)

    def _describe_once(self, node: Node, transactional_id: str) -> TransactionDescription:
        conn = self.connection(node.host, node.port)
        version = _version(conn, DESCRIBE_TRANSACTIONS)
        request = make(request_class(DESCRIBE_TRANSACTIONS, version), transactional_ids=(transactional_id,))
        response = decode_describe_transactions(_round_trip(conn, request))
        matches = [s for s in response.transaction_states if s.transactional_id == transactional_id]
        if not matches:
            raise KafkaClientError(
                f"DescribeTransactions from {conn.address} did not answer for transactional id '{transactional_id}'"
            )
        s = matches[0]
        code = ErrorCode(s.error_code)
        if code in _COORDINATOR_MOVED or code == ErrorCode.coordinator_load_in_progress:
            raise RetriableAnswer(code)
        if code == ErrorCode.transactional_id_not_found:
            raise KafkaApiError(code, f"TransactionalId `{transactional_id}` not found")
        if code != ErrorCode.none:
            raise KafkaApiError(code, context=f"DescribeTransactions for transactional id '{transactional_id}'")
        start = int(s.transaction_start_time)
        return TransactionDescription(
            coordinator_id=node.node_id,
            transactional_id=s.transactional_id,
            producer_id=int(s.producer_id),
            producer_epoch=int(s.producer_epoch),
            state=state_name(s.transaction_state),
            timeout_ms=int(s.transaction_timeout),
            start_time_ms=start if start >= 0 else None,
            partitions=tuple(TopicPartition(t.topic, int(p)) for t in s.topics for p in t.partitions),
        )

    # -- DescribeProducers -------------------------------------------------------------------------
    def describe_producers(
        self, partitions: Sequence[TopicPartition], broker_id: int | None = None
    ) -> dict[TopicPartition, tuple[ProducerState, ...]]:
        """DescribeProducers at each partition's leader, or at ``broker_id`` (any replica answers).
        NOT_LEADER_OR_FOLLOWER is retried with the new leader, but final for a named broker; any
        other partition error raises KafkaApiError, as Kafka's ``DescribeProducersHandler`` fails it."""
        pending = list(dict.fromkeys(partitions))
        results: dict[TopicPartition, tuple[ProducerState, ...]] = {}

        def attempt() -> dict[TopicPartition, tuple[ProducerState, ...]]:
            targets = {broker_id: pending} if broker_id is not None else self._leaders(pending)
            retry: RetriableAnswer | None = None
            for node_id, tps in targets.items():
                for tp, (code, message, producers) in self._describe_producers_at(node_id, tps).items():
                    if code == ErrorCode.none:
                        results[tp] = producers
                    elif code == ErrorCode.not_leader_or_follower and broker_id is None:
                        retry = RetriableAnswer(code, message)
                    else:
                        where = f"broker {broker_id}" if broker_id is not None else "leader"
                        raise KafkaApiError(code, message, context=f"Describing producers of {tp} on {where}")
            pending[:] = [tp for tp in pending if tp not in results]
            if retry is not None:
                raise retry
            return results

        return self._retrying("DescribeProducers", attempt)

    def _describe_producers_at(
        self, node_id: int, partitions: Sequence[TopicPartition]
    ) -> dict[TopicPartition, tuple[ErrorCode, str | None, tuple[ProducerState, ...]]]:
        conn = self.node_connection(node_id)
        version = _version(conn, DESCRIBE_PRODUCERS)
        cls = request_class(DESCRIBE_PRODUCERS, version)
        by_topic: dict[str, list[int]] = {}
        for tp in partitions:
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        topic_cls = nested(cls, "TopicRequest")
        request = make(
            cls, topics=tuple(make(topic_cls, name=t, partition_indexes=tuple(ps)) for t, ps in by_topic.items())
        )
        response = conn.request(DESCRIBE_PRODUCERS, version, request)
        answers = {}
        for t in response.topics:
            for p in t.partitions:
                producers = tuple(
                    ProducerState(int(s.producer_id), int(s.producer_epoch), int(s.last_sequence),
                                  int(s.last_timestamp), int(s.coordinator_epoch), int(s.current_txn_start_offset))
                    for s in p.active_producers
                )
                answers[TopicPartition(t.name, int(p.partition_index))] = (ErrorCode(p.error_code), p.error_message,
                                                                          producers)
        missing = [tp for tp in partitions if tp not in answers]
        if missing:
            raise KafkaClientError(f"DescribeProducers from {conn.address} did not answer for {missing[0]}")
        return answers

    # -- abort -------------------------------------------------------------------------------------
    def abort_transaction(
        self, partition: TopicPartition, producer_id: int, producer_epoch: int, coordinator_epoch: int
    ) -> None:
        """Write an ABORT marker for the producer's transaction on the partition's leader (Kafka's
        ``Admin.abortTransaction``): a WriteTxnMarkers request as a transaction coordinator at
        ``coordinator_epoch`` would send it, transaction version 0. Leader changes are retried."""

        def attempt() -> None:
            (leader,) = self._leaders([partition])
            conn = self.node_connection(leader)
            version = _version(conn, WRITE_TXN_MARKERS)
            cls = request_class(WRITE_TXN_MARKERS, version)
            topic = make(nested(cls, "WritableTxnMarkerTopic"), name=partition.topic,
                         partition_indexes=(partition.partition,))
            marker = make(nested(cls, "WritableTxnMarker"), producer_id=producer_id, producer_epoch=producer_epoch,
                          transaction_result=False, topics=(topic,), coordinator_epoch=coordinator_epoch,
                          transaction_version=0)
            response = conn.request(WRITE_TXN_MARKERS, version, make(cls, markers=(marker,)))
            codes = [
                ErrorCode(p.error_code)
                for m in response.markers if int(m.producer_id) == producer_id
                for t in m.topics if t.name == partition.topic
                for p in t.partitions if int(p.partition_index) == partition.partition
            ]
            if len(codes) != 1:
                raise KafkaClientError(
                    f"WriteTxnMarkers response from {conn.address} did not answer exactly once for {partition}"
                )
            if codes[0] in _LEADER_MOVED:
                raise RetriableAnswer(codes[0])
            if codes[0] != ErrorCode.none:
                raise KafkaApiError(codes[0], context="WriteTxnMarkers")

        self._retrying(f"Aborting the transaction of producer {producer_id} on {partition}", attempt)

    # -- where partitions live ---------------------------------------------------------------------
    def _leaders(self, partitions: Sequence[TopicPartition]) -> dict[int, list[TopicPartition]]:
        """Partitions by leader; an unknown partition is final, a missing leader retried."""
        cluster = self.metadata(sorted({tp.topic for tp in partitions}))
        by_leader: dict[int, list[TopicPartition]] = {}
        for tp in partitions:
            topic = cluster.topics.get(tp.topic)
            info = topic.partitions.get(tp.partition) if topic is not None else None
            if topic is None or info is None:
                raise KafkaApiError(ErrorCode.unknown_topic_or_partition, context=f"Finding the leader of {tp}")
            if info.leader < 0 or info.leader not in cluster.brokers:
                raise RetriableAnswer(ErrorCode.leader_not_available)
            by_leader.setdefault(info.leader, []).append(tp)
        return by_leader

    def partition_replicas(self, topics: Sequence[str] | None) -> dict[TopicPartition, tuple[int, ...]]:
        """Each partition's replicas (Metadata; None: every topic, internal ones included), which
        ``find-hanging --broker-id`` needs and the router's metadata does not keep."""
        return self._retrying("Metadata", lambda: self._replicas_once(topics))

    def _replicas_once(self, topics: Sequence[str] | None) -> dict[TopicPartition, tuple[int, ...]]:
        conn = self.any_connection()
        version = conn.version(Api.METADATA)
        cls = request_class(Api.METADATA, version)
        request = make(
            cls,
            topics=None if topics is None else tuple(make(nested(cls, "MetadataRequestTopic"), name=t, topic_id=None)
                                                     for t in topics),
            allow_auto_topic_creation=False,
            include_cluster_authorized_operations=False,
            include_topic_authorized_operations=False,
        )
        response = conn.request(Api.METADATA, version, request)
        replicas: dict[TopicPartition, tuple[int, ...]] = {}
        for t in response.topics:
            if t.name is None:
                continue
            if t.error_code in (ErrorCode.leader_not_available, ErrorCode.coordinator_load_in_progress):
                raise RetriableAnswer(t.error_code)
            if t.error_code != ErrorCode.none:
                raise KafkaApiError(t.error_code, context=f"Describing topic '{t.name}'")
            for p in t.partitions:
                replicas[TopicPartition(t.name, int(p.partition_index))] = tuple(int(r) for r in p.replica_nodes)
        return replicas


def _round_trip(conn: BrokerConnection, request: object) -> bytes:
    """Send a request and return the raw response frame, for the answers decoded here."""
    return conn._round_trip(request)  # BrokerConnection.request would decode it with kio's schema

