"""The group and transaction coordinators' broker configs (Kafka's ``group.*``, ``offsets.*`` and
``transaction*`` names): a part of ``BROKER_CONFIGS`` kept on its own, as Kafka keeps them in
GroupCoordinatorConfig and TransactionStateManagerConfig."""

from __future__ import annotations

from shoal.config_def import ConfigDef, ConfigType, at_least

__all__ = ["COORDINATION_CONFIGS"]

COORDINATION_CONFIGS: list[ConfigDef] = [
    ConfigDef(
        "offsets.topic.num.partitions",
        ConfigType.INT,
        50,
        "How many coordinator partitions groups are spread over (Kafka's `__consumer_offsets` "
        "partitions): a group's coordinator is the broker that owns its partition.",
        at_least(1),
    ),
    ConfigDef(
        "transaction.state.log.num.partitions",
        ConfigType.INT,
        50,
        "How many coordinator partitions transactional ids are spread over (Kafka's `__transaction_state` "
        "partitions); the transaction state in the metadata store is filed by it. Every broker sharing a "
        "metadata store must use the same value.",
        at_least(1),
    ),
    ConfigDef(
        "transaction.max.timeout.ms",
        ConfigType.INT,
        900_000,
        "The longest `transaction.timeout.ms` a transactional producer may ask for; InitProducerId "
        "with a longer one answers INVALID_TRANSACTION_TIMEOUT.",
        at_least(1),
    ),
    ConfigDef(
        "transactional.id.expiration.ms",
        ConfigType.INT,
        604_800_000,
        "A transactional id whose producer sent no transaction request for this long, and that has no "
        "transaction open, is forgotten by its coordinator (its producer id and epoch with it).",
        at_least(1),
    ),
    ConfigDef(
        "transaction.abort.timed.out.transaction.cleanup.interval.ms",
        ConfigType.INT,
        10_000,
        "How often the transaction coordinator aborts transactions open longer than their timeout.",
        at_least(1),
    ),
    ConfigDef(
        "transaction.remove.expired.transaction.cleanup.interval.ms",
        ConfigType.INT,
        3_600_000,
        "How often the transaction coordinator forgets transactional ids past "
        "`transactional.id.expiration.ms`.",
        at_least(1),
    ),
    ConfigDef(
        "group.initial.rebalance.delay.ms",
        ConfigType.INT,
        3000,
        "The amount of time the group coordinator will wait for more consumers to join a new group "
        "before performing the first rebalance. A longer delay means potentially fewer rebalances, but "
        "increases the time until processing begins.",
        at_least(0),
    ),
    ConfigDef(
        "group.min.session.timeout.ms",
        ConfigType.INT,
        6000,
        "The minimum allowed session timeout for registered consumers. Shorter timeouts result in quicker "
        "failure detection at the cost of more frequent consumer heartbeating, which can overwhelm broker "
        "resources.",
    ),
    ConfigDef(
        "group.max.session.timeout.ms",
        ConfigType.INT,
        1800000,
        "The maximum allowed session timeout for registered consumers. Longer timeouts give consumers more "
        "time to process messages in between heartbeats at the cost of a longer time to detect failures.",
    ),
    ConfigDef(
        "group.max.size",
        ConfigType.INT,
        2147483647,
        "The maximum number of consumers that a single consumer group can accommodate.",
        at_least(1),
    ),
    ConfigDef(
        "offsets.retention.minutes",
        ConfigType.INT,
        10080,
        "For subscribed consumers, committed offset of a specific partition will be expired and discarded "
        "when 1) this retention period has elapsed after the consumer group loses all its consumers (i.e. "
        "becomes empty); 2) this retention period has elapsed since the last time an offset is committed for "
        "the partition and the group is no longer subscribed to the corresponding topic. For standalone "
        "consumers (using manual assignment), offsets will be expired after this retention period has "
        "elapsed since the time of last commit. Note that when a group is deleted via the delete-group "
        "request, its committed offsets will also be deleted without extra retention period; also when a "
        "topic is deleted via the delete-topic request, upon propagated metadata update any group's "
        "committed offsets for that topic will also be deleted without extra retention period.",
        at_least(1),
    ),
    ConfigDef(
        "offsets.retention.check.interval.ms",
        ConfigType.LONG,
        600000,
        "Frequency at which to check for stale offsets.",
        at_least(1),
    ),
    ConfigDef(
        "offset.metadata.max.bytes",
        ConfigType.INT,
        4096,
        "The maximum size for a metadata entry associated with an offset commit.",
    ),
]
