"""What ``shoal reassign-partitions`` reads and proposes, apart from any broker: its JSON files
(decoded and checked as Kafka's ReassignPartitionsCommand does, failing with Kafka's messages) and
the assignment --generate proposes (Kafka's AdminUtils round-robin, rack-aware when the brokers
have racks).

It also holds what the other reassign modules share (the two kinds of failure, replica names and
their order), so none of them needs another to say those.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from shoal.cli.kafka_client import Node, TopicPartition

ANY_LOG_DIR = "any"
EARLIEST_VERSION = 1
EARLIEST_TOPICS_JSON_VERSION = 1

# Kafka's --generate (and this tool) start the round-robin at random; tests pass a fixed start.
_random = random.Random()

Assignment = dict[TopicPartition, list[int]]
Replica = tuple[TopicPartition, int]  # Kafka's TopicPartitionReplica: a partition on one broker


class ReassignCommandError(Exception):
    """A failure Kafka's tool prints as ``Error: <message>`` (exit code 1)."""


class TerseError(Exception):
    """Kafka's TerseException: printed as it is, without ``Error: `` (exit code 1)."""


def replica_sort_key(replica: Replica) -> tuple[int, str, int]:
    """Kafka's compareTopicPartitionReplicas: broker, then topic, then partition."""
    tp, broker = replica
    return broker, tp.topic, tp.partition


def replica_name(replica: Replica) -> str:
    """Kafka's TopicPartitionReplica.toString: ``topic-partition-broker``."""
    tp, broker = replica
    return f"{tp.topic}-{tp.partition}-{broker}"


def plural_suffix(count: int) -> str:
    """The ``s`` Kafka's messages add unless there is exactly one."""
    return "" if count == 1 else "s"


# ------------------------------------------------------------------------------------ JSON files


def _jackson(value: Any) -> str:
    """A JSON value as Jackson's JsonNode.toString prints it in Kafka's messages (compact)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _object(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ReassignCommandError(f"Expected JSON object, received {_jackson(value)}")
    return value


def _array(value: Any) -> list[Any]:
    if not isinstance(value, list):
        raise ReassignCommandError(f"Expected JSON array, received {_jackson(value)}")
    return value


def _field(obj: Mapping[str, Any], name: str) -> Any:
    if name not in obj:
        raise ReassignCommandError(f"No such field exists: `{name}`")
    return obj[name]


def _int(value: Any) -> int:
    """Kafka's DecodeInteger: a JSON number that fits an int (not a string, a float or a boolean)."""
    if type(value) is not int or not -(2**31) <= value < 2**31:
        raise ReassignCommandError(f"Expected `Integer` value, received {_jackson(value)}")
    return value


def _str(value: Any) -> str:
    if not isinstance(value, str):
        raise ReassignCommandError(f"Expected `String` value, received {_jackson(value)}")
    return value


def _list_of(value: Any, decode: Callable[[Any], Any]) -> list[Any]:
    if not isinstance(value, list):
        raise ReassignCommandError(f"Expected `JSON array` value, received {_jackson(value)}")
    return [decode(v) for v in value]


def _java_list(items: Iterable[Any]) -> str:
    """A Java List's toString: ``[1, 2]``, ``[any, /dir]``."""
    return "[" + ", ".join(str(i) for i in items) + "]"


def _version(root: Mapping[str, Any], default: int) -> int:
    return _int(root["version"]) if "version" in root else default


def parse_topics_data(text: str) -> list[str]:
    """The --topics-to-move-json-file: ``{"topics": [{"topic": "foo"}, ...], "version": 1}``."""
    try:
        parsed = json.loads(text)
    except ValueError:
        raise ReassignCommandError("The input string is not a valid JSON") from None
    root = _object(parsed)
    version = _version(root, EARLIEST_TOPICS_JSON_VERSION)
    if version != 1:
        raise ReassignCommandError(f"Not supported version field value {version}")
    if "topics" not in root:
        return []
    return [_str(_field(_object(item), "topic")) for item in _array(root["topics"])]


def parse_partition_reassignment_data(text: str) -> tuple[list[tuple[TopicPartition, list[int]]], dict[Replica, str]]:
    """A --reassignment-json-file, without checking it further (--verify and --cancel read it so).

    Returns the partitions with their target replicas in file order (duplicates kept), and the
    log dir of each replica whose ``log_dirs`` entry is not ``any``.
    """
    if not text:
        raise ReassignCommandError("The input string shouldn't be empty")
    try:
        parsed = json.loads(text)
    except ValueError as exc:
        raise ReassignCommandError(f"The input string is not a valid JSON: {exc}") from None
    root = _object(parsed)
    version = _version(root, EARLIEST_VERSION)
    if version != 1:
        raise ReassignCommandError(f"Not supported version field value {version}")
    partitions: list[tuple[TopicPartition, list[int]]] = []
    log_dirs: dict[Replica, str] = {}
    if "partitions" not in root:
        return partitions, log_dirs
    for item in _array(root["partitions"]):
        fields = _object(item)
        topic = _str(_field(fields, "topic"))
        partition = _int(_field(fields, "partition"))
        replicas = _list_of(_field(fields, "replicas"), _int)
        dirs = _list_of(fields["log_dirs"], _str) if "log_dirs" in fields else [ANY_LOG_DIR] * len(replicas)
        tp = TopicPartition(topic, partition)
        if len(replicas) != len(dirs):
            raise ReassignCommandError(
                f"Size of replicas list {_java_list(replicas)} is different from size of log dirs list "
                f"{_java_list(dirs)} for partition {tp}"
            )
        partitions.append((tp, replicas))
        for broker, log_dir in zip(replicas, dirs, strict=True):
            if log_dir != ANY_LOG_DIR:
                log_dirs[(tp, broker)] = log_dir
    return partitions, log_dirs


def _duplicates(items: Iterable[Any]) -> list[Any]:
    seen: set[Any] = set()
    dups: dict[Any, None] = {}
    for item in items:
        if item in seen:
            dups[item] = None
        seen.add(item)
    return sorted(dups)


def parse_execute_assignment_args(text: str) -> tuple[Assignment, dict[Replica, str]]:
    """The --reassignment-json-file of --execute, with Kafka's checks (not empty, no duplicates)."""
    partitions, log_dirs = parse_partition_reassignment_data(text)
    if not partitions:
        raise ReassignCommandError("Partition reassignment list cannot be empty")
    if any(not replicas for _, replicas in partitions):
        raise ReassignCommandError("Partition replica list cannot be empty")
    duplicated = _duplicates(tp for tp, _ in partitions)
    if duplicated:
        raise ReassignCommandError(
            f"Partition reassignment contains duplicate topic partitions: {','.join(map(str, duplicated))}"
        )
    repeated = [(tp, _duplicates(replicas)) for tp, replicas in partitions]
    repeated = [(tp, dups) for tp, dups in repeated if dups]
    if repeated:
        detail = ". ".join(f"{tp} contains multiple entries for {','.join(map(str, dups))}" for tp, dups in repeated)
        raise ReassignCommandError(f"Partition replica lists may not contain duplicate entries: {detail}")
    return dict(partitions), log_dirs


def parse_broker_list(value: str) -> list[int]:
    """``--broker-list 1,2,3`` as Kafka's Integer.parseInt over String.split(",") reads it."""
    items = value.split(",")
    while items and items[-1] == "":  # Java's split drops trailing empty strings
        items.pop()
    out = []
    for item in items or [""]:
        text = item.strip()
        if not text or not text.lstrip("+-").isdigit() or not -(2**31) <= int(text) < 2**31:
            raise ReassignCommandError(f'For input string: "{item}"')
        out.append(int(text))
    return out


def parse_generate_assignment_args(text: str, broker_list: str) -> tuple[list[int], list[str]]:
    brokers = parse_broker_list(broker_list)
    dup_brokers = _duplicates(brokers)
    if dup_brokers:
        raise ReassignCommandError(f"Broker list contains duplicate entries: {_java_list(dup_brokers)}")
    topics = parse_topics_data(text)
    dup_topics = _duplicates(topics)
    if dup_topics:
        raise ReassignCommandError(f"List of topics to reassign contains duplicate entries: {_java_list(dup_topics)}")
    return brokers, topics


def format_as_reassignment_json(parts: Mapping[TopicPartition, Sequence[int]], log_dirs: Mapping[Replica, str] | None = None) -> str:
    """Kafka's reassignment JSON, compact as Jackson writes it, partitions sorted by topic and index."""
    dirs = log_dirs or {}
    doc = {
        "version": 1,
        "partitions": [
            {
                "topic": tp.topic,
                "partition": tp.partition,
                "replicas": list(parts[tp]),
                "log_dirs": [dirs.get((tp, r), ANY_LOG_DIR) for r in parts[tp]],
            }
            for tp in sorted(parts)
        ],
    }
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False)


# ------------------------------------------------------------------------ --generate's proposal


@dataclass(frozen=True, slots=True)
class BrokerMetadata:
    node_id: int
    rack: str | None


def _replica_index(first: int, second_shift: int, replica: int, n_brokers: int) -> int:
    shift = 1 + (second_shift + replica) % (n_brokers - 1)
    return (first + shift) % n_brokers


def rack_alternated_broker_list(racks: Mapping[int, str]) -> list[int]:
    """Kafka's getRackAlternatedBrokerList: brokers taken from each rack (sorted) in turn."""
    by_rack: dict[str, list[int]] = {}
    for broker, rack in racks.items():
        by_rack.setdefault(rack, []).append(broker)
    iterators = {rack: iter(sorted(brokers)) for rack, brokers in by_rack.items()}
    names = sorted(iterators)
    out: list[int] = []
    index = 0
    while len(out) < len(racks):
        nxt = next(iterators[names[index]], None)
        if nxt is not None:
            out.append(nxt)
        index = (index + 1) % len(names)
    return out


def assign_replicas_to_brokers(
    brokers: Sequence[BrokerMetadata],
    n_partitions: int,
    replication_factor: int,
    fixed_start_index: int = -1,
    rng: random.Random | None = None,
) -> dict[int, list[int]]:
    """Kafka's AdminUtils.assignReplicasToBrokers: round-robin from a start index, the followers
    shifted once every len(brokers) partitions; rack-aware when the brokers have racks."""
    if n_partitions <= 0:
        raise ReassignCommandError("Number of partitions must be larger than 0.")
    if replication_factor <= 0:
        raise ReassignCommandError("Replication factor must be larger than 0.")
    if replication_factor > len(brokers):
        raise ReassignCommandError(
            f"Replication factor: {replication_factor} larger than available brokers: {len(brokers)}."
        )
    rng = rng or _random
    if all(b.rack is None for b in brokers):
        order = [b.node_id for b in brokers]
        racks: dict[int, str] | None = None
    else:
        if any(b.rack is None for b in brokers):
            raise ReassignCommandError("Not all brokers have rack information for replica rack aware assignment.")
        racks = {b.node_id: b.rack for b in brokers if b.rack is not None}
        order = rack_alternated_broker_list(racks)
    n = len(order)
    start_index = fixed_start_index if fixed_start_index >= 0 else rng.randrange(n)
    shift = fixed_start_index if fixed_start_index >= 0 else rng.randrange(n)
    out: dict[int, list[int]] = {}
    for partition in range(n_partitions):
        if partition > 0 and partition % n == 0:
            shift += 1
        first = (partition + start_index) % n
        leader = order[first]
        replicas = [leader]
        if racks is None:
            replicas += [order[_replica_index(first, shift, j, n)] for j in range(replication_factor - 1)]
        else:
            n_racks = len(set(racks.values()))
            racks_used = {racks[leader]}
            k = 0
            for _ in range(replication_factor - 1):
                while True:
                    broker = order[_replica_index(first, shift * n_racks, k, n)]
                    rack = racks[broker]
                    k += 1
                    if (rack not in racks_used or len(racks_used) == n_racks) and (
                        broker not in replicas or len(replicas) == n
                    ):
                        replicas.append(broker)
                        racks_used.add(rack)
                        break
        out[partition] = replicas
    return out


def broker_metadata(nodes: Mapping[int, Node], brokers: Sequence[int], rack_aware: bool) -> list[BrokerMetadata]:
    """Kafka's getBrokerMetadata: the listed brokers the cluster has (others are left out)."""
    wanted = set(brokers)
    out = [
        BrokerMetadata(n.node_id, n.rack if rack_aware and n.rack else None)
        for n in sorted(nodes.values(), key=lambda n: n.node_id)
        if n.node_id in wanted
    ]
    rackless = sum(1 for b in out if b.rack is None)
    if rack_aware and rackless not in (0, len(out)):
        raise ReassignCommandError(
            "Not all brokers have rack information. Add --disable-rack-aware in command line to make "
            "replica assignment without rack information."
        )
    return out


def calculate_assignment(
    current: Mapping[TopicPartition, Sequence[int]], brokers: Sequence[BrokerMetadata], fixed_start_index: int = -1
) -> Assignment:
    """Each topic's partitions spread anew over the brokers, keeping its replication factor."""
    by_topic: dict[str, list[TopicPartition]] = {}
    for tp in sorted(current):
        by_topic.setdefault(tp.topic, []).append(tp)
    proposed: Assignment = {}
    for topic, parts in by_topic.items():
        replication_factor = len(current[parts[0]])
        assigned = assign_replicas_to_brokers(brokers, len(parts), replication_factor, fixed_start_index)
        for partition, replicas in assigned.items():
            proposed[TopicPartition(topic, partition)] = replicas
    return proposed
