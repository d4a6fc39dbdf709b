"""Appending to a ``PartitionLog``: a leader's client batches, and a follower's or future replica's copies.

A leader append assigns offsets from the log end, checks idempotent producers' sequences (a
duplicate writes nothing and answers the original offsets), stamps the offsets, the leader epoch
and LogAppendTime into the batches, and records a new leader epoch. A follower append keeps the
offsets its batches carry. Both roll a new segment first when due (``log_roll``) and ask for a
flush once ``flush.messages`` is reached (``log_flush``).
"""

from __future__ import annotations

from collections.abc import Sequence

from shoal.classic.log_results import AppendResult
from shoal.classic.log_roll import RollMixin
from shoal.classic.segment import AppendedBatch
from shoal.protocol.errors import ErrorCode, KafkaError
from shoal.records.batch import NO_TIMESTAMP, BatchHeader, stamp_batch, validate_records
from shoal.records.types import TimestampType

__all__ = ["AppendMixin"]

_MAX_FOLLOWER_BATCH = 2**31 - 1


class AppendMixin(RollMixin):
    """``PartitionLog``'s appends."""

    def append(
        self,
        records: memoryview | bytearray | bytes,
        batches: Sequence[tuple[int, BatchHeader]],
        timestamp_type: TimestampType | int = TimestampType.CREATE_TIME,
        leader_epoch: int = 0,
        *,
        now_ms: int | None = None,
    ) -> AppendResult:
        """Append a client's validated batches (``validate_records`` output) as the leader.

        Offsets are assigned from the log end and stamped into ``records`` in place (with the
        leader epoch, and LogAppendTime when the topic uses it); a read-only buffer is copied
        first. Idempotent duplicates write nothing and answer the original offsets.
        """
        with self._guard("appending to"), self._lock:
            self._check_usable()
            return self._append_locked(records, batches, TimestampType(timestamp_type), leader_epoch, now_ms)

    def _append_locked(
        self,
        records: memoryview | bytearray | bytes,
        batches: Sequence[tuple[int, BatchHeader]],
        timestamp_type: TimestampType,
        leader_epoch: int,
        now_ms: int | None,
    ) -> AppendResult:
        if not batches:
            raise KafkaError(ErrorCode.invalid_request, f"Append to {self.name} has no record batch")
        mv = records if isinstance(records, memoryview) else memoryview(records)
        if mv.readonly:
            mv = memoryview(bytearray(mv))
        if mv.format != "B" or mv.ndim != 1:
            mv = mv.cast("B")
        total = len(mv)
        config = self.config
        if total > config.segment_bytes:
            raise KafkaError(
                ErrorCode.record_list_too_large,
                f"Message batch size is {total} bytes in append to partition {self.name} which exceeds "
                f"the maximum configured segment size of {config.segment_bytes}.",
            )
        now = self._clock() if now_ms is None else now_ms
        log_append = timestamp_type == TimestampType.LOG_APPEND_TIME
        first_offset = self._next_offset
        next_offset = first_offset
        assigned: list[tuple[int, BatchHeader, int, int]] = []  # position, header, base offset, max ts
        for pos, h in batches:
            max_ts = now if log_append else h.max_timestamp
            assigned.append((pos, h, next_offset, max_ts))
            next_offset += h.last_offset_delta + 1
        duplicate, updates = self._producers.check_client_append((h, base, ts) for _, h, base, ts in assigned)
        if duplicate is not None:
            return AppendResult(
                duplicate.first_offset,
                duplicate.last_offset,
                duplicate.timestamp,
                self._log_start,
                is_duplicate=True,
            )
        largest_ts = max(ts for *_, ts in assigned)
        segment = self._maybe_roll(total, largest_ts, next_offset - 1, now)
        entries = []
        for pos, h, base, ts in assigned:
            stamp_batch(mv, pos, base, leader_epoch, now if log_append else None)
            entries.append(AppendedBatch(pos, h.size, base + h.last_offset_delta, ts))
        if leader_epoch >= 0 and leader_epoch != self._epochs.latest_epoch:
            self._epochs.assign(leader_epoch, first_offset)
        segment.append(mv, entries)
        self._next_offset = next_offset
        self._producers.commit(updates, next_offset)
        if self.hw_follows_leo:
            self._hw = next_offset
        flush_needed = next_offset - self._recovery_point >= config.flush_messages
        if flush_needed:
            self._flush_requested = True
        return AppendResult(
            first_offset,
            next_offset - 1,
            now if log_append else NO_TIMESTAMP,
            self._log_start,
            flush_needed=flush_needed,
        )

    def begin_leader_epoch(self, epoch: int) -> None:
        """This replica leads from ``epoch`` on: record that the epoch starts at the log end (Kafka
        does it at becoming leader), so followers asking where older epochs end get an answer
        before anything is written under it."""
        with self._guard("recording the leader epoch of"), self._lock:
            self._check_usable()
            latest = self._epochs.latest_epoch
            if latest is None or epoch > latest:
                self._epochs.assign(epoch, self._next_offset)

    def append_as_follower(self, records: memoryview | bytearray | bytes) -> int:
        """Append batches that already carry their offsets (replication, future replicas).

        Checks framing and CRC, that offsets only grow from the log end, and keeps producer state
        and leader epochs in step without sequence checks, as Kafka does for replicas. Returns the
        new log end offset.
        """
        with self._guard("appending to"), self._lock:
            self._check_usable()
            return self._append_follower_locked(records)

    def _append_follower_locked(self, records: memoryview | bytearray | bytes) -> int:
        mv = records if isinstance(records, memoryview) else memoryview(records)
        if mv.format != "B" or mv.ndim != 1:
            mv = mv.cast("B")
        if not len(mv):
            return self._next_offset
        batches = validate_records(mv, _MAX_FOLLOWER_BATCH, from_client=False)
        expected = self._next_offset
        entries = []
        for pos, h in batches:
            if h.base_offset < expected:
                raise KafkaError(
                    ErrorCode.unknown_server_error,
                    f"Unexpected offset in append to {self.name}: first offset {h.base_offset} is less "
                    f"than the next offset {expected}",
                )
            entries.append(AppendedBatch(pos, h.size, h.last_offset, h.max_timestamp))
            expected = h.next_offset
        largest_ts = max(h.max_timestamp for _, h in batches)
        segment = self._maybe_roll(len(mv), largest_ts, expected - 1, self._clock())
        for _, h in batches:
            epoch = h.partition_leader_epoch
            latest = self._epochs.latest_epoch
            if epoch >= 0 and (latest is None or epoch > latest):
                self._epochs.assign(epoch, h.base_offset)
        segment.append(mv, entries)
        for _, h in batches:
            self._producers.replay_batch(h)
        self._next_offset = expected
        if self.hw_follows_leo:
            self._hw = expected
        if expected - self._recovery_point >= self.config.flush_messages:
            self._flush_requested = True
        return expected
