"""Classic topics across crashes: a SIGKILLed broker's log recovery keeps every acknowledged record
once, and a corrupt batch is cut off at recovery (Kafka's LogLoader). Each test has its own broker
because it kills it; the shared-broker tests are in test_classic_topics.py."""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.support.acked_producer import AckedProducer, check_acked, consume_all
from tests.support.classic_logs import (
    BATCH_HEADER_SIZE,
    create_classic_topic,
    partition_dirs,
    read_offset_checkpoint,
    read_segment,
    segment_files,
)
from tests.support.kafka_clients import confluent_consume
from tests.support.wire_requests import wire_list_offset, wire_produce

RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"


@pytest.fixture
def topic(request: pytest.FixtureRequest) -> str:
    base = "".join(c if c.isalnum() else "-" for c in request.node.name)[:50].strip("-")
    return f"{base}-{uuid.uuid4().hex[:6]}"


@pytest.mark.timeout(300)
def test_sigkill_during_heavy_produce_keeps_every_acked_record_once(
    broker_factory: Any, topic: str, tmp_path: Path
) -> None:
    """An idempotent acks=all producer in its own process writes as fast as it can while the broker is
    SIGKILLed twice; each restart recovers the log (no clean-shutdown marker), and afterwards every
    acknowledged record is there exactly once at gapless offsets."""
    broker = broker_factory("crash", overrides={"log.retention.check.interval.ms": 500})
    partitions = [0, 1, 2]
    create_classic_topic(broker.bootstrap, topic, len(partitions), {"segment.bytes": str(1024 * 1024)})
    producer = AckedProducer(tmp_path / "producer", broker.bootstrap, topic, partitions, max_seconds=150)
    acked_at_kills: list[int] = []
    try:
        producer.expect_acks(5_000, 60, "before the first kill")
        for _ in range(2):
            broker.kill()
            acked_at_kills.append(len(producer.acked()))
            assert not (broker.log_dir / ".kafka_cleanshutdown").exists(), (
                "a SIGKILLed broker left the clean marker"
            )
            time.sleep(0.3)
            broker.start()
            producer.expect_acks(
                acked_at_kills[-1] + 5_000,
                90,
                f"no progress after restart ({acked_at_kills[-1]} at the kill)",
            )
        summary = producer.stop()
    finally:
        producer.kill()
    received = consume_all(broker.bootstrap, topic, partitions)
    print(
        check_acked(received, producer.acked(), partitions),
        f"(kills at {acked_at_kills}); producer: {summary}",
    )


@pytest.mark.timeout(180)
def test_corrupt_segment_is_truncated_at_recovery(broker_factory: Any, topic: str) -> None:
    """Bytes flipped in the middle of a batch (not the last one) of a log whose broker was SIGKILLed:
    recovery finds the bad CRC, truncates the log there, and serves everything before it; new
    records continue at the truncation offset."""
    broker = broker_factory("corrupt")
    create_classic_topic(broker.bootstrap, topic, 1)
    batches, per_batch = 40, 25
    values = [
        f"corrupt|{i:08d}|".encode() + os.urandom(30).hex().encode() for i in range(batches * per_batch)
    ]
    for b in range(batches):
        chunk = values[b * per_batch : (b + 1) * per_batch]
        error, base = wire_produce(broker.port, topic, 0, [(f"k{b}".encode(), v) for v in chunk])
        assert (error, base) == (0, b * per_batch)
    broker.kill()  # no clean-shutdown marker: recovery runs at the next start

    (d,) = partition_dirs([broker.log_dir], topic).values()
    (segment,) = segment_files(d)
    on_disk = read_segment(segment)
    assert [b.base_offset for b in on_disk] == [b * per_batch for b in range(batches)]
    # Recovery re-checks from the recovery point on (below it data was fsynced and is trusted, as in
    # Kafka): corrupt a batch above the checkpointed recovery point.
    recovery_point = read_offset_checkpoint(broker.log_dir / RECOVERY_POINT_CHECKPOINT).get((topic, 0), 0)
    candidates = [
        i for i, b in enumerate(on_disk[:-1]) if b.base_offset >= recovery_point and i >= batches // 2
    ]
    assert candidates, f"recovery point {recovery_point} is past every batch; cannot place the corruption"
    victim = on_disk[candidates[0]]
    with open(segment, "r+b") as f:
        middle = victim.position + BATCH_HEADER_SIZE + (victim.size - BATCH_HEADER_SIZE) // 2
        f.seek(middle)
        chunk = f.read(8)
        f.seek(middle)
        f.write(bytes(c ^ 0xFF for c in chunk))

    broker.start()
    cut = victim.base_offset
    assert wire_list_offset(broker.port, topic, 0, -1) == (0, cut), "log end offset after recovery"
    assert segment.stat().st_size == victim.position, "the segment was not truncated at the corrupt batch"
    assert f"at position {victim.position}; truncated" in broker.log_path.read_text(), (
        "recovery did not log the cut"
    )
    received = confluent_consume(broker.bootstrap, topic, [0], cut, settle=1.0)
    assert [r.offset for r in received] == list(range(cut))
    assert [r.value for r in received] == values[:cut]
    error, base = wire_produce(broker.port, topic, 0, [(b"after", b"recovery")])
    assert (error, base) == (0, cut), "the log does not continue at the truncation point"
