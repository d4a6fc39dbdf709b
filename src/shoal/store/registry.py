"""The rules of the broker registry and the controller lease that every backend shares: when a new
incarnation may take a node id over (Kafka's DUPLICATE_BROKER_REGISTRATION check), and when a
controller's write is stale."""

from __future__ import annotations

from shoal.metadata.log import DuplicateBrokerError, MetadataConflictError


def check_takeover(
    node_id: int,
    registered_incarnation: str,
    registered_host: str,
    registered_port: int,
    heartbeat_age_ms: int,
    host: str,
    port: int,
    session_timeout_ms: int,
) -> None:
    """Raise DuplicateBrokerError unless the registered incarnation is gone.

    It is gone when its session expired (no heartbeat for ``session_timeout_ms``, as Kafka's
    controller judges it) or when it was registered at the endpoint the new incarnation now holds
    bound: a broker restarted after a crash takes its node id back at once.
    """
    if heartbeat_age_ms >= session_timeout_ms or (registered_host, registered_port) == (host, port):
        return
    raise DuplicateBrokerError(
        f"node id {node_id} is already registered by a live broker at {registered_host}:{registered_port} "
        f"(incarnation {registered_incarnation}, last heartbeat {heartbeat_age_ms} ms ago); "
        "another broker is using this node.id"
    )


def check_lease_epoch(expected: int, current: int | None) -> None:
    """Refuse a controller's write made under a lease epoch that is no longer the current one."""
    if current != expected:
        raise MetadataConflictError(
            f"controller lease epoch {expected} is stale (the current epoch is {current}): write refused"
        )
