"""Kafka's ``ConfigDef`` in small: config types, parsing and validators, with Kafka's messages.

Broker configs (``shoal.config``) and topic configs (``shoal.topic_configs``) are both declared
with ``ConfigDef``. Parsing follows Kafka's ``ConfigDef.parseType`` (Java's ``trim``, ``parseInt``,
``parseDouble`` and the comma split of LIST values), the validators follow ``ConfigDef.Range``,
``ValidString`` and ``ValidList``, and ``format_value`` prints a value as Kafka's
``ConfigDef.convertToString`` does in DescribeConfigs. A refused value raises ``ConfigError``
with the message Kafka would send.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from enum import Enum
from typing import Any

__all__ = [
    "ConfigDef",
    "ConfigError",
    "ConfigType",
    "Validator",
    "at_least",
    "between",
    "format_value",
    "invalid_value",
    "java_str",
    "one_of",
    "valid_list",
]


class ConfigType(Enum):
    BOOLEAN = "BOOLEAN"
    STRING = "STRING"
    INT = "INT"
    SHORT = "SHORT"
    LONG = "LONG"
    DOUBLE = "DOUBLE"
    LIST = "LIST"


class ConfigError(ValueError):
    """An invalid configuration; the message is the one Kafka would print."""


#: Checks a parsed value; raises ConfigError (with Kafka's whole message) when it is refused.
Validator = Callable[[str, Any], None]


@dataclass(frozen=True, slots=True)
class ConfigDef:
    name: str
    type: ConfigType
    default: Any
    doc: str
    validator: Validator | None = None
    # For topic configs: the broker config that supplies the default (Kafka's "synonym").
    broker_synonym: str | None = None
    # Kafka's ``defineInternal``: accepted and described when set, left out of listings otherwise.
    internal: bool = False
    # LIST values split as Kafka splits them, empty items kept (and refused by the validator, as
    # Kafka refuses them); when False, empty items are dropped (the broker's lenient reading).
    kafka_list: bool = False

    def parse(self, raw: Any) -> Any:
        """Convert a raw (usually string) value to this config's type and validate it, or raise ConfigError."""
        value = _convert(self, raw)
        if self.validator is not None and value is not None:
            self.validator(self.name, value)
        return value


def invalid_value(name: str, value: Any, message: str) -> ConfigError:
    """Kafka's ``ConfigException(name, value, message)``."""
    return ConfigError(f"Invalid value {java_str(value)} for configuration {name}: {message}")


# Java's String.trim() removes every char <= U+0020; its regex \s is ASCII whitespace only.
_JAVA_TRIM = "".join(chr(c) for c in range(0x21))
_COMMA_WITH_WHITESPACE = re.compile(r"[ \t\n\x0b\f\r]*,[ \t\n\x0b\f\r]*")
_JAVA_INTEGER = re.compile(r"[+-]?[0-9]+")
_JAVA_DOUBLE = re.compile(
    r"[+-]?(?:NaN|Infinity|(?:(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)[fFdD]?)"
)
_BITS = {ConfigType.INT: 31, ConfigType.SHORT: 15, ConfigType.LONG: 63}


def _convert(d: ConfigDef, raw: Any) -> Any:
    """Kafka's ``ConfigDef.parseType`` for the values a request or a properties file carries."""
    if raw is None:
        return None
    trimmed = raw.strip(_JAVA_TRIM) if isinstance(raw, str) else raw
    if d.type is ConfigType.BOOLEAN:
        if isinstance(raw, bool):
            return raw
        if isinstance(raw, str) and trimmed.lower() in ("true", "false"):
            return trimmed.lower() == "true"
        raise invalid_value(d.name, raw, "Expected value to be either true or false")
    if d.type in _BITS:
        if isinstance(raw, int) and not isinstance(raw, bool):
            value = raw
        elif isinstance(raw, str) and _JAVA_INTEGER.fullmatch(trimmed):
            value = int(trimmed)
        else:
            raise invalid_value(d.name, raw, f"Not a number of type {d.type.value}")
        bits = _BITS[d.type]
        if not -(2**bits) <= value < 2**bits:
            raise invalid_value(d.name, raw, f"Not a number of type {d.type.value}")
        return value
    if d.type is ConfigType.DOUBLE:
        if isinstance(raw, int | float) and not isinstance(raw, bool):
            return float(raw)
        if isinstance(raw, str) and _JAVA_DOUBLE.fullmatch(trimmed):
            return float(trimmed.rstrip("fFdD").replace("Infinity", "inf"))
        raise invalid_value(d.name, raw, "Not a number of type DOUBLE")
    if d.type is ConfigType.LIST:
        if isinstance(raw, list | tuple):
            return [str(x) for x in raw]
        if not trimmed:
            return []
        items = _COMMA_WITH_WHITESPACE.split(trimmed)
        return items if d.kafka_list else [item for item in items if item]
    return trimmed if isinstance(raw, str) else str(raw)


# ---------------------------------------------------------------------------------- validators


def at_least(minimum: int) -> Validator:
    """``ConfigDef.Range.atLeast``."""

    def check(name: str, value: Any) -> None:
        if value < minimum:
            raise invalid_value(name, value, f"Value must be at least {minimum}")

    return check


def between(minimum: int, maximum: int) -> Validator:
    """``ConfigDef.Range.between`` (NaN passes, as it does in Java's comparisons)."""

    def check(name: str, value: Any) -> None:
        if value < minimum:
            raise invalid_value(name, value, f"Value must be at least {minimum}")
        if value > maximum:
            raise invalid_value(name, value, f"Value must be no more than {maximum}")

    return check


def one_of(*choices: str) -> Validator:
    """``ConfigDef.ValidString.in`` (case-sensitive)."""

    def check(name: str, value: Any) -> None:
        if value not in choices:
            raise invalid_value(name, value, f"String must be one of: {', '.join(choices)}")

    return check


def valid_list(*choices: str, empty_ok: bool = True) -> Validator:
    """Kafka 4.x's ``ConfigDef.ValidList``: no empty list unless allowed, no duplicates, no empty
    item, and (with ``choices``) every item one of them."""

    def check(name: str, value: Any) -> None:
        if not value and not empty_ok:
            valid = f"[{', '.join(choices)}]" if choices else "any non-empty value"
            raise ConfigError(f"Configuration '{name}' must not be empty. Valid values include: {valid}")
        if len(set(value)) != len(value):
            raise ConfigError(f"Configuration '{name}' values must not be duplicated.")
        for item in value:
            if item == "":
                raise ConfigError(f"Configuration '{name}' values must not be empty.")
            if choices and item not in choices:
                raise invalid_value(name, item, f"String must be one of: {', '.join(choices)}")

    return check


# ---------------------------------------------------------------------------------- printing


def java_double(value: float) -> str:
    """Java's ``Double.toString``: ``0.5``, ``1.0``, ``1.0E-4``, ``1.5E7``, ``NaN``."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    if value == 0:
        return "-0.0" if math.copysign(1.0, value) < 0 else "0.0"
    if 1e-3 <= abs(value) < 1e7:
        text = repr(value)  # plain decimal notation in this range, shortest round-trip digits
        return text if "." in text else text + ".0"
    sign, digits, exponent = Decimal(repr(value)).normalize().as_tuple()
    assert isinstance(exponent, int)
    text = "".join(map(str, digits))
    return f"{'-' if sign else ''}{text[0]}.{text[1:] or '0'}E{exponent + len(text) - 1}"


def java_str(value: Any) -> str:
    """A value as Java's ``toString`` prints it in Kafka's messages (a list as ``[a, b]``)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return java_double(value)
    if isinstance(value, list | tuple):
        return f"[{', '.join(java_str(v) for v in value)}]"
    return str(value)


def format_value(value: Any) -> str:
    """A typed value as Kafka prints it in DescribeConfigs (``ConfigDef.convertToString``)."""
    if isinstance(value, list | tuple):
        return ",".join(java_str(v) for v in value)
    return java_str(value)
