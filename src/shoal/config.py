"""The parsed broker configuration (``Config``) and the configuration reference.

Every config a user can set is declared once, with its documentation: broker configs in
``shoal.broker_configs``, topic configs in ``shoal.topic_configs``, both with
``shoal.config_def``'s ``ConfigDef``. The configuration reference in ``docs/configuration.md``
and DescribeConfigs come from the same tables (``python -m shoal.config`` prints the reference).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from shoal.broker_configs import BROKER_CONFIGS, DYNAMIC_BROKER_CONFIGS, RACK_AWARE_REPLICA_SELECTOR
from shoal.config_def import ConfigDef, ConfigError, ConfigType, format_value
from shoal.topic_configs import TOPIC_CONFIGS

__all__ = [
    "BROKER_CONFIGS",
    "DYNAMIC_BROKER_CONFIGS",
    "RACK_AWARE_REPLICA_SELECTOR",
    "TOPIC_CONFIGS",
    "Config",
    "ConfigDef",
    "ConfigError",
    "ConfigType",
    "format_value",
    "reference_markdown",
]


class Config:
    """Parsed broker configuration: Kafka names to typed values, defaults filled in."""

    def __init__(self, values: Mapping[str, Any], explicit: Iterable[str] = ()) -> None:
        self._values = dict(values)
        self._explicit = frozenset(explicit)

    @classmethod
    def from_raw(cls, raw: Mapping[str, str]) -> Config:
        """Validate raw string values; unknown keys are kept as strings (Kafka only warns)."""
        values: dict[str, Any] = {}
        for name, d in BROKER_CONFIGS.items():
            values[name] = d.parse(raw[name]) if name in raw else d.default
        for name, text in raw.items():
            if name not in BROKER_CONFIGS:
                values[name] = text
        return cls(values, raw.keys())

    def is_set(self, name: str) -> bool:
        """Whether the operator set this config (server.properties or --override)."""
        return name in self._explicit

    def __getitem__(self, name: str) -> Any:
        return self._values[name]

    def get(self, name: str, default: Any = None) -> Any:
        return self._values.get(name, default)

    def items(self) -> Iterable[tuple[str, Any]]:
        return self._values.items()

    @property
    def log_dirs(self) -> list[str]:
        return self["log.dirs"] or [self["log.dir"]]

    @property
    def metadata_dir(self) -> Path:
        return Path(self["metadata.log.dir"] or self.log_dirs[0])

    def topic_default(self, topic_config: str) -> Any:
        """The effective default of a topic config on this broker (via its broker synonym)."""
        d = TOPIC_CONFIGS[topic_config]
        return self[d.broker_synonym] if d.broker_synonym else d.default


def reference_markdown() -> str:
    """The configuration reference as Markdown tables (kept in docs/configuration.md)."""
    lines = ["## Broker configs", "", "| name | type | default | meaning |", "|---|---|---|---|"]
    for d in BROKER_CONFIGS.values():
        lines.append(f"| `{d.name}` | {d.type.value} | {_fmt_default(d.default)} | {d.doc} |")
    lines += ["", "## Topic configs", "", "| name | type | default | meaning |", "|---|---|---|---|"]
    for d in TOPIC_CONFIGS.values():
        default = f"`{d.broker_synonym}`" if d.broker_synonym else _fmt_default(d.default)
        lines.append(f"| `{d.name}` | {d.type.value} | {default} | {d.doc} |")
    return "\n".join(lines) + "\n"


def _fmt_default(value: Any) -> str:
    if value is None:
        return "(none)"
    text = format_value(value)
    return f"`{text}`" if text else '`""`'


if __name__ == "__main__":
    print(reference_markdown())
