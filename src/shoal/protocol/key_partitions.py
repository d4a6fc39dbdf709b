"""Which internal-topic partition a coordinator key falls in, as Kafka computes it: a group id's
``__consumer_offsets`` partition (GroupCoordinator.partitionFor) and a transactional id's
``__transaction_state`` partition (TransactionStateManager.partitionFor), both
``Utils.abs(key.hashCode()) % partition count``. The cluster places coordinators by them, the
transaction store files its rows by them; one copy here serves both."""

from __future__ import annotations

__all__ = ["group_partition", "java_string_hash", "kafka_abs", "transaction_partition"]

_INT_MIN = -(2**31)


def java_string_hash(s: str) -> int:
    """Java's ``String.hashCode()``: ``s[0]*31^(n-1) + ... + s[n-1]`` in 32-bit signed arithmetic.

    Java strings are UTF-16, so a character outside the Basic Multilingual Plane counts as its
    two surrogate code units, not as one code point.
    """
    units = s.encode("utf-16-be", "surrogatepass")  # surrogatepass: a lone surrogate is one unit, as in Java
    h = 0
    for i in range(0, len(units), 2):
        h = (31 * h + (units[i] << 8 | units[i + 1])) & 0xFFFFFFFF
    return h - 2**32 if h & 0x80000000 else h


def kafka_abs(n: int) -> int:
    """Kafka's ``Utils.abs``: ``Math.abs`` except that ``Integer.MIN_VALUE`` (whose ``Math.abs`` is
    itself, still negative) gives 0. Not ``n & 0x7fffffff`` (``Utils.toPositive``, the producer's
    partitioner): the two differ for every negative hash code."""
    return 0 if n == _INT_MIN else abs(n)


def group_partition(group_id: str, partitions: int) -> int:
    """The ``__consumer_offsets`` partition whose leader coordinates ``group_id``."""
    if partitions <= 0:
        raise ValueError(f"the offsets topic needs at least one partition, not {partitions}")
    return kafka_abs(java_string_hash(group_id)) % partitions


def transaction_partition(transactional_id: str, partitions: int) -> int:
    """The ``__transaction_state`` partition whose leader coordinates ``transactional_id``."""
    if partitions <= 0:
        raise ValueError(f"the transaction state topic needs at least one partition, not {partitions}")
    return kafka_abs(java_string_hash(transactional_id)) % partitions
