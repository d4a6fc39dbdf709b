"""One client connection: read size-prefixed frames, handle them concurrently, answer in order.

Requests of one connection are handled concurrently (a producer pipelines several
Produce requests while the first waits for its WAL segment to commit), but they are
started in arrival order and their responses are written in arrival order, as the
Kafka protocol requires.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import struct
from collections.abc import Awaitable, Callable

from shoal.server.dispatch import CloseConnection

log = logging.getLogger(__name__)

MAX_INFLIGHT_REQUESTS = 32
_SIZE = struct.Struct(">i")


async def serve_connection(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    handle: Callable[[memoryview, str], Awaitable[bytes | None]],
    max_request_bytes: int,
) -> None:
    peer = "{}:{}".format(*(writer.get_extra_info("peername") or ("?", "?"))[:2])
    pending: asyncio.Queue[asyncio.Task[bytes | None] | None] = asyncio.Queue(MAX_INFLIGHT_REQUESTS)
    sender = asyncio.create_task(_send_responses(pending, writer, peer))
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
            await pending.put(asyncio.ensure_future(handle(memoryview(frame), peer)))
    finally:
        await pending.put(None)
        with contextlib.suppress(Exception):
            await sender
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()


async def _send_responses(
    pending: asyncio.Queue[asyncio.Task[bytes | None] | None], writer: asyncio.StreamWriter, peer: str
) -> None:
    """Write each response when its turn comes; stop at the first request that closes the connection."""
    while True:
        task = await pending.get()
        if task is None:
            return
        try:
            response = await task
        except CloseConnection:
            writer.transport.abort() if writer.transport else None
            _drain_cancel(pending)
            return
        if response is not None:
            writer.write(response)
            try:
                await writer.drain()
            except ConnectionError:
                _drain_cancel(pending)
                return


def _drain_cancel(pending: asyncio.Queue[asyncio.Task[bytes | None] | None]) -> None:
    while not pending.empty():
        task = pending.get_nowait()
        if task is not None:
            task.cancel()
