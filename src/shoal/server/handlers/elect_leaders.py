"""ElectLeaders (43, v0-2): preferred (type 0) and unclean (type 1) leader election of classic and
diskless partitions, answered as Kafka's controller answers it (ReplicationControlManager.electLeaders):

- per listed partition: NONE when elected, ELECTION_NOT_NEEDED when the preferred replica already
  leads (preferred) or the partition has a leader (unclean), PREFERRED_LEADER_NOT_AVAILABLE /
  ELIGIBLE_LEADERS_NOT_AVAILABLE when no replica may take it, UNKNOWN_TOPIC_OR_PARTITION for one
  that does not exist;
- ``topic_partitions`` null asks for every partition: every topic is listed, with only its
  partitions whose election was needed (Kafka leaves ELECTION_NOT_NEEDED out then);
- a diskless partition's replicas are caches of object storage (KIP-1163): its preferred replica
  may lead when alive, in sync or not, and "unclean" elects any alive replica without losing
  anything (``shoal.cluster.election``);
- a failure of the whole request (an unknown election type, the metadata store unreachable) is
  the top-level error code (v1+) and every listed partition's (Kafka's getErrorResponse).

The decision and its append go through ``ctx.control``, which also publishes the new image so
this broker acts on the new leaderships before it answers; other brokers follow the metadata log.
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Callable
from typing import Any

from shoal.protocol.apis import RequestHeader, response_class
from shoal.protocol.build import make, nested
from shoal.protocol.errors import ErrorCode, KafkaError
from shoal.server.context import ServerContext

log = logging.getLogger(__name__)

_ZERO = datetime.timedelta(0)

PREFERRED = 0
UNCLEAN = 1

#: What PartitionControl answers for a partition whose election is not needed.
NOT_NEEDED = "ELECTION_NOT_NEEDED"
#: Kafka's messages (Errors.*.message(), which KRaft's ApiError(Errors) carries).
ELECTION_NOT_NEEDED_MESSAGE = "Leader election not needed for topic partition."

Outcome = tuple[ErrorCode, str | None]


async def handle_elect_leaders(ctx: ServerContext, header: RequestHeader, request: Any) -> Any:
    cls = response_class(header.api_key, header.api_version)
    result_cls, partition_cls = nested(cls, "ReplicaElectionResult"), nested(cls, "PartitionResult")
    election_type = int(getattr(request, "election_type", PREFERRED))  # v0 is preferred only
    listed: list[tuple[str, list[int]]] | None = (
        None if request.topic_partitions is None else [(t.topic, list(t.partitions)) for t in request.topic_partitions]
    )
    try:
        outcomes = await _elect(ctx, election_type, listed)
    except KafkaError as exc:
        log.info("ElectLeaders (type %d) from %s failed: %s (%s)", election_type, header.client_id, exc.message,
                 exc.code.name)
        whole: Outcome = (exc.code, exc.message)
        results = [(topic, [(p, whole) for p in partitions]) for topic, partitions in listed or []]
        return _response(cls, result_cls, partition_cls, exc.code, results)
    if listed is None:
        results = [
            (topic, [(p, outcome) for p, outcome in sorted(by_partition.items()) if outcome[0] != ErrorCode.election_not_needed])
            for topic, by_partition in sorted(outcomes.items())
        ]
    else:
        results = [(topic, [(p, outcomes[topic][p]) for p in partitions]) for topic, partitions in listed]
    elected = [f"{t}-{p}" for t, answers in results for p, (code, _) in answers if code == ErrorCode.none]
    if elected:
        log.info("ElectLeaders (%s) from %s elected new leaders of %s",
                 "unclean" if election_type == UNCLEAN else "preferred", header.client_id, ", ".join(elected))
    return _response(cls, result_cls, partition_cls, ErrorCode.none, results)


async def _elect(
    ctx: ServerContext, election_type: int, listed: list[tuple[str, list[int]]] | None
) -> dict[str, dict[int, Outcome]]:
    """Per topic and partition, the (code, message) of its election; for ``listed`` None, every
    partition's."""
    if election_type not in (PREFERRED, UNCLEAN):
        raise KafkaError(ErrorCode.invalid_request, f"Unknown election type {election_type}")
    control = ctx.partition_control
    elect: Callable[..., dict[tuple[str, int], str | None]] = (
        control.elect_unclean if election_type == UNCLEAN else control.elect_preferred
    )
    failed = (
        ErrorCode.eligible_leaders_not_available if election_type == UNCLEAN else ErrorCode.preferred_leader_not_available
    )
    wanted = None if listed is None else frozenset((name, p) for name, partitions in listed for p in partitions)
    decided = await ctx.control(elect, wanted)
    outcomes: dict[str, dict[int, Outcome]] = {}
    for (name, p), reason in decided.items():
        if reason is None:
            outcome: Outcome = (ErrorCode.none, None)
        elif reason == NOT_NEEDED:
            outcome = (ErrorCode.election_not_needed, ELECTION_NOT_NEEDED_MESSAGE)
        else:
            outcome = (failed, reason)
        outcomes.setdefault(name, {})[p] = outcome
    # The partitions the election did not consider are unknown: an unknown topic and an unknown
    # partition of a known one are told apart on the image ``ctx.control`` caught up with, at
    # least as new as the one the election was decided on.
    image = ctx.image
    for name, partitions in listed or ():
        topic = image.topic(name)
        answers = outcomes.setdefault(name, {})
        for p in partitions:
            if p in answers:
                continue
            if topic is None:
                answers[p] = (ErrorCode.unknown_topic_or_partition, f"No such topic as {name}")
            else:  # also a partition made after the election was decided
                answers[p] = (ErrorCode.unknown_topic_or_partition, f"No such partition as {name}-{p}")
    if listed is None:  # every topic is listed, even one whose elections were all not needed
        for topic in image.topics_by_name.values():
            outcomes.setdefault(topic.name, {})
    return outcomes


def _response(
    cls: type, result_cls: type, partition_cls: type, error_code: ErrorCode,
    results: list[tuple[str, list[tuple[int, Outcome]]]],
) -> Any:
    return make(
        cls,
        throttle_time=_ZERO,
        error_code=error_code,  # v1+; v0 has it only per partition
        replica_election_results=tuple(
            make(
                result_cls,
                topic=topic,
                partition_result=tuple(
                    make(partition_cls, partition_id=p, error_code=code, error_message=message)
                    for p, (code, message) in answers
                ),
            )
            for topic, answers in results
        ),
    )
