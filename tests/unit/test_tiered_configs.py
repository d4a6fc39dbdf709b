"""Tiered storage's topic-config rules: Kafka's remote-storage checks at create and alter time,
and KIP-950's disablement rules as Kafka 3.9 ships them, with Kafka's messages."""

from __future__ import annotations

import pytest

from shoal.classic.log_config import LogConfig
from shoal.properties import ConfigError
from shoal.topic_configs import validate_tiering_change, validate_topic_configs

ON = {"remote.storage.enable": "true"}


def test_tiering_needs_the_broker_flag_and_a_delete_policy() -> None:
    with pytest.raises(ConfigError, match="Tiered Storage functionality is disabled in the broker"):
        validate_topic_configs(ON)
    assert validate_topic_configs(ON, remote_storage_system_enabled=True) == {"remote.storage.enable": "true"}
    with pytest.raises(ConfigError, match="unsupported for the compacted topics"):
        validate_topic_configs({**ON, "cleanup.policy": "compact"}, remote_storage_system_enabled=True)


def test_local_retention_may_not_exceed_total_retention() -> None:
    with pytest.raises(ConfigError, match="Value must not be more than retention.bytes property value: 1000"):
        validate_topic_configs({**ON, "retention.bytes": "1000", "local.retention.bytes": "2000"},
                               remote_storage_system_enabled=True)
    with pytest.raises(ConfigError, match="local.retention.ms"):
        validate_topic_configs({**ON, "retention.ms": "1000", "local.retention.ms": "-1"},
                               remote_storage_system_enabled=True)
    validate_topic_configs({**ON, "retention.bytes": "-1", "local.retention.bytes": "2000"},
                           remote_storage_system_enabled=True)


def test_kip_950_disablement_rules() -> None:
    with pytest.raises(ConfigError, match="It is invalid to disable remote storage without deleting remote data"):
        validate_tiering_change(ON, {"remote.storage.enable": "false"})
    validate_tiering_change(ON, {"remote.storage.enable": "false", "remote.log.delete.on.disable": "true"})
    with pytest.raises(ConfigError, match="`local.retention.bytes` and `retention.bytes` must be set to the identical"):
        validate_tiering_change(ON, {**ON, "remote.log.copy.disable": "true", "local.retention.bytes": "10"})
    validate_tiering_change(ON, {**ON, "remote.log.copy.disable": "true"})  # -2: the same as retention.*


def test_a_tiered_log_config_keeps_total_and_local_retention_apart() -> None:
    config = LogConfig.from_properties({"retention.bytes": 10_000, "retention.ms": 500,
                                        "local.retention.bytes": 1_000, "remote.storage.enable": "true"})
    assert (config.retention_bytes, config.total_retention_bytes) == (1_000, 10_000)
    assert (config.retention_ms, config.total_retention_ms) == (500, 500)
    assert LogConfig.from_properties(config.to_properties()) == config
