"""The pieces of diskless cache replicas: where a new cache starts (KIP-1163's policy 3), Kafka's
caught-up rule against the coordinator, local retention of cache logs, and cache logs surviving
a clean stop but not a crash."""

from __future__ import annotations

import uuid
from pathlib import Path

from shoal.cache_replicas.cache_log import CLEAN_SHUTDOWN, CacheLogs, cache_log_config
from shoal.cache_replicas.filler import _append_all, start_offset
from shoal.cache_replicas.replica import Progress
from shoal.classic.log_config import LogConfig
from shoal.coordinator.api import BatchInfo, BatchMetadata, FindBatchResponse, TopicIdPartition
from shoal.diskless.read import Located
from shoal.metadata.image import PartitionImage, TopicImage
from shoal.objects.ranges import Span
from shoal.protocol.errors import ErrorCode
from shoal.records.batch import stamp_batch
from shoal.records.codec import NewRecord, build_batch, decode_batch
from shoal.records.types import TimestampType


def topic(name: str = "t", **configs: str) -> TopicImage:
    topic_id = uuid.uuid4()
    return TopicImage(name, topic_id, {0: PartitionImage(0, (1,), (1,), 1, 0, 0)}, {"diskless.enable": "true", **configs})


def test_a_new_cache_starts_about_start_bytes_before_the_end_or_at_the_log_start() -> None:
    assert start_offset(0, 1000, 10_000, 100_000) == 0  # holds less than start.bytes: from the log start
    assert start_offset(0, 1000, 10_000, 1_000) == 900  # 1/10 of the bytes: the last 1/10 of the offsets
    assert start_offset(500, 1000, 10_000, 1_000) == 950
    assert start_offset(0, 1000, 10_000, 0) == 1000  # 0: from the log end
    assert start_offset(40, 40, 0, 1_000) == 40  # empty partition


def test_caught_up_rule_against_the_coordinator_high_watermark() -> None:
    p = Progress()
    p.update(10, 10, now_ms=1_000)  # reached the high watermark: caught up now
    assert p.caught_up_ms == 1_000
    p.update(15, 20, now_ms=2_000)  # behind, but past the previous round's high watermark (10)
    assert p.caught_up_ms == 1_000
    p.update(20, 30, now_ms=3_000)  # reached the previous round's 20: caught up as of 2 000
    assert p.caught_up_ms == 2_000
    assert p.in_sync(now_ms=4_000, lag_ms=2_000) and not p.in_sync(now_ms=4_001, lag_ms=2_000)
    p.update(20, 40, now_ms=9_000)  # stuck: falls further behind
    assert p.caught_up_ms == 2_000


def test_cache_logs_follow_local_retention() -> None:
    base = LogConfig(retention_ms=7_000, retention_bytes=-1, cleanup_delete=False, flush_messages=1)
    assert (cache_log_config(base, topic(), lambda name: None).retention_ms, 7_000) == (7_000, 7_000)
    local = cache_log_config(base, topic(**{"local.retention.ms": "1000", "local.retention.bytes": "5000"}),
                             lambda name: None)
    assert (local.retention_ms, local.retention_bytes, local.cleanup_delete) == (1_000, 5_000, True)
    assert local.flush_messages == 2**63 - 1  # a cache is never fsynced for durability
    broker = cache_log_config(base, topic(), lambda name: 3_000 if name == "local.retention.ms" else -2)
    assert broker.retention_ms == 3_000


def stamped(offset: int, *values: bytes) -> bytes:
    raw = bytearray(build_batch([NewRecord(None, v, (), 1_700_000_000_000) for v in values]))
    stamp_batch(raw, 0, offset)
    return bytes(raw)


def test_cache_logs_survive_a_clean_stop_but_not_a_crash(tmp_path: Path) -> None:
    t = topic("kept")
    logs = CacheLogs([str(tmp_path / "d1"), str(tmp_path / "d2")])
    cache = logs.create(t, 0, 5, LogConfig())
    cache.append_as_follower(stamped(5, b"a", b"b"))
    assert cache.log_end_offset == 7 and cache.directory.parent.name == "diskless-cache"
    logs.close([cache])
    assert (cache.directory.parent / CLEAN_SHUTDOWN).exists()

    again = CacheLogs([str(tmp_path / "d1"), str(tmp_path / "d2")])
    found = again.load(lambda topic_id: LogConfig() if topic_id == t.topic_id else None)
    assert list(found) == [(t.topic_id, 0)]
    reopened = found[(t.topic_id, 0)]
    assert (reopened.log_start_offset, reopened.log_end_offset) == (5, 7)
    assert reopened.read(5, 1 << 20).records  # hw follows the log end: everything is readable

    # No clean stop this time (as after a crash): the next start deletes every cache.
    crashed = CacheLogs([str(tmp_path / "d1"), str(tmp_path / "d2")])
    assert crashed.load(lambda topic_id: LogConfig()) == {}
    assert not reopened.directory.exists()


def test_caches_of_topics_that_are_gone_are_deleted(tmp_path: Path) -> None:
    logs = CacheLogs([str(tmp_path / "d")])
    cache = logs.create(topic("gone"), 0, 0, LogConfig())
    logs.close([cache])
    assert CacheLogs([str(tmp_path / "d")]).load(lambda topic_id: None) == {}
    assert not cache.directory.exists()


def test_a_fill_round_appends_each_cache_on_its_own_and_reports_failures_per_cache(tmp_path: Path) -> None:
    """``_append_all`` (run in a worker thread) copies each cache's batches out of the fetched
    ranges with their assigned offsets; a failing cache does not stop the others."""
    t, u = topic("a"), topic("b")
    first, second = build_batch([NewRecord(None, b"x", (), 1)]), build_batch([NewRecord(None, b"y", (), 2)])
    wal = b"\x00" + first + second  # a WAL object: a format byte, then the batches

    def found(tp: TopicIdPartition, start: int, data: bytes, offset: int) -> FindBatchResponse:
        meta = BatchMetadata(tp, start, len(data), offset, offset, -1, 1, TimestampType.CREATE_TIME)
        return FindBatchResponse(ErrorCode.none, [BatchInfo(1, "wal", meta)], 0, offset + 1)

    located = Located(
        [
            found(TopicIdPartition(t.topic_id, 0), 1, first, 7),
            found(TopicIdPartition(u.topic_id, 0), 1 + len(first), second, 3),
        ],
        {Span("wal", 1, len(wal)): memoryview(wal)[1:]},
    )
    logs = CacheLogs([str(tmp_path / "d")])
    good, broken = logs.create(t, 0, 7, LogConfig()), logs.create(u, 0, 3, LogConfig())
    logs.close([broken])
    ok, failed = _append_all(located, [(good, 0), (broken, 1)])
    assert ok == (len(first), False) and isinstance(failed, Exception)
    assert good.log_end_offset == 8
    assert [r.offset for r in decode_batch(bytes(good.read(7, 1 << 20).records))[1]] == [7]
