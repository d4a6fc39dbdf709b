"""``shoal transactions`` (Kafka's kafka-transactions.sh) without a broker.

The command runs against a fake cluster that answers the kio request objects the tool sends, after
a round trip through the wire encoding (so every request is one a broker can decode), and records
them, so the tests also pin the wire fields the broker side has to match: ListTransactions to every
broker, FindCoordinator key type 1 then DescribeTransactions at the coordinator, DescribeProducers
at the leader or a named broker, WriteTxnMarkers ABORT at the leader.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from shoal.cli import transactions
from shoal.cli.kafka_client import CLIENT_VERSIONS, KafkaClient, TopicPartition
from shoal.cli.kafka_client.transaction_apis import (
    TXN_VERSIONS,
    ProducerState,
    TransactionDescription,
    decode_describe_transactions,
)
from shoal.cli.main import app
from shoal.cli.transaction_format import (
    HANGING_HEADERS,
    OpenTransaction,
    abort_spec_at,
    hanging_transactions,
    open_transactions,
    pretty_table,
)
from shoal.protocol.apis import RequestHeader, encode_response, response_class
from shoal.protocol.build import make, nested
from shoal.protocol.errors import ErrorCode
from tests.support.fake_cli_wire import (
    PORT_BASE,
    FakeConnection,
    Sent,
    metadata_response,
    round_trip_request,
)

NOW = 1_700_000_000_000
MINUTE = 60_000
TP = TopicPartition
FIND_COORDINATOR = 10


@dataclass
class Txn:
    coordinator: int
    producer_id: int
    state: str = "Ongoing"
    epoch: int = 0
    timeout_ms: int = 60_000
    start_ms: int = -1
    partitions: tuple[TopicPartition, ...] = ()


@dataclass
class FakeCluster:
    """Brokers 1 and 2; each test sets the transactions and producer states."""

    topics: dict[str, dict[int, list[int]]] = field(default_factory=lambda: {"t": {0: [1, 2], 1: [2, 1]}, "u": {0: [2]}})
    brokers: tuple[int, ...] = (1, 2)
    txns: dict[str, Txn] = field(default_factory=dict)
    #: (broker, partition) -> producers that broker's replica knows.
    producers: dict[tuple[int, TopicPartition], list[ProducerState]] = field(default_factory=dict)
    list_errors: dict[int, list[ErrorCode]] = field(default_factory=dict)
    marker_errors: list[ErrorCode] = field(default_factory=list)
    missing_apis: set[int] = field(default_factory=set)
    sent: list[Sent] = field(default_factory=list)

    def of(self, api_key: int) -> list[Sent]:
        return [s for s in self.sent if s.api_key == api_key]

    def leader(self, tp: TopicPartition) -> int:
        return self.topics[tp.topic][tp.partition][0]

    def handle(self, node: int, api_key: int, version: int, req: Any) -> Any:
        self.sent.append(Sent(node, api_key, version, req))
        return getattr(self, f"_api_{api_key}")(response_class(api_key, version), req, node)

    def _api_3(self, cls: type, req: Any, node: int) -> Any:  # Metadata
        return metadata_response(cls, req, self.topics, dict.fromkeys(self.brokers), controller=1)

    def _api_10(self, cls: type, req: Any, node: int) -> Any:  # FindCoordinator
        assert req.key_type == 1
        coordinator_cls = nested(cls, "Coordinator")
        answers = []
        for key in req.coordinator_keys:
            txn = self.txns.get(key)
            coordinator = txn.coordinator if txn is not None else 1
            answers.append(make(coordinator_cls, key=key, node_id=coordinator, host="h", port=PORT_BASE + coordinator,
                                error_code=ErrorCode.none, error_message=None))
        return make(cls, throttle_time=datetime.timedelta(0), coordinators=tuple(answers))

    def _api_27(self, cls: type, req: Any, node: int) -> Any:  # WriteTxnMarkers
        marker_cls, topic_cls = nested(cls, "WritableTxnMarkerResult"), nested(cls, "WritableTxnMarkerTopicResult")
        part_cls = nested(cls, "WritableTxnMarkerPartitionResult")
        markers = []
        for m in req.markers:
            topics = []
            for t in m.topics:
                codes = []
                for p in t.partition_indexes:
                    if self.marker_errors:
                        codes.append((p, self.marker_errors.pop(0)))
                    elif self.leader(TP(t.name, p)) != node:
                        codes.append((p, ErrorCode.not_leader_or_follower))
                    else:
                        codes.append((p, ErrorCode.none))
                topics.append(make(topic_cls, name=t.name, partitions=tuple(
                    make(part_cls, partition_index=p, error_code=c) for p, c in codes)))
            markers.append(make(marker_cls, producer_id=m.producer_id, topics=tuple(topics)))
        return make(cls, markers=tuple(markers))

    def _api_61(self, cls: type, req: Any, node: int) -> Any:  # DescribeProducers
        topic_cls, part_cls, state_cls = nested(cls, "TopicResponse"), nested(cls, "PartitionResponse"), nested(cls, "ProducerState")
        topics = []
        for t in req.topics:
            partitions = []
            for p in t.partition_indexes:
                tp = TP(t.name, p)
                replicas = self.topics.get(t.name, {}).get(p)
                code = (ErrorCode.unknown_topic_or_partition if replicas is None
                        else ErrorCode.none if node in replicas else ErrorCode.not_leader_or_follower)
                states = self.producers.get((node, tp), []) if code == ErrorCode.none else []
                partitions.append(make(
                    part_cls, partition_index=p, error_code=code, error_message=None,
                    active_producers=tuple(
                        make(state_cls, producer_id=s.producer_id, producer_epoch=s.producer_epoch,
                             last_sequence=s.last_sequence, last_timestamp=s.last_timestamp,
                             coordinator_epoch=s.coordinator_epoch, current_txn_start_offset=s.current_txn_start_offset)
                        for s in states
                    ),
                ))
            topics.append(make(topic_cls, name=t.name, partitions=tuple(partitions)))
        return make(cls, throttle_time=datetime.timedelta(0), topics=tuple(topics))

    def _api_66(self, cls: type, req: Any, node: int) -> Any:  # ListTransactions
        state_cls = nested(cls, "TransactionState")
        errors = self.list_errors.get(node)
        if errors:
            return make(cls, throttle_time=datetime.timedelta(0), error_code=errors.pop(0), unknown_state_filters=(),
                        transaction_states=())
        listed = [
            make(state_cls, transactional_id=name, producer_id=txn.producer_id, transaction_state=txn.state)
            for name, txn in self.txns.items()
            if txn.coordinator == node and (not req.producer_id_filters or txn.producer_id in req.producer_id_filters)
        ]
        return make(cls, throttle_time=datetime.timedelta(0), error_code=ErrorCode.none, unknown_state_filters=(),
                    transaction_states=tuple(listed))

    def describe_transactions_frame(self, node: int, req: Any) -> bytes:
        """API 65, encoded with start time -1 where no transaction runs (kio's schema cannot say -1)."""
        from shoal.cli.kafka_client import transaction_apis as apis

        self.sent.append(Sent(node, 65, 0, req))
        states = []
        for name in req.transactional_ids:
            txn = self.txns.get(name)
            by_topic: dict[str, list[int]] = {}
            for tp in txn.partitions if txn else ():
                by_topic.setdefault(tp.topic, []).append(tp.partition)
            topic_cls = nested(response_class(65, 0), "TopicData")
            states.append(apis._TransactionState(
                error_code=ErrorCode.none if txn is not None else ErrorCode.transactional_id_not_found,
                transactional_id=name,
                transaction_state=txn.state if txn else "",
                transaction_timeout=txn.timeout_ms if txn else 0,
                transaction_start_time=txn.start_ms if txn else -1,
                producer_id=txn.producer_id if txn else -1,
                producer_epoch=txn.epoch if txn else -1,
                topics=tuple(topic_cls(topic=t, partitions=tuple(ps)) for t, ps in by_topic.items()),
            ))
        response = apis._DescribeTransactionsResponse(throttle_time=datetime.timedelta(0), transaction_states=tuple(states))
        return encode_response(RequestHeader(65, 0, 7, None), response)[4:]


class TxnConnection(FakeConnection):
    """Also answers DescribeTransactions, which the tool decodes from the raw frame."""

    def __init__(self, cluster: FakeCluster, node: int) -> None:
        versions = {**CLIENT_VERSIONS, **{k: (lo, hi) for k, (lo, hi, _) in TXN_VERSIONS.items()}}
        super().__init__(cluster, node, transactions.CLIENT_ID, versions)
        self.cluster: FakeCluster = cluster

    def _round_trip(self, request_obj: Any) -> bytes:
        assert int(type(request_obj).__api_key__) == 65
        return self.cluster.describe_transactions_frame(self.node, round_trip_request(request_obj, self.client_id))


@pytest.fixture
def cluster(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeCluster]:
    fake = FakeCluster()

    def connection(self: KafkaClient, host: str, port: int) -> TxnConnection:
        return TxnConnection(fake, port - PORT_BASE)

    monkeypatch.setattr(KafkaClient, "connection", connection)
    monkeypatch.setattr(transactions, "now_ms", lambda: NOW)
    yield fake


def run(*args: str, code: int = 0, before: tuple[str, ...] = ()) -> tuple[str, str]:
    result = CliRunner().invoke(
        app, ["transactions", *before, *args[:1], "--bootstrap-server", f"h:{PORT_BASE + 1}", *args[1:]]
    )
    assert result.exit_code == code, f"exit {result.exit_code}\n--- stdout\n{result.stdout}\n--- stderr\n{result.stderr}"
    return result.stdout, result.stderr


def producer(pid: int, start: int = -1, *, epoch: int = 0, coordinator_epoch: int = -1, last: int = NOW) -> ProducerState:
    return ProducerState(pid, epoch, 4, last, coordinator_epoch, start)


# ----------------------------------------------------------------------------------------- table


def test_tables_are_padded_and_tab_separated_as_kafkas() -> None:
    assert pretty_table(("A", "Long"), [["xyz", "1"], ["", "22"]]) == "A  \tLong\t\nxyz\t1   \t\n   \t22  \t"
    assert pretty_table(("Only",), []) == "Only\t"


# ------------------------------------------------------------------------------------------ list


def test_list_asks_every_broker_and_names_each_coordinator(cluster: FakeCluster) -> None:
    cluster.txns = {
        "pay": Txn(2, 1001, "Ongoing"),
        "ship": Txn(1, 1002, "CompleteCommit"),
        "odd": Txn(1, 1003, "SomethingNew"),
    }
    out, _ = run("list")
    assert out == (
        "TransactionalId\tCoordinator\tProducerId\tTransactionState\t\n"
        "ship           \t1          \t1002      \tCompleteCommit  \t\n"
        "odd            \t1          \t1003      \tUnknown         \t\n"
        "pay            \t2          \t1001      \tOngoing         \t\n"
    )
    assert sorted(s.node for s in cluster.of(66)) == [1, 2]
    request = cluster.of(66)[0].request
    assert (request.state_filters, request.producer_id_filters, request.duration_filter) == ((), (), -1)
    assert request.transactional_id_pattern is None


def test_list_filters_and_options_before_the_sub_command(cluster: FakeCluster) -> None:
    result = CliRunner().invoke(
        app,
        ["transactions", "--bootstrap-server", f"h:{PORT_BASE + 2}", "list", "--duration-filter", "5000",
         "--transactional-id-pattern", "pay.*"],
    )
    assert result.exit_code == 0, result.stderr
    assert result.stdout == "TransactionalId\tCoordinator\tProducerId\tTransactionState\t\n"
    assert cluster.sent[0].node == 2  # the bootstrap given before the sub-command
    request = cluster.of(66)[0].request
    assert (request.duration_filter, request.transactional_id_pattern) == (5000, "pay.*")


def test_list_retries_a_loading_coordinator_and_fails_on_other_errors(cluster: FakeCluster) -> None:
    cluster.txns = {"pay": Txn(1, 7)}
    cluster.list_errors = {1: [ErrorCode.coordinator_load_in_progress]}
    out, _ = run("list")
    assert "pay" in out and len(cluster.of(66)) == 3
    cluster.list_errors = {2: [ErrorCode.coordinator_not_available]}
    _, err = run("list", code=1)
    assert err.startswith("Failed to list transactions: COORDINATOR_NOT_AVAILABLE: ListTransactions request sent to "
                          "broker 2 failed because the coordinator is shutting down")


def test_a_broker_without_the_api_is_named(cluster: FakeCluster) -> None:
    cluster.missing_apis = {66}
    _, err = run("list", code=1)
    assert err == "Failed to list transactions: The node does not support ListTransactions\n"


# -------------------------------------------------------------------------------------- describe


def test_describe_finds_the_coordinator_then_describes(cluster: FakeCluster) -> None:
    cluster.txns = {"pay": Txn(2, 1001, "Ongoing", epoch=3, timeout_ms=60_000, start_ms=NOW - 1500,
                               partitions=(TP("t", 0), TP("u", 0)))}
    out, _ = run("describe", "--transactional-id", "pay")
    header, row = out.splitlines()
    assert header.split("\t")[:-1] == [
        "CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch", "TransactionState",
        "TransactionTimeoutMs", "CurrentTransactionStartTimeMs", "TransactionDurationMs", "TopicPartitions",
    ]
    assert [c.strip() for c in row.split("\t")[:-1]] == [
        "2", "pay", "1001", "3", "Ongoing", "60000", str(NOW - 1500), "1500", "t-0,u-0",
    ]
    (find,) = cluster.of(FIND_COORDINATOR)
    assert (find.request.key_type, find.request.coordinator_keys) == (1, ("pay",))
    (described,) = cluster.of(65)
    assert described.node == 2 and described.request.transactional_ids == ("pay",)


def test_describe_without_a_running_transaction_prints_none(cluster: FakeCluster) -> None:
    cluster.txns = {"idle": Txn(1, 5, "Empty", start_ms=-1)}
    out, _ = run("describe", "--transactional-id", "idle")
    assert [c.strip() for c in out.splitlines()[1].split("\t")[:-1]] == [
        "1", "idle", "5", "0", "Empty", "60000", "None", "None", "",
    ]


def test_describe_an_unknown_transactional_id_fails(cluster: FakeCluster) -> None:
    _, err = run("describe", "--transactional-id", "gone", code=1)
    assert err == (
        "Failed to describe transaction state of transactional-id `gone`: TRANSACTIONAL_ID_NOT_FOUND: "
        "TransactionalId `gone` not found\n"
    )


def test_describe_transactions_decodes_a_start_time_of_minus_one() -> None:
    """kio's own DescribeTransactions schema refuses -1; what a broker sends for an Empty id is read here.
    A broker encoding with kio's schema sends -1 as the datetime 1 ms before the epoch."""
    cls = response_class(65, 0)
    state_cls = nested(cls, "TransactionState")
    before_epoch = datetime.datetime.fromtimestamp(-0.001, datetime.UTC)
    response = cls(throttle_time=datetime.timedelta(0), transaction_states=(state_cls(
        error_code=ErrorCode.none, transactional_id="x", transaction_state="Empty",
        transaction_timeout=datetime.timedelta(seconds=60), transaction_start_time=before_epoch,
        producer_id=9, producer_epoch=1, topics=()),))
    decoded = decode_describe_transactions(encode_response(RequestHeader(65, 0, 1, None), response)[4:])
    (state,) = decoded.transaction_states
    assert (state.transaction_start_time, state.transaction_timeout, state.producer_id) == (-1, 60_000, 9)


# ---------------------------------------------------------------------------- describe-producers


def test_describe_producers_at_the_leader(cluster: FakeCluster) -> None:
    cluster.producers = {
        (1, TP("t", 0)): [producer(5), producer(7, start=42, epoch=2, coordinator_epoch=3, last=NOW - 10)],
        (2, TP("t", 0)): [producer(99)],
    }
    out, _ = run("describe-producers", "--topic", "t", "--partition", "0")
    assert out == (
        "ProducerId\tProducerEpoch\tLatestCoordinatorEpoch\tLastSequence\tLastTimestamp\tCurrentTransactionStartOffset\t\n"
        f"5         \t0            \t-1                    \t4           \t{NOW}\tNone                         \t\n"
        f"7         \t2            \t3                     \t4           \t{NOW - 10}\t42                           \t\n"
    )
    (sent,) = cluster.of(61)
    assert sent.node == 1
    assert [(t.name, t.partition_indexes) for t in sent.request.topics] == [("t", (0,))]


def test_describe_producers_on_a_named_replica(cluster: FakeCluster) -> None:
    cluster.producers = {(2, TP("t", 0)): [producer(99)]}
    out, _ = run("describe-producers", "--topic", "t", "--partition", "0", "--broker-id", "2")
    assert out.splitlines()[1].startswith("99")
    assert cluster.of(61)[0].node == 2
    # A broker without a replica: NOT_LEADER_OR_FOLLOWER is final when the broker was named.
    _, err = run("describe-producers", "--topic", "u", "--partition", "0", "--broker-id", "1", code=1)
    assert err.startswith("Failed to describe producers for partition u-0 on broker 1: Describing producers of u-0 "
                          "on broker 1: NOT_LEADER_OR_FOLLOWER")


def test_describe_producers_of_an_unknown_partition(cluster: FakeCluster) -> None:
    _, err = run("describe-producers", "--topic", "nope", "--partition", "0", code=1)
    assert err.startswith("Failed to describe producers for partition nope-0 on leader: ")
    assert "UNKNOWN_TOPIC_OR_PARTITION" in err


# ----------------------------------------------------------------------------------------- abort


def test_abort_by_start_offset_writes_an_abort_marker_at_the_leader(cluster: FakeCluster) -> None:
    cluster.producers = {(2, TP("t", 1)): [producer(5), producer(7, start=42, epoch=2, coordinator_epoch=-1)]}
    out, err = run("abort", "--topic", "t", "--partition", "1", "--start-offset", "42")
    assert (out, err) == ("", "")
    (written,) = cluster.of(27)
    assert written.node == 2 and written.version == 2
    (marker,) = written.request.markers
    assert (marker.producer_id, marker.producer_epoch, marker.transaction_result) == (7, 2, False)
    assert (marker.coordinator_epoch, marker.transaction_version) == (0, 0)  # -1 becomes 0, as Kafka's tool
    assert [(t.name, t.partition_indexes) for t in marker.topics] == [("t", (1,))]


def test_abort_without_a_transaction_at_the_offset(cluster: FakeCluster) -> None:
    cluster.producers = {(2, TP("t", 1)): [producer(7, start=42)]}
    _, err = run("abort", "--topic", "t", "--partition", "1", "--start-offset", "41", code=1)
    assert err == "Could not find any open transactions starting at offset 41 on partition t-1\n"
    assert cluster.of(27) == []


def test_abort_with_explicit_producer_and_its_errors(cluster: FakeCluster) -> None:
    run("abort", "--topic", "t", "--partition", "0", "--producer-id", "9", "--producer-epoch", "4",
        "--coordinator-epoch", "6")
    (marker,) = cluster.of(27)[0].request.markers
    assert (marker.producer_id, marker.producer_epoch, marker.coordinator_epoch) == (9, 4, 6)
    assert cluster.of(61) == []  # no DescribeProducers in the explicit form

    # A moved leader is retried; a fenced coordinator epoch is final.
    cluster.marker_errors = [ErrorCode.not_leader_or_follower, ErrorCode.transaction_coordinator_fenced]
    _, err = run("abort", "--topic", "t", "--partition", "0", "--producer-id", "9", "--producer-epoch", "4",
                 "--coordinator-epoch", "6", code=1)
    assert err.startswith(
        "Failed to abort transaction AbortTransactionSpec(topicPartition=t-0, producerId=9, producerEpoch=4, "
        "coordinatorEpoch=6): WriteTxnMarkers: TRANSACTION_COORDINATOR_FENCED"
    )
    assert len(cluster.of(27)) == 3


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ((), "The transaction to abort must be identified either with --start-offset (for brokers on 3.0 or above) "
             "or with --producer-id, --producer-epoch, and --coordinator-epoch (for older brokers)"),
        (("--producer-id", "9"), "Missing required argument --producer-epoch"),
        (("--producer-id", "9", "--producer-epoch", "1"), "Missing required argument --coordinator-epoch"),
    ],
)
def test_abort_usage_errors(cluster: FakeCluster, extra: tuple[str, ...], message: str) -> None:
    _, err = run("abort", "--topic", "t", "--partition", "0", *extra, code=2)
    assert err == message + "\n"
    assert cluster.sent == []


def test_abort_spec_takes_the_producer_whose_transaction_starts_there() -> None:
    tp = TP("t", 0)
    states = [producer(1), producer(2, start=10, coordinator_epoch=5), producer(3, start=20)]
    spec = abort_spec_at(tp, states, 10)
    assert spec is not None and (spec.producer_id, spec.coordinator_epoch) == (2, 5)
    assert abort_spec_at(tp, states, -1) is None  # -1 means "no transaction", never a start offset


# ---------------------------------------------------------------------------------- find-hanging


def test_find_hanging_reports_what_no_coordinator_will_end(cluster: FakeCluster) -> None:
    old = NOW - 20 * MINUTE
    cluster.producers = {
        # Broker 1 leads t-0 and follows t-1; u-0 has no replica on it.
        (1, TP("t", 0)): [
            producer(1, start=10, last=old),  # no transactional id lists it: hanging
            producer(2, start=11, last=old),  # its coordinator's transaction includes t-0: not hanging
            producer(3, start=12, last=NOW - MINUTE),  # recent: not a candidate
            producer(4, last=old),  # no open transaction
        ],
        (1, TP("t", 1)): [producer(5, start=30, last=old, epoch=1, coordinator_epoch=2)],  # ongoing elsewhere
        (1, TP("u", 0)): [producer(6, start=1, last=old)],
    }
    cluster.txns = {"two": Txn(2, 2, partitions=(TP("t", 0),)), "five": Txn(1, 5, partitions=(TP("u", 0),))}
    out, _ = run("find-hanging", "--broker-id", "1")
    lines = out.splitlines()
    assert lines[0].split("\t")[:-1] == list(HANGING_HEADERS)
    rows = [[c.strip() for c in line.split("\t")[:-1]] for line in lines[1:]]
    assert rows == [
        ["t", "0", "1", "0", "-1", "10", str(old), "20"],
        ["t", "1", "5", "1", "2", "30", str(old), "20"],
    ]
    (producers_sent,) = cluster.of(61)
    assert producers_sent.node == 1  # every partition with a replica on broker 1, asked there
    assert sorted((t.name, p) for t in producers_sent.request.topics for p in t.partition_indexes) == [("t", 0), ("t", 1)]
    (listed,) = {tuple(s.request.producer_id_filters) for s in cluster.of(66)}
    assert listed == (1, 2, 5)
    assert sorted(s.request.transactional_ids for s in cluster.of(65)) == [("five",), ("two",)]


def test_find_hanging_with_nothing_open_asks_nothing_more(cluster: FakeCluster) -> None:
    cluster.producers = {(1, TP("t", 0)): [producer(4)]}
    out, _ = run("find-hanging", "--topic", "t", "--partition", "0")
    assert out == pretty_table(HANGING_HEADERS, []) + "\n"
    assert cluster.of(66) == [] and cluster.of(65) == []
    assert cluster.of(61)[0].node == 1  # no --broker-id: the leader answers


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((), "The `find-hanging` command requires either --topic or --broker-id to limit the scope of the search"),
        (("--broker-id", "1", "--partition", "0"), "The --partition argument requires --topic to be provided"),
    ],
)
def test_find_hanging_usage_errors(cluster: FakeCluster, args: tuple[str, ...], message: str) -> None:
    _, err = run("find-hanging", *args, code=2)
    assert err == message + "\n"


def test_hanging_filter_as_kafkas() -> None:
    tp = TP("t", 0)
    a, b, c = OpenTransaction(tp, producer(1, 0)), OpenTransaction(tp, producer(2, 0)), OpenTransaction(tp, producer(3, 0))
    described = TransactionDescription(1, "b", 2, 0, "Ongoing", 1, 0, (tp,))
    elsewhere = TransactionDescription(1, "c", 3, 0, "Ongoing", 1, 0, (TP("t", 1),))
    assert hanging_transactions([a, b, c], {2: "b", 3: "c"}, {"b": described, "c": elsewhere}) == [a, c]
    assert hanging_transactions([b], {2: "b"}, {"b": None}) == [b]  # the id is not found any more
    # Only transactions idle longer than the timeout are candidates.
    states = {tp: [producer(1, 5, last=NOW - 61_000), producer(2, 5, last=NOW - 59_000), producer(3, last=0)]}
    assert [t.producer.producer_id for t in open_transactions(states, NOW, 60_000)] == [1]


# -------------------------------------------------------------------------------- command config


def test_command_config_sets_the_client(cluster: FakeCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[dict[str, object]] = []
    real = transactions.open_client

    def capture(settings: dict[str, object]) -> KafkaClient:
        seen.append(settings)
        return real(settings)

    monkeypatch.setattr(transactions, "open_client", capture)
    config = tmp_path / "admin.properties"
    config.write_text("client.id=ops\ndefault.api.timeout.ms=1500\nsecurity.protocol=PLAINTEXT\nbootstrap.servers=x:1\n")
    run("list", "--command-config", str(config))
    assert seen[-1] == {"bootstrap": f"h:{PORT_BASE + 1}", "client_id": "ops", "timeout": 1.5}
    run("list", before=("--command-config", str(config)))
    assert seen[-1]["client_id"] == "ops"

    config.write_text("sasl.mechanism=PLAIN\n")
    _, err = run("list", "--command-config", str(config), code=2)
    assert "sasl.mechanism is not supported by this tool" in err
    config.write_text("security.protocol=SSL\n")
    _, err = run("list", "--command-config", str(config), code=2)
    assert "PLAINTEXT only" in err
    _, err = run("list", "--command-config", str(tmp_path / "missing"), code=1)
    assert err.startswith("Failed to load admin client properties")
