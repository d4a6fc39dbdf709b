"""Loading a partition's segments from disk, and recovering them after an unclean shutdown.

What Kafka's LogLoader does, in the same order:

1. Leftovers of interrupted operations go: ``*.deleted`` and ``*.cleaned`` files and our own
   ``*.tmp`` files are removed; ``*.swap`` files (a replacement that was fully written) are
   renamed into place and their segment is recovered; index files without a ``.log`` go. The
   log cleaner's swap of a group of segments leaves ``<base>.swap-end`` (the group's end
   offset) while it runs: the old segments of the group still there are deleted first, so a
   crash at any point leaves either the old group or the cleaned segment, never both.
2. Every ``.log`` is opened. A segment whose index file is missing or fails the sanity checks
   gets its indexes rebuilt (``LogSegment.recover``), clean shutdown or not.
3. Without the clean-shutdown marker, every segment from the one holding the recovery point
   on is recovered: each batch is re-read and CRC-checked and the indexes are rebuilt. At the
   first invalid batch the segment is truncated, and **every later segment is deleted** -- Kafka
   does exactly this (``LogLoader.recoverLog``): past a corrupt batch nothing is trusted, since
   offsets after the gap could not be served consistently. Segments below the recovery point
   were fsynced before the crash and are trusted as they are.
4. A log with no segment gets an empty one at its log start offset.

Valid batches re-assign the leader epoch cache (as Kafka's recovery does); producer state is
rebuilt afterwards by ``PartitionLog`` from the latest snapshot plus a replay of the log, and that
replay refills the ``.txnindex`` of every recovered segment (``producer_replay``). A ``.txnindex``
that fails its sanity check (a partial entry, an entry ending before the segment) gets the
segment recovered too; a missing one is an empty one, as in Kafka.
"""

from __future__ import annotations

import contextlib
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

from shoal.classic.index import CorruptIndexError
from shoal.classic.leader_epoch import LeaderEpochCache
from shoal.classic.log_config import LogConfig
from shoal.classic.segment import (
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    SWAP_END_SUFFIX,
    SWAP_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    LogSegment,
    file_name,
    offset_from_file_name,
)
from shoal.records.batch import BatchHeader

__all__ = ["LoadedSegments", "load_segments"]

_log = logging.getLogger(__name__)


@dataclass(slots=True)
class LoadedSegments:
    """The segments of a partition after loading, and what recovery had to do."""

    segments: list[LogSegment]
    recovered: list[LogSegment] = field(default_factory=list)
    truncated_bytes: int = 0
    deleted_segments: int = 0


def _unlink(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def _replaced_by_swaps(directory: Path, names: list[str]) -> None:
    """Delete the old segments a ``.swap`` replaces: those its ``.swap-end`` (written by the log
    cleaner before the swap) says it covers, above its own base offset (that one is overwritten)."""
    swaps = {offset_from_file_name(n) for n in names if n.endswith(LOG_SUFFIX + SWAP_SUFFIX)}
    segment_bases = {offset_from_file_name(n) for n in names if n.endswith(LOG_SUFFIX)}
    for name in names:
        if not name.endswith(SWAP_END_SUFFIX):
            continue
        base = offset_from_file_name(name)
        if base not in swaps:
            continue  # the swap finished (or never began): nothing to replace
        end = int((directory / name).read_text().strip() or base)
        for old in sorted(b for b in segment_bases if base < b < end):
            for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX):
                _unlink(directory / (file_name(old) + suffix))


def _clean_leftovers(directory: Path) -> set[int]:
    """Remove temp files, complete swaps; return the base offsets of swapped-in segments."""
    names = sorted(os.listdir(directory))
    _replaced_by_swaps(directory, names)
    swapped: set[int] = set()
    for name in names:
        path = directory / name
        if name.endswith((DELETED_SUFFIX, CLEANED_SUFFIX, ".tmp")):
            _unlink(path)
        elif name.endswith(SWAP_SUFFIX):
            final = name[: -len(SWAP_SUFFIX)]
            os.replace(path, directory / final)
            if final.endswith(LOG_SUFFIX):
                swapped.add(offset_from_file_name(final))
    for name in names:
        if name.endswith(SWAP_END_SUFFIX):
            _unlink(directory / name)
    return swapped


def load_segments(
    directory: Path,
    config: LogConfig,
    *,
    recovery_point: int,
    log_start_offset: int,
    clean_shutdown: bool,
    now_ms: int,
    epochs: LeaderEpochCache,
    name: str,
) -> LoadedSegments:
    """Open (and where needed recover) every segment of the partition in ``directory``."""
    swapped = _clean_leftovers(directory)
    names = os.listdir(directory)
    bases = sorted(offset_from_file_name(n) for n in names if n.endswith(LOG_SUFFIX))
    base_set = set(bases)
    for n in names:
        if n.endswith((INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)):
            try:
                orphan = offset_from_file_name(n) not in base_set
            except ValueError:
                continue
            if orphan:
                _unlink(directory / n)

    def assign_epoch(h: BatchHeader) -> None:
        latest = epochs.latest_epoch
        if h.partition_leader_epoch >= 0 and (latest is None or h.partition_leader_epoch > latest):
            epochs.assign(h.partition_leader_epoch, h.base_offset, write=False)

    result = LoadedSegments(segments=[])
    segments = result.segments
    try:
        for base in bases:
            seg = LogSegment(
                directory,
                base,
                index_interval_bytes=config.index_interval_bytes,
                max_index_size=config.segment_index_bytes,
                now_ms=now_ms,
                create=False,
            )
            if segments and seg.base_offset < segments[-1].next_offset and base not in swapped:
                _log.warning("%s: segment %d overlaps the previous one; deleting it", name, base)
                seg.delete()
                result.deleted_segments += 1
                continue
            segments.append(seg)
            broken = seg.indexes_missing or base in swapped or seg.valid_end != seg.size
            if not broken:
                try:
                    seg.sanity_check()
                except CorruptIndexError as e:
                    _log.warning("%s: %s; rebuilding the indexes of segment %d", name, e, base)
                    broken = True
            if broken and (clean_shutdown or seg.next_offset <= recovery_point):
                cut = seg.recover(assign_epoch)
                result.recovered.append(seg)
                result.truncated_bytes += cut.truncated_bytes

        if not clean_shutdown:
            for i, seg in enumerate(segments):
                upper = segments[i + 1].base_offset if i + 1 < len(segments) else None
                if upper is not None and upper <= recovery_point:
                    continue  # wholly below the recovery point: flushed before the crash
                if seg not in result.recovered:
                    cut = seg.recover(assign_epoch)
                    result.recovered.append(seg)
                    result.truncated_bytes += cut.truncated_bytes
                    if cut.truncated_bytes:
                        _log.warning(
                            "%s: corrupt or partial batch in segment %d at position %d; truncated %d bytes "
                            "and deleting the %d later segment(s)",
                            name,
                            seg.base_offset,
                            cut.valid_bytes,
                            cut.truncated_bytes,
                            len(segments) - i - 1,
                        )
                        for later in segments[i + 1 :]:
                            later.delete()
                            result.deleted_segments += 1
                        del segments[i + 1 :]
                        break

        if not segments:
            segments.append(
                LogSegment(
                    directory,
                    log_start_offset,
                    index_interval_bytes=config.index_interval_bytes,
                    max_index_size=config.segment_index_bytes,
                    now_ms=now_ms,
                    create=True,
                )
            )
    except BaseException:
        for seg in segments:
            seg.close_handles()
        raise
    return result
