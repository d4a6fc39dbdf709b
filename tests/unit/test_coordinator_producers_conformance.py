"""``BatchCoordinator.describe_producers`` (what DescribeProducers answers for a diskless partition),
run unchanged on every backend (SQLite and PostgreSQL, the ``store_url`` fixture): each producer the
partition knows from its remembered batches and its transaction row, as Kafka's ProducerStateEntry.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest

from shoal.coordinator.api import (
    CreateTopicAndPartitionsRequest,
    DeleteRecordsRequest,
    ProducerStateEntry,
)
from shoal.protocol.errors import ErrorCode
from shoal.records.types import TimestampType
from tests.unit.test_coordinator_conformance import TOPIC, Coordinator, FakeClock, open_coordinator, tp
from tests.unit.test_coordinator_txn_conformance import OK, data, marker, one, plain, put


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def coord(store_url: str, clock: FakeClock) -> Iterator[Coordinator]:
    c = open_coordinator(store_url, clock)
    c.create_topic_and_partitions({CreateTopicAndPartitionsRequest(TOPIC, "orders", 2)})
    yield c
    c.close()


def producers(coord: Coordinator, partition: int = 0) -> list[ProducerStateEntry] | None:
    return coord.describe_producers(TOPIC, partition)


def test_unknown_and_empty_partitions(coord: Coordinator) -> None:
    assert producers(coord, partition=7) is None
    assert producers(coord) == []
    assert one(coord, plain()) == (OK, 0)  # a producer that is not idempotent is never remembered
    assert producers(coord) == []


def test_idempotent_producers_last_batch(coord: Coordinator, clock: FakeClock) -> None:
    assert one(coord, data(5, 0, 0, records=3, txn=False, ts=1500)) == (OK, 0)
    assert one(coord, data(5, 0, 3, records=2, txn=False, ts=1600)) == (OK, 3)
    # LogAppendTime: the batch's time is when the coordinator appended it.
    appended = dataclasses.replace(data(2, 4, 0, txn=False, ts=1), message_timestamp_type=TimestampType.LOG_APPEND_TIME)
    assert one(coord, appended) == (OK, 5)
    assert producers(coord) == [
        ProducerStateEntry(2, 4, last_sequence=0, last_timestamp=clock.now, coordinator_epoch=-1,
                           current_txn_start_offset=-1),
        ProducerStateEntry(5, 0, last_sequence=4, last_timestamp=1600, coordinator_epoch=-1,
                           current_txn_start_offset=-1),
    ]
    assert producers(coord, partition=1) == []
    # The remembered batch deleted (DeleteRecords, retention): its timestamp is no longer known, the
    # producer is (Kafka keeps producer state beyond the log start too).
    coord.delete_records([DeleteRecordsRequest(tp(0), 5)])
    assert producers(coord) == [
        ProducerStateEntry(2, 4, 0, clock.now, -1, -1),
        ProducerStateEntry(5, 0, 4, -1, -1, -1),
    ]


def test_open_transaction_then_markers(coord: Coordinator) -> None:
    assert one(coord, plain()) == (OK, 0)
    assert one(coord, data(9, 1, 0, records=2, ts=2100)) == (OK, 1)  # producer 9's transaction starts at 1
    assert one(coord, data(3, 0, 0, ts=2200)) == (OK, 3)  # producer 3's at 3
    assert one(coord, data(9, 1, 2, ts=2300)) == (OK, 4)  # same transaction: still from 1
    assert producers(coord) == [
        ProducerStateEntry(3, 0, last_sequence=0, last_timestamp=2200, coordinator_epoch=-1,
                           current_txn_start_offset=3),
        ProducerStateEntry(9, 1, last_sequence=2, last_timestamp=2300, coordinator_epoch=-1,
                           current_txn_start_offset=1),
    ]
    # A COMMIT ends 9's transaction and leaves its coordinator epoch; its batches stay remembered.
    assert one(coord, marker(9, 1, commit=True, coordinator_epoch=5)) == (OK, 5)
    # An ABORT at a bumped epoch (a fencing abort) forgets 3's batches: no last sequence any more.
    assert one(coord, marker(3, 1, commit=False, coordinator_epoch=2)) == (OK, 6)
    # A producer known only through a marker (nothing ongoing here).
    assert one(coord, marker(7, 0, commit=False, coordinator_epoch=4)) == (OK, 7)
    assert producers(coord) == [
        ProducerStateEntry(3, 1, last_sequence=-1, last_timestamp=-1, coordinator_epoch=2,
                           current_txn_start_offset=-1),
        ProducerStateEntry(7, 0, -1, -1, 4, -1),
        ProducerStateEntry(9, 1, last_sequence=2, last_timestamp=2300, coordinator_epoch=5,
                           current_txn_start_offset=-1),
    ]
    # A new transaction of 9 opens at its first batch; the coordinator epoch of the last marker stays.
    put(coord, data(9, 1, 3, ts=2400), data(9, 1, 4, ts=2500))
    (nine,) = [p for p in producers(coord) or [] if p.producer_id == 9]
    assert nine == ProducerStateEntry(9, 1, 4, 2500, 5, 8)


def test_producers_survive_reopen(store_url: str, clock: FakeClock) -> None:
    first = open_coordinator(store_url, clock)
    first.create_topic_and_partitions({CreateTopicAndPartitionsRequest(TOPIC, "orders", 1)})
    put(first, data(1, 0, 0, txn=False, ts=900), data(2, 3, 0, ts=950), marker(1, 0, commit=True, coordinator_epoch=6))
    first.close()
    second = open_coordinator(store_url, clock)
    try:
        assert second.describe_producers(TOPIC, 0) == [
            ProducerStateEntry(1, 0, 0, 900, 6, -1),
            ProducerStateEntry(2, 3, 0, 950, -1, 1),
        ]
    finally:
        second.close()


def test_one_commit_of_many_producers_on_many_partitions(coord: Coordinator) -> None:
    """More producers and partitions in one object than one lookup query takes (500 keys): each
    producer's state is found, kept and checked, a retry is a duplicate, a gap is refused."""
    n = 700
    first = put(coord, *(data(1000 + i, 0, 0, txn=False, partition=i % 2) for i in range(n)))
    assert [r.errors for r in first] == [ErrorCode.none] * n
    # Every producer's next batch, retries of first batches, an unknown partition and a sequence gap.
    again = put(
        coord,
        *(data(1000 + i, 0, 1, txn=False, partition=i % 2) for i in range(n)),
        *(data(1000 + i, 0, 0, txn=False, partition=i % 2) for i in range(0, n, 7)),
        data(1, 0, 0, txn=False, partition=9),
        data(1000, 0, 5, txn=False),  # after its sequence 1 in this object: a gap
    )
    assert [r.errors for r in again[:n]] == [ErrorCode.none] * n
    assert [r.assigned_base_offset for r in again[n : n + 100]] == [first[i].assigned_base_offset for i in range(0, n, 7)]
    assert again[-2].errors == ErrorCode.unknown_topic_or_partition
    assert again[-1].errors == ErrorCode.out_of_order_sequence_number
    assert len(producers(coord, 0)) == n // 2 and len(producers(coord, 1)) == n // 2
