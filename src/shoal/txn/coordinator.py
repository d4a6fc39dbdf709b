"""The transaction coordinator (KIP-98, Kafka's TransactionCoordinator and TransactionStateManager).

Each broker coordinates the transactional ids whose ``__transaction_state`` partition it owns
(``shoal.cluster.placement``, as groups). Every transition is written to the metadata store's
transaction table before the request is answered, compare-and-set on the record the coordinator
last read, so a coordinator acting on a stale view of who owns what writes nothing. A broker that
takes a partition over loads its transactions and finishes what was prepared: a PrepareCommit or
PrepareAbort record means the decision was made and only the markers may be missing.

Markers go to the partitions' leaders through ``send_markers`` (WriteTxnMarkers, Kafka's
TransactionMarkerChannelManager) and are retried until every partition has its marker; then the
transaction is Complete. The coordinator epoch stamped on markers is the metadata offset at which
this broker took the partition over: it grows with every move, whichever broker makes it, so a
partition leader refuses a deposed coordinator's late markers (TRANSACTION_COORDINATOR_FENCED).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, replace

from shoal.protocol.errors import ErrorCode, KafkaError
from shoal.protocol.key_partitions import group_partition, transaction_partition
from shoal.store.transactions import (
    ABSENT,
    COMPLETE_ABORT,
    COMPLETE_COMMIT,
    EMPTY,
    ONGOING,
    PREPARE_ABORT,
    PREPARE_COMMIT,
    STATES,
    StoredTransaction,
    TransactionStore,
)
from shoal.txn import metadata as transit
from shoal.txn.config import TxnConfig
from shoal.txn.markers import (
    GROUP_METADATA_TOPIC,
    MARKER_RETRY_LOG_EVERY,
    MARKER_RETRY_MAX_S,
    MARKERS_FENCED,
    MarkerSend,
    SendMarkers,
)

log = logging.getLogger(__name__)

_INT32_MAX = 2**31 - 1


@dataclass(frozen=True, slots=True)
class TransactionListing:
    transactional_id: str
    producer_id: int
    state: str


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


def _same_transaction(a: StoredTransaction, b: StoredTransaction) -> bool:
    """The same transaction in the same state, whenever it was last written (with transaction
    versions 0-1, two transactions of one producer epoch differ in start time and partitions)."""
    return replace(a, txn_last_update_timestamp_ms=0) == replace(b, txn_last_update_timestamp_ms=0)


class TransactionCoordinator:
    """InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, DescribeTransactions and
    ListTransactions for the transactional ids this broker coordinates. Lives on the event loop;
    the store's blocking calls run through ``run_blocking``."""

    def __init__(
        self,
        store: TransactionStore,
        run_blocking: Callable[..., Awaitable[object]],
        config: TxnConfig,
        next_producer_id: Callable[[], Awaitable[int]],
        send_markers: SendMarkers,
        *,
        now_ms: Callable[[], int] = _wall_clock_ms,
    ) -> None:
        self._store = store
        self._run_blocking = run_blocking
        self.config = config
        self._next_producer_id = next_producer_id
        self._send_markers = send_markers
        self._now_ms = now_ms
        self._txns: dict[str, StoredTransaction] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        #: Owned ``__transaction_state`` partitions and the coordinator epoch of each.
        self._owned: dict[int, int] = {}
        self._loading: set[int] = set()
        self._completions: dict[str, asyncio.Task[None]] = {}
        self._tasks: list[asyncio.Task[None]] = []

    # ----------------------------------------------------------------------------- ownership

    def partition_for(self, transactional_id: str) -> int:
        return transaction_partition(transactional_id, self.config.state_partitions)

    async def set_ownership(self, owns: Callable[[int], bool], epoch: int) -> None:
        """Serve the partitions ``owns`` names from now on: load newly owned ones from the store at
        coordinator ``epoch`` (and finish their prepared transactions), drop the others."""
        epoch = min(max(epoch, 0), _INT32_MAX)
        wanted = {p for p in range(self.config.state_partitions) if owns(p)}
        for partition in [p for p in self._owned if p not in wanted]:
            self._unload(partition)
        new = sorted(wanted - self._owned.keys())
        if not new:
            return
        self._loading.update(new)
        try:
            for partition in new:
                records = await self._run_blocking(self._store.load, partition)
                self._owned[partition] = epoch
                for record in records:  # type: ignore[attr-defined]
                    self._txns[record.transactional_id] = record
                    if record.state in (PREPARE_COMMIT, PREPARE_ABORT):
                        self._start_completion(record)
                if records:
                    log.info(
                        "loaded %d transactional id(s) of __transaction_state-%d at coordinator epoch %d",
                        len(records), partition, epoch,  # type: ignore[arg-type]
                    )
        finally:
            self._loading.difference_update(new)

    def _unload(self, partition: int) -> None:
        del self._owned[partition]
        for tid in [t for t in self._txns if self.partition_for(t) == partition]:
            del self._txns[tid]
            task = self._completions.pop(tid, None)
            if task is not None:
                task.cancel()

    def _check_owned(self, transactional_id: str) -> ErrorCode | None:
        partition = self.partition_for(transactional_id)
        if partition in self._loading:
            return ErrorCode.coordinator_load_in_progress
        if partition not in self._owned:
            return ErrorCode.not_coordinator
        return None

    def start(self) -> None:
        self._tasks.append(asyncio.create_task(self._abort_timed_out_periodically(), name="txn-timeouts"))
        self._tasks.append(asyncio.create_task(self._expire_periodically(), name="txn-id-expiration"))

    async def close(self) -> None:
        tasks = [*self._tasks, *self._completions.values()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._tasks.clear()
        self._completions.clear()

    # --------------------------------------------------------------------------- durable writes

    def _lock(self, transactional_id: str) -> asyncio.Lock:
        lock = self._locks.get(transactional_id)
        if lock is None:
            lock = self._locks[transactional_id] = asyncio.Lock()
        return lock

    async def _write(self, current: StoredTransaction | None, new: StoredTransaction) -> None:
        """Make ``new`` durable if the store still holds ``current``, then serve it. The last update
        time always moves forward, so it tells every write of one epoch apart for the CAS."""
        if current is not None and new.txn_last_update_timestamp_ms <= current.txn_last_update_timestamp_ms:
            new = replace(new, txn_last_update_timestamp_ms=current.txn_last_update_timestamp_ms + 1)
        expected = (
            ABSENT if current is None
            else (current.producer_id, current.producer_epoch, current.txn_last_update_timestamp_ms)
        )
        try:
            written = await self._run_blocking(functools.partial(self._store.put, new, expected=expected))
        except Exception as exc:
            log.warning("writing the state of transactional id %s failed: %s", new.transactional_id, exc)
            raise KafkaError(ErrorCode.coordinator_not_available, f"the transaction store is unavailable: {exc}") from exc
        if not written:
            # Another coordinator wrote it: this broker's view is stale (ownership moved). Serve
            # what the store holds from now on, and let the client find the right coordinator.
            await self._reload(new.transactional_id)
            raise KafkaError(ErrorCode.not_coordinator, f"transactional id {new.transactional_id} moved on elsewhere")
        self._txns[new.transactional_id] = new

    async def _read(self, transactional_id: str) -> StoredTransaction | None:
        """The id's record in the store; COORDINATOR_NOT_AVAILABLE when the store cannot be read."""
        try:
            return await self._run_blocking(self._store.get, transactional_id)  # type: ignore[return-value]
        except Exception as exc:
            raise KafkaError(ErrorCode.coordinator_not_available, f"the transaction store is unavailable: {exc}") from exc

    async def _reload(self, transactional_id: str) -> None:
        """Serve what the store holds (nothing, when it cannot be read)."""
        try:
            await self._current(transactional_id)
        except KafkaError:
            self._txns.pop(transactional_id, None)

    async def _current(self, transactional_id: str) -> StoredTransaction | None:
        """The id's record as the store holds it now, served from here on. Every answer to a client
        starts from it, not from this broker's cache: while ownership moves two brokers may both
        act for a partition, and a cached Ongoing that the other one has since prepared would
        answer the next transaction's AddPartitionsToTxn with NONE without writing anything. The
        client's offsets would then join that transaction on the group coordinator, and the
        previous transaction's commit marker would make them visible with none of the records
        (the torn transaction the exactly-once chaos test caught). The client only sends its next
        request after the previous answer, so a read at the start sees what came before it."""
        record = await self._read(transactional_id)
        if record is None:
            self._txns.pop(transactional_id, None)
        elif record != self._txns.get(transactional_id):
            self._txns[transactional_id] = record
            self._finish_if_prepared(record)
        return record

    def _finish_if_prepared(self, record: StoredTransaction) -> None:
        """A prepared transaction this broker owns gets its markers sent, once."""
        tid = record.transactional_id
        running = self._completions.get(tid)
        if record.state in (PREPARE_COMMIT, PREPARE_ABORT) and self._check_owned(tid) is None and (
            running is None or running.done()
        ):
            self._start_completion(record)

    async def resync(self) -> int:
        """Re-read the owned partitions from the store and serve what it holds. Ownership moves
        with each broker's view of the metadata, so for a moment two brokers may both act for a
        partition: the store's compare-and-set keeps every write consistent, and this re-read makes
        sure a transaction the other one prepared (then dropped as it let go) gets its markers.
        Returns how many records changed."""
        changed = 0
        for partition in [p for p in self._owned if p not in self._loading]:
            records = {r.transactional_id: r for r in await self._run_blocking(self._store.load, partition)}  # type: ignore[attr-defined]
            known = [t for t in self._txns if self.partition_for(t) == partition]
            for tid in set(known) | set(records):
                lock = self._lock(tid)
                if lock.locked():
                    continue  # a transition in flight: the next round looks again
                record = records.get(tid)
                if record == self._txns.get(tid):
                    continue
                changed += 1
                if record is None:
                    self._txns.pop(tid, None)
                    continue
                self._txns[tid] = record
                self._finish_if_prepared(record)
        return changed

    # -------------------------------------------------------------------------- InitProducerId

    async def init_producer_id(
        self, transactional_id: str, timeout_ms: int, expected: tuple[int, int] | None = None
    ) -> tuple[ErrorCode, int, int]:
        """(error, producer id, epoch) for a transactional producer starting or recovering (KIP-360
        ``expected``: the producer id and epoch it holds)."""
        if not transactional_id:
            return ErrorCode.invalid_request, -1, -1
        if not 0 < timeout_ms <= self.config.max_timeout_ms:
            return ErrorCode.invalid_transaction_timeout, -1, -1
        error = self._check_owned(transactional_id)
        if error is not None:
            return error, -1, -1
        async with self._lock(transactional_id):
            try:
                return await self._init_locked(transactional_id, timeout_ms, expected)
            except KafkaError as exc:
                return exc.code, -1, -1

    async def _init_locked(
        self, transactional_id: str, timeout_ms: int, expected: tuple[int, int] | None
    ) -> tuple[ErrorCode, int, int]:
        error = self._check_owned(transactional_id)
        if error is not None:
            return error, -1, -1
        current = await self._current(transactional_id)
        stored = current
        if current is None:
            current = transit.new_transaction(transactional_id, await self._next_producer_id(), timeout_ms, self._now_ms())
        if expected is not None and not (
            current.producer_epoch == transit.NO_PRODUCER_EPOCH
            or expected[0] == current.producer_id
            or (expected[0] == current.prev_producer_id and transit.is_epoch_exhausted(expected[1]))
        ):
            return ErrorCode.producer_fenced, -1, -1
        now = self._now_ms()
        if current.state in (PREPARE_COMMIT, PREPARE_ABORT):
            return ErrorCode.concurrent_transactions, -1, -1
        if current.state == ONGOING:
            # A new producer instance: fence the old one and abort its transaction first; the
            # client retries and gets the next epoch once the abort completed (Kafka's behaviour).
            fenced = transit.prepare_end(transit.fence_epoch(current), commit=False, now_ms=now)
            await self._write(stored, fenced)
            log.info("fencing producer epoch %d of %s: aborting its open transaction", current.producer_epoch, transactional_id)
            self._start_completion(fenced)
            return ErrorCode.concurrent_transactions, -1, -1
        if transit.is_epoch_exhausted(current.producer_epoch) and (expected is None or expected[1] == current.producer_epoch):
            new = transit.rotate_producer_id(current, await self._next_producer_id(), timeout_ms, now, expected is not None)
        else:
            new = transit.increment_epoch(current, timeout_ms, None if expected is None else expected[1], now)
        await self._write(stored, new)
        log.info("initialised transactional id %s: producer id %d, epoch %d", transactional_id, new.producer_id, new.producer_epoch)
        return ErrorCode.none, new.producer_id, new.producer_epoch

    # ---------------------------------------------------------------- AddPartitions/AddOffsets

    def _validate(self, transactional_id: str, producer_id: int, producer_epoch: int) -> StoredTransaction:
        current = self._txns.get(transactional_id)
        if current is None or current.producer_id != producer_id:
            raise KafkaError(ErrorCode.invalid_producer_id_mapping, f"producer id {producer_id} is not {transactional_id}'s")
        if current.producer_epoch != producer_epoch:
            raise KafkaError(
                ErrorCode.producer_fenced,
                f"producer epoch {producer_epoch} of {transactional_id} is not the current {current.producer_epoch}",
            )
        if current.state in (PREPARE_COMMIT, PREPARE_ABORT):
            raise KafkaError(ErrorCode.concurrent_transactions, f"the last transaction of {transactional_id} is still ending")
        return current

    async def add_partitions(
        self, transactional_id: str, producer_id: int, producer_epoch: int, partitions: Iterable[tuple[str, int]]
    ) -> ErrorCode:
        """AddPartitionsToTxn (v0-3, and v4+ without verify_only): the partitions join the transaction."""
        wanted = tuple(partitions)
        if not transactional_id:
            return ErrorCode.invalid_request
        error = self._check_owned(transactional_id)
        if error is not None:
            return error
        async with self._lock(transactional_id):
            try:
                error = self._check_owned(transactional_id)
                if error is not None:
                    return error
                await self._current(transactional_id)
                current = self._validate(transactional_id, producer_id, producer_epoch)
                if current.state == ONGOING and set(wanted) <= set(current.partitions):
                    return ErrorCode.none
                await self._write(current, transit.add_partitions(current, wanted, self._now_ms()))
            except KafkaError as exc:
                return exc.code
        return ErrorCode.none

    async def add_offsets(self, transactional_id: str, producer_id: int, producer_epoch: int, group_id: str) -> ErrorCode:
        """AddOffsetsToTxn: the group's offsets partition joins, so the commit marker reaches the
        group coordinator and makes the transaction's offsets visible."""
        partition = group_partition(group_id, self.config.offsets_partitions)
        return await self.add_partitions(transactional_id, producer_id, producer_epoch, [(GROUP_METADATA_TOPIC, partition)])

    def verify_partitions(
        self, transactional_id: str, producer_id: int, producer_epoch: int, partitions: Sequence[tuple[str, int]]
    ) -> list[ErrorCode]:
        """AddPartitionsToTxn v4+ verify_only (KIP-890): is each partition in the producer's
        ongoing transaction? Partition leaders ask before the first transactional batch."""
        error = None if transactional_id else ErrorCode.invalid_request
        error = error or self._check_owned(transactional_id)
        if error is None:
            try:
                current = self._validate(transactional_id, producer_id, producer_epoch)
            except KafkaError as exc:
                error = exc.code
            else:
                inside = set(current.partitions) if current.state == ONGOING else set()
                return [ErrorCode.none if tp in inside else ErrorCode.invalid_txn_state for tp in partitions]
        return [error] * len(partitions)

    # ---------------------------------------------------------------------------------- EndTxn

    async def end_transaction(self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool) -> ErrorCode:
        if not transactional_id:
            return ErrorCode.invalid_request
        error = self._check_owned(transactional_id)
        if error is not None:
            return error
        async with self._lock(transactional_id):
            error = self._check_owned(transactional_id)
            if error is not None:
                return error
            try:
                current = await self._current(transactional_id)
            except KafkaError as exc:
                return exc.code
            if current is None or current.producer_id != producer_id:
                return ErrorCode.invalid_producer_id_mapping
            if producer_epoch != current.producer_epoch:
                return ErrorCode.producer_fenced
            state = current.state
            wanted_prepare, wanted_complete = (PREPARE_COMMIT, COMPLETE_COMMIT) if commit else (PREPARE_ABORT, COMPLETE_ABORT)
            if state == ONGOING:
                prepared = transit.prepare_end(current, commit, self._now_ms())
                try:
                    await self._write(current, prepared)
                except KafkaError as exc:
                    return exc.code
                self._start_completion(prepared)
                return ErrorCode.none
            if state == wanted_complete:
                return ErrorCode.none  # a retry of an end that completed
            if state == wanted_prepare:
                return ErrorCode.concurrent_transactions
            log.debug("%s is %s, cannot %s", transactional_id, state, "commit" if commit else "abort")
            return ErrorCode.invalid_txn_state

    def _start_completion(self, prepared: StoredTransaction) -> None:
        tid = prepared.transactional_id
        old = self._completions.get(tid)
        if old is not None and not old.done():
            old.cancel()
        epoch = self._owned.get(self.partition_for(tid), 0)
        task = asyncio.create_task(self._complete(prepared, epoch), name=f"txn-markers-{tid}")
        self._completions[tid] = task
        task.add_done_callback(lambda t, tid=tid: self._completions.pop(tid, None) if self._completions.get(tid) is t else None)

    async def _complete(self, prepared: StoredTransaction, coordinator_epoch: int) -> None:
        """Send the markers until every partition has one, then write Complete*."""
        commit = prepared.state == PREPARE_COMMIT
        remaining = list(prepared.partitions)
        delay = 0.02
        attempts = 0
        while remaining:
            if attempts and not await self._still_prepared(prepared):
                # Another coordinator finished it (ownership moved meanwhile): a late marker from
                # here could land after the producer's next TxnOffsetCommit and settle those offsets.
                log.info(
                    "markers of %s (producer %d, epoch %d) no longer sent from here: the transaction was completed "
                    "elsewhere", prepared.transactional_id, prepared.producer_id, prepared.producer_epoch,
                )
                return
            sends = [
                MarkerSend(topic, partition, prepared.producer_id, prepared.producer_epoch, coordinator_epoch, commit,
                           prepared.client_transaction_version)
                for topic, partition in remaining
            ]
            try:
                errors = await self._send_markers(sends)
            except Exception as exc:  # a bug or an unreachable broker: try again
                log.warning("sending markers of %s failed: %s: %s", prepared.transactional_id, type(exc).__name__, exc)
                errors = [ErrorCode.request_timed_out] * len(sends)
            if any(e in MARKERS_FENCED for e in errors):
                log.info(
                    "markers of %s (producer %d, epoch %d) fenced by a newer producer or coordinator: %s",
                    prepared.transactional_id, prepared.producer_id, prepared.producer_epoch,
                    sorted({e.name for e in errors if e in MARKERS_FENCED}),
                )
                return
            failed = [(tp, e) for tp, e in zip(remaining, errors, strict=True) if e != ErrorCode.none]
            remaining = [tp for tp, _ in failed]
            if remaining:
                attempts += 1
                if attempts % MARKER_RETRY_LOG_EVERY == 0:
                    log.info(
                        "markers of %s (producer %d, epoch %d) not written yet after %d attempts: %s",
                        prepared.transactional_id, prepared.producer_id, prepared.producer_epoch, attempts,
                        ", ".join(f"{t}-{p}: {e.name}" for (t, p), e in failed),
                    )
                await asyncio.sleep(delay)
                delay = min(delay * 2, MARKER_RETRY_MAX_S)
        async with self._lock(prepared.transactional_id):
            current = self._txns.get(prepared.transactional_id)
            if current is None or not _same_transaction(current, prepared):
                return
            try:
                await self._write(current, transit.complete(current, self._now_ms()))
            except KafkaError as exc:
                # Still prepared in the store: whoever owns it next (or the next round here) finishes it.
                log.warning("completing %s failed (%s); retrying", prepared.transactional_id, exc.message)
                asyncio.get_running_loop().call_later(1.0, self._retry_completion, prepared.transactional_id)
                return
        log.info(
            "%s transaction of %s (producer %d, epoch %d) over %d partition(s)",
            "committed" if commit else "aborted", prepared.transactional_id, prepared.producer_id,
            prepared.producer_epoch, len(prepared.partitions),
        )

    async def _still_prepared(self, prepared: StoredTransaction) -> bool:
        """Does the store still hold ``prepared``? (True when it cannot say: keep trying.)"""
        try:
            record = await self._read(prepared.transactional_id)
        except KafkaError:
            return True
        return record is not None and _same_transaction(record, prepared)

    def _retry_completion(self, transactional_id: str) -> None:
        current = self._txns.get(transactional_id)
        if current is not None:
            self._finish_if_prepared(current)

    # ----------------------------------------------------------------- timeouts and expiration

    async def abort_timed_out(self) -> int:
        """Abort every Ongoing transaction open longer than its timeout, fencing its producer (the
        epoch moves on, so its late batches and EndTxn are refused). Returns how many."""
        now = self._now_ms()
        aborted = 0
        for tid, txn in list(self._txns.items()):
            if txn.state != ONGOING or txn.txn_start_timestamp_ms + txn.txn_timeout_ms > now:
                continue
            async with self._lock(tid):
                current = self._txns.get(tid)
                if current is None or current.state != ONGOING or self._check_owned(tid) is not None:
                    continue
                fenced = transit.prepare_end(transit.fence_epoch(current), commit=False, now_ms=self._now_ms())
                try:
                    await self._write(current, fenced)
                except KafkaError as exc:
                    log.warning("aborting timed-out transaction of %s failed: %s", tid, exc.message)
                    continue
                log.info(
                    "aborting the transaction of %s (producer %d): open longer than its %d ms timeout",
                    tid, current.producer_id, current.txn_timeout_ms,
                )
                self._start_completion(fenced)
                aborted += 1
        return aborted

    async def expire_transactional_ids(self) -> int:
        """Forget ids idle past ``transactional.id.expiration.ms`` with no transaction open."""
        now = self._now_ms()
        expired = 0
        for tid, txn in list(self._txns.items()):
            if txn.state not in (EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT):
                continue
            if txn.txn_last_update_timestamp_ms + self.config.id_expiration_ms > now:
                continue
            async with self._lock(tid):
                current = self._txns.get(tid)
                if current is not txn:
                    continue
                key = (txn.producer_id, txn.producer_epoch, txn.txn_last_update_timestamp_ms)
                try:
                    if await self._run_blocking(functools.partial(self._store.delete, tid, expected=key)):
                        expired += 1
                        log.info("transactional id %s expired (idle %d ms)", tid, now - txn.txn_last_update_timestamp_ms)
                except Exception as exc:
                    log.warning("expiring transactional id %s failed: %s", tid, exc)
                    continue
                self._txns.pop(tid, None)
                self._locks.pop(tid, None)
        return expired

    async def _abort_timed_out_periodically(self) -> None:
        while True:
            await asyncio.sleep(self.config.abort_interval_ms / 1000)
            try:
                await self.resync()
                await self.abort_timed_out()
            except Exception:
                log.exception("aborting timed-out transactions failed")

    async def _expire_periodically(self) -> None:
        while True:
            await asyncio.sleep(self.config.expire_interval_ms / 1000)
            try:
                await self.expire_transactional_ids()
            except Exception:
                log.exception("expiring transactional ids failed")

    # ------------------------------------------------------------------------- describe / list

    def describe(self, transactional_id: str) -> tuple[ErrorCode, StoredTransaction | None]:
        if not transactional_id:
            return ErrorCode.invalid_request, None
        error = self._check_owned(transactional_id)
        if error is not None:
            return error, None
        current = self._txns.get(transactional_id)
        if current is None:
            return ErrorCode.transactional_id_not_found, None
        return ErrorCode.none, current

    def list_transactions(
        self, states: Iterable[str] = (), producer_ids: Iterable[int] = (), min_duration_ms: int = -1
    ) -> tuple[ErrorCode, list[TransactionListing], list[str]]:
        """(error, the transactions of this coordinator matching the filters, unknown state names)."""
        wanted_states, wanted_ids = set(states), set(producer_ids)
        unknown = sorted(wanted_states - STATES)
        if self._loading:
            return ErrorCode.coordinator_load_in_progress, [], unknown
        now = self._now_ms()
        listed = [
            TransactionListing(t.transactional_id, t.producer_id, t.state)
            for t in sorted(self._txns.values(), key=lambda t: t.transactional_id)
            if (not wanted_states or t.state in wanted_states)
            and (not wanted_ids or t.producer_id in wanted_ids)
            and (min_duration_ms < 0 or (t.state == ONGOING and now - t.txn_start_timestamp_ms >= min_duration_ms))
        ]
        return ErrorCode.none, listed, unknown
