"""The Jepsen-style checks' two halves: workloads whose records say what they are (a sequence in
each value), and one checker that compares what was sent with what came back, partition by
partition.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

# ---------------------------------------------------------------------------------------------
# Client-side helpers shared by the tests: topics, workloads, confluent-kafka produce/consume,
# and one checker that compares what was sent with what came back, partition by partition.
# ---------------------------------------------------------------------------------------------

Headers = tuple[tuple[str, bytes | None], ...]


@dataclass(frozen=True, slots=True)
class Sent:
    """One record as the test produced it. partition -1: the client's partitioner chose."""

    seq: int
    partition: int
    key: bytes | None
    value: bytes | None
    headers: Headers
    timestamp: int | None  # CreateTime set by the test; None: the client stamped it


@dataclass(frozen=True, slots=True)
class Rec:
    """One record as a consumer got it back, normalised across client libraries."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: Headers
    timestamp_type: int  # Kafka's: 0 CreateTime, 1 LogAppendTime, -1 none
    timestamp: int


def seq_of_value(value: bytes | None) -> int | None:
    """Workload values look like b'<tag>|<seq>|<filler>'; None for values that aren't ours."""
    if not value:
        return None
    parts = value.split(b"|", 2)
    if len(parts) < 2 or not parts[1].isdigit():
        return None
    return int(parts[1])


def make_workload(
    n: int,
    partitions: int,
    tag: str,
    *,
    seed: int = 0,
    base_timestamp: int | None = None,
    nulls: bool = True,
    null_headers: bool = True,
    client_partitions: bool = False,
    first_seq: int = 0,
) -> list[Sent]:
    """`n` records of ~100 bytes with keys, headers and (optionally) explicit timestamps.

    Values are random hex so compression has real work; with `nulls` a few keys, values and
    header values are null and some values empty, to check null/empty stay distinct. Values
    that are null or empty can't carry the sequence number, so every record also carries it in
    its 'seq' header.
    """
    rnd = random.Random(seed)
    out: list[Sent] = []
    for i in range(n):
        seq = first_seq + i
        key: bytes | None = f"key-{i % 5003}".encode()
        value: bytes | None = f"{tag}|{seq:08d}|".encode() + rnd.randbytes(40).hex().encode()
        headers: list[tuple[str, bytes | None]] = [("seq", str(seq).encode()), ("tag", tag.encode())]
        if nulls:
            if i % 97 == 5:
                key = None
            if i % 1009 == 7:
                value = b""
            elif i % 1013 == 9:
                value = None
                key = f"key-{i % 5003}".encode()  # some clients refuse a record with neither
            if null_headers and i % 7 == 3:
                headers.append(("nil", None))
            if i % 11 == 4:
                headers.append(("bin", bytes(range(256))[i % 200 : i % 200 + 8]))
        ts = None if base_timestamp is None else base_timestamp + i
        out.append(Sent(seq, -1 if client_partitions else i % partitions, key, value, tuple(headers), ts))
    return out


def seq_of_rec(rec: Rec) -> int | None:
    for name, value in rec.headers:
        if name == "seq" and value is not None and value.isdigit():
            return int(value)
    return seq_of_value(rec.value)


def check_records(
    received: Sequence[Rec],
    sent: Sequence[Sent],
    *,
    timestamp_range: tuple[int, int] | None = None,
    max_problems: int = 25,
) -> None:
    """Assert the broker gave back exactly what was sent, per partition.

    Per partition: offsets gapless from 0, records in production order, keys, values, headers
    identical, timestamps CreateTime equal to what the producer set (or inside
    `timestamp_range` when the client stamped them). Records sent with partition -1 are
    matched to the partition they came back from (each must come back exactly once).
    """
    problems: list[str] = []
    by_seq: dict[int, list[Rec]] = {}
    for rec in received:
        seq = seq_of_rec(rec)
        if seq is None:
            problems.append(f"p{rec.partition}@{rec.offset}: record without a seq header: {rec}")
            continue
        by_seq.setdefault(seq, []).append(rec)
    sent_seqs = {s.seq for s in sent}
    missing = sorted(s.seq for s in sent if s.seq not in by_seq)
    dups = sorted(seq for seq, recs in by_seq.items() if len(recs) > 1)
    extra = sorted(seq for seq in by_seq if seq not in sent_seqs)
    if missing:
        problems.append(f"{len(missing)} records missing, e.g. seqs {missing[:10]}")
    if dups:
        ex = dups[0]
        problems.append(
            f"{len(dups)} records duplicated, e.g. seq {ex} at "
            + ", ".join(f"p{r.partition}@{r.offset}" for r in by_seq[ex])
        )
    if extra:
        problems.append(f"{len(extra)} records never sent, e.g. seqs {extra[:10]}")

    expected: dict[int, list[Sent]] = {}
    for s in sent:
        part = s.partition
        if part < 0:
            if s.seq not in by_seq:
                continue
            part = by_seq[s.seq][0].partition
        expected.setdefault(part, []).append(s)
    got: dict[int, list[Rec]] = {}
    for rec in received:
        got.setdefault(rec.partition, []).append(rec)

    for part in sorted(set(expected) | set(got)):
        recs = sorted(got.get(part, []), key=lambda r: r.offset)
        exp = expected.get(part, [])
        offsets = [r.offset for r in recs]
        if offsets != list(range(len(offsets))):
            gaps = [(a, b) for a, b in zip(offsets, offsets[1:], strict=False) if b != a + 1]
            first = offsets[0] if offsets else None
            problems.append(f"p{part}: offsets not gapless from 0 (first {first}, gaps/dups {gaps[:5]})")
        if len(recs) != len(exp):
            problems.append(f"p{part}: {len(recs)} records back, {len(exp)} sent")
        for rec, s in zip(recs, exp, strict=False):
            where = f"p{part}@{rec.offset} (seq {s.seq})"
            if seq_of_rec(rec) != s.seq:
                problems.append(f"{where}: order: got seq {seq_of_rec(rec)}")
                continue
            if rec.key != s.key:
                problems.append(f"{where}: key {rec.key!r} != {s.key!r}")
            if rec.value != s.value:
                problems.append(f"{where}: value {rec.value!r:.60} != {s.value!r:.60}")
            if tuple(rec.headers) != s.headers:
                problems.append(f"{where}: headers {rec.headers!r} != {s.headers!r}")
            if rec.timestamp_type != 0:
                problems.append(f"{where}: timestamp type {rec.timestamp_type}, expected CreateTime (0)")
            if s.timestamp is not None and rec.timestamp != s.timestamp:
                problems.append(f"{where}: timestamp {rec.timestamp} != {s.timestamp}")
            if s.timestamp is None and timestamp_range is not None:
                lo, hi = timestamp_range
                if not lo <= rec.timestamp <= hi:
                    problems.append(
                        f"{where}: timestamp {rec.timestamp} outside the produce run [{lo}, {hi}]"
                    )
            if len(problems) > max_problems:
                break
        if len(problems) > max_problems:
            break
    if problems:
        shown = "\n  ".join(problems[:max_problems])
        raise AssertionError(
            f"{len(received)} records received, {len(sent)} sent; problems:\n  {shown}"
            + (
                f"\n  ... and more ({len(problems)} shown up to {max_problems})"
                if len(problems) > max_problems
                else ""
            )
        )
