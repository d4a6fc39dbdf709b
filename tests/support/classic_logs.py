"""Classic topics as a test sees them on disk: creating one, its partition directories, its
segment files parsed as Kafka stores them (RecordBatch v2 back to back), offset checkpoints."""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from tests.support.kafka_clients import admin_client, wait_for_topic

BATCH_HEADER_SIZE = 61  # RecordBatch v2: baseOffset .. recordCount


def create_classic_topic(
    bootstrap: str, name: str, partitions: int, config: Mapping[str, str] | None = None
) -> None:
    """CreateTopics without diskless.enable (a classic topic, the default kind), then wait for metadata."""
    from confluent_kafka.admin import NewTopic

    admin = admin_client(bootstrap)
    futures = admin.create_topics(
        [NewTopic(name, num_partitions=partitions, replication_factor=1, config=dict(config or {}))],
        operation_timeout=30,
        request_timeout=30,
    )
    futures[name].result(30)
    wait_for_topic(admin, name, partitions)


def partition_dirs(log_dirs: Iterable[Path], topic: str) -> dict[int, Path]:
    """Where each partition of ``topic`` lives: ``<log dir>/<topic>-<partition>`` (Kafka's layout)."""
    found: dict[int, Path] = {}
    prefix = f"{topic}-"
    for log_dir in log_dirs:
        if not log_dir.is_dir():
            continue
        for child in log_dir.iterdir():
            suffix = child.name[len(prefix) :]
            if child.is_dir() and child.name.startswith(prefix) and suffix.isdigit():
                found[int(suffix)] = child
    return found


def segment_files(partition_dir: Path) -> list[Path]:
    """The partition's ``.log`` files, oldest first (names are 20-digit base offsets)."""
    return sorted(partition_dir.glob("*.log"))


@dataclass(frozen=True, slots=True)
class DiskBatch:
    """One RecordBatch as stored in a segment file."""

    position: int
    base_offset: int
    size: int
    codec: int
    records: int

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.records


def read_segment(path: Path) -> list[DiskBatch]:
    """Parse a segment as Kafka stores it: batches back to back, each with its absolute base offset.

    Fails on anything that is not a well-formed RecordBatch v2, so a test learns the format is Kafka's.
    """
    data = path.read_bytes()
    batches: list[DiskBatch] = []
    pos = 0
    while pos < len(data):
        assert pos + BATCH_HEADER_SIZE <= len(data), f"{path}: truncated batch header at {pos} of {len(data)}"
        base_offset, batch_length = struct.unpack_from(">qi", data, pos)
        magic = data[pos + 16]
        size = 12 + batch_length
        assert magic == 2 and pos + size <= len(data), (
            f"{path}: not a RecordBatch v2 at {pos} (magic {magic})"
        )
        (attributes,) = struct.unpack_from(">h", data, pos + 21)
        (count,) = struct.unpack_from(">i", data, pos + 57)
        batches.append(DiskBatch(pos, base_offset, size, attributes & 0x7, count))
        pos += size
    name_offset = int(path.stem)
    assert not batches or batches[0].base_offset >= name_offset, f"{path}: first batch below the file's base"
    return batches


def disk_batches(partition_dir: Path) -> list[DiskBatch]:
    return [b for seg in segment_files(partition_dir) for b in read_segment(seg)]


def read_offset_checkpoint(path: Path) -> dict[tuple[str, int], int]:
    """Kafka's offset checkpoint file: version, count, then ``topic partition offset`` lines."""
    if not path.exists():
        return {}
    lines = path.read_text().splitlines()
    out = {}
    for line in lines[2:]:
        topic, partition, offset = line.rsplit(" ", 2)
        out[(topic, int(partition))] = int(offset)
    return out
