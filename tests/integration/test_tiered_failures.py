"""Tiered storage of classic topics (KIP-405) under broker crashes, on three real broker processes
with real clients: the leader SIGKILLed (and restarted) while an idempotent acks=all producer
writes, while it copies segments to remote storage, and while it deletes expired remote segments.

Afterwards every acknowledged record is read back exactly once at its offset (across remote and
local data), offsets are gapless, ListOffsets earliest (-2) and earliest local (-4) agree with
the RemoteLogMetadataManager, and no object under ``tiered/`` outlives the segment it belongs to.

One more pauses the leader mid-copy with SIGSTOP (the new leader deletes the copy it finds
unfinished; the old one, continued, must not leave what it uploads then), and one kills it after a
DeleteRecords into remote data (the new leader keeps the log start: it is in the shared store).

Crashes are placed with a fault-injecting object storage (``faulty+file://``, latency only): with
uploads (or deletes) slowed down, a copy (or delete) takes long enough that the test sees it in
progress in the RemoteLogMetadataManager and in the objects directory, and kills the leader then.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from shoal.faults import Fault
from shoal.objects.faulty import write_control_file
from shoal.objects.local import TEMP_PREFIX
from shoal.protocol.errors import ErrorCode
from shoal.store.factory import open_remote_log_metadata_manager_at
from shoal.tiered.api import RemoteLogSegmentMetadata, RemoteLogSegmentState, TopicIdPartition
from shoal.tiered.storage_manager import kafka_uuid
from tests.integration.conftest import _test_failed
from tests.integration.test_tiered_storage import list_offset
from tests.support.chaos_clients import wait_until
from tests.support.cluster import Cluster
from tests.support.kafka_clients import admin_client, confluent_consume

TOPIC = "tiered-chaos"
BROKER = {
    "remote.log.storage.system.enable": "true",
    "remote.log.manager.task.interval.ms": 300,
    "log.retention.check.interval.ms": 300,
    "replica.lag.time.max.ms": 3000,
}
TOPIC_CONFIG = {
    "remote.storage.enable": "true",
    "internal.segment.bytes": "16384",
    "local.retention.bytes": "40000",
    "min.insync.replicas": "2",
}
EARLIEST, LATEST, EARLIEST_LOCAL, LATEST_TIERED = -2, -1, -4, -5
STARTED = RemoteLogSegmentState.COPY_SEGMENT_STARTED
FINISHED = RemoteLogSegmentState.COPY_SEGMENT_FINISHED
DELETE_STARTED = RemoteLogSegmentState.DELETE_SEGMENT_STARTED
PAD = b"p" * 160


# ----------------------------------------------------------------------------------- fixtures


@pytest.fixture
def make_cluster(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Callable[..., Cluster]]:
    """Start three tiered brokers; ``faults=True`` puts them on ``faulty+file://`` storage whose
    control file is ``cluster.root / "faults.json"`` (no fault until the test writes one)."""
    made: list[Cluster] = []

    def make(*, faults: bool = False) -> Cluster:
        c = Cluster(tmp_path / "cluster", 3, overrides=BROKER)
        if faults:
            control = c.root / "faults.json"
            for b in c.brokers:
                b.storage_url = f"faulty+file://{c.root / 'objects'}?control={control}"
        made.append(c)
        return c.start()

    yield make
    for c in made:
        if _test_failed(request):
            print(c.log_tails())
            print("\n".join(rlm_lines(c)[-80:]))
        c.close()


def set_faults(cluster: Cluster, **faults: Fault) -> None:
    write_control_file(cluster.root / "faults.json", faults)


def rlm_lines(cluster: Cluster) -> list[str]:
    """The remote log manager's lines of every broker log (copies, deletes, failed rounds)."""
    out = []
    for b in cluster.brokers:
        try:
            text = b.log_path.read_text(errors="replace")
        except FileNotFoundError:
            continue
        out += [f"[{b.node_id}] {line}" for line in text.splitlines()
                if "remote segment" in line or "tiered storage of" in line or "copied segment" in line
                or "test harness" in line]
    return out


# ------------------------------------------------------------------------------------ clients


class AckingProducer(threading.Thread):
    """An idempotent acks=all confluent-kafka producer writing ``rate`` records/s to partition 0,
    remembering the offset each acknowledged record got."""

    def __init__(self, bootstrap: str, rate: float) -> None:
        super().__init__(daemon=True)
        self.bootstrap, self.rate = bootstrap, rate
        self.acked: dict[bytes, int] = {}
        self.failed: list[str] = []
        self.stop = threading.Event()
        self.unflushed = -1
        self.lock = threading.Lock()

    def _done(self, err: Any, msg: Any) -> None:
        with self.lock:
            if err is not None:
                self.failed.append(str(err))
            else:
                assert msg.value() not in self.acked, f"acknowledged twice: {msg.value()!r}"
                self.acked[msg.value()] = msg.offset()

    def run(self) -> None:
        from confluent_kafka import Producer

        producer = Producer({
            "bootstrap.servers": self.bootstrap, "enable.idempotence": True, "acks": "all", "linger.ms": 5,
            "message.timeout.ms": 90000, "batch.size": 8192,  # a batch must fit in a 16 KiB segment
        })
        i, due = 0, time.monotonic()
        while not self.stop.is_set():
            try:
                producer.produce(TOPIC, value=f"rec-{i:07d}-".encode() + PAD, partition=0, on_delivery=self._done)
                i += 1
            except BufferError:
                pass
            producer.poll(0)
            due += 1 / self.rate
            time.sleep(max(0.0, due - time.monotonic()))
        self.unflushed = producer.flush(100)

    def finish(self) -> None:
        self.stop.set()
        self.join(120)
        assert not self.is_alive(), "the producer did not finish"
        assert self.unflushed == 0, f"{self.unflushed} records neither acknowledged nor failed"

    def count(self) -> int:
        with self.lock:
            return len(self.acked)


# ------------------------------------------------------------------------------------ helpers


def create_topic(cluster: Cluster, **extra: str) -> None:
    from confluent_kafka.admin import NewTopic

    admin = admin_client(cluster.bootstrap)
    config = {**TOPIC_CONFIG, **extra}
    admin.create_topics([NewTopic(TOPIC, 1, 3, config=config)], operation_timeout=30)[TOPIC].result(30)
    wait_in_sync(cluster)


def wait_in_sync(cluster: Cluster, timeout: float = 60) -> None:
    cluster.wait_for(
        lambda md: TOPIC in md.topics and 0 in md.topics[TOPIC].partitions
        and md.topics[TOPIC].partitions[0].leader > 0 and sorted(md.topics[TOPIC].partitions[0].isrs) == [1, 2, 3],
        "every replica in sync", timeout=timeout,
    )


def leader(cluster: Cluster, not_on: int | None = None) -> int:
    md = cluster.wait_for(
        lambda md: TOPIC in md.topics and md.topics[TOPIC].partitions[0].leader not in (-1, not_on),
        f"a leader other than {not_on}",
    )
    return int(md.topics[TOPIC].partitions[0].leader)


def offset_on(cluster: Cluster, node_id: int, timestamp: int, timeout: float = 10) -> int:
    """ListOffsets ``timestamp`` on broker ``node_id``, asking again while it answers
    NOT_LEADER_OR_FOLLOWER (Metadata may name a new leader a moment before it has taken over)."""
    deadline = time.monotonic() + timeout
    while True:
        error, offset = list_offset(cluster.broker(node_id).port, TOPIC, timestamp)
        if error != ErrorCode.not_leader_or_follower or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert error == ErrorCode.none, f"ListOffsets {timestamp} on broker {node_id}: error {error}"
    return offset


def leader_offset(cluster: Cluster, timestamp: int) -> tuple[int, int]:
    """(leader, offset) of ListOffsets ``timestamp`` asked of the current leader (asking again
    while the leadership moves)."""
    last: Exception | None = None
    for _ in range(20):
        node = leader(cluster)
        try:
            return node, offset_on(cluster, node, timestamp)
        except (AssertionError, OSError) as exc:
            last = exc
            time.sleep(0.3)
    raise AssertionError(f"ListOffsets {timestamp} never answered by the leader: {last}")


def kill(cluster: Cluster, node_id: int) -> None:
    cluster.broker(node_id).kill()


def restart(cluster: Cluster, node_id: int) -> None:
    cluster.broker(node_id).start()
    wait_in_sync(cluster, timeout=90)


class Remote:
    """The test's view of remote storage: the RemoteLogMetadataManager and the objects directory."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.rlmm = open_remote_log_metadata_manager_at(cluster.store_url)
        self.base = cluster.root / "objects" / "tiered"
        self._tp: TopicIdPartition | None = None

    def close(self) -> None:
        self.rlmm.close()

    def tp(self) -> TopicIdPartition | None:
        if self._tp is None:
            found = [tp for tp in self.rlmm.partitions_with_segments() if tp.topic == TOPIC and tp.partition == 0]
            self._tp = found[0] if found else None
        return self._tp

    def segments(self) -> list[RemoteLogSegmentMetadata]:
        tp = self.tp()
        return [] if tp is None else self.rlmm.list_remote_log_segments(tp)

    def finished(self) -> list[RemoteLogSegmentMetadata]:
        return sorted((s for s in self.segments() if s.state == FINISHED), key=lambda s: s.start_offset)

    def objects(self) -> tuple[dict[str, set[str]], list[Path]]:
        """(segment id as in the key -> file suffixes, temp files of unfinished uploads) under ``tiered/``."""
        found: dict[str, set[str]] = {}
        temps: list[Path] = []
        if not self.base.is_dir():
            return found, temps
        for f in self.base.rglob("*"):
            if not f.is_file():
                continue
            if f.name.startswith(TEMP_PREFIX):
                temps.append(f)
                continue
            stem, _, suffix = f.name.partition(".")
            _, _, segment = stem.partition("-")
            found.setdefault(segment, set()).add(suffix)
        return found, temps

    def problems(self) -> list[str]:
        """Objects of segments the RLMM no longer lists, finished segments without their log, and
        segments still mid-copy or mid-delete (empty: remote storage is consistent)."""
        segments = self.segments()
        listed = {kafka_uuid(s.segment_id.id): s for s in segments}
        objects, temps = self.objects()
        out = [f"orphan objects of unlisted segment {sid}: {sorted(suffixes)}"
               for sid, suffixes in objects.items() if sid not in listed]
        out += [f"finished segment {s.start_offset}..{s.end_offset} ({kafka_uuid(s.segment_id.id)}) has objects "
                f"{sorted(objects.get(kafka_uuid(s.segment_id.id), ()))}, no log"
                for s in segments if s.state == FINISHED and "log" not in objects.get(kafka_uuid(s.segment_id.id), ())]
        out += [f"segment {s.start_offset}..{s.end_offset} ({kafka_uuid(s.segment_id.id)}) still {s.state.name}"
                for s in segments if s.state != FINISHED]
        out += [f"temp file of an unfinished upload: {t.relative_to(self.base)}" for t in temps]
        return out

    def wait_half_done(self, node_id: int, state: RemoteLogSegmentState,
                       timeout: float = 60) -> tuple[RemoteLogSegmentMetadata, str, list[str]]:
        """Wait until broker ``node_id`` is half way through a copy (``state`` COPY_SEGMENT_STARTED) or
        a delete (DELETE_SEGMENT_STARTED) of a segment: some of its objects there, its log not (the
        log is uploaded last and deleted first). Returns (segment, its id in keys, its objects)."""
        caught: list[Any] = []

        def half_done() -> bool:
            objects, _ = self.objects()
            for s in self.segments():
                sid = kafka_uuid(s.segment_id.id)
                if s.state == state and s.broker_id == node_id and objects.get(sid) and "log" not in objects[sid]:
                    caught[:] = [s, sid, sorted(objects[sid])]
                    return True
            return False

        wait_until(half_done, f"broker {node_id} half way through a segment's {state.name}", timeout)
        segment, sid, parts = caught
        return segment, sid, parts

    def wait_consistent(self, timeout: float = 40) -> None:
        last: list[str] = []

        def clean() -> bool:
            nonlocal last
            last = self.problems()
            return not last

        try:
            wait_until(clean, "remote storage consistent with the RemoteLogMetadataManager", timeout)
        except AssertionError as exc:
            raise AssertionError(f"{exc}: {last[:20]}") from None


def check_read_back(cluster: Cluster, producer: AckingProducer, start: int) -> dict[str, int]:
    """Read partition 0 from the beginning: offsets ``start``..end gapless, every acknowledged record at
    or above ``start`` once, at the offset it was acknowledged with."""
    node, end = leader_offset(cluster, LATEST)
    records = confluent_consume(cluster.bootstrap, TOPIC, [0], end - start, timeout=120)
    offsets = [r.offset for r in records]
    assert offsets == list(range(start, end)), (
        f"offsets from {start} to {end} not gapless/once: first {offsets[:3]}, last {offsets[-3:]}, "
        f"{len(offsets)} records"
    )
    at = {r.value: r.offset for r in records}
    counts = Counter(r.value for r in records)
    doubled = [v for v, n in counts.items() if n > 1]
    wanted = {v: o for v, o in producer.acked.items() if o >= start}
    lost = [v for v in wanted if v not in at]
    moved = [(v, o, at[v]) for v, o in wanted.items() if v in at and o != at[v]]
    assert not doubled, f"{len(doubled)} records read twice, e.g. {doubled[:3]}"
    assert not lost, f"{len(lost)} acknowledged records lost, e.g. {lost[:3]}"
    assert not moved, f"{len(moved)} records not at their acknowledged offset, e.g. {moved[:3]}"
    return {"leader": node, "end": end, "read": len(records), "acknowledged": len(producer.acked),
            "failed": len(producer.failed), "failures": Counter(producer.failed).most_common(3)}


# -------------------------------------------------------------------------------------- tests


@pytest.mark.timeout(240)
def test_leader_sigkills_lose_and_duplicate_nothing_across_remote_and_local_data(
    make_cluster: Callable[..., Cluster],
) -> None:
    """The leader of an RF 3 tiered partition is SIGKILLed and restarted three times while an
    idempotent acks=all producer writes: every acknowledged record is read from offset 0 once at
    its offset, ListOffsets earliest stays 0 while earliest local is past 0 on the leader."""
    cluster = make_cluster()
    create_topic(cluster)
    remote = Remote(cluster)
    producer = AckingProducer(cluster.bootstrap, rate=400)
    producer.start()
    kills: list[str] = []
    try:
        wait_until(lambda: len(remote.finished()) >= 3, "segments copied before the first kill", 60)
        for round_ in range(3):
            victim = leader(cluster)
            copied = len(remote.finished())
            kill(cluster, victim)
            successor = leader(cluster, not_on=victim)
            time.sleep(1 + round_)
            restart(cluster, victim)
            kills.append(f"SIGKILL {victim} (new leader {successor}, {copied} segments copied)")
            acked = producer.count()
            wait_until(lambda n=acked: producer.count() > n + 200, "the producer going on after the restart", 60)
            wait_until(lambda n=copied: len(remote.finished()) > n, "the new leader copying", 60)
    finally:
        producer.finish()
    wait_in_sync(cluster)
    node, local_start = leader_offset(cluster, EARLIEST_LOCAL)
    if local_start == 0:  # the last segments need a round to be copied and deleted locally
        wait_until(lambda: leader_offset(cluster, EARLIEST_LOCAL)[1] > 0, "local segments deleted", 30)
        node, local_start = leader_offset(cluster, EARLIEST_LOCAL)
    summary = check_read_back(cluster, producer, 0)
    earliest = leader_offset(cluster, EARLIEST)
    tiered = leader_offset(cluster, LATEST_TIERED)[1]
    remote.wait_consistent()
    remote.close()
    print(f"{'; '.join(kills)}\n{summary}, earliest {earliest}, earliest local {local_start} on {node}, "
          f"latest tiered {tiered}")
    assert earliest[1] == 0, f"ListOffsets earliest on {earliest[0]}: {earliest[1]}"
    assert 0 < local_start <= tiered + 1, (local_start, tiered)
    assert len(producer.acked) > 2000, summary


@pytest.mark.timeout(240)
def test_leader_killed_mid_copy_leaves_no_lost_duplicated_or_orphaned_segment(
    make_cluster: Callable[..., Cluster],
) -> None:
    """With slow uploads, the leader is SIGKILLed while a copy is visibly half done (its segment
    COPY_SEGMENT_STARTED, some of its objects uploaded, the log not yet), then restarted; twice.
    Afterwards the records read from 0 equal those acknowledged, and every object under
    ``tiered/`` belongs to a segment the RLMM lists, every finished segment has its log."""
    cluster = make_cluster(faults=True)
    create_topic(cluster)
    remote = Remote(cluster)
    producer = AckingProducer(cluster.bootstrap, rate=250)
    producer.start()
    interrupted: list[tuple[int, str, list[str]]] = []
    try:
        wait_until(lambda: len(remote.finished()) >= 2, "segments copied before the faults", 60)
        set_faults(cluster, upload=Fault(latency_ms=250))
        for _ in range(2):
            victim = leader(cluster)
            segment, sid, parts = remote.wait_half_done(victim, STARTED)
            kill(cluster, victim)
            interrupted.append((segment.start_offset, sid, parts))
            still = [s for s in remote.segments() if kafka_uuid(s.segment_id.id) == sid]
            assert still and still[0].state == STARTED, f"the interrupted copy {sid}: {still}"
            leader(cluster, not_on=victim)
            time.sleep(1)
            restart(cluster, victim)
        set_faults(cluster)
    finally:
        set_faults(cluster)
        producer.finish()
    wait_in_sync(cluster)
    # The leader deletes what the crashes left COPY_SEGMENT_STARTED and copies its backlog.
    remote.wait_consistent(60)
    listed = {kafka_uuid(s.segment_id.id) for s in remote.segments()}
    assert not [sid for _, sid, _ in interrupted if sid in listed], "an interrupted copy is still listed"
    finished = remote.finished()
    assert finished[0].start_offset == 0, [(s.start_offset, s.end_offset) for s in finished]
    wait_until(lambda: leader_offset(cluster, EARLIEST_LOCAL)[1] > 0, "local segments deleted after copies", 30)
    summary = check_read_back(cluster, producer, 0)
    assert leader_offset(cluster, EARLIEST)[1] == 0
    remote.close()
    print(f"interrupted copies (start offset, segment, objects there at the kill): {interrupted}\n{summary}, "
          f"finished segments {[(s.start_offset, s.end_offset, s.broker_id) for s in finished]}, "
          f"earliest local {leader_offset(cluster, EARLIEST_LOCAL)}, latest tiered {leader_offset(cluster, LATEST_TIERED)}")
    assert len(producer.acked) > 1000, summary


@pytest.mark.timeout(240)
def test_leader_killed_mid_remote_delete_leaves_no_orphans_and_a_consistent_log_start(
    make_cluster: Callable[..., Cluster],
) -> None:
    """A small ``retention.bytes`` (IncrementalAlterConfigs) expires remote segments; with slow
    deletes the leader is SIGKILLed while a segment is DELETE_SEGMENT_STARTED with its log object
    deleted but its indexes not yet, then restarted; twice. Afterwards no object of a segment the
    RLMM no longer lists remains, ListOffsets earliest on the leader is the first finished
    segment's start (past 0), and the records from there on are the acknowledged ones, gapless."""
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

    cluster = make_cluster(faults=True)
    create_topic(cluster)
    remote = Remote(cluster)
    producer = AckingProducer(cluster.bootstrap, rate=300)
    producer.start()
    interrupted: list[tuple[int, str, list[str]]] = []
    earliest_seen: list[tuple[int, int]] = []
    try:
        wait_until(lambda: len(remote.finished()) >= 12, "segments copied before retention", 90)
        assert leader_offset(cluster, EARLIEST)[1] == 0
        set_faults(cluster, delete=Fault(latency_ms=600))
        admin = admin_client(cluster.bootstrap)
        resource = ConfigResource("TOPIC", TOPIC, incremental_configs=[
            ConfigEntry("retention.bytes", "120000", incremental_operation=AlterConfigOpType.SET)])
        admin.incremental_alter_configs([resource])[resource].result(30)
        for _ in range(2):
            victim = leader(cluster)
            segment, sid, parts = remote.wait_half_done(victim, DELETE_STARTED)
            kill(cluster, victim)
            interrupted.append((segment.start_offset, sid, parts))
            new = leader(cluster, not_on=victim)
            earliest_seen.append((new, offset_on(cluster, new, EARLIEST)))
            time.sleep(1)
            restart(cluster, victim)
            earliest_seen.append(leader_offset(cluster, EARLIEST))
    finally:
        set_faults(cluster)
        producer.finish()
    wait_in_sync(cluster)
    remote.wait_consistent(60)
    listed = {kafka_uuid(s.segment_id.id) for s in remote.segments()}
    assert not [sid for _, sid, _ in interrupted if sid in listed], "an interrupted delete is still listed"

    def settled() -> bool:  # retention done: the remote segments stay as they are for a few rounds
        before = [kafka_uuid(s.segment_id.id) for s in remote.finished()]
        time.sleep(1.5)
        return before == [kafka_uuid(s.segment_id.id) for s in remote.finished()] and not remote.problems()

    wait_until(settled, "remote retention settled", 40)
    finished = remote.finished()
    node, earliest = leader_offset(cluster, EARLIEST)
    summary = check_read_back(cluster, producer, earliest)
    remote.close()
    print(f"interrupted deletes (start offset, segment, objects left at the kill): {interrupted}\n"
          f"earliest over time (node, offset): {earliest_seen}; finally {earliest} on {node}; "
          f"finished segments {[(s.start_offset, s.end_offset) for s in finished]}\n{summary}")
    assert finished, "retention deleted every remote segment"
    assert earliest > 0, "retention.bytes expired nothing"
    assert earliest == finished[0].start_offset, (earliest, [(s.start_offset, s.end_offset) for s in finished])
    seen = [offset for _, offset in earliest_seen] + [earliest]
    assert seen == sorted(seen), f"ListOffsets earliest went backwards: {earliest_seen}, then {earliest}"


@pytest.mark.timeout(180)
def test_leader_paused_mid_copy_leaves_no_orphans_when_it_resumes(make_cluster: Callable[..., Cluster]) -> None:
    """The leader is SIGSTOPped half way through a copy; the new leader deletes the copy it finds
    COPY_SEGMENT_STARTED (the old leader's, not its own); then the old leader is continued and
    its copy carries on where it stopped. Whatever it uploads then must not stay in remote storage
    without a segment the RLMM lists."""
    cluster = make_cluster(faults=True)
    create_topic(cluster)
    remote = Remote(cluster)
    producer = AckingProducer(cluster.bootstrap, rate=250)
    producer.start()
    try:
        wait_until(lambda: len(remote.finished()) >= 2, "segments copied before the faults", 60)
        set_faults(cluster, upload=Fault(latency_ms=400))
        victim = leader(cluster)
        segment, sid, parts = remote.wait_half_done(victim, STARTED)
        cluster.pause(victim)
        try:
            set_faults(cluster)
            successor = leader(cluster, not_on=victim)
            wait_until(lambda: sid not in {kafka_uuid(s.segment_id.id) for s in remote.segments()},
                       f"the new leader {successor} deleting the stale copy {sid}", 30)
            deleted = sorted(remote.objects()[0].get(sid, ()))
        finally:
            cluster.resume(victim)
        wait_in_sync(cluster)
    finally:
        set_faults(cluster)
        producer.finish()
    summary = check_read_back(cluster, producer, 0)
    print(f"broker {victim} paused copying {segment.start_offset}..{segment.end_offset} ({sid}) with {parts} "
          f"uploaded; broker {successor} deleted it, leaving {deleted}\n{summary}")
    try:
        remote.wait_consistent(20)
    finally:
        print("\n".join(line for line in rlm_lines(cluster) if "failed" in line))
        remote.close()


@pytest.mark.timeout(120)
def test_delete_records_into_remote_data_survives_a_leader_kill(make_cluster: Callable[..., Cluster]) -> None:
    """DeleteRecords to an offset inside a remote-only segment moves the log start there (KIP-107);
    after the leader is SIGKILLed, the new leader's ListOffsets earliest and a consumer reading
    from the beginning must not go back below it."""
    from confluent_kafka import TopicPartition

    cluster = make_cluster()
    create_topic(cluster)
    remote = Remote(cluster)
    producer = AckingProducer(cluster.bootstrap, rate=400)
    producer.start()
    try:
        wait_until(lambda: len(remote.finished()) >= 6, "segments copied", 60)
    finally:
        producer.finish()
    wait_until(lambda: leader_offset(cluster, EARLIEST_LOCAL)[1] > remote.finished()[2].end_offset + 1,
               "the third remote segment deleted locally", 30)
    third = remote.finished()[2]
    remote.close()
    target = (third.start_offset + third.end_offset) // 2
    admin = admin_client(cluster.bootstrap)
    request = TopicPartition(TOPIC, 0, target)
    assert admin.delete_records([request])[request].result(30).low_watermark == target
    victim, before = leader_offset(cluster, EARLIEST)
    first_read = confluent_consume(cluster.bootstrap, TOPIC, [0], 1, timeout=30, settle=0)[0].offset
    assert (before, first_read) == (target, target), "DeleteRecords into remote data on the leader"
    kill(cluster, victim)
    successor = leader(cluster, not_on=victim)
    time.sleep(1)
    after = offset_on(cluster, successor, EARLIEST)
    reread = confluent_consume(cluster.bootstrap, TOPIC, [0], 1, timeout=30, settle=0)[0].offset
    print(f"DeleteRecords to {target} in remote segment {third.start_offset}..{third.end_offset}: earliest "
          f"{before}, first record read {first_read} on {victim}; after SIGKILL of {victim}: earliest {after} on "
          f"{successor}, first record read {reread}")
    assert after >= target, f"ListOffsets earliest went back from {target} to {after} after a leader change"
    assert reread >= target, f"records below the DeleteRecords offset {target} read again from {reread}"
