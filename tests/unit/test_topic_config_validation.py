"""Topic configs: every one Kafka 4.x defines is accepted, validated as Kafka validates it, and
normalised as Kafka describes it; values asking for what Shoal does not do yet are refused."""

from __future__ import annotations

import pytest

from shoal.config import BROKER_CONFIGS, Config, reference_markdown
from shoal.config_def import ConfigError, format_value, java_double
from shoal.topic_configs import TOPIC_CONFIGS, validate_topic_configs
from tests.support.topic_configs import (
    INVALID,
    INVALID_TOGETHER,
    KAFKA_TOPIC_CONFIGS,
    REFUSED_BY_DESIGN,
    REFUSED_NON_DEFAULT,
    VALID_NON_DEFAULT,
)

DEFAULTS = Config.from_raw({})


def test_every_kafka_topic_config_is_known_with_kafkas_type_and_default() -> None:
    assert set(TOPIC_CONFIGS) == set(KAFKA_TOPIC_CONFIGS) | {"diskless.enable"}
    for name, (type_, default) in KAFKA_TOPIC_CONFIGS.items():
        d = TOPIC_CONFIGS[name]
        assert d.type.value == type_, name
        effective = DEFAULTS.topic_default(name)
        assert (None if effective is None else format_value(effective)) == default, name
    assert [n for n, d in TOPIC_CONFIGS.items() if d.internal] == ["internal.segment.bytes"]


def test_every_broker_synonym_is_a_broker_config_of_the_same_type() -> None:
    for name, d in TOPIC_CONFIGS.items():
        if d.broker_synonym is not None:
            assert BROKER_CONFIGS[d.broker_synonym].type is d.type, name


def test_every_config_but_the_refused_ones_has_a_valid_non_default_value() -> None:
    assert set(VALID_NON_DEFAULT) | REFUSED_NON_DEFAULT == set(KAFKA_TOPIC_CONFIGS)


@pytest.mark.parametrize("name", sorted(VALID_NON_DEFAULT))
def test_a_valid_non_default_value_is_accepted_and_normalised(name: str) -> None:
    sent, described = VALID_NON_DEFAULT[name]
    assert validate_topic_configs({name: sent}) == {name: described}
    default = DEFAULTS.topic_default(name)
    assert default is None or format_value(default) != described, f"{name}: not a non-default value"


def test_all_valid_values_together_and_the_order_given_is_kept() -> None:
    configs = {name: sent for name, (sent, _) in VALID_NON_DEFAULT.items()}
    result = validate_topic_configs(configs)
    assert result == {name: described for name, (_, described) in VALID_NON_DEFAULT.items()}
    assert list(result) == list(configs)


@pytest.mark.parametrize(("name", "value"), sorted(INVALID))
def test_an_invalid_value_is_refused_with_kafkas_message(name: str, value: str) -> None:
    with pytest.raises(ConfigError) as info:
        validate_topic_configs({name: value})
    assert str(info.value) == INVALID[(name, value)]


@pytest.mark.parametrize(("configs", "message"), INVALID_TOGETHER)
def test_kafkas_cross_config_rules(configs: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        validate_topic_configs(configs)
    assert str(info.value) == message


@pytest.mark.parametrize(("name", "value"), sorted(REFUSED_BY_DESIGN))
def test_a_value_shoal_does_not_do_yet_is_refused_saying_so(name: str, value: str) -> None:
    with pytest.raises(ConfigError) as info:
        validate_topic_configs({name: value})
    assert REFUSED_BY_DESIGN[(name, value)] in str(info.value)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("compression.type", "producer"),
        ("preallocate", "false"),
        ("remote.storage.enable", "FALSE"),
        ("cleanup.policy", "delete"),
        ("cleanup.policy", "compact"),
        ("cleanup.policy", "compact,delete"),
    ],
)
def test_the_default_of_a_refused_config_is_accepted(name: str, value: str) -> None:
    assert validate_topic_configs({name: value}) == {name: value.lower()}


def test_kafka_checks_before_shoals_refusals_and_in_kafkas_order() -> None:
    # An invalid value is reported before a value Shoal refuses, and configs are checked in
    # Kafka's definition order (segment.bytes before cleanup.policy), whatever the request's order.
    with pytest.raises(ConfigError, match="segment.bytes"):
        validate_topic_configs({"cleanup.policy": "compact", "segment.bytes": "1"})
    with pytest.raises(ConfigError, match="Unknown topic config name: nope"):
        validate_topic_configs({"segment.bytes": "1", "nope": "1"})
    with pytest.raises(ConfigError, match="value must not be null"):
        validate_topic_configs({"retention.ms": None})


def test_compaction_lags_compare_with_the_defaults() -> None:
    # min.compaction.lag.ms alone is compared with max.compaction.lag.ms' default (Long.MAX).
    assert validate_topic_configs({"min.compaction.lag.ms": str(2**62)}) == {
        "min.compaction.lag.ms": str(2**62)
    }
    assert validate_topic_configs({"min.compaction.lag.ms": "5", "max.compaction.lag.ms": "5"})
    with pytest.raises(ConfigError, match=r"conflict topic config setting min.compaction.lag.ms \(6\)"):
        validate_topic_configs({"min.compaction.lag.ms": "6", "max.compaction.lag.ms": "5"})


@pytest.mark.parametrize(
    ("value", "described"),
    [
        ("0", "0.0"),
        ("1", "1.0"),
        (".5", "0.5"),
        ("0.5d", "0.5"),
        ("1e-4", "1.0E-4"),
        ("0.001", "0.001"),
        ("1.0E-3", "0.001"),
        ("0.00012345", "1.2345E-4"),
        ("NaN", "NaN"),
    ],
)
def test_doubles_are_parsed_and_printed_as_java_does(value: str, described: str) -> None:
    assert validate_topic_configs({"min.cleanable.dirty.ratio": value}) == {
        "min.cleanable.dirty.ratio": described
    }


def test_java_double_printing() -> None:
    assert [java_double(x) for x in (1.5e7, 12345678.0, 1e7, 9999999.0, -0.0, float("inf"))] == [
        "1.5E7",
        "1.2345678E7",
        "1.0E7",
        "9999999.0",
        "-0.0",
        "Infinity",
    ]


@pytest.mark.parametrize(
    ("value", "described"),
    [("*", "*"), ("", ""), ("0:1,1:2", "0:1,1:2"), (" 0:1 ,\t1:2 ", "0:1,1:2"), ("0:1,", "0:1,")],
)
def test_throttled_replicas_accept_what_kafka_accepts(value: str, described: str) -> None:
    name = "leader.replication.throttled.replicas"
    assert validate_topic_configs({name: value}) == {name: described}


@pytest.mark.parametrize("value", ["0:1,,1:2", "*,", "0:2147483648", "a:b", "0:1:2", "*,*"])
def test_throttled_replicas_refuse_what_kafka_refuses(value: str) -> None:
    with pytest.raises(ConfigError, match="must be the literal"):
        validate_topic_configs({"follower.replication.throttled.replicas": value})


def test_cleanup_policy_lists_as_kafka_4() -> None:
    assert validate_topic_configs({"cleanup.policy": " delete "}) == {"cleanup.policy": "delete"}
    assert validate_topic_configs({"cleanup.policy": ""}) == {"cleanup.policy": ""}
    with pytest.raises(ConfigError, match="values must not be empty"):
        validate_topic_configs({"cleanup.policy": ",delete"})


def test_numbers_are_parsed_as_java_does() -> None:
    assert validate_topic_configs({"retention.ms": "+5", "segment.ms": " 10 "}) == {
        "retention.ms": "5",
        "segment.ms": "10",
    }
    for bad in ("1.0", "0x10", "", "1 000"):
        with pytest.raises(ConfigError, match="Not a number of type LONG"):
            validate_topic_configs({"retention.ms": bad})


def test_broker_synonyms_supply_the_topic_defaults() -> None:
    config = Config.from_raw(
        {
            "log.segment.bytes": "2097152",
            "log.segment.delete.delay.ms": "0",
            "log.index.size.max.bytes": "4096",
            "log.index.interval.bytes": "100",
            "log.flush.interval.messages": "7",
        }
    )
    assert [
        config.topic_default(n)
        for n in (
            "segment.bytes",
            "file.delete.delay.ms",
            "segment.index.bytes",
            "index.interval.bytes",
            "flush.messages",
        )
    ] == [2097152, 0, 4096, 100, 7]
    with pytest.raises(
        ConfigError,
        match="Invalid value 1024 for configuration log.segment.bytes: Value must be at least 1048576",
    ):
        Config.from_raw({"log.segment.bytes": "1024"})


def test_the_reference_page_lists_every_topic_config() -> None:
    page = reference_markdown()
    for name in TOPIC_CONFIGS:
        assert f"| `{name}` |" in page
