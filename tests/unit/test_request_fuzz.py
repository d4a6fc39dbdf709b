"""Fuzzing decode_request over every advertised API at every advertised version.

(a) Structure-aware: hypothesis draws requests from kio's schemas (values by kafka_type,
small arrays, nullable fields sometimes null, tagged fields sometimes set), encodes them
with encode_request and checks that decode_request gives back an equal request.

(b) Mutation: bench/fuzz_requests.py mutates valid encoded requests (bit flips, inserts,
deletes, truncation, 0xff/0x7f/0x80 runs, boundary integers, splices) and checks that
decode_request returns a sane request or raises KafkaError / UnsupportedVersion, never
anything else. It runs in a child process: an abort inside kio fails the test (with the
frame that caused it) instead of killing pytest.

Seeded and short: hypothesis is derandomized, the mutation run has a fixed seed and count.
"""

from __future__ import annotations

import datetime
import json
import subprocess
import sys
from dataclasses import MISSING, fields
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveField,
    classify_field,
    get_field_tag,
    get_schema_field_type,
    is_optional,
)

from shoal.protocol.apis import SUPPORTED_APIS, decode_request, encode_request, request_class
from shoal.protocol.guard import MAX_STRING_LENGTH, _nullable_top

ROOT = Path(__file__).resolve().parents[2]
FUZZER = ROOT / "bench" / "fuzz_requests.py"

ALL_VERSIONS = [
    (spec.key, version) for spec in SUPPORTED_APIS.values() for version in range(spec.min_version, spec.max_version + 1)
]
ALL_IDS = [f"{SUPPORTED_APIS[key].name}-v{version}" for key, version in ALL_VERSIONS]


# --------------------------------------------------------------------------- (a) structure-aware


def _int(bits: int, signed: bool = True) -> st.SearchStrategy[int]:
    if signed:
        return st.integers(-(1 << (bits - 1)), (1 << (bits - 1)) - 1)
    return st.integers(0, (1 << bits) - 1)


_PRIMITIVES: dict[str, st.SearchStrategy[Any]] = {
    "bool": st.booleans(),
    "int8": _int(8),
    "int16": _int(16),
    "int32": _int(32),
    "int64": _int(64),
    "uint8": _int(8, signed=False),
    "uint16": _int(16, signed=False),
    "uint32": _int(32, signed=False),
    "uint64": _int(64, signed=False),
    "float64": st.floats(allow_nan=False),
    # Kafka (and the guard) refuse strings over 0x7fff bytes; short ones find the same bugs.
    "string": st.text(max_size=12),
    "bytes": st.binary(max_size=40),
    "records": st.binary(max_size=40),
    # kio reads the all-zero UUID as None: the non-zero ones round-trip.
    "uuid": st.uuids().filter(lambda u: u.int != 0),
    "timedelta_i32": _int(32).map(lambda ms: datetime.timedelta(milliseconds=ms)),
    "timedelta_i64": st.integers(-(10**15), 10**15).map(lambda ms: datetime.timedelta(milliseconds=ms)),
    "datetime_i64": st.integers(0, 4_000_000_000).map(
        lambda s: datetime.datetime.fromtimestamp(s, datetime.UTC)
    ),
    "error_code": st.sampled_from(list(ErrorCode)),
}


@cache
def entity_strategy(cls: type) -> st.SearchStrategy[Any]:
    """Instances of a kio entity class, each field drawn by its schema type."""
    values: dict[str, st.SearchStrategy[Any]] = {}
    for field in fields(cls):
        kind = classify_field(field)
        if isinstance(kind, PrimitiveField):
            value = _PRIMITIVES[get_schema_field_type(field)]
            if is_optional(field):
                value = st.none() | value
        elif isinstance(kind, EntityField):
            value = entity_strategy(kind.type_)
            if is_optional(field):
                value = st.none() | value
        else:
            item = (
                entity_strategy(kind.type_)
                if isinstance(kind, EntityTupleField)
                else _PRIMITIVES[get_schema_field_type(field)]
            )
            value = st.lists(item, max_size=3).map(tuple)
            if _nullable_top(field):
                value = st.none() | value
        if get_field_tag(field) is not None and field.default is not MISSING:
            value = st.just(field.default) | value  # tagged: often absent
        values[field.name] = value
    return st.builds(cls, **values)


@pytest.mark.parametrize(("api_key", "version"), ALL_VERSIONS, ids=ALL_IDS)
def test_generated_requests_round_trip(api_key: int, version: int) -> None:
    cls = request_class(api_key, version)

    @settings(
        max_examples=25,
        derandomize=True,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(
        request=entity_strategy(cls),
        correlation_id=_int(32),
        client_id=st.none() | st.text(max_size=8),
    )
    def round_trip(request: Any, correlation_id: int, client_id: str | None) -> None:
        frame = encode_request(correlation_id, client_id, request)[4:]
        header, decoded = decode_request(frame)
        assert decoded == request
        # The broker hands decode_request read-only views of its frames (Produce records stay views).
        _, from_view = decode_request(memoryview(frame).toreadonly())
        assert from_view == request
        assert (header.api_key, header.api_version) == (api_key, version)
        assert (header.correlation_id, header.client_id) == (correlation_id, client_id)

    round_trip()


def test_string_limit_is_kafkas() -> None:
    assert MAX_STRING_LENGTH == 0x7FFF


# --------------------------------------------------------------------------- (b) mutation, in a child process


def run_fuzzer(*args: str, timeout: float = 300) -> tuple[int, dict[str, Any], str]:
    result = subprocess.run(
        [sys.executable, str(FUZZER), *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT
    )
    return result.returncode, json.loads(result.stdout), result.stderr


def test_mutated_requests_decode_or_raise_kafka_error() -> None:
    # Count-bounded and seeded, so the same inputs every run (the seconds cap only guards a
    # very slow machine: about 40k inputs a second here, so this takes a few seconds).
    code, report, stderr = run_fuzzer("--seed", "20240611", "--max-requests", "120000", "--seconds", "40")
    assert report["failures"] == [], json.dumps(report["failures"][:5], indent=2)
    assert code == 0 and report["ok"], stderr[-2000:]
    assert report["child_exit"] == 0
    assert report["targets"] == len(ALL_VERSIONS)
    assert report["requests_tried"] >= 20_000
    assert set(report["per_api"]) == {spec.name for spec in SUPPORTED_APIS.values()}
    totals = {outcome: sum(api[outcome] for api in report["per_api"].values()) for outcome in ("decoded", "refused")}
    assert totals["decoded"] > 1000 and totals["refused"] > 1000  # both paths exercised


def test_a_crashing_child_is_reported_with_its_input() -> None:
    code, report, _ = run_fuzzer("--seed", "5", "--max-requests", "2000", "--seconds", "30", "--crash-after", "500")
    assert code == 1 and not report["ok"]
    assert report["child_exit"] != 0
    crash = report["failures"][-1]
    assert crash["kind"] == "crash"
    assert len(bytes.fromhex(crash["frame_hex"])) >= 8  # the input being decoded when it died
