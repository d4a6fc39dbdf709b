"""How every tool finds the configuration, and through it the stores, the way the broker does.

In this order: ``--config server.properties`` (plus ``--override key=value``), else
``--data-dir DIR`` (the layout ``shoal up --data-dir DIR`` makes), else ``./shoal-data`` when it
exists (``shoal up``'s default), else a ``NoConfigError`` naming those three ways.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from shoal.config import Config, ConfigError
from shoal.properties import parse_overrides, parse_properties

#: Where ``shoal up`` keeps everything by default, relative to where it runs.
DEFAULT_DATA_DIR = Path("shoal-data")

NO_CONFIG_MESSAGE = (
    "No Shoal configuration found: give --config server.properties (the broker's file), "
    "or --data-dir DIR (the directory `shoal up --data-dir DIR` uses), "
    "or run from the directory where `shoal up` runs (it keeps its state in ./shoal-data)."
)


class NoConfigError(Exception):
    """No way to find the configuration was given and ``./shoal-data`` does not exist."""


def embedded_config(data_dir: Path) -> dict[str, str]:
    """The raw configuration of ``shoal up``: one node, SQLite metadata and local objects under ``data_dir``."""
    data_dir = data_dir.resolve()
    return {
        "node.id": "1",
        "process.roles": "broker,controller",
        "listeners": "PLAINTEXT://127.0.0.1:9092",
        "log.dirs": str(data_dir / "logs"),
        "diskless.system.enable": "true",
        "diskless.storage.url": str(data_dir / "objects"),
    }


def metadata_dir_config(path: Path, overrides: Iterable[str] = ()) -> Config:
    """The configuration of a broker's ``metadata.log.dir`` given alone (the older ``--metadata-dir`` /
    ``--metadata-path`` spelling); ``path`` may also name the ``shoal.db`` file in it."""
    metadata_dir = (path.parent if path.suffix == ".db" else path).resolve()
    raw = {"metadata.log.dir": str(metadata_dir), "log.dirs": str(metadata_dir)}
    raw.update(parse_overrides(overrides))
    return Config.from_raw(raw)


def resolve_config(
    config_file: Path | None = None,
    data_dir: Path | None = None,
    overrides: Iterable[str] = (),
    *,
    cwd: Path | None = None,
) -> Config:
    """The tools' configuration; raises NoConfigError, or ConfigError for an unreadable one."""
    if config_file is not None:
        try:
            raw = parse_properties(config_file.read_text())
        except OSError as exc:
            raise ConfigError(f"Cannot read configuration {config_file}: {exc}") from None
    else:
        if data_dir is None:
            default = (cwd or Path.cwd()) / DEFAULT_DATA_DIR
            if not default.is_dir():
                raise NoConfigError(NO_CONFIG_MESSAGE)
            data_dir = default
        raw = embedded_config(data_dir)
    raw.update(parse_overrides(overrides))
    return Config.from_raw(raw)
