"""FrameConnection: a socket read straight into request buffers, over real loopback sockets.

The reader must hand out exactly the bytes sent, however the sender splits them: small frames
many to one ``recv``, large frames (above the scratch buffer) in pieces, and a frame cut by the
peer closing must end in ``IncompleteReadError``. A connection nobody reads holds at most about
one scratch buffer and pauses its transport.
"""

from __future__ import annotations

import asyncio
import os
import random
import socket
import struct
from collections.abc import Callable

import pytest
import uvloop

from shoal.server import frames
from shoal.server.frames import SCRATCH_BYTES, FrameConnection, start_frame_server

#: Both loops: the broker runs on uvloop, whose transports call the protocol differently.
LOOPS = pytest.mark.parametrize("run", [asyncio.run, uvloop.run], ids=["asyncio", "uvloop"])


class Echo:
    """Reads size-prefixed frames and writes each back; ``reading`` gates the reads."""

    def __init__(self) -> None:
        self.frames: list[bytes] = []
        self.reading = asyncio.Event()
        self.reading.set()
        self.ended: BaseException | None = None
        self.conns: list[FrameConnection] = []
        self.done = asyncio.Event()

    async def serve(self, conn: FrameConnection) -> None:
        self.conns.append(conn)
        try:
            while True:
                await self.reading.wait()
                (size,) = struct.unpack(">i", await conn.readexactly(4))
                body = await conn.readexactly(size)
                self.frames.append(bytes(body))
                conn.write(struct.pack(">i", size) + bytes(body))
                await conn.drain()
        except (asyncio.IncompleteReadError, ConnectionError) as exc:
            self.ended = exc
        finally:
            conn.close()
            self.done.set()


async def started(echo: Echo) -> tuple[asyncio.Server, int]:
    server = await start_frame_server(echo.serve, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


def framed(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


async def read_frames(reader: asyncio.StreamReader, n: int) -> list[bytes]:
    out = []
    for _ in range(n):
        (size,) = struct.unpack(">i", await reader.readexactly(4))
        out.append(await reader.readexactly(size))
    return out


@LOOPS
@pytest.mark.parametrize("chunk", [1, 7, 4096, 1 << 20])
def test_frames_come_out_exactly_however_the_sender_splits_them(run: Callable[..., None], chunk: int) -> None:
    run(frames_come_out_exactly(chunk))


async def frames_come_out_exactly(chunk: int, sizes: list[int] | None = None) -> None:
    rng = random.Random(chunk)
    sizes = sizes or [1, 5, 100, SCRATCH_BYTES - 4, SCRATCH_BYTES, SCRATCH_BYTES + 1, 300_000]
    bodies = [os.urandom(n) for n in sizes] + [os.urandom(rng.choice(sizes)) for _ in range(6 if chunk > 1 else 0)]
    if chunk == 1:
        bodies = [b[:3000] for b in bodies]  # byte by byte: keep it short
    echo = Echo()
    server, port = await started(echo)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    stream = b"".join(framed(b) for b in bodies)
    for start in range(0, len(stream), chunk):
        writer.write(stream[start : start + chunk])
        if chunk < 64:
            await writer.drain()
            await asyncio.sleep(0)
    assert await asyncio.wait_for(read_frames(reader, len(bodies)), 30) == bodies
    assert echo.frames == bodies
    writer.close()
    await asyncio.wait_for(echo.done.wait(), 5)
    assert isinstance(echo.ended, asyncio.IncompleteReadError) and echo.ended.partial == b""
    server.close()


@LOOPS
@pytest.mark.parametrize("chunk", [4096, 1 << 20])
def test_frames_past_the_whole_frame_size_come_in_pieces_and_come_out_whole(
    run: Callable[..., None], chunk: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(frames, "WHOLE_FRAME_BYTES", 100_000)
    run(frames_come_out_exactly(chunk, sizes=[99_999, 100_000, 100_001, 350_000, 5]))


@LOOPS
@pytest.mark.parametrize("size", [100, 3 * SCRATCH_BYTES, 250_000])
def test_a_frame_cut_by_the_peer_ends_in_an_incomplete_read(
    run: Callable[..., None], size: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(frames, "WHOLE_FRAME_BYTES", 100_000)  # 250,000: cut in its second piece
    run(a_frame_cut_by_the_peer(size))


async def a_frame_cut_by_the_peer(size: int) -> None:
    echo = Echo()
    server, port = await started(echo)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(struct.pack(">i", size) + b"x" * (size // 2))
    await writer.drain()
    writer.close()
    await asyncio.wait_for(echo.done.wait(), 5)
    assert isinstance(echo.ended, asyncio.IncompleteReadError)
    if size <= frames.WHOLE_FRAME_BYTES:
        assert echo.ended.expected == size and echo.ended.partial == b"x" * (size // 2)
    server.close()


@LOOPS
def test_a_connection_nobody_reads_holds_one_scratch_buffer_and_then_everything_arrives(
    run: Callable[..., None],
) -> None:
    run(a_connection_nobody_reads())


async def a_connection_nobody_reads() -> None:
    echo = Echo()
    echo.reading.clear()
    server, port = await started(echo)
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setblocking(False)
    bodies = [os.urandom(10_000) for _ in range(3000)]  # 30 MB of small frames
    stream = memoryview(b"".join(framed(b) for b in bodies))
    loop = asyncio.get_running_loop()
    sent = 0
    # Send until the kernel's buffers and the connection's are full: the transport paused.
    deadline = loop.time() + 5
    while loop.time() < deadline and sent < len(stream):
        try:
            sent += sock.send(stream[sent : sent + 65536])
        except BlockingIOError:
            await asyncio.sleep(0.05)
            deadline = min(deadline, loop.time() + 0.3)
    (conn,) = echo.conns
    assert conn._read_paused
    assert conn._end - conn._start <= 2 * SCRATCH_BYTES
    echo.reading.set()
    received = bytearray()

    async def drain_answers() -> None:
        while len(received) < len(stream):
            try:
                data = sock.recv(1 << 20)
            except BlockingIOError:
                await asyncio.sleep(0.005)
                continue
            assert data
            received.extend(data)

    answers = asyncio.create_task(drain_answers())
    while sent < len(stream):
        try:
            sent += sock.send(stream[sent : sent + 65536])
        except BlockingIOError:
            await asyncio.sleep(0.005)
    await asyncio.wait_for(answers, 30)
    assert echo.frames == bodies and bytes(received) == bytes(stream)
    sock.close()
    server.close()
