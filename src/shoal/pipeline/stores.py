"""How the pipeline (driver and executors) opens Shoal's stores: through the store factory, from
a ``Config`` found the way every tool finds it. The ``Config`` is plain data, so it travels to
executors inside the read options and each task opens the stores itself.

Data source options: ``shoal.config`` (a broker's server.properties), ``shoal.data.dir`` (what
``shoal up --data-dir`` uses), ``shoal.metadata.path`` (older: the broker's metadata.log.dir or
its shoal.db), else ``./shoal-data`` when it exists; ``shoal.override.<config>`` sets one broker
config over them, and ``shoal.storage.url`` overrides the object storage the configuration names.
"""

from __future__ import annotations

from pathlib import Path

from shoal.config import Config, ConfigError
from shoal.coordinator.api import BatchCoordinator
from shoal.metadata.cache import MetadataCache
from shoal.metadata.image import MetadataImage
from shoal.pipeline.errors import OptionError
from shoal.store.factory import (
    StoreNotFoundError,
    open_batch_coordinator,
    open_metadata_store,
    open_remote_log_metadata_manager,
)
from shoal.store.locate import NoConfigError, metadata_dir_config, resolve_config
from shoal.tiered.api import RemoteLogMetadataManager

NO_STORES = (
    "No Shoal stores found: set shoal.config (the brokers' server.properties) or shoal.data.dir (the directory "
    "`shoal up --data-dir` uses), or run where `shoal up` keeps ./shoal-data, to read diskless topics from "
    "object storage; and/or set kafka.bootstrap.servers to read through the brokers"
)


def find_store_config(
    config_file: str | None = None, data_dir: str | None = None, metadata_path: str | None = None,
    *, overrides: list[str] | None = None, required: bool = True,
) -> Config | None:
    """The configuration naming the stores; None when none is found and ``required`` is false."""
    given = [v for v in (config_file, data_dir, metadata_path) if v]
    if len(given) > 1:
        raise OptionError("give one of shoal.config, shoal.data.dir, shoal.metadata.path, not several")
    try:
        if metadata_path:
            return metadata_dir_config(Path(metadata_path), overrides or [])
        return resolve_config(
            Path(config_file) if config_file else None, Path(data_dir) if data_dir else None, overrides or []
        )
    except NoConfigError:
        if required:
            raise OptionError(NO_STORES) from None
        return None
    except ConfigError as exc:
        raise OptionError(f"invalid Shoal configuration: {exc}") from None


def open_coordinator(config: Config) -> BatchCoordinator:
    """The Batch Coordinator of an existing store (never creates one)."""
    try:
        return open_batch_coordinator(config, must_exist=True)
    except StoreNotFoundError as exc:
        raise OptionError(str(exc)) from None


def open_remote_log_metadata(config: Config) -> RemoteLogMetadataManager:
    """Tiered storage's remote segment metadata of an existing store (never creates it): where
    offsets of diskless topics that moved to tiered storage are read from."""
    try:
        return open_remote_log_metadata_manager(config, must_exist=True)
    except StoreNotFoundError as exc:
        raise OptionError(str(exc)) from None


def load_image(config: Config) -> MetadataImage:
    """The current MetadataImage, replayed from the metadata log."""
    try:
        store = open_metadata_store(config, must_exist=True)
    except StoreNotFoundError as exc:
        raise OptionError(str(exc)) from None
    try:
        return MetadataCache(store).catch_up()
    finally:
        store.close()
