"""What ``shoal up --brokers N`` runs: each broker's server.properties, decided before anything starts.

Kept apart from the process supervision (``cluster_up``) and free of side effects, so the
rules that make N brokers on one host a cluster rather than N clashing nodes can be tested
alone: distinct ``node.id``s; consecutive ports from the first listener's; one ``log.dirs`` per
broker under ``<data-dir>/broker-<i>/``; the metadata store and object storage that the
single-node layout of ``shoal up`` uses, shared by all (so the tools' ``--data-dir`` still finds
them); racks round-robin; fixed metrics ports shifted like the listeners.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from shoal.config import Config, ConfigError
from shoal.store.factory import metadata_store_url, object_storage_url
from shoal.store.locate import embedded_config

#: Configs that differ per broker: an ``--override`` of one of these would make the brokers clash.
PER_BROKER = ("node.id", "log.dirs", "log.dir")
#: Listener lists whose ports are shifted by ``i - 1`` for broker ``i``.
LISTENER_KEYS = ("listeners", "advertised.listeners")
METRICS_PORT = "metrics.http.port"
#: What clients reach when a listener binds every interface (empty host).
LOOPBACK = "127.0.0.1"


class PlanError(ValueError):
    """The options cannot make a working cluster; the message says which and why."""


@dataclass(frozen=True, slots=True)
class BrokerPlan:
    """One broker: its id, its directory, where clients reach it, and its configuration."""

    node_id: int
    directory: Path
    address: str
    properties: dict[str, str]

    @property
    def name(self) -> str:
        return f"broker-{self.node_id}"

    @property
    def properties_path(self) -> Path:
        return self.directory / "server.properties"


@dataclass(frozen=True, slots=True)
class ClusterPlan:
    data_dir: Path
    brokers: tuple[BrokerPlan, ...]

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(b.address for b in self.brokers)


def parse_racks(text: str | None) -> list[str]:
    """``--racks a,b,c``: the racks to assign round-robin (none: brokers without a rack)."""
    if text is None:
        return []
    racks = [item.strip() for item in text.split(",")]
    if not all(racks):
        raise PlanError(f"--racks takes rack names separated by ',', got {text!r}")
    return racks


def rack_of(node_id: int, racks: Sequence[str]) -> str | None:
    """Broker ``node_id``'s rack: ``racks`` round-robin from broker 1."""
    return racks[(node_id - 1) % len(racks)] if racks else None


def plan_cluster(
    data_dir: Path, brokers: int, racks: Sequence[str] = (), overrides: Mapping[str, str] | None = None
) -> ClusterPlan:
    """The plan of ``brokers`` brokers (node ids 1..N) under ``data_dir``; raises PlanError.

    ``overrides`` (``--override``) apply to every broker; they may move the shared stores
    (``metadata.store.url``, ``diskless.storage.url``) or the first port (``listeners``), but
    not what must differ between brokers.
    """
    overrides = dict(overrides or {})
    if brokers < 1:
        raise PlanError(f"--brokers must be at least 1, got {brokers}")
    for key in PER_BROKER:
        if key in overrides and brokers > 1:
            raise PlanError(f"--override {key} cannot be used with --brokers {brokers}: each broker has its own")
    if racks and "broker.rack" in overrides:
        raise PlanError("--override broker.rack cannot be used with --racks")
    data_dir = data_dir.resolve()
    shared = {**embedded_config(data_dir), **overrides}
    try:
        config = Config.from_raw(shared)
    except ConfigError as exc:
        raise PlanError(str(exc)) from None
    # Spelled out, not left to defaults: each file must name the same stores when reused alone.
    shared["metadata.store.url"] = metadata_store_url(config)
    shared["diskless.storage.url"] = object_storage_url(config)
    shifted = {key: _listeners(config[key], key, brokers) for key in LISTENER_KEYS if config.is_set(key)}
    plans = []
    for node_id in range(1, brokers + 1):
        directory = data_dir / f"broker-{node_id}"
        own = {"node.id": str(node_id)}  # what differs between brokers comes first in the file
        rack = rack_of(node_id, racks)
        if rack is not None:
            own["broker.rack"] = rack
        for key, listeners in shifted.items():
            own[key] = ",".join(_shift(url, node_id - 1) for url in listeners)
        if not ({"log.dirs", "log.dir"} & overrides.keys()):  # only a single broker may be told
            own["log.dirs"] = str(directory / "logs")
        if config[METRICS_PORT] > 0:
            own[METRICS_PORT] = str(config[METRICS_PORT] + node_id - 1)
        props = {**own, **{k: v for k, v in shared.items() if k not in own}}
        published = (props.get("advertised.listeners") or props["listeners"]).split(",")[0]
        plans.append(BrokerPlan(node_id, directory, _address(published), props))
    if config[METRICS_PORT] > 0:
        _check_port(config[METRICS_PORT] + brokers - 1, METRICS_PORT, brokers)
    return ClusterPlan(data_dir, tuple(plans))


def properties_text(plan: BrokerPlan, brokers: int) -> str:
    """The broker's server.properties, with a header saying where it came from and how to reuse it."""
    lines = [
        f"# {plan.name} of `shoal up --brokers {brokers}`: Kafka's config names (docs/configuration.md).",
        f"# Run this broker alone with: shoal broker {plan.properties_path}",
    ]
    lines += [f"{key}={value}" for key, value in plan.properties.items()]
    return "\n".join(lines) + "\n"


def _listeners(urls: Sequence[str], key: str, brokers: int) -> list[str]:
    """Check that every listener's port leaves room for ``brokers`` consecutive ports."""
    for url in urls:
        port = _port(url, key)
        if port == 0 and brokers > 1:
            raise PlanError(f"{key} port 0 (any free port) cannot be used with --brokers {brokers}: give a port")
        _check_port(port + brokers - 1, key, brokers)
    return list(urls)


def _check_port(last: int, key: str, brokers: int) -> None:
    if last > 65535:
        raise PlanError(f"{key}: {brokers} brokers need ports up to {last}, past 65535")


def _port(url: str, key: str) -> int:
    try:
        port = urlsplit(url).port
    except ValueError:
        port = None
    if port is None:
        raise PlanError(f"{key}: listener {url!r} has no port (expected NAME://host:port)")
    return port


def _host(url: str) -> str:
    host = urlsplit(url).hostname or ""
    return f"[{host}]" if ":" in host else host


def _shift(url: str, offset: int) -> str:
    """The listener ``url`` with its port moved up by ``offset`` (its name kept as written)."""
    name = url.split("://", 1)[0]
    return f"{name}://{_host(url)}:{_port(url, 'listeners') + offset}"


def _address(url: str) -> str:
    """``host:port`` a client dials for the listener ``url`` (loopback when it binds every interface)."""
    return f"{_host(url) or LOOPBACK}:{_port(url, 'listeners')}"
