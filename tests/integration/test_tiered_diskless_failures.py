"""A diskless topic moved to tiered storage (KIP-1163) under broker crashes, on three real broker
processes with real clients: the partition's leader (the broker that builds and copies its
segments) is SIGKILLed while an idempotent acks=all producer writes and while a copy is visibly
half done, then restarted.

Afterwards every acknowledged record is read back from offset 0 exactly once at its offset, across
the tiered segments and the Batch Coordinator's batches; the finished remote segments cover the
log from 0 without a gap or an overlap (every leader cuts at the highest copied offset); nothing
is left mid-copy and no object under ``tiered/`` outlives its segment; the coordinator holds only
the batches not yet tiered. The helpers are those of the classic topic's crash tests.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from shoal.faults import Fault
from shoal.tiered.storage_manager import kafka_uuid
from tests.integration.test_tiered_failures import (  # noqa: F401 (make_cluster is a fixture)
    DELETE_STARTED,
    EARLIEST,
    EARLIEST_LOCAL,
    STARTED,
    TOPIC,
    TOPIC_CONFIG,
    AckingProducer,
    Remote,
    check_read_back,
    kill,
    leader,
    leader_offset,
    make_cluster,
    restart,
    set_faults,
    wait_in_sync,
)
from tests.support.chaos_clients import wait_until
from tests.support.cluster import Cluster
from tests.support.kafka_clients import admin_client


def create_diskless_topic(cluster: Cluster) -> None:
    from confluent_kafka.admin import NewTopic

    admin = admin_client(cluster.bootstrap)
    config = {**TOPIC_CONFIG, "diskless.enable": "true"}
    admin.create_topics([NewTopic(TOPIC, 1, 3, config=config)], operation_timeout=30)[TOPIC].result(30)
    wait_in_sync(cluster)


def contiguous(remote: Remote) -> list[tuple[int, int]]:
    """The finished segments' (start, end), asserting they cover 0.. without a gap or an overlap."""
    cuts = [(s.start_offset, s.end_offset) for s in remote.finished()]
    assert cuts and cuts[0][0] == 0, cuts
    for (_, end), (start, _) in zip(cuts, cuts[1:], strict=False):
        assert start == end + 1, f"remote segments not contiguous: {cuts}"
    return cuts


@pytest.mark.timeout(300)
def test_diskless_leader_killed_mid_copy_loses_and_duplicates_nothing(
    make_cluster: Callable[..., Cluster],  # noqa: F811 (the imported fixture)
) -> None:
    cluster = make_cluster(faults=True)
    create_diskless_topic(cluster)
    remote = Remote(cluster)
    producer = AckingProducer(cluster.bootstrap, rate=250)
    producer.start()
    interrupted: list[tuple[int, int, str, list[str]]] = []
    try:
        wait_until(lambda: len(remote.finished()) >= 2, "segments copied before the faults", 60)
        set_faults(cluster, upload=Fault(latency_ms=250))
        for _ in range(2):
            victim = leader(cluster)
            segment, sid, parts = remote.wait_half_done(victim, STARTED)
            kill(cluster, victim)
            interrupted.append((victim, segment.start_offset, sid, parts))
            leader(cluster, not_on=victim)
            time.sleep(1)
            restart(cluster, victim)
        set_faults(cluster)
        acked = producer.count()
        wait_until(lambda: producer.count() > acked + 300, "the producer going on after the restarts", 60)
    finally:
        set_faults(cluster)
        producer.finish()
    wait_in_sync(cluster)
    end = leader_offset(cluster, -1)[1]
    # The new leader deletes the copies the crashes left COPY_SEGMENT_STARTED and copies the backlog.
    remote.wait_consistent(60)
    wait_until(lambda: remote.finished() and remote.finished()[-1].end_offset >= end - 400,
               "the backlog copied", 60)
    listed = {kafka_uuid(s.segment_id.id) for s in remote.segments()}
    assert not [sid for _, _, sid, _ in interrupted if sid in listed], "an interrupted copy is still listed"
    cuts = contiguous(remote)
    summary = check_read_back(cluster, producer, 0)
    # The coordinator keeps no batch a finished copy holds (it drops them right after each copy).
    wait_until(lambda: leader_offset(cluster, EARLIEST_LOCAL)[1] > remote.finished()[-1].end_offset,
               "the coordinator holding only batches not yet tiered", 30)
    node, local_start = leader_offset(cluster, EARLIEST_LOCAL)
    earliest = leader_offset(cluster, EARLIEST)[1]
    remote.close()
    print(f"interrupted copies (leader, start offset, segment, objects there at the kill): {interrupted}\n{summary}, "
          f"{len(cuts)} finished segments up to {cuts[-1][1]}, earliest {earliest}, earliest local {local_start} "
          f"on {node}")
    assert earliest == 0
    assert len(producer.acked) > 1000, summary


@pytest.mark.timeout(300)
def test_diskless_leader_killed_mid_remote_delete_keeps_the_log_start_consistent(
    make_cluster: Callable[..., Cluster],  # noqa: F811 (the imported fixture)
) -> None:
    """A small ``retention.bytes`` expires tiered segments of a diskless topic; with slow deletes
    the leader is SIGKILLed while a segment is DELETE_SEGMENT_STARTED, then restarted; twice. The
    coordinator's log start moves before any segment is deleted, so ListOffsets earliest never
    names an offset whose segment is gone, never goes back, and the records from it on are the
    acknowledged ones, gapless; no object outlives its segment."""
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

    cluster = make_cluster(faults=True)
    create_diskless_topic(cluster)
    remote = Remote(cluster)
    producer = AckingProducer(cluster.bootstrap, rate=300)
    producer.start()
    interrupted: list[tuple[int, str, list[str]]] = []
    earliest_seen: list[tuple[int, int]] = []
    try:
        wait_until(lambda: len(remote.finished()) >= 12, "segments copied before retention", 90)
        set_faults(cluster, delete=Fault(latency_ms=600))
        admin = admin_client(cluster.bootstrap)
        resource = ConfigResource("TOPIC", TOPIC, incremental_configs=[
            ConfigEntry("retention.bytes", "120000", incremental_operation=AlterConfigOpType.SET)])
        admin.incremental_alter_configs([resource])[resource].result(30)
        for _ in range(2):
            victim = leader(cluster)
            segment, sid, parts = remote.wait_half_done(victim, DELETE_STARTED)
            earliest_seen.append(leader_offset(cluster, EARLIEST))
            assert earliest_seen[-1][1] > segment.end_offset, (
                f"earliest {earliest_seen[-1]} while segment {segment.start_offset}..{segment.end_offset} is deleted")
            kill(cluster, victim)
            interrupted.append((segment.start_offset, sid, parts))
            leader(cluster, not_on=victim)
            earliest_seen.append(leader_offset(cluster, EARLIEST))
            time.sleep(1)
            restart(cluster, victim)
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
    assert finished and earliest > 0, "retention.bytes expired nothing, or everything"
    assert earliest == finished[0].start_offset, (earliest, [(s.start_offset, s.end_offset) for s in finished])
    seen = [offset for _, offset in earliest_seen] + [earliest]
    assert seen == sorted(seen), f"ListOffsets earliest went backwards: {earliest_seen}, then {earliest}"
