"""How tools find the configuration (``store/locate.py``) and what the store factory opens from it."""

from __future__ import annotations

from pathlib import Path

import pytest

from shoal.config import ConfigError
from shoal.store.factory import StoreNotFoundError, object_storage_url, open_batch_coordinator, open_stores
from shoal.store.locate import NoConfigError, embedded_config, resolve_config


def test_config_file_then_data_dir_then_shoal_data(tmp_path: Path) -> None:
    props = tmp_path / "server.properties"
    props.write_text(f"log.dirs={tmp_path / 'kafka-logs'}\ndiskless.storage.url=s3://bucket/wal\n")
    (tmp_path / "shoal-data").mkdir()
    from_file = resolve_config(props, tmp_path / "other", ["node.id=7"], cwd=tmp_path)
    assert (from_file["node.id"], from_file.metadata_dir) == (7, tmp_path / "kafka-logs")
    assert object_storage_url(from_file) == "s3://bucket/wal"

    from_data_dir = resolve_config(None, tmp_path / "other", cwd=tmp_path)
    assert from_data_dir.metadata_dir == tmp_path / "other" / "logs"
    assert object_storage_url(from_data_dir) == str(tmp_path / "other" / "objects")

    default = resolve_config(cwd=tmp_path)
    assert default.metadata_dir == (tmp_path / "shoal-data" / "logs").resolve()
    assert embedded_config(tmp_path / "shoal-data")["log.dirs"] == str(default.metadata_dir)


def test_nothing_found_and_bad_files_are_refused(tmp_path: Path) -> None:
    with pytest.raises(NoConfigError, match="--config server.properties.*--data-dir DIR.*shoal-data"):
        resolve_config(cwd=tmp_path)
    with pytest.raises(ConfigError, match="Cannot read configuration"):
        resolve_config(tmp_path / "missing.properties")
    with pytest.raises(ConfigError, match="node.id"):
        resolve_config(None, tmp_path, ["node.id=minus one"])


def test_tools_never_create_a_store(tmp_path: Path) -> None:
    config = resolve_config(None, tmp_path / "data")
    with pytest.raises(StoreNotFoundError, match="No metadata store at"):
        open_batch_coordinator(config, must_exist=True)
    assert not (tmp_path / "data").exists()
    stores = open_stores(config)  # a broker creates it
    stores.close()
    open_batch_coordinator(config, must_exist=True).close()
