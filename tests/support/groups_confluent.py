"""confluent-kafka for the consumer-group tests: group members in processes of their own, and a
producer thread.

A member is this module run as a process (``ConfluentConsumerProcess`` starts it), so that a test
can SIGKILL it; it writes what it was assigned, every record it processed and every commit that
succeeded to its own event log (tests/support/groups.py), and commits synchronously after each batch:
    python -m tests.support.groups_confluent --bootstrap ... --topic ... --group ... --log ... --stop-file ...
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from tests.support.broker import support_module_env
from tests.support.groups import (
    ConsumerLog,
    Event,
    Expected,
    describe_logs,
    format_event,
    parse_events,
    seq_from_headers,
)


class ConfluentConsumerProcess:
    """This module run as a process: one confluent-kafka group member with its own log file.

    stop(): a stop file makes it close() (a dynamic member leaves the group, a static one
    doesn't) and exit 0; kill(): SIGKILL, no chance to commit or leave.
    process_sleep: time spent "processing" a batch, after its records are logged and before
    they are committed (a SIGKILL then leaves an uncommitted tail).
    """

    def __init__(
        self,
        name: str,
        workdir: Path,
        bootstrap: str,
        topic: str,
        group: str,
        *,
        session_timeout_ms: int = 6000,
        instance_id: str | None = None,
        max_batch: int = 100,
        batch_sleep: float = 0.0,
        process_sleep: float = 0.0,
        max_seconds: float = 280.0,
        debug: str | None = None,
    ) -> None:
        self.name = name
        self.log_path = workdir / f"{name}.events"
        self.stop_path = workdir / f"{name}.stop"
        self.stderr_path = workdir / f"{name}.stderr"
        self.cmd = [
            sys.executable, "-m", __name__,
            "--name", name,
            "--bootstrap", bootstrap,
            "--topic", topic,
            "--group", group,
            "--log", str(self.log_path),
            "--stop-file", str(self.stop_path),
            "--session-timeout-ms", str(session_timeout_ms),
            "--max-batch", str(max_batch),
            "--batch-sleep", str(batch_sleep),
            "--process-sleep", str(process_sleep),
            "--max-seconds", str(max_seconds),
        ]  # fmt: skip
        if instance_id:
            self.cmd += ["--instance-id", instance_id]
        if debug:
            self.cmd += ["--debug", debug]
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> ConfluentConsumerProcess:
        with open(self.stderr_path, "ab") as err:
            self.proc = subprocess.Popen(
                self.cmd, stdin=subprocess.DEVNULL, stdout=err, stderr=err, env=support_module_env()
            )
        return self

    def log(self) -> ConsumerLog:
        try:
            text = self.log_path.read_text()
        except FileNotFoundError:
            text = ""
        return ConsumerLog(self.name, parse_events(text))

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = 60.0) -> int:
        """Ask for a clean close; return the exit code (0 = closed cleanly)."""
        assert self.proc is not None
        self.stop_path.touch()
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(
                f"consumer {self.name} did not close within {timeout}s\n{self.stderr_tail()}"
            ) from None

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(30)

    def close(self) -> None:
        """Teardown: never leave the process behind."""
        self.kill()

    def stderr_tail(self, lines: int = 15) -> str:
        try:
            text = self.stderr_path.read_text(errors="replace").splitlines()
        except FileNotFoundError:
            return f"({self.name}: no stderr)"
        rc = None if self.proc is None else self.proc.poll()
        return f"--- {self.name} stderr tail (exit code {rc}) ---\n" + "\n".join(text[-lines:])


def describe_processes(consumers: Sequence[ConfluentConsumerProcess]) -> str:
    return describe_logs(c.log() for c in consumers) + "\n" + "\n".join(c.stderr_tail(8) for c in consumers)


def confluent_committed(bootstrap: str, group: str, topic: str, partitions: Iterable[int]) -> dict[int, int]:
    """The group's committed offsets as the broker returns them (OffsetFetch from a consumer that
    never joins), -1001 where none."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        result = consumer.committed([TopicPartition(topic, p) for p in partitions], timeout=30)
    finally:
        consumer.close()
    errors = [f"p{tp.partition}: {tp.error}" for tp in result if tp.error is not None]
    assert not errors, f"OffsetFetch for group {group} returned partition errors: {errors}"
    return {tp.partition: tp.offset for tp in result}


class BackgroundProducer:
    """A confluent-kafka idempotent producer in a thread, producing numbered records round-robin
    over the partitions at about `rate` records/s until stop(); keeps the offset of every
    acknowledged record."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, *, rate: float = 200.0) -> None:
        self.bootstrap, self.topic, self.partitions, self.rate = bootstrap, topic, partitions, rate
        self.delivered: Expected = {}
        self.errors: list[str] = []
        self.produced = 0
        self.unflushed = 0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="group-test-producer", daemon=True)

    def start(self) -> BackgroundProducer:
        self._thread.start()
        return self

    def acked(self) -> int:
        with self._lock:
            return sum(len(v) for v in self.delivered.values())

    def _on_delivery(self, err: Any, msg: Any) -> None:
        with self._lock:
            if err is not None:
                self.errors.append(f"p{msg.partition()}: {err}")
            else:
                seq = int(msg.key()[1:])  # b"k<seq>" (delivery reports carry no headers)
                self.delivered.setdefault(msg.partition(), {})[msg.offset()] = seq

    def _run(self) -> None:
        from confluent_kafka import Producer

        producer = Producer(
            {
                "bootstrap.servers": self.bootstrap,
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 10,
                "message.timeout.ms": 120000,
            }
        )
        try:
            start = time.monotonic()
            while not self._stop.is_set():
                target = int((time.monotonic() - start) * self.rate)
                while self.produced < target:
                    seq = self.produced
                    try:
                        producer.produce(
                            self.topic,
                            key=f"k{seq}".encode(),
                            value=f"group|{seq:08d}|".encode() + b"v" * 40,
                            headers=[("seq", str(seq).encode())],
                            partition=seq % self.partitions,
                            on_delivery=self._on_delivery,
                        )
                    except BufferError:
                        break
                    self.produced += 1
                producer.poll(0.02)
            self.unflushed = producer.flush(120)
        except Exception as exc:  # reported by stop()
            self.errors.append(f"producer thread: {exc!r}")

    def halt(self) -> None:
        """Teardown: stop producing (the daemon thread flushes and ends on its own)."""
        self._stop.set()

    def stop(self, timeout: float = 150.0) -> Expected:
        """Stop producing, wait for every delivery report; return partition -> {offset: seq}."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout)
        assert not self._thread.is_alive(), f"producer thread still flushing after {timeout}s"
        assert not self.errors, f"{len(self.errors)} produce errors, e.g. {self.errors[:5]}"
        assert self.unflushed == 0, f"{self.unflushed} records not delivered"
        assert self.acked() == self.produced, f"{self.acked()} acknowledged of {self.produced} produced"
        for p, offsets in self.delivered.items():
            n = len(offsets)
            assert sorted(offsets) == list(range(n)), (
                f"p{p}: the broker gave acknowledged records offsets that are not 0..{n - 1}: "
                f"{sorted(offsets)[:10]}..."
            )
        return {p: dict(v) for p, v in self.delivered.items()}


# ---------------------------------------------------------------------------------------------
# The consumer process itself
# ---------------------------------------------------------------------------------------------


def _consumer_main(argv: Sequence[str]) -> int:
    ap = argparse.ArgumentParser(description="confluent-kafka group member for the group tests")
    ap.add_argument("--name", required=True)
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--group", required=True)
    ap.add_argument("--log", required=True)
    ap.add_argument("--stop-file", required=True)
    ap.add_argument("--session-timeout-ms", type=int, default=6000)
    ap.add_argument("--instance-id")
    ap.add_argument("--max-batch", type=int, default=100)
    ap.add_argument("--batch-sleep", type=float, default=0.0, help="pause after each batch's commit")
    ap.add_argument(
        "--process-sleep", type=float, default=0.0, help="'processing' time between a batch and its commit"
    )
    ap.add_argument("--max-seconds", type=float, default=280.0)
    ap.add_argument("--debug")
    args = ap.parse_args(argv)

    from confluent_kafka import Consumer, KafkaException, TopicPartition

    out = open(args.log, "a")  # noqa: SIM115 - kept open for the life of the process

    def emit(events: Iterable[Event]) -> None:
        text = "".join(format_event(ev) for ev in events)
        if text:
            out.write(text)
            out.flush()  # in the kernel before the commit: survives SIGKILL

    def now() -> float:
        return time.monotonic()

    conf: dict[str, Any] = {
        "bootstrap.servers": args.bootstrap,
        "group.id": args.group,
        "client.id": args.name,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "enable.partition.eof": False,
        "session.timeout.ms": args.session_timeout_ms,
        "heartbeat.interval.ms": min(1000, args.session_timeout_ms // 3),
        "partition.assignment.strategy": "range",
        "reconnect.backoff.max.ms": 1000,
    }
    if args.instance_id:
        conf["group.instance.id"] = args.instance_id
    if args.debug:
        conf["debug"] = args.debug
    consumer = Consumer(conf)
    assigned: set[int] = set()
    pending: dict[int, int] = {}  # partition -> next offset, processed but not yet committed

    def commit(parts: Iterable[int]) -> None:
        offsets = [TopicPartition(args.topic, p, pending[p]) for p in sorted(parts) if p in pending]
        if not offsets:
            return
        what = " ".join(f"p{tp.partition}:{tp.offset}" for tp in offsets)
        try:
            result = consumer.commit(offsets=offsets, asynchronous=False)
        except KafkaException as exc:
            emit([Event(now(), "E", text=f"commit {what} failed: {exc.args[0]}")])
            return
        events = []
        for tp in result or ():
            if tp.error is not None:
                events.append(
                    Event(now(), "E", text=f"commit p{tp.partition}:{tp.offset} failed: {tp.error}")
                )
            else:
                events.append(Event(now(), "C", partition=tp.partition, offset=tp.offset))
                if pending.get(tp.partition) == tp.offset:
                    del pending[tp.partition]
        emit(events)

    def on_assign(_consumer: Any, partitions: list[Any]) -> None:
        parts = {tp.partition for tp in partitions}
        assigned.update(parts)
        emit([Event(now(), "A", partitions=tuple(sorted(parts)))])

    def on_revoke(_consumer: Any, partitions: list[Any]) -> None:
        parts = {tp.partition for tp in partitions}
        commit(parts & set(pending))  # the usual place to commit what was processed
        for p in parts:
            pending.pop(p, None)
        assigned.difference_update(parts)
        emit([Event(now(), "R", partitions=tuple(sorted(parts)))])

    def on_lost(_consumer: Any, partitions: list[Any]) -> None:
        parts = {tp.partition for tp in partitions}
        for p in parts:
            pending.pop(p, None)  # someone else owns them now: don't commit
        assigned.difference_update(parts)
        emit([Event(now(), "L", partitions=tuple(sorted(parts)))])

    consumer.subscribe([args.topic], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_lost)
    emit([Event(now(), "S", text=f"pid {os.getpid()} instance {args.instance_id}")])
    deadline = now() + args.max_seconds
    code = 0
    while not os.path.exists(args.stop_file):
        if now() > deadline:
            emit([Event(now(), "E", text=f"gave up after {args.max_seconds}s without a stop file")])
            code = 3
            break
        msgs = consumer.consume(num_messages=args.max_batch, timeout=0.5)
        events = []
        for m in msgs:
            err = m.error()
            if err is not None:
                events.append(Event(now(), "E", text=f"consume: {err.name()} {err.str()}"))
                continue
            p = m.partition()
            if p not in assigned:
                events.append(Event(now(), "E", text=f"dropped p{p}@{m.offset()}: not assigned"))
                continue
            events.append(
                Event(now(), "M", partition=p, offset=m.offset(), seq=seq_from_headers(m.headers()))
            )
            pending[p] = m.offset() + 1
        emit(events)  # processed (and flushed) before it's committed
        if msgs and args.process_sleep > 0:
            time.sleep(args.process_sleep)
        commit(list(pending))
        if msgs and args.batch_sleep > 0:
            time.sleep(args.batch_sleep)
    consumer.close()
    emit([Event(now(), "X", text=f"closed, code {code}")])
    out.close()
    return code


if __name__ == "__main__":
    sys.exit(_consumer_main(sys.argv[1:]))
