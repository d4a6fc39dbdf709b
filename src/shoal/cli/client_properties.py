"""``--producer-property`` / ``--consumer-property``: the Kafka client configs the console tools obey.

Kafka's console tools pass any client config through; these tools take the ones their client
implements, under Kafka's names and with Kafka's defaults, and refuse the rest by name rather
than ignore them. A tool's own flags (``--acks``, ``--group``...) win over a property, as
Kafka's do.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from shoal.records.compression import CODEC_NAMES

CODECS = {name: codec for codec, name in CODEC_NAMES.items()}
ACKS = {"all": -1, "-1": -1, "0": 0, "1": 1}
ISOLATION_LEVELS = {"read_uncommitted": 0, "read_committed": 1}


class PropertyError(ValueError):
    """A property the tool does not know, or a value it cannot use; the message says which."""


def _int(minimum: int) -> Callable[[str, str], int]:
    def parse(name: str, raw: str) -> int:
        try:
            value = int(raw.strip())
        except ValueError:
            raise PropertyError(f"Invalid value {raw} for configuration {name}: Not a number of type INT") from None
        if value < minimum:
            raise PropertyError(f"Invalid value {raw} for configuration {name}: Value must be at least {minimum}")
        return value

    return parse


def _choice(choices: Mapping[str, Any]) -> Callable[[str, str], Any]:
    def parse(name: str, raw: str) -> Any:
        key = raw.strip().lower()
        if key not in choices:
            raise PropertyError(
                f"Invalid value {raw} for configuration {name}: String must be one of: {', '.join(choices)}"
            )
        return choices[key]

    return parse


def _bool(name: str, raw: str) -> bool:
    return bool(_choice({"true": True, "false": False})(name, raw))


def _text(name: str, raw: str) -> str:
    return raw


# Kafka config name -> (keyword of the tool's client, parser), with Kafka's defaults below.
PRODUCER_PROPERTIES: dict[str, tuple[str, Callable[[str, str], Any]]] = {
    "acks": ("acks", _choice(ACKS)),
    "compression.type": ("compression", _choice(CODECS)),
    "enable.idempotence": ("idempotent", _bool),
    "batch.size": ("batch_size", _int(1)),
    "linger.ms": ("linger_ms", _int(0)),
    "max.request.size": ("max_request_size", _int(1)),
    "request.timeout.ms": ("request_timeout_ms", _int(0)),
    "delivery.timeout.ms": ("delivery_timeout_ms", _int(0)),
    "retry.backoff.ms": ("retry_backoff_ms", _int(0)),
    "client.id": ("client_id", _text),
}
CONSUMER_PROPERTIES: dict[str, tuple[str, Callable[[str, str], Any]]] = {
    "group.id": ("group_id", _text),
    "auto.offset.reset": ("auto_offset_reset", _choice({"earliest": "earliest", "latest": "latest", "none": "none"})),
    "isolation.level": ("isolation_level", _choice(ISOLATION_LEVELS)),
    "enable.auto.commit": ("auto_commit", _bool),
    "auto.commit.interval.ms": ("auto_commit_interval_ms", _int(0)),
    "session.timeout.ms": ("session_timeout_ms", _int(1)),
    "heartbeat.interval.ms": ("heartbeat_interval_ms", _int(1)),
    "max.poll.interval.ms": ("rebalance_timeout_ms", _int(1)),
    "metadata.max.age.ms": ("metadata_max_age_ms", _int(0)),
    "fetch.max.wait.ms": ("fetch_max_wait_ms", _int(0)),
    "client.id": ("client_id", _text),
}


def client_options(
    table: Mapping[str, tuple[str, Callable[[str, str], Any]]], properties: Mapping[str, str], option: str
) -> dict[str, Any]:
    """The client keywords the properties set; an unknown name or a bad value raises PropertyError."""
    unknown = sorted(set(properties) - set(table))
    if unknown:
        raise PropertyError(
            f"{option} {', '.join(unknown)} is not supported by this tool; it takes: {', '.join(sorted(table))}"
        )
    return {table[name][0]: table[name][1](name, raw) for name, raw in properties.items()}
