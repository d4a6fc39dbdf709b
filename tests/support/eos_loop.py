"""An exactly-once consume-transform-produce loop, as a separate process a test can SIGKILL:
``python -m tests.support.eos_loop BOOTSTRAP SOURCE SINK GROUP TRANSACTIONAL_ID``.

It reads SOURCE in a consumer group with read_committed and, per batch, in one transaction,
writes each record to SINK (same partition, value prefixed ``out:``) and commits the consumer's
offsets with ``send_offsets_to_transaction``. It is crash-only: on any error it exits (code 2)
and its supervisor starts a new process, which fences the old one's transaction and resumes from
the committed offsets (Kafka Streams does the same on a fatal error). It exits 0 once it has
been idle for ``--idle-exit`` seconds with every partition read to its end.
"""

from __future__ import annotations

import argparse
import sys
import time

from confluent_kafka import Consumer, KafkaException, Message, Producer, TopicPartition


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("bootstrap")
    parser.add_argument("source")
    parser.add_argument("sink")
    parser.add_argument("group")
    parser.add_argument("transactional_id")
    parser.add_argument("--idle-exit", type=float, default=0.0)
    args = parser.parse_args(argv)
    consumer = Consumer({
        "bootstrap.servers": args.bootstrap, "group.id": args.group, "isolation.level": "read_committed",
        "enable.auto.commit": False, "auto.offset.reset": "earliest", "session.timeout.ms": 6000,
        "heartbeat.interval.ms": 1000,
    })
    producer = Producer({
        "bootstrap.servers": args.bootstrap, "transactional.id": args.transactional_id,
        "transaction.timeout.ms": 10000, "linger.ms": 5, "message.timeout.ms": 10000,
        # The transaction manager's log (EndTxn, AddPartitionsToTxn, retries) goes to this process's
        # log: what a failed exactly-once check is read against.
        "debug": "eos",
    })
    try:
        producer.init_transactions(60)
        consumer.subscribe([args.source])
        idle_since = time.monotonic()
        while True:
            messages = [m for m in consumer.consume(200, 1.0) if m.error() is None]
            if not messages:
                if args.idle_exit and time.monotonic() - idle_since > args.idle_exit:
                    return 0
                continue
            idle_since = time.monotonic()
            producer.begin_transaction()
            for m in messages:
                producer.produce(args.sink, key=m.key(), value=b"out:" + m.value(), partition=m.partition())
            positions = consumer.position(consumer.assignment())
            print(f"transaction of {_ranges(messages)}, offsets {_offsets(positions)}", flush=True)
            producer.send_offsets_to_transaction(positions, consumer.consumer_group_metadata(), 30)
            producer.commit_transaction(30)
            print(f"committed {len(messages)}", flush=True)
    except KafkaException as exc:
        print(f"loop failed: {exc}", file=sys.stderr, flush=True)
        return 2


def _ranges(messages: list[Message]) -> str:
    """``p2:200-399 p0:...``: the source offsets one transaction carries, per partition."""
    spans: dict[int, list[int]] = {}
    for m in messages:
        first_last = spans.setdefault(m.partition(), [m.offset(), m.offset()])
        first_last[1] = m.offset()
    return " ".join(f"p{p}:{a}-{b}" for p, (a, b) in sorted(spans.items()))


def _offsets(positions: list[TopicPartition]) -> str:
    return " ".join(f"p{tp.partition}:{tp.offset}" for tp in sorted(positions, key=lambda tp: tp.partition))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
