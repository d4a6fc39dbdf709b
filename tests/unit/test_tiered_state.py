"""KIP-950's state machine of a topic's tiered storage, through the controller on a real SQLite
metadata store: ENABLED -> DISABLING -> DISABLED -> ENABLED at the next tiered epoch, a second
disablement refused while DISABLING, re-enabling refused until DISABLED."""

from __future__ import annotations

from pathlib import Path

import pytest

from shoal.metadata import tiered_state
from shoal.metadata.records import TieredStateRecord, decode_record, encode_record
from shoal.protocol.errors import ErrorCode, KafkaError
from shoal.store.sqlite.metadata_log import SqliteMetadataStore
from tests.unit.test_metadata import make_controller

TIERED = {"remote.storage.enable": "true"}
RETAIN = {**TIERED, "remote.log.copy.disable": "true"}
DELETE = {"remote.storage.enable": "false", "remote.log.delete.on.disable": "true"}


def test_the_record_round_trips() -> None:
    record = TieredStateRecord(__import__("uuid").uuid4(), tiered_state.DISABLING, 3, delete_remote=True)
    assert decode_record(*encode_record(record)) == record


def test_enable_disable_and_enable_again(tmp_path: Path) -> None:
    store = SqliteMetadataStore(tmp_path / "shoal.db")
    try:
        controller, cache = make_controller(store, **{"remote.log.storage.system.enable": "true"})
        from shoal.metadata.controller import NewTopic

        created, _ = controller.create_topic(NewTopic("t", 1, 1, configs=TIERED))

        def state() -> tuple[int | None, int, bool]:
            topic = cache.catch_up().topic("t")
            assert topic is not None
            return topic.tiered_state, topic.tiered_epoch, topic.tiered_delete

        assert state() == (tiered_state.ENABLED, 0, False)
        controller.alter_topic_configs("t", RETAIN, validate_only=False)
        assert state() == (tiered_state.DISABLING, 0, False)
        with pytest.raises(KafkaError, match="already being disabled") as info:
            controller.alter_topic_configs("t", DELETE, validate_only=False)
        assert info.value.code == ErrorCode.invalid_config
        with pytest.raises(KafkaError, match="is being disabled"):
            controller.alter_topic_configs("t", TIERED, validate_only=False)
        assert controller.finish_tiering_disablement(created.topic_id, 1) is None  # another epoch: no-op
        assert controller.finish_tiering_disablement(created.topic_id, 0) is not None
        assert state() == (tiered_state.DISABLED, 0, False)
        controller.alter_topic_configs("t", TIERED, validate_only=False)  # re-enabled: a new epoch
        assert state() == (tiered_state.ENABLED, 1, False)
        controller.alter_topic_configs("t", DELETE, validate_only=False)
        assert state() == (tiered_state.DISABLING, 1, True)
        controller.finish_tiering_disablement(created.topic_id, 1)
        assert state() == (tiered_state.DISABLED, 1, True)
        controller.alter_topic_configs("t", TIERED, validate_only=False)
        assert state() == (tiered_state.ENABLED, 2, False)
    finally:
        store.close()


def test_a_topic_never_tiered_has_no_state(tmp_path: Path) -> None:
    store = SqliteMetadataStore(tmp_path / "shoal.db")
    try:
        controller, cache = make_controller(store, **{"remote.log.storage.system.enable": "true"})
        from shoal.metadata.controller import NewTopic

        controller.create_topic(NewTopic("plain", 1, 1))
        controller.alter_topic_configs("plain", {"retention.ms": "1000"}, validate_only=False)
        topic = cache.catch_up().topic("plain")
        assert topic is not None and topic.tiered_state is None
    finally:
        store.close()
