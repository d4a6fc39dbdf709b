"""The one way to open the storage seams from a configuration.

Given a broker ``Config`` it returns the metadata store (the cluster metadata log, whose
ProducerIdsRecords are also the producer-id blocks, as in KRaft), the Batch Coordinator, the
group and offset store, tiered storage's remote log metadata (``RemoteLogMetadataManager``) and
the transaction coordinator's state (what Kafka keeps in ``__transaction_state``), the last two
in the metadata store's database. The broker, every tool and the Spark pipeline open storage
only here, so none of them names a backend. A store is named by a URL: ``sqlite:///<path>`` (the embedded
default, ``<metadata.log.dir>/shoal.db``) or ``postgresql://user:password@host:port/db``;
``metadata.store.url`` names the metadata store and ``diskless.coordinator.url`` (default: the
same) the Batch Coordinator's.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit

import psycopg

from shoal.config import Config
from shoal.coordinator.api import BatchCoordinator, CoordinatorUnavailableError
from shoal.metadata.log import MetadataStore
from shoal.store.groups import GroupStore
from shoal.store.postgres.connection import is_postgres_url, redact
from shoal.store.sqlite.coordinator import SqliteBatchCoordinator
from shoal.store.sqlite.groups import SqliteGroupStore
from shoal.store.sqlite.metadata_log import SqliteMetadataStore
from shoal.store.sqlite.remote_log_metadata import SqliteRemoteLogMetadataManager
from shoal.store.sqlite.transactions import SqliteTransactionStore
from shoal.store.transactions import DEFAULT_TRANSACTION_STATE_PARTITIONS, TransactionStore
from shoal.tiered.api import RemoteLogMetadataManager

#: The embedded store's file name inside ``metadata.log.dir``.
SQLITE_FILE = "shoal.db"
#: The schema component of each seam in the embedded store (``schema_versions``).
_METADATA, _COORDINATOR, _GROUPS = "metadata", "diskless_coordinator", "group_coordinator"
_REMOTE_LOG_METADATA, _TRANSACTIONS = "remote_log_metadata", "transaction_coordinator"
#: Every component ``open_stores`` opens (and would otherwise create).
_ALL_COMPONENTS = (_METADATA, _COORDINATOR, _GROUPS, _REMOTE_LOG_METADATA, _TRANSACTIONS)
#: How many ``__transaction_state`` partitions transactional ids are filed under (Kafka's name).
TRANSACTION_STATE_PARTITIONS = "transaction.state.log.num.partitions"


class StoreNotFoundError(Exception):
    """A tool was pointed at a store that does not exist (nothing is created for it)."""


class StoreUnavailableError(Exception):
    """A store could not be reached when it was opened (the database server is down or refuses us)."""


@dataclass
class Stores:
    """The storage seams of one configuration. ``close`` closes every one of them."""

    metadata: MetadataStore
    coordinator: BatchCoordinator
    groups: GroupStore
    remote_log_metadata: RemoteLogMetadataManager
    transactions: TransactionStore
    location: str

    def close(self) -> None:
        seams = (self.transactions, self.remote_log_metadata, self.groups, self.coordinator, self.metadata)
        for store in seams:
            with contextlib.suppress(Exception):
                store.close()


def metadata_store_url(config: Config) -> str:
    """``metadata.store.url``, defaulting to the SQLite file in ``metadata.log.dir``."""
    return config["metadata.store.url"] or f"sqlite:///{_sqlite_path(config).resolve()}"


def coordinator_url(config: Config) -> str:
    """``diskless.coordinator.url``, defaulting to the metadata store."""
    return config["diskless.coordinator.url"] or metadata_store_url(config)


def store_location(config: Config) -> str:
    """Where the stores of this configuration live, for messages and logs (no password)."""
    metadata, coordinator = metadata_store_url(config), coordinator_url(config)
    where = _describe(metadata)
    return where if coordinator == metadata else f"{where} (Batch Coordinator: {_describe(coordinator)})"


def _describe(url: str) -> str:
    return redact(url) if is_postgres_url(url) else str(_sqlite_file(url))


def _sqlite_path(config: Config) -> Path:
    return config.metadata_dir / SQLITE_FILE


def _sqlite_file(url: str) -> Path:
    """The file of a ``sqlite:///path`` URL (a bare path is taken as a file too)."""
    parts = urlsplit(url)
    if parts.scheme == "sqlite":
        return Path(unquote(parts.path))
    if parts.scheme == "":
        return Path(url)
    raise ValueError(f"Unsupported store URL {redact(url)}: use sqlite:///<path> or postgresql://...")


def object_storage_url(config: Config) -> str:
    """``diskless.storage.url``, defaulting to ``<metadata.log.dir>/diskless-objects``."""
    return config["diskless.storage.url"] or str((config.metadata_dir / "diskless-objects").resolve())


def check_exists(config: Config, components: tuple[str, ...] = (_METADATA, _COORDINATOR)) -> None:
    """Refuse a store that a broker has not created (or that lacks the tables of ``components``),
    before anything could create tables in it."""
    urls = {metadata_store_url(config): [c for c in components if c != _COORDINATOR]}
    if _COORDINATOR in components:
        urls.setdefault(coordinator_url(config), []).append(_COORDINATOR)
    for url, wanted in urls.items():
        if wanted:
            _check_components(url, tuple(wanted))


def _check_components(url: str, components: tuple[str, ...]) -> None:
    if is_postgres_url(url):
        from shoal.store.postgres.inspect import schema_components

        try:
            found = schema_components(url)
        except Exception as exc:
            raise StoreNotFoundError(f"Cannot read the metadata store at {redact(url)}: {exc}") from None
        where = redact(url)
    else:
        db = _sqlite_file(url)
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
        where = str(db)
    missing = [c for c in components if c not in found]
    if missing:
        raise StoreNotFoundError(f"{where} is not a Shoal metadata store (no {', '.join(missing)} tables)")


# -- opening a seam at a URL: what the broker, the tools and the conformance tests share --------


def open_metadata_store_at(url: str) -> MetadataStore:
    if is_postgres_url(url):
        from shoal.store.postgres.metadata_log import PostgresMetadataStore

        return PostgresMetadataStore(url)
    return SqliteMetadataStore(_sqlite_file(url))


def open_batch_coordinator_at(url: str, clock: Callable[[], int] | None = None) -> BatchCoordinator:
    kwargs = {} if clock is None else {"clock": clock}
    if is_postgres_url(url):
        from shoal.store.postgres.coordinator import PostgresBatchCoordinator

        return PostgresBatchCoordinator(url, **kwargs)
    return SqliteBatchCoordinator(_sqlite_file(url), **kwargs)


def open_group_store_at(url: str) -> GroupStore:
    if is_postgres_url(url):
        from shoal.store.postgres.groups import PostgresGroupStore

        return PostgresGroupStore(url)
    return SqliteGroupStore(_sqlite_file(url))


def open_remote_log_metadata_manager_at(url: str) -> RemoteLogMetadataManager:
    if is_postgres_url(url):
        from shoal.store.postgres.remote_log_metadata import PostgresRemoteLogMetadataManager

        return PostgresRemoteLogMetadataManager(url)
    return SqliteRemoteLogMetadataManager(_sqlite_file(url))


def open_transaction_store_at(
    url: str, *, partitions: int = DEFAULT_TRANSACTION_STATE_PARTITIONS
) -> TransactionStore:
    if is_postgres_url(url):
        from shoal.store.postgres.transactions import PostgresTransactionStore

        return PostgresTransactionStore(url, partitions=partitions)
    return SqliteTransactionStore(_sqlite_file(url), partitions=partitions)


# -- opening the seams of a configuration ---------------------------------------------------------


def open_metadata_store(config: Config, *, must_exist: bool = False) -> MetadataStore:
    if must_exist:
        check_exists(config, (_METADATA,))
    return open_metadata_store_at(metadata_store_url(config))


def open_batch_coordinator(config: Config, *, must_exist: bool = False) -> BatchCoordinator:
    """The Batch Coordinator, wrapped in the fault injector when
    ``diskless.coordinator.fault.control.file`` is set (failure testing)."""
    if must_exist:
        check_exists(config, (_COORDINATOR,))
    coordinator = open_batch_coordinator_at(coordinator_url(config))
    control = config["diskless.coordinator.fault.control.file"]
    if control:
        from shoal.coordinator.faulty import FaultyBatchCoordinator  # failure testing only

        coordinator = FaultyBatchCoordinator(coordinator, control_file=control)
    return coordinator


def open_group_store(config: Config, *, must_exist: bool = False) -> GroupStore:
    if must_exist:
        check_exists(config, (_GROUPS,))
    return open_group_store_at(metadata_store_url(config))


def open_remote_log_metadata_manager(config: Config, *, must_exist: bool = False) -> RemoteLogMetadataManager:
    """Tiered storage's remote log metadata, in the metadata store's database."""
    if must_exist:
        check_exists(config, (_REMOTE_LOG_METADATA,))
    return open_remote_log_metadata_manager_at(metadata_store_url(config))


def transaction_state_partitions(config: Config) -> int:
    """``transaction.state.log.num.partitions`` (a broker config, at least 1, Kafka's default 50)."""
    return int(config[TRANSACTION_STATE_PARTITIONS])


def open_transaction_store(config: Config, *, must_exist: bool = False) -> TransactionStore:
    """The transaction coordinator's state, in the metadata store's database."""
    if must_exist:
        check_exists(config, (_TRANSACTIONS,))
    partitions = transaction_state_partitions(config)
    return open_transaction_store_at(metadata_store_url(config), partitions=partitions)


def open_stores(config: Config, *, must_exist: bool = False) -> Stores:
    """Every seam at once (blocking: the broker calls it from a worker thread)."""
    if must_exist:
        check_exists(config, _ALL_COMPONENTS)
    try:
        return _open_stores(config)
    except (psycopg.OperationalError, CoordinatorUnavailableError) as exc:
        raise StoreUnavailableError(f"Cannot open the stores at {store_location(config)}: {exc}") from exc


def _open_stores(config: Config) -> Stores:
    with contextlib.ExitStack() as opened:  # closes what was opened if a later one fails
        metadata = open_metadata_store(config)
        opened.callback(metadata.close)
        coordinator = open_batch_coordinator(config)
        opened.callback(coordinator.close)
        groups = open_group_store(config)
        opened.callback(groups.close)
        remote_log_metadata = open_remote_log_metadata_manager(config)
        opened.callback(remote_log_metadata.close)
        transactions = open_transaction_store(config)
        opened.pop_all()
    return Stores(
        metadata=metadata,
        coordinator=coordinator,
        groups=groups,
        remote_log_metadata=remote_log_metadata,
        transactions=transactions,
        location=store_location(config),
    )
