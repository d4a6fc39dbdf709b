"""The group protocol on the raw wire, for the error codes real clients handle silently:
MEMBER_ID_REQUIRED, ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, OFFSET_METADATA_TOO_LARGE,
UNKNOWN_TOPIC_OR_PARTITION / UNKNOWN_TOPIC_ID on commit, NON_EMPTY_GROUP, and commits that
survive a SIGKILL. Every response is decoded strictly (a stray byte fails the test)."""

from __future__ import annotations

import datetime
import struct
import uuid
from typing import Any

from shoal.protocol.apis import ApiKey, request_class, response_class
from shoal.protocol.build import make, nested
from shoal.protocol.errors import ErrorCode
from tests.integration.conftest import BrokerFactory
from tests.support.broker import BrokerProcess
from tests.support.kafka_clients import create_diskless_topic
from tests.support.wire import WireClient

MS = datetime.timedelta(milliseconds=1)
FAST_GROUPS = {"group.initial.rebalance.delay.ms": 0}


def call(client: WireClient, api_key: int, version: int, **fields: Any) -> Any:
    """Send one request of any version built from keyword fields; return the decoded response."""
    return client.request(make(request_class(api_key, version), **fields), response_class(api_key, version))


def req(api_key: int, version: int, entity: str, **fields: Any) -> Any:
    """A nested request entity (e.g. a topic of OffsetCommit) of that version."""
    return make(nested(request_class(api_key, version), entity), **fields)


def subscription(*topics: str) -> bytes:
    out = struct.pack(">hi", 0, len(topics))
    for t in topics:
        out += struct.pack(">h", len(t)) + t.encode()
    return out + struct.pack(">i", -1)


def join(client: WireClient, group: str, member_id: str, topic: str, version: int = 5) -> Any:
    return call(
        client,
        ApiKey.JOIN_GROUP,
        version,
        group_id=group,
        session_timeout=10_000 * MS,
        rebalance_timeout=30_000 * MS,
        member_id=member_id,
        group_instance_id=None,
        protocol_type="consumer",
        reason=None,
        protocols=(
            req(
                ApiKey.JOIN_GROUP,
                version,
                "JoinGroupRequestProtocol",
                name="range",
                metadata=subscription(topic),
            ),
        ),
    )


def commit(
    client: WireClient,
    group: str,
    generation: int,
    member_id: str,
    topics: list[tuple[Any, list[tuple[int, int, str | None]]]],
    version: int = 8,
) -> dict[tuple[Any, int], ErrorCode]:
    by_id = version >= 10
    response = call(
        client,
        ApiKey.OFFSET_COMMIT,
        version,
        group_id=group,
        generation_id_or_member_epoch=generation,
        member_id=member_id,
        group_instance_id=None,
        retention_time=-1 * MS,
        topics=tuple(
            req(
                ApiKey.OFFSET_COMMIT,
                version,
                "OffsetCommitRequestTopic",
                name=None if by_id else key,
                topic_id=key if by_id else None,
                partitions=tuple(
                    req(
                        ApiKey.OFFSET_COMMIT,
                        version,
                        "OffsetCommitRequestPartition",
                        partition_index=p,
                        committed_offset=o,
                        committed_leader_epoch=-1,
                        committed_metadata=m,
                    )
                    for p, o, m in parts
                ),
            )
            for key, parts in topics
        ),
    )
    return {
        (t.topic_id if by_id else t.name, p.partition_index): p.error_code
        for t in response.topics
        for p in t.partitions
    }


def fetch(
    client: WireClient, groups: list[str], topic: str, partitions: list[int]
) -> dict[str, list[tuple[int, int, str | None]]]:
    """OffsetFetch v8: several groups in one request."""
    response = call(
        client,
        ApiKey.OFFSET_FETCH,
        8,
        require_stable=False,
        groups=tuple(
            req(
                ApiKey.OFFSET_FETCH,
                8,
                "OffsetFetchRequestGroup",
                group_id=g,
                topics=(
                    req(
                        ApiKey.OFFSET_FETCH,
                        8,
                        "OffsetFetchRequestTopics",
                        name=topic,
                        partition_indexes=tuple(partitions),
                    ),
                ),
            )
            for g in groups
        ),
    )
    out = {}
    for g in response.groups:
        assert g.error_code == ErrorCode.none
        out[g.group_id] = [
            (p.partition_index, p.committed_offset, p.metadata) for t in g.topics for p in t.partitions
        ]
    return out


def test_member_id_generation_and_commit_errors(broker_factory: BrokerFactory, topic_name: str) -> None:
    broker = broker_factory(overrides=FAST_GROUPS)
    create_diskless_topic(broker.bootstrap, topic_name, partitions=2)
    with WireClient(broker.port, client_id="wire-member") as client:
        first = join(client, "g", "", topic_name)
        assert first.error_code == ErrorCode.member_id_required
        assert first.member_id.startswith("wire-member-") and first.generation_id == -1
        joined = join(client, "g", first.member_id, topic_name)
        assert (joined.error_code, joined.generation_id, joined.leader) == (
            ErrorCode.none,
            1,
            first.member_id,
        )
        assert [m.member_id for m in joined.members] == [first.member_id]
        me = first.member_id

        synced = call(
            client,
            ApiKey.SYNC_GROUP,
            3,
            group_id="g",
            generation_id=1,
            member_id=me,
            group_instance_id=None,
            assignments=(
                req(ApiKey.SYNC_GROUP, 3, "SyncGroupRequestAssignment", member_id=me, assignment=b"mine"),
            ),
        )
        assert (synced.error_code, synced.assignment) == (ErrorCode.none, b"mine")

        def beat(generation: int, member_id: str) -> ErrorCode:
            return call(
                client,
                ApiKey.HEARTBEAT,
                3,
                group_id="g",
                generation_id=generation,
                member_id=member_id,
                group_instance_id=None,
            ).error_code

        assert beat(1, me) == ErrorCode.none
        assert beat(0, me) == ErrorCode.illegal_generation
        assert beat(1, "someone-else") == ErrorCode.unknown_member_id

        big = "x" * 4097
        errors = commit(
            client,
            "g",
            1,
            me,
            [(topic_name, [(0, 5, "ok"), (1, 6, big), (7, 1, None)]), ("no-such-topic", [(0, 1, None)])],
        )
        assert errors == {
            (topic_name, 0): ErrorCode.none,
            (topic_name, 1): ErrorCode.offset_metadata_too_large,
            (topic_name, 7): ErrorCode.unknown_topic_or_partition,
            ("no-such-topic", 0): ErrorCode.unknown_topic_or_partition,
        }
        assert commit(client, "g", 0, me, [(topic_name, [(0, 9, None)])]) == {
            (topic_name, 0): ErrorCode.illegal_generation
        }
        assert commit(client, "g", -1, "", [(topic_name, [(0, 9, None)])]) == {
            (topic_name, 0): ErrorCode.unknown_member_id
        }
        assert commit(client, "g", 1, "ghost", [(topic_name, [(0, 9, None)])]) == {
            (topic_name, 0): ErrorCode.unknown_member_id
        }
        assert commit(client, "ghost-group", 4, "m", [(topic_name, [(0, 9, None)])], version=8) == {
            (topic_name, 0): ErrorCode.illegal_generation
        }
        assert commit(client, "ghost-group", 4, "m", [(topic_name, [(0, 9, None)])], version=9) == {
            (topic_name, 0): ErrorCode.group_id_not_found
        }
        unknown_id = uuid.uuid4()
        assert commit(client, "g", 1, me, [(unknown_id, [(0, 1, None)])], version=10) == {
            (unknown_id, 0): ErrorCode.unknown_topic_id
        }

        deleted = call(client, ApiKey.DELETE_GROUPS, 2, groups_names=("g", "never-existed"))
        assert {r.group_id: r.error_code for r in deleted.results} == {
            "g": ErrorCode.non_empty_group,
            "never-existed": ErrorCode.group_id_not_found,
        }
        described = call(
            client, ApiKey.DESCRIBE_GROUPS, 5, groups=("g",), include_authorized_operations=False
        )
        (group,) = described.groups
        assert (group.group_state, group.protocol_type, group.protocol_data) == (
            "Stable",
            "consumer",
            "range",
        )
        (member,) = group.members
        assert (member.member_id, member.client_id, member.client_host) == (me, "wire-member", "/127.0.0.1")
        assert (member.member_metadata, member.member_assignment) == (subscription(topic_name), b"mine")

        left = call(
            client,
            ApiKey.LEAVE_GROUP,
            3,
            group_id="g",
            members=(req(ApiKey.LEAVE_GROUP, 3, "MemberIdentity", member_id=me, group_instance_id=None),),
        )
        assert left.error_code == ErrorCode.none and [m.error_code for m in left.members] == [ErrorCode.none]
        listed = call(client, ApiKey.LIST_GROUPS, 4, states_filter=("Empty",))
        assert [(g.group_id, g.group_state) for g in listed.groups] == [("g", "Empty")]
        # Empty now: an admin (generation -1, no member id) may reset the offsets, then delete the group.
        assert commit(client, "g", -1, "", [(topic_name, [(0, 2, "reset")])]) == {
            (topic_name, 0): ErrorCode.none
        }
        assert fetch(client, ["g"], topic_name, [0, 1]) == {"g": [(0, 2, "reset"), (1, -1, "")]}
        deleted = call(client, ApiKey.DELETE_GROUPS, 2, groups_names=("g",))
        assert [r.error_code for r in deleted.results] == [ErrorCode.none]
        assert fetch(client, ["g"], topic_name, [0]) == {"g": [(0, -1, "")]}
        gone = call(client, ApiKey.DESCRIBE_GROUPS, 6, groups=("g",), include_authorized_operations=False)
        assert (gone.groups[0].error_code, gone.groups[0].group_state) == (
            ErrorCode.group_id_not_found,
            "Dead",
        )


def test_commits_survive_sigkill(broker: BrokerProcess, topic_name: str) -> None:
    create_diskless_topic(broker.bootstrap, topic_name, partitions=3)
    with WireClient(broker.port) as client:
        for group, base in (("a", 100), ("b", 200)):
            errors = commit(
                client, group, -1, "", [(topic_name, [(p, base + p, f"{group}{p}") for p in range(3)])]
            )
            assert set(errors.values()) == {ErrorCode.none}
    broker.restart(clean=False)
    with WireClient(broker.port) as client:
        assert fetch(client, ["a", "b", "c"], topic_name, [0, 2]) == {
            "a": [(0, 100, "a0"), (2, 102, "a2")],
            "b": [(0, 200, "b0"), (2, 202, "b2")],
            "c": [(0, -1, ""), (2, -1, "")],
        }
        v1 = call(
            client,
            ApiKey.OFFSET_FETCH,
            1,
            group_id="a",
            topics=(
                req(
                    ApiKey.OFFSET_FETCH, 1, "OffsetFetchRequestTopic", name=topic_name, partition_indexes=(1,)
                ),
            ),
        )
        assert [(p.committed_offset, p.metadata, p.error_code) for t in v1.topics for p in t.partitions] == [
            (101, "a1", ErrorCode.none)
        ]
        listed = call(client, ApiKey.LIST_GROUPS, 5, states_filter=(), types_filter=("classic",))
        assert sorted((g.group_id, g.group_state, g.group_type) for g in listed.groups) == [
            ("a", "Empty", "classic"),
            ("b", "Empty", "classic"),
        ]


def test_oldest_versions_and_offset_delete(broker_factory: BrokerFactory, topic_name: str) -> None:
    broker = broker_factory(overrides=FAST_GROUPS)
    create_diskless_topic(broker.bootstrap, topic_name, partitions=2)
    with WireClient(broker.port, client_id="old") as client:
        # JoinGroup v0: no rebalance timeout, and no MEMBER_ID_REQUIRED round trip before v4.
        joined = join(client, "old", "", topic_name, version=0)
        assert (joined.error_code, joined.generation_id, joined.protocol_name) == (ErrorCode.none, 1, "range")
        me = joined.member_id
        assert me.startswith("old-")
        synced = call(client, ApiKey.SYNC_GROUP, 0, group_id="old", generation_id=1, member_id=me,
                      assignments=(req(ApiKey.SYNC_GROUP, 0, "SyncGroupRequestAssignment", member_id=me,
                                       assignment=b"a"),))
        assert synced.error_code == ErrorCode.none
        committed = call(
            client, ApiKey.OFFSET_COMMIT, 2, group_id="old", generation_id_or_member_epoch=1, member_id=me,
            retention_time=-1 * MS,
            topics=(req(ApiKey.OFFSET_COMMIT, 2, "OffsetCommitRequestTopic", name=topic_name, partitions=(
                req(ApiKey.OFFSET_COMMIT, 2, "OffsetCommitRequestPartition", partition_index=1,
                    committed_offset=33, committed_metadata=None),
            )),),
        )
        assert [p.error_code for t in committed.topics for p in t.partitions] == [ErrorCode.none]
        every = call(client, ApiKey.OFFSET_FETCH, 2, group_id="old", topics=None)
        assert every.error_code == ErrorCode.none
        assert [(t.name, p.partition_index, p.committed_offset, p.metadata) for t in every.topics for p in t.partitions] == [
            (topic_name, 1, 33, "")
        ]

        def delete_offsets(topic: str, partitions: tuple[int, ...]) -> tuple[ErrorCode, dict[tuple[str, int], ErrorCode]]:
            response = call(
                client, ApiKey.OFFSET_DELETE, 0, group_id="old",
                topics=(req(ApiKey.OFFSET_DELETE, 0, "OffsetDeleteRequestTopic", name=topic, partitions=tuple(
                    req(ApiKey.OFFSET_DELETE, 0, "OffsetDeleteRequestPartition", partition_index=p) for p in partitions
                )),),
            )
            return response.error_code, {(t.name, p.partition_index): p.error_code for t in response.topics
                                         for p in t.partitions}

        assert delete_offsets(topic_name, (1,)) == (
            ErrorCode.none, {(topic_name, 1): ErrorCode.group_subscribed_to_topic}
        )
        assert delete_offsets("missing-topic", (0,)) == (
            ErrorCode.none, {("missing-topic", 0): ErrorCode.unknown_topic_or_partition}
        )
        left = call(client, ApiKey.LEAVE_GROUP, 0, group_id="old", member_id=me)
        assert left.error_code == ErrorCode.none
        assert call(client, ApiKey.LEAVE_GROUP, 0, group_id="old", member_id=me).error_code == ErrorCode.unknown_member_id
        assert delete_offsets(topic_name, (1,)) == (ErrorCode.none, {(topic_name, 1): ErrorCode.none})
        every = call(client, ApiKey.OFFSET_FETCH, 7, group_id="old", topics=None, require_stable=True)
        assert (every.error_code, every.topics) == (ErrorCode.none, ())
