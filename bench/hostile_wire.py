"""Hostile load, the raw wire: Kafka framing and encoding helpers, a blocking client, requests.

Everything here speaks the Kafka protocol by hand or through kio (the same request registry the
broker uses), so the other ``hostile_*`` modules can build frames a well-behaved client never
would. ``bench/hostile_load.py`` is the tool; ``bench/`` is not a package, so the siblings
import each other by plain name.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import socket
import struct
import sys
import termios
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

try:
    import shoal  # noqa: F401  (installed editable in the project venv)
except ImportError:  # run from a checkout without the package installed
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from kio.static.primitive import i8, i16, i32, i64

from shoal.protocol.apis import decode_response, encode_request, request_class
from shoal.protocol.build import make, nested
from shoal.protocol.errors import ErrorCode

CLIENT_ID = "hostile-load"
GIB = 1 << 30
MIB = 1 << 20


def log(message: str) -> None:
    print(f"[hostile {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def error_name(code: int | None) -> str | None:
    if code is None:
        return None
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"unknown({code})"


# ---------------------------------------------------------------------------------------------
# Wire encoding helpers
# ---------------------------------------------------------------------------------------------


def uvarint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def zigzag(value: int) -> bytes:
    """A record-field varint (zigzag, 64-bit)."""
    return uvarint(((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF)


def legacy_string(s: str | None) -> bytes:
    if s is None:
        return struct.pack(">h", -1)
    raw = s.encode()
    return struct.pack(">h", len(raw)) + raw


def compact_string(s: str | None) -> bytes:
    if s is None:
        return b"\x00"
    raw = s.encode()
    return uvarint(len(raw) + 1) + raw


def tagged_fields(fields: dict[int, bytes]) -> bytes:
    out = bytearray(uvarint(len(fields)))
    for tag, data in sorted(fields.items()):
        out += uvarint(tag) + uvarint(len(data)) + data
    return bytes(out)


def request_header(
    api_key: int, version: int, correlation_id: int, *, flexible: bool, tags: bytes = b"\x00"
) -> bytes:
    """Request header v1 (legacy) or v2 (flexible; ``tags`` is its tagged-field section)."""
    out = struct.pack(">hhi", api_key, version, correlation_id) + legacy_string(CLIENT_ID)
    return out + tags if flexible else out


def frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def kio_body(request: Any) -> bytes:
    """A kio request's body bytes (the frame minus size prefix and header)."""
    full = encode_request(0, CLIENT_ID, request)
    header_len = 2 + 2 + 4 + 2 + len(CLIENT_ID) + (1 if request.__flexible__ else 0)
    return full[4 + header_len :]


# ---------------------------------------------------------------------------------------------
# One raw-wire client
# ---------------------------------------------------------------------------------------------


class Closed(Exception):
    """The broker closed the connection (EOF or reset)."""


class Wire:
    """A blocking Kafka connection: send frames we build (or kio requests), read frames back."""

    def __init__(self, host: str, port: int, timeout: float = 10.0) -> None:
        self.sock = socket.create_connection((host, port), timeout=min(timeout, 5.0))
        self.sock.settimeout(timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.correlation = 0

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()

    def next_id(self) -> int:
        self.correlation += 1
        return self.correlation

    def send(self, data: bytes) -> None:
        try:
            self.sock.sendall(data)
        except (BrokenPipeError, ConnectionResetError) as exc:
            raise Closed(str(exc)) from exc

    def _recv_exact(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            try:
                chunk = self.sock.recv(min(n - len(buf), 4 * MIB))
            except ConnectionResetError as exc:
                raise Closed(str(exc)) from exc
            if not chunk:
                raise Closed(f"EOF after {len(buf)} of {n} bytes")
            buf += chunk
        return bytes(buf)

    def recv_frame(self) -> bytes:
        (size,) = struct.unpack(">i", self._recv_exact(4))
        return self._recv_exact(size)

    def request(self, request: Any) -> Any:
        """Send a kio request, return the decoded kio response."""
        cid = self.next_id()
        self.send(encode_request(cid, CLIENT_ID, request))
        data = self.recv_frame()
        (got,) = struct.unpack_from(">i", data)
        if got != cid:
            raise RuntimeError(f"correlation id {got} != {cid}")
        return decode_response(int(request.__api_key__), int(request.__version__), data)

    def outcome(self, api_key: int, version: int, correlation_id: int, timeout: float) -> dict[str, Any]:
        """What the broker did with the request just sent: answered (decoded), closed, or nothing."""
        self.sock.settimeout(timeout)
        started = time.monotonic()
        try:
            data = self.recv_frame()
        except Closed:
            return {"answer": "closed", "after_ms": ms_since(started)}
        except TimeoutError:
            return {"answer": "no_answer", "after_ms": ms_since(started)}
        except OSError as exc:
            return {"answer": "closed", "after_ms": ms_since(started), "detail": str(exc)}
        out: dict[str, Any] = {"answer": "response", "after_ms": ms_since(started), "bytes": len(data)}
        (got,) = struct.unpack_from(">i", data) if len(data) >= 4 else (None,)
        if got != correlation_id:
            out["correlation_mismatch"] = got
        for v in (version, 0) if api_key == 18 else (version,):  # ApiVersions errors may come as v0
            try:
                codes = sorted(set(error_codes(decode_response(api_key, v, data))))
            except Exception as exc:  # noqa: BLE001 - a reply we cannot decode is a finding
                out["decode_error"] = f"{exc.__class__.__name__}: {exc}"[:200]
                continue
            out.pop("decode_error", None)
            out["error_codes"] = codes
            out["error_names"] = [error_name(c) for c in codes]
            break
        return out

    def closed_by_peer(self, timeout: float) -> bool:
        """True when the broker closes the connection within ``timeout`` (reads and drops data)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.sock.settimeout(max(0.05, deadline - time.monotonic()))
            try:
                chunk = self.sock.recv(65536)
            except TimeoutError:
                return False
            except OSError:
                return True
            if not chunk:
                return True
        return False


def error_codes(value: Any) -> list[int]:
    """Every ``error_code`` field anywhere in a decoded kio response."""
    out: list[int] = []
    if isinstance(value, tuple | list):
        for item in value:
            out += error_codes(item)
    elif hasattr(value, "__dataclass_fields__"):
        for name in value.__dataclass_fields__:
            item = getattr(value, name)
            if name == "error_code":
                out.append(int(item))
            elif isinstance(item, tuple | list) or hasattr(item, "__dataclass_fields__"):
                out += error_codes(item)
    return out


def answer_of(exc: BaseException) -> str:
    """How a request ended when no decodable reply came back."""
    if isinstance(exc, TimeoutError):
        return "no_answer"
    if isinstance(exc, Closed | ConnectionError):
        return "closed"
    return "bad_reply"


def ms_since(start: float) -> float:
    return round((time.monotonic() - start) * 1000, 1)


def pending_bytes(sock: socket.socket) -> int | None:
    """Bytes the broker sent that wait unread in our receive buffer (FIONREAD)."""
    try:
        return int(struct.unpack("i", fcntl.ioctl(sock.fileno(), termios.FIONREAD, b"\0\0\0\0"))[0])
    except OSError:
        return None


def peer_closed(sock: socket.socket) -> bool:
    """Non-blocking: did the broker close this connection (EOF or reset with nothing unread)?"""
    timeout = sock.gettimeout()
    try:
        sock.setblocking(False)  # with a timeout set, recv would wait for data whatever the flags
        data = sock.recv(1, socket.MSG_PEEK)
    except BlockingIOError:
        return False
    except OSError:
        return True
    finally:
        with contextlib.suppress(OSError):
            sock.settimeout(timeout)
    return data == b""


# ---------------------------------------------------------------------------------------------
# Requests, built with kio through the same registry the broker uses
# ---------------------------------------------------------------------------------------------


def metadata_request(topics: list[str] | None, version: int = 12) -> Any:
    cls = request_class(3, version)
    topic_cls = nested(cls, "MetadataRequestTopic")
    entries = None if topics is None else tuple(make(topic_cls, topic_id=None, name=t) for t in topics)
    return make(cls, topics=entries, allow_auto_topic_creation=False, include_topic_authorized_operations=False)


def produce_request(topic: str, partition: int, batch: bytes, *, acks: int = -1, timeout_ms: int = 15000) -> Any:
    cls = request_class(0, 9)
    pd = nested(cls, "PartitionProduceData")(index=i32(partition), records=batch)
    td = nested(cls, "TopicProduceData")(name=topic, partition_data=(pd,))
    return cls(transactional_id=None, acks=i16(acks), timeout=dt.timedelta(milliseconds=timeout_ms), topic_data=(td,))


def fetch_request(topic: str, partition: int, offset: int, max_bytes: int, *, max_wait_ms: int = 0) -> Any:
    cls = request_class(1, 12)
    part = nested(cls, "FetchPartition")(
        partition=i32(partition),
        current_leader_epoch=i32(-1),
        fetch_offset=i64(offset),
        last_fetched_epoch=i32(-1),
        log_start_offset=i64(-1),
        partition_max_bytes=i32(max_bytes),
    )
    return cls(
        replica_id=i32(-1),
        max_wait=dt.timedelta(milliseconds=max_wait_ms),
        min_bytes=i32(1),
        max_bytes=i32(max_bytes),
        isolation_level=i8(0),
        session_id=i32(0),
        session_epoch=i32(-1),
        topics=(nested(cls, "FetchTopic")(topic=topic, partitions=(part,)),),
        forgotten_topics_data=(),
        rack_id="",
    )


def list_offsets_request(topic: str, partitions: Iterable[int], timestamp: int) -> Any:
    cls = request_class(2, 7)
    parts = tuple(
        nested(cls, "ListOffsetsPartition")(
            partition_index=i32(p), current_leader_epoch=i32(-1), timestamp=i64(timestamp)
        )
        for p in partitions
    )
    return cls(
        replica_id=i32(-1), isolation_level=i8(0), topics=(nested(cls, "ListOffsetsTopic")(name=topic, partitions=parts),)
    )


def api_versions_request() -> Any:
    return request_class(18, 0)()


def list_offsets(wire: Wire, topic: str, partitions: Iterable[int], timestamp: int = -1) -> dict[int, dict[str, Any]]:
    """Per partition: error code and offset answered for ``timestamp`` (-1: the next offset)."""
    response = wire.request(list_offsets_request(topic, partitions, timestamp))
    out = {}
    for t in response.topics:
        for p in t.partitions:
            out[int(p.partition_index)] = {"error_code": int(p.error_code), "offset": int(p.offset)}
    return out


def produce(wire: Wire, topic: str, partition: int, batch: bytes, acks: int = -1) -> dict[str, Any]:
    response = wire.request(produce_request(topic, partition, batch, acks=acks))
    p = response.responses[0].partition_responses[0]
    out = {"error_code": int(p.error_code), "error_name": error_name(int(p.error_code)), "base_offset": int(p.base_offset)}
    if p.error_message:
        out["error_message"] = p.error_message[:300]
    return out
