"""Clients for the Jepsen-style tests: idempotent producers of three client libraries that record
what was acknowledged, and a consumer-group member that commits after each batch it reads."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any


class Acks:
    """What one producer had acknowledged (and what failed), filled from client callbacks."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.acked: list[bytes] = []
        self.failed: list[str] = []
        self.lock = threading.Lock()

    def done(self, value: bytes, error: object | None) -> None:
        with self.lock:
            (self.failed.append(f"{self.name}: {error}") if error is not None else self.acked.append(value))


def run_confluent(bootstrap: str, acks: Acks, stop: threading.Event, topic: str) -> None:
    from confluent_kafka import Producer

    producer = Producer({
        "bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all", "linger.ms": 5,
        "max.in.flight.requests.per.connection": 5, "message.timeout.ms": 90000,
    })
    i = 0
    while not stop.is_set():
        value = f"confluent-{i}".encode()
        try:
            producer.produce(topic, value=value, on_delivery=lambda err, msg: acks.done(msg.value(), err))
            i += 1
        except BufferError:
            pass
        producer.poll(0.002)
    assert producer.flush(100) == 0


def run_kafka_python(bootstrap: str, acks: Acks, stop: threading.Event, topic: str) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(
        bootstrap_servers=bootstrap.split(","), enable_idempotence=True, acks="all", linger_ms=5,
        max_in_flight_requests_per_connection=5, delivery_timeout_ms=90000, request_timeout_ms=10000,
    )
    i = 0
    while not stop.is_set():
        value = f"kafka-python-{i}".encode()
        future = producer.send(topic, value=value)
        future.add_callback(lambda _meta, v=value: acks.done(v, None))
        future.add_errback(lambda exc, v=value: acks.done(v, exc))
        i += 1
        time.sleep(0.002)
    producer.flush(100)
    producer.close(10)


def run_aiokafka(bootstrap: str, acks: Acks, stop: threading.Event, topic: str) -> None:
    from aiokafka import AIOKafkaProducer

    async def main() -> None:
        producer = AIOKafkaProducer(
            bootstrap_servers=bootstrap, enable_idempotence=True, acks="all", linger_ms=5,
            request_timeout_ms=10000,
        )
        await producer.start()
        pending: set[asyncio.Future[Any]] = set()
        try:
            i = 0
            while not stop.is_set():
                value = f"aiokafka-{i}".encode()
                future = await producer.send(topic, value=value)
                future.add_done_callback(
                    lambda f, v=value: acks.done(v, f.exception() if not f.cancelled() else "cancelled")
                )
                pending.add(future)
                future.add_done_callback(pending.discard)
                i += 1
                await asyncio.sleep(0.002)
            await asyncio.wait_for(asyncio.gather(*pending, return_exceptions=True), 100)
        finally:
            await producer.stop()

    asyncio.run(main())


class GroupReader(threading.Thread):
    """A confluent-kafka group member that commits synchronously after each batch it read."""

    def __init__(self, bootstrap: str, seen: Counter[bytes], lock: threading.Lock, topic: str, group: str) -> None:
        super().__init__(daemon=True)
        self.bootstrap, self.seen, self.lock, self.topic, self.group = bootstrap, seen, lock, topic, group
        #: (partition, offset) -> value as read, and offsets going backwards within one assignment.
        self.read_at: dict[tuple[int, int], bytes] = {}
        self.backwards: list[str] = []
        self.stop = threading.Event()
        self.errors: list[str] = []

    def run(self) -> None:
        from confluent_kafka import Consumer, KafkaException

        consumer = Consumer({
            "bootstrap.servers": self.bootstrap, "group.id": self.group, "auto.offset.reset": "earliest",
            "enable.auto.commit": False, "session.timeout.ms": 6000, "heartbeat.interval.ms": 500,
        })
        last: dict[int, int] = {}
        consumer.subscribe([self.topic], on_assign=lambda c, parts: last.clear())
        try:
            while not self.stop.is_set():
                batch = consumer.consume(500, timeout=0.5)
                good = [m for m in batch if not m.error()]
                if not good:
                    continue
                with self.lock:
                    self.seen.update(m.value() for m in good)
                    for m in good:
                        self.read_at.setdefault((m.partition(), m.offset()), m.value())
                        if m.offset() <= last.get(m.partition(), -1):
                            self.backwards.append(f"partition {m.partition()}: {m.offset()} after {last[m.partition()]}")
                        last[m.partition()] = m.offset()
                try:
                    consumer.commit(asynchronous=False)
                except KafkaException as exc:  # a coordinator moving: the next commit carries on
                    self.errors.append(str(exc))
        finally:
            consumer.close()


def wait_until(predicate: Callable[[], bool], what: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not reached within {timeout}s")
        time.sleep(0.2)


