"""``shoal log-dirs``: describe a broker's JBOD log directories, move a replica between them, and
reset one after its disk was fixed (KIP-112/KIP-113), shaped like Kafka's ``kafka-log-dirs.sh``.

``describe`` prints what Kafka's LogDirsCommand prints (two status lines, then one JSON document
with Kafka's keys and the exception class name of a failed dir, so scripts written for Kafka's
tool parse it), plus ``totalBytes``/``usableBytes`` of each dir (DescribeLogDirs v4, KIP-827).

``move`` sends AlterReplicaLogDirs, what ``kafka-reassign-partitions.sh`` does for the
``log_dirs`` of a reassignment, without a JSON file for the common one-partition case.

``reset`` is the step KIP-112 leaves to the operator: once a failed disk is fixed or replaced,
the broker must be told that the replicas it held are lost, otherwise it keeps them offline
(it never re-creates a replica silently, since its data may still be on the bad disk). Kafka
does it with ZooKeeper; Shoal has no controller state to edit, so the tool leaves
``RESET_MARKER`` in the directory while the broker is stopped and the broker acts on it at its
next start. Errors go to stderr with exit code 1, usage errors exit 2.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlsplit

import typer

from shoal.classic.replica_manager import RESET_MARKER
from shoal.cli.kafka_client import (
    DEFAULT_BOOTSTRAP,
    BrokerConnection,
    BrokerConnectionError,
    KafkaClient,
    KafkaClientError,
    Node,
    UnsupportedApiError,
    error_message,
    error_name,
    negotiate_version,
)
from shoal.cli.options import BootstrapOpt, TimeoutOpt
from shoal.cli.store_options import ConfigOpt, DataDirOpt, OverrideOpt, tool_config
from shoal.protocol.apis import request_class
from shoal.protocol.build import make, nested
from shoal.protocol.errors import ErrorCode

log_dirs_app = typer.Typer(
    help="Describe, move and reset log directories (like kafka-log-dirs.sh; KIP-112/KIP-113).",
    no_args_is_help=True,
)

CLIENT_ID = "log-dirs-tool"  # what Kafka's LogDirsCommand sets
DEFAULT_TIMEOUT_MS = 30_000  # Kafka's admin request.timeout.ms
_RETRY_BACKOFF_S = 0.1
_POLL_S = 0.2
_KAFKA_ERRORS_PACKAGE = "org.apache.kafka.common.errors."
# Exception classes whose names do not follow from the error code's (Kafka's Errors.java).
_EXCEPTION_NAMES = {
    ErrorCode.unknown_server_error: "UnknownServerException",
    ErrorCode.cluster_authorization_failed: "ClusterAuthorizationException",
    ErrorCode.topic_authorization_failed: "TopicAuthorizationException",
    ErrorCode.unknown_topic_or_partition: "UnknownTopicOrPartitionException",
    ErrorCode.request_timed_out: "TimeoutException",
}


class Api:
    """API keys this tool sends (Kafka's numbering)."""

    ALTER_REPLICA_LOG_DIRS = 34
    DESCRIBE_LOG_DIRS = 35


VERSIONS: dict[int, tuple[int, int]] = {
    Api.ALTER_REPLICA_LOG_DIRS: (1, 2),
    Api.DESCRIBE_LOG_DIRS: (1, 4),  # v4: TotalBytes/UsableBytes
}
KAFKA_API_NAMES = {Api.ALTER_REPLICA_LOG_DIRS: "ALTER_REPLICA_LOG_DIRS", Api.DESCRIBE_LOG_DIRS: "DESCRIBE_LOG_DIRS"}



class LogDirsCommandError(Exception):
    """A failure the tool reports on stderr (exit code 1), as Kafka's TerseException."""


# ------------------------------------------------------------------------------------ results


@dataclass(frozen=True, slots=True)
class ReplicaInfo:
    topic: str
    partition: int
    size: int
    offset_lag: int
    is_future: bool


@dataclass(frozen=True, slots=True)
class LogDirInfo:
    path: str
    error: ErrorCode
    total_bytes: int | None
    usable_bytes: int | None
    replicas: tuple[ReplicaInfo, ...]


def exception_name(code: ErrorCode) -> str:
    """The Java exception class Kafka's admin client raises for ``code`` (what its tool prints)."""
    name = _EXCEPTION_NAMES.get(code)
    if name is None:
        words = code.name.split("_")
        if words[-1] == "error":
            words = words[:-1]
        name = "".join(w.capitalize() for w in words) + "Exception"
    return _KAFKA_ERRORS_PACKAGE + name


def describe_json(described: Mapping[int, Sequence[LogDirInfo]], topics: set[str]) -> str:
    """Kafka's LogDirsCommand JSON (compact, as Jackson writes it) with the dirs' byte counts added."""
    doc = {
        "version": 1,
        "brokers": [
            {
                "broker": broker,
                "logDirs": [
                    {
                        "logDir": d.path,
                        "error": None if d.error == ErrorCode.none else exception_name(d.error),
                        "partitions": [
                            {
                                "partition": f"{r.topic}-{r.partition}",
                                "size": r.size,
                                "offsetLag": r.offset_lag,
                                "isFuture": r.is_future,
                            }
                            for r in d.replicas
                            if not topics or r.topic in topics
                        ],
                        "totalBytes": d.total_bytes,
                        "usableBytes": d.usable_bytes,
                    }
                    for d in dirs
                ],
            }
            for broker, dirs in sorted(described.items())
        ],
    }
    return json.dumps(doc, separators=(",", ":"))


# ------------------------------------------------------------------------------------- admin


def negotiate(conn: BrokerConnection, api_key: int) -> int:
    """The version to use for ``api_key`` with this broker (see kafka_client.negotiate_version)."""
    try:
        return negotiate_version(conn, api_key, VERSIONS[api_key], KAFKA_API_NAMES[api_key])
    except UnsupportedApiError as exc:
        raise LogDirsCommandError(str(exc)) from None


class LogDirsAdmin:
    """Log-dir requests to one broker at a time (each broker only knows its own dirs)."""

    def __init__(self, client: KafkaClient, timeout_ms: int) -> None:
        self.client = client
        self.timeout_ms = timeout_ms

    def brokers(self) -> dict[int, Node]:
        """Every broker of the cluster: each one is asked about its own dirs."""
        return self.client.metadata([]).brokers

    def _at(self, node: Node, api_key: int, request: Callable[[int, type], Any], *, retry: bool) -> Any:
        """One request to ``node``; reads retry broken connections until the deadline."""
        deadline = time.monotonic() + self.timeout_ms / 1000
        while True:
            try:
                conn = self.client.connection(node.host, node.port)
                version = negotiate(conn, api_key)
                return conn.request(api_key, version, request(version, request_class(api_key, version)))
            except BrokerConnectionError:
                if not retry or time.monotonic() + _RETRY_BACKOFF_S >= deadline:
                    raise
                time.sleep(_RETRY_BACKOFF_S)

    def describe(self, node: Node) -> list[LogDirInfo]:
        """DescribeLogDirs for every topic (as Kafka's admin client asks: topics null)."""
        response = self._at(node, Api.DESCRIBE_LOG_DIRS, lambda v, cls: make(cls, topics=None), retry=True)
        code = getattr(response, "error_code", ErrorCode.none)
        if code != ErrorCode.none:
            raise LogDirsCommandError(f"DescribeLogDirs on broker {node.node_id}: {error_name(code)}: {error_message(code)}")
        out = []
        for result in response.results:
            total = getattr(result, "total_bytes", -1)
            usable = getattr(result, "usable_bytes", -1)
            replicas = sorted(
                (
                    ReplicaInfo(t.name, int(p.partition_index), int(p.partition_size), int(p.offset_lag), bool(p.is_future_key))
                    for t in result.topics
                    for p in t.partitions
                ),
                key=lambda r: (r.topic, r.partition, r.is_future),
            )
            out.append(
                LogDirInfo(
                    result.log_dir,
                    ErrorCode(result.error_code),
                    None if total < 0 else int(total),
                    None if usable < 0 else int(usable),
                    tuple(replicas),
                )
            )
        return out

    def alter_replica_log_dir(self, node: Node, topic: str, partition: int, log_dir: str) -> ErrorCode:
        """AlterReplicaLogDirs for one replica; sent once (Kafka's admin does not retry it either)."""

        def build(version: int, cls: type) -> Any:
            dir_cls, topic_cls = nested(cls, "AlterReplicaLogDir"), nested(cls, "AlterReplicaLogDirTopic")
            wanted = make(topic_cls, name=topic, partitions=(partition,))
            return make(cls, dirs=(make(dir_cls, path=log_dir, topics=(wanted,)),))

        response = self._at(node, Api.ALTER_REPLICA_LOG_DIRS, build, retry=False)
        for t in response.results:
            for p in t.partitions:
                if t.topic_name == topic and int(p.partition_index) == partition:
                    return ErrorCode(p.error_code)
        raise LogDirsCommandError(f"AlterReplicaLogDirs on broker {node.node_id} did not answer for {topic}-{partition}")

    def leader(self, topic: str, partition: int) -> int:
        info = self.client.metadata([topic]).topics.get(topic)
        if info is None or info.error == ErrorCode.unknown_topic_or_partition or partition not in info.partitions:
            raise LogDirsCommandError(f"Topic partition {topic}-{partition} does not exist")
        return info.partitions[partition].leader


@contextmanager
def _admin(bootstrap: str, timeout_ms: int) -> Iterator[LogDirsAdmin]:
    """One admin for a command; failures end it on stderr with exit code 1."""
    try:
        with KafkaClient(bootstrap, client_id=CLIENT_ID, timeout=timeout_ms / 1000) as client:
            yield LogDirsAdmin(client, timeout_ms)
    except (LogDirsCommandError, KafkaClientError) as exc:
        sys.stdout.flush()
        typer.echo(f"ERROR: {exc}", err=True)
        raise typer.Exit(1) from None


def _fail(message: str) -> typer.Exit:
    typer.echo(f"ERROR: {message}", err=True)
    return typer.Exit(1)


def _usage(message: str) -> typer.Exit:
    typer.echo(f"Error: {message}", err=True)
    return typer.Exit(2)


def _split(value: str | None) -> list[str]:
    """Kafka's splitAtCommasAndFilterOutEmpty."""
    return [item.strip() for item in (value or "").split(",") if item.strip()]


# ---------------------------------------------------------------------------------- describe


@log_dirs_app.command("describe")
def describe(
    topic_list: Annotated[
        str | None,
        typer.Option("--topic-list", help='Topics to show, "t1,t2,t3" (default: all topics).'),
    ] = None,
    broker_list: Annotated[
        str | None, typer.Option("--broker-list", help='Brokers to query, "0,1,2" (default: all brokers).')
    ] = None,
    bootstrap_server: BootstrapOpt = DEFAULT_BOOTSTRAP,
    timeout: TimeoutOpt = DEFAULT_TIMEOUT_MS,
) -> None:
    """Describe each broker's log dirs (--describe): their errors, sizes and the replicas in them."""
    topics = set(_split(topic_list))
    try:
        wanted = {int(b) for b in _split(broker_list)}
    except ValueError:
        raise _usage(f"--broker-list takes broker ids separated by ',', got {broker_list!r}") from None
    with _admin(bootstrap_server, timeout) as admin:
        brokers = admin.brokers()
        missing = sorted(wanted - set(brokers))
        if missing:
            raise LogDirsCommandError(
                f"The given brokers do not exist from --broker-list: {','.join(map(str, missing))}. "
                f"Current existent brokers: {','.join(map(str, sorted(brokers)))}"
            )
        queried = sorted(wanted or brokers)
        typer.echo("Querying brokers for log directories information")
        described = {b: admin.describe(brokers[b]) for b in queried}
        typer.echo(f"Received log directory information from brokers {','.join(map(str, queried))}")
        typer.echo(describe_json(described, topics))


# -------------------------------------------------------------------------------------- move


def _replica_dirs(dirs: Sequence[LogDirInfo], topic: str, partition: int) -> list[tuple[str, bool]]:
    return [(d.path, r.is_future) for d in dirs for r in d.replicas if (r.topic, r.partition) == (topic, partition)]


@log_dirs_app.command("move")
def move(
    topic: Annotated[str, typer.Option("--topic", help="The topic of the replica to move.")],
    partition: Annotated[int, typer.Option("--partition", help="The partition of the replica to move.", min=0)],
    log_dir: Annotated[str, typer.Option("--dir", help="The destination: one of the broker's log.dirs (absolute).")],
    broker: Annotated[
        int | None, typer.Option("--broker", help="The broker holding the replica (default: the partition's leader).")
    ] = None,
    wait: Annotated[
        bool, typer.Option("--wait", help="Wait (up to --timeout) until the replica has moved.")
    ] = False,
    bootstrap_server: BootstrapOpt = DEFAULT_BOOTSTRAP,
    timeout: TimeoutOpt = DEFAULT_TIMEOUT_MS,
) -> None:
    """Move a replica to another log dir of its broker (AlterReplicaLogDirs, KIP-113).

    The broker copies the replica into a future replica in the destination while it keeps
    serving it, and swaps the two once the copy has caught up.
    """
    if not os.path.isabs(log_dir):
        raise _usage("--dir must be an absolute path, as the broker's log.dirs are")
    with _admin(bootstrap_server, timeout) as admin:
        brokers = admin.brokers()
        node_id = broker if broker is not None else admin.leader(topic, partition)
        node = brokers.get(node_id)
        if node is None:
            raise LogDirsCommandError(f"Broker {node_id} is not in the cluster (brokers: {sorted(brokers)})")
        code = admin.alter_replica_log_dir(node, topic, partition, log_dir)
        if code != ErrorCode.none:
            raise LogDirsCommandError(
                f"Moving {topic}-{partition} to {log_dir} on broker {node_id} failed: "
                f"{error_name(code)}: {error_message(code)}"
            )
        typer.echo(f"Moving {topic}-{partition} to {log_dir} on broker {node_id}.")
        if not wait:
            return
        deadline = time.monotonic() + timeout / 1000
        where: list[tuple[str, bool]] = []
        while time.monotonic() < deadline:
            where = _replica_dirs(admin.describe(node), topic, partition)
            if where == [(log_dir, False)] or (
                len(where) == 1 and not where[0][1] and os.path.realpath(where[0][0]) == os.path.realpath(log_dir)
            ):
                typer.echo(f"Moved {topic}-{partition} to {log_dir} on broker {node_id}.")
                return
            time.sleep(_POLL_S)
        raise LogDirsCommandError(
            f"{topic}-{partition} has not finished moving to {log_dir} after {timeout} ms: "
            f"replicas {', '.join(p + (' (future)' if f else '') for p, f in where) or 'none'}"
        )


# ------------------------------------------------------------------------------------- reset


def _listening(listeners: Sequence[str]) -> str | None:
    """The first address of ``listeners`` that accepts a TCP connection (the broker still runs)."""
    for listener in listeners:
        try:
            parts = urlsplit(listener)
            port = parts.port
        except ValueError:
            continue
        if port is None:
            continue
        host = parts.hostname or "127.0.0.1"
        if host in ("0.0.0.0", "::"):
            host = "127.0.0.1"
        try:
            with socket.create_connection((host, port), timeout=1.0):
                return f"{host}:{port}"
        except OSError:
            continue
    return None


def _write_marker(directory: Path, text: str) -> Path:
    """Write the marker durably (temp file, fsync, rename, fsync the dir), as the broker writes its files."""
    marker = directory / RESET_MARKER
    tmp = directory / f"{RESET_MARKER}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, text.encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, marker)
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    return marker


@log_dirs_app.command("reset")
def reset(
    log_dir: Annotated[str | None, typer.Option("--dir", help="The log dir that was fixed or replaced.")] = None,
    config: ConfigOpt = None,
    data_dir: DataDirOpt = None,
    override: OverrideOpt = None,
    log_dirs: Annotated[
        str | None, typer.Option("--log-dirs", help="The broker's log.dirs, comma separated (instead of --config).")
    ] = None,
) -> None:
    """Reset a log dir whose failed disk was fixed or replaced (KIP-112), with the broker stopped.

    It accepts the loss of the replicas the dir held: at its next start the broker re-creates them
    empty and serves the directory again. Until then it keeps them offline rather than silently
    serve empty replicas. The broker's log.dirs come from the stores' usual lookup (``--config``,
    ``--data-dir``, ``./shoal-data``) or from ``--log-dirs``.
    """
    listeners: list[str] = []
    if log_dirs is not None:
        if config is not None or data_dir is not None:
            raise _usage("give --log-dirs or --config/--data-dir, not both")
        configured = _split(log_dirs)
        if not configured:
            raise _usage("--log-dirs is empty")
    else:
        broker_config = tool_config(config, data_dir, None, override)
        configured = list(broker_config.log_dirs)
        listeners = list(broker_config["listeners"] or [])
    if log_dir is None:
        raise _usage(f"--dir is required: the log dir that was fixed or replaced (log.dirs: {','.join(configured)})")
    target = os.path.abspath(log_dir)
    matches = [
        d for d in configured if os.path.abspath(d) == target or os.path.realpath(d) == os.path.realpath(target)
    ]
    if not matches:
        raise _fail(f"{log_dir} is not one of the broker's log.dirs: {','.join(configured)}")
    running = _listening(listeners)
    if running is not None:
        raise _fail(
            f"The broker is still running (it accepts connections on {running}): stop it first; "
            "a log dir is reset when the broker starts"
        )
    path = Path(target)
    try:
        if not path.is_dir():
            raise _fail(
                f"{target} is not a directory: mount the fixed or new disk there (or create the directory) first"
            )
        if not os.access(path, os.R_OK | os.W_OK | os.X_OK):
            raise _fail(f"{target} is not a readable and writable directory")
        os.listdir(path)
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        marker = _write_marker(
            path,
            f"Reset requested with `shoal log-dirs reset` at {stamp}: the replicas that were in this log dir "
            "are accepted as lost and re-created empty at the next broker start.\n",
        )
    except OSError as exc:
        raise _fail(f"{target} is not usable: {exc}") from None
    typer.echo(f"Log dir {target} will be reset when the broker starts (marker {marker}).")
    typer.echo(
        "Start the broker now: it re-creates empty the partitions that were lost with this directory "
        "and serves the directory again."
    )
