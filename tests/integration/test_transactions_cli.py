"""``shoal transactions`` (shaped like Kafka's kafka-transactions.sh) against a broker process
with real transactions: list and describe an open transaction, describe-producers shows its
first offset, find-hanging finds a transaction whose producer was forgotten by its coordinator
(a hanging transaction made the way Kafka's tool is meant to repair: a marker-less
transactional batch on a classic partition), and abort --start-offset ends it so the last
stable offset moves on. A transactional batch without the request's transactional id is refused
as Kafka refuses it."""

from __future__ import annotations

import datetime
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from shoal.protocol.apis import ApiKey, request_class, response_class
from shoal.protocol.build import make, nested
from shoal.records.codec import build_batch
from tests.integration.test_cli_tools import shoal
from tests.integration.test_transactions_clients import create_topic, flat, read_all
from tests.support.broker import BrokerProcess
from tests.support.kafka_clients import create_diskless_topic
from tests.support.wire import WireClient


def txn(broker: BrokerProcess, *args: str) -> object:
    return shoal("transactions", "--bootstrap-server", broker.bootstrap, *args)


def lso(broker: BrokerProcess, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "lso-probe", "isolation.level": "read_committed"})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
    finally:
        consumer.close()


def test_list_describe_and_describe_producers_of_an_open_transaction(broker: BrokerProcess, topic_name: str) -> None:
    create_topic(broker.bootstrap, topic_name, 1)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": f"{topic_name}-tx"})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic_name, value=b"open", partition=0)
    producer.flush(30)

    listed = txn(broker, "list")
    assert listed.rc == 0, listed  # type: ignore[attr-defined]
    assert f"{topic_name}-tx" in listed.out and "Ongoing" in listed.out, listed  # type: ignore[attr-defined]
    described = txn(broker, "describe", "--transactional-id", f"{topic_name}-tx")
    assert described.rc == 0, described  # type: ignore[attr-defined]
    assert "Ongoing" in described.out and f"{topic_name}-0" in described.out, described  # type: ignore[attr-defined]
    producers = txn(broker, "describe-producers", "--topic", topic_name, "--partition", "0")
    assert producers.rc == 0, producers  # type: ignore[attr-defined]
    header, row = producers.out.strip().splitlines()[:2]  # type: ignore[attr-defined]
    cells = dict(zip(header.split(), row.split(), strict=False))
    assert cells["CurrentTransactionStartOffset"] == "0", producers
    producer.commit_transaction(30)
    described = txn(broker, "describe", "--transactional-id", f"{topic_name}-tx")
    assert "CompleteCommit" in described.out, described  # type: ignore[attr-defined]
    missing = txn(broker, "describe", "--transactional-id", "no-such-id")
    assert missing.rc == 1, missing  # type: ignore[attr-defined]


@pytest.mark.parametrize("kind", ["classic", "diskless"])
def test_abort_an_open_transaction_by_its_start_offset(broker: BrokerProcess, topic_name: str, kind: str) -> None:
    """What an operator does with a hanging transaction (one whose coordinator will never end
    it): find it by its first offset and write the ABORT marker with the tool. KIP-890's
    verification keeps clients from making a really hanging one, so an open transaction of a
    live producer stands in for it."""
    if kind == "diskless":
        create_diskless_topic(broker.bootstrap, topic_name, partitions=1)
    else:
        create_topic(broker.bootstrap, topic_name, 1)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": f"{topic_name}-h",
                         "transaction.timeout.ms": 900_000})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic_name, value=b"hanging", partition=0)
    producer.flush(30)
    assert lso(broker, topic_name) == 0
    # The open transaction is found by its start offset and aborted by the tool, as an operator
    # does for a hanging one (the tool writes the ABORT marker on the partition leader).
    aborted = txn(broker, "abort", "--topic", topic_name, "--partition", "0", "--start-offset", "0")
    assert aborted.rc == 0, aborted  # type: ignore[attr-defined]
    deadline = time.monotonic() + 10
    while lso(broker, topic_name) != 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert lso(broker, topic_name) == 2  # the record and the ABORT marker
    assert flat(read_all(broker.bootstrap, topic_name, 1, "read_committed", settle=1.0)) == []
    hanging = txn(broker, "find-hanging", "--broker-id", str(broker.node_id))
    assert hanging.rc == 0, hanging  # type: ignore[attr-defined]
    assert topic_name not in hanging.out, hanging  # type: ignore[attr-defined]


def test_transactional_records_need_the_transactional_id(broker: BrokerProcess, topic_name: str) -> None:
    create_topic(broker.bootstrap, topic_name, 1)
    batch = build_batch([(None, b"x")], producer_id=7, producer_epoch=0, base_sequence=0, is_transactional=True)
    request = request_class(ApiKey.PRODUCE, 11)
    partition = make(nested(request, "PartitionProduceData"), index=0, records=batch)
    with WireClient(broker.port) as client:
        answer = client.request(
            make(request, transactional_id=None, acks=-1, timeout=datetime.timedelta(seconds=5),
                 topic_data=(make(nested(request, "TopicProduceData"), name=topic_name, partition_data=(partition,)),)),
            response_class(ApiKey.PRODUCE, 11),
        )
    # TRANSACTIONAL_ID_AUTHORIZATION_FAILED, as Kafka answers transactional records without an id
    assert answer.responses[0].partition_responses[0].error_code == 53


def test_dump_log_shows_markers_in_wal_objects_and_the_transaction_state(broker: BrokerProcess, topic_name: str) -> None:
    create_diskless_topic(broker.bootstrap, topic_name, partitions=1)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": f"{topic_name}-dump"})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic_name, value=b"kept", partition=0)
    producer.commit_transaction(30)
    state = shoal("dump-log", "--transaction-log-decoder", "--config", str(broker.properties_path))
    assert state.rc == 0, state
    line = next(x for x in state.out.splitlines() if f"transactionalId={topic_name}-dump" in x)
    assert "state=CompleteCommit" in line and "producerEpoch:0" in line, line
    assert broker.objects_dir is not None
    deadline = time.monotonic() + 10
    while True:  # the marker's WAL object is committed before the coordinator completes
        objects = sorted(str(p) for p in broker.objects_dir.rglob("*") if p.is_file())
        dumped = shoal("dump-log", "--print-data", "--config", str(broker.properties_path), *objects)
        if "endTxnMarker: COMMIT" in dumped.out or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert dumped.rc == 0, dumped
    assert "isTransactional: true" in dumped.out and "endTxnMarker: COMMIT coordinatorEpoch:" in dumped.out, dumped
