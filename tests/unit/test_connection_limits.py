"""Connection bounds: muting as Kafka does, produce pipelining, the broker-wide request budget,
idle connections and connection quotas, over real loopback sockets with a stand-in handler."""

from __future__ import annotations

import asyncio
import socket
import struct
from collections.abc import AsyncIterator, Callable

import pytest

from shoal.server.connection import (
    PRODUCE_PIPELINE_DEPTH,
    PRODUCE_READ_AHEAD,
    PRODUCE_READ_AHEAD_BYTES,
    ConnectionSettings,
    serve_connection,
)
from shoal.server.dispatch import CloseConnection
from shoal.server.frames import FrameConnection, start_frame_server
from shoal.server.limits import ConnectionQuotas, RequestBudget, connection_overrides


def frame(api_key: int, correlation_id: int, padding: int = 0) -> bytes:
    body = struct.pack(">hhi", api_key, 0, correlation_id) + b"\0" * padding
    return struct.pack(">i", len(body)) + body


class Server:
    """serve_connection on a loopback port; the handler answers with the correlation id after a gate."""

    def __init__(self, settings: ConnectionSettings, budget: RequestBudget, response_size: int = 8) -> None:
        self.settings = settings
        self.budget = budget
        self.response_size = response_size
        self.started: list[int] = []
        self.running = 0
        self.max_running = 0
        self.gate = asyncio.Event()
        self.gate.set()
        self.port = 0
        self._server: asyncio.Server | None = None

    async def handle(self, frame: memoryview, peer: str) -> bytes:
        assert frame.readonly  # as a view of bytes: some codecs refuse writable buffers
        (correlation_id,) = struct.unpack_from(">i", frame, 4)
        self.started.append(correlation_id)
        self.running += 1
        self.max_running = max(self.max_running, self.running)
        try:
            await self.gate.wait()
        finally:
            self.running -= 1
        body = struct.pack(">i", correlation_id) + b"x" * (self.response_size - 4)
        return struct.pack(">i", len(body)) + body

    async def __aenter__(self) -> Server:
        async def on_connection(conn: FrameConnection) -> None:
            await serve_connection(conn, self.handle, self.settings, self.budget)

        self._server = await start_frame_server(on_connection, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()


@pytest.fixture
async def server() -> AsyncIterator[Server]:
    async with Server(ConnectionSettings(1 << 20, 0), RequestBudget(500, -1)) as s:
        yield s


async def read_response(reader: asyncio.StreamReader) -> int:
    size = struct.unpack(">i", await reader.readexactly(4))[0]
    data = await reader.readexactly(size)
    return int(struct.unpack_from(">i", data)[0])


async def eventually(check: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not check():
        assert asyncio.get_running_loop().time() < deadline, "condition not reached"
        await asyncio.sleep(0.01)


async def test_non_produce_requests_run_one_at_a_time_and_answer_in_order(server: Server) -> None:
    server.gate.clear()
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(b"".join(frame(3, i) for i in range(10)))  # ten pipelined Metadata requests
    await eventually(lambda: server.started == [0])
    await asyncio.sleep(0.1)
    assert server.started == [0], "a second request started while the first was unanswered"
    server.gate.set()
    assert [await read_response(reader) for _ in range(10)] == list(range(10))
    assert server.max_running == 1
    writer.close()


async def test_produce_requests_pipeline_up_to_the_depth(server: Server) -> None:
    server.gate.clear()
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(b"".join(frame(0, i) for i in range(PRODUCE_PIPELINE_DEPTH)))
    await eventually(lambda: len(server.started) == PRODUCE_PIPELINE_DEPTH)
    assert server.running == PRODUCE_PIPELINE_DEPTH
    server.gate.set()
    answers = [await read_response(reader) for _ in range(PRODUCE_PIPELINE_DEPTH)]
    assert answers == list(range(PRODUCE_PIPELINE_DEPTH))
    writer.close()


async def test_produce_requests_already_sent_are_read_past_the_depth_up_to_the_read_ahead(server: Server) -> None:
    """A producer with more than an idempotent one's five in flight (librdkafka's default allows a
    million): what it has sent joins the broker's work at once, up to PRODUCE_READ_AHEAD, also
    when it arrives while the connection has five waiting; answers stay in order."""
    server.gate.clear()
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(b"".join(frame(0, i) for i in range(PRODUCE_PIPELINE_DEPTH + 3)))
    await eventually(lambda: len(server.started) == PRODUCE_PIPELINE_DEPTH + 3)
    writer.write(frame(0, PRODUCE_PIPELINE_DEPTH + 3))  # arrives while eight wait
    await eventually(lambda: len(server.started) == PRODUCE_PIPELINE_DEPTH + 4)
    total = PRODUCE_READ_AHEAD + 5
    writer.write(b"".join(frame(0, i) for i in range(PRODUCE_PIPELINE_DEPTH + 4, total)))
    await eventually(lambda: len(server.started) == PRODUCE_READ_AHEAD)
    await asyncio.sleep(0.1)
    assert server.running == PRODUCE_READ_AHEAD  # the rest waits for answers
    server.gate.set()
    assert [await read_response(reader) for _ in range(total)] == list(range(total))
    assert server.started == list(range(total))
    writer.close()


async def test_large_produce_requests_are_not_read_ahead_past_the_bytes_bound(server: Server) -> None:
    """Read-ahead stops once the connection's Produce requests in flight hold
    PRODUCE_READ_AHEAD_BYTES: five large requests already fill a WAL segment."""
    server.gate.clear()
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    size = PRODUCE_READ_AHEAD_BYTES // 4 - 64  # under the fixture's 1 MiB frame limit; five pass the bound
    writer.write(b"".join(frame(0, i, padding=size) for i in range(PRODUCE_PIPELINE_DEPTH + 3)))
    await eventually(lambda: len(server.started) == PRODUCE_PIPELINE_DEPTH)
    await asyncio.sleep(0.2)
    assert server.running == PRODUCE_PIPELINE_DEPTH
    server.gate.set()
    answers = [await read_response(reader) for _ in range(PRODUCE_PIPELINE_DEPTH + 3)]
    assert answers == list(range(PRODUCE_PIPELINE_DEPTH + 3))
    writer.close()


async def test_a_client_that_stops_reading_stops_being_served() -> None:
    async with Server(ConnectionSettings(1 << 20, 0), RequestBudget(500, -1), response_size=1 << 20) as s:
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect(("127.0.0.1", s.port))
        sock.setblocking(False)
        loop = asyncio.get_running_loop()
        await loop.sock_sendall(sock, b"".join(frame(1, i) for i in range(100)))  # 100 Fetches of 1 MiB
        await asyncio.sleep(1.0)
        # The kernel's socket buffers hold a few responses; the broker stops after one more.
        assert len(s.started) < 20, s.started
        sock.close()


async def test_the_request_budget_is_shared_by_connections() -> None:
    budget = RequestBudget(3, -1)
    async with Server(ConnectionSettings(1 << 20, 0), budget) as s:
        s.gate.clear()
        conns = [await asyncio.open_connection("127.0.0.1", s.port) for _ in range(5)]
        for i, (_, w) in enumerate(conns):
            w.write(frame(3, i))
        await eventually(lambda: len(s.started) == 3)
        await asyncio.sleep(0.1)
        assert len(s.started) == 3 and budget.requests == 3
        s.gate.set()
        assert sorted([await read_response(r) for r, _ in conns]) == [0, 1, 2, 3, 4]
        await eventually(lambda: budget.requests == 0 and budget.bytes == 0)
        for _, w in conns:
            w.close()


async def test_the_byte_budget_lets_one_large_request_in() -> None:
    budget = RequestBudget(500, 100)
    async with Server(ConnectionSettings(1 << 20, 0), budget) as s:
        s.gate.clear()
        (r1, w1), (r2, w2) = [await asyncio.open_connection("127.0.0.1", s.port) for _ in range(2)]
        w1.write(frame(3, 1, padding=1000))
        w2.write(frame(3, 2))
        await eventually(lambda: s.started == [1])
        await asyncio.sleep(0.1)
        assert s.started == [1]
        s.gate.set()
        assert await read_response(r1) == 1 and await read_response(r2) == 2
        w1.close()
        w2.close()


async def test_budget_waiters_are_let_in_first_come_first_served_one_per_free_slot() -> None:
    budget = RequestBudget(2, -1)
    await budget.acquire(10)
    await budget.acquire(10)
    order: list[int] = []

    async def waiter(i: int) -> None:
        await budget.acquire(1)
        order.append(i)

    tasks = [asyncio.create_task(waiter(i)) for i in range(4)]
    await asyncio.sleep(0.01)
    tasks[1].cancel()  # a waiter that gives up leaves the line
    await asyncio.sleep(0.01)
    assert order == [] and budget.requests == 2
    budget.release(10)
    await asyncio.sleep(0.01)
    assert order == [0] and budget.requests == 2  # one slot freed: one waiter in
    budget.release(10)
    budget.release(1)
    await asyncio.sleep(0.01)
    assert order == [0, 2, 3] and budget.requests == 2
    assert tasks[1].cancelled()


async def test_a_woken_waiter_that_is_cancelled_passes_its_turn_on() -> None:
    budget = RequestBudget(1, -1)
    await budget.acquire(1)
    first = asyncio.create_task(budget.acquire(1))
    second = asyncio.create_task(budget.acquire(1))
    await asyncio.sleep(0.01)
    budget.release(1)  # wakes ``first``...
    first.cancel()  # ...which is cancelled before it runs
    await asyncio.sleep(0.01)
    assert first.cancelled() and second.done() and budget.requests == 1


async def test_oversized_frames_close_the_connection() -> None:
    async with Server(ConnectionSettings(1000, 0), RequestBudget(500, -1)) as s:
        reader, writer = await asyncio.open_connection("127.0.0.1", s.port)
        writer.write(struct.pack(">i", 2**31 - 1))
        assert await reader.read() == b""
        assert s.started == []
        writer.close()


async def test_idle_connections_are_closed() -> None:
    async with Server(ConnectionSettings(1 << 20, 0.3), RequestBudget(500, -1)) as s:
        reader, writer = await asyncio.open_connection("127.0.0.1", s.port)
        writer.write(frame(3, 7))
        assert await read_response(reader) == 7
        assert await asyncio.wait_for(reader.read(), 5) == b""
        writer.close()


def test_connection_quotas() -> None:
    quotas = ConnectionQuotas(max_connections=3, max_per_ip=2)
    assert quotas.admit("10.0.0.1") is None
    assert quotas.admit("10.0.0.1") is None
    assert "max.connections.per.ip" in (quotas.admit("10.0.0.1") or "")
    assert quotas.admit("10.0.0.2") is None
    assert "max.connections is 3" in (quotas.admit("10.0.0.3") or "")
    quotas.release("10.0.0.1")
    assert quotas.admit("10.0.0.3") is None


async def test_a_connection_closed_mid_pipeline_gives_its_budget_back() -> None:
    """The first of five pipelined produces closes the connection (a malformed one, say): the
    connection ends, the other four are cancelled and the broker-wide budget is whole again."""
    budget = RequestBudget(500, -1)

    class Closing(Server):
        async def handle(self, frame: memoryview, peer: str) -> bytes:
            (correlation_id,) = struct.unpack_from(">i", frame, 4)
            if correlation_id == 0:
                await eventually(lambda: len(self.started) >= PRODUCE_PIPELINE_DEPTH - 1)
                raise CloseConnection("malformed")
            return await super().handle(frame, peer)

    async with Closing(ConnectionSettings(1 << 20, 0), budget) as s:
        s.gate.clear()
        reader, writer = await asyncio.open_connection("127.0.0.1", s.port)
        writer.write(b"".join(frame(0, i) for i in range(PRODUCE_PIPELINE_DEPTH + 2)))
        assert await asyncio.wait_for(reader.read(), 5) == b""
        writer.close()
        await eventually(lambda: budget.requests == 0 and budget.bytes == 0)
        writer.close()


def test_connection_quota_overrides() -> None:
    """``max.connections.per.ip.overrides``: an address's own limit, 0 refusing it outright."""
    quotas = ConnectionQuotas(max_connections=100, max_per_ip=1, overrides={"10.0.0.1": 3, "10.0.0.9": 0})
    assert [quotas.admit("10.0.0.1") for _ in range(3)] == [None, None, None]
    assert "max.connections.per.ip is 3" in (quotas.admit("10.0.0.1") or "")
    assert "max.connections.per.ip is 0" in (quotas.admit("10.0.0.9") or "")
    assert quotas.admit("10.0.0.2") is None
    assert quotas.admit("10.0.0.2") is not None


def test_connection_overrides_config_value() -> None:
    assert connection_overrides("127.0.0.1:200, 10.0.0.7:0,") == {"127.0.0.1": 200, "10.0.0.7": 0}
    assert connection_overrides("") == {}
    assert connection_overrides("::1:5") == {"::1": 5}  # the count is after the last colon
