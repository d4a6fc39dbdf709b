"""Record-level compaction (``records.compaction``): Kafka's filterTo rules on single batches."""

from __future__ import annotations

import pytest

from shoal.classic.log_config import LogConfig
from shoal.records.batch import read_header
from shoal.records.codec import build_batch, build_control_batch, decode_batch
from shoal.records.compaction import (
    AbortedTransaction,
    CleanedTransactions,
    CleanStats,
    OffsetMap,
    clean_batch,
    offset_map_capacity,
)

TS = 1_700_000_000_000


def omap(**latest: int) -> OffsetMap:
    m = OffsetMap(1000)
    for key, offset in latest.items():
        m.put(key.encode(), offset)
    return m


def run(batch: bytes, m: OffsetMap, txns: CleanedTransactions | None = None, now: int = TS, **kw: object):
    stats = CleanStats()
    out = clean_batch(batch, m, txns or CleanedTransactions([]), now_ms=now, delete_retention_ms=1000,
                      stats=stats, **kw)  # type: ignore[arg-type]
    return out, stats


def test_an_unchanged_batch_comes_back_byte_for_byte() -> None:
    batch = build_batch([(b"a", b"1", (), TS), (b"b", b"2", (), TS)], base_offset=10)
    out, stats = run(batch, omap(a=10, b=11))
    assert out is batch
    assert stats.bytes_written == len(batch)


@pytest.mark.parametrize("codec", [0, 1, 2, 3, 4])
def test_superseded_records_go_and_the_batch_keeps_its_offsets_codec_and_producer(codec: int) -> None:
    batch = build_batch(
        [(b"a", b"old", (), TS), (b"b", b"keep", (), TS + 5), (b"a", b"new", (), TS + 9)],
        base_offset=100, compression=codec, producer_id=4, producer_epoch=2, base_sequence=7,
    )
    out, _ = run(batch, omap(a=102, b=101))
    header, records = decode_batch(out)  # CRC checked
    assert [(r.offset, r.key, r.value, r.timestamp) for r in records] == [
        (101, b"b", b"keep", TS + 5), (102, b"a", b"new", TS + 9)]
    assert (header.base_offset, header.last_offset, header.compression) == (100, 102, codec)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (4, 2, 7)
    assert header.records_count == 2 and header.max_timestamp == TS + 9


def test_a_kept_tombstone_gets_a_delete_horizon_and_goes_after_it() -> None:
    batch = build_batch([(b"a", None, (), TS)], base_offset=5)
    out, stats = run(batch, omap(a=5), now=TS)
    header, records = decode_batch(out)
    assert header.has_delete_horizon and header.base_timestamp == TS + 1000
    assert records[0].value is None and records[0].timestamp == TS  # timestamps survive the new base
    assert stats.next_delete_horizon_ms == TS + 1000
    again, _ = run(out, omap(a=5), now=TS + 999)
    assert again is out
    gone, _ = run(out, omap(a=5), now=TS + 1000)
    assert gone is None


def test_records_without_a_key_are_dropped() -> None:
    batch = build_batch([(None, b"x", (), TS), (b"a", b"1", (), TS)])
    out, stats = run(batch, omap(a=1))
    assert [r.key for r in decode_batch(out)[1]] == [b"a"]
    assert stats.invalid_records == 1


def test_aborted_data_goes_and_its_marker_after_the_data_is_gone() -> None:
    data = build_batch([(b"a", b"x", (), TS)], base_offset=3, producer_id=9, producer_epoch=0, base_sequence=0,
                       is_transactional=True)
    abort = build_control_batch(False, producer_id=9, producer_epoch=0, base_offset=4, timestamp=TS)
    aborted = [AbortedTransaction(9, 3, 4, 5)]
    txns = CleanedTransactions(aborted)
    assert run(data, omap(), txns)[0] is None
    kept_marker, _ = run(abort, omap(), txns)
    assert kept_marker is not None  # data seen in this pass: the marker stays, listed in the index
    assert txns.retained_aborted == aborted
    second = CleanedTransactions(aborted)
    with_horizon, _ = run(kept_marker, omap(), second, now=TS)
    assert read_header(with_horizon).has_delete_horizon
    assert run(with_horizon, omap(), CleanedTransactions(aborted), now=TS + 2000)[0] is None


def test_an_emptied_last_batch_of_an_active_producer_stays_as_an_empty_batch() -> None:
    batch = build_batch([(b"a", b"old", (), TS)], base_offset=7, producer_id=1, producer_epoch=0, base_sequence=3)
    out, _ = run(batch, omap(a=50), retain_empty=lambda h: True)
    header, records = decode_batch(out)
    assert records == [] and header.records_count == 0
    assert (header.base_offset, header.last_offset, header.base_sequence) == (7, 7, 3)
    assert run(batch, omap(a=50), retain_empty=lambda h: False)[0] is None


def test_map_capacity_follows_kafkas_sizing() -> None:
    assert offset_map_capacity(128 * 1024 * 1024, 1) == int(128 * 1024 * 1024 * 0.9) // 24
    assert offset_map_capacity(24 * 10, 2) == 4


def test_log_config_reads_the_compaction_settings() -> None:
    config = LogConfig.from_properties({
        "cleanup.policy": "compact,delete", "min.cleanable.dirty.ratio": "0.2", "delete.retention.ms": 5,
        "min.compaction.lag.ms": 6, "max.compaction.lag.ms": 7,
    })
    assert config.cleanup_compact and config.cleanup_delete
    assert (config.min_cleanable_dirty_ratio, config.delete_retention_ms) == (0.2, 5)
    assert (config.min_compaction_lag_ms, config.max_compaction_lag_ms) == (6, 7)
    assert LogConfig.from_properties(config.to_properties()) == config
