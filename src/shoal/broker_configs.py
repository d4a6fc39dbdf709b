"""The broker configs: Kafka's names, types, defaults, documentation and validation, one table.

``shoal.config`` parses them into a ``Config``; DescribeConfigs and the configuration reference
(``python -m shoal.config``) read the same table.
"""

from __future__ import annotations

from shoal.config_def import (
    ConfigDef,
    ConfigType,
    at_least,
    between,
    invalid_value,
    one_of,
    valid_list,
)
from shoal.coordination_configs import COORDINATION_CONFIGS

__all__ = ["BROKER_CONFIGS", "DYNAMIC_BROKER_CONFIGS", "LONG_MAX", "RACK_AWARE_REPLICA_SELECTOR"]


def _connection_overrides(name: str, value: str) -> None:
    for item in filter(None, (part.strip() for part in value.split(","))):
        address, sep, count = item.rpartition(":")
        if not sep or not address or not count.strip().isdigit():
            raise invalid_value(name, value, f"{item!r} is not of the form address:count")


MiB = 1024 * 1024

LONG_MAX = 2**63 - 1
#: Broker configs that may change at run time (AlterConfigs on a BROKER resource), as in Kafka.
DYNAMIC_BROKER_CONFIGS = frozenset({"leader.replication.throttled.rate", "follower.replication.throttled.rate"})

#: The one ``replica.selector.class`` (KIP-392): consumers read from an in-sync replica in their rack.
RACK_AWARE_REPLICA_SELECTOR = "org.apache.kafka.common.replica.RackAwareReplicaSelector"

BROKER_CONFIGS: dict[str, ConfigDef] = {
    d.name: d
    for d in [
        ConfigDef("node.id", ConfigType.INT, 1, "The node id of this broker (and controller).", at_least(0)),
        ConfigDef(
            "process.roles",
            ConfigType.LIST,
            ["broker", "controller"],
            "The roles this process plays. The controller role is held by one broker at a time "
            "through a lease in the metadata store.",
            valid_list("broker", "controller", empty_ok=False),
        ),
        ConfigDef(
            "listeners",
            ConfigType.LIST,
            ["PLAINTEXT://:9092"],
            "Comma-separated listener URIs (only PLAINTEXT for now). An empty host binds all interfaces.",
        ),
        ConfigDef(
            "advertised.listeners",
            ConfigType.LIST,
            None,
            "Listeners published to clients in Metadata; defaults to `listeners` (an empty host "
            "is advertised as the machine's host name).",
        ),
        ConfigDef(
            "log.dirs",
            ConfigType.LIST,
            None,
            "The directories where log data is kept; defaults to `log.dir`.",
        ),
        ConfigDef(
            "log.dir",
            ConfigType.STRING,
            "/tmp/kafka-logs",
            "The log directory used when `log.dirs` is unset.",
        ),
        ConfigDef(
            "metadata.log.dir",
            ConfigType.STRING,
            None,
            "Where the node keeps its cluster metadata (the SQLite metadata store: metadata log "
            "and Batch Coordinator tables). Defaults to the first of `log.dirs`.",
        ),
        ConfigDef(
            "metadata.store.url",
            ConfigType.STRING,
            None,
            "The shared metadata store: the metadata log with the controller lease, broker "
            "registrations, group state and offsets, producer-id blocks, and (unless "
            "`diskless.coordinator.url` says otherwise) the Batch Coordinator. `sqlite:///<path>` "
            "(several brokers on one host may share the file) or "
            "`postgresql://user:password@host:port/database` (brokers on several hosts). Defaults to "
            "`sqlite:///<metadata.log.dir>/shoal.db`.",
        ),
        ConfigDef(
            "diskless.coordinator.url",
            ConfigType.STRING,
            None,
            "Where the Batch Coordinator (KIP-1164) keeps diskless topics' batches, when not in the "
            "metadata store: a `sqlite:///` or `postgresql://` URL as `metadata.store.url`. Defaults "
            "to `metadata.store.url`.",
        ),
        ConfigDef("broker.rack", ConfigType.STRING, None, "The rack (availability zone) of this broker."),
        ConfigDef(
            "broker.heartbeat.interval.ms",
            ConfigType.INT,
            2000,
            "How often a broker heartbeats into the metadata store's broker registry. The "
            "controller-role brokers run their rounds (take or renew the lease, check the registry) "
            "at this interval too, or every 500 ms if that is shorter.",
            at_least(1),
        ),
        ConfigDef(
            "broker.session.timeout.ms",
            ConfigType.INT,
            9000,
            "A broker that has not heartbeated for this long is fenced: clients are no longer sent "
            "to it. Also the controller lease's length, so a standby controller takes over within it.",
            at_least(1),
        ),
        *COORDINATION_CONFIGS,
        ConfigDef(
            "num.partitions", ConfigType.INT, 1, "Default number of partitions of a new topic.", at_least(1)
        ),
        ConfigDef(
            "default.replication.factor",
            ConfigType.SHORT,
            1,
            "Default replication factor of a new topic.",
            at_least(1),
        ),
        ConfigDef(
            "min.insync.replicas",
            ConfigType.INT,
            1,
            "With acks=all, how many in-sync replicas a classic partition needs: with fewer in the ISR, "
            "produce answers NOT_ENOUGH_REPLICAS (default of the topic config).",
            at_least(1),
        ),
        ConfigDef(
            "unclean.leader.election.enable",
            ConfigType.BOOLEAN,
            False,
            "Whether a replica outside the ISR may become leader when no ISR replica can, losing the "
            "records it lacks (default of the topic config).",
        ),
        ConfigDef(
            "replica.lag.time.max.ms",
            ConfigType.LONG,
            30000,
            "A follower that has not caught up with the leader's log end for this long leaves the ISR.",
            at_least(1),
        ),
        ConfigDef(
            "replica.fetch.max.bytes",
            ConfigType.INT,
            1048576,
            "Bytes a follower asks for per partition in each fetch (at least one batch comes).",
            at_least(0),
        ),
        ConfigDef(
            "replica.fetch.response.max.bytes",
            ConfigType.INT,
            10485760,
            "Bytes a follower asks for in all per fetch (at least one batch comes).",
            at_least(0),
        ),
        ConfigDef(
            "replica.fetch.wait.max.ms",
            ConfigType.INT,
            500,
            "How long a follower's fetch waits at the leader for new records. Keep it below "
            "`replica.lag.time.max.ms`.",
            at_least(0),
        ),
        ConfigDef(
            "replica.fetch.min.bytes", ConfigType.INT, 1, "Bytes a follower's fetch waits for.", at_least(1)
        ),
        ConfigDef(
            "replica.fetch.backoff.ms",
            ConfigType.INT,
            1000,
            "How long a follower waits before fetching again after an error from its leader.",
            at_least(0),
        ),
        ConfigDef(
            "replica.socket.timeout.ms",
            ConfigType.INT,
            30000,
            "How long a follower waits for its leader's answer before it reconnects.",
            at_least(1),
        ),
        ConfigDef(
            "controlled.shutdown.enable",
            ConfigType.BOOLEAN,
            True,
            "On SIGTERM, move the broker's classic leaderships to other in-sync replicas (and take it "
            "out of ISRs) before it stops, so producers with acks=all do not wait for its session to time out.",
        ),
        ConfigDef(
            "auto.leader.rebalance.enable",
            ConfigType.BOOLEAN,
            True,
            "The active controller moves classic leaderships back to their preferred replicas (the first "
            "of each replica list) when those are in the ISR, every `leader.imbalance.check.interval.seconds`.",
        ),
        ConfigDef(
            "leader.imbalance.per.broker.percentage",
            ConfigType.INT,
            10,
            "The automatic rebalance moves a broker's preferred leaderships back only when more than this "
            "percentage of the partitions it should lead are led elsewhere.",
            between(0, 100),
        ),
        ConfigDef(
            "leader.imbalance.check.interval.seconds",
            ConfigType.LONG,
            300,
            "How often the active controller checks for classic partitions not led by their preferred replica.",
            at_least(1),
        ),
        ConfigDef(
            "replica.selector.class",
            ConfigType.STRING,
            None,
            "KIP-392 follower fetching: with `org.apache.kafka.common.replica.RackAwareReplicaSelector`, "
            "a consumer that sends its `client.rack` is told (PreferredReadReplica) to read a classic "
            "partition from an in-sync replica in its rack, and followers serve consumers' fetches. "
            "Unset: consumers read from leaders.",
            one_of(RACK_AWARE_REPLICA_SELECTOR),
        ),
        ConfigDef(
            "leader.replication.throttled.rate",
            ConfigType.LONG,
            LONG_MAX,
            "Bytes/s a leader sends to followers of the replicas its topics list in "
            "`leader.replication.throttled.replicas` (a dynamic broker config: set it per broker or as the "
            "cluster default with kafka-configs / IncrementalAlterConfigs, as kafka-reassign-partitions "
            "--throttle does).",
            at_least(0),
        ),
        ConfigDef(
            "follower.replication.throttled.rate",
            ConfigType.LONG,
            LONG_MAX,
            "Bytes/s a follower fetches for the replicas its topics list in "
            "`follower.replication.throttled.replicas` (a dynamic broker config).",
            at_least(0),
        ),
        ConfigDef(
            "auto.create.topics.enable",
            ConfigType.BOOLEAN,
            True,
            "Create a topic (of the default, classic kind) when a client asks for metadata of an unknown topic.",
        ),
        ConfigDef("delete.topic.enable", ConfigType.BOOLEAN, True, "Whether DeleteTopics may delete topics."),
        ConfigDef(
            "message.max.bytes",
            ConfigType.INT,
            1048588,
            "The largest record batch size allowed (default for the topic config `max.message.bytes`).",
            at_least(0),
        ),
        ConfigDef(
            "socket.request.max.bytes",
            ConfigType.INT,
            104857600,
            "The largest request frame the broker reads; larger frames close the connection.",
            at_least(1),
        ),
        ConfigDef(
            "queued.max.requests",
            ConfigType.INT,
            500,
            "Requests read from all connections but not yet answered; at the limit, connections stop "
            "reading until answers go out.",
            at_least(1),
        ),
        ConfigDef(
            "queued.max.request.bytes",
            ConfigType.LONG,
            -1,
            "Bytes of requests read but not yet answered, across connections (-1: no byte bound).",
        ),
        ConfigDef(
            "max.connections",
            ConfigType.INT,
            2147483647,
            "Connections the listener keeps open at once; newer ones are closed when accepted.",
            at_least(0),
        ),
        ConfigDef(
            "max.connections.per.ip",
            ConfigType.INT,
            2147483647,
            "Connections one client address may keep open at once; newer ones are closed when accepted.",
            at_least(0),
        ),
        ConfigDef(
            "max.connections.per.ip.overrides",
            ConfigType.STRING,
            "",
            "Per-address exceptions to `max.connections.per.ip`, as `address:count` pairs "
            "separated by commas (e.g. `127.0.0.1:200,10.0.0.7:0`).",
            _connection_overrides,
        ),
        ConfigDef(
            "connections.max.idle.ms",
            ConfigType.LONG,
            600000,
            "Close a connection after this long without a request or a response.",
        ),
        ConfigDef(
            "log.retention.ms",
            ConfigType.LONG,
            604800000,
            "Default of the topic config `retention.ms`.",
        ),
        ConfigDef(
            "log.retention.bytes", ConfigType.LONG, -1, "Default of the topic config `retention.bytes`."
        ),
        ConfigDef(
            "log.segment.bytes",
            ConfigType.INT,
            1073741824,
            "Default of the topic config `segment.bytes`.",
            at_least(1024 * 1024),
        ),
        ConfigDef(
            "log.index.size.max.bytes",
            ConfigType.INT,
            10485760,
            "Default of the topic config `segment.index.bytes`.",
            at_least(4),
        ),
        ConfigDef(
            "log.index.interval.bytes",
            ConfigType.INT,
            4096,
            "Default of the topic config `index.interval.bytes`.",
            at_least(0),
        ),
        ConfigDef(
            "log.flush.interval.messages",
            ConfigType.LONG,
            9223372036854775807,
            "Default of the topic config `flush.messages`.",
            at_least(1),
        ),
        ConfigDef(
            "log.segment.delete.delay.ms",
            ConfigType.LONG,
            60000,
            "Default of the topic config `file.delete.delay.ms`.",
            at_least(0),
        ),
        ConfigDef(
            "log.cleaner.enable",
            ConfigType.BOOLEAN,
            True,
            "Run the log cleaner, which compacts topics with `cleanup.policy=compact` (classic logs on "
            "this broker, and the diskless partitions this broker cleans).",
        ),
        ConfigDef(
            "log.cleaner.threads",
            ConfigType.INT,
            1,
            "Cleaner threads; each cleans one log at a time and gets an equal share of the dedupe buffer.",
            at_least(0),
        ),
        ConfigDef(
            "log.cleaner.dedupe.buffer.size",
            ConfigType.LONG,
            128 * MiB,
            "Memory for the key -> offset maps of all cleaner threads, counted as Kafka counts it (24 bytes "
            "a key at a 0.9 load factor): how many distinct keys one cleaning pass can take.",
        ),
        ConfigDef(
            "log.cleaner.io.max.bytes.per.second",
            ConfigType.DOUBLE,
            1.7976931348623157e308,
            "The most bytes per second the cleaner threads read and write together; they sleep to stay below it.",
        ),
        ConfigDef(
            "log.cleaner.backoff.ms",
            ConfigType.LONG,
            15000,
            "How long a cleaner thread sleeps when no log needs cleaning.",
            at_least(0),
        ),
        ConfigDef(
            "log.cleaner.min.cleanable.ratio",
            ConfigType.DOUBLE,
            0.5,
            "Default of the topic config `min.cleanable.dirty.ratio`.",
            between(0, 1),
        ),
        ConfigDef(
            "log.cleaner.delete.retention.ms",
            ConfigType.LONG,
            86400000,
            "Default of the topic config `delete.retention.ms`.",
            at_least(0),
        ),
        ConfigDef(
            "log.cleaner.min.compaction.lag.ms",
            ConfigType.LONG,
            0,
            "Default of the topic config `min.compaction.lag.ms`.",
            at_least(0),
        ),
        ConfigDef(
            "log.cleaner.max.compaction.lag.ms",
            ConfigType.LONG,
            2**63 - 1,
            "Default of the topic config `max.compaction.lag.ms`.",
            at_least(1),
        ),
        ConfigDef(
            "log.message.timestamp.type",
            ConfigType.STRING,
            "CreateTime",
            "Default of the topic config `message.timestamp.type`.",
            one_of("CreateTime", "LogAppendTime"),
        ),
        ConfigDef(
            "log.message.timestamp.before.max.ms",
            ConfigType.LONG,
            9223372036854775807,
            "Default of the topic config `message.timestamp.before.max.ms`.",
            at_least(0),
        ),
        ConfigDef(
            "log.message.timestamp.after.max.ms",
            ConfigType.LONG,
            3600000,
            "Default of the topic config `message.timestamp.after.max.ms` (Kafka 4.0's default: one hour).",
            at_least(0),
        ),
        ConfigDef(
            "compression.type",
            ConfigType.STRING,
            "producer",
            "Default of the topic config `compression.type`. Only `producer` for now: the broker "
            "does not recompress batches yet.",
            one_of("producer"),
        ),
        ConfigDef(
            "remote.log.storage.system.enable",
            ConfigType.BOOLEAN,
            False,
            "Tiered storage (KIP-405) on this broker: topics may set `remote.storage.enable=true`. Remote "
            "segments go to the object storage of `diskless.storage.url`, under `tiered/`, and their metadata "
            "to the metadata store.",
        ),
        ConfigDef(
            "remote.log.manager.task.interval.ms",
            ConfigType.LONG,
            30000,
            "How often the remote log manager copies rolled segments of the partitions this broker leads and "
            "expires remote segments (Kafka's default).",
            at_least(1),
        ),
        ConfigDef(
            "remote.fetch.max.wait.ms",
            ConfigType.INT,
            500,
            "How long a Fetch waits for a read from remote storage (Kafka's default). A read that takes longer "
            "answers the partition with no records, and the consumer fetches again; the read finishes in the "
            "background, so the segment's index is cached by then.",
            at_least(1),
        ),
        ConfigDef(
            "diskless.system.enable",
            ConfigType.BOOLEAN,
            False,
            "Enables diskless topics on this broker (KIP-1163). `shoal up` turns it on.",
        ),
        ConfigDef(
            "diskless.storage.url",
            ConfigType.STRING,
            None,
            "Where diskless WAL segment objects are stored: a directory path or `file:///dir` "
            "(local directory), `s3://bucket/prefix?endpoint=...&region=...` (any S3-compatible "
            "store), or `memory://` (tests). Defaults to the directory `diskless-objects` beside "
            "the metadata store. Takes the place of KIP-1163's `diskless.storage.class.name`.",
        ),
        ConfigDef(
            "diskless.append.commit.interval.ms",
            ConfigType.INT,
            250,
            "How long the broker buffers produced batches before closing a WAL segment object "
            "for upload and commit.",
            at_least(1),
        ),
        ConfigDef(
            "diskless.append.buffer.max.bytes",
            ConfigType.INT,
            4 * MiB,
            "The size at which the active WAL segment is closed for upload before the commit interval ends. "
            "While no segment is uploading or committing, a segment of an eighth of it (512 KiB at the default) "
            "closes at once (a group close, docs/architecture.md).",
            at_least(1024),
        ),
        ConfigDef(
            "log.retention.check.interval.ms",
            ConfigType.LONG,
            300000,
            "How often retention (`retention.ms`, `retention.bytes`) is enforced on diskless partitions.",
            at_least(1),
        ),
        ConfigDef(
            "diskless.object.cleaner.interval.ms",
            ConfigType.LONG,
            30000,
            "How often objects marked for deletion (all their batches deleted) are deleted from object storage.",
            at_least(1),
        ),
        ConfigDef(
            "diskless.object.delete.grace.ms",
            ConfigType.LONG,
            60000,
            "How long an object marked for deletion stays in storage, so fetches already reading it finish.",
            at_least(0),
        ),
        ConfigDef(
            "diskless.object.orphan.min.age.ms",
            ConfigType.LONG,
            3600000,
            "Age after which an uploaded object the Batch Coordinator does not know (its commit never happened) "
            "is deleted; must far exceed the longest upload-to-commit time. Also how often storage is listed for them.",
            at_least(60000),
        ),
        ConfigDef(
            "diskless.coordinator.fault.control.file",
            ConfigType.STRING,
            None,
            "For failure testing only: a JSON file that makes Batch Coordinator calls fail or slow down "
            "(see `shoal.coordinator.faulty`). Object storage faults use a `faulty+` storage URL.",
        ),
        ConfigDef(
            "metrics.http.port",
            ConfigType.INT,
            -1,
            "Port of the Prometheus `/metrics` endpoint (-1: off, 0: any free port).",
            at_least(-1),
        ),
        ConfigDef(
            "metrics.http.host",
            ConfigType.STRING,
            "127.0.0.1",
            "Address the `/metrics` endpoint binds.",
        ),
        ConfigDef(
            "diskless.fetch.cache.max.bytes",
            ConfigType.LONG,
            64 * MiB,
            "Memory for the cache of WAL segment byte ranges read by Fetch (recent uploads are put "
            "there too, so tailing consumers rarely GET). Consumers of the partitions this broker holds "
            "a replica of read its cache logs instead; this cache stages fresh uploads for the cache "
            "filler and serves partitions held elsewhere. Most of a busy broker's memory: 64 MiB keeps "
            "one broker under 256 MB at 50 MB/s.",
            at_least(0),
        ),
        ConfigDef(
            "diskless.replica.cache.start.bytes",
            ConfigType.LONG,
            100 * MiB,
            "Where a diskless replica that has no cache yet starts its local cache log: about this many "
            "bytes before the partition's log end, or at its log start when the partition holds less "
            "(KIP-1163's policy 3). 0 starts at the log end.",
            at_least(0),
        ),
        ConfigDef(
            "diskless.replica.fetch.interval.ms",
            ConfigType.INT,
            100,
            "How often a diskless replica asks the Batch Coordinator for batches other brokers committed "
            "(batches this broker commits reach its caches at once). The replica also reports its cache's "
            "position to the partition leader at least every `replica.fetch.wait.max.ms`.",
            at_least(1),
        ),
    ]
}
