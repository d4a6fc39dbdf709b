"""What the log cleaner needs from a ``PartitionLog``: a consistent view of the cleanable part, and
the swap of cleaned segments (Kafka's ``UnifiedLog``/``LocalLog`` side of the LogCleaner).

The cleaner (``log_cleaner``) holds the log's cleaning lock (``cleaning``) for a whole pass, so
no segment it reads is closed or deleted under it: every operation that closes or deletes
segments (retention, DeleteRecords, truncation, closing, moves) first sets the abort flag, which
the pass checks at every batch, and then takes the cleaning lock, so it waits for one batch, not
a pass. Flushing, appends and fetches never wait for the cleaner; it takes the state lock briefly
for its view and the maintenance lock for each swap (no fsync of a segment it closes).

The swap of one group of segments (``replace_segments``), crash-safe at every step:

1. the cleaned segment was written as ``<base>.log.cleaned`` (+ indexes) and fsynced;
2. ``<base>.swap-end`` records the end offset of the group, then the files become ``.swap``;
3. the old segments are renamed ``.deleted`` and the ``.swap`` files take their place;
4. ``.swap-end`` goes.

Recovery (``recovery``) turns any leftover ``.swap`` into the segment and deletes the old segments
``.swap-end`` names, or deletes ``.cleaned`` files: the log is the old group or the cleaned one.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass

from shoal.classic.checkpoint import fsync_dir
from shoal.classic.log_state import LogState
from shoal.classic.segment import CLEANED_SUFFIX, SWAP_END_SUFFIX, SWAP_SUFFIX, LogSegment, file_name
from shoal.records.compaction import AbortedTransaction

__all__ = ["CleaningMixin", "CleaningView"]


@dataclass(frozen=True, slots=True)
class CleaningView:
    """A log as one cleaning pass sees it (taken under the state lock)."""

    segments: list[LogSegment]
    log_start_offset: int
    #: Where uncleaned data starts (the cleaner checkpoint, clamped into the log).
    first_dirty_offset: int
    #: Segments from here on are not cleaned: the active one, those holding data at or above the
    #: last stable offset, and those with records newer than ``min.compaction.lag.ms``.
    first_uncleanable_offset: int
    #: Producer id -> (offset of its last data batch or -1, epoch): those batches stay, even
    #: emptied, so producer state survives a restart (Kafka's ``lastRecordsOfActiveProducers``).
    active_producers: dict[int, tuple[int, int]]

    @property
    def cleanable_segments(self) -> list[LogSegment]:
        """The segments wholly below the first uncleanable offset."""
        segs = self.segments
        return [s for i, s in enumerate(segs[:-1]) if segs[i + 1].base_offset <= self.first_uncleanable_offset]

    def dirty_bytes(self) -> tuple[int, int]:
        """(clean bytes, dirty bytes) of the cleanable segments: Kafka's cleanable ratio is
        dirty / (clean + dirty)."""
        clean = dirty = 0
        segs = self.segments
        for i, s in enumerate(self.cleanable_segments):
            if segs[i + 1].base_offset <= self.first_dirty_offset:
                clean += s.size
            else:
                dirty += s.size
        return clean, dirty


class CleaningMixin(LogState):
    """``PartitionLog``'s side of log compaction."""

    def dir_guard(self, what: str) -> AbstractContextManager[None]:
        """Route OSErrors of the log dir's own files (the cleaner checkpoint) to the failure channel."""
        return self._channel.guard(self.log_dir, what)

    @contextmanager
    def cleaning(self) -> Iterator[bool]:
        """Hold the cleaning lock for one pass; yields False when the log cannot be cleaned (closed
        or offline). Closes the files on the way out if the dir failed meanwhile (``mark_offline``
        leaves that to whoever holds the locks)."""
        with self._guard("cleaning"), self._clean_lock:
            try:
                yield not (self._closed or self._offline)
            finally:
                if self._offline and self._io_lock.acquire(blocking=False):
                    try:
                        self._close_segment_handles()
                    finally:
                        self._io_lock.release()

    def cleaning_aborted(self) -> bool:
        """An operation that closes or deletes segments waits for the pass: stop it now."""
        return self._cleaning_abort.is_set()

    def cleaning_view(self, checkpoint: int, now_ms: int) -> CleaningView:
        """The segments and bounds of a pass starting at ``checkpoint`` (Kafka's ``cleanableOffsets``)."""
        with self._lock:
            segments = list(self._segments)
            first_dirty = checkpoint if self._log_start <= checkpoint <= self._next_offset else self._log_start
            first_dirty = max(first_dirty, self._log_start)
            bound = min(self._last_stable_locked(), segments[-1].base_offset)
            lag = self.config.min_compaction_lag_ms
            if lag > 0:
                for s in segments:
                    if s.base_offset >= bound:
                        break
                    if s.largest_timestamp > now_ms - lag:
                        bound = s.base_offset
                        break
            active = {
                pid: (entry.last_data_offset, entry.producer_epoch)
                for pid, entry in self._producers.producers.items()
            }
            log_start = self._log_start
        return CleaningView(segments, log_start, first_dirty, max(bound, first_dirty), active)

    def aborted_in(self, start_offset: int, end_offset: int) -> list[AbortedTransaction]:
        """Every aborted transaction with data in [start, end), from the ``.txnindex`` files."""
        with self._lock:
            found = self._aborted_locked(start_offset, end_offset)  # type: ignore[attr-defined]
        return [AbortedTransaction(t.producer_id, t.first_offset, t.last_offset, t.last_stable_offset) for t in found]

    def new_cleaned_segment(self, base_offset: int) -> LogSegment:
        """An empty ``<base>.log.cleaned`` segment for the cleaner to fill."""
        return LogSegment(
            self.directory,
            base_offset,
            index_interval_bytes=self.config.index_interval_bytes,
            max_index_size=self.config.segment_index_bytes,
            now_ms=self._clock(),
            create=True,
            suffix=CLEANED_SUFFIX,
        )

    def replace_segments(self, cleaned: LogSegment, old: list[LogSegment], end_offset: int) -> bool:
        """Swap the fsynced ``cleaned`` segment in for ``old`` (a run of segments ending below
        ``end_offset``; see the module docstring). False, with nothing changed, when ``old`` is no
        longer in the log."""
        hint = self.directory / (file_name(cleaned.base_offset) + SWAP_END_SUFFIX)
        hint_tmp = hint.with_name(hint.name + ".tmp")
        hint_tmp.write_text(str(end_offset))
        fd = os.open(hint_tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(hint_tmp, hint)
        cleaned.change_suffix(CLEANED_SUFFIX, SWAP_SUFFIX)
        fsync_dir(self.directory)
        with self._io_lock, self._lock:  # no flush is fsyncing the segments about to close
            ids = [id(s) for s in self._segments]
            try:
                first = ids.index(id(old[0]))
            except ValueError:
                first = -1
            if first < 0 or ids[first : first + len(old)] != [id(s) for s in old]:
                cleaned.change_suffix(SWAP_SUFFIX, CLEANED_SUFFIX)
                cleaned.delete()
                hint.unlink(missing_ok=True)
                return False
            deleted = [path for segment in old for path in segment.rename_for_deletion()]
            cleaned.change_suffix(SWAP_SUFFIX, "")
            self._segments[first : first + len(old)] = [cleaned]
            self._bases = [s.base_offset for s in self._segments]
        fsync_dir(self.directory)
        hint.unlink(missing_ok=True)
        if deleted:
            delay = self.config.file_delete_delay_ms
            if delay <= 0:
                for path in deleted:
                    path.unlink(missing_ok=True)
            else:
                self._pending_deletes.append((self._clock() + delay, deleted))
        return True
