"""KIP-950's state machine of a topic's tiered storage, decided with its config changes.

ENABLED -> DISABLING -> DISABLED -> ENABLED (a new tiered epoch). The configs are Kafka 3.9's
(``remote.storage.enable``, ``remote.log.copy.disable``, ``remote.log.delete.on.disable``); the
state underneath makes them safe under concurrency, as the KIP designs it:

- tiering a topic (``remote.storage.enable=true``, copying on) starts it ENABLED at epoch 0, or,
  after a finished disablement, ENABLED at the next epoch; from DISABLING it is refused;
- stopping copies (``remote.log.copy.disable=true``: the KIP's *retain* policy) or turning tiering
  off (``remote.storage.enable=false`` with ``remote.log.delete.on.disable=true``: *delete*) moves
  ENABLED to DISABLING; a second disablement while DISABLING is refused;
- the remote log manager of the active controller finishes it (``finished``): at once for
  retain (no broker copies in DISABLING), once the remote data is gone for delete.
"""

from __future__ import annotations

from collections.abc import Mapping

from shoal.metadata.image import TopicImage
from shoal.metadata.records import TieredStateRecord
from shoal.properties import ConfigError

ENABLED, DISABLING, DISABLED = 0, 1, 2
NAMES = {ENABLED: "ENABLED", DISABLING: "DISABLING", DISABLED: "DISABLED"}
#: The read-only DescribeConfigs entries that show a tiered topic's state and epoch; given only
#: when asked for by name (``shoal topics describe`` does), so Kafka's tools never see them.
DESCRIBE_KEYS = ("shoal.tiered.state", "shoal.tiered.epoch")


def copying(configs: Mapping[str, str]) -> bool:
    """Whether these configs ask for segments to be copied (tiering on, copies not disabled)."""
    return configs.get("remote.storage.enable", "false") == "true" and configs.get(
        "remote.log.copy.disable", "false") != "true"


def change(topic: TopicImage | None, topic_id: object, old: Mapping[str, str], new: Mapping[str, str]
           ) -> TieredStateRecord | None:
    """The state record a config change from ``old`` to ``new`` makes (None: none); ConfigError
    when the state machine refuses it. ``topic`` is None for a topic being created."""
    state = topic.tiered_state if topic is not None else None
    epoch = topic.tiered_epoch if topic is not None else 0
    name = topic.name if topic is not None else ""
    if copying(new) and not copying(old) or (copying(new) and state is None):
        if state == DISABLING:
            raise ConfigError(
                f"Tiered storage of topic {name} is being disabled (tiered epoch {epoch}); it can be enabled "
                "again once the disablement has finished."
            )
        if state in (None, ENABLED):
            return None if state == ENABLED else TieredStateRecord(topic_id, ENABLED, 0)  # type: ignore[arg-type]
        return TieredStateRecord(topic_id, ENABLED, epoch + 1)  # type: ignore[arg-type]
    deleting = new.get("remote.storage.enable", "false") != "true" and old.get("remote.storage.enable") == "true"
    retaining = copying(old) and not copying(new) and not deleting
    if not (deleting or retaining) or state is None:
        return None
    if state == DISABLING:
        raise ConfigError(
            f"Tiered storage of topic {name} is already being disabled (tiered epoch {epoch}); wait until it "
            "is DISABLED."
        )
    if state == DISABLED and not deleting:
        return None
    return TieredStateRecord(topic_id, DISABLING, epoch, delete_remote=deleting)  # type: ignore[arg-type]


def finished(topic: TopicImage) -> TieredStateRecord:
    """DISABLING -> DISABLED, keeping the epoch and the policy."""
    return TieredStateRecord(topic.topic_id, DISABLED, topic.tiered_epoch, topic.tiered_delete)
