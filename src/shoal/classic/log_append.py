"""Appending to a ``PartitionLog``: a leader's client batches and transaction markers, and a
follower's or future replica's copies.

A leader append assigns offsets from the log end, checks producers (``producer_append``: a
duplicate writes nothing and answers the original offsets), stamps the offsets, the leader epoch
and LogAppendTime into the batches, and records a new leader epoch. Clients may not write control
batches (INVALID_RECORD, as Kafka's LogValidator answers); the transaction markers come from
``append_transaction_marker``, which the leader calls for the transaction coordinator. A
follower append keeps the offsets its batches carry and takes markers as the leader wrote them.
Both roll a new segment first when due (``log_roll``), write an aborted-transaction index entry
when an ABORT marker completes a transaction (``txn_index``), and ask for a flush once
``flush.messages`` is reached (``log_flush``).
"""

from __future__ import annotations

from collections.abc import Sequence

from shoal.classic.log_results import AppendResult
from shoal.classic.log_roll import RollMixin
from shoal.classic.producer_append import TV_UNKNOWN, AppendOrigin
from shoal.classic.producer_replay import marker_at, txn_index_writer
from shoal.classic.segment import AppendedBatch
from shoal.protocol.errors import ErrorCode, KafkaError
from shoal.records.batch import NO_TIMESTAMP, BatchHeader, read_header, stamp_batch, validate_records
from shoal.records.control import build_end_txn_marker
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
        first. Idempotent duplicates write nothing and answer the original offsets. A control
        batch is INVALID_RECORD; producer checks raise INVALID_PRODUCER_EPOCH,
        OUT_OF_ORDER_SEQUENCE_NUMBER or INVALID_TXN_STATE (nothing is written then).
        """
        with self._guard("appending to"), self._lock:
            self._check_usable()
            return self._append_locked(
                records, batches, TimestampType(timestamp_type), leader_epoch, now_ms, AppendOrigin.CLIENT, TV_UNKNOWN
            )

    def append_transaction_marker(
        self,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        commit: bool,
        leader_epoch: int,
        *,
        transaction_version: int,
        timestamp_type: TimestampType | int = TimestampType.CREATE_TIME,
        now_ms: int | None = None,
    ) -> AppendResult:
        """Write a COMMIT or ABORT marker for the transaction coordinator, as the leader
        (WriteTxnMarkers; Kafka's ``appendAsLeader`` with origin COORDINATOR).

        The batch is built as Kafka builds it (``records.control``), timestamped now. It ends the
        producer's ongoing transaction here, if any: the last stable offset can pass it, and an
        ABORT adds an entry to the active segment's ``.txnindex``. ``transaction_version`` is the
        one the coordinator ran the transaction with (2: the marker carries the bumped epoch).
        Raises TRANSACTION_COORDINATOR_FENCED for a coordinator epoch below the producer's last
        one, INVALID_PRODUCER_EPOCH for a producer epoch behind it; nothing is written then.
        """
        if producer_id < 0:
            raise KafkaError(ErrorCode.invalid_request, f"Transaction marker for {self.name} has no producer id")
        with self._guard("appending to"), self._lock:
            self._check_usable()
            now = self._clock() if now_ms is None else now_ms
            buf = bytearray(
                build_end_txn_marker(
                    commit,
                    producer_id=producer_id,
                    producer_epoch=producer_epoch,
                    coordinator_epoch=coordinator_epoch,
                    timestamp=now,
                )
            )
            return self._append_locked(
                buf,
                [(0, read_header(buf))],
                TimestampType(timestamp_type),
                leader_epoch,
                now,
                AppendOrigin.COORDINATOR,
                transaction_version,
            )

    def _append_locked(
        self,
        records: memoryview | bytearray | bytes,
        batches: Sequence[tuple[int, BatchHeader]],
        timestamp_type: TimestampType,
        leader_epoch: int,
        now_ms: int | None,
        origin: AppendOrigin = AppendOrigin.CLIENT,
        transaction_version: int = TV_UNKNOWN,
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
            if h.is_control and origin == AppendOrigin.CLIENT:
                raise KafkaError(ErrorCode.invalid_record, "Clients are not allowed to write control records")
            max_ts = now if log_append else h.max_timestamp
            assigned.append((pos, h, next_offset, max_ts))
            next_offset += h.last_offset_delta + 1
        duplicate, pending = self._producers.prepare_append(
            ((h, base, ts, marker_at(mv, pos, h) if h.is_control else None) for pos, h, base, ts in assigned),
            origin,
            transaction_version,
        )
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
        self._producers.apply(pending, next_offset, txn_index_writer(segment))
        if self.hw_follows_leo:
            self._set_hw_locked(next_offset)
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

        Checks framing and CRC, that offsets only grow from the log end, and keeps producer state,
        transactions (control batches included) and leader epochs in step the way Kafka's replicas
        do: no sequence checks, fencing only logged; a non-transactional batch inside a
        transaction is INVALID_TXN_STATE and a control batch that is no transaction marker
        INVALID_RECORD, with nothing written. Returns the new log end offset.
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
        _, pending = self._producers.prepare_append(
            ((h, h.base_offset, h.max_timestamp, marker_at(mv, pos, h) if h.is_control else None) for pos, h in batches),
            AppendOrigin.REPLICATION,
        )
        largest_ts = max(h.max_timestamp for _, h in batches)
        segment = self._maybe_roll(len(mv), largest_ts, expected - 1, self._clock())
        for _, h in batches:
            epoch = h.partition_leader_epoch
            latest = self._epochs.latest_epoch
            if epoch >= 0 and (latest is None or epoch > latest):
                self._epochs.assign(epoch, h.base_offset)
        segment.append(mv, entries)
        self._next_offset = expected
        self._producers.apply(pending, expected, txn_index_writer(segment))
        if self.hw_follows_leo:
            self._set_hw_locked(expected)
        if expected - self._recovery_point >= self.config.flush_messages:
            self._flush_requested = True
        return expected
