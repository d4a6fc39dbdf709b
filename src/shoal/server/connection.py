"""One client connection: read size-prefixed frames, handle them concurrently, answer in order.

Requests of one connection are handled concurrently (a producer pipelines many
Produce requests while the first waits for its WAL segment to commit: with a 250 ms
commit interval, answering one request at a time would cap a connection at four
requests a second), but they are started in arrival order and their responses are
written in arrival order, as the Kafka protocol requires. What one connection may
have in flight is bounded by count and by bytes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import struct
from collections.abc import Awaitable, Callable

from shoal.server.dispatch import CloseConnection

log = logging.getLogger(__name__)

MAX_INFLIGHT_REQUESTS = 4096
MAX_INFLIGHT_BYTES = 64 * 1024 * 1024
_SIZE = struct.Struct(">i")


async def serve_connection(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    handle: Callable[[memoryview, str], Awaitable[bytes | None]],
    max_request_bytes: int,
) -> None:
    peer = "{}:{}".format(*(writer.get_extra_info("peername") or ("?", "?"))[:2])
    pending: asyncio.Queue[tuple[asyncio.Task[bytes | None], int] | None] = asyncio.Queue(MAX_INFLIGHT_REQUESTS)
    budget = _ByteBudget()
    sender = asyncio.create_task(_send_responses(pending, writer, budget))
    try:
        while not sender.done():
            try:
                size = _SIZE.unpack(await reader.readexactly(4))[0]
            except (asyncio.IncompleteReadError, ConnectionError):
                break
            if size <= 0 or size > max_request_bytes:
                log.warning(
                    "closing connection from %s: request size %d is outside 1..%d (socket.request.max.bytes)",
                    peer, size, max_request_bytes,
                )
                break
            try:
                frame = await reader.readexactly(size)
            except (asyncio.IncompleteReadError, ConnectionError):
                break
            task = asyncio.ensure_future(handle(memoryview(frame), peer))
            await pending.put((task, size))
            await budget.take(size, sender)
    finally:
        if not sender.done():
            try:
                pending.put_nowait(None)
            except asyncio.QueueFull:
                sender.cancel()
        try:
            await sender
        except asyncio.CancelledError:
            sender.cancel()  # we are being cancelled (shutdown): stop answering
        except Exception:
            log.debug("response writer for %s ended with an error", peer, exc_info=True)
        writer.close()
        # A connection cancelled at shutdown has nothing left to wait for.
        with contextlib.suppress(Exception, asyncio.CancelledError):
            await writer.wait_closed()


class _ByteBudget:
    """Request bytes a connection has in flight; reading pauses while over the limit."""

    def __init__(self) -> None:
        self.used = 0
        self._freed = asyncio.Event()

    async def take(self, size: int, sender: asyncio.Task[None]) -> None:
        self.used += size
        while self.used > MAX_INFLIGHT_BYTES and not sender.done():
            self._freed.clear()
            await self._freed.wait()

    def give(self, size: int) -> None:
        self.used -= size
        self._freed.set()


async def _send_responses(
    pending: asyncio.Queue[tuple[asyncio.Task[bytes | None], int] | None],
    writer: asyncio.StreamWriter,
    budget: _ByteBudget,
) -> None:
    """Write each response when its turn comes; stop at the first request that closes the connection."""
    while True:
        item = await pending.get()
        if item is None:
            return
        task, size = item
        try:
            response = await task
        except CloseConnection:
            writer.transport.abort() if writer.transport else None
            _drain_cancel(pending)
            return
        if response is not None:
            try:
                writer.write(response)
                await writer.drain()
            except (ConnectionError, RuntimeError):  # RuntimeError: transport already closed
                _drain_cancel(pending)
                return
        budget.give(size)


def _drain_cancel(pending: asyncio.Queue[tuple[asyncio.Task[bytes | None], int] | None]) -> None:
    while not pending.empty():
        item = pending.get_nowait()
        if item is not None:
            item[0].cancel()
