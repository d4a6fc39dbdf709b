"""Transactions in the Batch Coordinator (KIP-1163's diskless partitions without leaders): markers,
ongoing and aborted transactions, the last stable offset and READ_COMMITTED reads, run unchanged
on every backend (SQLite and PostgreSQL, the ``store_url`` fixture).

The rules are Kafka's ProducerAppendInfo for transaction versions 0 and 1, as
``classic/producer_append.py`` applies them to classic logs (``coordinator/transactions.py``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest

from shoal.coordinator.api import (
    CommitBatchRequest,
    CommitBatchResponse,
    CreateTopicAndPartitionsRequest,
    DeleteRecordsRequest,
    DeleteTieredBatchesRequest,
    EnforceRetentionRequest,
    FindBatchRequest,
    FindBatchResponse,
    ListOffsetsRequest,
    ListOffsetsTimestamp,
    TxnControl,
)
from shoal.coordinator.compaction_types import BatchMove
from shoal.protocol.errors import ErrorCode
from shoal.records.types import TimestampType
from tests.unit.test_coordinator_conformance import TOPIC, Coordinator, FakeClock, open_coordinator, tp

OK = ErrorCode.none


def data(
    pid: int, epoch: int, seq: int, records: int = 1, *, txn: bool = True, partition: int = 0, ts: int = 1000
) -> CommitBatchRequest:
    """A data batch of producer ``pid`` (transactional unless ``txn=False``)."""
    return CommitBatchRequest(
        request_id=0,
        topic_id_partition=tp(partition),
        byte_offset=0,
        size=100,
        base_offset=0,
        last_offset=records - 1,
        batch_max_timestamp=ts,
        message_timestamp_type=TimestampType.CREATE_TIME,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        last_sequence=seq + records - 1,
        is_transactional=txn,
    )


def plain(records: int = 1, partition: int = 0, ts: int = 1000) -> CommitBatchRequest:
    """A batch of a producer that is neither idempotent nor transactional."""
    return dataclasses.replace(
        data(-1, -1, -1, records, txn=False, partition=partition, ts=ts), last_sequence=-1
    )


def marker(
    pid: int, epoch: int, commit: bool, coordinator_epoch: int = 0, partition: int = 0
) -> CommitBatchRequest:
    """A transaction marker as the broker builds it: one control record, sequences -1."""
    return CommitBatchRequest(
        request_id=0,
        topic_id_partition=tp(partition),
        byte_offset=0,
        size=80,
        base_offset=0,
        last_offset=0,
        batch_max_timestamp=2000,
        message_timestamp_type=TimestampType.CREATE_TIME,
        producer_id=pid,
        producer_epoch=epoch,
        is_transactional=True,
        control=TxnControl(commit=commit, coordinator_epoch=coordinator_epoch),
    )


_keys = iter(range(10**9))


def put(coord: Coordinator, *batches: CommitBatchRequest) -> list[CommitBatchResponse]:
    """Commit batches laid out back to back in one object."""
    laid_out, pos = [], 0
    for b in batches:
        laid_out.append(dataclasses.replace(b, byte_offset=pos))
        pos += b.size
    return coord.commit_file(f"txn-obj-{next(_keys)}", 1, pos, laid_out)


def one(coord: Coordinator, batch: CommitBatchRequest) -> tuple[ErrorCode, int]:
    (r,) = put(coord, batch)
    return r.errors, r.assigned_base_offset


def find(
    coord: Coordinator, offset: int, *, committed: bool = True, partition: int = 0, max_bytes: int = 10**6
) -> FindBatchResponse:
    return coord.find_batches([FindBatchRequest(tp(partition), offset, max_bytes, committed)], 10**6)[0]


def bases(r: FindBatchResponse) -> list[int]:
    return [b.metadata.base_offset for b in r.batches]


def state(coord: Coordinator, partition: int = 0) -> tuple[int, list[tuple[int, int, int]]] | None:
    return coord.transaction_state(TOPIC, partition)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def coord(store_url: str, clock: FakeClock) -> Iterator[Coordinator]:
    c = open_coordinator(store_url, clock)
    c.create_topic_and_partitions({CreateTopicAndPartitionsRequest(TOPIC, "orders", 2)})
    yield c
    c.close()


def test_commit_and_abort_bookkeeping_and_lso(coord: Coordinator) -> None:
    assert one(coord, plain()) == (OK, 0)
    assert state(coord) == (1, [])
    assert one(coord, data(1, 0, 0, records=2)) == (OK, 1)  # producer 1's transaction starts at 1
    assert state(coord) == (1, [])
    assert one(coord, data(2, 0, 0, records=3)) == (OK, 3)  # producer 2's at 3
    assert one(coord, data(1, 0, 2)) == (OK, 6)  # same transaction: it still starts at 1
    assert state(coord) == (1, [])
    assert one(coord, marker(1, 0, commit=True)) == (OK, 7)
    assert state(coord) == (3, [])  # producer 2's transaction is the earliest ongoing one now
    assert one(coord, marker(2, 0, commit=False)) == (OK, 8)
    assert state(coord) == (9, [(2, 3, 8)])
    assert coord.get_log_info(TOPIC, 0) == (0, 9, 4 * 100 + 2 * 80)
    # The answer of every read carries the LSO; batches carry their flags.
    r = find(coord, 0, committed=False)
    assert (r.high_watermark, r.last_stable_offset, r.aborted_transactions) == (9, 9, [])
    flags = [(b.metadata.base_offset, b.metadata.is_transactional, b.metadata.is_control) for b in r.batches]
    assert flags == [
        (0, False, False),
        (1, True, False),
        (3, True, False),
        (6, True, False),
        (7, True, True),
        (8, True, True),
    ]
    assert r.batches[4].metadata.producer_id == 1 and r.batches[4].metadata.base_sequence == -1
    # Other partitions are untouched; unknown ones know no LSO.
    assert state(coord, partition=1) == (0, [])
    assert find(coord, 0, partition=1).last_stable_offset == 0
    assert find(coord, 0, partition=7).last_stable_offset == -1
    assert coord.transaction_state(TOPIC, 7) is None


def test_aborted_transactions_overlapping_a_read(coord: Coordinator) -> None:
    put(coord, data(1, 0, 0, records=2), marker(1, 0, commit=False))  # 0-1, abort at 2
    put(coord, plain(records=2))  # 3-4
    put(coord, data(2, 0, 0), data(3, 0, 0), marker(2, 0, commit=False))  # 5, 6, abort 2 at 7
    put(coord, data(3, 0, 1), marker(3, 0, commit=True))  # 8, commit 3 at 9
    put(coord, data(4, 0, 0, records=3), marker(4, 0, commit=False))  # 10-12, abort at 13
    assert state(coord) == (14, [(1, 0, 2), (2, 5, 7), (4, 10, 13)])

    def aborted(offset: int, max_bytes: int = 10**6) -> tuple[list[int], list[tuple[int, int]]]:
        r = find(coord, offset, max_bytes=max_bytes)
        assert r.errors == OK and r.last_stable_offset == 14
        return bases(r), r.aborted_transactions

    assert aborted(0) == ([0, 2, 3, 5, 6, 7, 8, 9, 10, 13], [(1, 0), (2, 5), (4, 10)])
    # Overlapping [fetch offset, end of what is returned): one batch at a time.
    assert aborted(0, max_bytes=1) == ([0], [(1, 0)])
    assert aborted(2, max_bytes=1) == ([2], [(1, 0)])  # the marker itself is in the transaction
    assert aborted(3, max_bytes=1) == ([3], [])
    assert aborted(4, max_bytes=1) == ([3], [])  # the batch holding 4 is 3-4: [4, 5)
    assert aborted(5, max_bytes=1) == ([5], [(2, 5)])
    assert aborted(6, max_bytes=1) == ([6], [(2, 5)])  # 2's transaction spans 5-7
    assert aborted(8, max_bytes=1) == ([8], [])
    assert aborted(11, max_bytes=1) == ([10], [(4, 10)])
    assert aborted(14) == ([], [])
    # READ_UNCOMMITTED reads list none.
    assert find(coord, 0, committed=False).aborted_transactions == []


def test_aborted_transactions_nested_in_a_longer_one(coord: Coordinator) -> None:
    """An aborted transaction ending inside a longer one still open: the search must not stop at
    the first (its LSO is the longer one's start), as Kafka's collectAbortedTxns does not."""
    put(coord, data(5, 0, 0, records=2))  # 0-1: producer 5's long transaction
    put(coord, data(6, 0, 0, records=2), marker(6, 0, commit=False))  # 2-3, abort at 4
    put(coord, data(5, 0, 2), marker(5, 0, commit=False))  # 5, abort at 6
    assert state(coord) == (7, [(6, 2, 4), (5, 0, 6)])
    r = find(coord, 2, max_bytes=1)
    assert (bases(r), r.aborted_transactions) == ([2], [(6, 2), (5, 0)])
    r = find(coord, 5, max_bytes=1)
    assert (bases(r), r.aborted_transactions) == ([5], [(5, 0)])


def test_read_committed_find_stops_at_the_lso(coord: Coordinator) -> None:
    put(coord, plain(records=2), data(1, 0, 0, records=2), plain())  # 0-1, txn 2-3, 4
    r = find(coord, 0)
    assert (r.errors, bases(r), r.last_stable_offset, r.high_watermark) == (OK, [0], 2, 5)
    for offset in (2, 3, 4, 5):  # at or past the LSO, up to the high watermark: nothing, no error
        r = find(coord, offset)
        assert (r.errors, r.batches, r.last_stable_offset) == (OK, [], 2), offset
    assert find(coord, 6).errors == ErrorCode.offset_out_of_range
    assert bases(find(coord, 0, committed=False)) == [0, 2, 4]
    assert bases(find(coord, 3, committed=False)) == [2, 4]
    put(coord, marker(1, 0, commit=True))  # 5
    r = find(coord, 0)
    assert (bases(r), r.last_stable_offset, r.aborted_transactions) == ([0, 2, 4, 5], 6, [])
    # Several partitions in one call: each answers its own LSO.
    put(coord, data(2, 0, 0, partition=1))
    r0, r1 = coord.find_batches(
        [FindBatchRequest(tp(0), 0, 10**6, True), FindBatchRequest(tp(1), 0, 10**6, True)], 10**6
    )
    assert (bases(r0), r0.last_stable_offset, bases(r1), r1.last_stable_offset) == ([0, 2, 4, 5], 6, [], 0)


def test_list_offsets_read_committed(coord: Coordinator) -> None:
    put(coord, plain(ts=100), data(1, 0, 0, ts=300), plain(ts=200))  # 0 @100, txn 1 @300, 2 @200

    def lookup(ts: int, committed: bool) -> tuple[int, int]:
        r = coord.list_offsets([ListOffsetsRequest(tp(0), ts, committed)])[0]
        assert r.errors == OK
        return r.timestamp, r.offset

    assert lookup(ListOffsetsTimestamp.LATEST, committed=True) == (-1, 1)
    assert lookup(ListOffsetsTimestamp.LATEST, committed=False) == (-1, 3)
    assert lookup(ListOffsetsTimestamp.EARLIEST, committed=True) == (-1, 0)
    assert lookup(ListOffsetsTimestamp.EARLIEST_LOCAL, committed=True) == (-1, 0)
    assert lookup(50, committed=True) == (100, 0)
    assert lookup(150, committed=True) == (-1, -1)  # offset 1 is not stable yet
    assert lookup(150, committed=False) == (300, 1)
    assert lookup(ListOffsetsTimestamp.MAX_TIMESTAMP, committed=True) == (-1, -1)
    assert lookup(ListOffsetsTimestamp.MAX_TIMESTAMP, committed=False) == (300, 1)
    put(coord, marker(1, 0, commit=True))
    assert lookup(ListOffsetsTimestamp.LATEST, committed=True) == (-1, 4)
    assert lookup(150, committed=True) == (300, 1)


def test_plain_batch_inside_a_transaction_is_invalid_txn_state(coord: Coordinator) -> None:
    assert one(coord, data(1, 0, 0)) == (OK, 0)
    bad, good = put(coord, data(1, 0, 1, txn=False), data(1, 0, 1))
    assert (bad.errors, bad.assigned_base_offset) == (ErrorCode.invalid_txn_state, -1)
    assert (good.errors, good.assigned_base_offset) == (OK, 1)  # the refused batch took nothing
    assert one(coord, marker(1, 0, commit=True)) == (OK, 2)
    assert one(coord, data(1, 0, 2, txn=False)) == (OK, 3)  # idempotent again, sequences go on
    assert state(coord) == (4, [])


def test_transactional_batch_of_another_epoch(coord: Coordinator) -> None:
    assert one(coord, data(1, 3, 0)) == (OK, 0)
    assert one(coord, data(1, 2, 1))[0] == ErrorCode.invalid_producer_epoch  # older
    assert one(coord, data(1, 4, 0))[0] == ErrorCode.invalid_producer_epoch  # newer, transaction open
    assert state(coord) == (0, [])
    assert one(coord, data(1, 3, 1)) == (OK, 1)
    # The newer instance's abort (coordinator-bumped epoch) ends the old transaction.
    assert one(coord, marker(1, 4, commit=False)) == (OK, 2)
    assert state(coord) == (3, [(1, 0, 2)])
    assert one(coord, data(1, 4, 0)) == (OK, 3)


def test_old_coordinator_epoch_is_fenced(coord: Coordinator) -> None:
    put(coord, data(1, 0, 0), marker(1, 0, commit=True, coordinator_epoch=5))  # 0, 1
    assert one(coord, data(1, 0, 1)) == (OK, 2)
    assert one(coord, marker(1, 0, commit=False, coordinator_epoch=4)) == (
        ErrorCode.transaction_coordinator_fenced,
        -1,
    )
    assert state(coord) == (2, [])  # still ongoing
    assert one(coord, marker(1, 0, commit=True, coordinator_epoch=5)) == (OK, 3)  # the same epoch is fine
    assert (
        one(coord, marker(1, 0, commit=True, coordinator_epoch=4))[0]
        == ErrorCode.transaction_coordinator_fenced
    )
    assert one(coord, marker(1, 0, commit=True, coordinator_epoch=9)) == (OK, 4)
    assert (
        one(coord, marker(1, 0, commit=True, coordinator_epoch=5))[0]
        == ErrorCode.transaction_coordinator_fenced
    )
    # Coordinator epochs are per producer: another producer's marker is not fenced by it.
    assert one(coord, marker(2, 0, commit=True, coordinator_epoch=1)) == (OK, 5)


def test_marker_of_an_old_producer_epoch(coord: Coordinator) -> None:
    put(coord, data(1, 3, 0), marker(1, 3, commit=True, coordinator_epoch=2))  # 0, 1
    assert one(coord, data(1, 3, 1)) == (OK, 2)
    assert one(coord, marker(1, 2, commit=False, coordinator_epoch=2)) == (
        ErrorCode.invalid_producer_epoch,
        -1,
    )
    # Kafka checks the producer epoch first: stale on both counts answers INVALID_PRODUCER_EPOCH.
    assert one(coord, marker(1, 2, commit=False, coordinator_epoch=1))[0] == ErrorCode.invalid_producer_epoch
    assert state(coord) == (2, [])
    assert one(coord, marker(1, 3, commit=False, coordinator_epoch=2)) == (OK, 3)
    assert state(coord) == (4, [(1, 2, 3)])


def test_fencing_abort_with_a_bumped_epoch(coord: Coordinator) -> None:
    """InitProducerId of a new instance aborts the old one's transaction with epoch + 1: the zombie
    is fenced afterwards, even its retries, and the bumped epoch starts from sequence 0."""
    assert one(coord, data(1, 0, 0, records=2)) == (OK, 0)
    assert one(coord, marker(1, 1, commit=False, coordinator_epoch=3)) == (OK, 2)
    assert state(coord) == (3, [(1, 0, 2)])
    assert one(coord, data(1, 0, 2))[0] == ErrorCode.invalid_producer_epoch
    assert one(coord, data(1, 0, 2, txn=False))[0] == ErrorCode.invalid_producer_epoch
    # A retry of the zombie's first batch is no duplicate any more: its epoch's batches are forgotten.
    retry = put(coord, data(1, 0, 0, records=2))[0]
    assert (retry.errors, retry.is_duplicate) == (ErrorCode.invalid_producer_epoch, False)
    assert one(coord, data(1, 1, 3))[0] == ErrorCode.out_of_order_sequence_number
    assert one(coord, data(1, 1, 0)) == (OK, 3)
    assert state(coord) == (3, [(1, 0, 2)])
    # The next bump (the new instance's own InitProducerId) works the same way.
    assert one(coord, marker(1, 2, commit=False, coordinator_epoch=3)) == (OK, 4)
    assert one(coord, data(1, 2, 0)) == (OK, 5)
    assert state(coord) == (5, [(1, 0, 2), (1, 3, 4)])


def test_marker_with_nothing_ongoing(coord: Coordinator) -> None:
    put(coord, plain(records=2))
    assert one(coord, marker(9, 0, commit=False)) == (OK, 2)  # a producer never seen here
    assert one(coord, marker(9, 0, commit=False)) == (OK, 3)  # markers are not deduplicated
    assert one(coord, marker(9, 0, commit=True)) == (OK, 4)
    assert state(coord) == (5, [])
    assert coord.get_log_info(TOPIC, 0) == (0, 5, 100 + 3 * 80)
    r = find(coord, 0)
    assert [(b.metadata.is_control, b.metadata.last_offset) for b in r.batches] == [
        (False, 1),
        (True, 2),
        (True, 3),
        (True, 4),
    ]
    # The marker made the producer known at its epoch: it goes on from sequence 0.
    assert one(coord, data(9, 0, 3))[0] == ErrorCode.out_of_order_sequence_number
    assert one(coord, data(9, 0, 0)) == (OK, 5)


def test_several_transactional_events_in_one_object(coord: Coordinator) -> None:
    responses = put(
        coord,
        data(1, 0, 0),  # 0: 1's transaction
        data(2, 0, 0),  # 1: 2's transaction
        data(1, 0, 1, txn=False),  # refused: 1 is in a transaction
        marker(1, 0, commit=False),  # 2: 1 aborted, 2 still ongoing
        data(1, 0, 1, txn=False),  # 3: 1 is idempotent again
        marker(2, 0, commit=True),  # 4
    )
    assert [(r.errors, r.assigned_base_offset) for r in responses] == [
        (OK, 0),
        (OK, 1),
        (ErrorCode.invalid_txn_state, -1),
        (OK, 2),
        (OK, 3),
        (OK, 4),
    ]
    assert state(coord) == (5, [(1, 0, 2)])
    # The aborted entry's LSO was 2's ongoing transaction: a read of [0, 1) still finds it.
    r = find(coord, 0, max_bytes=1)
    assert (bases(r), r.aborted_transactions) == ([0], [(1, 0)])


def test_malformed_transactional_batches(coord: Coordinator) -> None:
    two_records = dataclasses.replace(marker(1, 0, commit=True), last_offset=1)
    no_producer = dataclasses.replace(marker(1, 0, commit=True), producer_id=-1)
    txn_without_producer = dataclasses.replace(plain(), is_transactional=True)
    for bad in (two_records, no_producer, txn_without_producer):
        assert one(coord, bad) == (ErrorCode.corrupt_message, -1)
    assert coord.get_log_info(TOPIC, 0) == (0, 0, 0)


def test_lso_never_below_the_log_start(coord: Coordinator) -> None:
    put(coord, plain(records=3), data(1, 0, 0, records=2), plain())  # 0-2, txn 3-4, 5
    assert state(coord) == (3, [])
    coord.delete_records([DeleteRecordsRequest(tp(0), 4)])
    assert state(coord) == (4, [])
    assert find(coord, 4).last_stable_offset == 4
    put(coord, marker(1, 0, commit=False))  # 6
    assert state(coord) == (7, [(1, 3, 6)])


def test_deletions_prune_aborted_transactions(coord: Coordinator) -> None:
    put(coord, data(1, 0, 0), marker(1, 0, commit=False))  # 0, abort at 1
    put(coord, data(2, 0, 0), marker(2, 0, commit=False))  # 2, abort at 3
    put(coord, data(3, 0, 0), marker(3, 0, commit=False))  # 4, abort at 5
    put(coord, data(4, 0, 0))  # 6: ongoing
    assert state(coord) == (6, [(1, 0, 1), (2, 2, 3), (3, 4, 5)])
    # Tiered storage taking batches keeps the log start, and the aborted transactions.
    coord.delete_tiered_batches([DeleteTieredBatchesRequest(tp(0), 2)])
    assert state(coord) == (6, [(1, 0, 1), (2, 2, 3), (3, 4, 5)])
    # DeleteRecords: a marker below the new log start goes; one at it stays.
    coord.delete_records([DeleteRecordsRequest(tp(0), 3)])
    assert state(coord) == (6, [(2, 2, 3), (3, 4, 5)])
    r = find(coord, 3)
    assert (bases(r), r.aborted_transactions) == ([3, 4, 5], [(2, 2), (3, 4)])
    # Size retention moving the log start past the next marker (batches 3 and 4 go).
    coord.enforce_retention([EnforceRetentionRequest(tp(0), 100 + 80, -1)])
    assert coord.get_log_info(TOPIC, 0)[0] == 5
    assert state(coord) == (6, [(3, 4, 5)])
    # Deleting the topic forgets everything: a recreated one starts clean.
    coord.delete_topics({TOPIC})
    assert coord.transaction_state(TOPIC, 0) is None
    coord.create_topic_and_partitions({CreateTopicAndPartitionsRequest(TOPIC, "orders", 1)})
    assert state(coord) == (0, [])
    assert one(coord, data(4, 0, 1, txn=False)) == (OK, 0)  # 4's transaction did not survive
    assert one(coord, marker(3, 0, commit=True, coordinator_epoch=0)) == (OK, 1)


def test_flags_survive_compaction(coord: Coordinator) -> None:
    put(coord, plain(), data(1, 0, 0), marker(1, 0, commit=True))
    old = find(coord, 0, committed=False).batches
    key = old[0].object_key
    listed = coord.list_object_batches([key])[key]
    assert [(b.metadata.is_transactional, b.metadata.is_control) for b in listed] == [
        (False, False),
        (True, False),
        (True, True),
    ]
    moves, pos = [], 0
    for b in listed:
        m = b.metadata
        moves.append(
            BatchMove(
                b.batch_id,
                m.topic_id_partition,
                m.base_offset,
                m.last_offset,
                key,
                m.byte_offset,
                pos,
                m.byte_size,
            )
        )
        pos += m.byte_size
    assert coord.replace_batches("compacted", pos, moves, -1).moved == 3
    new = find(coord, 0, committed=False).batches
    assert [b.object_key for b in new] == ["compacted"] * 3
    assert [b.metadata for b in new] == [
        dataclasses.replace(b.metadata, byte_offset=n.metadata.byte_offset)
        for b, n in zip(old, new, strict=True)
    ]
    described = coord.describe_object("compacted")
    assert described is not None
    assert [b.metadata.is_control for b in described.batches] == [False, False, True]
    assert state(coord) == (3, [])


def test_transaction_state_survives_reopen(store_url: str, clock: FakeClock) -> None:
    first = open_coordinator(store_url, clock)
    first.create_topic_and_partitions({CreateTopicAndPartitionsRequest(TOPIC, "orders", 1)})
    put(first, data(1, 0, 0), marker(1, 0, commit=False, coordinator_epoch=7))  # 0, abort at 1
    put(first, data(1, 0, 1), data(2, 2, 0))  # 2 (1's second transaction), 3 (2's)
    first.close()

    second = open_coordinator(store_url, clock)
    try:
        assert second.transaction_state(TOPIC, 0) == (2, [(1, 0, 1)])
        r = second.find_batches([FindBatchRequest(tp(0), 0, 10**6, True)], 10**6)[0]
        assert (bases(r), r.last_stable_offset, r.aborted_transactions) == ([0, 1], 2, [(1, 0)])
        assert [b.metadata.is_control for b in r.batches] == [False, True]
        # The ongoing transactions, the coordinator epoch and the epochs all came back.
        assert one(second, data(1, 0, 2, txn=False))[0] == ErrorCode.invalid_txn_state
        assert one(second, marker(1, 0, commit=True, coordinator_epoch=6))[0] == (
            ErrorCode.transaction_coordinator_fenced
        )
        assert one(second, data(2, 1, 1))[0] == ErrorCode.invalid_producer_epoch
        assert one(second, marker(1, 0, commit=True, coordinator_epoch=7)) == (OK, 4)
        assert second.transaction_state(TOPIC, 0) == (3, [(1, 0, 1)])
        assert one(second, marker(2, 2, commit=False)) == (OK, 5)
        assert second.transaction_state(TOPIC, 0) == (6, [(1, 0, 1), (2, 3, 5)])
    finally:
        second.close()
