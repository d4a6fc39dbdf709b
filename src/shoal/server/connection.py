"""One client connection: read size-prefixed frames, handle them, answer in order.

Kafka mutes a connection from the moment a request arrives until its response is sent, so
one client can never have more than one request in the broker. Shoal does the same for every
API but Produce: a producer may pipeline up to ``PRODUCE_PIPELINE_DEPTH`` Produce requests
(what an idempotent producer's ``max.in.flight.requests.per.connection`` allows), because a
diskless append waits for its WAL segment to commit, and answering one request per commit
interval would cap a connection at a few requests a second. Past that depth, Produce requests
the client has already sent (their bytes are here) are read too, up to ``PRODUCE_READ_AHEAD``
requests and while those in flight hold under ``PRODUCE_READ_AHEAD_BYTES`` (so a connection
holds at most that plus one request more than before):
a producer that keeps more in flight (librdkafka's default, with idempotence off, allows a
million) sends a request per partition every ``linger.ms``, and at five per WAL segment its
requests queued in the socket for seconds (5,000 records/s of 1 KiB on 6 partitions: p50 0.8 s,
p99 1.7 s, and the broker fell behind). Responses always go out in request order.

A connection is also muted while its unsent responses fill the socket: a client that stops
reading stops being served, and never makes the broker hold more than one more response for
it. Across the broker, ``RequestBudget`` bounds the requests (``queued.max.requests``) and
request bytes (``queued.max.request.bytes``) read but not yet answered.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import struct
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from shoal.protocol.produce_pipeline import PRODUCE_PIPELINE_DEPTH, current_pipeline
from shoal.server.dispatch import CloseConnection
from shoal.server.frames import FrameConnection
from shoal.server.limits import RequestBudget

log = logging.getLogger(__name__)

_PRODUCE_API_KEY = 0
#: Produce requests of one connection read and not answered, at most, when the client has sent
#: more than ``PRODUCE_PIPELINE_DEPTH`` (``queued.max.requests`` bounds them across connections).
PRODUCE_READ_AHEAD = 128
#: ... and while its Produce requests in flight hold fewer bytes than this (one WAL segment at
#: the default ``diskless.append.buffer.max.bytes``): read-ahead is for producers of many small
#: requests; five large ones already fill a segment.
PRODUCE_READ_AHEAD_BYTES = 4 * 1024 * 1024
_SIZE = struct.Struct(">i")
_API_KEY = struct.Struct(">h")

Handler = Callable[[memoryview, str], Awaitable[bytes | None]]


@dataclass(frozen=True, slots=True)
class ConnectionSettings:
    max_request_bytes: int  # socket.request.max.bytes
    idle_s: float  # connections.max.idle.ms; <= 0 never closes an idle connection


class _InFlight:
    """The requests of one connection read but not yet answered, oldest first."""

    def __init__(self) -> None:
        self.items: deque[tuple[asyncio.Task[bytes | None], int, bool]] = deque()
        self.changed = asyncio.Event()

    def is_full(self) -> bool:
        """As many Produce requests in flight as an idempotent producer may have: it can send no
        more until one is answered (``produce_pipeline``)."""
        return len(self.items) >= PRODUCE_PIPELINE_DEPTH and all(produce for _, _, produce in self.items)

    def may_read(self, received: bool) -> bool:
        """Whether another request may be read now: none in flight, or only pipelined produces
        (past the pipeline depth, only one the client has sent already: ``received``)."""
        n = len(self.items)
        if n == 0:
            return True
        if not all(produce for _, _, produce in self.items):
            return False
        if n < PRODUCE_PIPELINE_DEPTH:
            return True
        return (
            received
            and n < PRODUCE_READ_AHEAD
            and sum(size for _, size, _ in self.items) < PRODUCE_READ_AHEAD_BYTES
        )

    async def wait(self, ready: Callable[[], bool]) -> None:
        while not ready():
            self.changed.clear()
            await self.changed.wait()


async def serve_connection(
    conn: FrameConnection,
    handle: Handler,
    settings: ConnectionSettings,
    budget: RequestBudget,
) -> None:
    peer = "{}:{}".format(*(conn.get_extra_info("peername") or ("?", "?"))[:2])
    inflight = _InFlight()
    current_pipeline.set(inflight)  # every handler task below inherits it (diskless early closes)
    conn.on_received = inflight.changed.set  # a muted reader looks again: read-ahead may apply
    responses: asyncio.Queue[tuple[asyncio.Task[bytes | None], int] | None] = asyncio.Queue()
    last_active = [time.monotonic()]
    sender = asyncio.create_task(_send_responses(responses, conn, inflight, budget, last_active))
    # However the sender ends (a request that closes the connection, a client gone), the reader
    # may be waiting for room in the pipeline: wake it so it sees the end and cleans up.
    sender.add_done_callback(lambda _: inflight.changed.set())
    idle = asyncio.create_task(_close_when_idle(settings.idle_s, last_active, inflight, peer, conn))
    try:
        while not sender.done():
            # Muted while a request that may not be pipelined is in flight, or the client has not
            # read what we already sent (the transport's buffer stays full until it does).
            await inflight.wait(lambda: inflight.may_read(conn.has_unread()) or sender.done())
            if sender.done():
                break
            with contextlib.suppress(ConnectionError):
                await conn.drain()
            try:
                size = _SIZE.unpack(await conn.readexactly(4))[0]
            except (asyncio.IncompleteReadError, ConnectionError):
                break
            last_active[0] = time.monotonic()
            if size <= 0 or size > settings.max_request_bytes:
                log.info(
                    "closing connection from %s: request size %d is outside 1..%d (socket.request.max.bytes)",
                    peer, size, settings.max_request_bytes,
                )
                break
            await budget.acquire(size)
            try:
                frame = await conn.readexactly(size)
            except (asyncio.IncompleteReadError, ConnectionError):
                budget.release(size)
                break
            last_active[0] = time.monotonic()
            produce = size >= 2 and _API_KEY.unpack_from(frame)[0] == _PRODUCE_API_KEY
            if not produce:
                # Everything but Produce runs alone, as Kafka's muted channel makes it.
                await inflight.wait(lambda: not inflight.items or sender.done())
                if sender.done():
                    budget.release(size)
                    break
            # Read-only as a view of bytes was: some decoders (compression codecs) insist on it.
            task = asyncio.ensure_future(handle(memoryview(frame).toreadonly(), peer))
            inflight.items.append((task, size, produce))
            responses.put_nowait((task, size))
    finally:
        idle.cancel()
        if not sender.done():
            responses.put_nowait(None)
        try:
            await sender
        except asyncio.CancelledError:
            sender.cancel()  # we are being cancelled (shutdown): stop answering
        except Exception:
            log.debug("response writer for %s ended with an error", peer, exc_info=True)
        _cancel_unanswered(inflight, budget)
        conn.close()
        # A connection cancelled at shutdown has nothing left to wait for.
        with contextlib.suppress(Exception, asyncio.CancelledError):
            await conn.wait_closed()


async def _send_responses(
    responses: asyncio.Queue[tuple[asyncio.Task[bytes | None], int] | None],
    conn: FrameConnection,
    inflight: _InFlight,
    budget: RequestBudget,
    last_active: list[float],
) -> None:
    """Write each response when its turn comes; stop at the first request that closes the connection."""
    while True:
        item = await responses.get()
        if item is None:
            return
        task, size = item
        try:
            response = await task
        except CloseConnection:
            if conn.transport is not None:
                conn.transport.abort()
            return
        if response is not None:
            try:
                conn.write(response)
            except (ConnectionError, RuntimeError):  # RuntimeError: transport already closed
                return
            last_active[0] = time.monotonic()
        inflight.items.popleft()
        budget.release(size)
        inflight.changed.set()
        if conn.transport is not None and conn.transport.get_write_buffer_size() > 0:
            try:
                await conn.drain()  # the client is slow to read: wait before answering more
            except (ConnectionError, RuntimeError):
                return
            last_active[0] = time.monotonic()


def _cancel_unanswered(inflight: _InFlight, budget: RequestBudget) -> None:
    while inflight.items:
        task, size, _ = inflight.items.popleft()
        task.cancel()
        budget.release(size)


async def _close_when_idle(
    idle_s: float, last_active: list[float], inflight: _InFlight, peer: str, conn: FrameConnection
) -> None:
    """Close the connection after ``connections.max.idle.ms`` without a request or a response."""
    if idle_s <= 0:
        return
    while True:
        await asyncio.sleep(max(last_active[0] + idle_s - time.monotonic(), 0.05))
        if not inflight.items and time.monotonic() - last_active[0] >= idle_s:
            log.info("closing connection from %s: idle for more than %d ms (connections.max.idle.ms)",
                     peer, int(idle_s * 1000))
            if conn.transport is not None:
                conn.transport.abort()
            return
