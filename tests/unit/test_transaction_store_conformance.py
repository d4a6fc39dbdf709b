"""The transaction state store contract (what Kafka keeps in ``__transaction_state``), run unchanged
on every backend.

Each store test runs once on an SQLite file and once on a fresh PostgreSQL database (the
``store_url`` fixture), through the factory's ``open_transaction_store_at``: what the broker opens.
The coordinator partition of a transactional id is checked against Java's ``String.hashCode``
computed by hand.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import replace
from functools import partial
from pathlib import Path

import pytest

from shoal.cluster.placement import group_partition
from shoal.protocol.key_partitions import java_string_hash as placement_hash
from shoal.store.factory import (
    StoreNotFoundError,
    open_metadata_store,
    open_stores,
    open_transaction_store,
    open_transaction_store_at,
)
from shoal.store.locate import resolve_config
from shoal.store.transactions import (
    ABSENT,
    COMPLETE_ABORT,
    COMPLETE_COMMIT,
    DEAD,
    EMPTY,
    ONGOING,
    PREPARE_ABORT,
    PREPARE_COMMIT,
    PREPARE_EPOCH_FENCE,
    STATES,
    StoredTransaction,
    TransactionStore,
    java_string_hash,
    kafka_abs,
    transaction_partition,
)

NOW = 1_700_000_000_000


def txn(transactional_id: str = "txn-1", **kw: object) -> StoredTransaction:
    fields: dict = {
        "transactional_id": transactional_id,
        "producer_id": 1000,
        "prev_producer_id": -1,
        "next_producer_id": -1,
        "producer_epoch": 0,
        "last_producer_epoch": -1,
        "txn_timeout_ms": 60_000,
        "state": EMPTY,
        "partitions": (),
        "txn_start_timestamp_ms": -1,
        "txn_last_update_timestamp_ms": NOW,
        "client_transaction_version": 2,
    }
    fields.update(kw)
    return StoredTransaction(**fields)


def key(record: StoredTransaction) -> tuple[int, int]:
    return record.producer_id, record.producer_epoch


@pytest.fixture
def store(store_url: str) -> Iterator[TransactionStore]:
    s = open_transaction_store_at(store_url)
    yield s
    s.close()


# --------------------------------------------------------------------------- records


def test_state_names_are_kafkas() -> None:
    names = [
        EMPTY,
        ONGOING,
        PREPARE_COMMIT,
        PREPARE_ABORT,
        COMPLETE_COMMIT,
        COMPLETE_ABORT,
        DEAD,
        PREPARE_EPOCH_FENCE,
    ]
    assert names == [
        "Empty",
        "Ongoing",
        "PrepareCommit",
        "PrepareAbort",
        "CompleteCommit",
        "CompleteAbort",
        "Dead",
        "PrepareEpochFence",
    ]
    assert set(names) == STATES


def test_a_record_keeps_its_partitions_sorted_once_each_and_refuses_bad_values() -> None:
    record = txn(partitions=(("orders", 2), ("audit", 0), ("orders", 0), ("orders", 2)))
    assert record.partitions == (("audit", 0), ("orders", 0), ("orders", 2))
    assert record == txn(partitions=[("orders", 0), ("orders", 2), ("audit", 0)])
    with pytest.raises(ValueError, match="state"):
        txn(state="Committed")
    with pytest.raises(ValueError, match="version"):
        txn(client_transaction_version=3)
    with pytest.raises(ValueError, match="version"):
        txn(client_transaction_version=-1)


# --------------------------------------------------------------------------- round trips


@pytest.mark.parametrize("state", sorted(STATES))
def test_every_field_round_trips(store: TransactionStore, state: str) -> None:
    record = StoredTransaction(
        transactional_id="payments-writer-é𝄞",
        producer_id=2**40 + 5,  # producer ids are int64
        prev_producer_id=2**40 + 4,
        next_producer_id=2**40 + 6,
        producer_epoch=32_766,
        last_producer_epoch=32_765,
        txn_timeout_ms=900_000,
        state=state,
        partitions=(("orders", 11), ("audit.log", 0), ("orders", 2), ("__consumer_offsets", 49)),
        txn_start_timestamp_ms=NOW - 5,
        txn_last_update_timestamp_ms=NOW,
        client_transaction_version=1,
    )
    assert store.put(record)
    assert store.get(record.transactional_id) == record
    assert store.load() == [record]
    assert store.load(transaction_partition(record.transactional_id, 50)) == [record]


def test_the_none_values_round_trip(store: TransactionStore) -> None:
    record = txn("", producer_id=0, client_transaction_version=0)  # every -1, no partitions, the empty id
    assert store.put(record, expected=ABSENT)
    assert store.get("") == record
    assert store.get("absent") is None
    assert store.load() == [record]


def test_an_unconditional_put_replaces_whatever_is_stored(store: TransactionStore) -> None:
    first = txn(producer_id=7, producer_epoch=3)
    store.put(first)
    other = txn(
        producer_id=9, producer_epoch=0, state=ONGOING, partitions=(("t", 0),), txn_start_timestamp_ms=NOW
    )
    assert store.put(other)
    assert store.get("txn-1") == other
    assert store.load() == [other]


def test_load_is_in_transactional_id_order(store: TransactionStore) -> None:
    ids = ["b", "a", "B", "é", "a-1", "Z", "😀", "~"]
    for i, tid in enumerate(ids):
        store.put(txn(tid, producer_id=i))
    assert [t.transactional_id for t in store.load()] == sorted(ids)  # code point order on both backends


# --------------------------------------------------------------------------- coordinator partitions


IDS = [f"app-{i}" for i in range(40)] + ["", "a", "txn-1", "polygenelubricants", "😀", "tx-€-😀"]


def test_load_by_partition_gives_exactly_the_ids_of_that_partition(store_url: str) -> None:
    store = open_transaction_store_at(store_url, partitions=5)
    try:
        for i, tid in enumerate(IDS):
            store.put(txn(tid, producer_id=i))
        everything = store.load()
        assert len(everything) == len(IDS)
        seen = []
        for p in range(5):
            loaded = store.load(p)
            assert loaded == [t for t in everything if transaction_partition(t.transactional_id, 5) == p]
            seen += loaded
        assert sorted(seen, key=lambda t: t.transactional_id) == everything
        assert any(store.load(p) for p in range(1, 5))  # not everything in one partition
        for bad in (-1, 5):
            with pytest.raises(ValueError):
                store.load(bad)
    finally:
        store.close()


def test_reopening_with_another_partition_count_files_every_id_again(store_url: str) -> None:
    store = open_transaction_store_at(store_url, partitions=3)
    try:
        for i, tid in enumerate(IDS):
            store.put(txn(tid, producer_id=i))
    finally:
        store.close()
    store = open_transaction_store_at(store_url, partitions=7)
    try:
        for p in range(7):
            assert {t.transactional_id for t in store.load(p)} == {
                tid for tid in IDS if transaction_partition(tid, 7) == p
            }
        store.put(txn("late", producer_id=99))
        assert store.get("late") in store.load(transaction_partition("late", 7))
    finally:
        store.close()


# Java's String.hashCode, by hand: s[0]*31^(n-1) + ... + s[n-1] over UTF-16 code units, int32.
#   "txn-1": 116*31^4 + 120*31^3 + 110*31^2 + 45*31 + 49 = 110810510
#   "😀" (U+1F600) is the surrogate pair D83D DE00: 55357*31 + 56832 = 1772899 (not 0x1F600 = 128512)
#   "Aa" and "BB": 65*31 + 97 = 66*31 + 66 = 2112
#   "polygenelubricants" and "GydZG_": Integer.MIN_VALUE, whose Utils.abs is 0
#   "tx-€-😀": -695710771 (Utils.abs: 695710771; Utils.toPositive would give 1451772877)
JAVA_HASHES = {
    "": 0,
    "a": 97,
    "Aa": 2112,
    "BB": 2112,
    "txn-1": 110810510,
    "😀": 1772899,
    "polygenelubricants": -(2**31),
    "GydZG_": -(2**31),
    "tx-€-😀": -695710771,
    "transactional-id-7": 1051133897,
    "payments-writer-é𝄞": -1315820455,
}


@pytest.mark.parametrize(("tid", "expected"), JAVA_HASHES.items())
def test_java_string_hash(tid: str, expected: int) -> None:
    assert java_string_hash(tid) == expected
    assert java_string_hash(tid) == placement_hash(tid)


def test_transaction_partition_is_kafkas() -> None:
    assert transaction_partition("", 50) == 0
    assert transaction_partition("a", 50) == 97 % 50 == 47
    assert transaction_partition("txn-1", 50) == 110810510 % 50 == 10
    assert transaction_partition("😀", 50) == 1772899 % 50 == 49
    assert transaction_partition("polygenelubricants", 50) == 0  # Utils.abs(Integer.MIN_VALUE) == 0
    assert transaction_partition("polygenelubricants", 7) == 0
    assert transaction_partition("tx-€-😀", 50) == 695710771 % 50 == 21  # Utils.abs, not toPositive (27)
    assert kafka_abs(-(2**31)) == 0 and kafka_abs(-5) == 5 and kafka_abs(5) == 5
    assert transaction_partition("anything", 1) == 0
    for bad in (0, -1):
        with pytest.raises(ValueError):
            transaction_partition("txn-1", bad)


@pytest.mark.parametrize("partitions", [1, 3, 50, 64])
def test_transaction_partition_agrees_with_the_group_coordinators_rule(partitions: int) -> None:
    for tid in [*IDS, *JAVA_HASHES, "\ud800", "x" * 1000]:  # "\ud800": a lone surrogate, one unit as in Java
        assert transaction_partition(tid, partitions) == group_partition(tid, partitions)


# --------------------------------------------------------------------------- compare-and-set


def test_compare_and_set_creates_then_follows_the_producer_id_and_epoch(store: TransactionStore) -> None:
    empty = txn(producer_id=42, producer_epoch=0)
    assert store.put(empty, expected=ABSENT)
    ongoing = replace(empty, state=ONGOING, partitions=(("t", 1),), txn_start_timestamp_ms=NOW)
    assert store.put(ongoing, expected=(42, 0))
    assert store.get("txn-1") == ongoing
    # Transaction version 2 bumps the epoch on ending; the next write expects the new one.
    prepare = replace(ongoing, state=PREPARE_COMMIT, producer_epoch=1, last_producer_epoch=0)
    assert store.put(prepare, expected=(42, 0))
    complete = replace(prepare, state=COMPLETE_COMMIT, partitions=())
    assert store.put(complete, expected=(42, 1))
    # An epoch overflow hands over to a new producer id (KIP-890).
    renewed = replace(complete, producer_id=43, prev_producer_id=42, producer_epoch=0, last_producer_epoch=1)
    assert store.put(renewed, expected=(42, 1))
    assert store.get("txn-1") == renewed
    assert store.put(replace(renewed, txn_timeout_ms=1), expected=(43, 0))


def test_a_failed_compare_and_set_writes_nothing(store: TransactionStore) -> None:
    current = txn(
        producer_id=42, producer_epoch=5, state=ONGOING, partitions=(("t", 0),), txn_start_timestamp_ms=NOW
    )
    assert store.put(current, expected=ABSENT)
    zombie = replace(current, state=PREPARE_ABORT, producer_epoch=6, txn_last_update_timestamp_ms=NOW + 1)
    attempts = [
        (42, 4),  # stale epoch
        (42, 6),  # an epoch it never had
        (41, 5),  # stale producer id
        ABSENT,  # create-if-absent, but the row exists
    ]
    for expected in attempts:
        assert store.put(zombie, expected=expected) is False, expected
        assert store.get("txn-1") == current
        assert store.load() == [current]
    # A conditional update of an id that has no row creates nothing.
    assert store.put(txn("ghost", producer_id=42, producer_epoch=5), expected=(42, 5)) is False
    assert store.get("ghost") is None
    assert store.load() == [current]


def test_delete(store: TransactionStore) -> None:
    assert store.delete("never") is True  # unconditional: nothing to delete is fine
    assert store.delete("never", expected=ABSENT) is True
    assert store.delete("never", expected=(1, 0)) is False

    record = txn(producer_id=7, producer_epoch=2, state=DEAD)
    keep = txn("other", producer_id=8)
    store.put(record)
    store.put(keep)
    for stale in [(7, 1), (6, 2), ABSENT]:
        assert store.delete("txn-1", expected=stale) is False, stale
        assert store.get("txn-1") == record
    assert store.delete("txn-1", expected=(7, 2)) is True
    assert store.get("txn-1") is None
    assert store.load() == [keep]
    assert store.delete("other") is True
    assert store.load() == []
    assert store.put(record, expected=ABSENT)  # the id can be used again


def test_reopening_keeps_every_record(store_url: str) -> None:
    records = [
        txn("a", producer_id=1, state=ONGOING, partitions=(("t", 0), ("u", 3)), txn_start_timestamp_ms=NOW),
        txn("b", producer_id=2, producer_epoch=9, state=COMPLETE_ABORT, last_producer_epoch=8),
        txn("c", producer_id=3, state=PREPARE_EPOCH_FENCE, client_transaction_version=0),
    ]
    first = open_transaction_store_at(store_url)
    try:
        for r in records:
            assert first.put(r, expected=ABSENT)
        assert first.delete("c", expected=(3, 0))
    finally:
        first.close()
    again = open_transaction_store_at(store_url)
    try:
        assert again.load() == records[:2]
        assert again.get("a") == records[0]
        assert again.put(replace(records[1], producer_epoch=10), expected=(2, 9))  # the CAS sees the old rows
        assert again.put(records[0], expected=ABSENT) is False
    finally:
        again.close()


# --------------------------------------------------------------------------- concurrent writers


def race(*attempts: Callable[[], bool]) -> list[bool]:
    """Run the attempts in threads released together; their results in order."""
    start = threading.Barrier(len(attempts))
    results: list[bool | BaseException | None] = [None] * len(attempts)

    def run(i: int) -> None:
        start.wait()
        try:
            results[i] = attempts[i]()
        except BaseException as exc:
            results[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(attempts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    for r in results:
        if isinstance(r, BaseException):
            raise r
    return [bool(r) for r in results]


@pytest.mark.parametrize("stores", ["one store", "two stores"])
def test_racing_writers_from_the_same_state_have_exactly_one_winner(store_url: str, stores: str) -> None:
    first = open_transaction_store_at(store_url)
    second = first if stores == "one store" else open_transaction_store_at(store_url)
    try:
        for round_ in range(15):
            tid = f"race-{round_}"
            mine, theirs = (
                txn(tid, producer_id=1, txn_timeout_ms=1),
                txn(tid, producer_id=2, txn_timeout_ms=2),
            )
            won = race(
                partial(first.put, mine, expected=ABSENT), partial(second.put, theirs, expected=ABSENT)
            )
            assert won.count(True) == 1, won
            current = mine if won[0] else theirs
            assert first.get(tid) == second.get(tid) == current

            for step in range(3):
                base = key(current)
                a = replace(current, producer_epoch=base[1] + 1, state=ONGOING, txn_timeout_ms=100 + step)
                b = replace(
                    current, producer_epoch=base[1] + 1, state=PREPARE_ABORT, txn_timeout_ms=200 + step
                )
                won = race(partial(first.put, a, expected=base), partial(second.put, b, expected=base))
                assert won.count(True) == 1, won
                current = a if won[0] else b
                assert first.get(tid) == second.get(tid) == current

            # Expiration racing an update: one of them, never both.
            base = key(current)
            bumped = replace(current, producer_epoch=base[1] + 1)
            won = race(partial(first.delete, tid, expected=base), partial(second.put, bumped, expected=base))
            assert won.count(True) == 1, won
            assert first.get(tid) == (None if won[0] else bumped)
    finally:
        first.close()
        if second is not first:
            second.close()


# --------------------------------------------------------------------------- the factory


def test_the_stores_of_a_configuration_include_the_transaction_store(store_url: str, tmp_path: Path) -> None:
    overrides = [f"metadata.store.url={store_url}"]
    config = resolve_config(None, tmp_path / "data", overrides)
    with pytest.raises(StoreNotFoundError):
        open_transaction_store(config, must_exist=True)

    # A store made before transactions (no transaction_state table) is refused, and left alone.
    open_metadata_store(config).close()
    with pytest.raises(StoreNotFoundError, match="transaction_coordinator"):
        open_transaction_store(config, must_exist=True)
    with pytest.raises(StoreNotFoundError, match="transaction_coordinator"):
        open_stores(config, must_exist=True)

    stores = open_stores(config)  # a broker creates every table
    try:
        assert stores.transactions.put(record := txn("from-the-broker"), expected=ABSENT)
    finally:
        stores.close()
    stores = open_stores(config, must_exist=True)
    try:
        assert stores.transactions.load() == [record]
    finally:
        stores.close()
    reader = open_transaction_store(config, must_exist=True)
    try:
        assert reader.get("from-the-broker") == record
        assert reader.load(transaction_partition("from-the-broker", 50)) == [record]  # Kafka's default count
    finally:
        reader.close()


def test_the_partition_count_comes_from_the_configuration(tmp_path: Path) -> None:
    config = resolve_config(None, tmp_path / "data", ["transaction.state.log.num.partitions=3"])
    store = open_transaction_store(config)
    try:
        for tid in IDS:
            store.put(txn(tid))
        for p in range(3):
            assert {t.transactional_id for t in store.load(p)} == {
                tid for tid in IDS if transaction_partition(tid, 3) == p
            }
        with pytest.raises(ValueError):
            store.load(3)
    finally:
        store.close()


def test_compare_and_set_on_the_last_update_fences_same_epoch_transitions(store: TransactionStore) -> None:
    """Two coordinators that both read the same Ongoing record: only the first write lands, also
    when neither changes the producer epoch (transaction version 0/1 transitions)."""
    ongoing = txn(producer_id=7, producer_epoch=3, state=ONGOING, partitions=(("t", 0),), txn_last_update_timestamp_ms=NOW)
    assert store.put(ongoing, expected=ABSENT)
    seen = (7, 3, NOW)
    first = replace(ongoing, state=PREPARE_COMMIT, txn_last_update_timestamp_ms=NOW + 1)
    second = replace(ongoing, partitions=(("t", 0), ("t", 1)), txn_last_update_timestamp_ms=NOW + 1)
    assert store.put(first, expected=seen)
    assert store.put(second, expected=seen) is False
    assert store.get("txn-1") == first
    assert store.delete("txn-1", expected=seen) is False
    assert store.delete("txn-1", expected=(7, 3, NOW + 1))
    assert store.get("txn-1") is None
