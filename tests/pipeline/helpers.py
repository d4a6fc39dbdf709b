"""Helpers shared by the pipeline tests: options for the shoal source, topics, record comparison."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import Any

from tests.support.broker import BrokerProcess
from tests.support.kafka_clients import create_diskless_topic
from tests.support.workload import Rec

# (partition, offset, key, value, headers, timestamp ms, timestamp type)
Row = tuple[int, int, bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...], int, int]


def source_options(broker: BrokerProcess, **extra: str) -> dict[str, str]:
    """Options to read ``broker``'s topics straight from its object storage (and via it)."""
    return {
        "shoal.metadata.path": str(broker.log_dir / "shoal.db"),
        "shoal.storage.url": broker.storage_url,
        "kafka.bootstrap.servers": broker.bootstrap,
        **extra,
    }


def new_topic(
    broker: BrokerProcess, prefix: str, partitions: int, config: dict[str, str] | None = None
) -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    create_diskless_topic(broker.bootstrap, name, partitions=partitions, config=config)
    return name


def rows_from_consumer(records: Iterable[Rec]) -> list[Row]:
    """What a Kafka consumer read, in the shape ``rows_from_arrow`` gives, sorted by (partition, offset)."""
    return sorted(
        (r.partition, r.offset, r.key, r.value, tuple(r.headers), r.timestamp, r.timestamp_type)
        for r in records
    )


def rows_from_arrow(table: Any) -> list[Row]:
    """Rows of an Arrow table in Spark's Kafka schema (headers null for none, as Spark gives them)."""
    data = table.to_pydict()
    n = table.num_rows
    headers = data.get("headers", [None] * n)
    micros = table.column("timestamp").cast("int64").to_pylist()
    out = []
    for i in range(n):
        hs = tuple((h["key"], h["value"]) for h in headers[i]) if headers[i] else ()
        out.append(
            (
                data["partition"][i],
                data["offset"][i],
                data["key"][i],
                data["value"][i],
                hs,
                micros[i] // 1000,
                data["timestampType"][i],
            )
        )
    return sorted(out)
