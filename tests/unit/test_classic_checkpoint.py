"""Classic log state files: Kafka's exact text formats, atomic writes, malformed files."""

from __future__ import annotations

import base64
import json
import uuid
from pathlib import Path

import pytest

from shoal.classic import checkpoint as C


def test_offset_checkpoint_is_kafkas_format(tmp_path: Path) -> None:
    path = tmp_path / C.RECOVERY_POINT_CHECKPOINT
    C.write_offset_checkpoint(path, {("orders", 1): 42, ("orders", 0): 7, ("a.b-c", 12): 0})
    assert path.read_text() == "0\n3\na.b-c 12 0\norders 0 7\norders 1 42\n"
    assert C.read_offset_checkpoint(path) == {("orders", 0): 7, ("orders", 1): 42, ("a.b-c", 12): 0}
    assert not (tmp_path / (C.RECOVERY_POINT_CHECKPOINT + ".tmp")).exists()
    assert C.read_offset_checkpoint(tmp_path / "missing") == {}
    C.write_offset_checkpoint(path, {})
    assert path.read_text() == "0\n0\n"


@pytest.mark.parametrize(
    "text",
    ["1\n0\n", "0\n2\nt 0 1\n", "0\n1\nt 0\n", "0\n1\nt x 1\n", "", "zero\n"],
)
def test_malformed_checkpoint_is_an_io_error(tmp_path: Path, text: str) -> None:
    path = tmp_path / "cp"
    path.write_text(text)
    with pytest.raises(C.MalformedFileError):
        C.read_offset_checkpoint(path)
    assert issubclass(C.MalformedFileError, OSError)


def test_leader_epoch_checkpoint(tmp_path: Path) -> None:
    path = tmp_path / C.LEADER_EPOCH_CHECKPOINT
    C.write_leader_epoch_checkpoint(path, [(0, 0), (3, 120)])
    assert path.read_text() == "0\n2\n0 0\n3 120\n"
    assert C.read_leader_epoch_checkpoint(path) == [(0, 0), (3, 120)]


def test_partition_metadata_and_topic_id_form(tmp_path: Path) -> None:
    topic_id = uuid.UUID("9f3c0d4e-5b6a-4c2d-8e1f-0a1b2c3d4e5f")
    text_id = C.kafka_uuid_str(topic_id)
    assert text_id == base64.urlsafe_b64encode(topic_id.bytes).rstrip(b"=").decode()
    assert len(text_id) == 22
    path = tmp_path / C.PARTITION_METADATA
    C.write_partition_metadata(path, text_id)
    assert path.read_text() == f"version: 0\ntopic_id: {text_id}\n"
    assert C.read_partition_metadata(path) == text_id
    path.write_text("version: 1\ntopic_id: x\n")
    with pytest.raises(C.MalformedFileError):
        C.read_partition_metadata(path)


def test_new_kafka_uuid() -> None:
    ids = {C.new_kafka_uuid() for _ in range(200)}
    assert len(ids) == 200
    for text in ids:
        assert len(text) == 22 and not text.startswith("-")
        assert len(base64.urlsafe_b64decode(text + "==")) == 16


def test_meta_properties_as_java_writes_them(tmp_path: Path) -> None:
    path = tmp_path / C.META_PROPERTIES
    props = {"node.id": "1", "directory.id": "Xy-9", "version": "1", "cluster.id": "abc"}
    C.write_meta_properties(path, props)
    lines = path.read_text().splitlines()
    assert lines[0] == "#" and lines[1].startswith("#")
    assert lines[2:] == ["node.id=1", "directory.id=Xy-9", "version=1", "cluster.id=abc"]
    assert C.read_meta_properties(path) == props


def test_clean_shutdown_marker(tmp_path: Path) -> None:
    assert not C.has_clean_shutdown(tmp_path)
    C.write_clean_shutdown(tmp_path, 17)
    assert C.has_clean_shutdown(tmp_path)
    assert json.loads((tmp_path / C.CLEAN_SHUTDOWN_FILE).read_text()) == {
        "version": "0",
        "broker_epoch": "17",
    }
    C.remove_clean_shutdown(tmp_path)
    C.remove_clean_shutdown(tmp_path)
    assert not C.has_clean_shutdown(tmp_path)
