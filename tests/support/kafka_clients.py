"""Client-side helpers shared by the integration tests: topics, and confluent-kafka (librdkafka)
produce and consume that return what was acknowledged and read.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from tests.support.workload import Rec, Sent


def admin_client(bootstrap: str, **config: Any) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap, **config})


def wait_for_topic(admin: Any, name: str, partitions: int, timeout: float = 30.0) -> Any:
    """Wait until Metadata lists the topic with all partitions led; returns its TopicMetadata."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        md = admin.list_topics(topic=name, timeout=10)
        last = md.topics.get(name)
        if (
            last is not None
            and last.error is None
            and len(last.partitions) == partitions
            and all(p.leader >= 0 and p.error is None for p in last.partitions.values())
        ):
            return last
        time.sleep(0.2)
    raise AssertionError(f"topic {name} not ready in metadata after {timeout}s: {last}")


def create_diskless_topic(
    bootstrap: str,
    name: str,
    partitions: int = 4,
    *,
    config: Mapping[str, str] | None = None,
    replication_factor: int = 1,
    timeout: float = 30.0,
) -> Any:
    """CreateTopics with diskless.enable=true through confluent's AdminClient, then wait for metadata."""
    from confluent_kafka.admin import NewTopic

    admin = admin_client(bootstrap)
    cfg = {"diskless.enable": "true", **(config or {})}
    futures = admin.create_topics(
        [NewTopic(name, num_partitions=partitions, replication_factor=replication_factor, config=cfg)],
        operation_timeout=timeout,
        request_timeout=timeout,
    )
    futures[name].result(timeout)
    return wait_for_topic(admin, name, partitions, timeout)


def confluent_produce(
    bootstrap: str,
    topic: str,
    sent: Sequence[Sent],
    *,
    config: Mapping[str, Any] | None = None,
    timeout: float = 120.0,
) -> None:
    """Produce `sent` with an idempotent confluent-kafka producer; assert every delivery succeeded."""
    from confluent_kafka import Producer

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
            **(config or {}),
        }
    )
    errors: list[str] = []
    delivered = 0

    def on_delivery(err: Any, msg: Any) -> None:
        nonlocal delivered
        if err is not None:
            errors.append(f"p{msg.partition()}: {err}")
        else:
            delivered += 1

    deadline = time.monotonic() + timeout
    for i, s in enumerate(sent):
        kwargs: dict[str, Any] = {
            "key": s.key,
            "value": s.value,
            "headers": list(s.headers),
            "on_delivery": on_delivery,
        }
        if s.partition >= 0:
            kwargs["partition"] = s.partition
        if s.timestamp is not None:
            kwargs["timestamp"] = s.timestamp
        while True:
            try:
                producer.produce(topic, **kwargs)
                break
            except BufferError:
                producer.poll(0.05)
                if time.monotonic() > deadline:
                    raise AssertionError(
                        f"producer queue still full after {timeout}s at record {i}"
                    ) from None
        if i % 1000 == 0:
            producer.poll(0)
    remaining = producer.flush(max(1.0, deadline - time.monotonic()))
    assert remaining == 0, f"{remaining} records not delivered within {timeout}s ({delivered} delivered)"
    assert not errors, f"{len(errors)} delivery errors, e.g. {errors[:5]}"
    assert delivered == len(sent), f"{delivered} delivered of {len(sent)}"


def rec_from_confluent(msg: Any) -> Rec:
    ts_type, ts = msg.timestamp()
    # confluent: 0 not available, 1 CreateTime, 2 LogAppendTime -> Kafka's -1/0/1
    return Rec(
        msg.partition(), msg.offset(), msg.key(), msg.value(), tuple(msg.headers() or ()), ts_type - 1, ts
    )


def confluent_consumer(bootstrap: str, **config: Any) -> Any:
    """A consumer for manual assignment only (no group protocol: the broker has none yet)."""
    from confluent_kafka import Consumer

    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"shoal-it-{uuid.uuid4().hex[:8]}",  # required by the client, never used
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "enable.partition.eof": False,
            "auto.offset.reset": "earliest",
            **config,
        }
    )


def confluent_consume(
    bootstrap: str,
    topic: str,
    partitions: Iterable[int],
    expected: int,
    *,
    timeout: float = 120.0,
    settle: float = 1.0,
    config: Mapping[str, Any] | None = None,
) -> list[Rec]:
    """Read every partition from the beginning until `expected` records arrived (then `settle`
    seconds more, so duplicates or extras show up), bounded by `timeout`."""
    from confluent_kafka import OFFSET_BEGINNING, TopicPartition

    consumer = confluent_consumer(bootstrap, **(config or {}))
    out: list[Rec] = []
    errors: list[str] = []
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        deadline = time.monotonic() + timeout
        settle_until: float | None = None
        while time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=5000, timeout=0.5):
                if msg.error():
                    errors.append(str(msg.error()))
                else:
                    out.append(rec_from_confluent(msg))
            if len(out) >= expected:
                if settle_until is None:
                    settle_until = time.monotonic() + settle
                elif time.monotonic() >= settle_until:
                    break
    finally:
        consumer.close()
    assert not errors, f"consumer errors: {errors[:5]}"
    assert len(out) >= expected, f"only {len(out)} of {expected} records consumed within {timeout}s"
    return out
