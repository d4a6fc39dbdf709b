"""The remote log metadata contract (tiered storage's RemoteLogMetadataManager, after Kafka's
RemoteLogMetadataCache), run unchanged on every backend.

Each test runs once on an SQLite file and once on a fresh PostgreSQL database (the ``store_url``
fixture), through the factory's ``open_remote_log_metadata_manager_at``: what the broker opens.
"""

from __future__ import annotations

import itertools
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from shoal.store.factory import (
    StoreNotFoundError,
    open_metadata_store,
    open_remote_log_metadata_manager,
    open_remote_log_metadata_manager_at,
    open_stores,
)
from shoal.store.locate import resolve_config
from shoal.tiered.api import (
    RemoteLogMetadataManager,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    RemoteResourceNotFoundError,
    TopicIdPartition,
    valid_transition,
)

STARTED = RemoteLogSegmentState.COPY_SEGMENT_STARTED
FINISHED = RemoteLogSegmentState.COPY_SEGMENT_FINISHED
DELETE_STARTED = RemoteLogSegmentState.DELETE_SEGMENT_STARTED
DELETED = RemoteLogSegmentState.DELETE_SEGMENT_FINISHED

TOPIC_ID = uuid.UUID("11111111-2222-3333-4444-555555555555")
OTHER_TOPIC_ID = uuid.UUID("00000000-0000-0000-0000-000000000009")
TP = TopicIdPartition(TOPIC_ID, 0, "orders")
TP1 = TopicIdPartition(TOPIC_ID, 1, "orders")
OTHER = TopicIdPartition(OTHER_TOPIC_ID, 0, "payments")


def segment(
    start: int,
    end: int,
    epochs: dict[int, int],
    *,
    tp: TopicIdPartition = TP,
    size: int | None = None,
    broker: int = 1,
    **kw: object,
) -> RemoteLogSegmentMetadata:
    fields: dict = {
        "segment_id": RemoteLogSegmentId.generate(tp),
        "start_offset": start,
        "end_offset": end,
        "max_timestamp_ms": 1_700_000_000_000 + end,
        "broker_id": broker,
        "event_timestamp_ms": 1_700_000_000_000,
        "segment_size_in_bytes": (end - start + 1) * 10 if size is None else size,
        "segment_leader_epochs": epochs,
    }
    fields.update(kw)
    return RemoteLogSegmentMetadata(**fields)


def update(
    seg: RemoteLogSegmentMetadata, state: RemoteLogSegmentState, *, broker: int = 1, at: int = 1_700_000_001_000,
    custom: bytes | None = None,
) -> RemoteLogSegmentMetadataUpdate:
    return RemoteLogSegmentMetadataUpdate(seg.segment_id, at, state, broker, custom)


def moved(
    seg: RemoteLogSegmentMetadata, state: RemoteLogSegmentState, *, broker: int = 1, at: int = 1_700_000_001_000,
    custom: bytes | None = None,
) -> RemoteLogSegmentMetadata:
    """What the store holds for ``seg`` after ``update(seg, state, ...)``."""
    return RemoteLogSegmentMetadata(
        seg.segment_id, seg.start_offset, seg.end_offset, seg.max_timestamp_ms, broker, at,
        seg.segment_size_in_bytes, seg.segment_leader_epochs, state,
        seg.custom_metadata if custom is None else custom, seg.tiered_epoch,
    )


def copied(rlmm: RemoteLogMetadataManager, seg: RemoteLogSegmentMetadata, **kw) -> RemoteLogSegmentMetadata:
    """Add ``seg`` and finish its copy; returns the stored metadata."""
    rlmm.add_remote_log_segment_metadata(seg)
    rlmm.update_remote_log_segment_metadata(update(seg, FINISHED, **kw))
    return moved(seg, FINISHED, **kw)


def ids(segments: list[RemoteLogSegmentMetadata]) -> list[uuid.UUID]:
    return [s.segment_id.id for s in segments]


def state_of(rlmm: RemoteLogMetadataManager, seg: RemoteLogSegmentMetadata) -> RemoteLogSegmentState | None:
    found = [s for s in rlmm.list_remote_log_segments(seg.topic_id_partition) if s.segment_id == seg.segment_id]
    return found[0].state if found else None


@pytest.fixture
def rlmm(store_url: str) -> Iterator[RemoteLogMetadataManager]:
    s = open_remote_log_metadata_manager_at(store_url)
    yield s
    s.close()


# --------------------------------------------------------------------------- adding


def test_an_added_segment_round_trips_with_every_field(rlmm) -> None:
    seg = segment(
        100, 199, {3: 100, 5: 150, 4: 120}, custom_metadata=b"\x00custom\xff", tiered_epoch=7, broker=2,
    )
    rlmm.add_remote_log_segment_metadata(seg)
    (stored,) = rlmm.list_remote_log_segments(TP)
    assert stored == seg
    assert stored.segment_id.topic_id_partition.topic == "orders"
    assert list(stored.segment_leader_epochs.items()) == [(3, 100), (4, 120), (5, 150)], "ascending by epoch"
    assert rlmm.partitions_with_segments() == [TP]


def test_a_copy_in_progress_is_listed_but_never_read(rlmm) -> None:
    seg = segment(0, 99, {0: 0})
    rlmm.add_remote_log_segment_metadata(seg)
    assert ids(rlmm.list_remote_log_segments(TP)) == [seg.segment_id.id]
    assert rlmm.remote_log_segment_metadata(TP, 0, 10) is None
    assert rlmm.highest_offset_for_epoch(TP, 0) is None
    assert rlmm.list_remote_log_segments(TP, 0) == []
    assert rlmm.remote_log_size(TP) == 0


@pytest.mark.parametrize("state", [FINISHED, DELETE_STARTED, DELETED])
def test_a_segment_is_added_only_when_its_copy_starts(rlmm, state) -> None:
    with pytest.raises(ValueError, match="COPY_SEGMENT_STARTED"):
        rlmm.add_remote_log_segment_metadata(segment(0, 9, {0: 0}, state=state))
    assert rlmm.list_remote_log_segments(TP) == []
    assert rlmm.partitions_with_segments() == []


def test_a_segment_id_is_added_once(rlmm) -> None:
    seg = segment(0, 99, {0: 0})
    rlmm.add_remote_log_segment_metadata(seg)
    with pytest.raises(ValueError, match="already exists"):
        rlmm.add_remote_log_segment_metadata(segment(500, 599, {9: 500}, segment_id=seg.segment_id))
    rlmm.update_remote_log_segment_metadata(update(seg, FINISHED))
    with pytest.raises(ValueError):
        rlmm.add_remote_log_segment_metadata(seg)
    assert rlmm.list_remote_log_segments(TP) == [moved(seg, FINISHED)]
    assert rlmm.list_remote_log_segments(TP, 9) == []


@pytest.mark.parametrize(
    ("start", "end", "epochs"),
    [
        (0, 9, {}),  # no leader epoch
        (10, 9, {0: 10}),  # ends before it starts
        (-1, 9, {0: 0}),
        (0, 9, {0: 0, 1: 10}),  # an epoch starting after the segment's end
        (5, 9, {0: 4}),  # an epoch starting before the segment
        (0, 9, {0: 5, 1: 3}),  # epochs' offsets not ascending
    ],
)
def test_a_malformed_segment_is_refused(rlmm, start: int, end: int, epochs: dict[int, int]) -> None:
    with pytest.raises(ValueError):
        rlmm.add_remote_log_segment_metadata(segment(start, end, epochs, size=10))
    assert rlmm.list_remote_log_segments(TP) == []


# --------------------------------------------------------------------------- updating


def test_a_copy_finishes_then_its_deletion_starts_and_finishes(rlmm) -> None:
    seg = segment(0, 99, {0: 0}, custom_metadata=b"from-start")
    rlmm.add_remote_log_segment_metadata(seg)

    rlmm.update_remote_log_segment_metadata(update(seg, FINISHED, broker=3, at=2000, custom=b"from-copy"))
    finished = moved(seg, FINISHED, broker=3, at=2000, custom=b"from-copy")
    assert rlmm.list_remote_log_segments(TP) == [finished]
    assert rlmm.remote_log_segment_metadata(TP, 0, 50) == finished

    # An update without custom metadata keeps the segment's (the storage manager needs it to delete).
    rlmm.update_remote_log_segment_metadata(update(seg, DELETE_STARTED, broker=4, at=3000))
    deleting = moved(seg, DELETE_STARTED, broker=4, at=3000, custom=b"from-copy")
    assert rlmm.list_remote_log_segments(TP) == [deleting]
    assert rlmm.remote_log_segment_metadata(TP, 0, 50) is None
    assert rlmm.highest_offset_for_epoch(TP, 0) is None
    assert rlmm.list_remote_log_segments(TP, 0) == []
    assert rlmm.remote_log_size(TP) == 0

    rlmm.update_remote_log_segment_metadata(update(seg, DELETED, broker=4, at=4000))
    assert rlmm.list_remote_log_segments(TP) == []
    assert rlmm.partitions_with_segments() == []
    with pytest.raises(RemoteResourceNotFoundError):  # forgotten
        rlmm.update_remote_log_segment_metadata(update(seg, DELETED))


def test_an_abandoned_copy_is_deleted_without_finishing(rlmm) -> None:
    seg = segment(0, 99, {0: 0})
    rlmm.add_remote_log_segment_metadata(seg)
    rlmm.update_remote_log_segment_metadata(update(seg, DELETE_STARTED))
    assert state_of(rlmm, seg) == DELETE_STARTED
    rlmm.update_remote_log_segment_metadata(update(seg, DELETED))
    assert state_of(rlmm, seg) is None


def test_updating_an_unknown_segment(rlmm) -> None:
    never_added = segment(0, 9, {0: 0})
    for state in (FINISHED, DELETE_STARTED, DELETED):
        with pytest.raises(RemoteResourceNotFoundError):
            rlmm.update_remote_log_segment_metadata(update(never_added, state))
    assert rlmm.list_remote_log_segments(TP) == []


_PATH_TO = {
    STARTED: [],
    FINISHED: [FINISHED],
    DELETE_STARTED: [FINISHED, DELETE_STARTED],
}
_INVALID = [
    (old, new)
    for old, new in itertools.product(RemoteLogSegmentState, RemoteLogSegmentState)
    if old in _PATH_TO and not valid_transition(old, new)
]


@pytest.mark.parametrize(("old", "new"), _INVALID, ids=[f"{o.name}->{n.name}" for o, n in _INVALID])
def test_an_invalid_transition_is_refused_and_changes_nothing(rlmm, old, new) -> None:
    seg = segment(0, 99, {0: 0})
    rlmm.add_remote_log_segment_metadata(seg)
    for state in _PATH_TO[old]:
        rlmm.update_remote_log_segment_metadata(update(seg, state, at=1000))
    before = rlmm.list_remote_log_segments(TP)
    with pytest.raises(ValueError, match=f"{old.name} to {new.name}"):
        rlmm.update_remote_log_segment_metadata(update(seg, new, broker=9, at=9999, custom=b"x"))
    assert rlmm.list_remote_log_segments(TP) == before
    assert state_of(rlmm, seg) == old


def _race(count: int, work) -> list[str]:
    """``work(i)`` in ``count`` threads released together: "ok", or "refused" for a ValueError."""
    barrier = threading.Barrier(count)
    outcomes: list[str] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def run(i: int) -> None:
        try:
            barrier.wait(timeout=30)
            try:
                work(i)
                outcome = "ok"
            except ValueError:
                outcome = "refused"
            with lock:
                outcomes.append(outcome)
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    if errors:
        raise errors[0]
    return sorted(outcomes)


def test_two_brokers_moving_one_segment_at_once_apply_one_transition(store_url: str) -> None:
    """All see COPY_SEGMENT_STARTED; those that come after the first are checked against FINISHED."""
    a = open_remote_log_metadata_manager_at(store_url)
    b = open_remote_log_metadata_manager_at(store_url)
    try:
        for _ in range(5):
            seg = segment(0, 99, {0: 0})
            a.add_remote_log_segment_metadata(seg)
            outcomes = _race(
                4, lambda i, seg=seg: (a if i % 2 else b).update_remote_log_segment_metadata(update(seg, FINISHED))
            )
            assert outcomes == ["ok", "refused", "refused", "refused"]
            assert state_of(a, seg) == FINISHED
            # Adding one id from both brokers at once: one add lands.
            twin = segment(0, 99, {0: 0})
            assert _race(2, lambda i, twin=twin: (a, b)[i].add_remote_log_segment_metadata(twin)) == ["ok", "refused"]
    finally:
        a.close()
        b.close()


# --------------------------------------------------------------------------- lookups


def test_epochs_spanning_segments(rlmm) -> None:
    """Epoch 1 runs from offset 50 in s1 into s2, epoch 2 from 150 in s2 through s3."""
    s1 = copied(rlmm, segment(0, 99, {0: 0, 1: 50}))
    s2 = copied(rlmm, segment(100, 199, {1: 100, 2: 150}))
    s3 = copied(rlmm, segment(200, 299, {2: 200}))
    find = rlmm.remote_log_segment_metadata
    assert find(TP, 0, 0) == s1
    assert find(TP, 0, 49) == s1
    assert find(TP, 0, 50) is None, "offset 50 is epoch 1's"
    assert find(TP, 1, 49) is None, "before epoch 1 starts"
    assert find(TP, 1, 50) == s1
    assert find(TP, 1, 99) == s1
    assert find(TP, 1, 100) == s2
    assert find(TP, 1, 149) == s2
    assert find(TP, 1, 150) is None, "epoch 1 ends at 149"
    assert find(TP, 2, 150) == s2
    assert find(TP, 2, 200) == s3
    assert find(TP, 2, 299) == s3
    assert find(TP, 2, 300) is None, "past the remote log"
    assert find(TP, 3, 250) is None, "no such epoch"
    assert find(TP1, 2, 250) is None and find(OTHER, 2, 250) is None, "other partitions"

    assert rlmm.highest_offset_for_epoch(TP, 0) == 49
    assert rlmm.highest_offset_for_epoch(TP, 1) == 149
    assert rlmm.highest_offset_for_epoch(TP, 2) == 299
    assert rlmm.highest_offset_for_epoch(TP, 3) is None
    assert rlmm.highest_offset_for_epoch(TP1, 2) is None

    assert rlmm.list_remote_log_segments(TP, 0) == [s1]
    assert rlmm.list_remote_log_segments(TP, 1) == [s1, s2]
    assert rlmm.list_remote_log_segments(TP, 2) == [s2, s3]
    assert rlmm.list_remote_log_segments(TP, 3) == []
    assert rlmm.list_remote_log_segments(TP) == [s1, s2, s3]


def test_an_epoch_without_records_in_a_segment(rlmm) -> None:
    """Epoch 1 was elected and replaced before it appended anything: it holds no offset."""
    seg = copied(rlmm, segment(0, 99, {0: 0, 1: 40, 2: 40}))
    assert rlmm.remote_log_segment_metadata(TP, 0, 39) == seg
    assert rlmm.remote_log_segment_metadata(TP, 1, 40) is None
    assert rlmm.remote_log_segment_metadata(TP, 2, 40) == seg
    assert rlmm.highest_offset_for_epoch(TP, 1) == 39  # Kafka's: the next epoch's first offset - 1


def test_overlapping_copies_by_two_leaders(rlmm) -> None:
    """Leader 1 copied [10, 90] of epoch 1; leader 2, lagging less, copied [5, 100] of epoch 1 too."""
    s0 = copied(rlmm, segment(10, 90, {1: 10}, broker=1), broker=1)
    s1 = copied(rlmm, segment(5, 100, {1: 5}, broker=2), broker=2)
    find = rlmm.remote_log_segment_metadata
    assert find(TP, 1, 4) is None
    assert find(TP, 1, 5) == s1
    assert find(TP, 1, 9) == s1
    assert find(TP, 1, 10) == s0, "both hold it: the floor on the epoch's first offset is s0's 10"
    assert find(TP, 1, 90) == s0
    assert find(TP, 1, 91) == s1, "past s0's end: only s1 holds it"
    assert find(TP, 1, 100) == s1
    assert find(TP, 1, 101) is None
    assert rlmm.highest_offset_for_epoch(TP, 1) == 100
    assert rlmm.list_remote_log_segments(TP) == [s1, s0]
    assert rlmm.list_remote_log_segments(TP, 1) == [s1, s0]
    assert rlmm.remote_log_size(TP) == s0.segment_size_in_bytes + s1.segment_size_in_bytes

    # Deleting s1 leaves s0 alone to answer, and the epoch's highest offset falls back to it.
    rlmm.update_remote_log_segment_metadata(update(s1, DELETE_STARTED))
    assert find(TP, 1, 5) is None
    assert find(TP, 1, 50) == s0
    assert find(TP, 1, 95) is None
    assert rlmm.highest_offset_for_epoch(TP, 1) == 90
    assert rlmm.remote_log_size(TP) == s0.segment_size_in_bytes


def test_the_same_offsets_copied_twice_the_last_finished_copy_answers(rlmm) -> None:
    """Two leaders copied the same offsets (the first one's copy was slow): whichever copy finished
    last is the one the lookups return, as Kafka's map keeps the last finished segment."""
    a = segment(0, 99, {0: 0, 1: 60}, broker=1)
    b = segment(0, 99, {0: 0, 1: 60}, broker=2)
    rlmm.add_remote_log_segment_metadata(a)
    rlmm.add_remote_log_segment_metadata(b)
    assert rlmm.list_remote_log_segments(TP) == sorted([a, b], key=lambda s: s.segment_id.id.bytes)
    rlmm.update_remote_log_segment_metadata(update(b, FINISHED, broker=2))
    assert rlmm.remote_log_segment_metadata(TP, 1, 70) == moved(b, FINISHED, broker=2)
    rlmm.update_remote_log_segment_metadata(update(a, FINISHED, broker=1))
    assert rlmm.remote_log_segment_metadata(TP, 0, 10) == moved(a, FINISHED, broker=1)
    assert rlmm.remote_log_segment_metadata(TP, 1, 70) == moved(a, FINISHED, broker=1)
    rlmm.update_remote_log_segment_metadata(update(a, DELETE_STARTED))
    assert rlmm.remote_log_segment_metadata(TP, 1, 70) == moved(b, FINISHED, broker=2)
    rlmm.update_remote_log_segment_metadata(update(a, DELETED))
    assert rlmm.list_remote_log_segments(TP) == [moved(b, FINISHED, broker=2)]


def test_a_new_leaders_copy_ends_an_epoch_earlier(rlmm) -> None:
    """Leader 1 copied [0, 99] with epoch 1 from 50; leader 2's log (epoch 2 from 80, after a
    truncation) copied [0, 120]. Where both copies hold an offset of epoch 1 (the same epoch start),
    the later copy answers; beyond leader 2's end of epoch 1 only leader 1's copy holds epoch 1."""
    old = copied(rlmm, segment(0, 99, {0: 0, 1: 50}, broker=1), broker=1)
    new = copied(rlmm, segment(0, 120, {0: 0, 1: 50, 2: 80}, broker=2), broker=2)
    find = rlmm.remote_log_segment_metadata
    assert find(TP, 1, 60) == new
    assert find(TP, 1, 90) == old
    assert find(TP, 2, 90) == new
    assert find(TP, 2, 121) is None
    assert rlmm.highest_offset_for_epoch(TP, 1) == 99
    assert rlmm.highest_offset_for_epoch(TP, 2) == 120
    assert rlmm.list_remote_log_segments(TP, 2) == [new]


# --------------------------------------------------------------------------- listing and sizes


def test_listing_is_by_start_offset_per_partition_and_skips_finished_deletions(rlmm) -> None:
    late = segment(300, 399, {2: 300})
    early = segment(0, 99, {0: 0})
    middle = segment(100, 299, {1: 100})
    gone = segment(400, 499, {2: 400})
    elsewhere = [segment(0, 99, {0: 0}, tp=TP1), segment(0, 99, {0: 0}, tp=OTHER)]
    for seg in (late, gone, early, middle, *elsewhere):
        rlmm.add_remote_log_segment_metadata(seg)
    rlmm.update_remote_log_segment_metadata(update(middle, FINISHED))
    rlmm.update_remote_log_segment_metadata(update(late, DELETE_STARTED))
    for state in (FINISHED, DELETE_STARTED, DELETED):
        rlmm.update_remote_log_segment_metadata(update(gone, state))
    listed = rlmm.list_remote_log_segments(TP)
    assert ids(listed) == ids([early, middle, late])
    assert [s.state for s in listed] == [STARTED, FINISHED, DELETE_STARTED]
    assert ids(rlmm.list_remote_log_segments(TP1)) == ids(elsewhere[:1])
    assert ids(rlmm.list_remote_log_segments(OTHER)) == ids(elsewhere[1:])
    assert rlmm.list_remote_log_segments(TopicIdPartition(TOPIC_ID, 7)) == []
    # With an epoch: the finished segments holding it only.
    assert ids(rlmm.list_remote_log_segments(TP, 1)) == ids([middle])
    assert rlmm.list_remote_log_segments(TP, 2) == []


def test_the_remote_log_size_counts_finished_copies(rlmm) -> None:
    assert rlmm.remote_log_size(TP) == 0
    a = copied(rlmm, segment(0, 99, {0: 0}, size=1000))
    b = copied(rlmm, segment(100, 199, {0: 100}, size=(1 << 40)))  # sizes beyond 32 bits
    rlmm.add_remote_log_segment_metadata(segment(200, 299, {0: 200}, size=5))  # copying
    copied(rlmm, segment(0, 99, {0: 0}, tp=TP1, size=77))
    assert rlmm.remote_log_size(TP) == 1000 + (1 << 40)
    assert rlmm.remote_log_size(TP1) == 77
    rlmm.update_remote_log_segment_metadata(update(a, DELETE_STARTED))
    assert rlmm.remote_log_size(TP) == 1 << 40
    rlmm.update_remote_log_segment_metadata(update(b, DELETE_STARTED))
    assert rlmm.remote_log_size(TP) == 0
    assert rlmm.remote_log_size(OTHER) == 0


def test_partitions_with_segments(rlmm) -> None:
    assert rlmm.partitions_with_segments() == []
    gone = segment(0, 9, {0: 0}, tp=TP1)
    for seg in (segment(0, 9, {0: 0}, tp=TP), gone, segment(0, 9, {0: 0}, tp=OTHER), segment(10, 19, {0: 10})):
        rlmm.add_remote_log_segment_metadata(seg)
    found = rlmm.partitions_with_segments()
    assert found == sorted([TP, TP1, OTHER])
    assert [tp.topic for tp in found] == [tp.topic for tp in sorted([TP, TP1, OTHER])]
    for state in (DELETE_STARTED, DELETED):
        rlmm.update_remote_log_segment_metadata(update(gone, state))
    assert rlmm.partitions_with_segments() == sorted([TP, OTHER])


def test_partition_delete_states(rlmm) -> None:
    assert rlmm.remote_partition_delete_state(TP) is None
    for state in RemotePartitionDeleteState:
        rlmm.put_remote_partition_delete_metadata(RemotePartitionDeleteMetadata(TP, state, 1000 + state, 1))
        assert rlmm.remote_partition_delete_state(TP) == state
    assert rlmm.remote_partition_delete_state(TP) == RemotePartitionDeleteState.DELETE_PARTITION_FINISHED
    assert rlmm.remote_partition_delete_state(TP1) is None
    assert rlmm.remote_partition_delete_state(OTHER) is None
    # Per partition; the topic name is not part of the key.
    rlmm.put_remote_partition_delete_metadata(
        RemotePartitionDeleteMetadata(TopicIdPartition(TOPIC_ID, 1), RemotePartitionDeleteState.DELETE_PARTITION_MARKED, 5, 2)
    )
    assert rlmm.remote_partition_delete_state(TP1) == RemotePartitionDeleteState.DELETE_PARTITION_MARKED
    assert rlmm.remote_partition_delete_state(TP) == RemotePartitionDeleteState.DELETE_PARTITION_FINISHED
    # Partition deletion states are not segments.
    assert rlmm.partitions_with_segments() == []


# --------------------------------------------------------------------------- durability


def test_everything_survives_reopening(store_url: str) -> None:
    first = open_remote_log_metadata_manager_at(store_url)
    try:
        s1 = copied(first, segment(0, 99, {0: 0, 1: 50}, custom_metadata=b"c1", tiered_epoch=2))
        s2 = copied(first, segment(100, 199, {1: 100}), custom=b"c2")
        copying = segment(200, 299, {1: 200})
        first.add_remote_log_segment_metadata(copying)
        deleting = copied(first, segment(0, 99, {0: 0}, tp=TP1))
        first.update_remote_log_segment_metadata(update(deleting, DELETE_STARTED))
        twin = segment(100, 199, {1: 100}, broker=5)  # a second copy of s2's offsets, finished later
        first.add_remote_log_segment_metadata(twin)
        first.put_remote_partition_delete_metadata(
            RemotePartitionDeleteMetadata(OTHER, RemotePartitionDeleteState.DELETE_PARTITION_STARTED, 1, 1)
        )
        before = {tp: first.list_remote_log_segments(tp) for tp in (TP, TP1)}
    finally:
        first.close()

    again = open_remote_log_metadata_manager_at(store_url)
    try:
        assert {tp: again.list_remote_log_segments(tp) for tp in (TP, TP1)} == before
        assert again.remote_log_segment_metadata(TP, 1, 60) == s1
        assert again.remote_log_segment_metadata(TP, 1, 150) == s2
        assert again.highest_offset_for_epoch(TP, 1) == 199
        assert again.remote_log_size(TP) == s1.segment_size_in_bytes + s2.segment_size_in_bytes
        assert again.remote_partition_delete_state(OTHER) == RemotePartitionDeleteState.DELETE_PARTITION_STARTED
        assert again.partitions_with_segments() == sorted([TP, TP1])
        # The order in which copies finished carries on across the reopening.
        again.update_remote_log_segment_metadata(update(twin, FINISHED, broker=5))
        assert again.remote_log_segment_metadata(TP, 1, 150) == moved(twin, FINISHED, broker=5)
        again.update_remote_log_segment_metadata(update(copying, FINISHED))
        assert again.remote_log_segment_metadata(TP, 1, 250) == moved(copying, FINISHED)
        # And so do the transitions' rules.
        with pytest.raises(ValueError):
            again.update_remote_log_segment_metadata(update(deleting, FINISHED))
        again.update_remote_log_segment_metadata(update(deleting, DELETED))
        assert again.list_remote_log_segments(TP1) == []
    finally:
        again.close()


# --------------------------------------------------------------------------- the factory


def test_the_stores_of_a_configuration_include_the_remote_log_metadata(tmp_path: Path) -> None:
    config = resolve_config(None, tmp_path / "data")
    with pytest.raises(StoreNotFoundError):
        open_remote_log_metadata_manager(config, must_exist=True)
    with pytest.raises(StoreNotFoundError):
        open_stores(config, must_exist=True)
    assert not (tmp_path / "data").exists(), "a tool creates nothing"

    # A store made before tiered storage (no remote_log_ tables) is refused too, and left alone.
    open_metadata_store(config).close()
    with pytest.raises(StoreNotFoundError, match="remote_log_metadata"):
        open_remote_log_metadata_manager(config, must_exist=True)
    with pytest.raises(StoreNotFoundError, match="remote_log_metadata"):
        open_stores(config, must_exist=True)

    stores = open_stores(config)  # a broker creates every table
    try:
        stores.remote_log_metadata.add_remote_log_segment_metadata(seg := segment(0, 9, {0: 0}))
    finally:
        stores.close()
    stores = open_stores(config, must_exist=True)
    try:
        assert ids(stores.remote_log_metadata.list_remote_log_segments(TP)) == [seg.segment_id.id]
    finally:
        stores.close()
    reader = open_remote_log_metadata_manager(config, must_exist=True)
    try:
        assert reader.partitions_with_segments() == [TP]
    finally:
        reader.close()


# --------------------------------------------------------------------------- log start


def test_the_log_start_offset_only_moves_forward_and_is_shared(rlmm, store_url: str) -> None:
    assert rlmm.log_start_offset(TP) is None
    rlmm.put_log_start_offset(TP, 218)
    rlmm.put_log_start_offset(TP, 100)  # a stale DeleteRecords does not move it back
    assert rlmm.log_start_offset(TP) == 218
    assert rlmm.log_start_offset(TP1) is None
    other = open_remote_log_metadata_manager_at(store_url)  # another broker, after a failover
    try:
        assert other.log_start_offset(TP) == 218
        other.put_log_start_offset(TP, 300)
    finally:
        other.close()
    assert rlmm.log_start_offset(TP) == 300
