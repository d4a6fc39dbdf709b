"""Control records: the transaction markers (Kafka's ControlRecordType and EndTransactionMarker).

A control batch (attribute bit 5) carries records the broker writes, never a client. In a
partition's data log the only ones are the end-transaction markers the leader writes for the
transaction coordinator (WriteTxnMarkers): one record whose key is ``version int16 = 0, type
int16`` (0 ABORT, 1 COMMIT) and whose value is ``version int16 = 0, coordinator epoch int32``,
in a batch carrying the producer id and epoch, no sequence, isTransactional set. Kafka parses
them on every replica (ProducerAppendInfo) to end the producer's transaction; so do we.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum

from shoal.protocol.errors import ErrorCode, KafkaError
from shoal.records.batch import BatchHeader
from shoal.records.codec import build_control_batch, decode_batch

__all__ = [
    "CONTROL_KEY_VERSION",
    "END_TXN_MARKER_VERSION",
    "ControlRecordType",
    "EndTxnMarker",
    "build_end_txn_marker",
    "parse_control_key",
    "parse_end_txn_marker",
]

CONTROL_KEY_VERSION = 0
END_TXN_MARKER_VERSION = 0
_KEY = struct.Struct(">hh")
_MARKER_VALUE = struct.Struct(">hi")


class ControlRecordType(IntEnum):
    """Kafka's ControlRecordType ids (the KRaft ones only ever appear in the metadata log)."""

    UNKNOWN = -1
    ABORT = 0
    COMMIT = 1
    LEADER_CHANGE = 2
    SNAPSHOT_HEADER = 3
    SNAPSHOT_FOOTER = 4
    KRAFT_VERSION = 5
    KRAFT_VOTERS = 6


@dataclass(frozen=True, slots=True)
class EndTxnMarker:
    """An end-transaction marker: the outcome and the coordinator epoch that decided it."""

    control_type: ControlRecordType
    coordinator_epoch: int
    #: The marker record's timestamp (the batch's max timestamp for LogAppendTime batches).
    timestamp: int = -1

    @property
    def is_commit(self) -> bool:
        return self.control_type == ControlRecordType.COMMIT


def _invalid(message: str) -> KafkaError:
    return KafkaError(ErrorCode.invalid_record, message)


def parse_control_key(key: bytes | None) -> ControlRecordType:
    """Kafka's ``ControlRecordType.parse``: version (>= 0, newer read as 0) and type id."""
    if key is None or len(key) < _KEY.size:
        raise _invalid(
            f"Invalid value size found for end control record key. Must have at least {_KEY.size} bytes, "
            f"but found only {0 if key is None else len(key)}"
        )
    version, type_id = _KEY.unpack_from(key)
    if version < 0:
        raise _invalid(f"Invalid version found for control record: {version}. May indicate data corruption")
    try:
        return ControlRecordType(type_id)
    except ValueError:
        return ControlRecordType.UNKNOWN


def parse_end_txn_marker(batch: bytes | bytearray | memoryview, header: BatchHeader) -> EndTxnMarker | None:
    """The marker of one control batch (Kafka's ``EndTransactionMarker.deserialize``); None for an
    empty control batch (Kafka: its transaction was cleaned away). INVALID_RECORD when the batch
    holds another control type or a malformed value."""
    _, records = decode_batch(batch, check_crc=False)
    if not records:
        return None
    record = records[0]
    kind = parse_control_key(record.key)
    if kind not in (ControlRecordType.ABORT, ControlRecordType.COMMIT):
        raise _invalid(f"Invalid control record type for end transaction marker: {kind.name} at offset {record.offset}")
    value = record.value
    if value is None or len(value) < _MARKER_VALUE.size:
        raise _invalid(
            f"Invalid value size found for end transaction marker. Must have at least {_MARKER_VALUE.size} "
            f"bytes, but found only {0 if value is None else len(value)}"
        )
    version, coordinator_epoch = _MARKER_VALUE.unpack_from(value)
    if version < 0:
        raise _invalid(f"Invalid version found for end transaction marker: {version}. May indicate data corruption")
    return EndTxnMarker(kind, coordinator_epoch, record.timestamp)


def build_end_txn_marker(
    commit: bool,
    *,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int,
    timestamp: int,
    base_offset: int = 0,
    partition_leader_epoch: int = -1,
) -> bytes:
    """The marker batch exactly as Kafka's ``MemoryRecords.withEndTransactionMarker`` builds it:
    uncompressed, CreateTime, one record at ``timestamp``, no sequence, transactional + control."""
    return build_control_batch(
        commit,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        coordinator_epoch=coordinator_epoch,
        base_offset=base_offset,
        partition_leader_epoch=partition_leader_epoch,
        timestamp=timestamp,
    )
