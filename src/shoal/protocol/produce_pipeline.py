"""Which connection a Produce request arrived on, as the diskless appender needs to know it.

An idempotent producer has at most ``PRODUCE_PIPELINE_DEPTH`` Produce requests in the broker at
once (what its ``max.in.flight.requests.per.connection`` allows in Java, librdkafka and
kafka-python; ``server.connection`` reads more only when a producer has already sent more). When
every connection with data in the open WAL segment is at that depth, none can send more until the
segment commits: waiting for the commit interval then only adds latency, so the appender closes
the segment early (``diskless.append``). The connection publishes itself to the request's
handler through ``current_pipeline``, a context variable every handler task inherits.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import Protocol

__all__ = ["PRODUCE_PIPELINE_DEPTH", "ProducePipeline", "current_pipeline"]

PRODUCE_PIPELINE_DEPTH = 5


class ProducePipeline(Protocol):
    """A connection's Produce requests in the broker."""

    def is_full(self) -> bool:
        """PRODUCE_PIPELINE_DEPTH Produce requests read and not yet answered: an idempotent
        producer can send no more."""
        ...


current_pipeline: ContextVar[ProducePipeline | None] = ContextVar("shoal_produce_pipeline", default=None)
