"""Config parsing and the configuration reference page."""

from pathlib import Path

import pytest

from shoal.config import (
    Config,
    ConfigError,
    reference_markdown,
)
from shoal.properties import parse_overrides, parse_properties
from shoal.topic_configs import validate_topic_configs

DOCS = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"


def test_reference_page_is_in_sync_with_the_code() -> None:
    assert reference_markdown() in DOCS.read_text(), (
        "regenerate docs/configuration.md with python -m shoal.config"
    )


def test_properties_file_and_overrides() -> None:
    raw = parse_properties(
        "# comment\n! also\nnode.id=3\nlisteners = PLAINTEXT://127.0.0.1:9093\nlog.dirs: /a,\\\n  /b\n"
    )
    raw.update(parse_overrides(["broker.rack=az1"]))
    config = Config.from_raw(raw)
    assert config["node.id"] == 3
    assert config.log_dirs == ["/a", "/b"]
    assert str(config.metadata_dir) == "/a"
    assert config["broker.rack"] == "az1"
    assert config["diskless.append.commit.interval.ms"] == 250
    assert config["diskless.append.buffer.max.bytes"] == 4 * 1024 * 1024
    assert config.is_set("node.id") and not config.is_set("num.partitions")


def test_bad_broker_config_is_refused_with_kafkas_message() -> None:
    with pytest.raises(ConfigError, match="Invalid value abc for configuration num.partitions"):
        Config.from_raw({"num.partitions": "abc"})
    with pytest.raises(ConfigError):
        parse_overrides(["no-equals-sign"])


def test_topic_config_validation() -> None:
    assert validate_topic_configs({"diskless.enable": "TRUE", "retention.ms": "1000"}) == {
        "diskless.enable": "true",
        "retention.ms": "1000",
    }
    with pytest.raises(ConfigError, match="Unknown topic config name: nope"):
        validate_topic_configs({"nope": "1"})
    with pytest.raises(ConfigError, match="Not a number of type LONG"):
        validate_topic_configs({"retention.ms": "abc"})
    with pytest.raises(ConfigError, match="either true or false"):
        validate_topic_configs({"diskless.enable": "maybe"})
    with pytest.raises(ConfigError, match="CreateTime, LogAppendTime"):
        validate_topic_configs({"message.timestamp.type": "Whenever"})
