"""Where a broker's raw configuration comes from: Java ``.properties`` files and
``--override key=value`` arguments, read as Kafka's ``kafka-server-start.sh`` reads them.

What the keys mean, their types and defaults, is ``shoal.config``'s.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from shoal.config import ConfigError

__all__ = ["parse_overrides", "parse_properties"]

_PROPERTY_LINE = re.compile(r"^\s*([^=:\s]+)\s*[=:]\s*(.*?)\s*$")


def parse_properties(text: str) -> dict[str, str]:
    """Parse a Java ``.properties`` file (comments with # or !, key=value or key: value, \\ continuations)."""
    result: dict[str, str] = {}
    pending = ""
    for line in text.splitlines():
        stripped = line.strip()
        if not pending and (not stripped or stripped[0] in "#!"):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1]
            continue
        logical, pending = pending + stripped, ""
        match = _PROPERTY_LINE.match(logical)
        if not match:
            raise ConfigError(f"Cannot parse properties line: {line!r}")
        result[match.group(1)] = match.group(2)
    return result


def parse_overrides(overrides: Iterable[str]) -> dict[str, str]:
    """``--override key=value`` arguments, as kafka-server-start.sh takes them."""
    result: dict[str, str] = {}
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"--override expects key=value, got {item!r}")
        key, value = item.split("=", 1)
        result[key.strip()] = value.strip()
    return result
