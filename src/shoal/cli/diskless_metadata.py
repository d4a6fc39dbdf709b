"""``shoal diskless-metadata``: KIP-1163's kafka-diskless-metadata tool.

``topic T`` gives the diskless topic overview (per partition: log start, high watermark, bytes
on object storage; totals: the objects the topic is in, and the objects that held only deleted
batches of it), ``object KEY`` one object's metadata (key, total and used size, state, and its
batches). Both read the broker's metadata store directly, because the Batch Coordinator is the
only place that knows this (no Kafka API exposes it). The SQLite file is in WAL mode, so reading
it while a broker runs is safe; nothing is written.

The stores are found the way every tool finds them (``cli/store_options.py``): ``--config
server.properties``, ``--data-dir``, or ``./shoal-data``. ``dump-log`` shares these helpers.
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import PurePosixPath
from typing import Annotated

import typer

from shoal.cli.store_options import ConfigOpt, DataDirOpt, MetadataDirOpt, OverrideOpt, tool_config
from shoal.config import Config
from shoal.coordinator.api import ObjectDescription, TopicDescription
from shoal.metadata.cache import MetadataCache
from shoal.metadata.image import MetadataImage
from shoal.metadata.records import RemoveTopicRecord, TopicRecord
from shoal.records.types import TimestampType
from shoal.store.factory import (
    StoreNotFoundError,
    open_batch_coordinator,
    open_metadata_store,
    store_location,
)

diskless_metadata_app = typer.Typer(
    help="Inspect diskless topics and WAL objects in the metadata store (KIP-1163's kafka-diskless-metadata).",
    no_args_is_help=True,
)

_LOG_PAGE = 10_000


class ToolError(Exception):
    """A failure the tool reports in one line (exit code 1)."""

    exit_code = 1


class UsageError(ToolError):
    """Options that do not fit together (exit code 2, as for other usage errors)."""

    exit_code = 2


# --------------------------------------------------------------------------------- shared helpers


def kafka_uuid(value: uuid.UUID) -> str:
    """A UUID as Kafka prints topic ids: URL-safe base64 without padding (Uuid.toString)."""
    return base64.urlsafe_b64encode(value.bytes).decode().rstrip("=")


def parse_topic_id(text: str) -> uuid.UUID | None:
    """A topic id given as Kafka prints it (base64) or as a plain UUID; None if it is neither."""
    try:
        return uuid.UUID(text)
    except ValueError:
        pass
    if len(text) == 22:
        try:
            raw = base64.urlsafe_b64decode(text + "==")
        except (ValueError, TypeError):
            return None
        if len(raw) == 16:
            return uuid.UUID(bytes=raw)
    return None


class MetadataStoreReader:
    """Read-only access to a broker's stores: the cluster image and the coordinator's views."""

    def __init__(self, config: Config) -> None:
        try:
            self._store = open_metadata_store(config, must_exist=True)
        except StoreNotFoundError as exc:
            raise ToolError(str(exc)) from None
        try:
            self.coordinator = open_batch_coordinator(config)
        except BaseException:
            self._store.close()
            raise
        self.location = store_location(config)
        self._image: MetadataImage | None = None

    def close(self) -> None:
        self.coordinator.close()
        self._store.close()

    def image(self) -> MetadataImage:
        """The current cluster metadata, replayed from the metadata log once per reader."""
        if self._image is None:
            self._image = MetadataCache(self._store).catch_up()
        return self._image

    def topic_history(self) -> list[tuple[str, uuid.UUID, bool]]:
        """Every topic the metadata log has seen, oldest first: (name, id, deleted since). A deleted
        topic's emptied objects can wait for physical deletion long after its name left the image."""
        topics: dict[uuid.UUID, tuple[str, bool]] = {}
        offset = 0
        while True:
            records = self._store.read(offset, _LOG_PAGE)
            for _, record in records:
                if isinstance(record, TopicRecord):
                    topics[record.topic_id] = (record.name, False)
                elif isinstance(record, RemoveTopicRecord) and record.topic_id in topics:
                    topics[record.topic_id] = (topics[record.topic_id][0], True)
            if len(records) < _LOG_PAGE:
                return [(name, topic_id, deleted) for topic_id, (name, deleted) in topics.items()]
            offset = records[-1][0] + 1

    def find_object(self, key_or_path: str) -> ObjectDescription | None:
        """An object by key, or by the path of a local copy of it (``.../objects/wal/<uuid>``)."""
        for key in object_key_candidates(key_or_path):
            found = self.coordinator.describe_object(key)
            if found is not None:
                return found
        return None


def object_key_candidates(key_or_path: str) -> list[str]:
    """The key as given, then the path's trailing components, shortest first (``<uuid>``,
    ``wal/<uuid>``, ...): a local object store keeps a key's ``/`` as subdirectories."""
    parts = [p for p in PurePosixPath(key_or_path.replace("\\", "/")).parts if p not in ("/", "")]
    candidates = [key_or_path]
    for start in range(len(parts) - 1, -1, -1):
        key = "/".join(parts[start:])
        if key not in candidates:
            candidates.append(key)
    return candidates


@contextmanager
def open_store(config: Config) -> Iterator[MetadataStoreReader]:
    """The stores of a tool's configuration; tool errors end the command with exit code 1."""
    try:
        reader = MetadataStoreReader(config)
    except ToolError as exc:
        typer.echo(f"Error: {exc}", err=True)
        raise typer.Exit(exc.exit_code) from None
    try:
        yield reader
    finally:
        reader.close()


def format_time(value: datetime | None) -> str:
    return "-" if value is None else value.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def timestamp_type_name(value: TimestampType) -> str:
    """Kafka's TimestampType names, as its tools print them."""
    return "LogAppendTime" if value == TimestampType.LOG_APPEND_TIME else "CreateTime"


# ------------------------------------------------------------------------------------------ topic


def print_topic(desc: TopicDescription, name: str, deleted: bool) -> None:
    """The overview in kafka-topics' describe layout: a topic line, a tab-led line per partition."""
    total = sum(p.byte_size for p in desc.partitions)
    state = "\tMarkedForDeletion: true" if deleted else ""
    typer.echo(
        f"Topic: {name}\tTopicId: {kafka_uuid(desc.topic_id)}\tPartitionCount: {len(desc.partitions)}"
        f"\tSize: {total}{state}"
    )
    for p in desc.partitions:
        typer.echo(
            f"\tTopic: {name}\tPartition: {p.partition}\tLogStartOffset: {p.log_start_offset}"
            f"\tHighWatermark: {p.high_watermark}\tSize: {p.byte_size}"
        )
    typer.echo(f"Size on object storage: {total} bytes in the live batches of the topic")
    typer.echo(
        f"Objects holding batches of the topic: {desc.object_count}, {desc.object_bytes} bytes in total"
    )
    typer.echo(
        f"Objects holding only deleted batches of the topic: {desc.deleted_object_count}, "
        f"{desc.deleted_object_bytes} bytes in total"
    )


@diskless_metadata_app.command("topic")
def topic(
    name: Annotated[str, typer.Argument(help="The diskless topic: its name, or its id (also of a deleted topic).")],
    config: ConfigOpt = None,
    data_dir: DataDirOpt = None,
    metadata_dir: MetadataDirOpt = None,
    override: OverrideOpt = None,
) -> None:
    """Diskless topic overview: offsets and bytes per partition, sizes of the objects it is in."""
    with open_store(tool_config(config, data_dir, metadata_dir, override)) as store:
        image = store.image()
        given_id = parse_topic_id(name)
        current = image.topic(name)
        if current is None and given_id is not None:
            current = image.topics_by_id.get(given_id)
        if current is not None and not current.is_diskless:
            typer.echo(f"Error: Topic '{current.name}' is not a diskless topic (diskless.enable=false).", err=True)
            raise typer.Exit(1)
        if current is not None:
            candidates = [(current.name, current.topic_id, False)]
        else:  # deleted topics of that name (the latest first), or by id
            history = list(reversed(store.topic_history()))
            candidates = [h for h in history if h[0] == name] or [h for h in history if h[1] == given_id]
        for topic_name, topic_id, deleted in candidates:
            desc = store.coordinator.describe_topic(topic_id)
            if desc is not None:
                print_topic(desc, topic_name, deleted)
                return
        if current is not None:
            typer.echo(f"Error: The batch coordinator has no state for topic '{current.name}'.", err=True)
        elif candidates:
            typer.echo(f"Error: Topic '{candidates[0][0]}' was deleted and no object of it is left.", err=True)
        else:
            typer.echo(f"Error: Topic '{name}' does not exist.", err=True)
        raise typer.Exit(1)


# ----------------------------------------------------------------------------------------- object


def print_object(desc: ObjectDescription) -> None:
    """Key, sizes and state on one line, then one tab-led line per live batch in byte order."""
    typer.echo(
        f"Object: {desc.object_key}\tSize: {desc.size}\tUsedSize: {desc.used_size}\tState: {desc.state}"
        f"\tUploaderBrokerId: {desc.uploader_broker_id}\tCommittedAt: {format_time(desc.committed_at)}"
        f"\tMarkedForDeletionAt: {format_time(desc.marked_for_deletion_at)}\tBatchCount: {len(desc.batches)}"
    )
    for batch in desc.batches:
        m = batch.metadata
        tp = m.topic_id_partition
        typer.echo(
            f"\tTopic: {tp.topic_name}\tTopicId: {kafka_uuid(tp.topic_id)}\tPartition: {tp.partition}"
            f"\tBaseOffset: {m.base_offset}\tLastOffset: {m.last_offset}\tByteOffset: {m.byte_offset}"
            f"\tByteSize: {m.byte_size}\tTimestampType: {timestamp_type_name(m.timestamp_type)}"
            f"\tMaxTimestamp: {m.batch_max_timestamp}\tLogAppendTime: {m.log_append_timestamp}"
            f"\tProducerId: {m.producer_id}\tProducerEpoch: {m.producer_epoch}"
            f"\tBaseSequence: {m.base_sequence}\tLastSequence: {m.last_sequence}\tBatchId: {batch.batch_id}"
        )


@diskless_metadata_app.command("object")
def object_(
    key: Annotated[str, typer.Argument(help="The object key (wal/<uuid>), or the path of a local copy of it.")],
    config: ConfigOpt = None,
    data_dir: DataDirOpt = None,
    metadata_dir: MetadataDirOpt = None,
    override: OverrideOpt = None,
) -> None:
    """Object metadata: key, total size, used size, state and the live batches in it."""
    with open_store(tool_config(config, data_dir, metadata_dir, override)) as store:
        desc = store.find_object(key)
    if desc is None:
        typer.echo(
            f"Error: Object '{key}' is not known to the batch coordinator (never committed, or already deleted).",
            err=True,
        )
        raise typer.Exit(1)
    print_object(desc)
