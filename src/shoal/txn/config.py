"""The transaction coordinator's settings, from the broker's configuration (names as Kafka's)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["TxnConfig"]


@dataclass(frozen=True, slots=True)
class TxnConfig:
    state_partitions: int = 50
    offsets_partitions: int = 50
    max_timeout_ms: int = 900_000
    id_expiration_ms: int = 604_800_000
    abort_interval_ms: int = 10_000
    expire_interval_ms: int = 3_600_000

    @classmethod
    def from_config(cls, config: Mapping[str, object]) -> TxnConfig:
        return cls(
            state_partitions=int(config["transaction.state.log.num.partitions"]),  # type: ignore[call-overload]
            offsets_partitions=int(config["offsets.topic.num.partitions"]),  # type: ignore[call-overload]
            max_timeout_ms=int(config["transaction.max.timeout.ms"]),  # type: ignore[call-overload]
            id_expiration_ms=int(config["transactional.id.expiration.ms"]),  # type: ignore[call-overload]
            abort_interval_ms=int(config["transaction.abort.timed.out.transaction.cleanup.interval.ms"]),  # type: ignore[call-overload]
            expire_interval_ms=int(config["transaction.remove.expired.transaction.cleanup.interval.ms"]),  # type: ignore[call-overload]
        )
