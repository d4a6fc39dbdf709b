"""Where the transaction coordinator's markers go (Kafka's TransactionMarkerChannelManager).

Each marker goes to its partition's leader in the current metadata image (for a group's
``__consumer_offsets`` partition: the group coordinator that owns it). Markers for this broker
are written in process, through the same path as a WriteTxnMarkers request; the others are
sent as WriteTxnMarkers v2, one request per broker, over one connection per broker kept open.
A topic that no longer exists needs no marker (Kafka drops it); a partition without a leader or a
broker that cannot be reached is a retriable error the coordinator retries with newer metadata.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import Any

from kio.schema.write_txn_markers.v2 import request as wtm
from kio.static.primitive import i8, i16, i32

from shoal.cluster.placement import partition_owner
from shoal.metadata.image import MetadataImage
from shoal.partitions.api import TxnMarker
from shoal.partitions.manager import Partitions
from shoal.protocol.broker_client import BrokerClient, BrokerConnectionError
from shoal.protocol.errors import ErrorCode
from shoal.txn.markers import GROUP_METADATA_TOPIC, MarkerSend

log = logging.getLogger(__name__)

#: How long a partition leader may take to write a marker (it answers once the ISR has it).
MARKER_TIMEOUT_MS = 30_000


class TxnMarkerChannel:
    def __init__(
        self,
        node_id: int,
        image: Callable[[], MetadataImage],
        partitions: Partitions,
        offsets_partitions: int,
    ) -> None:
        self._node_id = node_id
        self._image = image
        self._partitions = partitions
        self._offsets_partitions = offsets_partitions
        self._clients: dict[int, BrokerClient] = {}
        self._client_locks: dict[int, asyncio.Lock] = {}

    def _destination(self, image: MetadataImage, send: MarkerSend) -> int | None:
        """The node that writes this marker; -1 when no marker is needed; None: no leader now."""
        if send.topic == GROUP_METADATA_TOPIC:
            return partition_owner(
                send.partition, list(image.brokers), [b.node_id for b in image.alive_brokers()]
            )
        topic = image.topic(send.topic)
        if topic is None or send.partition not in topic.partitions:
            return -1
        if topic.is_diskless:
            return self._node_id  # any broker commits a diskless partition's marker to the coordinator
        leader = topic.partitions[send.partition].leader
        return leader if leader >= 0 and leader in image.brokers else None

    async def send(self, sends: Sequence[MarkerSend]) -> list[ErrorCode]:
        image = self._image()
        errors: list[ErrorCode] = [ErrorCode.none] * len(sends)
        by_node: dict[int, list[int]] = {}
        for i, send in enumerate(sends):
            node = self._destination(image, send)
            if node is None:
                errors[i] = ErrorCode.not_leader_or_follower
            elif node >= 0:
                by_node.setdefault(node, []).append(i)

        async def to(node: int, indexes: list[int]) -> None:
            chosen = [sends[i] for i in indexes]
            if node == self._node_id:
                results = await self._write_here(chosen)
            else:
                results = await self._write_there(image, node, chosen)
            for i, error in zip(indexes, results, strict=True):
                errors[i] = error

        await asyncio.gather(*(to(node, indexes) for node, indexes in by_node.items()))
        return errors

    async def _write_here(self, sends: Sequence[MarkerSend]) -> list[ErrorCode]:
        writes = [(s.topic, s.partition, _marker(s)) for s in sends]
        return [o.error for o in await self._partitions.write_txn_markers(writes, MARKER_TIMEOUT_MS)]

    async def _write_there(self, image: MetadataImage, node: int, sends: Sequence[MarkerSend]) -> list[ErrorCode]:
        broker = image.brokers.get(node)
        if broker is None:
            return [ErrorCode.not_leader_or_follower] * len(sends)
        lock = self._client_locks.setdefault(node, asyncio.Lock())
        async with lock:  # one request at a time per connection
            client = self._clients.get(node)
            if client is None or client.address != (broker.host, broker.port):
                if client is not None:
                    await client.close()
                client = self._clients[node] = BrokerClient(
                    broker.host, broker.port, f"txn-coordinator-{self._node_id}", MARKER_TIMEOUT_MS / 1000 + 5
                )
            try:
                response = await client.request(_request(sends))
            except BrokerConnectionError as exc:
                log.info("markers to broker %d not sent: %s", node, exc)
                return [ErrorCode.request_timed_out] * len(sends)
        return _errors(response, sends)

    async def close(self) -> None:
        clients, self._clients = self._clients, {}
        for client in clients.values():
            await client.close()


def _marker(send: MarkerSend) -> TxnMarker:
    return TxnMarker(
        producer_id=send.producer_id,
        producer_epoch=send.producer_epoch,
        coordinator_epoch=send.coordinator_epoch,
        commit=send.commit,
        transaction_version=send.transaction_version,
    )


def _key(send: MarkerSend) -> tuple[int, int, bool, int, int]:
    return send.producer_id, send.producer_epoch, send.commit, send.coordinator_epoch, send.transaction_version


def _request(sends: Sequence[MarkerSend]) -> wtm.WriteTxnMarkersRequest:
    """One WritableTxnMarker per (producer, epoch, result) with its topics, in the sends' order."""
    grouped: dict[tuple[int, int, bool, int, int], dict[str, list[int]]] = {}
    for send in sends:
        grouped.setdefault(_key(send), {}).setdefault(send.topic, []).append(send.partition)
    return wtm.WriteTxnMarkersRequest(
        markers=tuple(
            wtm.WritableTxnMarker(
                producer_id=pid,  # type: ignore[arg-type]
                producer_epoch=i16(epoch),
                transaction_result=commit,
                topics=tuple(
                    wtm.WritableTxnMarkerTopic(name=topic, partition_indexes=tuple(i32(p) for p in parts))  # type: ignore[arg-type]
                    for topic, parts in topics.items()
                ),
                coordinator_epoch=i32(coordinator_epoch),
                transaction_version=i8(version),
            )
            for (pid, epoch, commit, coordinator_epoch, version), topics in grouped.items()
        )
    )


def _errors(response: Any, sends: Sequence[MarkerSend]) -> list[ErrorCode]:
    answered: dict[tuple[int, str, int], ErrorCode] = {}
    for marker in response.markers:
        for topic in marker.topics:
            for p in topic.partitions:
                answered[(int(marker.producer_id), topic.name, int(p.partition_index))] = ErrorCode(p.error_code)
    return [answered.get((s.producer_id, s.topic, s.partition), ErrorCode.request_timed_out) for s in sends]
