"""The WAL segment object format of KIP-1163.

One byte of version (0), then record batches grouped by partition: each
partition's batches are contiguous, in the order they were produced. Offsets in
the batches are whatever the producer sent; the Batch Coordinator assigns the
real ones and readers stamp them on the way out.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from shoal.records.batch import HEADER_SIZE, LOG_OVERHEAD, BatchHeader, read_header

WAL_VERSION = 0
WAL_HEADER_SIZE = 1
#: Every WAL segment object's key starts with this (the object cleaner lists it for orphans).
WAL_KEY_PREFIX = "wal/"


def new_wal_key() -> str:
    """A fresh, never reused object key for a WAL segment."""
    return f"{WAL_KEY_PREFIX}{uuid.uuid4()}"

K = TypeVar("K")


@dataclass(frozen=True, slots=True)
class PlacedBatch(Generic[K]):
    """Where one input batch landed in the segment."""

    key: K
    index: int  # position of the batch in the caller's input list
    byte_offset: int
    size: int


def build_segment(batches: Sequence[tuple[K, bytes | memoryview]]) -> tuple[bytes, list[PlacedBatch[K]]]:
    """Lay out (partition key, batch bytes) pairs as one WAL segment, grouped by partition.

    Batches of one partition keep their relative order. Returns the object bytes and
    the placement of every input batch, in the order they appear in the object.
    """
    groups: dict[K, list[int]] = {}
    for index, (key, _) in enumerate(batches):
        groups.setdefault(key, []).append(index)
    parts: list[bytes | memoryview] = [bytes([WAL_VERSION])]
    placed: list[PlacedBatch[K]] = []
    position = WAL_HEADER_SIZE
    for key, indexes in groups.items():
        for index in indexes:
            data = batches[index][1]
            parts.append(data)
            placed.append(PlacedBatch(key, index, position, len(data)))
            position += len(data)
    return b"".join(parts), placed


class WalFormatError(ValueError):
    """The bytes are not a WAL segment this version understands."""


def iter_segment(data: bytes | memoryview) -> Iterator[tuple[int, BatchHeader]]:
    """(byte offset, header) of every batch in a WAL segment, for tools and checks."""
    view = memoryview(data)
    if len(view) < WAL_HEADER_SIZE:
        raise WalFormatError("empty object: not a WAL segment")
    if view[0] != WAL_VERSION:
        raise WalFormatError(f"unknown WAL segment version {view[0]}")
    position = WAL_HEADER_SIZE
    while position < len(view):
        if len(view) - position < HEADER_SIZE:
            raise WalFormatError(f"truncated batch header at byte {position}")
        header = read_header(view, position)
        if header.batch_length < HEADER_SIZE - LOG_OVERHEAD or header.magic != 2:
            raise WalFormatError(
                f"not a v2 record batch at byte {position} (length {header.batch_length}, magic {header.magic})"
            )
        if header.batch_length + LOG_OVERHEAD > len(view) - position:
            raise WalFormatError(f"truncated batch at byte {position}")
        yield position, header
        position += header.batch_length + LOG_OVERHEAD
