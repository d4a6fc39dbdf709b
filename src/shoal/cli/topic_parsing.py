"""Reading ``shoal topics`` arguments as Kafka's TopicCommand does: the ``--topic`` include list,
``--config key=val`` and ``--replica-assignment``, with its error messages."""

from __future__ import annotations

import re
from collections.abc import Sequence

from shoal.cli.topic_admin import ClusterTopics, TopicCommandError


def include_list(pattern: str) -> re.Pattern[str]:
    """Kafka's IncludeList: ',' means '|', blanks and surrounding quotes dropped, whole-name match."""
    raw = pattern.strip().replace(",", "|").replace(" ", "")
    raw = re.sub(r"[\"']+$", "", re.sub(r"^[\"']+", "", raw))
    try:
        return re.compile(raw)
    except re.error as exc:
        raise TopicCommandError(f"Invalid topic regular expression '{pattern}': {exc}") from None


def select_topics(cluster: ClusterTopics, pattern: str | None, exclude_internal: bool = False) -> list[str]:
    """Kafka's getTopics: all topic names, sorted, filtered by the include list."""
    regex = include_list(pattern) if pattern is not None else None
    return [
        name
        for name in sorted(cluster.topics)
        if not (exclude_internal and cluster.topics[name].is_internal)
        and (regex is None or regex.fullmatch(name) is not None)
    ]


def ensure_topic_exists(found: Sequence[str], requested: str | None, required: bool) -> None:
    if requested is not None and required and not found:
        raise TopicCommandError(f"Topic '{requested}' does not exist as expected")


def parse_configs(values: Sequence[str]) -> dict[str, str]:
    """Kafka's parseTopicConfigsToBeAdded: each value is exactly ``key=val`` (blanks around '=' allowed)."""
    configs: dict[str, str] = {}
    for value in values:
        parts = re.split(r"\s*=\s*", value)
        if len(parts) != 2:
            raise TopicCommandError(
                'requirement failed: Invalid topic config: all configs to be added must be in the format "key=val".'
            )
        configs[parts[0].strip()] = parts[1].strip()
    return configs


def parse_replica_assignment(text: str) -> dict[int, list[int]]:
    """Kafka's parseReplicaAssignment: ``1:2,2:3`` is partition 0 on brokers 1,2 and partition 1 on 2,3."""
    assignment: dict[int, list[int]] = {}
    for index, part in enumerate(text.split(",")):
        try:
            brokers = [int(b.strip()) for b in part.split(":")]
        except ValueError:
            raise TopicCommandError(f'For input string: "{part}"') from None
        duplicates = sorted({b for b in brokers if brokers.count(b) > 1})
        if duplicates:
            raise TopicCommandError(
                f"Partition replica lists may not contain duplicate entries: {','.join(map(str, duplicates))}"
            )
        assignment[index] = brokers
        if len(brokers) != len(assignment[0]):
            raise TopicCommandError(f"Partition {index} has different replication factor: {brokers}")
    return assignment
