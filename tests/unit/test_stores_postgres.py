"""What only the PostgreSQL stores face: several brokers on one database at once, and a database
that goes away and comes back under live store objects.

The server is the session's (``postgres_server``): a test that stops or kills it starts it again
in ``finally``, whatever happened.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest

from shoal.metadata.log import DuplicateBrokerError, MetadataConflictError
from shoal.metadata.records import ProducerIdsRecord
from shoal.store.groups import CommittedOffset, PutGroup, PutOffsets, StoredGroup
from shoal.store.postgres.groups import PostgresGroupStore
from shoal.store.postgres.inspect import schema_components
from shoal.store.postgres.metadata_log import PostgresMetadataStore
from tests.support.postgres import PostgresServer

#: Seconds a store waits for the database before a call fails (the stores' ``timeout``).
TIMEOUT = 2.0


def _offset(topic: str, partition: int, value: int) -> CommittedOffset:
    return CommittedOffset(topic, partition, None, value, -1, "", 1000)


def _in_threads(count: int, work: Callable[[int], Any]) -> list[Any]:
    """``work(i)`` for i in range(count), each in its own thread, released together; results in order.
    An exception in any thread is raised here."""
    barrier = threading.Barrier(count)
    results: list[Any] = [None] * count
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            barrier.wait(timeout=30)
            results[i] = work(i)
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    if errors:
        raise errors[0]
    return results


def _server_is_up(server: PostgresServer) -> bool:
    try:
        with psycopg.connect(server.url(), connect_timeout=2):
            return True
    except psycopg.OperationalError:
        return False


def _ensure_running(server: PostgresServer) -> None:
    if not _server_is_up(server):
        server.start()


def _eventually(call: Callable[[], Any], within: float) -> Any:
    """The first result of ``call`` that does not raise OperationalError, retried for ``within`` seconds."""
    deadline = time.monotonic() + within
    while True:
        try:
            return call()
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


@pytest.fixture
def brokers(postgres_url: str) -> Iterator[tuple[PostgresMetadataStore, PostgresMetadataStore]]:
    """Two brokers' metadata stores on one database."""
    a = PostgresMetadataStore(postgres_url, timeout=TIMEOUT)
    b = PostgresMetadataStore(postgres_url, timeout=TIMEOUT)
    yield a, b
    a.close()
    b.close()


# --------------------------------------------------------------------------- several brokers at once


def test_racing_for_the_lease_has_exactly_one_winner_each_round(brokers) -> None:
    a, b = brokers
    for round_ in range(1, 6):
        epochs = _in_threads(8, lambda i: (a if i % 2 else b).acquire_lease(i + 1, 30_000))
        winners = [(node + 1, epoch) for node, epoch in enumerate(epochs) if epoch is not None]
        assert len(winners) == 1, epochs
        node, epoch = winners[0]
        assert epoch == round_  # every takeover bumps the epoch by exactly one
        assert a.renew_lease(node, epoch, -1_000)  # the winner's lease lapses: the next round is open


def test_concurrent_compare_and_appends_never_interleave_or_lose_an_acknowledged_append(brokers) -> None:
    """Six deciders on two brokers' stores append two-record batches, each right after the end of
    the log as it last saw it, catching up and retrying on a conflict. Every acknowledged append
    landed exactly where it was decided, whole; refused ones wrote nothing; offsets are gapless."""
    a, b = brokers
    per_thread = 40
    acked: list[tuple[int, int, int]] = []  # (after_offset, returned last offset, value)
    conflicts = [0]
    lock = threading.Lock()

    def decider(thread: int) -> None:
        store = a if thread % 2 else b
        last = -1  # every decider starts from the empty log at the same moment: one wins, the rest conflict
        for n in range(per_thread):
            value = thread * 1_000_000 + n + 1
            while True:
                try:
                    batch = [ProducerIdsRecord(thread, value), ProducerIdsRecord(thread, -value)]
                    offset = store.append(batch, last, thread)
                except MetadataConflictError:
                    with lock:
                        conflicts[0] += 1
                    newer = store.read(last + 1)  # catch up, then decide again
                    assert newer, "a conflict means the log moved past the offset decided on"
                    last = newer[-1][0]
                    continue
                with lock:
                    acked.append((last, offset, value))
                last = offset
                break

    _in_threads(6, decider)
    assert conflicts[0] >= 5, "the deciders raced from the empty log: all but one conflicted"
    log = a.read(0, limit=100_000)
    assert [offset for offset, _ in log] == list(range(len(log))), "offsets are gapless"
    assert len(acked) == 6 * per_thread and len(log) == 2 * len(acked), "refused appends wrote nothing"
    assert len({offset for _, offset, _ in acked}) == len(acked), "every acknowledged offset is unique"
    for after, offset, value in acked:  # each batch landed right after the offset decided on, together
        assert offset == after + 2
        node = value // 1_000_000
        assert log[after + 1][1] == ProducerIdsRecord(node, value)
        assert log[offset][1] == ProducerIdsRecord(node, -value)
    assert b.read(0, limit=100_000) == log


def test_the_first_appends_on_an_empty_database_race_safely(postgres_server: PostgresServer) -> None:
    """No lease row exists yet (nobody took the lease): appenders create the row they lock on."""
    for _ in range(3):
        url = postgres_server.create_database()
        stores = [PostgresMetadataStore(url, timeout=TIMEOUT) for _ in range(2)]
        try:

            def append_first(i: int, stores: list[PostgresMetadataStore] = stores) -> bool:
                try:
                    stores[i % 2].append([ProducerIdsRecord(i, i)], -1, i)
                except MetadataConflictError:
                    return False
                return True

            won = _in_threads(6, append_first)
            assert won.count(True) == 1, won
            assert stores[0].read(0) == [(0, ProducerIdsRecord(won.index(True), won.index(True)))]
        finally:
            for store in stores:
                store.close()


def test_cluster_id_is_created_once_by_brokers_starting_together(postgres_server: PostgresServer) -> None:
    for _ in range(3):
        url = postgres_server.create_database()

        def start_broker(_: int, url: str = url) -> str:
            store = PostgresMetadataStore(url, timeout=TIMEOUT)
            try:
                return store.cluster_id()
            finally:
                store.close()

        ids = _in_threads(6, start_broker)
        assert len(set(ids)) == 1, ids
        check = PostgresMetadataStore(url, timeout=TIMEOUT)
        try:
            assert check.cluster_id() == ids[0]
        finally:
            check.close()


def test_brokers_creating_every_table_at_once(postgres_server: PostgresServer) -> None:
    """Brokers starting together on an empty database create each component's tables once."""
    for _ in range(3):
        url = postgres_server.create_database()
        _in_threads(6, lambda i, url=url: (PostgresMetadataStore, PostgresGroupStore)[i % 2](url).close())
        assert {"metadata", "group_coordinator"} <= schema_components(url)
        with psycopg.connect(url) as conn:
            versions = dict(conn.execute("SELECT component, version FROM schema_versions").fetchall())
        assert (versions["metadata"], versions["group_coordinator"]) == (2, 2)


def test_lease_expiry_is_on_the_database_clock(brokers, monkeypatch: pytest.MonkeyPatch) -> None:
    """A broker whose clock runs an hour ahead does not see the others' leases as expired."""
    a, b = brokers
    assert a.acquire_lease(1, 30_000) == 1
    real_time = time.time
    monkeypatch.setattr(time, "time", lambda: real_time() + 3600)
    assert b.acquire_lease(2, 30_000) is None
    assert b.renew_lease(1, 1, 30_000)


def test_broker_heartbeats_are_on_the_database_clock(brokers, monkeypatch: pytest.MonkeyPatch) -> None:
    """A broker whose clock runs an hour ahead sees the others' heartbeats as fresh."""
    a, b = brokers
    a.register_broker(1, uuid.UUID(int=1), "h1", 9092, None, 30_000)
    real_time = time.time
    monkeypatch.setattr(time, "time", lambda: real_time() + 3600)
    monkeypatch.setattr(time, "time_ns", lambda: int((real_time() + 3600) * 1e9))
    (registration,) = b.broker_registrations()
    assert registration.heartbeat_age_ms < 30_000
    with pytest.raises(DuplicateBrokerError):
        b.register_broker(1, uuid.UUID(int=2), "h2", 9092, None, 30_000)


def test_group_stores_of_two_brokers_writing_the_same_rows(postgres_url: str) -> None:
    """Batches that lock the same rows in opposite orders (a deadlock for one of them) all land."""
    stores = [PostgresGroupStore(postgres_url, timeout=TIMEOUT) for _ in range(2)]
    try:
        keys = [("t", p) for p in range(20)]

        def write(i: int) -> None:
            order = keys if i % 2 == 0 else keys[::-1]
            for n in range(15):
                stores[i % 2].apply(
                    [
                        PutOffsets("g", tuple(_offset(t, p, n) for t, p in order)),
                        PutGroup(StoredGroup("g", "consumer", None, n, None, n)),
                    ]
                )

        _in_threads(4, write)
        groups, offsets = stores[0].load()
        assert [g.generation for g in groups] == [14]
        assert [(o.topic, o.partition, o.offset) for o in offsets["g"]] == [(t, p, 14) for t, p in keys]
    finally:
        for store in stores:
            store.close()


# --------------------------------------------------------------------------- the database goes away


@pytest.mark.parametrize("how", ["stop", "kill"])
def test_database_down_fails_calls_in_bounded_time_then_the_same_stores_recover(
    postgres_server: PostgresServer, postgres_url: str, how: str
) -> None:
    metadata = PostgresMetadataStore(postgres_url, timeout=TIMEOUT)
    groups = PostgresGroupStore(postgres_url, timeout=TIMEOUT)
    try:
        epoch = metadata.acquire_lease(1, 30_000)
        assert epoch is not None
        metadata.append([ProducerIdsRecord(1, 1000)], -1, 1)
        incarnation = uuid.uuid4()
        metadata.register_broker(1, incarnation, "h1", 9092, None, 30_000)
        groups.apply([PutOffsets("g", (_offset("t", 0, 1),))])
        cluster_id = metadata.cluster_id()

        try:
            if how == "stop":
                postgres_server.stop()
            else:
                postgres_server.kill()
            calls: list[Callable[[], Any]] = [
                lambda: metadata.read(0),
                lambda: metadata.append([ProducerIdsRecord(1, 2000)], 0, 1),
                lambda: metadata.renew_lease(1, epoch, 30_000),
                lambda: metadata.heartbeat_broker(1, incarnation),
                metadata.broker_registrations,
                metadata.cluster_id,
                groups.load,
                lambda: groups.apply([PutOffsets("g", (_offset("t", 0, 2),))]),
            ]
            for call in calls:
                started = time.monotonic()
                with pytest.raises(psycopg.OperationalError, match=r"store at postgresql://.* is unavailable"):
                    call()
                assert time.monotonic() - started < TIMEOUT + 3
        finally:
            _ensure_running(postgres_server)

        # The same objects work again (their pools reconnect), and nothing committed was lost.
        assert _eventually(lambda: metadata.read(0), within=TIMEOUT + 5) == [(0, ProducerIdsRecord(1, 1000))]
        assert metadata.renew_lease(1, epoch, 30_000)
        assert metadata.append([ProducerIdsRecord(1, 3000)], 0, 1) == 1
        assert metadata.heartbeat_broker(1, incarnation)
        assert metadata.cluster_id() == cluster_id
        assert _eventually(groups.load, within=TIMEOUT + 5)[1] == {"g": [_offset("t", 0, 1)]}
        groups.apply([PutOffsets("g", (_offset("t", 0, 3),))])
        assert groups.load()[1] == {"g": [_offset("t", 0, 3)]}
    finally:
        metadata.close()
        groups.close()


def test_dropped_connections_are_replaced_without_an_error(postgres_url: str) -> None:
    metadata = PostgresMetadataStore(postgres_url, timeout=TIMEOUT)
    groups = PostgresGroupStore(postgres_url, timeout=TIMEOUT)
    try:
        groups.load()
        metadata.read(0)
        with psycopg.connect(postgres_url, autocommit=True) as admin:
            killed = admin.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            ).fetchone()
        assert killed is not None and killed[0] >= 2
        assert metadata.append([ProducerIdsRecord(1, 1000)], -1, 1) == 0
        groups.apply([PutOffsets("g", (_offset("t", 0, 1),))])
        assert groups.load()[1] == {"g": [_offset("t", 0, 1)]}
    finally:
        metadata.close()
        groups.close()


def test_a_lease_row_held_elsewhere_fails_an_append_in_bounded_time(postgres_url: str) -> None:
    """A transaction stuck on the lease row (a broker that vanished mid-append) does not hang the
    others: they time out, and the row is released when that transaction ends."""
    store = PostgresMetadataStore(postgres_url, timeout=TIMEOUT)
    try:
        assert store.acquire_lease(1, 30_000) is not None  # the lease row appends lock on
        with psycopg.connect(postgres_url) as stuck:
            stuck.execute("SELECT 1 FROM metadata_controller_lease WHERE id = 1 FOR UPDATE")
            started = time.monotonic()
            with pytest.raises(psycopg.OperationalError, match="unavailable"):
                store.append([ProducerIdsRecord(1, 1000)], -1, 1)
            assert time.monotonic() - started < TIMEOUT + 3
            assert store.read(0) == []
        assert store.append([ProducerIdsRecord(1, 1000)], -1, 1) == 0
    finally:
        store.close()
