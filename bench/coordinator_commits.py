"""Batch Coordinator commits per second and commit latency, on any store URL, side by side.

Each committer is its own process with its own coordinator (as each broker of a cluster has),
committing WAL objects of ``--batches-per-commit`` batches (default 10, spread over the topic's
partitions, idempotent producers on) as fast as it can for ``--duration`` seconds. Rounds
alternate between the stores given (A B A B ...) and between the committer counts, so a
machine's load changes hit every configuration alike. Prints one JSON document on stdout.

    .venv/bin/python bench/coordinator_commits.py \\
        --url sqlite:////tmp/bench-coord/shoal.db \\
        --url postgresql://postgres@127.0.0.1:5432/bench \\
        --committers 1 --committers 4

The stores must be empty or hold only what earlier runs of this benchmark wrote (it uses its own
topic id per round). Nothing else may use them meanwhile.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from shoal.coordinator.api import CommitBatchRequest, CreateTopicAndPartitionsRequest, TopicIdPartition  # noqa: E402
from shoal.records.types import TimestampType  # noqa: E402
from shoal.store.factory import open_batch_coordinator_at  # noqa: E402
from shoal.store.postgres.connection import redact  # noqa: E402


def _committer(url: str, topic_id: str, partitions: int, per_commit: int, duration: float, index: int,
               start_at: float, out: mp.Queue) -> None:
    coordinator = open_batch_coordinator_at(url)
    topic = uuid.UUID(topic_id)
    producer_id = 1_000_000 + index  # one idempotent producer per committer and partition
    sequences = [0] * partitions
    latencies: list[float] = []
    errors = 0
    commit = 0
    while time.time() < start_at:
        time.sleep(0.001)
    deadline = time.monotonic() + duration
    while time.monotonic() < deadline:
        batches = []
        for i in range(per_commit):
            partition = (commit * per_commit + i + index) % partitions
            batches.append(CommitBatchRequest(
                request_id=i,
                topic_id_partition=TopicIdPartition(topic, partition, "bench"),
                byte_offset=i * 1024,
                size=1024,
                base_offset=0,
                last_offset=9,
                batch_max_timestamp=int(time.time() * 1000),
                message_timestamp_type=TimestampType.CREATE_TIME,
                producer_id=producer_id,
                producer_epoch=0,
                base_sequence=sequences[partition],
                last_sequence=sequences[partition] + 9,
            ))
            sequences[partition] += 10
        began = time.perf_counter()
        answers = coordinator.commit_file(f"bench/{uuid.uuid4()}", index, per_commit * 1024, batches)
        latencies.append(time.perf_counter() - began)
        errors += sum(1 for a in answers if a.errors != 0)
        commit += 1
    coordinator.close()
    out.put({"latencies": latencies, "errors": errors})


def run_round(url: str, committers: int, partitions: int, per_commit: int, duration: float) -> dict:
    topic = uuid.uuid4()
    coordinator = open_batch_coordinator_at(url)
    coordinator.create_topic_and_partitions({CreateTopicAndPartitionsRequest(topic, f"bench-{topic}", partitions)})
    coordinator.close()
    ctx = mp.get_context("spawn")
    out: mp.Queue = ctx.Queue()
    start_at = time.time() + 3.0  # every process connected before the clock starts
    procs = [ctx.Process(target=_committer, args=(url, str(topic), partitions, per_commit, duration, i, start_at, out))
             for i in range(committers)]
    for p in procs:
        p.start()
    results = [out.get(timeout=duration + 120) for _ in procs]
    for p in procs:
        p.join()
    latencies = sorted(x for r in results for x in r["latencies"])
    commits = len(latencies)

    def pct(q: float) -> float:
        return round(latencies[min(len(latencies) - 1, int(q * len(latencies)))] * 1000, 3) if latencies else 0.0

    return {
        "store": redact(url),
        "committers": committers,
        "batches_per_commit": per_commit,
        "commits_per_s": round(commits / duration, 1),
        "batches_per_s": round(commits * per_commit / duration, 1),
        "commit_p50_ms": pct(0.50),
        "commit_p99_ms": pct(0.99),
        "commit_mean_ms": round(statistics.fmean(latencies) * 1000, 3) if latencies else 0.0,
        "errors": sum(r["errors"] for r in results),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", action="append", required=True, help="A store URL (repeat to compare).")
    parser.add_argument("--committers", action="append", type=int, help="Concurrent committers (repeatable).")
    parser.add_argument("--partitions", type=int, default=32)
    parser.add_argument("--batches-per-commit", type=int, default=10)
    parser.add_argument("--duration", type=float, default=10.0, help="Seconds per round.")
    parser.add_argument("--rounds", type=int, default=2, help="Rounds of every configuration (alternated).")
    args = parser.parse_args()
    rounds = []
    for r in range(args.rounds):
        for committers in args.committers or [1, 4]:
            for url in args.url:
                print(f"round {r + 1}: {redact(url)} with {committers} committer(s)", file=sys.stderr)
                result = run_round(url, committers, args.partitions, args.batches_per_commit, args.duration)
                result["round"] = r + 1
                rounds.append(result)
    print(json.dumps({"machine": {"cpus": os.cpu_count(), "loadavg": os.getloadavg()}, "rounds": rounds}, indent=2))


if __name__ == "__main__":
    main()
