"""What only the PostgreSQL Batch Coordinator faces: several brokers committing to the same partitions
at once, and a database that goes away and comes back under a live coordinator.

The contract itself (offsets, idempotence, fetch, deletion) is test_coordinator_conformance.py, run on
both backends. The server is the session's (``postgres_server``): a test that stops it starts it
again in ``finally``, whatever happened.
"""

from __future__ import annotations

import dataclasses
import random
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from shoal.coordinator.api import (
    CommitBatchRequest,
    CommitBatchResponse,
    CoordinatorUnavailableError,
    CreateTopicAndPartitionsRequest,
    DeleteRecordsRequest,
    EnforceRetentionRequest,
    FindBatchRequest,
    ListOffsetsRequest,
    ListOffsetsTimestamp,
    TopicIdPartition,
)
from shoal.coordinator.compaction_types import BatchMove
from shoal.protocol.errors import ErrorCode
from shoal.records.types import TimestampType
from shoal.store.postgres.coordinator import PostgresBatchCoordinator
from tests.support.postgres import PostgresServer

TOPIC = uuid.UUID("11111111-2222-3333-4444-555555555555")
PARTITIONS = 4
#: Seconds a call waits for a connection before it raises CoordinatorUnavailableError.
TIMEOUT = 1.0


def tp(partition: int) -> TopicIdPartition:
    return TopicIdPartition(TOPIC, partition, "orders")


def batch(partition: int, records: int, pid: int, seq: int, size: int = 100) -> CommitBatchRequest:
    return CommitBatchRequest(
        request_id=0,
        topic_id_partition=tp(partition),
        byte_offset=0,
        size=size,
        base_offset=0,
        last_offset=records - 1,
        batch_max_timestamp=1000,
        message_timestamp_type=TimestampType.CREATE_TIME,
        producer_id=pid,
        producer_epoch=0,
        base_sequence=seq,
        last_sequence=seq + records - 1 if seq >= 0 else -1,
    )


def commit(
    coord: PostgresBatchCoordinator, key: str, reqs: list[CommitBatchRequest]
) -> list[CommitBatchResponse]:
    """Commit the batches laid out back to back in object ``key``."""
    laid_out, pos = [], 0
    for r in reqs:
        laid_out.append(dataclasses.replace(r, byte_offset=pos))
        pos += r.size
    return coord.commit_file(key, 1, pos, laid_out)


def deadlocks_logged(server: PostgresServer) -> int:
    """'deadlock detected' errors in the server's log so far (the coordinator retries them silently)."""
    try:
        return server.log.read_text(errors="replace").count("deadlock detected")
    except OSError:
        return 0


def ensure_running(server: PostgresServer) -> None:
    try:
        with psycopg.connect(server.url(), connect_timeout=2):
            return
    except psycopg.OperationalError:
        server.start()


def check_log(coord: PostgresBatchCoordinator, partition: int, spans: list[tuple[int, int]]) -> None:
    """The partition's offsets are exactly ``spans`` (base, end) back to back from 0, and its live
    batches are a suffix of them up to the high watermark."""
    spans = sorted(spans)
    assert spans and spans[0][0] == 0
    assert all(a[1] == b[0] for a, b in zip(spans, spans[1:], strict=False)), "gap or overlap"
    info = coord.get_log_info(TOPIC, partition)
    assert info is not None
    start, hwm, _ = info
    assert hwm == spans[-1][1]
    (found,) = coord.find_batches([FindBatchRequest(tp(partition), start, 1 << 40)], 1 << 40)
    live = [(b.metadata.base_offset, b.metadata.last_offset + 1) for b in found.batches]
    assert live == [s for s in spans if s[1] > start]


# --------------------------------------------------------------------------- two brokers at once


def test_two_brokers_committing_to_the_same_partitions_get_gapless_unique_offsets(
    postgres_server: PostgresServer, postgres_url: str
) -> None:
    """Six producer threads on two coordinators (two brokers) commit to random subsets of the same
    partitions, in random order, while a third thread runs retention, DeleteRecords and compaction on
    them: every offset is assigned once, without gaps, retries through the other broker are
    duplicates, and no transaction ever deadlocked."""
    brokers = [PostgresBatchCoordinator(postgres_url), PostgresBatchCoordinator(postgres_url)]
    try:
        brokers[0].create_topic_and_partitions({CreateTopicAndPartitionsRequest(TOPIC, "orders", PARTITIONS)})
        deadlocks_before = deadlocks_logged(postgres_server)
        stop_at = time.monotonic() + 4.0
        lock = threading.Lock()
        spans: dict[int, list[tuple[int, int]]] = {p: [] for p in range(PARTITIONS)}
        counts = {"commits": 0, "maintenance": 0}
        errors: list[BaseException] = []

        def producer(index: int) -> None:
            coord, other = brokers[index % 2], brokers[1 - index % 2]
            rng = random.Random(index)
            pid, seqs, n = 1000 + index, [0] * PARTITIONS, 0
            while time.monotonic() < stop_at:
                reqs = []
                for p in rng.sample(range(PARTITIONS), rng.randint(1, PARTITIONS)):
                    records = rng.randint(1, 3)
                    reqs.append(batch(p, records, pid, seqs[p]))
                    seqs[p] += records
                responses = commit(coord, f"p{index}-{n}", reqs)
                assert [(r.errors, r.is_duplicate) for r in responses] == [(ErrorCode.none, False)] * len(
                    reqs
                )
                if n % 5 == 0:  # the answer was lost: the producer retries through the other broker
                    again = commit(other, f"p{index}-{n}-retry", reqs)
                    assert all(r.is_duplicate for r in again)
                    assert [r.assigned_base_offset for r in again] == [
                        r.assigned_base_offset for r in responses
                    ]
                with lock:
                    counts["commits"] += 1
                    for r in responses:
                        p = r.request.topic_id_partition.partition
                        records = r.request.last_offset - r.request.base_offset + 1
                        spans[p].append((r.assigned_base_offset, r.assigned_base_offset + records))
                n += 1

        def maintenance() -> None:
            rng = random.Random(99)
            n = 0
            while time.monotonic() < stop_at:
                coord = brokers[n % 2]
                coord.enforce_retention(
                    [EnforceRetentionRequest(tp(p), 30_000, -1) for p in range(PARTITIONS)]
                )
                p = rng.randrange(PARTITIONS)
                info = coord.get_log_info(TOPIC, p)
                assert info is not None
                coord.delete_records([DeleteRecordsRequest(tp(p), max(info[0], info[1] - 200))])
                candidates = coord.list_compaction_candidates(0, 1 << 30, 3)
                by_object = coord.list_object_batches([c.object_key for c in candidates])
                moves, pos = [], 0
                for b in (b for c in candidates for b in by_object[c.object_key]):
                    m = b.metadata
                    moves.append(
                        BatchMove(
                            b.batch_id, m.topic_id_partition, m.base_offset, m.last_offset, b.object_key,
                            m.byte_offset, pos, m.byte_size,
                        )
                    )  # fmt: skip
                    pos += m.byte_size
                if moves:
                    coord.replace_batches(f"compacted-{n}", pos, moves, -1)
                n += 1
                with lock:
                    counts["maintenance"] += 1

        def guarded(work: Callable[..., None], *args: Any) -> None:
            try:
                work(*args)
            except BaseException as exc:  # noqa: BLE001 - handed to the test thread
                errors.append(exc)

        threads = [threading.Thread(target=guarded, args=(producer, i)) for i in range(6)]
        threads.append(threading.Thread(target=guarded, args=(maintenance,)))
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        if errors:
            raise errors[0]
        assert counts["commits"] > 50 and counts["maintenance"] > 5, counts
        for p in range(PARTITIONS):
            check_log(brokers[0], p, spans[p])
        assert deadlocks_logged(postgres_server) == deadlocks_before
        print(f"\n{counts['commits'] / 4.0:.0f} commits/s from 6 threads on 2 coordinators; {counts}")
    finally:
        for coord in brokers:
            coord.close()


# --------------------------------------------------------------------------- the server goes away


def test_outage_raises_unavailable_and_the_same_coordinator_works_again(
    postgres_server: PostgresServer, postgres_url: str
) -> None:
    """While the server is stopped every call raises CoordinatorUnavailableError within about the
    connection timeout; once it is back the same coordinator commits and reads at once, and no batch
    whose commit was acknowledged is lost (a producer thread retries through the outage with its
    idempotent batches, so a commit whose answer was lost comes back as a duplicate)."""
    coord = PostgresBatchCoordinator(postgres_url, connect_timeout_s=TIMEOUT)
    acked: list[tuple[int, int, int]] = []  # (partition, base, end)
    unavailable = {"producer": 0}
    stop = threading.Event()
    errors: list[BaseException] = []

    def producer() -> None:
        seq, n = 0, 0
        try:
            while not stop.is_set():
                reqs = [batch(0, 2, 7, seq), batch(1, 2, 7, seq)]
                n += 1
                try:
                    responses = commit(coord, f"producer-{n}", reqs)
                except CoordinatorUnavailableError:
                    unavailable["producer"] += 1
                    time.sleep(0.05)
                    continue  # the same batches again, in a new object
                assert [r.errors for r in responses] == [ErrorCode.none] * 2
                for r in responses:
                    records = r.request.last_offset - r.request.base_offset + 1
                    acked.append((r.request.topic_id_partition.partition, r.assigned_base_offset, records))
                seq += 2
                time.sleep(0.01)
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            errors.append(exc)

    calls: dict[str, Callable[[], object]] = {
        "commit_file": lambda: commit(coord, "while-down", [batch(2, 1, -1, -1)]),
        "find_batches": lambda: coord.find_batches([FindBatchRequest(tp(0), 0, 1000)], 1000),
        "list_offsets": lambda: coord.list_offsets([ListOffsetsRequest(tp(0), ListOffsetsTimestamp.LATEST)]),
        "delete_records": lambda: coord.delete_records([DeleteRecordsRequest(tp(2), 0)]),
        "get_files_to_delete": coord.get_files_to_delete,
        "describe_topic": lambda: coord.describe_topic(TOPIC),
    }
    thread = threading.Thread(target=producer)
    try:
        coord.create_topic_and_partitions({CreateTopicAndPartitionsRequest(TOPIC, "orders", 3)})
        thread.start()
        time.sleep(0.5)
        postgres_server.stop()
        try:
            for name, call in calls.items():
                started = time.monotonic()
                with pytest.raises(CoordinatorUnavailableError):
                    call()
                elapsed = time.monotonic() - started
                # One wait for a connection (two for the call that first meets the dead ones).
                assert elapsed < 2 * TIMEOUT + 1.5, (name, elapsed)
        finally:
            postgres_server.start()
        # The same coordinator, at once: no reopening, no waiting.
        assert commit(coord, "after", [batch(2, 1, -1, -1)])[0].assigned_base_offset == 0
        assert coord.find_batches([FindBatchRequest(tp(2), 0, 1000)], 1000)[0].high_watermark == 1
        time.sleep(0.5)
        stop.set()
        thread.join(timeout=30)
        if errors:
            raise errors[0]
        assert unavailable["producer"] > 0  # it did meet the outage
        for partition in (0, 1):
            mine = [(base, base + records) for p, base, records in acked if p == partition]
            check_log(coord, partition, mine)
    finally:
        stop.set()
        if thread.is_alive():
            thread.join(timeout=30)
        ensure_running(postgres_server)
        coord.close()
