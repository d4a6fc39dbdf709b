"""The pieces of `shoal produce` / `shoal consume` that need no broker: Kafka's partitioner hash,
the range assignor, read_committed filtering, the line reader and the output formats."""

from __future__ import annotations

import pytest

from shoal.cli.console_producer import LineError, LineReader
from shoal.cli.consumer_protocol import (
    decode_assignment,
    decode_subscription_topics,
    encode_assignment,
    encode_subscription,
)
from shoal.cli.kafka_client.cluster import TopicPartition
from shoal.cli.kafka_client.consumer import ConsumedRecord, Consumer, range_assign
from shoal.cli.kafka_client.fetch_apis import READ_COMMITTED, READ_UNCOMMITTED, FetchedPartition
from shoal.cli.kafka_client.producer import murmur2, partition_for_key
from shoal.cli.record_format import FormatError, formatter_for, json_formatter, template_formatter
from shoal.protocol.errors import ErrorCode
from shoal.records.codec import build_batch, build_control_batch


def test_murmur2_matches_kafka_utils() -> None:
    # Kafka's UtilsTest.testMurmur2 vectors
    assert murmur2(b"21") == -973932308
    assert murmur2(b"foobar") == -790332482
    assert murmur2(b"a-little-bit-long-string") == -985981536
    assert murmur2(b"a-little-bit-longer-string") == -1486304829
    assert murmur2(b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8") == -58897971
    assert murmur2(b"abc") == 479470107
    assert 0 <= partition_for_key(b"anything", 7) < 7


def test_range_assignor_as_kafka() -> None:
    subs = {"m2": ["t"], "m1": ["t", "u"], "m3": ["t"]}
    result = range_assign(subs, {"t": 7, "u": 2})
    assert result["m1"] == [("t", 0), ("t", 1), ("t", 2), ("u", 0), ("u", 1)]
    assert result["m2"] == [("t", 3), ("t", 4)]
    assert result["m3"] == [("t", 5), ("t", 6)]
    assert range_assign({"a": ["t"], "b": ["t"]}, {"t": 1}) == {"a": [("t", 0)], "b": []}


def test_subscription_and_assignment_round_trip() -> None:
    assert decode_subscription_topics(encode_subscription(["a", "b"])) == ["a", "b"]
    raw = encode_assignment([("t", 0), ("u", 3), ("t", 2)])
    assert decode_assignment(raw).topic_partitions() == [("t", 0), ("t", 2), ("u", 3)]


def _consumer(isolation: int) -> Consumer:
    tp = TopicPartition("t", 0)
    consumer = Consumer.__new__(Consumer)
    consumer.isolation_level = isolation
    consumer.positions = {tp: 0}
    return consumer


def _fetched() -> FetchedPartition:
    data = b"".join(
        [
            build_batch([(b"k", b"plain-0")], base_offset=0),
            build_batch([(None, b"aborted-1"), (None, b"aborted-2")], base_offset=1, producer_id=7,
                        producer_epoch=0, base_sequence=0, is_transactional=True),
            build_batch([(None, b"committed-3")], base_offset=3, producer_id=8, producer_epoch=0,
                        base_sequence=0, is_transactional=True),
            build_control_batch(False, producer_id=7, producer_epoch=0, base_offset=4),
            build_control_batch(True, producer_id=8, producer_epoch=0, base_offset=5),
            build_batch([(None, b"plain-6")], base_offset=6),
        ]
    )
    return FetchedPartition(ErrorCode.none, 7, 7, ((7, 1),), data)


def test_read_committed_drops_aborted_transactions_and_control_records() -> None:
    tp = TopicPartition("t", 0)
    committed = _consumer(READ_COMMITTED)
    values = [r.value for r in committed._records(tp, _fetched())]
    assert values == [b"plain-0", b"committed-3", b"plain-6"]
    assert committed.positions[tp] == 7
    uncommitted = _consumer(READ_UNCOMMITTED)
    values = [r.value for r in uncommitted._records(tp, _fetched())]
    assert values == [b"plain-0", b"aborted-1", b"aborted-2", b"committed-3", b"plain-6"]


def test_records_before_the_position_are_skipped() -> None:
    tp = TopicPartition("t", 0)
    consumer = _consumer(READ_UNCOMMITTED)
    consumer.positions[tp] = 2
    assert [r.offset for r in consumer._records(tp, _fetched())] == [2, 3, 6]


def test_line_reader_keys_headers_and_null_marker() -> None:
    reader = LineReader({"parse.key": "true", "key.separator": ":", "parse.headers": "true", "null.marker": "<null>"})
    record = reader.read("a:1,b:<null>\tkey:value:with:colons", 1)
    assert record.key == b"key" and record.value == b"value:with:colons"
    assert record.headers == (("a", b"1"), ("b", None))
    assert reader.read("\t<null>:v", 2).key is None
    with pytest.raises(LineError, match="No key separator found on line number 3: 'h:1\tnokey'"):
        reader.read("h:1\tnokey", 3)
    with pytest.raises(LineError, match="No headers delimiter found on line number 4"):
        reader.read("nodelimiter", 4)
    assert LineReader({"parse.key": "true", "ignore.error": "true"}).read("loose", 1).key is None
    with pytest.raises(LineError, match="null.marker and key.separator may not be equal"):
        LineReader({"null.marker": "\t"})
    with pytest.raises(LineError, match="Unknown line reader properties: parse.keys"):
        LineReader({"parse.keys": "true"})


RECORD = ConsumedRecord("t", 2, 41, 1700000000000, 1, b"k", b"v\n", (("h", b"1"), ("n", None)))


def test_formats() -> None:
    assert template_formatter("%t/%p/%o %k=%s %K %S %T [%h] %%\\t")(RECORD) == (
        b"t/2/41 k=v\n 1 2 1700000000000 [h=1,n=] %\t"
    )
    assert formatter_for(None, {})(RECORD) == b"v\n\n"
    kafka = formatter_for(None, {"print.timestamp": "true", "print.key": "true", "print.headers": "true",
                                 "key.separator": "|"})
    assert kafka(RECORD) == b"LogAppendTime:1700000000000|h:1,n:null|k|v\n\n"
    assert b'"headers": [{"key": "h", "value": "1"}, {"key": "n", "value": null}]' in json_formatter(RECORD)
    with pytest.raises(FormatError):
        formatter_for("%x", {})
    with pytest.raises(FormatError):
        formatter_for("json", {"print.key": "true"})
