"""Where a new partition's replicas go: Kafka's rack-aware assignment, simplified.

Brokers are listed alternating between racks (Kafka's ``getRackAlternatedBrokerList``: the first
broker of each rack, then the second of each, ...), and partition ``p`` takes consecutive
brokers of that list starting at ``p``: leaders spread evenly over brokers and racks, and a
partition's replicas sit in as many different racks as there are. Only unfenced brokers get new
replicas.
"""

from __future__ import annotations

from collections.abc import Sequence

from shoal.metadata.image import BrokerImage


def rack_alternated(brokers: Sequence[BrokerImage]) -> list[int]:
    """Node ids alternating between racks (brokers without a rack form one rack of their own)."""
    by_rack: dict[str | None, list[int]] = {}
    for b in sorted(brokers, key=lambda b: b.node_id):
        by_rack.setdefault(b.rack, []).append(b.node_id)
    racks = [by_rack[r] for r in sorted(by_rack, key=lambda r: (r is None, r or ""))]
    out: list[int] = []
    for i in range(max((len(r) for r in racks), default=0)):
        out += [r[i] for r in racks if i < len(r)]
    return out


def assign_replicas(
    brokers: Sequence[BrokerImage], partitions: range, replication_factor: int
) -> list[tuple[int, ...]]:
    """Replica lists for ``partitions`` (the caller checked there are enough brokers)."""
    order = rack_alternated(brokers)
    n = len(order)
    return [tuple(order[(p + i) % n] for i in range(replication_factor)) for p in partitions]
