"""Run a real Shoal broker as a child process, and talk to it on the wire, for integration tests.

Tests only ever reach the broker over TCP like any Kafka client does, so the same
suite checks whatever `python -m shoal broker` really does (no in-process shortcuts).
The raw-wire helpers exist for what real clients never send: garbage, oversized frames,
corrupt batches, Metadata v14.
"""

from __future__ import annotations

import io
import os
import random
import signal
import socket
import stat
import struct
import subprocess
import sys
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
SRC_DIR = REPO_ROOT / "src"
HOST = "127.0.0.1"
DEFAULT_START_TIMEOUT = 30.0


def support_module_env() -> dict[str, str]:
    """The environment of a helper process run as ``python -m tests.support.<module>``: the repo root
    importable, whatever the test run's working directory."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p)
    return env


_HANDED_OUT: set[int] = set()
"""Ports free_port() returned in this test run: a port picked but not yet bound (a cluster picks
all its ports before its first broker starts) is free again in the kernel's eyes, and it may hand
it out twice."""


def free_port() -> int:
    """A loopback port nobody listens on right now and that no earlier call returned (the kernel
    picks it, so parallel runs don't clash)."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((HOST, 0))
            port = int(s.getsockname()[1])
        if port not in _HANDED_OUT:
            _HANDED_OUT.add(port)
            return port


class BrokerError(RuntimeError):
    """The broker did not start, stop or stay up as expected; the message carries its log tail."""


def wait_ready(
    port: int,
    timeout: float = DEFAULT_START_TIMEOUT,
    *,
    host: str = HOST,
    proc: subprocess.Popen[bytes] | None = None,
    describe: Any = None,
) -> None:
    """Wait until the listener accepts TCP connections: the broker opens it last, so that means ready.

    Fails early when `proc` exits meanwhile, instead of waiting out the timeout.
    """
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            tail = describe() if callable(describe) else ""
            raise BrokerError(f"broker exited with code {proc.returncode} before listening\n{tail}")
        try:
            with socket.create_connection((host, port), timeout=1.0):
                return
        except OSError as exc:
            last_error = exc
            time.sleep(0.1)
    tail = describe() if callable(describe) else ""
    raise BrokerError(
        f"broker not accepting connections on {host}:{port} after {timeout}s ({last_error})\n{tail}"
    )


class BrokerProcess:
    """One `python -m shoal broker` node with its own data dir, port, objects and log file.

    The port is picked once at construction and kept across restarts, so clients and a
    restarted broker meet at the same address (like a real node after a reboot).
    """

    def __init__(
        self,
        data_dir: Path,
        *,
        storage_url: str | None = None,
        port: int | None = None,
        node_id: int = 1,
        overrides: Mapping[str, Any] | None = None,
        env: Mapping[str, str] | None = None,
        start_timeout: float = DEFAULT_START_TIMEOUT,
    ) -> None:
        self.data_dir = Path(data_dir)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.port = port if port is not None else free_port()
        self.node_id = node_id
        self.log_dir = self.data_dir / "kafka-logs"
        self.properties_path = self.data_dir / "server.properties"
        self.log_path = self.data_dir / "broker.log"
        self.objects_dir: Path | None = None
        if storage_url is None:
            self.objects_dir = self.data_dir / "objects"
            self.objects_dir.mkdir(parents=True, exist_ok=True)
            storage_url = f"file://{self.objects_dir}"
        self.storage_url = storage_url
        self.overrides: dict[str, str] = {k: str(v) for k, v in (overrides or {}).items()}
        self.extra_env = dict(env or {})
        self.start_timeout = start_timeout
        self.proc: subprocess.Popen[bytes] | None = None
        self._launched_at = 0.0
        self.starts = 0
        self.stopped_on_purpose = False

    # -- addresses -----------------------------------------------------------------------------
    @property
    def host(self) -> str:
        return HOST

    @property
    def bootstrap(self) -> str:
        return f"{HOST}:{self.port}"

    def __repr__(self) -> str:
        return f"BrokerProcess({self.bootstrap}, data_dir={self.data_dir})"

    # -- lifecycle -----------------------------------------------------------------------------
    def properties(self) -> dict[str, str]:
        """The server.properties content: Kafka's names, as an operator would write them."""
        props = {
            "node.id": str(self.node_id),
            "listeners": f"PLAINTEXT://{HOST}:{self.port}",
            "advertised.listeners": f"PLAINTEXT://{HOST}:{self.port}",
            "log.dirs": str(self.log_dir),
            "diskless.system.enable": "true",
            "diskless.storage.url": self.storage_url,
        }
        return props

    def command(self) -> list[str]:
        cmd = [sys.executable, "-m", "shoal", "broker", str(self.properties_path)]
        for key, value in self.overrides.items():
            cmd += ["--override", f"{key}={value}"]
        return cmd

    def environment(self) -> dict[str, str]:
        env = dict(os.environ)
        # The package may not be installed into the venv: make `-m shoal` importable from src/.
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(SRC_DIR), env.get("PYTHONPATH", "")) if p)
        env["PYTHONUNBUFFERED"] = "1"
        env.update(self.extra_env)
        return env

    def launch(self) -> BrokerProcess:
        """Write server.properties and start the process, without waiting for it to listen
        (``wait_started``): several brokers can start side by side."""
        if self.is_running():
            raise BrokerError(f"{self!r} already running")
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.properties_path.write_text("".join(f"{k}={v}\n" for k, v in self.properties().items()))
        self.starts += 1
        self.stopped_on_purpose = False
        with open(self.log_path, "ab") as log:
            log.write(f"\n===== test harness: start #{self.starts}: {' '.join(self.command())}\n".encode())
            log.flush()
            self.proc = subprocess.Popen(
                self.command(),
                cwd=self.data_dir,
                env=self.environment(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,  # a Ctrl-C on pytest must not hit the broker mid-test
            )
        self._launched_at = time.monotonic()
        return self

    def wait_started(self, timeout: float | None = None) -> BrokerProcess:
        """Wait until the launched process listens, at most `timeout` seconds from its launch
        (default: `start_timeout`); kill it and raise with the log tail if it does not."""
        if self.proc is None:
            raise BrokerError(f"{self!r} was never launched")
        limit = timeout if timeout is not None else self.start_timeout
        # Counted from the launch, so brokers launched together share their start time; always
        # at least a moment, so one that is ready by now is found ready.
        remaining = max(0.5, limit - (time.monotonic() - self._launched_at))
        try:
            wait_ready(self.port, remaining, proc=self.proc, describe=self.log_tail)
        except BrokerError:
            self.kill()
            raise
        return self

    def start(self, timeout: float | None = None) -> BrokerProcess:
        """Start the process and wait until it listens; raise with the log tail if it can't."""
        return self.launch().wait_started(timeout)

    def is_running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def returncode(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def stop(self, timeout: float = 30.0) -> int | None:
        """SIGTERM and wait: the clean shutdown. Raises if the broker does not exit in `timeout`."""
        if self.proc is None:
            return None
        self.stopped_on_purpose = True
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
                raise BrokerError(
                    f"broker ignored SIGTERM for {timeout}s (killed)\n{self.log_tail()}"
                ) from None
        return self.proc.returncode

    def terminate(self) -> None:
        """SIGTERM without waiting (``stop`` or ``close`` waits afterwards): several brokers then
        shut down side by side. Never raises."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.stopped_on_purpose = True
        self.proc.send_signal(signal.SIGTERM)  # a no-op if it has just exited

    def kill(self) -> int | None:
        """SIGKILL: a crash, nothing gets a chance to flush."""
        if self.proc is None:
            return None
        self.stopped_on_purpose = True
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)
        return self.proc.returncode

    def restart(self, *, clean: bool = True, timeout: float | None = None) -> BrokerProcess:
        """Stop (SIGTERM if clean else SIGKILL) and start again on the same port and directories."""
        if clean:
            self.stop()
        else:
            self.kill()
        return self.start(timeout)

    def close(self) -> None:
        """Teardown: try a clean stop, never raise, never leave a process behind."""
        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            self.stop(timeout=15.0)
        except BrokerError:
            pass
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait(10)

    def __enter__(self) -> BrokerProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- inspection ----------------------------------------------------------------------------
    def log_tail(self, lines: int = 80) -> str:
        """The last lines of the broker's stderr/stdout, to print when a test fails."""
        try:
            data = self.log_path.read_bytes()
        except FileNotFoundError:
            return "(no broker log)"
        text = data[-256 * 1024 :].decode("utf-8", "replace").splitlines()
        return f"--- broker log tail ({self.log_path}) ---\n" + "\n".join(text[-lines:])

    def wal_objects(self) -> list[Path]:
        """WAL segment objects (`wal/<uuid>`) in the local object directory, oldest first."""
        if self.objects_dir is None:
            raise BrokerError("broker does not store objects locally")
        wal = self.objects_dir / "wal"
        if not wal.is_dir():
            return []
        # The object cleaner deletes objects while we look: one gone between listing and stat is skipped.
        stamped: list[tuple[int, str, Path]] = []
        for p in wal.rglob("*"):
            try:
                st = p.stat()
            except FileNotFoundError:
                continue
            if stat.S_ISREG(st.st_mode):
                stamped.append((st.st_mtime_ns, p.name, p))
        return [p for _, _, p in sorted(stamped)]


# ---------------------------------------------------------------------------------------------
# Raw wire access (for requests no real client sends)
# ---------------------------------------------------------------------------------------------


class ConnectionClosed(Exception):
    """The broker closed the connection (EOF or reset)."""


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        try:
            chunk = sock.recv(n - len(buf))
        except ConnectionResetError as exc:
            raise ConnectionClosed(str(exc)) from exc
        if not chunk:
            raise ConnectionClosed(f"EOF after {len(buf)} of {n} bytes")
        buf += chunk
    return bytes(buf)


def write_uvarint(out: bytearray, value: int) -> None:
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return


def write_varint(out: bytearray, value: int) -> None:
    """Zigzag signed varint (Kafka record fields)."""
    write_uvarint(out, (value << 1) ^ (value >> 63))


class Reader:
    """A cursor over response bytes, for hand-decoding schemas kio does not have (Metadata v14)."""

    def __init__(self, data: bytes, pos: int = 0) -> None:
        self.data = data
        self.pos = pos

    def _unpack(self, fmt: str) -> Any:
        size = struct.calcsize(fmt)
        if self.pos + size > len(self.data):
            raise ValueError(f"read underflow at {self.pos} reading {fmt} from {len(self.data)} bytes")
        (value,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += size
        return value

    def int8(self) -> int:
        return int(self._unpack(">b"))

    def int16(self) -> int:
        return int(self._unpack(">h"))

    def int32(self) -> int:
        return int(self._unpack(">i"))

    def int64(self) -> int:
        return int(self._unpack(">q"))

    def bool(self) -> bool:
        return self.int8() != 0

    def uuid(self) -> bytes:
        value = self.data[self.pos : self.pos + 16]
        if len(value) != 16:
            raise ValueError("read underflow in uuid")
        self.pos += 16
        return value

    def uvarint(self) -> int:
        shift = value = 0
        while True:
            if self.pos >= len(self.data):
                raise ValueError("read underflow in varint")
            byte = self.data[self.pos]
            self.pos += 1
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7

    def compact_string(self) -> str | None:
        n = self.uvarint() - 1
        if n < 0:
            return None
        value = self.data[self.pos : self.pos + n]
        if len(value) != n:
            raise ValueError("read underflow in string")
        self.pos += n
        return value.decode()

    def compact_array_len(self) -> int:
        return self.uvarint() - 1

    def compact_int32_array(self) -> list[int] | None:
        n = self.compact_array_len()
        return None if n < 0 else [self.int32() for _ in range(n)]

    def tagged_fields(self) -> dict[int, bytes]:
        fields: dict[int, bytes] = {}
        for _ in range(self.uvarint()):
            tag = self.uvarint()
            size = self.uvarint()
            fields[tag] = self.data[self.pos : self.pos + size]
            self.pos += size
        return fields

    def remaining(self) -> int:
        return len(self.data) - self.pos


def request_header_version(api_key: int, api_version: int, flexible: bool) -> int:
    """v2 for flexible requests, v1 otherwise (ApiVersions included: its *response* is the odd one)."""
    del api_key, api_version
    return 2 if flexible else 1


def encode_request_header(
    api_key: int, api_version: int, correlation_id: int, client_id: str | None, header_version: int
) -> bytes:
    out = bytearray(struct.pack(">hhi", api_key, api_version, correlation_id))
    if client_id is None:
        out += struct.pack(">h", -1)
    else:
        raw = client_id.encode()
        out += struct.pack(">h", len(raw)) + raw
    if header_version >= 2:
        out.append(0)  # no tagged fields
    return bytes(out)


class WireClient:
    """A blocking Kafka protocol connection: send frames we build, read frames back."""

    def __init__(
        self, port: int, host: str = HOST, timeout: float = 15.0, client_id: str = "shoal-it-raw"
    ) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.client_id = client_id
        self._correlation = 0

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> WireClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def next_correlation_id(self) -> int:
        self._correlation += 1
        return self._correlation

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send_frame(self, payload: bytes) -> None:
        self.sock.sendall(struct.pack(">i", len(payload)) + payload)

    def send_request(
        self,
        api_key: int,
        api_version: int,
        body: bytes,
        *,
        flexible: bool,
        correlation_id: int | None = None,
    ) -> int:
        """Frame header + body; returns the correlation id used."""
        cid = self.next_correlation_id() if correlation_id is None else correlation_id
        self.send_raw(self.encode_frame(api_key, api_version, body, flexible=flexible, correlation_id=cid))
        return cid

    def encode_frame(self, api_key: int, api_version: int, body: bytes, *, flexible: bool, correlation_id: int) -> bytes:
        """One request frame (size, header, body), for sending several at once (pipelining)."""
        header = encode_request_header(
            api_key, api_version, correlation_id, self.client_id, request_header_version(api_key, api_version, flexible)
        )
        return struct.pack(">i", len(header) + len(body)) + header + body

    def recv_frame(self) -> bytes:
        (size,) = struct.unpack(">i", _recv_exact(self.sock, 4))
        return _recv_exact(self.sock, size)

    def recv_response(self, correlation_id: int, *, flexible_header: bool) -> Reader:
        """Read one response, check its correlation id, skip header tags; return a reader at the body."""
        frame = self.recv_frame()
        reader = Reader(frame)
        got = reader.int32()
        if got != correlation_id:
            raise AssertionError(f"correlation id {got} != {correlation_id}")
        if flexible_header:
            reader.tagged_fields()
        return reader

    def request(self, entity: Any, response_type: type[Any]) -> Any:
        """Send a kio request entity and decode the kio response entity."""
        return self.requests([entity], response_type)[0]

    def requests(self, entities: Sequence[Any], response_type: type[Any]) -> list[Any]:
        """Send kio request entities back to back (pipelined, in one write), then decode their
        responses in order."""
        from kio.serial import entity_reader, entity_writer

        sent = []
        frames = []
        for entity in entities:
            buf = io.BytesIO()
            entity_writer(type(entity))(buf, entity)
            api_key = int(entity.__api_key__)
            flexible = bool(entity.__flexible__)
            cid = self.next_correlation_id()
            frames.append(self.encode_frame(api_key, int(entity.__version__), buf.getvalue(), flexible=flexible,
                                            correlation_id=cid))
            # ApiVersions responses always use header v0 (no tagged fields), whatever the version.
            sent.append((cid, flexible and api_key != 18))
        self.send_raw(b"".join(frames))
        values = []
        for cid, flexible_header in sent:
            reader = self.recv_response(cid, flexible_header=flexible_header)
            value, size = entity_reader(response_type)(reader.data, reader.pos)
            if reader.pos + size != len(reader.data):
                raise AssertionError(
                    f"{response_type.__name__}: {len(reader.data) - reader.pos - size} trailing bytes after decode"
                )
            values.append(value)
        return values

    def closed_by_peer(self, timeout: float = 10.0) -> bool:
        """True when the broker closes the connection within `timeout` (reads until EOF/reset)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.sock.settimeout(max(0.05, deadline - time.monotonic()))
            try:
                chunk = self.sock.recv(65536)
            except TimeoutError:
                return False
            except (ConnectionResetError, BrokenPipeError):
                return True
            if not chunk:
                return True
        return False


def produce_request_v9(topic: str, partition: int, records: bytes, acks: int = -1) -> Any:
    """A Produce v9 request of one batch (``records``) to one partition (acks=all unless said)."""
    import datetime

    from kio.schema.produce.v9 import request as req
    from kio.static.primitive import i16, i32

    return req.ProduceRequest(
        transactional_id=None,
        acks=i16(acks),
        timeout=datetime.timedelta(seconds=30),
        topic_data=(
            req.TopicProduceData(
                name=topic,
                partition_data=(req.PartitionProduceData(index=i32(partition), records=records),),
            ),
        ),
    )


# ---------------------------------------------------------------------------------------------
# RecordBatch v2 (magic 2) encoding, uncompressed: enough to send batches real clients never would
# ---------------------------------------------------------------------------------------------


def encode_record(
    offset_delta: int,
    timestamp_delta: int,
    key: bytes | None,
    value: bytes | None,
    headers: Sequence[tuple[str, bytes | None]] = (),
) -> bytes:
    body = bytearray([0])  # attributes
    write_varint(body, timestamp_delta)
    write_varint(body, offset_delta)
    for field in (key, value):
        if field is None:
            write_varint(body, -1)
        else:
            write_varint(body, len(field))
            body += field
    write_varint(body, len(headers))
    for name, hval in headers:
        raw = name.encode()
        write_varint(body, len(raw))
        body += raw
        if hval is None:
            write_varint(body, -1)
        else:
            write_varint(body, len(hval))
            body += hval
    out = bytearray()
    write_varint(out, len(body))
    return bytes(out + body)


def build_record_batch(
    records: Iterable[tuple[bytes | None, bytes | None]],
    *,
    base_timestamp: int | None = None,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
) -> bytes:
    """A valid uncompressed RecordBatch v2 with CreateTime timestamps and a correct CRC32C."""
    import crc32c

    ts = int(time.time() * 1000) if base_timestamp is None else base_timestamp
    encoded = [encode_record(i, 0, k, v) for i, (k, v) in enumerate(records)]
    count = len(encoded)
    # attributes .. end: attributes(2) lastOffsetDelta(4) baseTs(8) maxTs(8) pid(8) epoch(2) seq(4) count(4)
    after_crc = struct.pack(
        ">hiqqqhii", 0, count - 1, ts, ts, producer_id, producer_epoch, base_sequence, count
    ) + b"".join(encoded)
    crc = crc32c.crc32c(after_crc)
    # batchLength counts from partitionLeaderEpoch to the end.
    batch_length = 4 + 1 + 4 + len(after_crc)
    return struct.pack(">qiibI", 0, batch_length, -1, 2, crc) + after_crc


def corrupt_batch(batch: bytes) -> bytes:
    """Flip one byte of the last record, leaving the stored CRC stale."""
    data = bytearray(batch)
    data[-1] ^= 0xFF
    return bytes(data)


def split_wal_object(data: bytes) -> list[bytes]:
    """Split a WAL object (version byte 0 + concatenated RecordBatches) into its batches.

    Raises ValueError when the bytes don't parse that way, which the caller reports.
    """
    if not data or data[0] != 0:
        raise ValueError(f"WAL object does not start with version byte 0: {data[:1]!r}")
    batches = []
    pos = 1
    while pos < len(data):
        if pos + 17 > len(data):
            raise ValueError(f"truncated batch header at {pos} of {len(data)}")
        (batch_length,) = struct.unpack_from(">i", data, pos + 8)
        magic = data[pos + 16]
        end = pos + 12 + batch_length
        if magic != 2 or batch_length < 49 or end > len(data):
            raise ValueError(f"not a RecordBatch v2 at {pos}: length {batch_length}, magic {magic}")
        batches.append(data[pos:end])
        pos = end
    return batches


# ---------------------------------------------------------------------------------------------
# Client-side helpers shared by the tests: topics, workloads, confluent-kafka produce/consume,
# and one checker that compares what was sent with what came back, partition by partition.
# ---------------------------------------------------------------------------------------------

Headers = tuple[tuple[str, bytes | None], ...]


@dataclass(frozen=True, slots=True)
class Sent:
    """One record as the test produced it. partition -1: the client's partitioner chose."""

    seq: int
    partition: int
    key: bytes | None
    value: bytes | None
    headers: Headers
    timestamp: int | None  # CreateTime set by the test; None: the client stamped it


@dataclass(frozen=True, slots=True)
class Rec:
    """One record as a consumer got it back, normalised across client libraries."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: Headers
    timestamp_type: int  # Kafka's: 0 CreateTime, 1 LogAppendTime, -1 none
    timestamp: int


def seq_of_value(value: bytes | None) -> int | None:
    """Workload values look like b'<tag>|<seq>|<filler>'; None for values that aren't ours."""
    if not value:
        return None
    parts = value.split(b"|", 2)
    if len(parts) < 2 or not parts[1].isdigit():
        return None
    return int(parts[1])


def make_workload(
    n: int,
    partitions: int,
    tag: str,
    *,
    seed: int = 0,
    base_timestamp: int | None = None,
    nulls: bool = True,
    null_headers: bool = True,
    client_partitions: bool = False,
    first_seq: int = 0,
) -> list[Sent]:
    """`n` records of ~100 bytes with keys, headers and (optionally) explicit timestamps.

    Values are random hex so compression has real work; with `nulls` a few keys, values and
    header values are null and some values empty, to check null/empty stay distinct. Values
    that are null or empty can't carry the sequence number, so every record also carries it in
    its 'seq' header.
    """
    rnd = random.Random(seed)
    out: list[Sent] = []
    for i in range(n):
        seq = first_seq + i
        key: bytes | None = f"key-{i % 5003}".encode()
        value: bytes | None = f"{tag}|{seq:08d}|".encode() + rnd.randbytes(40).hex().encode()
        headers: list[tuple[str, bytes | None]] = [("seq", str(seq).encode()), ("tag", tag.encode())]
        if nulls:
            if i % 97 == 5:
                key = None
            if i % 1009 == 7:
                value = b""
            elif i % 1013 == 9:
                value = None
                key = f"key-{i % 5003}".encode()  # some clients refuse a record with neither
            if null_headers and i % 7 == 3:
                headers.append(("nil", None))
            if i % 11 == 4:
                headers.append(("bin", bytes(range(256))[i % 200 : i % 200 + 8]))
        ts = None if base_timestamp is None else base_timestamp + i
        out.append(Sent(seq, -1 if client_partitions else i % partitions, key, value, tuple(headers), ts))
    return out


def seq_of_rec(rec: Rec) -> int | None:
    for name, value in rec.headers:
        if name == "seq" and value is not None and value.isdigit():
            return int(value)
    return seq_of_value(rec.value)


def check_records(
    received: Sequence[Rec],
    sent: Sequence[Sent],
    *,
    timestamp_range: tuple[int, int] | None = None,
    max_problems: int = 25,
) -> None:
    """Assert the broker gave back exactly what was sent, per partition.

    Per partition: offsets gapless from 0, records in production order, keys, values, headers
    identical, timestamps CreateTime equal to what the producer set (or inside
    `timestamp_range` when the client stamped them). Records sent with partition -1 are
    matched to the partition they came back from (each must come back exactly once).
    """
    problems: list[str] = []
    by_seq: dict[int, list[Rec]] = {}
    for rec in received:
        seq = seq_of_rec(rec)
        if seq is None:
            problems.append(f"p{rec.partition}@{rec.offset}: record without a seq header: {rec}")
            continue
        by_seq.setdefault(seq, []).append(rec)
    sent_seqs = {s.seq for s in sent}
    missing = sorted(s.seq for s in sent if s.seq not in by_seq)
    dups = sorted(seq for seq, recs in by_seq.items() if len(recs) > 1)
    extra = sorted(seq for seq in by_seq if seq not in sent_seqs)
    if missing:
        problems.append(f"{len(missing)} records missing, e.g. seqs {missing[:10]}")
    if dups:
        ex = dups[0]
        problems.append(
            f"{len(dups)} records duplicated, e.g. seq {ex} at "
            + ", ".join(f"p{r.partition}@{r.offset}" for r in by_seq[ex])
        )
    if extra:
        problems.append(f"{len(extra)} records never sent, e.g. seqs {extra[:10]}")

    expected: dict[int, list[Sent]] = {}
    for s in sent:
        part = s.partition
        if part < 0:
            if s.seq not in by_seq:
                continue
            part = by_seq[s.seq][0].partition
        expected.setdefault(part, []).append(s)
    got: dict[int, list[Rec]] = {}
    for rec in received:
        got.setdefault(rec.partition, []).append(rec)

    for part in sorted(set(expected) | set(got)):
        recs = sorted(got.get(part, []), key=lambda r: r.offset)
        exp = expected.get(part, [])
        offsets = [r.offset for r in recs]
        if offsets != list(range(len(offsets))):
            gaps = [(a, b) for a, b in zip(offsets, offsets[1:], strict=False) if b != a + 1]
            first = offsets[0] if offsets else None
            problems.append(f"p{part}: offsets not gapless from 0 (first {first}, gaps/dups {gaps[:5]})")
        if len(recs) != len(exp):
            problems.append(f"p{part}: {len(recs)} records back, {len(exp)} sent")
        for rec, s in zip(recs, exp, strict=False):
            where = f"p{part}@{rec.offset} (seq {s.seq})"
            if seq_of_rec(rec) != s.seq:
                problems.append(f"{where}: order: got seq {seq_of_rec(rec)}")
                continue
            if rec.key != s.key:
                problems.append(f"{where}: key {rec.key!r} != {s.key!r}")
            if rec.value != s.value:
                problems.append(f"{where}: value {rec.value!r:.60} != {s.value!r:.60}")
            if tuple(rec.headers) != s.headers:
                problems.append(f"{where}: headers {rec.headers!r} != {s.headers!r}")
            if rec.timestamp_type != 0:
                problems.append(f"{where}: timestamp type {rec.timestamp_type}, expected CreateTime (0)")
            if s.timestamp is not None and rec.timestamp != s.timestamp:
                problems.append(f"{where}: timestamp {rec.timestamp} != {s.timestamp}")
            if s.timestamp is None and timestamp_range is not None:
                lo, hi = timestamp_range
                if not lo <= rec.timestamp <= hi:
                    problems.append(
                        f"{where}: timestamp {rec.timestamp} outside the produce run [{lo}, {hi}]"
                    )
            if len(problems) > max_problems:
                break
        if len(problems) > max_problems:
            break
    if problems:
        shown = "\n  ".join(problems[:max_problems])
        raise AssertionError(
            f"{len(received)} records received, {len(sent)} sent; problems:\n  {shown}"
            + (
                f"\n  ... and more ({len(problems)} shown up to {max_problems})"
                if len(problems) > max_problems
                else ""
            )
        )


def admin_client(bootstrap: str, **config: Any) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap, **config})


def wait_for_topic(admin: Any, name: str, partitions: int, timeout: float = 30.0) -> Any:
    """Wait until Metadata lists the topic with all partitions led; returns its TopicMetadata."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        md = admin.list_topics(topic=name, timeout=10)
        last = md.topics.get(name)
        if (
            last is not None
            and last.error is None
            and len(last.partitions) == partitions
            and all(p.leader >= 0 and p.error is None for p in last.partitions.values())
        ):
            return last
        time.sleep(0.2)
    raise AssertionError(f"topic {name} not ready in metadata after {timeout}s: {last}")


def create_diskless_topic(
    bootstrap: str,
    name: str,
    partitions: int = 4,
    *,
    config: Mapping[str, str] | None = None,
    replication_factor: int = 1,
    timeout: float = 30.0,
) -> Any:
    """CreateTopics with diskless.enable=true through confluent's AdminClient, then wait for metadata."""
    from confluent_kafka.admin import NewTopic

    admin = admin_client(bootstrap)
    cfg = {"diskless.enable": "true", **(config or {})}
    futures = admin.create_topics(
        [NewTopic(name, num_partitions=partitions, replication_factor=replication_factor, config=cfg)],
        operation_timeout=timeout,
        request_timeout=timeout,
    )
    futures[name].result(timeout)
    return wait_for_topic(admin, name, partitions, timeout)


def confluent_produce(
    bootstrap: str,
    topic: str,
    sent: Sequence[Sent],
    *,
    config: Mapping[str, Any] | None = None,
    timeout: float = 120.0,
) -> None:
    """Produce `sent` with an idempotent confluent-kafka producer; assert every delivery succeeded."""
    from confluent_kafka import Producer

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
            **(config or {}),
        }
    )
    errors: list[str] = []
    delivered = 0

    def on_delivery(err: Any, msg: Any) -> None:
        nonlocal delivered
        if err is not None:
            errors.append(f"p{msg.partition()}: {err}")
        else:
            delivered += 1

    deadline = time.monotonic() + timeout
    for i, s in enumerate(sent):
        kwargs: dict[str, Any] = {
            "key": s.key,
            "value": s.value,
            "headers": list(s.headers),
            "on_delivery": on_delivery,
        }
        if s.partition >= 0:
            kwargs["partition"] = s.partition
        if s.timestamp is not None:
            kwargs["timestamp"] = s.timestamp
        while True:
            try:
                producer.produce(topic, **kwargs)
                break
            except BufferError:
                producer.poll(0.05)
                if time.monotonic() > deadline:
                    raise AssertionError(
                        f"producer queue still full after {timeout}s at record {i}"
                    ) from None
        if i % 1000 == 0:
            producer.poll(0)
    remaining = producer.flush(max(1.0, deadline - time.monotonic()))
    assert remaining == 0, f"{remaining} records not delivered within {timeout}s ({delivered} delivered)"
    assert not errors, f"{len(errors)} delivery errors, e.g. {errors[:5]}"
    assert delivered == len(sent), f"{delivered} delivered of {len(sent)}"


def rec_from_confluent(msg: Any) -> Rec:
    ts_type, ts = msg.timestamp()
    # confluent: 0 not available, 1 CreateTime, 2 LogAppendTime -> Kafka's -1/0/1
    return Rec(
        msg.partition(), msg.offset(), msg.key(), msg.value(), tuple(msg.headers() or ()), ts_type - 1, ts
    )


def confluent_consumer(bootstrap: str, **config: Any) -> Any:
    """A consumer for manual assignment only (no group protocol: the broker has none yet)."""
    from confluent_kafka import Consumer

    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"shoal-it-{uuid.uuid4().hex[:8]}",  # required by the client, never used
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "enable.partition.eof": False,
            "auto.offset.reset": "earliest",
            **config,
        }
    )


def confluent_consume(
    bootstrap: str,
    topic: str,
    partitions: Iterable[int],
    expected: int,
    *,
    timeout: float = 120.0,
    settle: float = 1.0,
    config: Mapping[str, Any] | None = None,
) -> list[Rec]:
    """Read every partition from the beginning until `expected` records arrived (then `settle`
    seconds more, so duplicates or extras show up), bounded by `timeout`."""
    from confluent_kafka import OFFSET_BEGINNING, TopicPartition

    consumer = confluent_consumer(bootstrap, **(config or {}))
    out: list[Rec] = []
    errors: list[str] = []
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        deadline = time.monotonic() + timeout
        settle_until: float | None = None
        while time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=5000, timeout=0.5):
                if msg.error():
                    errors.append(str(msg.error()))
                else:
                    out.append(rec_from_confluent(msg))
            if len(out) >= expected:
                if settle_until is None:
                    settle_until = time.monotonic() + settle
                elif time.monotonic() >= settle_until:
                    break
    finally:
        consumer.close()
    assert not errors, f"consumer errors: {errors[:5]}"
    assert len(out) >= expected, f"only {len(out)} of {expected} records consumed within {timeout}s"
    return out


CODEC_IDS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def batch_codec(batch: bytes) -> int:
    """Compression codec id from a RecordBatch's attributes (bits 0-2)."""
    (attributes,) = struct.unpack_from(">h", batch, 21)
    return int(attributes) & 0x7


def wal_codec_counts(broker: BrokerProcess) -> dict[int, int]:
    """How many batches of each codec the broker's local WAL objects hold (they must parse)."""
    counts: dict[int, int] = {}
    for path in broker.wal_objects():
        for batch in split_wal_object(path.read_bytes()):
            codec = batch_codec(batch)
            counts[codec] = counts.get(codec, 0) + 1
    return counts
