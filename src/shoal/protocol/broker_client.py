"""A broker's connection to another broker of its cluster: one request at a time, on the event
loop (a follower to its leader, a transaction coordinator to partition leaders).

Brokers of one cluster run the same Shoal, so the versions are fixed (Kafka's
``inter.broker.protocol``) rather than negotiated: Fetch v12 (topics by name, ``replica_id``),
OffsetForLeaderEpoch v4 and WriteTxnMarkers v2.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
from typing import Any

from shoal.aio import wait_for
from shoal.protocol.apis import decode_response, encode_request

FETCH_VERSION = 12
OFFSET_FOR_LEADER_EPOCH_VERSION = 4


class BrokerConnectionError(Exception):
    """The other broker could not be reached or answered nonsense: reconnect after a backoff."""


class BrokerClient:
    def __init__(self, host: str, port: int, client_id: str, timeout_s: float) -> None:
        self.address = (host, port)
        self._client_id = client_id
        self._timeout_s = timeout_s
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._correlation = 0

    async def request(self, request: Any, *, wait_s: float = 0.0) -> Any:
        """Send ``request`` and return the decoded answer; ``wait_s`` is how long the leader may
        park it (a fetch's max wait) on top of the socket timeout."""
        try:
            return await wait_for(self._round_trip(request), self._timeout_s + wait_s)
        except (TimeoutError, OSError, asyncio.IncompleteReadError, ValueError, struct.error) as exc:
            await self.close()
            raise BrokerConnectionError(f"{self.address[0]}:{self.address[1]}: {exc!r}") from None

    async def _round_trip(self, request: Any) -> Any:
        if self._writer is None:
            self._reader, self._writer = await asyncio.open_connection(*self.address, limit=1 << 20)
        assert self._reader is not None
        self._correlation += 1
        correlation_id = self._correlation
        self._writer.write(encode_request(correlation_id, self._client_id, request))
        await self._writer.drain()
        (size,) = struct.unpack(">i", await self._reader.readexactly(4))
        frame = await self._reader.readexactly(size)
        (got,) = struct.unpack_from(">i", frame, 0)
        if got != correlation_id:
            raise ValueError(f"correlation id {got}, expected {correlation_id}")
        return decode_response(int(request.__api_key__), int(request.__version__), frame)

    async def close(self) -> None:
        writer, self._writer, self._reader = self._writer, None, None
        if writer is not None:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
