"""`shoal produce` and `shoal consume` against a real broker, beside real Kafka clients.

The tools run as separate processes, as a user runs them; what they write is read back with
confluent-kafka and kafka-python (and what those clients write is read with the tool), so the
records, keys, headers and partitions are what any Kafka client sees.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator, Sequence

import pytest
from confluent_kafka import Consumer, Producer
from kafka.partitioner.default import murmur2 as kafka_python_murmur2

from tests.integration.test_cli_tools import CLI_TIMEOUT, Run, shoal
from tests.support.broker import SRC_DIR, BrokerProcess

PYTHON_TOOL = [sys.executable, "-m", "shoal"]


@pytest.fixture(scope="module")
def shared_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One broker for every test of this module: none needs special settings or stops it, and
    each uses its own topics and groups, so they stay independent of each other. The default
    initial rebalance delay (3 s) would only slow down every first join of a group."""
    b = BrokerProcess(tmp_path_factory.mktemp("console-tools") / "broker",
                      overrides={"group.initial.rebalance.delay.ms": 0})
    b.start()
    try:
        yield b
    finally:
        died = b.returncode is not None and not b.stopped_on_purpose
        b.close()
        if died:
            print(f"\nshared broker died (exit {b.returncode})\n{b.log_tail(120)}", file=sys.stderr)


@pytest.fixture
def broker(shared_broker: BrokerProcess, request: pytest.FixtureRequest) -> Iterator[BrokerProcess]:
    """The shared broker, checked alive before and after each test (as the per-test broker
    fixture fails a test its broker died in); its log tail is shown when the test fails."""
    assert shared_broker.is_running(), f"shared broker is down\n{shared_broker.log_tail()}"
    yield shared_broker
    failed = getattr(getattr(request.node, "rep_call", None), "failed", False)
    if failed or not shared_broker.is_running():
        print(f"\n{shared_broker!r}\n{shared_broker.log_tail(120)}", file=sys.stderr)
    assert shared_broker.is_running(), f"the broker died during the test (exit {shared_broker.returncode})"


def tool_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(SRC_DIR), env.get("PYTHONPATH", "")) if p)
    return env


def produce(broker: BrokerProcess, topic: str, lines: str, *args: str) -> Run:
    proc = subprocess.run(
        [*PYTHON_TOOL, "produce", "--bootstrap-server", broker.bootstrap, "--topic", topic, *args],
        input=lines, env=tool_env(), capture_output=True, text=True, timeout=120, check=False,
    )
    return Run(proc.returncode, proc.stdout, proc.stderr)


def consume(broker: BrokerProcess, topic: str, *args: str) -> Run:
    return shoal("consume", "--bootstrap-server", broker.bootstrap, "--topic", topic, *args)


def run_side_by_side(commands: Sequence[tuple[Sequence[str], str | None]]) -> list[Run]:
    """Independent tool runs (`python -m shoal ARGS`, with that stdin text or none) started all
    at once, then waited for: one Run each, in order, as `shoal`/`produce` would return it."""
    procs = [
        subprocess.Popen(
            [*PYTHON_TOOL, *args], env=tool_env(), text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL if stdin is None else subprocess.PIPE,
        )
        for args, stdin in commands
    ]
    runs: list[Run] = []
    try:
        for proc, (_, stdin) in zip(procs, commands, strict=True):
            out, err = proc.communicate(stdin, timeout=CLI_TIMEOUT)
            runs.append(Run(proc.returncode, out, err))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return runs


def create(broker: BrokerProcess, topic: str, partitions: int, *extra: str) -> None:
    run = shoal("topics", "create", "--bootstrap-server", broker.bootstrap, "--topic", topic,
                "--partitions", str(partitions), *extra)
    assert run.rc == 0, run


def confluent_records(broker: BrokerProcess, topic: str, expected: int) -> list:
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"check-{topic}-{time.time_ns()}",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe([topic])
    out = []
    deadline = time.monotonic() + 60
    while len(out) < expected and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            out.append(m)
    c.close()
    return out


@pytest.mark.parametrize("kind", ["classic", "diskless"])
def test_produce_keys_headers_compression_read_by_confluent(broker: BrokerProcess, kind: str) -> None:
    topic = f"lines-{kind}"
    create(broker, topic, 4, *(["--diskless"] if kind == "diskless" else []))
    lines = "".join(f"h1:a{i},h2:b{i}\tkey-{i}:value {i}\n" for i in range(200))
    run = produce(broker, topic, lines, "--property", "parse.key=true", "--property", "key.separator=:",
                  "--property", "parse.headers=true", "--compression", "zstd")
    assert run.rc == 0, run
    records = confluent_records(broker, topic, 200)
    assert len(records) == 200
    for m in records:
        i = int(m.key().decode().removeprefix("key-"))
        assert m.value() == f"value {i}".encode()
        assert m.headers() == [("h1", f"a{i}".encode()), ("h2", f"b{i}".encode())]
        # Kafka's partitioner (Java, kafka-python): murmur2 of the key
        assert m.partition() == (kafka_python_murmur2(bytearray(m.key())) & 0x7FFFFFFF) % 4
    assert Counter(m.partition() for m in records).keys() == {0, 1, 2, 3}


def test_consume_formats_and_positions(broker: BrokerProcess) -> None:
    topic = "shown"
    create(broker, topic, 2)
    p = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True})
    for i in range(5):
        p.produce(topic, key=f"k{i}".encode(), value=f"v{i}".encode(), partition=1, headers=[("h", b"x")])
    p.produce(topic, key=None, value=b"\xff\xfe", partition=0)
    p.flush(30)

    run = consume(broker, topic, "--partition", "1", "--offset", "2", "--max-messages", "2", "--format",
                  "%t|%p|%o|%k|%s|%K|%S|%h\\n")
    assert run.rc == 0, run
    assert run.out == "shown|1|2|k2|v2|2|2|h=x\nshown|1|3|k3|v3|2|2|h=x\n"
    assert "Processed a total of 2 messages" in run.err

    run = consume(broker, topic, "--from-beginning", "--timeout-ms", "3000", "--format", "json")
    assert run.rc == 0, run
    docs = [json.loads(line) for line in run.out.splitlines()]
    assert len(docs) == 6
    binary = next(d for d in docs if d["partition"] == 0)
    assert binary["key"] is None and binary["value"] == {"base64": "//4="}
    assert {d["value"] for d in docs if d["partition"] == 1} == {f"v{i}" for i in range(5)}
    assert all(d["timestampType"] == "CreateTime" for d in docs)

    run = consume(broker, topic, "--partition", "1", "--offset", "earliest", "--max-messages", "1",
                  "--property", "print.key=true", "--property", "print.offset=true",
                  "--property", "print.headers=true", "--property", "print.partition=true")
    assert run.rc == 0, run
    assert run.out == "Partition:1\tOffset:0\th:x\tk0\tv0\n"


def test_usage_errors_exit_2(broker: BrokerProcess) -> None:
    def consume_args(*args: str) -> tuple[list[str], None]:
        return ["consume", "--bootstrap-server", broker.bootstrap, "--topic", "any", *args], None

    def produce_args(*args: str) -> tuple[list[str], str]:
        return ["produce", "--bootstrap-server", broker.bootstrap, "--topic", "any", *args], "x\n"

    # Each a separate run that stops at its usage error: they run side by side.
    cases = [
        (consume_args("--offset", "3"), "The partition is required when offset is specified."),
        (consume_args("--partition", "0", "--offset", "3", "--from-beginning"), "from-beginning and offset cannot"),
        (consume_args("--group", "g", "--partition", "0"), "group and partition cannot be specified together"),
        (consume_args("--isolation-level", "dirty"), "read_committed"),
        (consume_args("--format", "%q"), "Unsupported formatter token %q"),
        (consume_args("--property", "print.bogus=true"), "Unknown formatter properties: print.bogus"),
        (produce_args("--acks", "1", "--idempotence"), "Must set acks to all"),
        (produce_args("--compression", "brotli"), "Invalid value brotli for configuration compression.type"),
        (produce_args("--producer-property", "buffer.memory=1"), "buffer.memory is not supported by this tool"),
        (consume_args("--consumer-property", "auto.offset.reset=latest", "--from-beginning"),
         "Can't simultaneously specify --from-beginning"),
        (consume_args("--consumer-property", "group.id=a", "--group", "b"), "do not match"),
    ]
    runs = run_side_by_side([command for command, _ in cases])
    for ((args, _), message), run in zip(cases, runs, strict=True):
        assert run.rc == 2 and message in run.err, (args, run)


def test_refused_records_are_reported_and_exit_1(broker: BrokerProcess) -> None:
    create(broker, "small", 1, "--config", "max.message.bytes=200")
    run = produce(broker, "small", "short\n" + "x" * 500 + "\nalso short\n", "--sync")
    assert run.rc == 1, run
    assert "MESSAGE_TOO_LARGE" in run.err and "value: 500 bytes" in run.err, run
    run = produce(broker, "small", "no separator here\n", "--property", "parse.key=true")
    assert run.rc == 1 and "No key separator found on line number 1: 'no separator here'" in run.err, run
    out = consume(broker, "small", "--from-beginning", "--timeout-ms", "2000")
    assert out.out.splitlines() == ["short", "also short"], out


@pytest.mark.parametrize("acks", ["0", "1", "all"])
def test_acks_levels_deliver(broker: BrokerProcess, acks: str) -> None:
    topic = f"acks-{acks}"
    create(broker, topic, 2)
    run = produce(broker, topic, "".join(f"{i}\n" for i in range(100)), "--acks", acks)
    assert run.rc == 0, run
    assert sorted(int(m.value()) for m in confluent_records(broker, topic, 100)) == list(range(100))


def _spawn_consumer(broker: BrokerProcess, topic: str, group: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [*PYTHON_TOOL, "consume", "--bootstrap-server", broker.bootstrap, "--topic", topic, "--group", group,
         "--from-beginning", "--format", "%p %o %s\\n"],
        env=tool_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )


def _members(broker: BrokerProcess, group: str) -> int:
    run = shoal("groups", "describe", "--bootstrap-server", broker.bootstrap, "--group", group, "--members")
    return sum(1 for line in run.out.splitlines() if line.startswith(group + " "))


def _wait_members(broker: BrokerProcess, group: str, n: int) -> None:
    deadline = time.monotonic() + 90
    while _members(broker, group) != n:
        assert time.monotonic() < deadline, f"group {group} never had {n} members"
        time.sleep(0.2)


def test_group_members_share_partitions_and_ctrl_c_commits(broker: BrokerProcess) -> None:
    """Two console consumers and a confluent-kafka consumer in one group; each record is consumed
    once; Ctrl-C (SIGINT) commits and leaves, so the others take over where it stopped."""
    topic, group = "shared", "console-group"
    create(broker, topic, 6, "--diskless")
    first = _spawn_consumer(broker, topic, group)
    second = _spawn_consumer(broker, topic, group)
    _wait_members(broker, group, 2)
    assert produce(broker, topic, "".join(f"a{i}\n" for i in range(300))).rc == 0
    time.sleep(3)
    first.send_signal(signal.SIGINT)
    out1, err1 = first.communicate(timeout=60)
    assert first.returncode == 0, err1
    assert b"Processed a total of" in err1
    _wait_members(broker, group, 1)

    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                  "partition.assignment.strategy": "range"})
    c.subscribe([topic])
    assert produce(broker, topic, "".join(f"b{i}\n" for i in range(300))).rc == 0
    got_confluent: list[bytes] = []
    # The group rebalances to two members and both consume: until the confluent consumer has had
    # records and then none for 2 s (its partitions drained), at most 10 s.
    deadline, last_record = time.monotonic() + 10, 0.0
    while time.monotonic() < deadline and not (got_confluent and time.monotonic() - last_record >= 2):
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            got_confluent.append(m.value())
            last_record = time.monotonic()
    second.send_signal(signal.SIGINT)
    out2, err2 = second.communicate(timeout=60)
    assert second.returncode == 0, err2
    # what the confluent consumer did not get yet comes to it once the console consumer left
    values = [line.split(" ", 2)[2] for line in (out1 + out2).decode().splitlines()]
    deadline = time.monotonic() + 60
    while len(values) + len(got_confluent) < 600 and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            got_confluent.append(m.value())
    c.close()
    everything = Counter(values + [v.decode() for v in got_confluent])
    assert set(everything) == {f"a{i}" for i in range(300)} | {f"b{i}" for i in range(300)}
    assert max(everything.values()) == 1, [v for v, n in everything.items() if n > 1][:10]


def test_group_member_picks_up_new_partitions(broker: BrokerProcess) -> None:
    """CreatePartitions while a console consumer runs in a group: at its next metadata refresh the
    group rebalances and the records of the new partitions are consumed too."""
    topic, group = "growing", "grower"
    create(broker, topic, 1, "--diskless")
    proc = subprocess.Popen(
        [*PYTHON_TOOL, "consume", "--bootstrap-server", broker.bootstrap, "--topic", topic, "--group", group,
         "--from-beginning", "--consumer-property", "metadata.max.age.ms=1000", "--format", "%p %s\\n"],
        env=tool_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    try:
        _wait_members(broker, group, 1)
        run = shoal("topics", "alter", "--bootstrap-server", broker.bootstrap, "--topic", topic, "--partitions", "3")
        assert run.rc == 0, run
        p = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True})
        for i in range(30):
            p.produce(topic, value=f"r{i}".encode(), partition=i % 3)
        p.flush(30)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            run = shoal("groups", "describe", "--bootstrap-server", broker.bootstrap, "--group", group)
            rows = [line.split() for line in run.out.splitlines() if line.startswith(group + " ")]
            if sorted((r[2], r[3]) for r in rows) == [("0", "10"), ("1", "10"), ("2", "10")]:
                break
            time.sleep(0.2)
    finally:
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    got = Counter(out.decode().splitlines())
    assert got == Counter(f"{i % 3} r{i}" for i in range(30)), got


def test_ctrl_c_sends_what_was_read(broker: BrokerProcess) -> None:
    """Lines typed into a waiting producer are sent when it is interrupted, before it exits."""
    create(broker, "typed", 1)
    proc = subprocess.Popen(
        [*PYTHON_TOOL, "produce", "--bootstrap-server", broker.bootstrap, "--topic", "typed", "--timeout", "60000"],
        env=tool_env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    assert proc.stdin is not None
    proc.stdin.write(b"one\ntwo\nthree\n")
    proc.stdin.flush()
    time.sleep(3)  # linger.ms is a minute: nothing is sent yet
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert [m.value() for m in confluent_records(broker, "typed", 3)] == [b"one", b"two", b"three"]
