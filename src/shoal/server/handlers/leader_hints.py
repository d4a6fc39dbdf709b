"""KIP-951: a partition answered NOT_LEADER_OR_FOLLOWER names its current leader
(``CurrentLeader``) and the response carries that broker's endpoint (``NodeEndpoints``), so the
client redirects at once instead of waiting for a metadata refresh. Produce v10+ and Fetch v12+
(``NodeEndpoints`` from Fetch v16) have the fields; older versions drop them (``make``)."""

from __future__ import annotations

from typing import Any

from shoal.metadata.image import MetadataImage
from shoal.protocol.build import make, nested
from shoal.protocol.errors import ErrorCode


class LeaderHints:
    """Collects the leaders of the partitions a response refuses, for one response class."""

    def __init__(self, image: MetadataImage, response_cls: type) -> None:
        self._image = image
        self._leader_cls = nested(response_cls, "LeaderIdAndEpoch")
        self._endpoint_cls = nested(response_cls, "NodeEndpoint")
        self._nodes: dict[int, Any] = {}

    def current_leader(self, topic: str | None, partition: int, error: ErrorCode) -> dict[str, Any]:
        """``current_leader=...`` for a partition answer (empty when there is nothing to say)."""
        if error != ErrorCode.not_leader_or_follower or self._leader_cls is None or topic is None:
            return {}
        found = self._image.topic(topic)
        state = found.partitions.get(partition) if found is not None else None
        if state is None:
            return {}
        leader = self._image.brokers.get(state.leader)
        if leader is None or leader.fenced:
            return {}
        if self._endpoint_cls is not None:
            self._nodes[leader.node_id] = make(
                self._endpoint_cls, node_id=leader.node_id, host=leader.host, port=leader.port, rack=leader.rack
            )
        return {"current_leader": make(self._leader_cls, leader_id=leader.node_id, leader_epoch=state.leader_epoch)}

    def node_endpoints(self) -> tuple[Any, ...]:
        """The endpoints of the leaders named so far."""
        return tuple(self._nodes[n] for n in sorted(self._nodes))
