"""``shoal topics describe``'s reports (kafka-topics.sh's ``--under-replicated-partitions``,
``--unavailable-partitions``, ``--under-min-isr-partitions``, ``--at-min-isr-partitions``) and
``--exclude-internal``, over a Metadata answer built here: the pure selection and formatting in
topic_format, then the command itself with a fake admin (no broker)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import pytest
from typer.testing import CliRunner

from shoal.cli import topics as topics_cli
from shoal.cli.kafka_client import TopicPartition
from shoal.cli.main import app
from shoal.cli.topic_admin import ClusterTopics, ConfigEntry, PartitionMeta, TopicCommandError, TopicMeta
from shoal.cli.topic_format import (
    MIN_ISR_CONFIG,
    PartitionReports,
    describe_lines,
    is_at_min_isr,
    is_reported,
    is_unavailable,
    is_under_min_isr,
    is_under_replicated,
    min_insync_replicas,
    partition_line,
    reported_partitions,
)
from shoal.protocol.errors import ErrorCode

LIVE = frozenset({1, 2, 3})


def part(
    index: int, leader: int, replicas: Sequence[int], isr: Sequence[int], offline: Sequence[int] = ()
) -> PartitionMeta:
    return PartitionMeta(index, leader, tuple(replicas), tuple(isr), tuple(offline), ErrorCode.none)


def topic(name: str, *partitions: PartitionMeta, internal: bool = False) -> TopicMeta:
    return TopicMeta(name, None, ErrorCode.none, internal, tuple(partitions), False)


# A three-broker cluster (broker 4 is gone: a leader still named 4 is not live).
ORDERS = topic(
    "orders",
    part(0, 1, [1, 2, 3], [1, 2, 3]),  # healthy
    part(1, 2, [1, 2, 3], [2, 3], offline=[1]),  # under-replicated, ISR 2
    part(2, -1, [1, 2, 3], [], offline=[1, 2, 3]),  # no leader
    part(3, 4, [4, 2, 3], [4]),  # leader not live, ISR 1
)
EVENTS = topic("events", part(0, 1, [1], [1]), part(1, 3, [3], [3]))  # healthy, replication factor 1
OFFSETS = topic("__consumer_offsets", part(0, -1, [1], []), internal=True)
CLUSTER = ClusterTopics(LIVE, {t.name: t for t in (ORDERS, EVENTS, OFFSETS)})
MIN_ISR = {"orders": 2, "events": 1, "__consumer_offsets": 1}


def indexes(selected: dict[str, tuple[PartitionMeta, ...]]) -> dict[str, list[int]]:
    return {name: [p.partition for p in parts] for name, parts in selected.items()}


# ------------------------------------------------------------------------------- the predicates


def test_under_replicated_is_isr_smaller_than_replicas() -> None:
    assert not is_under_replicated(part(0, 1, [1, 2], [2, 1]))
    assert is_under_replicated(part(0, 1, [1, 2], [1]))
    assert is_under_replicated(part(0, -1, [1], []))


def test_unavailable_is_no_leader_or_a_leader_not_live() -> None:
    assert not is_unavailable(part(0, 2, [1, 2], [1, 2]), LIVE)
    assert is_unavailable(part(0, -1, [1, 2], [1, 2]), LIVE)
    assert is_unavailable(part(0, 4, [4], [4]), LIVE)
    assert is_unavailable(part(0, 1, [1], [1]), frozenset())


def test_min_isr_reports_compare_the_isr_count() -> None:
    two_of_three = part(0, 1, [1, 2, 3], [1, 2])
    assert not is_under_min_isr(two_of_three, LIVE, 2) and is_at_min_isr(two_of_three, 2)
    assert is_under_min_isr(two_of_three, LIVE, 3) and not is_at_min_isr(two_of_three, 3)
    assert not is_under_min_isr(two_of_three, LIVE, 1) and not is_at_min_isr(two_of_three, 1)


def test_a_partition_without_leader_is_under_min_isr_whatever_its_isr() -> None:
    """Kafka's isUnderMinIsr: ``!hasLeader() || isr.size() < minIsr``."""
    assert is_under_min_isr(part(0, -1, [1, 2], [1, 2]), LIVE, 1)
    assert is_under_min_isr(part(0, 4, [4, 2], [4, 2]), LIVE, 1)
    assert is_at_min_isr(part(0, -1, [1, 2], [1, 2]), 2)  # at-min-ISR looks at the count only


def test_min_insync_replicas_from_describe_configs() -> None:
    entries = [ConfigEntry("retention.ms", "1000", False), ConfigEntry(MIN_ISR_CONFIG, "2", False)]
    assert min_insync_replicas("t", entries) == 2
    assert min_insync_replicas("t", [ConfigEntry(MIN_ISR_CONFIG, "1", True)]) == 1
    with pytest.raises(TopicCommandError, match="did not give min.insync.replicas for topic 't'"):
        min_insync_replicas("t", [ConfigEntry("retention.ms", "1000", False)])
    with pytest.raises(TopicCommandError, match="invalid min.insync.replicas"):
        min_insync_replicas("t", [ConfigEntry(MIN_ISR_CONFIG, None, False)])


def test_no_report_prints_every_partition() -> None:
    assert not PartitionReports().any
    selected = reported_partitions(CLUSTER, ["events", "orders"], PartitionReports())
    assert indexes(selected) == {"events": [0, 1], "orders": [0, 1, 2, 3]}


# --------------------------------------------------------------------------------- the reports


@pytest.mark.parametrize(
    ("reports", "expected"),
    [
        (PartitionReports(under_replicated=True), {"events": [], "orders": [1, 2, 3]}),
        (PartitionReports(unavailable=True), {"events": [], "orders": [2, 3]}),
        (PartitionReports(under_min_isr=True), {"events": [], "orders": [2, 3]}),
        (PartitionReports(at_min_isr=True), {"events": [0, 1], "orders": [1]}),
        # Several reports: a partition any of them names (Kafka's shouldPrintTopicPartition).
        (PartitionReports(unavailable=True, at_min_isr=True), {"events": [0, 1], "orders": [1, 2, 3]}),
        (PartitionReports(True, True, True, True), {"events": [0, 1], "orders": [1, 2, 3]}),
    ],
)
def test_reports_select_partitions(reports: PartitionReports, expected: dict[str, list[int]]) -> None:
    assert reports.any
    assert indexes(reported_partitions(CLUSTER, ["events", "orders"], reports, MIN_ISR)) == expected


def test_min_isr_is_per_topic() -> None:
    selected = reported_partitions(CLUSTER, ["orders"], PartitionReports(at_min_isr=True), {"orders": 1})
    assert indexes(selected) == {"orders": [3]}
    selected = reported_partitions(CLUSTER, ["orders"], PartitionReports(under_min_isr=True), {"orders": 3})
    assert indexes(selected) == {"orders": [1, 2, 3]}


def test_min_isr_reports_need_min_isr() -> None:
    with pytest.raises(ValueError, match=r"min\.insync\.replicas"):
        is_reported(part(0, 1, [1], [1]), PartitionReports(under_min_isr=True), LIVE, None)
    # The other reports do not.
    assert is_reported(part(0, -1, [1], []), PartitionReports(unavailable=True), LIVE, None)


# ---------------------------------------------------------------------------------- the lines


def test_partition_line_is_kafkas_with_offline_and_offsets() -> None:
    assert partition_line("orders", ORDERS.partitions[0], (0, 7)) == (
        "\tTopic: orders\tPartition: 0\tLeader: 1\tReplicas: 1,2,3\tIsr: 1,2,3\tLogStartOffset: 0\tLogEndOffset: 7"
    )
    assert partition_line("orders", ORDERS.partitions[1], (None, None)) == (
        "\tTopic: orders\tPartition: 1\tLeader: 2\tReplicas: 1,2,3\tIsr: 2,3\tOffline: 1"
        "\tLogStartOffset: -\tLogEndOffset: -"
    )
    assert partition_line("orders", ORDERS.partitions[2], (None, None)).startswith(
        "\tTopic: orders\tPartition: 2\tLeader: none\tReplicas: 1,2,3\tIsr: \tOffline: 1,2,3\t"
    )


def test_describe_lines_with_a_report_have_no_topic_lines() -> None:
    selected = reported_partitions(CLUSTER, ["events", "orders"], PartitionReports(under_replicated=True))
    lines = describe_lines(CLUSTER, selected, {("orders", 1): (5, 9)}, None)
    assert lines == [
        "\tTopic: orders\tPartition: 1\tLeader: 2\tReplicas: 1,2,3\tIsr: 2,3\tOffline: 1"
        "\tLogStartOffset: 5\tLogEndOffset: 9",
        "\tTopic: orders\tPartition: 2\tLeader: none\tReplicas: 1,2,3\tIsr: \tOffline: 1,2,3"
        "\tLogStartOffset: -\tLogEndOffset: -",
        "\tTopic: orders\tPartition: 3\tLeader: 4\tReplicas: 4,2,3\tIsr: 4\tLogStartOffset: -\tLogEndOffset: -",
    ]


def test_describe_lines_without_report_have_topic_lines() -> None:
    selected = reported_partitions(CLUSTER, ["events"], PartitionReports())
    headers = {
        "events": ([ConfigEntry("retention.ms", "1000", False), ConfigEntry(MIN_ISR_CONFIG, "1", True)], True)
    }
    offsets = {TopicPartition("events", 0): (0, 3), TopicPartition("events", 1): (1, 1)}
    assert describe_lines(CLUSTER, selected, offsets, headers) == [
        "Topic: events\tPartitionCount: 2\tReplicationFactor: 1\tConfigs: retention.ms=1000\tKind: diskless",
        "\tTopic: events\tPartition: 0\tLeader: 1\tReplicas: 1\tIsr: 1\tLogStartOffset: 0\tLogEndOffset: 3",
        "\tTopic: events\tPartition: 1\tLeader: 3\tReplicas: 3\tIsr: 3\tLogStartOffset: 1\tLogEndOffset: 1",
    ]


# ------------------------------------------------------------------ the command, with a fake admin


class FakeAdmin:
    """TopicAdmin's reads over CLUSTER; records what it was asked."""

    calls: list[tuple[str, Any]]

    def __init__(self, client: object, timeout_ms: int) -> None:
        self.calls = FakeAdmin.calls

    def topics(self) -> ClusterTopics:
        self.calls.append(("topics", None))
        return CLUSTER

    def describe_configs(
        self, names: Sequence[str], keys: Sequence[str] | None = None
    ) -> dict[str, list[ConfigEntry]]:
        self.calls.append(("describe_configs", (list(names), keys)))
        out = {}
        for name in names:
            entries = [ConfigEntry(MIN_ISR_CONFIG, str(MIN_ISR[name]), name != "orders")]
            if keys is None:
                entries.append(ConfigEntry("diskless.enable", "false", True))
            out[name] = [e for e in entries if keys is None or e.name in keys]
        return out

    def log_offsets(self, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, tuple[int, int]]:
        self.calls.append(("log_offsets", list(partitions)))
        return {tp: (0, 10 * tp.partition) for tp in partitions}


@contextmanager
def _no_client(*args: object, **kwargs: object) -> Iterator[object]:
    yield object()


@pytest.fixture
def fake_admin(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, Any]]:
    FakeAdmin.calls = []
    monkeypatch.setattr(topics_cli, "KafkaClient", _no_client)
    monkeypatch.setattr(topics_cli, "TopicAdmin", FakeAdmin)
    return FakeAdmin.calls


def run_describe(*args: str) -> list[str]:
    result = CliRunner().invoke(app, ["topics", "describe", *args])
    assert result.exit_code == 0, result.output
    return result.stdout.splitlines()


def test_command_without_report_prints_topic_and_partition_lines(fake_admin: list[tuple[str, Any]]) -> None:
    lines = run_describe("--topic", "orders")
    assert (
        lines[0]
        == "Topic: orders\tPartitionCount: 4\tReplicationFactor: 3\tConfigs: min.insync.replicas=2\tKind: classic"
    )
    assert [line.split("\t")[2] for line in lines[1:]] == [f"Partition: {i}" for i in range(4)]
    assert ("describe_configs", (["orders"], None)) in fake_admin


def test_command_under_replicated(fake_admin: list[tuple[str, Any]]) -> None:
    lines = run_describe("--under-replicated-partitions", "--exclude-internal")
    assert [line.split("\t")[1:3] for line in lines] == [
        ["Topic: orders", "Partition: 1"],
        ["Topic: orders", "Partition: 2"],
        ["Topic: orders", "Partition: 3"],
    ]
    assert not any(line.startswith("Topic:") for line in lines)
    assert lines[0].endswith("\tOffline: 1\tLogStartOffset: 0\tLogEndOffset: 10")
    # Only the printed partitions that have a leader are asked for offsets; no DescribeConfigs is needed.
    assert ("log_offsets", [TopicPartition("orders", 1), TopicPartition("orders", 3)]) in fake_admin
    assert not [c for c in fake_admin if c[0] == "describe_configs"]


def test_command_unavailable_includes_internal_topics_unless_excluded(
    fake_admin: list[tuple[str, Any]],
) -> None:
    lines = run_describe("--unavailable-partitions")
    assert [line.split("\t")[1:3] for line in lines] == [
        ["Topic: __consumer_offsets", "Partition: 0"],
        ["Topic: orders", "Partition: 2"],
        ["Topic: orders", "Partition: 3"],
    ]
    lines = run_describe("--unavailable-partitions", "--exclude-internal")
    assert [line.split("\t")[1:3] for line in lines] == [
        ["Topic: orders", "Partition: 2"],
        ["Topic: orders", "Partition: 3"],
    ]


def test_command_min_isr_reports_read_min_insync_replicas(fake_admin: list[tuple[str, Any]]) -> None:
    lines = run_describe("--at-min-isr-partitions", "--exclude-internal")
    assert [line.split("\t")[1:3] for line in lines] == [
        ["Topic: events", "Partition: 0"],
        ["Topic: events", "Partition: 1"],
        ["Topic: orders", "Partition: 1"],
    ]
    assert ("describe_configs", (["events", "orders"], [MIN_ISR_CONFIG])) in fake_admin
    lines = run_describe("--under-min-isr-partitions", "--topic", "orders")
    assert [line.split("\t")[2] for line in lines] == ["Partition: 2", "Partition: 3"]


def test_command_reports_combine(fake_admin: list[tuple[str, Any]]) -> None:
    lines = run_describe("--topic", "events,orders", "--unavailable-partitions", "--at-min-isr-partitions")
    assert [line.split("\t")[1:3] for line in lines] == [
        ["Topic: events", "Partition: 0"],
        ["Topic: events", "Partition: 1"],
        ["Topic: orders", "Partition: 1"],
        ["Topic: orders", "Partition: 2"],
        ["Topic: orders", "Partition: 3"],
    ]


def test_command_report_with_nothing_to_report_prints_nothing(fake_admin: list[tuple[str, Any]]) -> None:
    assert run_describe("--topic", "events", "--under-replicated-partitions") == []
    assert run_describe("--topic", "events", "--unavailable-partitions") == []


def test_command_report_on_a_missing_topic_still_fails(fake_admin: list[tuple[str, Any]]) -> None:
    result = CliRunner().invoke(
        app, ["topics", "describe", "--topic", "nope", "--under-replicated-partitions"]
    )
    assert (result.exit_code, result.stdout) == (
        1,
        "Error while executing topic command : Topic 'nope' does not exist as expected\n",
    )
    assert run_describe("--topic", "nope", "--if-exists", "--under-replicated-partitions") == []


def test_topic_id_is_printed_on_the_topic_line(
    fake_admin: list[tuple[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    with_id = TopicMeta("events", uuid.UUID(int=1), ErrorCode.none, False, EVENTS.partitions, False)
    monkeypatch.setattr(FakeAdmin, "topics", lambda self: ClusterTopics(LIVE, {"events": with_id}))
    lines = run_describe("--topic", "events")
    assert lines[0].startswith("Topic: events\tTopicId: ") and "\tPartitionCount: 2\t" in lines[0]
