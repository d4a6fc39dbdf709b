"""What the controller writes when the broker registry and the metadata image disagree.

Brokers write their own registry rows (registration, heartbeats); the active controller turns
them into metadata records every broker's image applies: a new incarnation or endpoint is
registered, a broker whose heartbeat is older than ``broker.session.timeout.ms`` (or that shut
down and left the registry) is fenced, one that heartbeats again is unfenced. As in KRaft, a
fenced broker stays in the image (its replicas still name it) but clients are not sent to it.
"""

from __future__ import annotations

from collections.abc import Sequence

from shoal.metadata.image import MetadataImage
from shoal.metadata.log import BrokerRegistration
from shoal.metadata.records import (
    FenceBrokerRecord,
    MetadataRecord,
    RegisterBrokerRecord,
    UnfenceBrokerRecord,
)


def fencing_changes(
    image: MetadataImage, registrations: Sequence[BrokerRegistration], session_timeout_ms: int
) -> list[MetadataRecord]:
    """The records that bring ``image`` in line with the registry (empty when it already is)."""
    changes: list[MetadataRecord] = []
    registered = {r.node_id: r for r in registrations}
    for r in registrations:
        alive = r.heartbeat_age_ms < session_timeout_ms
        known = image.brokers.get(r.node_id)
        if known is None or known.incarnation_id != r.incarnation_id or (
            (known.host, known.port, known.rack) != (r.host, r.port, r.rack)
        ):
            changes.append(RegisterBrokerRecord(r.node_id, r.host, r.port, r.rack, r.incarnation_id, not alive))
        elif alive and known.fenced:
            changes.append(UnfenceBrokerRecord(r.node_id))
        elif not alive and not known.fenced:
            changes.append(FenceBrokerRecord(r.node_id))
    for node_id, known in image.brokers.items():
        if node_id not in registered and not known.fenced:
            changes.append(FenceBrokerRecord(node_id))
    return changes
