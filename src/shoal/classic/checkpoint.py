"""Kafka's small state files in log dirs and partition dirs, byte for byte as Kafka writes them.

Kafka's own tools (and a Kafka broker pointed at the same directories) read these files, so
the formats are Kafka's exactly:

- offset checkpoints (``recovery-point-offset-checkpoint``, ``log-start-offset-checkpoint``,
  ``replication-offset-checkpoint``): ``0\\n<count>\\n<topic> <partition> <offset>\\n...``
- ``leader-epoch-checkpoint``: ``0\\n<count>\\n<epoch> <startOffset>\\n...``
- ``partition.metadata``: ``version: 0\\ntopic_id: <Kafka Uuid>\\n``
- ``meta.properties``: Java properties, ``version=1`` with ``cluster.id``, ``node.id``,
  ``directory.id`` (Kafka 3.7+)
- ``.kafka_cleanshutdown``: JSON ``{"version":"0","broker_epoch":"<epoch>"}`` (Kafka 3.6+)

Every write goes to ``<file>.tmp``, is fsynced, renamed over the file and the directory is
fsynced, as Kafka's CheckpointFile does, so a crash leaves the old or the new file, never half.
A malformed file raises ``MalformedFileError``, an OSError: Kafka treats it as an I/O error of
the log dir, and so do we (the dir goes offline through the failure channel).
"""

from __future__ import annotations

import base64
import json
import os
import time
import uuid
from collections.abc import Iterable, Mapping
from pathlib import Path

__all__ = [
    "CLEAN_SHUTDOWN_FILE",
    "LEADER_EPOCH_CHECKPOINT",
    "LOG_START_OFFSET_CHECKPOINT",
    "META_PROPERTIES",
    "PARTITION_METADATA",
    "RECOVERY_POINT_CHECKPOINT",
    "REPLICATION_OFFSET_CHECKPOINT",
    "MalformedFileError",
    "atomic_write",
    "fsync_dir",
    "has_clean_shutdown",
    "kafka_uuid_str",
    "new_kafka_uuid",
    "read_leader_epoch_checkpoint",
    "read_meta_properties",
    "read_offset_checkpoint",
    "read_partition_metadata",
    "remove_clean_shutdown",
    "write_clean_shutdown",
    "write_leader_epoch_checkpoint",
    "write_meta_properties",
    "write_offset_checkpoint",
    "write_partition_metadata",
]

RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"
LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
PARTITION_METADATA = "partition.metadata"
META_PROPERTIES = "meta.properties"
CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"

_CHECKPOINT_VERSION = 0


class MalformedFileError(OSError):
    """A state file that does not parse: an I/O error of its log dir, as in Kafka."""


def fsync_dir(path: str | Path) -> None:
    """Make a rename or a new file in ``path`` durable (the directory entry itself)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: str | Path, data: bytes, *, sync: bool = True) -> None:
    """Replace ``path`` with ``data`` through ``<path>.tmp`` and a rename (fsync both when ``sync``)."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    if sync:
        fsync_dir(path.parent)


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None


def _read_versioned_lines(path: Path, fields: int) -> list[list[str]] | None:
    """Kafka's CheckpointFile reader: version 0, a count, then ``count`` whitespace-separated lines."""
    text = _read_text(path)
    if text is None:
        return None
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    try:
        version = int(lines[0])
        count = int(lines[1])
    except (IndexError, ValueError) as e:
        raise MalformedFileError(f"Malformed header in checkpoint file {path}") from e
    if version != _CHECKPOINT_VERSION:
        raise MalformedFileError(f"Unrecognized version of the checkpoint file {path}: {version}")
    rows = [line.split() for line in lines[2:]]
    for row in rows:
        if len(row) != fields:
            raise MalformedFileError(f"Malformed line in checkpoint file {path}: {' '.join(row)!r}")
    if len(rows) != count:
        raise MalformedFileError(f"Expected {count} entries in checkpoint file {path}, but found {len(rows)}")
    return rows


def read_offset_checkpoint(path: str | Path) -> dict[tuple[str, int], int]:
    """``(topic, partition) -> offset`` from an offset checkpoint; empty when the file does not exist."""
    rows = _read_versioned_lines(Path(path), 3)
    if rows is None:
        return {}
    out: dict[tuple[str, int], int] = {}
    for topic, partition, offset in rows:
        try:
            out[(topic, int(partition))] = int(offset)
        except ValueError as e:
            raise MalformedFileError(
                f"Malformed line in checkpoint file {path}: {topic} {partition} {offset}"
            ) from e
    return out


def write_offset_checkpoint(path: str | Path, offsets: Mapping[tuple[str, int], int]) -> None:
    """Write an offset checkpoint durably (sorted, so the file is stable between writes)."""
    lines = [str(_CHECKPOINT_VERSION), str(len(offsets))]
    lines += [f"{t} {p} {o}" for (t, p), o in sorted(offsets.items())]
    atomic_write(path, ("\n".join(lines) + "\n").encode())


def read_leader_epoch_checkpoint(path: str | Path) -> list[tuple[int, int]]:
    """``[(epoch, start_offset)]`` in file order; empty when the file does not exist."""
    rows = _read_versioned_lines(Path(path), 2)
    if rows is None:
        return []
    try:
        return [(int(epoch), int(start)) for epoch, start in rows]
    except ValueError as e:
        raise MalformedFileError(f"Malformed line in leader epoch checkpoint {path}") from e


def write_leader_epoch_checkpoint(path: str | Path, entries: Iterable[tuple[int, int]]) -> None:
    """Write the leader epoch cache durably."""
    entries = list(entries)
    lines = [str(_CHECKPOINT_VERSION), str(len(entries))] + [f"{e} {o}" for e, o in entries]
    atomic_write(path, ("\n".join(lines) + "\n").encode())


def read_partition_metadata(path: str | Path) -> str | None:
    """The topic id in ``partition.metadata`` (None when the file does not exist)."""
    text = _read_text(Path(path))
    if text is None:
        return None
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if ":" in line:
            key, _, value = line.partition(":")
            fields[key.strip()] = value.strip()
    if fields.get("version") != "0" or not fields.get("topic_id"):
        raise MalformedFileError(f"Malformed partition metadata file {path}")
    return fields["topic_id"]


def write_partition_metadata(path: str | Path, topic_id: str) -> None:
    """Write ``partition.metadata`` durably."""
    atomic_write(path, f"version: 0\ntopic_id: {topic_id}\n".encode())


def new_kafka_uuid() -> str:
    """A random Kafka Uuid in its string form: 16 bytes, URL-safe base64 without padding.

    Like Kafka's ``Uuid.randomUuid`` it never starts with ``-`` (confusing on command lines)
    and is never one of the small reserved ids.
    """
    while True:
        raw = uuid.uuid4().bytes
        text = base64.urlsafe_b64encode(raw).rstrip(b"=").decode()
        if not text.startswith("-") and int.from_bytes(raw, "big") >= 100:
            return text


def read_meta_properties(path: str | Path) -> dict[str, str] | None:
    """Java properties of ``meta.properties`` (None when the file does not exist)."""
    text = _read_text(Path(path))
    if text is None:
        return None
    props: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        sep = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
        if sep < 0:
            raise MalformedFileError(f"Malformed line in {path}: {line!r}")
        props[line[:sep].strip()] = line[sep + 1 :].strip()
    return props


def write_meta_properties(path: str | Path, props: Mapping[str, str]) -> None:
    """Write ``meta.properties`` as Java's ``Properties.store`` does (comment, date, key=value)."""
    stamp = time.strftime("%a %b %d %H:%M:%S UTC %Y", time.gmtime())
    body = "".join(f"{k}={v}\n" for k, v in props.items())
    atomic_write(path, f"#\n#{stamp}\n{body}".encode())


def write_clean_shutdown(log_dir: str | Path, broker_epoch: int = -1) -> None:
    """Leave Kafka's clean-shutdown marker: recovery can be skipped at the next start."""
    payload = json.dumps({"version": "0", "broker_epoch": str(broker_epoch)}, separators=(",", ":"))
    atomic_write(Path(log_dir) / CLEAN_SHUTDOWN_FILE, payload.encode())


def has_clean_shutdown(log_dir: str | Path) -> bool:
    """Whether the last shutdown of this dir was clean (the marker exists)."""
    return (Path(log_dir) / CLEAN_SHUTDOWN_FILE).exists()


def remove_clean_shutdown(log_dir: str | Path) -> None:
    """Drop the marker once loading starts, so a crash from now on forces recovery next time."""
    try:
        os.unlink(Path(log_dir) / CLEAN_SHUTDOWN_FILE)
    except FileNotFoundError:
        return
    fsync_dir(log_dir)


def kafka_uuid_str(topic_id: uuid.UUID | str) -> str:
    """A topic id in Kafka's string form (``uuid.UUID`` objects are converted, strings kept)."""
    if isinstance(topic_id, uuid.UUID):
        return base64.urlsafe_b64encode(topic_id.bytes).rstrip(b"=").decode()
    return topic_id


def parse_kafka_uuid(text: str) -> uuid.UUID | None:
    """A topic id from Kafka's string form (``kafka_uuid_str``), None when it is not one."""
    try:
        topic_id = uuid.UUID(bytes=base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
    except ValueError:
        return None
    return topic_id if kafka_uuid_str(topic_id) == text else None
