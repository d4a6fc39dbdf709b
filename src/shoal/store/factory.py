"""The one way to open the storage seams from a configuration.

Given a broker ``Config`` it returns the metadata store (the cluster metadata log, whose
ProducerIdsRecords are also the producer-id blocks, as in KRaft), the Batch Coordinator and the
group and offset store. The broker, every tool and the Spark pipeline open storage only here,
so none of them names a backend: today the embedded SQLite database in
``<metadata.log.dir>/shoal.db``; PostgreSQL joins here with the cluster.
"""

from __future__ import annotations

import contextlib
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from shoal.config import Config
from shoal.coordinator.api import BatchCoordinator
from shoal.metadata.log import MetadataStore
from shoal.store.groups import GroupStore
from shoal.store.sqlite.coordinator import SqliteBatchCoordinator
from shoal.store.sqlite.groups import SqliteGroupStore
from shoal.store.sqlite.metadata_log import SqliteMetadataStore

#: The embedded store's file name inside ``metadata.log.dir``.
SQLITE_FILE = "shoal.db"
#: The schema component of each seam in the embedded store (``schema_versions``).
_METADATA, _COORDINATOR, _GROUPS = "metadata", "diskless_coordinator", "group_coordinator"


class StoreNotFoundError(Exception):
    """A tool was pointed at a store that does not exist (nothing is created for it)."""


@dataclass
class Stores:
    """The storage seams of one configuration. ``close`` closes every one of them."""

    metadata: MetadataStore
    coordinator: BatchCoordinator
    groups: GroupStore
    location: str

    def close(self) -> None:
        for store in (self.groups, self.coordinator, self.metadata):
            with contextlib.suppress(Exception):
                store.close()


def store_location(config: Config) -> str:
    """Where the stores of this configuration live, for messages and logs."""
    return str(_sqlite_path(config))


def _sqlite_path(config: Config) -> Path:
    return config.metadata_dir / SQLITE_FILE


def object_storage_url(config: Config) -> str:
    """``diskless.storage.url``, defaulting to ``<metadata.log.dir>/diskless-objects``."""
    return config["diskless.storage.url"] or str((config.metadata_dir / "diskless-objects").resolve())


def check_exists(config: Config, components: tuple[str, ...] = (_METADATA, _COORDINATOR)) -> None:
    """Refuse a store that a broker has not created (or that lacks the tables of ``components``),
    before anything could create tables in it."""
    db = _sqlite_path(config)
    if not db.is_file():
        raise StoreNotFoundError(f"No metadata store at {db}: is {db.parent} the broker's metadata.log.dir?")
    try:
        conn = sqlite3.connect(f"{db.resolve().as_uri()}?mode=ro", uri=True)
        try:
            found = {row[0] for row in conn.execute("SELECT component FROM schema_versions")}
        finally:
            conn.close()
    except sqlite3.Error as exc:
        raise StoreNotFoundError(f"{db} is not a Shoal metadata store: {exc}") from None
    missing = [c for c in components if c not in found]
    if missing:
        raise StoreNotFoundError(f"{db} is not a Shoal metadata store (no {', '.join(missing)} tables)")


def open_metadata_store(config: Config, *, must_exist: bool = False) -> MetadataStore:
    if must_exist:
        check_exists(config, (_METADATA,))
    return SqliteMetadataStore(_sqlite_path(config))


def open_batch_coordinator(config: Config, *, must_exist: bool = False) -> BatchCoordinator:
    """The Batch Coordinator, wrapped in the fault injector when
    ``diskless.coordinator.fault.control.file`` is set (failure testing)."""
    if must_exist:
        check_exists(config, (_COORDINATOR,))
    coordinator: BatchCoordinator = SqliteBatchCoordinator(_sqlite_path(config))
    control = config["diskless.coordinator.fault.control.file"]
    if control:
        from shoal.coordinator.faulty import FaultyBatchCoordinator  # failure testing only

        coordinator = FaultyBatchCoordinator(coordinator, control_file=control)
    return coordinator


def open_group_store(config: Config, *, must_exist: bool = False) -> GroupStore:
    if must_exist:
        check_exists(config, (_GROUPS,))
    return SqliteGroupStore(_sqlite_path(config))


def open_stores(config: Config, *, must_exist: bool = False) -> Stores:
    """Every seam at once (blocking: the broker calls it from a worker thread)."""
    if must_exist:
        check_exists(config)
    metadata = open_metadata_store(config)
    try:
        coordinator = open_batch_coordinator(config)
        try:
            groups = open_group_store(config)
        except BaseException:
            coordinator.close()
            raise
    except BaseException:
        metadata.close()
        raise
    return Stores(metadata, coordinator, groups, store_location(config))
