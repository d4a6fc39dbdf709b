"""Consumer groups (the classic protocol) through confluent-kafka / librdkafka 2.16.

Group members run in their own processes (tests/support/groups_confluent.py run as a
module) so one can be SIGKILLed; each writes what it was assigned, every record it processed
and every commit that succeeded to its own log, and commits synchronously after each batch.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import OFFSET_INVALID, KafkaError, KafkaException, TopicPartition

from tests.integration.conftest import BrokerFactory
from tests.support.broker import BrokerProcess
from tests.support.groups import (
    FAST_GROUP_OVERRIDES,
    balanced,
    check_group_consumption,
    end_offsets,
    expected_from_sent,
    last_commits,
    merge_expected,
    wait_until,
)
from tests.support.groups_confluent import (
    BackgroundProducer,
    ConfluentConsumerProcess,
    confluent_committed,
    describe_processes,
)
from tests.support.kafka_clients import (
    admin_client,
    confluent_consume,
    confluent_consumer,
    confluent_produce,
    create_diskless_topic,
)
from tests.support.workload import make_workload


def _group(topic: str) -> str:
    return f"grp-{topic}"


# ---------------------------------------------------------------------------------------------
# 1. Three members split six partitions; one is SIGKILLed; nothing is lost
# ---------------------------------------------------------------------------------------------

KILL_SESSION_TIMEOUT_MS = 6000


@pytest.mark.timeout(360)
def test_three_members_split_partitions_and_survivors_take_over_after_sigkill(
    broker_factory: BrokerFactory, topic_name: str, tmp_path: Path
) -> None:
    """Three members with 2 partitions each while a producer runs; SIGKILL one; the two others
    take its partitions after its session times out; when the producer stops and they drain,
    every produced record was processed, and only the killed member's uncommitted tail twice."""
    partitions = 6
    # The broker's default group.initial.rebalance.delay.ms (3000): the three join one group.
    broker = broker_factory()
    create_diskless_topic(broker.bootstrap, topic_name, partitions=partitions)
    group = _group(topic_name)
    producer = BackgroundProducer(broker.bootstrap, topic_name, partitions, rate=150)
    consumers = [
        ConfluentConsumerProcess(
            f"member{i}",
            tmp_path,
            broker.bootstrap,
            topic_name,
            group,
            session_timeout_ms=KILL_SESSION_TIMEOUT_MS,
            max_batch=50,
            process_sleep=0.3,
        )
        for i in range(3)
    ]
    victim, survivors = consumers[1], [consumers[0], consumers[2]]

    def describe() -> str:
        return f"producer: {producer.acked()} acked of {producer.produced}\n" + describe_processes(consumers)

    try:
        producer.start()
        for c in consumers:
            c.start()
        wait_until(
            lambda: balanced([c.log() for c in consumers], partitions, each=2),
            90,
            "three members holding 2 partitions each",
            describe,
        )
        settled = time.monotonic()
        # Each one processes and commits on its partitions.
        wait_until(
            lambda: all(any(ev.t > settled for ev in c.log().commits) for c in consumers),
            60,
            "every member committing after the group settled",
            describe,
        )

        victim_partitions = victim.log().assignment

        def mid_batch() -> bool:
            """The victim logged records it has not committed yet (it is 'processing' them)."""
            events = victim.log().events
            last_commit = max((i for i, ev in enumerate(events) if ev.kind == "C"), default=-1)
            return any(ev.kind == "M" for ev in events[last_commit + 1 :])

        wait_until(mid_batch, 60, f"{victim.name} in the middle of a batch", describe, interval=0.02)
        victim.kill()
        killed = time.monotonic()
        tail = victim.log().events
        tail_start = max((i for i, ev in enumerate(tail) if ev.kind == "C"), default=-1) + 1
        print(
            f"\n{victim.name} SIGKILLed with {sum(ev.kind == 'M' for ev in tail[tail_start:])} records uncommitted"
        )
        takeover = wait_until(
            lambda: balanced([c.log() for c in survivors], partitions, each=3),
            KILL_SESSION_TIMEOUT_MS / 1000 + 30,
            f"survivors holding 3 partitions each after {victim.name} (partitions "
            f"{sorted(victim_partitions)}) was SIGKILLed",
            describe,
        )
        print(f"takeover {takeover:.1f}s after SIGKILL (session.timeout.ms {KILL_SESSION_TIMEOUT_MS})")
        for c in survivors:
            early = [ev for ev in c.log().changes(killed) if ev.kind == "L"]
            assert not early, f"{c.name} lost partitions after the kill: {early}"
        # The survivors process new records on the partitions they took over.
        wait_until(
            lambda: (
                {ev.partition for c in survivors for ev in c.log().processed if ev.t > killed + takeover}
                >= set(victim_partitions)
            ),
            60,
            f"survivors processing {victim.name}'s partitions",
            describe,
        )

        expected = producer.stop()
        ends = end_offsets(expected, partitions)
        wait_until(
            lambda: last_commits(c.log() for c in survivors) == ends,
            120,
            f"survivors committing up to the end offsets {ends}",
            describe,
        )
        assert confluent_committed(broker.bootstrap, group, topic_name, range(partitions)) == ends

        for c in survivors:
            rc = c.stop()
            assert rc == 0, f"{c.name} exited {rc}\n{c.stderr_tail()}"
        logs = [c.log() for c in consumers]
        counts = check_group_consumption(logs, expected, duplicates_only_after={victim.name})
        print(f"consumption: {counts}")
        for log in logs:
            if log.name == victim.name:
                continue
            commit_errors = [ev.text for ev in log.errors if ev.text.startswith("commit")]
            assert not commit_errors, f"{log.name}: synchronous commits failed: {commit_errors[:5]}"
    finally:
        producer.halt()
        for c in consumers:
            c.close()


# ---------------------------------------------------------------------------------------------
# 3. Static membership: a restart with the same group.instance.id disturbs nobody
# ---------------------------------------------------------------------------------------------

STATIC_SESSION_TIMEOUT_MS = 10000


@pytest.mark.timeout(240)
@pytest.mark.parametrize("how", ["close", "sigkill"])
def test_static_member_restart_gets_its_partitions_back_without_a_rebalance(
    broker_factory: BrokerFactory, topic_name: str, tmp_path: Path, how: str
) -> None:
    """A static member (group.instance.id) goes away without LeaveGroup (librdkafka's close()
    of a static member doesn't send one; SIGKILL can't) and a new process with the same
    instance id joins within the session timeout: it gets the same partitions, resumes from
    the committed offsets, and the other member sees no revoke/assign callback at all, even
    after the old member's session timeout has passed."""
    partitions = 4
    broker = broker_factory(overrides=FAST_GROUP_OVERRIDES)
    create_diskless_topic(broker.bootstrap, topic_name, partitions=partitions)
    group = _group(topic_name)
    sent1 = make_workload(400, partitions, "static1", seed=5)
    expected1 = expected_from_sent(sent1)

    def member(name: str, instance_id: str | None) -> ConfluentConsumerProcess:
        return ConfluentConsumerProcess(
            name,
            tmp_path,
            broker.bootstrap,
            topic_name,
            group,
            session_timeout_ms=STATIC_SESSION_TIMEOUT_MS,
            instance_id=instance_id,
        )

    instance_id = f"static-b-{uuid.uuid4().hex[:6]}"
    a = member("a", None)
    b = member("b", instance_id)
    b2 = member("b-again", instance_id)
    everyone = [a, b, b2]

    def describe() -> str:
        return describe_processes(everyone)

    try:
        a.start()  # first in: the group leader
        wait_until(
            lambda: a.log().assignment == set(range(partitions)), 60, "a holding every partition", describe
        )
        b.start()
        wait_until(
            lambda: balanced([a.log(), b.log()], partitions, each=2), 60, "a and b holding 2 each", describe
        )
        confluent_produce(broker.bootstrap, topic_name, sent1)  # now: b processes and commits its share
        ends1 = end_offsets(expected1, partitions)
        wait_until(
            lambda: last_commits([a.log(), b.log()]) == ends1, 60, f"a and b committing {ends1}", describe
        )
        settled = time.monotonic()
        b_partitions = b.log().assignment
        assert {ev.partition for ev in b.log().commits} == set(b_partitions), describe()

        if how == "close":
            rc = b.stop()
            assert rc == 0, f"b exited {rc}\n{b.stderr_tail()}"
        else:
            b.kill()
        gone = time.monotonic()
        b2.start()
        wait_until(
            lambda: bool(b2.log().changes()),
            STATIC_SESSION_TIMEOUT_MS / 1000 + 20,
            f"{b2.name} (group.instance.id {instance_id}) getting an assignment",
            describe,
        )
        first = b2.log().changes()[0]
        assert first.kind == "A" and set(first.partitions) == set(b_partitions), (
            f"{b2.name} should get b's partitions {sorted(b_partitions)} back, first callback: {first}\n{describe()}"
        )

        # Both still consume: new records on every partition, from the committed offsets.
        sent2 = make_workload(400, partitions, "static2", seed=6, first_seq=len(sent1))
        confluent_produce(broker.bootstrap, topic_name, sent2)
        expected = merge_expected(expected1, expected_from_sent(sent2, ends1))
        ends = end_offsets(expected, partitions)
        wait_until(
            lambda: last_commits([a.log(), b.log(), b2.log()]) == ends,
            60,
            f"a and {b2.name} committing {ends}",
            describe,
        )
        # Past the old member's session timeout: still nothing happened to a (or b2).
        quiet_until = gone + STATIC_SESSION_TIMEOUT_MS / 1000 + 3
        while time.monotonic() < quiet_until:
            assert not a.log().changes(settled), f"a saw callbacks after b's restart\n{describe()}"
            time.sleep(0.5)
        assert not a.log().changes(settled), f"a saw callbacks after b's restart\n{describe()}"
        assert len(b2.log().changes()) == 1, f"{b2.name} saw more than its first assignment\n{describe()}"

        for c in (a, b2):
            rc = c.stop()
            assert rc == 0, f"{c.name} exited {rc}\n{c.stderr_tail()}"
        check_group_consumption([a.log(), b.log(), b2.log()], expected, allow_duplicates=False)
    finally:
        for c in everyone:
            c.close()


# ---------------------------------------------------------------------------------------------
# 4. The group across broker restarts
# ---------------------------------------------------------------------------------------------


@pytest.mark.timeout(360)
@pytest.mark.parametrize("clean", [True, False], ids=["sigterm", "sigkill"])
def test_group_resumes_from_committed_offsets_after_broker_restart(
    broker_factory: BrokerFactory, topic_name: str, tmp_path: Path, clean: bool
) -> None:
    """Part 1: two members consume while the broker restarts under them (SIGTERM or SIGKILL):
    every commit acknowledged before the restart is still there after it, and they go on from
    there (a record is re-processed only at or above the last commit, none is skipped).
    Part 2: with the group stopped, the broker restarts again; the committed offsets are
    exactly what they were, and a fresh member processes exactly the records produced since."""
    partitions = 4
    broker = broker_factory(overrides=FAST_GROUP_OVERRIDES)
    create_diskless_topic(broker.bootstrap, topic_name, partitions=partitions)
    group = _group(topic_name)

    def restart(b: BrokerProcess) -> None:
        if clean:
            b.stop()
        else:
            b.kill()

    sent1 = make_workload(4000, partitions, "restart1", seed=7)
    confluent_produce(broker.bootstrap, topic_name, sent1)
    expected1 = expected_from_sent(sent1)
    members = [
        ConfluentConsumerProcess(
            f"m{i}",
            tmp_path,
            broker.bootstrap,
            topic_name,
            group,
            session_timeout_ms=10000,
            max_batch=20,
            batch_sleep=0.05,
        )
        for i in range(2)
    ]
    fresh = ConfluentConsumerProcess(
        "fresh", tmp_path, broker.bootstrap, topic_name, group, session_timeout_ms=10000
    )
    everyone = [*members, fresh]

    def describe() -> str:
        return describe_processes(everyone)

    try:
        for m in members:
            m.start()
        wait_until(
            lambda: balanced([m.log() for m in members], partitions, each=2),
            60,
            "two members, 2 each",
            describe,
        )
        wait_until(
            lambda: (
                sum(len(m.log().processed) for m in members) >= 1000 and all(m.log().commits for m in members)
            ),
            90,
            "members processing and committing",
            describe,
        )
        restart(broker)
        time.sleep(1.0)  # commit acknowledgements received before the broker died are logged
        before = last_commits(m.log() for m in members)
        print(
            f"\nbroker {'stopped' if clean else 'killed'} after {sum(len(m.log().processed) for m in members)} "
            f"of {len(sent1)} records processed, commits so far {before}"
        )
        broker.start()
        after = confluent_committed(broker.bootstrap, group, topic_name, range(partitions))
        lost = {p: (o, after.get(p)) for p, o in before.items() if after.get(p, OFFSET_INVALID) < o}
        assert not lost, f"acknowledged commits went back after the restart (partition: (acked, now)): {lost}"

        sent2 = make_workload(2000, partitions, "restart2", seed=8, first_seq=len(sent1))
        confluent_produce(broker.bootstrap, topic_name, sent2)
        expected12 = merge_expected(expected1, expected_from_sent(sent2, end_offsets(expected1, partitions)))
        ends12 = end_offsets(expected12, partitions)
        wait_until(
            lambda: last_commits(m.log() for m in members) == ends12,
            150,
            f"members committing {ends12} after the broker restart",
            describe,
        )
        for m in members:
            rc = m.stop()
            assert rc == 0, f"{m.name} exited {rc}\n{m.stderr_tail()}"
        counts = check_group_consumption([m.log() for m in members], expected12)
        errors = [ev.text for m in members for ev in m.log().errors]
        print(f"across the restart: {counts}; {len(errors)} client errors, e.g. {errors[:3]}")

        # Part 2: nobody in the group while the broker restarts.
        assert confluent_committed(broker.bootstrap, group, topic_name, range(partitions)) == ends12
        restart(broker)
        broker.start()
        assert confluent_committed(broker.bootstrap, group, topic_name, range(partitions)) == ends12, (
            "committed offsets changed across a broker restart with the group stopped"
        )
        sent3 = make_workload(1000, partitions, "restart3", seed=9, first_seq=len(sent1) + len(sent2))
        confluent_produce(broker.bootstrap, topic_name, sent3)
        expected3 = expected_from_sent(sent3, ends12)
        ends3 = end_offsets(merge_expected(expected12, expected3), partitions)
        fresh.start()
        wait_until(
            lambda: last_commits([fresh.log()]) == ends3, 90, f"fresh member committing {ends3}", describe
        )
        rc = fresh.stop()
        assert rc == 0, f"fresh exited {rc}\n{fresh.stderr_tail()}"
        # Exactly the new records: nothing below the committed offsets, nothing skipped.
        check_group_consumption([fresh.log()], expected3, allow_duplicates=False)
    finally:
        for c in everyone:
            c.close()


# ---------------------------------------------------------------------------------------------
# 5. Bad input through the client; the broker keeps serving
# ---------------------------------------------------------------------------------------------


@pytest.mark.timeout(120)
def test_commit_to_missing_partition_and_committed_of_unknown_group(
    broker_factory: BrokerFactory, topic_name: str
) -> None:
    partitions = 4
    broker = broker_factory(overrides=FAST_GROUP_OVERRIDES)
    create_diskless_topic(broker.bootstrap, topic_name, partitions=partitions)
    sent = make_workload(40, partitions, "bad", seed=10)
    confluent_produce(broker.bootstrap, topic_name, sent)

    # committed() for a group nobody ever used: no offsets (-1001), no error.
    unknown = confluent_consumer(broker.bootstrap, **{"group.id": f"never-used-{uuid.uuid4().hex[:8]}"})
    try:
        result = unknown.committed([TopicPartition(topic_name, p) for p in range(partitions)], timeout=30)
        assert [(tp.partition, tp.offset, tp.error) for tp in result] == [
            (p, OFFSET_INVALID, None) for p in range(partitions)
        ]
    finally:
        unknown.close()

    group = _group(topic_name)
    consumer = confluent_consumer(broker.bootstrap, **{"group.id": group})
    try:
        bad = [
            [TopicPartition(topic_name, 99, 5)],  # partition that doesn't exist
            [TopicPartition(f"no-such-topic-{uuid.uuid4().hex[:6]}", 0, 5)],  # topic that doesn't exist
        ]
        for offsets in bad:
            where = f"{offsets[0].topic}[{offsets[0].partition}]"
            try:
                result = consumer.commit(offsets=offsets, asynchronous=False)
            except KafkaException as exc:
                code = exc.args[0].code()
            else:
                code = result[0].error.code() if result and result[0].error is not None else None
            assert code == KafkaError.UNKNOWN_TOPIC_OR_PART, (
                f"commit to {where}: expected UNKNOWN_TOPIC_OR_PART, got {code and KafkaError(code)}"
            )
        # Nothing was stored for the missing partition.
        (tp,) = consumer.committed([TopicPartition(topic_name, 99)], timeout=30)
        assert tp.offset == OFFSET_INVALID or (
            tp.error is not None and tp.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART
        ), f"committed() for the missing partition: offset {tp.offset}, error {tp.error}"

        # A good commit next to it works, and reads back.
        good = consumer.commit(offsets=[TopicPartition(topic_name, 0, 3)], asynchronous=False)
        assert [(tp.partition, tp.offset, tp.error) for tp in good] == [(0, 3, None)]
        (tp,) = consumer.committed([TopicPartition(topic_name, 0)], timeout=30)
        assert (tp.offset, tp.error) == (3, None)
    finally:
        consumer.close()

    # The broker still serves: produce, fetch, and a group member from the committed offset.
    more = make_workload(20, partitions, "bad-after", seed=12, first_seq=len(sent))
    confluent_produce(broker.bootstrap, topic_name, more)
    assert (
        len(confluent_consume(broker.bootstrap, topic_name, range(partitions), len(sent) + len(more))) == 60
    )
    member = confluent_consumer(
        broker.bootstrap, **{"group.id": group, "session.timeout.ms": 6000, "heartbeat.interval.ms": 1000}
    )
    try:
        member.subscribe([topic_name])
        first_on_p0: int | None = None
        deadline = time.monotonic() + 60
        while first_on_p0 is None and time.monotonic() < deadline:
            for msg in member.consume(num_messages=100, timeout=0.5):
                if msg.error() is None and msg.partition() == 0:
                    first_on_p0 = msg.offset() if first_on_p0 is None else first_on_p0
        assert first_on_p0 == 3, f"group member started p0 at {first_on_p0}, committed offset was 3"
    finally:
        member.close()
    assert broker.is_running()


# ---------------------------------------------------------------------------------------------
# Extra: the group as AdminClient sees it (ListGroups, DescribeGroups, OffsetFetch, DeleteGroups)
# ---------------------------------------------------------------------------------------------


@pytest.mark.timeout(180)
def test_admin_lists_describes_and_deletes_the_group(
    broker_factory: BrokerFactory, topic_name: str, tmp_path: Path
) -> None:
    """What the members report matches what the broker describes; a group with members can't
    be deleted (NON_EMPTY_GROUP), an empty one can, and its committed offsets go with it."""
    from confluent_kafka import ConsumerGroupState, ConsumerGroupTopicPartitions

    partitions = 4
    broker = broker_factory(overrides=FAST_GROUP_OVERRIDES)
    create_diskless_topic(broker.bootstrap, topic_name, partitions=partitions)
    group = _group(topic_name)
    sent = make_workload(200, partitions, "admin", seed=13)
    confluent_produce(broker.bootstrap, topic_name, sent)
    ends = end_offsets(expected_from_sent(sent), partitions)
    members = [
        ConfluentConsumerProcess(
            f"d{i}", tmp_path, broker.bootstrap, topic_name, group, session_timeout_ms=10000
        )
        for i in range(2)
    ]
    admin = admin_client(broker.bootstrap)

    def describe() -> str:
        return describe_processes(members)

    def listed() -> dict[str, Any]:
        result = admin.list_consumer_groups(request_timeout=30).result(30)
        assert not result.errors, f"ListGroups errors: {result.errors}"
        return {g.group_id: g for g in result.valid}

    def described() -> Any:
        return admin.describe_consumer_groups([group], request_timeout=30)[group].result(30)

    try:
        for m in members:
            m.start()
        wait_until(lambda: balanced([m.log() for m in members], partitions, each=2), 60, "2 each", describe)
        wait_until(lambda: last_commits(m.log() for m in members) == ends, 60, f"committing {ends}", describe)

        groups = listed()
        assert group in groups, f"ListGroups does not list {group}: {sorted(groups)}"
        assert groups[group].state == ConsumerGroupState.STABLE
        assert not groups[group].is_simple_consumer_group

        desc = described()
        assert desc.state == ConsumerGroupState.STABLE
        assert desc.partition_assignor == "range"
        reported = {m.name: {(topic_name, p) for p in m.log().assignment} for m in members}
        seen = {
            d.client_id: {(tp.topic, tp.partition) for tp in d.assignment.topic_partitions}
            for d in desc.members
        }
        assert seen == reported, f"DescribeGroups assignments {seen} != what the members report {reported}"

        request = [
            ConsumerGroupTopicPartitions(group, [TopicPartition(topic_name, p) for p in range(partitions)])
        ]
        offsets = admin.list_consumer_group_offsets(request, request_timeout=30)[group].result(30)
        assert {tp.partition: tp.offset for tp in offsets.topic_partitions} == ends

        with pytest.raises(KafkaException) as busy:
            admin.delete_consumer_groups([group], request_timeout=30)[group].result(30)
        assert busy.value.args[0].code() == KafkaError.NON_EMPTY_GROUP, busy.value

        for m in members:
            rc = m.stop()
            assert rc == 0, f"{m.name} exited {rc}\n{m.stderr_tail()}"
        desc = described()
        assert (desc.state, len(desc.members)) == (ConsumerGroupState.EMPTY, 0)

        admin.delete_consumer_groups([group], request_timeout=30)[group].result(30)
        assert group not in listed()
        assert confluent_committed(broker.bootstrap, group, topic_name, range(partitions)) == dict.fromkeys(
            range(partitions), OFFSET_INVALID
        )
    finally:
        for m in members:
            m.close()
