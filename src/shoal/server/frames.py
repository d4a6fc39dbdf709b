"""A client connection's socket, read straight into the buffers the requests end up in.

asyncio's ``StreamReader`` copies every byte twice on its way in: the transport's read chunk is
appended to one growing ``bytearray`` (``feed_data``), and ``readexactly`` copies each frame back
out of it. At saturation that was 12-17 % of the broker's event-loop time, all of it on the one
thread that serves every connection. ``FrameConnection`` is a ``BufferedProtocol`` instead: the
transport ``recv_into``s the buffer it hands out, which is

- for a request body larger than ``SCRATCH_BYTES`` (produce batches): the request's own
  ``bytearray``, so its bytes are copied once, by the kernel, and the handlers get views of it
  (past ``WHOLE_FRAME_BYTES``, pieces joined at the end, so a size header alone reserves little);
- otherwise a small per-connection scratch buffer, from which short frames (metadata, fetch,
  heartbeats) are copied out; a pipelining client's several small requests come in one ``recv``.

Backpressure is the same as a stream's: while the connection does not read (it is muted, see
``connection``), at most one scratch buffer of its bytes is held and the transport is paused.
The write side is the transport's, with ``drain`` waiting while the transport's buffer is above
its high-water mark.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, cast

log = logging.getLogger(__name__)

#: Bytes of the per-connection scratch buffer; larger frames are read into their own buffer.
SCRATCH_BYTES = 64 * 1024
#: Frames up to this size get their whole buffer at once; larger ones are read in pieces this
#: large and joined (one copy), so the memory a connection takes follows what it really sent.
WHOLE_FRAME_BYTES = 8 * 1024 * 1024


class FrameConnection(asyncio.BufferedProtocol):
    """One accepted connection: ``readexactly`` for the reader, ``write``/``drain`` for answers."""

    def __init__(self, on_connected: Callable[[FrameConnection], Awaitable[None]]) -> None:
        self._on_connected = on_connected
        self.transport: asyncio.Transport | None = None
        self._scratch = bytearray(SCRATCH_BYTES)
        self._view = memoryview(self._scratch)
        #: Unread bytes are ``_scratch[_start:_end]``.
        self._start = 0
        self._end = 0
        #: A large frame being read straight into its own buffer: the buffer, and bytes in it so far.
        self._target: bytearray | None = None
        self._filled = 0
        self._waiter: asyncio.Future[None] | None = None
        self._wanted = 0
        self._eof = False
        self._lost: BaseException | None = None
        self._connection_lost = False
        self._read_paused = False
        self._write_paused = False
        self._drain_waiter: asyncio.Future[None] | None = None
        self._closed: asyncio.Future[None] | None = None
        self._task: asyncio.Task[None] | None = None
        #: Called when bytes arrive that nobody is waiting for (the reader may be muted).
        self.on_received: Callable[[], None] | None = None

    # ------------------------------------------------------------------ protocol callbacks

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's are not asyncio's classes
        loop = asyncio.get_running_loop()
        self._closed = loop.create_future()
        self._task = loop.create_task(self._on_connected(self))
        self._task.add_done_callback(_log_failure)

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._target is not None:
            return memoryview(self._target)[self._filled :]
        if self._end == len(self._scratch):
            if self._start > 0:
                self._compact()
            else:  # full, and the transport reads once more before its pause: make room
                grown = bytearray(2 * len(self._scratch))
                grown[: self._end] = self._view
                self._scratch, self._view = grown, memoryview(grown)
        return self._view[self._end :]

    def _compact(self) -> None:
        """Move the unread bytes to the front of the scratch buffer."""
        unread = self._end - self._start
        self._view[:unread] = bytes(self._view[self._start : self._end])
        self._start, self._end = 0, unread

    def buffer_updated(self, nbytes: int) -> None:
        if self._target is not None:
            self._filled += nbytes
            if self._filled == len(self._target):
                self._target = None  # complete: the next bytes are the next frame's
                self._wake()
            return
        self._end += nbytes
        if self._waiter is not None and self._end - self._start >= self._wanted:
            self._wake()
        elif self._waiter is None and self.on_received is not None:
            self.on_received()
        if self._end == len(self._scratch) and self._start == 0:
            self._pause_reading()  # full and nobody has taken anything: wait for a reader

    def eof_received(self) -> bool:
        self._eof = True
        self._wake()
        return True  # keep the transport open for answers already on their way

    def connection_lost(self, exc: Exception | None) -> None:
        self._connection_lost = True
        self._lost = exc
        self._eof = True
        self._wake()
        if self._drain_waiter is not None and not self._drain_waiter.done():
            self._drain_waiter.set_exception(ConnectionResetError("connection lost"))
            self._drain_waiter.exception()  # retrieved: its waiters may have been cancelled
        self._drain_waiter = None
        if self._closed is not None and not self._closed.done():
            self._closed.set_result(None)

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        if self._drain_waiter is not None and not self._drain_waiter.done():
            self._drain_waiter.set_result(None)
        self._drain_waiter = None

    # ------------------------------------------------------------------ reading

    def has_unread(self) -> bool:
        """Bytes of a next frame are here already: the client has sent it."""
        return self._end > self._start

    async def readexactly(self, n: int) -> bytes | bytearray:
        """The next ``n`` bytes; ``IncompleteReadError`` if the peer closed first,
        ``ConnectionError`` if the connection broke."""
        if self._waiter is not None:
            raise RuntimeError("readexactly() called while another read is waiting")
        unread = self._end - self._start
        if unread >= n:
            return self._take(n)
        if n > len(self._scratch):
            return await self._read_large(n)
        if self._start + n > len(self._scratch):
            self._compact()  # room at the tail for the rest (``get_buffer`` compacts only when full)
        self._wanted = n
        await self._wait()
        if self._end - self._start < n:
            raise self._ended(bytes(self._view[self._start : self._end]), n)
        return self._take(n)

    def _take(self, n: int) -> bytes:
        data = bytes(self._view[self._start : self._start + n])
        self._start += n
        if self._start == self._end:
            self._start = self._end = 0
        self._resume_reading()
        return data

    async def _read_large(self, n: int) -> bytes | bytearray:
        if n <= WHOLE_FRAME_BYTES:
            return await self._read_piece(n, n)
        # A frame past any produce request's size: memory follows the bytes that actually come
        # (pieces, joined at the end), so a 4-byte header claiming 100 MiB costs 100 MiB only
        # once 100 MiB were sent.
        pieces = []
        got = 0
        while got < n:
            piece = await self._read_piece(min(WHOLE_FRAME_BYTES, n - got), n, got)
            pieces.append(piece)
            got += len(piece)
        return b"".join(pieces)

    async def _read_piece(self, size: int, n: int, before: int = 0) -> bytearray:
        """The next ``size`` bytes of a frame of ``n`` (``before`` of them read already) in a buffer
        of their own, the scratch buffer's unread bytes first."""
        buf = bytearray(size)
        unread = min(self._end - self._start, size)
        buf[:unread] = self._view[self._start : self._start + unread]
        self._start += unread
        if self._start == self._end:
            self._start = self._end = 0
        self._filled = unread
        if unread < size:
            self._target = buf
            try:
                await self._wait()
            finally:
                self._target = None
        if self._filled < size:
            raise self._ended(bytes(buf[: self._filled]), n - before)
        return buf

    async def _wait(self) -> None:
        if self._eof:
            return
        self._waiter = asyncio.get_running_loop().create_future()
        self._resume_reading()
        try:
            await self._waiter
        finally:
            self._waiter = None

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def _ended(self, partial: bytes, n: int) -> Exception:
        if self._lost is not None:
            return ConnectionResetError(str(self._lost))
        return asyncio.IncompleteReadError(partial, n)

    def _pause_reading(self) -> None:
        if not self._read_paused and self.transport is not None and not self.transport.is_closing():
            self._read_paused = True
            self.transport.pause_reading()

    def _resume_reading(self) -> None:
        if self._read_paused and self.transport is not None and not self.transport.is_closing():
            self._read_paused = False
            self.transport.resume_reading()

    # ------------------------------------------------------------------ writing

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self.transport is None or self.transport.is_closing():
            raise ConnectionResetError("connection closed")
        self.transport.write(data)

    async def drain(self) -> None:
        """Wait while the transport holds more unsent bytes than its high-water mark."""
        if self._connection_lost:
            raise ConnectionResetError("connection lost")
        if not self._write_paused:
            return
        if self._drain_waiter is None:
            self._drain_waiter = asyncio.get_running_loop().create_future()
        await asyncio.shield(self._drain_waiter)

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self.transport.get_extra_info(name, default) if self.transport is not None else default

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    async def wait_closed(self) -> None:
        if self._closed is not None:
            await self._closed


def _log_failure(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("connection handler failed", exc_info=task.exception())


async def start_frame_server(
    on_connected: Callable[[FrameConnection], Awaitable[None]], host: str | None, port: int, **kwargs: Any
) -> asyncio.Server:
    """A TCP server whose every accepted connection runs ``on_connected`` as a task."""
    loop = asyncio.get_running_loop()
    return await loop.create_server(lambda: FrameConnection(on_connected), host, port, **kwargs)


__all__ = ["SCRATCH_BYTES", "WHOLE_FRAME_BYTES", "FrameConnection", "start_frame_server"]
