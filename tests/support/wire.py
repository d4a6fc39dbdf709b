"""Raw Kafka wire access for integration tests: the requests real clients never send (garbage,
oversized frames, corrupt batches, Metadata v14), and reading answers field by field.
"""

from __future__ import annotations

import io
import socket
import struct
import time
from collections.abc import Sequence
from typing import Any

from tests.support.broker import HOST

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


def metadata_v12(port: int, topics: Sequence[str] | None = None, timeout: float = 15.0) -> Any:
    """Metadata v12 as the broker on ``port`` itself answers it (a client library may send its
    Metadata requests to any broker it knows of): ``topics`` by name, or every topic (None)."""
    import uuid

    from kio.schema.metadata.v12 import request as req
    from kio.schema.metadata.v12 import response as resp

    wanted = None if topics is None else tuple(
        req.MetadataRequestTopic(topic_id=uuid.UUID(int=0), name=name) for name in topics
    )
    with WireClient(port, timeout=timeout) as client:
        return client.request(
            req.MetadataRequest(
                topics=wanted, allow_auto_topic_creation=False, include_topic_authorized_operations=False
            ),
            resp.MetadataResponse,
        )
