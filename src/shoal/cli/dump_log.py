"""``shoal dump-log``: kafka-dump-log.sh for diskless WAL segment objects and classic segment files.

KIP-1163 asks kafka-dump-log.sh to read shared log segment (WAL) objects as well as ``.log``
files. The output keeps Kafka's layout (``baseOffset: ... position: ... isvalid: true`` per
batch, ``| offset: ... CreateTime: ... payload: ...`` per record) so that what operators know
and what their scripts parse carries over.

A WAL segment is ``0x00`` + batches grouped by partition, each as the producer sent it: it holds
neither partition ids nor the offsets the Batch Coordinator assigned. Given the broker's metadata
store (``--metadata-dir`` or ``--config``) the object is looked up there and each batch is shown
with its topic-partition and assigned offsets (and its append time on LogAppendTime topics), as a
consumer would see it; without it, the producer's offsets are shown.
"""

from __future__ import annotations

import mmap
import os
import re
import struct
import sys
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer

from shoal.classic.txn_index import TransactionIndex
from shoal.cli.diskless_metadata import MetadataStoreReader, ToolError, format_time
from shoal.cli.dump_remote import fetch_remote_segment, remote_label
from shoal.cli.dump_txn_state import transaction_state_lines
from shoal.cli.process_exit import exit_without_finalizing
from shoal.cli.store_options import ConfigOpt, DataDirOpt, MetadataDirOpt, OverrideOpt, tool_config
from shoal.coordinator.api import BatchInfo, ObjectDescription
from shoal.protocol.errors import KafkaError
from shoal.records.batch import HEADER_SIZE, LOG_OVERHEAD, MAGIC_OFFSET, MIN_BATCH_LENGTH, BatchHeader, crc_of
from shoal.records.codec import CONTROL_ABORT, CONTROL_COMMIT, Record, decode_batch, iter_batches
from shoal.records.types import TimestampType
from shoal.records.wal import WAL_HEADER_SIZE, WAL_VERSION, WalFormatError, iter_segment
from shoal.store.locate import DEFAULT_DATA_DIR

# Kafka's segment files: the base offset, zero-padded to 20 digits, + ".log".
CLASSIC_NAME = re.compile(r"^(\d{20})\.log$")
CODEC_NAMES = ("none", "gzip", "snappy", "lz4", "zstd")  # CompressionType.name, by codec id
_INT32_MAX = 2**31 - 1
_LENGTH = struct.Struct(">i")


class SegmentKind:
    WAL = "wal"
    CLASSIC = "classic"


# ------------------------------------------------------------------------------------ detection


def _parses_as_batches(data: bytes | mmap.mmap, start: int) -> bool:
    """True when ``data[start:]`` is whole v2 batches back to back (lengths and magic only)."""
    pos, end = start, len(data)
    while pos < end:
        if end - pos < HEADER_SIZE:
            return False
        (length,) = _LENGTH.unpack_from(data, pos + 8)
        if data[pos + MAGIC_OFFSET] != 2 or length < MIN_BATCH_LENGTH:
            return False
        pos += LOG_OVERHEAD + length
    return pos == end


def detect_kind(path: Path, data: bytes | mmap.mmap) -> str:
    """WAL object or classic segment: by Kafka's file naming first, then by which layout the bytes fit.

    Both layouts usually start with a zero byte (a WAL's version, a classic base offset's high
    byte), so the content test parses the whole file both ways.
    """
    if CLASSIC_NAME.match(path.name) or path.suffix == ".log":
        return SegmentKind.CLASSIC
    if len(data) >= WAL_HEADER_SIZE and data[0] == WAL_VERSION and _parses_as_batches(data, WAL_HEADER_SIZE):
        return SegmentKind.WAL
    if _parses_as_batches(data, 0):
        return SegmentKind.CLASSIC
    # Neither parses to the end: guess by where the first magic byte sits, the reader says where it breaks.
    if len(data) > WAL_HEADER_SIZE + MAGIC_OFFSET and data[0] == WAL_VERSION and data[WAL_HEADER_SIZE + MAGIC_OFFSET] == 2:
        return SegmentKind.WAL
    return SegmentKind.CLASSIC


# ------------------------------------------------------------------------------------- printing


def _bool(value: bool) -> str:
    return "true" if value else "false"


def codec_name(codec: int) -> str:
    return CODEC_NAMES[codec] if codec < len(CODEC_NAMES) else f"unknown({codec})"


def timestamp_type_name(ts_type: int) -> str:
    return "LogAppendTime" if ts_type == TimestampType.LOG_APPEND_TIME else "CreateTime"


def _increment_sequence(sequence: int, increment: int) -> int:
    """DefaultRecordBatch.incrementSequence: sequences wrap past INT32_MAX to 0."""
    if sequence > _INT32_MAX - increment:
        return increment - (_INT32_MAX - sequence) - 1
    return sequence + increment


def _text(value: bytes) -> str:
    """Kafka's StringDecoder: UTF-8, undecodable bytes replaced."""
    return value.decode("utf-8", "replace")


@dataclass(frozen=True, slots=True)
class BatchView:
    """One batch as it is printed: the stored header plus what the coordinator knows of it."""

    header: BatchHeader
    position: int
    valid: bool
    base_offset: int  # assigned by the coordinator when known, else the stored (producer's) one
    timestamp_type: int
    max_timestamp: int
    append_time: int | None = None  # LogAppendTime the coordinator stamped, for LogAppendTime topics
    where: str = ""  # "topic: T partition: P " for WAL batches

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.header.last_offset_delta


def batch_line(view: BatchView) -> str:
    """Kafka's printBatchLevel line for a v2 batch (DumpLogSegments), with the WAL's topic-partition first."""
    h = view.header
    horizon = f"OptionalLong[{h.base_timestamp}]" if h.has_delete_horizon else "OptionalLong.empty"
    return (
        f"{view.where}baseOffset: {view.base_offset} lastOffset: {view.last_offset} count: {h.records_count} "
        f"baseSequence: {h.base_sequence} lastSequence: {h.last_sequence} producerId: {h.producer_id} "
        f"producerEpoch: {h.producer_epoch} partitionLeaderEpoch: {h.partition_leader_epoch} "
        f"isTransactional: {_bool(h.is_transactional)} isControl: {_bool(h.is_control)} "
        f"deleteHorizonMs: {horizon} position: {view.position} "
        f"{timestamp_type_name(view.timestamp_type)}: {view.max_timestamp} size: {h.size} magic: {h.magic} "
        f"compresscodec: {codec_name(h.compression)} crc: {h.crc} isvalid: {_bool(view.valid)}"
    )


def _control_text(record: Record) -> str:
    """What Kafka prints for a control record: the transaction marker and its coordinator epoch."""
    key, value = record.key or b"", record.value or b""
    if len(key) < 4:
        return " controlType: UNKNOWN(-1)"
    _version, kind = struct.unpack_from(">hh", key)
    if kind in (CONTROL_ABORT, CONTROL_COMMIT) and len(value) >= 6:
        _version, epoch = struct.unpack_from(">hi", value)
        return f" endTxnMarker: {'COMMIT' if kind == CONTROL_COMMIT else 'ABORT'} coordinatorEpoch: {epoch}"
    return f" controlType: UNKNOWN({kind})"


def record_line(view: BatchView, record: Record, print_data: bool) -> str:
    """Kafka's per-record line; with ``print_data`` also the headers, key and payload as UTF-8 text."""
    h = view.header
    delta = record.offset - h.base_offset
    timestamp = view.append_time if view.append_time is not None else record.timestamp
    sequence = -1 if h.base_sequence < 0 else _increment_sequence(h.base_sequence, delta)
    line = (
        f"| offset: {view.base_offset + delta} {timestamp_type_name(view.timestamp_type)}: {timestamp} "
        f"keySize: {-1 if record.key is None else len(record.key)} "
        f"valueSize: {-1 if record.value is None else len(record.value)} "
        f"sequence: {sequence} headerKeys: [{','.join(k for k, _ in record.headers)}]"
    )
    if h.is_control:
        line += _control_text(record)
    elif print_data:
        if record.headers:
            shown = ",".join(f"{k}={'null' if v is None else _text(v)}" for k, v in record.headers)
            line += f" headers: [{shown}]"
        if record.key is not None:
            line += f" key: {_text(record.key)}"
        if record.value is not None:
            line += f" payload: {_text(record.value)}"
    return line


# -------------------------------------------------------------------------------------- dumping


class Output:
    """Buffered stdout lines (a segment can hold millions of records) and the run's exit status."""

    def __init__(self) -> None:
        self.failed = False
        self._out = sys.stdout

    def line(self, text: str) -> None:
        self._out.write(text + "\n")

    def error(self, text: str) -> None:
        self._out.flush()
        typer.echo(text, err=True)
        self.failed = True


def _print_records(out: Output, data: bytes | mmap.mmap, view: BatchView, print_data: bool) -> list[int]:
    """The batch's record lines; returns the printed offsets (for Kafka's non-consecutive check)."""
    try:
        _, records = decode_batch(data, view.position, check_crc=False)
    except KafkaError as exc:
        out.error(f"Cannot decode the records of the batch at position {view.position}: {exc.message}")
        return []
    offsets = []
    for record in records:
        out.line(record_line(view, record, print_data))
        offsets.append(view.base_offset + record.offset - view.header.base_offset)
    return offsets


def dump_classic(out: Output, path: Path, data: bytes | mmap.mmap, deep: bool, print_data: bool) -> None:
    """A Kafka segment file: batches from byte 0 with their real offsets, as DumpLogSegments reads them."""
    named = CLASSIC_NAME.match(path.name)
    if named:
        out.line(f"Log starting offset: {int(named.group(1))}")
    valid_bytes = 0
    last_offset = -1
    gaps: list[tuple[int, int]] = []
    try:
        for position, header in iter_batches(data):
            view = BatchView(
                header, position, crc_of(data, position, header.size) == header.crc, header.base_offset,
                header.timestamp_type, header.max_timestamp,
            )
            out.line(batch_line(view))
            if deep or print_data:
                for offset in _print_records(out, data, view, print_data):
                    if last_offset != -1 and offset != last_offset + 1:
                        gaps.append((last_offset, offset))
                    last_offset = offset
            valid_bytes = position + header.size
    except KafkaError as exc:
        out.error(f"Cannot read {path} past byte {valid_bytes}: {exc.message}")
    trailing = len(data) - valid_bytes
    if trailing > 0:
        out.line(f"Found {trailing} invalid bytes at the end of {path.name}")
    if gaps:  # on stderr, as Kafka reports them, but not a failure
        sys.stdout.flush()
        typer.echo(f"Non-consecutive offsets in {path.resolve()}", err=True)
        for before, after in gaps:
            typer.echo(f"  {before} is followed by {after}", err=True)


def _wal_header_lines(path: Path, obj: ObjectDescription | None, store: MetadataStoreReader | None) -> list[str]:
    lines = [f"WAL segment version: {WAL_VERSION} (diskless shared log segment: batches grouped by partition)"]
    if store is None:
        lines.append(
            "Partitions and assigned offsets are not stored in the object: offsets below are the producer's; "
            "give --config or --data-dir to look them up in the batch coordinator."
        )
    elif obj is None:
        lines.append(
            f"Object {path.name} is not known to the batch coordinator (never committed, or already deleted): "
            "offsets below are the producer's."
        )
    else:
        lines.append(
            f"Object key: {obj.object_key} size: {obj.size} usedSize: {obj.used_size} state: {obj.state} "
            f"uploaderBrokerId: {obj.uploader_broker_id} committedAt: {format_time(obj.committed_at)} "
            f"liveBatches: {len(obj.batches)}"
        )
    return lines


def _wal_view(data: bytes | mmap.mmap, position: int, header: BatchHeader, known: BatchInfo | None,
              missing: str) -> BatchView:
    """The batch as a reader sees it when the coordinator knows it; else as stored, marked ``missing``."""
    valid = crc_of(data, position, header.size) == header.crc
    if known is None:
        where = f"topic: {missing} partition: {missing} " if missing else ""
        return BatchView(header, position, valid, header.base_offset, header.timestamp_type, header.max_timestamp,
                         where=where)
    m = known.metadata
    tp = m.topic_id_partition
    where = f"topic: {tp.topic_name} partition: {tp.partition} "
    if m.timestamp_type == TimestampType.LOG_APPEND_TIME:
        return BatchView(header, position, valid, m.base_offset, TimestampType.LOG_APPEND_TIME,
                         m.log_append_timestamp, m.log_append_timestamp, where)
    return BatchView(header, position, valid, m.base_offset, header.timestamp_type, header.max_timestamp,
                     where=where)


def dump_wal(out: Output, path: Path, data: bytes | mmap.mmap, deep: bool, print_data: bool,
             store: MetadataStoreReader | None) -> None:
    """A WAL segment object; with a store, each batch under its topic-partition and assigned offsets."""
    obj = store.find_object(str(path)) if store is not None else None
    for text in _wal_header_lines(path, obj, store):
        out.line(text)
    live = {b.metadata.byte_offset: b for b in obj.batches} if obj is not None else {}
    valid_bytes = WAL_HEADER_SIZE if data[:1] == bytes([WAL_VERSION]) else 0
    # A committed object's batch the coordinator no longer lists was deleted (retention, DeleteRecords,
    # topic deletion); in an object it does not know, nothing can be said.
    missing = "" if store is None else "(deleted)" if obj is not None else "unknown"
    try:
        for position, header in iter_segment(data):
            known = live.get(position)
            if known is not None and known.metadata.byte_size != header.size:
                out.error(
                    f"The batch coordinator's batch at byte {position} of {obj.object_key if obj else path.name} "
                    f"has {known.metadata.byte_size} bytes, the file's {header.size}: is this the same object?"
                )
                known = None
            view = _wal_view(data, position, header, known, missing)
            out.line(batch_line(view))
            if deep or print_data:
                _print_records(out, data, view, print_data)
            valid_bytes = position + header.size
    except WalFormatError as exc:
        out.error(f"{path} is not a valid WAL segment: {exc}")
        trailing = len(data) - valid_bytes
        if trailing > 0:
            out.line(f"Found {trailing} invalid bytes at the end of {path.name}")


@contextmanager
def _mapped(path: Path) -> Iterator[bytes | mmap.mmap]:
    """The file's bytes without reading them all in (a classic segment is up to a GiB)."""
    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            yield b""
            return
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        try:
            yield mm
        finally:
            # A view may still be alive on an error path: the map then goes with it.
            with suppress(BufferError):
                mm.close()


def dump_txn_index(out: Output, path: Path) -> None:
    """A ``.txnindex`` (aborted transactions of a segment), one entry per line as Kafka's
    DumpLogSegments prints them."""
    base = int(path.stem) if path.stem.isdigit() else 0
    index = TransactionIndex(path, base)
    try:
        for txn in index.all_aborted():
            out.line(f"version: 0 producerId: {txn.producer_id} firstOffset: {txn.first_offset} "
                     f"lastOffset: {txn.last_offset} lastStableOffset: {txn.last_stable_offset}")
    finally:
        index.close()


def dump_file(out: Output, path: Path, deep: bool, print_data: bool, store: MetadataStoreReader | None) -> None:
    out.line(f"Dumping {path}")
    if path.suffix == ".txnindex":
        try:
            dump_txn_index(out, path)
        except (OSError, ValueError, KafkaError) as exc:
            out.error(f"Cannot read {path}: {exc}")
        return
    try:
        with _mapped(path) as data:
            if detect_kind(path, data) == SegmentKind.WAL:
                dump_wal(out, path, data, deep, print_data, store)
            else:
                dump_classic(out, path, data, deep, print_data)
    except BrokenPipeError:
        raise
    except OSError as exc:
        out.error(f"Cannot read {path}: {exc.strerror or exc}")


def dump_log(
    files: Annotated[
        list[Path] | None,
        typer.Argument(help="WAL segment objects and/or classic segment (.log) files.", show_default=False),
    ] = None,
    files_opt: Annotated[
        str | None, typer.Option("--files", help="Comma-separated files to dump, as kafka-dump-log.sh takes them.")
    ] = None,
    print_data: Annotated[
        bool, typer.Option("--print-data", help="Print every record with its headers, key and payload.")
    ] = False,
    deep_iteration: Annotated[
        bool, typer.Option("--deep-iteration", help="Print every record's metadata (no key or payload).")
    ] = False,
    remote_segment: Annotated[
        list[str] | None,
        typer.Option("--remote-segment", help="TOPIC:PARTITION:OFFSET: dump the tiered (remote) segment holding "
                     "that offset, read through the remote storage (needs the stores).", show_default=False),
    ] = None,
    transaction_log_decoder: Annotated[
        bool, typer.Option("--transaction-log-decoder", help="Print the transaction coordinator's state (Kafka's "
                           "__transaction_state records; kept in the metadata store), one transactional id per line.")
    ] = False,
    config: ConfigOpt = None,
    data_dir: DataDirOpt = None,
    metadata_dir: MetadataDirOpt = None,
    override: OverrideOpt = None,
) -> None:
    """Dump WAL segment objects and classic log segments batch by batch, like kafka-dump-log.sh.

    With the stores (``--config``, ``--data-dir``, or ``./shoal-data`` when it exists), each WAL
    batch is shown with its topic and assigned offsets."""
    paths = [*(files or []), *(Path(p.strip()) for p in (files_opt or "").split(",") if p.strip())]
    if not paths and not remote_segment and not transaction_log_decoder:
        typer.echo(
            "Error: Missing required argument: give FILE..., --files, --remote-segment or --transaction-log-decoder",
            err=True,
        )
        raise typer.Exit(2)
    store: MetadataStoreReader | None = None
    explicit = config is not None or data_dir is not None or metadata_dir is not None
    if explicit or DEFAULT_DATA_DIR.is_dir():  # the stores are optional here: files dump without them
        try:
            store = MetadataStoreReader(tool_config(config, data_dir, metadata_dir, override))
        except ToolError as exc:
            if explicit:
                typer.echo(f"Error: {exc}", err=True)
                raise typer.Exit(exc.exit_code) from None
    out = Output()
    try:
        for path in paths:
            dump_file(out, path, deep_iteration, print_data, store)
        for spec in remote_segment or ():
            try:
                segment, data = fetch_remote_segment(tool_config(config, data_dir, metadata_dir, override), spec)
            except ToolError as exc:
                typer.echo(f"Error: {exc}", err=True)
                raise typer.Exit(exc.exit_code) from None
            label = remote_label(segment)
            out.line(f"Dumping {label}")
            dump_classic(out, label, data, deep_iteration, print_data)
        if transaction_log_decoder:
            try:
                lines = transaction_state_lines(tool_config(config, data_dir, metadata_dir, override))
            except ToolError as exc:
                typer.echo(f"Error: {exc}", err=True)
                raise typer.Exit(exc.exit_code) from None
            out.line("Dumping the transaction state (__transaction_state)")
            for line in lines:
                out.line(line)
        sys.stdout.flush()
    except BrokenPipeError:  # `| head`: stop quietly, as a pipeline expects
        # Point stdout at /dev/null so the interpreter's final flush does not fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise typer.Exit(0) from None
    finally:
        if store is not None:
            store.close()
    if remote_segment:
        exit_without_finalizing(1 if out.failed else 0)  # it read object storage (process_exit)
    if out.failed:
        raise typer.Exit(1)
