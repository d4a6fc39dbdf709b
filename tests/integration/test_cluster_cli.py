"""`shoal up --brokers N` and `shoal cluster describe`.

- The plan (ports, racks, properties, what is shared and what is per broker) is a pure function:
  checked directly.
- The supervision (prefixed output, stop on a signal, stop all when one exits, SIGKILL after the
  bound) is checked with stand-in children, so it does not depend on what brokers do.
- The whole thing as an operator runs it: `shoal up --brokers 3 --racks a,b`, `shoal cluster
  describe`, a diskless topic produced through broker 2 and consumed through broker 3, Ctrl-C.
  This needs brokers that join a cluster on a shared metadata store (registration, heartbeats,
  fencing): before that, the second broker on a store fails at start-up.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from shoal.cli.cluster_info import describe_cluster, via_metadata
from shoal.cli.cluster_plan import PlanError, parse_racks, plan_cluster, properties_text, rack_of
from shoal.cli.kafka_client import KafkaClient
from shoal.properties import parse_properties
from tests.support.broker import HOST, SRC_DIR, BrokerProcess, free_port, wait_ready
from tests.support.kafka_clients import confluent_consume, confluent_produce, create_diskless_topic
from tests.support.workload import Sent

CLI_TIMEOUT = 60.0
STARTED = re.compile(r"Started (broker-\d+) \(node \d+, pid (\d+)\)")


# ------------------------------------------------------------------------------------- helpers


@dataclass
class Run:
    rc: int
    out: str
    err: str

    def __str__(self) -> str:
        return f"rc={self.rc}\n--- stdout\n{self.out}\n--- stderr\n{self.err}"


def shoal_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(SRC_DIR), env.get("PYTHONPATH", "")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def shoal(*args: str, timeout: float = CLI_TIMEOUT) -> Run:
    """Run `python -m shoal ARGS` as a separate process, as an operator would."""
    done = subprocess.run(
        [sys.executable, "-m", "shoal", *args], capture_output=True, text=True, env=shoal_env(), timeout=timeout
    )
    return Run(done.returncode, done.stdout, done.stderr)


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((HOST, port))
        except OSError:
            return False
    return True


def consecutive_free_ports(count: int, attempts: int = 100) -> int:
    """The first of ``count`` consecutive loopback ports nobody listens on (the kernel picks the first)."""
    for _ in range(attempts):
        first = free_port()
        if first + count - 1 <= 65535 and all(_bindable(first + i) for i in range(1, count)):
            return first
    raise AssertionError(f"no {count} consecutive free ports found in {attempts} attempts")


def _alive(pid: int, marker: str) -> bool:
    """Whether ``pid`` still runs the process started with ``marker`` on its command line."""
    try:
        return marker.encode() in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


class Up:
    """`shoal up ...` (or a stand-in supervisor) as a child process, its output in files."""

    def __init__(self, command: list[str], workdir: Path) -> None:
        self.out_path, self.err_path = workdir / "up.out", workdir / "up.err"
        with open(self.out_path, "wb") as out, open(self.err_path, "wb") as err:
            self.proc = subprocess.Popen(
                command, cwd=workdir, env=shoal_env(), stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                start_new_session=True,
            )

    @property
    def out(self) -> str:
        return self.out_path.read_text(errors="replace")

    @property
    def err(self) -> str:
        return self.err_path.read_text(errors="replace")

    def __str__(self) -> str:
        return f"--- stdout\n{self.out}\n--- stderr (tail)\n{self.err[-6000:]}"

    def children(self) -> dict[str, int]:
        """Each broker's pid, as `shoal up` logged it."""
        return {name: int(pid) for name, pid in STARTED.findall(self.err)}

    def wait_for(self, text: str, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while text not in self.err:
            assert self.proc.poll() is None, f"exited with {self.proc.returncode} before {text!r}\n{self}"
            assert time.monotonic() < deadline, f"no {text!r} after {timeout}s\n{self}"
            time.sleep(0.05)

    def interrupt(self, timeout: float = 60.0) -> int:
        self.proc.send_signal(signal.SIGINT)
        return self.proc.wait(timeout)

    def close(self, marker: str) -> None:
        """Teardown: never leave `up` or one of its children running."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(45)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        for pid in self.children().values():
            if _alive(pid, marker):
                os.kill(pid, signal.SIGKILL)


# ------------------------------------------------------------------------------- the plan (pure)


def test_plan_gives_each_broker_its_id_port_rack_and_dirs(tmp_path: Path) -> None:
    plan = plan_cluster(tmp_path, 3, ["a", "b"], {"listeners": "PLAINTEXT://127.0.0.1:19092"})
    assert plan.bootstrap_servers == "127.0.0.1:19092,127.0.0.1:19093,127.0.0.1:19094"
    assert [b.name for b in plan.brokers] == ["broker-1", "broker-2", "broker-3"]
    for i, b in enumerate(plan.brokers, start=1):
        assert b.directory == tmp_path.resolve() / f"broker-{i}"
        assert b.properties_path == b.directory / "server.properties"
        assert b.properties["node.id"] == str(i)
        assert b.properties["listeners"] == f"PLAINTEXT://127.0.0.1:{19091 + i}"
        assert b.properties["log.dirs"] == str(b.directory / "logs")
        assert "advertised.listeners" not in b.properties
        assert "metrics.http.port" not in b.properties  # off by default: nothing to keep apart
    assert [b.properties["broker.rack"] for b in plan.brokers] == ["a", "b", "a"]


def test_plan_shares_the_single_node_stores(tmp_path: Path) -> None:
    """Every broker names the metadata store and objects of `shoal up`'s single-node layout."""
    plan = plan_cluster(tmp_path, 2)
    root = tmp_path.resolve()
    for b in plan.brokers:
        assert b.properties["metadata.store.url"] == f"sqlite:///{root / 'logs' / 'shoal.db'}"
        assert b.properties["diskless.storage.url"] == str(root / "objects")
        assert b.properties["diskless.system.enable"] == "true"
        assert b.properties["listeners"].startswith("PLAINTEXT://127.0.0.1:909")
        assert "broker.rack" not in b.properties
    assert plan.bootstrap_servers == "127.0.0.1:9092,127.0.0.1:9093"


def test_plan_applies_overrides_to_every_broker(tmp_path: Path) -> None:
    pg = "postgresql://shoal:pw@db:5432/shoal"
    plan = plan_cluster(
        tmp_path,
        3,
        overrides={
            "metadata.store.url": pg,
            "diskless.storage.url": "s3://bucket/shoal?region=eu-west-1",
            "advertised.listeners": "PLAINTEXT://[::1]:7000",
            "listeners": "PLAINTEXT://:7000",
            "metrics.http.port": "9400",
            "num.partitions": "6",
        },
    )
    for i, b in enumerate(plan.brokers):
        assert b.properties["metadata.store.url"] == pg
        assert b.properties["diskless.storage.url"] == "s3://bucket/shoal?region=eu-west-1"
        assert b.properties["num.partitions"] == "6"
        assert b.properties["listeners"] == f"PLAINTEXT://:{7000 + i}"
        assert b.properties["advertised.listeners"] == f"PLAINTEXT://[::1]:{7000 + i}"
        assert b.properties["metrics.http.port"] == str(9400 + i)
    assert plan.bootstrap_servers == "[::1]:7000,[::1]:7001,[::1]:7002"
    # A listener on every interface is reached on loopback.
    wildcard = plan_cluster(tmp_path, 2, overrides={"listeners": "PLAINTEXT://:7000"})
    assert wildcard.bootstrap_servers == "127.0.0.1:7000,127.0.0.1:7001"


@pytest.mark.parametrize("port", ["-1", "0"])
def test_plan_leaves_a_metrics_port_that_cannot_collide(tmp_path: Path, port: str) -> None:
    plan = plan_cluster(tmp_path, 2, overrides={"metrics.http.port": port})
    assert {b.properties["metrics.http.port"] for b in plan.brokers} == {port}


@pytest.mark.parametrize(
    ("brokers", "racks", "overrides", "message"),
    [
        (2, [], {"node.id": "7"}, "--override node.id cannot be used with --brokers 2"),
        (2, [], {"log.dirs": "/x"}, "--override log.dirs cannot be used with --brokers 2"),
        (2, ["a"], {"broker.rack": "z"}, "--override broker.rack cannot be used with --racks"),
        (2, [], {"listeners": "PLAINTEXT://127.0.0.1:0"}, "port 0 (any free port) cannot be used"),
        (2, [], {"listeners": "PLAINTEXT://127.0.0.1"}, "has no port"),
        (3, [], {"listeners": "PLAINTEXT://127.0.0.1:65534"}, "need ports up to 65536"),
        (2, [], {"metrics.http.port": "65535"}, "metrics.http.port: 2 brokers need ports up to 65536"),
        (2, [], {"num.partitions": "zero"}, "Invalid value zero for configuration num.partitions"),
        (0, [], {}, "--brokers must be at least 1"),
    ],
)
def test_plan_refuses_what_cannot_work(
    tmp_path: Path, brokers: int, racks: list[str], overrides: dict[str, str], message: str
) -> None:
    with pytest.raises(PlanError, match=re.escape(message)):
        plan_cluster(tmp_path, brokers, racks, overrides)


def test_racks_parse_and_go_round_robin() -> None:
    assert parse_racks(None) == []
    assert parse_racks("a, b ,c") == ["a", "b", "c"]
    with pytest.raises(PlanError):
        parse_racks("a,,b")
    assert [rack_of(i, ["x", "y", "z"]) for i in range(1, 6)] == ["x", "y", "z", "x", "y"]
    assert rack_of(1, []) is None


def test_properties_file_reads_back_as_the_plan(tmp_path: Path) -> None:
    plan = plan_cluster(tmp_path, 2, ["a"], {"group.initial.rebalance.delay.ms": "0"})
    for b in plan.brokers:
        text = properties_text(b, 2)
        assert f"shoal broker {b.properties_path}" in text  # says how to reuse it
        assert parse_properties(text) == b.properties
        assert text.splitlines()[2] == f"node.id={b.node_id}"  # the per-broker lines come first


# --------------------------------------------------------------------- supervision (stand-ins)

# A stand-in broker: says it is ready, then exits 0 on SIGTERM ("ok"), 3 on its own ("crash"), or
# ignores SIGTERM ("stubborn").
CHILD = r"""
import signal, sys, time

def stop(*_):
    sys.stdout.write("bye\nlast words without a newline")
    sys.exit(0)

mode = sys.argv[1]
signal.signal(signal.SIGTERM, signal.SIG_IGN if mode == "stubborn" else stop)
print("ready", flush=True)
if mode == "crash":
    time.sleep(2)
    sys.exit(3)
while True:
    time.sleep(0.1)
"""

# `shoal up`'s supervisor over the plan of 3 brokers, with stand-ins in place of the brokers.
SUPERVISOR = r"""
import logging, sys
from pathlib import Path
from shoal.cli.cluster_info import describe_cluster, via_metadata
from shoal.cli.cluster_plan import plan_cluster
from shoal.cli.cluster_up import ClusterSupervisor, write_plan
logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(levelname)s %(message)s")
data_dir, modes, stop_timeout, child = Path(sys.argv[1]), sys.argv[2].split(","), float(sys.argv[3]), sys.argv[4]
plan = plan_cluster(data_dir, len(modes))
write_plan(plan)
command = lambda b: [sys.executable, "-c", child, modes[b.node_id - 1], str(b.properties_path)]
sys.exit(ClusterSupervisor(plan, stop_timeout=stop_timeout, command=command).run())
"""


Supervise = Callable[..., Up]


@pytest.fixture
def supervise(tmp_path: Path) -> Iterator[Supervise]:
    started: list[Up] = []

    def start(modes: str, stop_timeout: float = 10.0) -> Up:
        up = Up([sys.executable, "-c", SUPERVISOR, str(tmp_path / "data"), modes, str(stop_timeout), CHILD], tmp_path)
        started.append(up)
        return up

    yield start
    for up in started:
        up.close(str(tmp_path / "data"))


@pytest.mark.timeout(60)
def test_sigint_stops_every_broker_and_exits_0(supervise: Supervise, tmp_path: Path) -> None:
    up = supervise("ok,ok,ok")
    for i in (1, 2, 3):
        up.wait_for(f"[broker-{i}] ready\n")
    pids = up.children()
    assert sorted(pids) == ["broker-1", "broker-2", "broker-3"], up
    assert up.interrupt(30) == 0, up
    for name, pid in pids.items():
        assert f"[{name}] bye\n" in up.err, up  # each got SIGTERM and stopped on its own
        assert f"[{name}] last words without a newline\n" in up.err, up  # flushed at its end
        assert not _alive(pid, str(tmp_path)), f"{name} (pid {pid}) still running"
    assert "All 3 brokers stopped" in up.err, up
    assert (tmp_path / "data" / "broker-2" / "server.properties").is_file()


@pytest.mark.timeout(60)
def test_a_broker_exiting_stops_the_others_and_fails(supervise: Supervise, tmp_path: Path) -> None:
    up = supervise("ok,crash,ok")
    assert up.proc.wait(30) == 1, up
    assert "broker-2 (node 2) exited with code 3; stopping the other brokers" in up.err, up
    for name, pid in up.children().items():
        if name != "broker-2":
            assert f"[{name}] bye\n" in up.err, up
        assert not _alive(pid, str(tmp_path)), f"{name} (pid {pid}) still running"


@pytest.mark.timeout(60)
def test_a_broker_ignoring_sigterm_is_killed_after_the_bound(supervise: Supervise, tmp_path: Path) -> None:
    up = supervise("ok,stubborn", stop_timeout=1.0)
    for i in (1, 2):
        up.wait_for(f"[broker-{i}] ready\n")
    started = time.monotonic()
    assert up.interrupt(30) == 0, up
    assert time.monotonic() - started < 15, up
    assert re.search(r"broker-2 \(pid \d+\) still runs after SIGTERM: killing it", up.err), up
    assert not any(_alive(pid, str(tmp_path)) for pid in up.children().values()), up


# ---------------------------------------------------------------------------- cluster describe


@pytest.mark.timeout(60)
def test_describe_an_unreachable_cluster_is_one_line_and_exit_1() -> None:
    port = free_port()
    started = time.monotonic()
    run = shoal("cluster", "describe", "--bootstrap-server", f"{HOST}:{port}", "--timeout", "1000")
    assert run.rc == 1, run
    assert run.out == "", run
    lines = run.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"Error: cannot describe the cluster at {HOST}:{port}"), run
    assert "Connection refused" in lines[0], run
    assert time.monotonic() - started < 30


@pytest.mark.timeout(120)
def test_describe_a_single_broker(broker: BrokerProcess) -> None:
    run = shoal("cluster", "describe", "--bootstrap-server", broker.bootstrap, "--format", "json")
    assert run.rc == 0, run
    doc = json.loads(run.out)
    assert doc["clusterId"] and doc["controllerId"] == 1, doc
    assert doc["brokers"] == [{"id": 1, "host": HOST, "port": broker.port, "rack": None, "fenced": False}], doc
    assert doc["source"].startswith("DescribeCluster v"), doc

    table = shoal("cluster", "describe", "--bootstrap-server", broker.bootstrap)
    assert table.rc == 0, table
    lines = table.out.splitlines()
    assert lines[0] == f"Cluster ID: {doc['clusterId']}", table
    assert lines[1] == "Controller: 1", table
    assert lines[2].split() == ["BROKER", "ADDRESS", "RACK", "FENCED"], table
    assert lines[3].split() == ["1", broker.bootstrap, "-", "no"], table
    assert all(line == line.rstrip() for line in lines), table


@pytest.mark.timeout(120)
def test_describe_falls_back_to_metadata(broker: BrokerProcess) -> None:
    """What a broker without DescribeCluster answers, through Metadata, says the same."""
    with KafkaClient(broker.bootstrap, timeout=10) as client:
        described = describe_cluster(client, 10)
        from_metadata = via_metadata(client.any_connection())
    assert from_metadata.source.startswith("Metadata v")
    assert (from_metadata.cluster_id, from_metadata.controller_id, from_metadata.brokers) == (
        described.cluster_id, described.controller_id, described.brokers
    )
    assert not from_metadata.includes_fenced


# ------------------------------------------------------------------ the cluster, end to end


def _describe_json(bootstrap: str) -> dict[str, Any]:
    run = shoal("cluster", "describe", "--bootstrap-server", bootstrap, "--format", "json")
    assert run.rc == 0, run
    doc: dict[str, Any] = json.loads(run.out)
    return doc


def _wait_for_brokers(bootstrap: str, count: int, timeout: float = 60.0) -> dict[str, Any]:
    """The description once it lists ``count`` unfenced brokers (registrations may lag a listener)."""
    deadline = time.monotonic() + timeout
    while True:
        doc = _describe_json(bootstrap)
        live = [b for b in doc["brokers"] if not b["fenced"]]
        if len(live) == count or time.monotonic() > deadline:
            return doc
        time.sleep(0.5)


@pytest.mark.timeout(300)
def test_up_three_brokers_describe_produce_consume_and_stop(tmp_path: Path) -> None:
    first = consecutive_free_ports(3)
    ports = [first, first + 1, first + 2]
    addresses = [f"{HOST}:{p}" for p in ports]
    data_dir = tmp_path / "data"
    up = Up(
        [sys.executable, "-m", "shoal", "up", "--brokers", "3", "--racks", "a,b", "--data-dir", str(data_dir),
         "--override", f"listeners=PLAINTEXT://{HOST}:{first}"],
        tmp_path,
    )
    try:
        for port in ports:
            wait_ready(port, 90, proc=up.proc, describe=lambda: str(up))
        assert up.out.splitlines()[0].endswith(f"bootstrap servers: {','.join(addresses)}"), up

        props = [parse_properties((data_dir / f"broker-{i}" / "server.properties").read_text()) for i in (1, 2, 3)]
        assert [p["node.id"] for p in props] == ["1", "2", "3"]
        assert [p["broker.rack"] for p in props] == ["a", "b", "a"]
        assert len({p["metadata.store.url"] for p in props}) == 1
        assert len({p["diskless.storage.url"] for p in props}) == 1

        doc = _wait_for_brokers(addresses[0], 3)
        assert doc["brokers"] == [
            {"id": i, "host": HOST, "port": ports[i - 1], "rack": rack, "fenced": False}
            for i, rack in ((1, "a"), (2, "b"), (3, "a"))
        ], f"{doc}\n{up}"
        assert doc["controllerId"] in (1, 2, 3), doc
        table = shoal("cluster", "describe", "--bootstrap-server", addresses[2])
        assert table.rc == 0, table
        rows = [line.split() for line in table.out.splitlines()[3:]]
        assert rows == [[str(i), addresses[i - 1], rack, "no"] for i, rack in ((1, "a"), (2, "b"), (3, "a"))], table

        # Produce through broker 2 (the only broker in rack b), consume through broker 3.
        create_diskless_topic(addresses[1], "cluster-events", 3)
        sent = [Sent(i, i % 3, f"k{i}".encode(), f"v{i}".encode(), (), None) for i in range(300)]
        confluent_produce(addresses[1], "cluster-events", sent, config={"client.id": "it,diskless_rack_id=b"})
        got = confluent_consume(addresses[2], "cluster-events", range(3), len(sent), timeout=120)
        assert sorted((r.partition, r.key, r.value) for r in got) == sorted(
            (s.partition, s.key, s.value) for s in sent
        )

        pids = up.children()
        assert sorted(pids) == ["broker-1", "broker-2", "broker-3"], up

        # A broker that stops heartbeating (paused) is fenced, and unfenced when it comes back.
        os.kill(pids["broker-3"], signal.SIGSTOP)
        try:
            doc = _wait_for_brokers(addresses[0], 2, timeout=90)
        finally:
            os.kill(pids["broker-3"], signal.SIGCONT)
        assert [(b["id"], b["fenced"]) for b in doc["brokers"]] == [(1, False), (2, False), (3, True)], doc
        assert doc["includesFencedBrokers"] is True, doc
        assert _wait_for_brokers(addresses[0], 3, timeout=90)["brokers"][2]["fenced"] is False

        assert up.interrupt(90) == 0, up
        for name, pid in pids.items():
            assert not _alive(pid, str(data_dir)), f"{name} (pid {pid}) still running"
            assert f"[{name}] " in up.err, up
        assert "All 3 brokers stopped" in up.err, up
        for port in ports:
            with socket.socket() as s:
                assert s.connect_ex((HOST, port)) != 0, f"port {port} still accepts connections"
    finally:
        up.close(str(data_dir))


@pytest.mark.timeout(180)
def test_up_stops_every_broker_when_one_cannot_start(tmp_path: Path) -> None:
    """Broker 2's port is taken: it exits, `up` stops broker 1 and exits 1 naming broker 2."""
    first = consecutive_free_ports(2)
    data_dir = tmp_path / "data"
    with socket.socket() as taken:
        taken.bind((HOST, first + 1))
        taken.listen()
        up = Up(
            [sys.executable, "-m", "shoal", "up", "--brokers", "2", "--data-dir", str(data_dir),
             "--override", f"listeners=PLAINTEXT://{HOST}:{first}"],
            tmp_path,
        )
        try:
            assert up.proc.wait(120) == 1, up
            assert "broker-2 (node 2) exited with code" in up.err, up
            assert not any(_alive(pid, str(data_dir)) for pid in up.children().values()), up
        finally:
            up.close(str(data_dir))


@pytest.mark.timeout(120)
def test_a_broker_whose_metrics_port_is_taken_exits_1_naming_it(tmp_path: Path) -> None:
    """The failure comes late in startup (after registration and background tasks): the broker
    stops what it started and exits, rather than hanging with its loop unable to close."""
    listen = consecutive_free_ports(2)
    metrics = listen + 1
    with socket.socket() as taken:
        taken.bind((HOST, metrics))
        taken.listen()
        done = subprocess.run(
            [sys.executable, "-m", "shoal", "up", "--data-dir", str(tmp_path / "data"),
             "--override", f"listeners=PLAINTEXT://{HOST}:{listen}",
             "--override", f"metrics.http.port={metrics}"],
            capture_output=True, text=True, timeout=90,
        )
    assert done.returncode == 1, done.stderr
    assert f"cannot serve metrics on 127.0.0.1:{metrics} (metrics.http.host, metrics.http.port)" in done.stderr
    error = done.stderr.index("fatal error during broker startup")
    assert done.stderr.index("Shoal broker 1 stopped") > error, "the cause comes before the shutdown lines"
