"""The fields every part of a ``PartitionLog`` shares, their plain accessors, and the guards.

``PartitionLog`` (``shoal.classic.log``, where the locking rules are) is this state plus one
mixin per concern; each mixin subclasses ``LogState`` so its fields are declared in one place.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

from shoal.classic.failure import LogDirFailureChannel, storage_error
from shoal.classic.leader_epoch import LeaderEpochCache
from shoal.classic.log_config import LogConfig
from shoal.classic.producer_state import ProducerStateManager
from shoal.classic.segment import LogSegment
from shoal.records.batch import BatchHeader

__all__ = ["LogState", "batches_from", "headers_from", "random_segment_jitter"]


class LogState:
    """The state of one partition log; ``PartitionLog``'s mixins read and change it."""

    def __init__(
        self,
        directory: Path,
        topic: str,
        partition: int,
        *,
        topic_id: str | None,
        config: LogConfig,
        log_dir: str,
        channel: LogDirFailureChannel,
        clock: Callable[[], int],
        is_future: bool,
        segments: list[LogSegment],
        log_start_offset: int,
        high_watermark: int | None,
        producers: ProducerStateManager,
        epochs: LeaderEpochCache,
    ) -> None:
        self.directory = directory
        self.topic = topic
        self.partition = partition
        self.topic_id = topic_id
        self.config = config
        self.log_dir = log_dir
        self.is_future = is_future
        #: Single replica: the high watermark follows the log end. Replication turns this off
        #: and drives ``set_high_watermark``.
        self.hw_follows_leo = True
        self._channel = channel
        self._clock = clock
        self._lock = threading.Lock()
        self._io_lock = threading.Lock()
        #: Held by a log cleaner pass while it reads segments (``log_cleaning``); taken before
        #: ``_io_lock`` by every operation that closes or deletes segments, after setting
        #: ``_cleaning_abort`` so the pass stops at its next batch.
        self._clean_lock = threading.Lock()
        self._cleaning_abort = threading.Event()
        self._segments = segments
        self._bases = [s.base_offset for s in segments]
        self._next_offset = segments[-1].next_offset
        self._log_start = log_start_offset
        self._recovery_point = self._next_offset
        self._hw = (
            self._next_offset
            if high_watermark is None
            else min(max(high_watermark, log_start_offset), self._next_offset)
        )
        self._producers = producers
        producers.on_high_watermark_updated(self._hw)
        self._epochs = epochs
        self._unsynced: list[Path] = []
        self._roll_flush_offset = 0
        self._dir_dirty = False
        self._last_flush_ms = clock()
        self._flush_requested = False
        self._roll_jitter_ms = random_segment_jitter(config)
        #: Segment files renamed ``.deleted``, to unlink once due (``file.delete.delay.ms``):
        #: ``(due_ms, paths)``, changed with the maintenance lock held.
        self._pending_deletes: list[tuple[int, list[Path]]] = []
        self._closed = False
        self._offline = False
        #: Tiered storage: the highest offset known to be in remote storage (-1: none). With
        #: ``remote.storage.enable`` a segment is deleted locally only at or below it (Kafka's
        #: ``highestOffsetInRemoteStorage``); the remote log manager moves it.
        self.highest_offset_in_remote = -1

    # ------------------------------------------------------------------ plain state

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"

    @property
    def log_end_offset(self) -> int:
        return self._next_offset

    @property
    def log_start_offset(self) -> int:
        return self._log_start

    @property
    def high_watermark(self) -> int:
        return self._hw

    @property
    def recovery_point(self) -> int:
        return self._recovery_point

    @property
    def is_offline(self) -> bool:
        return self._offline

    @property
    def is_closed(self) -> bool:
        return self._closed

    @property
    def size(self) -> int:
        """Bytes of all segments."""
        with self._lock:
            return sum(s.size for s in self._segments)

    @property
    def num_segments(self) -> int:
        return len(self._segments)

    @property
    def first_segment_base_offset(self) -> int:
        return self._segments[0].base_offset

    @property
    def segment_base_offsets(self) -> list[int]:
        with self._lock:
            return list(self._bases)

    @property
    def latest_epoch(self) -> int | None:
        return self._epochs.latest_epoch

    @property
    def leader_epoch_entries(self) -> list[tuple[int, int]]:
        with self._lock:
            return self._epochs.entries

    @property
    def producer_state(self) -> ProducerStateManager:
        """For inspection and tests; mutate it only through the log."""
        return self._producers

    def _guard(self, what: str) -> AbstractContextManager[None]:
        return self._channel.guard(self.log_dir, f"{what} {self.name}")

    def _check_usable(self) -> None:
        if self._offline:
            raise storage_error(f"The log of {self.name} in dir {self.log_dir} is offline")
        if self._closed:
            raise storage_error(f"The log of {self.name} in dir {self.log_dir} is closed")

    def set_high_watermark(self, offset: int) -> None:
        """Move the high watermark (replication); clamped to [log start, log end]."""
        with self._lock:
            self._set_hw_locked(min(max(offset, self._log_start), self._next_offset))

    def _set_hw_locked(self, offset: int) -> None:
        """The high watermark moved: transactions whose marker it passed are stable now (Kafka's
        ``onHighWatermarkUpdated``)."""
        self._hw = offset
        self._producers.on_high_watermark_updated(offset)

    def _first_unstable_locked(self) -> int | None:
        """Kafka's ``firstUnstableOffsetMetadata``, never below the log start (see ``log_txn``)."""
        first = self._producers.first_unstable_offset(self._hw)
        return None if first is None else max(first, self._log_start)

    def _last_stable_locked(self) -> int:
        """Kafka's ``lastStableOffset``: the first unstable offset when below the high watermark."""
        first = self._first_unstable_locked()
        return first if first is not None and first < self._hw else self._hw

    def update_config(self, config: LogConfig) -> None:
        """Take new topic configs (AlterConfigs); they apply from the next append or task run."""
        if (config.segment_jitter_ms, config.segment_ms) != (
            self.config.segment_jitter_ms,
            self.config.segment_ms,
        ):
            self._roll_jitter_ms = random_segment_jitter(config)
        self.config = config

    def epoch_for_offset(self, offset: int) -> int | None:
        with self._lock:
            return self._epochs.epoch_for_offset(offset)

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """OffsetForLeaderEpoch: ``(epoch, end offset)`` as Kafka's LeaderEpochFileCache answers."""
        with self._lock:
            return self._epochs.end_offset_for(epoch, self._next_offset)

    # ------------------------------------------------------------------ maintenance lock

    @contextmanager
    def _io(self, *, keeps_segments: bool = False) -> Iterator[None]:
        """Hold the maintenance lock; close the files on the way out if the dir failed meanwhile.

        An operation that may close or delete segments (all but ``keeps_segments`` ones: flushing,
        unlinking ``.deleted`` files) first stops a log cleaner pass reading them (``log_cleaning``):
        it asks the pass to abort and waits for the cleaning lock."""
        if keeps_segments:
            with self._io_lock:
                try:
                    yield
                finally:
                    if self._offline:
                        self._close_segment_handles()
            return
        self._cleaning_abort.set()
        try:
            with self._clean_lock, self._io_lock:
                self._cleaning_abort.clear()
                try:
                    yield
                finally:
                    if self._offline:
                        self._close_segment_handles()
        finally:
            self._cleaning_abort.clear()

    def _close_segment_handles(self) -> None:
        with self._lock:
            for segment in self._segments:
                segment.close_handles()

    # ------------------------------------------------------------------ segment deletion

    def _delete_segment_files(self, doomed: list[LogSegment]) -> None:
        """Delete the files of segments already out of the list (maintenance lock held): at once
        with ``file.delete.delay.ms=0``, else renamed ``.deleted`` now and unlinked when due by
        ``delete_pending_files`` (Kafka's asynchronous segment deletion)."""
        delay = self.config.file_delete_delay_ms
        if delay <= 0:
            for segment in doomed:
                segment.delete()
            return
        renamed = [path for segment in doomed for path in segment.rename_for_deletion()]
        if renamed:
            self._pending_deletes.append((self._clock() + delay, renamed))

    def delete_pending_files(self, now_ms: int | None = None) -> int:
        """Unlink the ``.deleted`` files whose ``file.delete.delay.ms`` has passed; returns how many
        files went. Worker thread (``LogManager``'s background round)."""
        if not self._pending_deletes:
            return 0
        with self._guard("deleting old segment files of"), self._io(keeps_segments=True):
            if self._closed or self._offline:
                return 0
            now = self._clock() if now_ms is None else now_ms
            due = [paths for when, paths in self._pending_deletes if when <= now]
            self._pending_deletes = [(when, paths) for when, paths in self._pending_deletes if when > now]
            count = 0
            for paths in due:
                for path in paths:
                    path.unlink(missing_ok=True)
                    count += 1
            return count

    @property
    def pending_file_deletions(self) -> int:
        """Files renamed ``.deleted`` and not yet unlinked."""
        return sum(len(paths) for _, paths in self._pending_deletes)


def random_segment_jitter(config: LogConfig) -> int:
    """Kafka's ``randomSegmentJitter``: below ``min(segment.jitter.ms, segment.ms)``."""
    bound = min(config.segment_jitter_ms, config.segment_ms)
    return random.randrange(bound) if bound > 0 else 0


def batches_from(segments: list[LogSegment], offset: int) -> Iterator[tuple[LogSegment, int, BatchHeader]]:
    """``(segment, position, header)`` of every batch holding offsets >= ``offset`` (producer-state replay)."""
    for segment in segments:
        if segment.next_offset <= offset:
            continue
        position = 0
        if segment.base_offset < offset:
            found = segment.translate_offset(offset)
            if found is None:
                continue
            position = found[0]
        for pos, h in segment.batches(position):
            yield segment, pos, h


def headers_from(segments: list[LogSegment], offset: int) -> Iterator[BatchHeader]:
    """Headers of every batch holding offsets >= ``offset``."""
    for _, _, h in batches_from(segments, offset):
        yield h
