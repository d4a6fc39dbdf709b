"""Several real broker processes sharing one metadata store and one object storage: a Shoal cluster
as an operator runs it (one server.properties per broker, distinct node ids and racks)."""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.broker import BrokerProcess, free_port
from tests.support.metrics import Samples, metric, scrape
from tests.support.wire import metadata_v12

#: Fast membership for tests: fencing within ~2 s instead of Kafka's 9 s.
FAST_MEMBERSHIP = {"broker.heartbeat.interval.ms": 250, "broker.session.timeout.ms": 2000}


class Cluster:
    """``n`` brokers (node ids 1..n) on ``store_url`` (default: one SQLite file) and one objects dir."""

    def __init__(
        self,
        root: Path,
        n: int,
        *,
        racks: Sequence[str | None] = (),
        store_url: str | None = None,
        overrides: dict[str, Any] | None = None,
    ) -> None:
        self.root = root
        objects = root / "objects"
        objects.mkdir(parents=True, exist_ok=True)
        self.store_url = store_url or f"sqlite:///{root / 'shoal.db'}"
        self.brokers: list[BrokerProcess] = []
        for i in range(1, n + 1):
            props: dict[str, Any] = {"metadata.store.url": self.store_url, **FAST_MEMBERSHIP, **(overrides or {})}
            props["metrics.http.port"] = free_port()
            rack = racks[(i - 1) % len(racks)] if racks else None
            if rack is not None:
                props["broker.rack"] = rack
            self.brokers.append(
                BrokerProcess(root / f"broker-{i}", storage_url=f"file://{objects}", node_id=i, overrides=props)
            )

    def broker(self, node_id: int) -> BrokerProcess:
        return self.brokers[node_id - 1]

    def pause(self, node_id: int) -> None:
        """SIGSTOP broker ``node_id``, but never while it holds the write lock of the shared SQLite
        store: a stopped lock holder stalls every other broker's writes (heartbeats, fencing)
        until SIGCONT, and SQLite cannot break another process's lock. (Brokers on several hosts
        share PostgreSQL, where a stopped broker holds no lock the others wait on.)"""
        proc = self.broker(node_id).proc
        assert proc is not None
        path = self.store_url.removeprefix("sqlite:///") if self.store_url.startswith("sqlite:///") else None
        for _ in range(400):  # about 10 s: a broker catching up after a restart writes for seconds
            os.kill(proc.pid, signal.SIGSTOP)
            if path is None or not _write_locked(path):
                return
            os.kill(proc.pid, signal.SIGCONT)
            time.sleep(random.uniform(0.005, 0.05))
        raise AssertionError(f"broker {node_id} kept holding the SQLite write lock")

    def resume(self, node_id: int) -> None:
        proc = self.broker(node_id).proc
        assert proc is not None
        os.kill(proc.pid, signal.SIGCONT)

    def scrape(self, node_id: int) -> Samples:
        """Broker ``node_id``'s /metrics samples."""
        return scrape(int(self.broker(node_id).overrides["metrics.http.port"]))

    def topic_bytes(self, node_id: int, topic: str) -> tuple[float, float]:
        """(bytes in, bytes out) of ``topic`` on broker ``node_id`` (BrokerTopicMetrics)."""
        m = self.scrape(node_id)
        return (
            metric(m, "kafka_server_brokertopicmetrics_bytesin_total", topic=topic),
            metric(m, "kafka_server_brokertopicmetrics_bytesout_total", topic=topic),
        )

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers)

    def start(self) -> Cluster:
        """Broker 1 first: it creates the store's tables and, before it listens, takes the
        controller lease (so it is the first controller, as tests expect) and is unfenced. The
        others then start side by side; the controller unfences each as it registers. If one
        fails to start, every broker is stopped before the error is raised."""
        first, *others = self.brokers
        try:
            first.start()
            for b in others:
                b.launch()
            for b in others:
                b.wait_started()
        except BaseException:
            self.close()
            raise
        self.wait_for(lambda md: len(md.brokers) == len(self.brokers), "every broker in Metadata")
        return self

    def close(self) -> None:
        """SIGTERM every broker first, so they shut down side by side, then wait for each (as
        ``BrokerProcess.close``: never raises, SIGKILL for one that does not stop in time)."""
        for b in self.brokers:
            b.terminate()
        for b in self.brokers:
            b.close()

    def log_tails(self) -> str:
        return "\n".join(b.log_tail(40) for b in self.brokers)

    def wait_for(self, predicate: Callable[[Any], bool], what: str, *, via: int | None = None,
                 timeout: float = 30.0) -> Any:
        """Poll Metadata until ``predicate``: confluent's through any running broker, or with ``via``
        broker ``via``'s own answer (``metadata_of``: librdkafka sends a Metadata request to any
        broker it learned of, and each broker's image catches up on its own)."""
        from confluent_kafka.admin import AdminClient

        if via is None:
            running = [b for b in self.brokers if b.is_running()]
            admin = AdminClient({"bootstrap.servers": ",".join(b.bootstrap for b in running)})
            ask = lambda: admin.list_topics(timeout=5)  # noqa: E731
        else:
            port = self.broker(via).port
            ask = lambda: metadata_of(port)  # noqa: E731
        deadline = time.monotonic() + timeout
        md = None
        while time.monotonic() < deadline:
            try:
                md = ask()
                if predicate(md):
                    return md
            except Exception:  # noqa: BLE001 - a broker may be down right now: ask again
                pass
            time.sleep(0.2)
        raise AssertionError(f"{what}: not reached within {timeout}s; last metadata {md}\n{self.log_tails()}")


@dataclass(frozen=True)
class PartitionView:
    """A partition in ``MetadataView``: the attributes of confluent's ``PartitionMetadata``."""

    id: int
    leader: int
    replicas: list[int]
    isrs: list[int]
    #: A confluent ``KafkaError`` for a non-zero error code, else None (as confluent has it).
    error: Any


@dataclass(frozen=True)
class TopicView:
    topic: str
    partitions: dict[int, PartitionView]
    error: Any


@dataclass(frozen=True)
class BrokerView:
    id: int
    host: str
    port: int


@dataclass(frozen=True)
class MetadataView:
    """One broker's own Metadata v12 answer, shaped like confluent's ``ClusterMetadata`` so a
    ``Cluster.wait_for`` predicate reads either."""

    brokers: dict[int, BrokerView]
    topics: dict[str, TopicView]
    controller_id: int


def metadata_of(port: int) -> MetadataView:
    """Metadata v12 for every topic, as the broker on ``port`` answers it."""
    from confluent_kafka import KafkaError

    def error(code: Any) -> Any:
        return KafkaError(int(code)) if int(code) else None

    answer = metadata_v12(port, timeout=5)
    topics = {
        str(t.name): TopicView(
            str(t.name),
            {
                int(p.partition_index): PartitionView(
                    int(p.partition_index),
                    int(p.leader_id),
                    [int(b) for b in p.replica_nodes],
                    [int(b) for b in p.isr_nodes],
                    error(p.error_code),
                )
                for p in t.partitions
            },
            error(t.error_code),
        )
        for t in answer.topics
    }
    brokers = {int(b.node_id): BrokerView(int(b.node_id), str(b.host), int(b.port)) for b in answer.brokers}
    return MetadataView(brokers, topics, int(answer.controller_id))


def _write_locked(path: str) -> bool:
    """Whether another connection holds the SQLite file's write lock now."""
    conn = sqlite3.connect(path, timeout=0, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("ROLLBACK")
        return False
    except sqlite3.OperationalError:
        return True
    finally:
        conn.close()
