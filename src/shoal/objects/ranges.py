"""Planning ranged GETs: nearby byte ranges of one object are read with one request.

Object stores charge per request and answer small reads slowly, so the broker's fetch path,
the Spark reader and the compaction job all coalesce the ranges they need the same way.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

#: Two ranges of one object closer than this are read with one GET.
COALESCE_GAP_BYTES = 1024 * 1024


class Span(NamedTuple):
    """One GET: bytes ``[start, end)`` of object ``key``."""

    key: str
    start: int
    end: int


def coalesce_ranges(ranges: Iterable[tuple[str, int, int]], gap: int = COALESCE_GAP_BYTES) -> list[Span]:
    """One span per run of (key, start, end) ranges of an object less than ``gap`` bytes apart."""
    by_object: dict[str, list[tuple[int, int]]] = {}
    for key, start, end in ranges:
        by_object.setdefault(key, []).append((start, end))
    spans: list[Span] = []
    for key, extents in by_object.items():
        extents.sort()
        start, end = extents[0]
        for r_start, r_end in extents[1:]:
            if r_start - end <= gap:
                end = max(end, r_end)
            else:
                spans.append(Span(key, start, end))
                start, end = r_start, r_end
        spans.append(Span(key, start, end))
    return spans
