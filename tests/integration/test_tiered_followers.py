"""A follower of a tiered classic partition that fell behind its leader's *local* log start (KIP-405):
the leader answers its Fetch with OFFSET_MOVED_TO_TIERED_STORAGE, and the follower restarts its log
at the leader's local log start with the leader epochs and the producer snapshot the remote
segments below it hold (Kafka's ``buildRemoteLogAuxState``). Once it leads, an idempotent producer
goes on without a duplicate or a gap, and OffsetsForLeaderEpoch-based consumers read everything."""

from __future__ import annotations

import re
import time
from collections.abc import Callable

import pytest

from tests.integration.test_tiered_failures import (  # noqa: F401 (make_cluster is a fixture)
    EARLIEST,
    EARLIEST_LOCAL,
    TOPIC,
    AckingProducer,
    Remote,
    check_read_back,
    create_topic,
    kill,
    leader,
    leader_offset,
    make_cluster,
    wait_in_sync,
)
from tests.support.chaos_clients import wait_until
from tests.support.cluster import Cluster


@pytest.mark.timeout(300)
def test_follower_behind_the_local_log_start_restarts_with_the_remote_state(
    make_cluster: Callable[..., Cluster],  # noqa: F811 (the imported fixture)
) -> None:
    cluster = make_cluster()
    create_topic(cluster, **{"min.insync.replicas": "1"})
    remote = Remote(cluster)
    first = leader(cluster)
    follower = next(n for n in (1, 2, 3) if n != first)
    # The follower's replica dir exists before it stops (a replica missing from the log dirs at
    # start-up is taken for a failed disk and stays offline, as in Kafka).
    wait_until(lambda: (cluster.broker(follower).log_dir / f"{TOPIC}-0").is_dir(), "the follower's replica dir", 30)
    kill(cluster, follower)
    producer = AckingProducer(cluster.bootstrap, rate=400)
    producer.start()
    try:
        # The leader copies and deletes locally well past what the stopped follower holds.
        wait_until(lambda: leader_offset(cluster, EARLIEST_LOCAL)[1] > 1500, "local segments deleted after copies", 90)
        cluster.broker(follower).start()
        wait_in_sync(cluster, timeout=90)
        text = cluster.broker(follower).log_path.read_text(errors="replace")
        restarted = re.search(r"restarted the log there with (\d+) leader epochs and (\d+) producers", text)
        assert restarted, "the follower did not restart its log with the remote state:\n" + "\n".join(
            line for line in text.splitlines() if "tiered" in line or "log start" in line)
        assert int(restarted[1]) >= 1 and int(restarted[2]) >= 1, restarted[0]
        # The follower leads now: the producer goes on, its sequence known to the new leader.
        for node in (n for n in (1, 2, 3) if n != follower):
            kill(cluster, node)
        wait_until(lambda: leader(cluster) == follower, f"broker {follower} leading", 60)
        acked = producer.count()
        wait_until(lambda: producer.count() > acked + 300, "the producer going on with the new leader", 90)
        for node in (n for n in (1, 2, 3) if n != follower):
            cluster.broker(node).start()
        wait_in_sync(cluster, timeout=90)
        time.sleep(1)
    finally:
        producer.finish()
    summary = check_read_back(cluster, producer, 0)
    earliest = leader_offset(cluster, EARLIEST)
    remote.close()
    print(f"follower {follower}: {restarted[0]}; {summary}; earliest {earliest}")
    assert earliest[1] == 0
    assert not producer.failed or all("OUT_OF_ORDER" not in f and "DUPLICATE" not in f for f in producer.failed), (
        producer.failed[:5])
