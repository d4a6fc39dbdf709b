"""Turn ``startingOffsets`` / ``endingOffsets`` / ``...Timestamp`` options into concrete offsets.

Runs on the driver. Diskless partitions ask the Batch Coordinator (and read one batch for an
exact timestamp lookup); other partitions ask the brokers. The rules are Spark's Kafka
source's: per-partition JSON must name every partition read, -2 is earliest and -1 latest,
and a timestamp that no record reaches is an error unless the strategy says ``latest``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Protocol

from shoal.pipeline.broker_read import BrokerRangeReader
from shoal.pipeline.options import EARLIEST, LATEST, OffsetSpec, OptionError, ReadOptions, TopicPartition
from shoal.pipeline.storage_read import DisklessRangeReader
from shoal.pipeline.topics import STORAGE, PartitionSource

__all__ = ["OffsetLookup", "rate_limit", "resolve_offsets"]


class _Lookup(Protocol):
    def bounds(self, src: PartitionSource) -> tuple[int, int]: ...

    def offset_for_timestamp(self, src: PartitionSource, target: int) -> int | None: ...


class OffsetLookup:
    """Watermarks and timestamp lookups for any partition; opens what it needs on first use."""

    def __init__(self, opts: ReadOptions) -> None:
        self._opts = opts
        self._storage: DisklessRangeReader | None = None
        self._broker: BrokerRangeReader | None = None

    def _for(self, src: PartitionSource) -> _Lookup:
        if src.via == STORAGE:
            if self._storage is None:
                assert self._opts.store is not None and self._opts.storage_url
                self._storage = DisklessRangeReader(
                    self._opts.store, self._opts.storage_url, read_committed=self._opts.read_committed
                )
            return self._storage
        if self._broker is None:
            assert self._opts.bootstrap_servers
            self._broker = BrokerRangeReader(
                self._opts.bootstrap_servers,
                self._opts.kafka_conf,
                self._opts.poll_timeout_ms,
                self._opts.isolation_level,
            )
        return self._broker

    def bounds(self, src: PartitionSource) -> tuple[int, int]:
        """(log start offset, high watermark); the last stable offset instead of the high
        watermark with ``read_committed``, so latest, streaming ends and exports stop there."""
        return self._for(src).bounds(src)

    def offset_for_timestamp(self, src: PartitionSource, target: int) -> int | None:
        return self._for(src).offset_for_timestamp(src, target)

    def close(self) -> None:
        if self._storage is not None:
            self._storage.close()
            self._storage = None
        if self._broker is not None:
            self._broker.close()
            self._broker = None

    def __enter__(self) -> OffsetLookup:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _check_covers(spec: OffsetSpec, partitions: Iterable[PartitionSource], what: str) -> None:
    named = set(spec.offsets)
    read = {p.tp for p in partitions}
    if named != read:
        missing = sorted(read - named)
        extra = sorted(named - read)
        raise OptionError(
            f"{what} must give every partition read and only those, as Spark's Kafka source requires"
            + (f"; missing {missing}" if missing else "")
            + (f"; not read {extra}" if extra else "")
        )


def resolve_offsets(
    spec: OffsetSpec,
    partitions: list[PartitionSource],
    lookup: OffsetLookup,
    *,
    what: str,
    is_end: bool = False,
    bounds: Mapping[TopicPartition, tuple[int, int]] | None = None,
) -> dict[TopicPartition, int]:
    """One offset per partition. ``bounds`` may carry (log start, high watermark) already known."""
    known = dict(bounds or {})

    def bound(src: PartitionSource) -> tuple[int, int]:
        if src.tp not in known:
            known[src.tp] = lookup.bounds(src)
        return known[src.tp]

    out: dict[TopicPartition, int] = {}
    if spec.kind in ("offsets", "timestamps"):
        _check_covers(spec, partitions, what)
    for src in partitions:
        if spec.kind == "earliest":
            out[src.tp] = bound(src)[0]
        elif spec.kind == "latest":
            out[src.tp] = bound(src)[1]
        elif spec.kind == "offsets":
            given = spec.offsets[src.tp]
            out[src.tp] = bound(src)[0] if given == EARLIEST else bound(src)[1] if given == LATEST else given
        else:
            target = spec.timestamp if spec.kind == "timestamp" else spec.offsets[src.tp]
            found = lookup.offset_for_timestamp(src, target)
            if found is None:
                if is_end or spec.strategy == "latest":
                    found = bound(src)[1]
                else:
                    raise OptionError(
                        f"{what}: no record of {src.topic}-{src.partition} has a timestamp >= {target}; "
                        "set the ...OffsetsByTimestampStrategy option to 'latest' to start at the end instead"
                    )
            out[src.tp] = found
    return out


def rate_limit(
    limit: int, begin: Mapping[TopicPartition, int], end: Mapping[TopicPartition, int]
) -> dict[TopicPartition, int]:
    """Spark's ``maxOffsetsPerTrigger``: share ``limit`` offsets among partitions by their lag."""
    lags = {tp: end[tp] - begin[tp] for tp in end if end[tp] > begin[tp]}
    total = sum(lags.values())
    if total <= limit:
        return dict(end)
    out = dict(end)
    for tp, lag in lags.items():
        share = limit * (lag / total)
        step = math.ceil(share) if share < 1 else math.floor(share)
        out[tp] = min(end[tp], begin[tp] + step)
    return out
